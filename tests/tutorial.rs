//! The tutorial (`examples/tutorial.rs`) run as a test: its steps succeed through the prelude
//! and `tessera::Error` alone, and its figures hold (the truncation's reported weight is the
//! measured error, QR and the ordered network reproduce what they factor or contract).

#[path = "../examples/tutorial.rs"]
mod tutorial;

#[test]
fn the_tutorial_runs_and_its_figures_hold() {
    let r = tutorial::run().expect("the tutorial runs");
    // The block (bond 0, site +1 | bond +1): 4 x 1 x 3.
    assert_eq!(r.block_shape, vec![4, 1, 3]);
    assert_eq!(r.bond_dim, 6);
    assert!(!r.charge_zero_values.is_empty());
    assert!(r.charge_zero_values.windows(2).all(|w| w[0] >= w[1]));
    // theta was normalised: the discarded weight is a fraction of 1, and the measured
    // error of U S V† is exactly that weight.
    assert!(
        r.discarded_weight > 0.0 && r.discarded_weight < 1.0,
        "{r:?}"
    );
    assert!(
        (r.reconstruction_error - r.discarded_weight).abs() <= 1e-12,
        "{r:?}"
    );
    assert!(r.qr_error <= 1e-12, "{r:?}");
    assert!(r.network_error <= 1e-12, "{r:?}");
}
