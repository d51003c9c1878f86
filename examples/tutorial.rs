//! A first program with Tessera, using the prelude only: build a U(1)-symmetric tensor,
//! look its blocks up by charge, contract two of them, factorize the result with a
//! truncated SVD, and check what the truncation cost.
//!
//! ```sh
//! cargo run --example tutorial
//! ```
//!
//! `tests/tutorial.rs` runs the same steps (this file's [`run`]) and checks the figures.

use tessera::prelude::*;

/// What the tutorial computed (each a host value).
#[derive(Debug)]
pub(crate) struct Report {
    /// The shape of the block with charges (0, +1 | +1) of the site tensor.
    pub(crate) block_shape: Vec<usize>,
    /// The bond dimension the SVD kept.
    pub(crate) bond_dim: usize,
    /// The kept singular values of bond charge 0.
    pub(crate) charge_zero_values: Vec<f64>,
    /// The squared norm the truncation discarded, as the SVD reports it.
    pub(crate) discarded_weight: f64,
    /// `||theta - U S V†||²`, measured by a contraction.
    pub(crate) reconstruction_error: f64,
    /// `||theta - Q R||` (the QR of the site tensor, untruncated).
    pub(crate) qr_error: f64,
    /// `||theta - theta'||`, with `theta'` contracted by a network straight into the legs'
    /// order `(a, p | q, c)`.
    pub(crate) network_error: f64,
}

/// The tutorial's steps; every error of every layer converts into [`tessera::Error`].
pub(crate) fn run() -> Result<Report, Error> {
    // 1. Legs: (charge, dimension) segments and a direction. A spin-1/2 site carries
    //    Sz = -1/2 and +1/2 (charges -1 and +1, in units of 1/2); a bond carries several
    //    charges with a few states each.
    let site = Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)])?;
    let bond = Leg::new(Direction::In, [(U1(-1), 3), (U1(0), 4), (U1(1), 3)])?;

    // 2. A structure: codomain legs (bond, site), domain leg (bond), flux 0. Only the blocks
    //    whose charges are conserved exist, each stored once in one allocation.
    let s = BlockStructure::new([bond.clone(), site.clone()], [bond.dual()], U1(0))?;
    let a = AsyncArray::<f64, U1>::random(s, 1);
    let b = AsyncArray::<f64, U1>::random(a.structure().clone(), 2);

    // 3. Blocks are looked up by their charges, one per leg (a wrong charge is an error that
    //    lists the charges that exist).
    let id = a.structure().block_of(&[U1(0), U1(1), U1(1)])?;
    let block_shape = a.structure().block(id).map(|b| b.shape().to_vec());
    let block_shape = block_shape.unwrap_or_default();

    // 4. Contract the two site tensors over their shared bond into theta(a, p | q, c). The
    //    contraction is planned from the structures (and cached), and runs as tasks.
    let theta = Contraction::new("apb,bqc->ap|qc")?.apply(&a, &b)?;
    // Whole-tensor operations need no selection; `norm` is a value the tasks compute.
    let norm = theta.norm().get()?;
    theta.scale(1.0 / norm);

    // 5. Factorize with a truncated SVD: keep the 6 largest singular values over all
    //    charge sectors together (theta has rank 10 at most: the bond it was contracted
    //    over).
    let f = svd(&theta, &Truncation::max_dim(6))?;
    let bond_dim = f.s.len();
    let charge_zero_values = f.s.values_of(&U1(0)).unwrap_or_default().to_vec();

    // 6. What did the truncation cost? Rebuild U S V† and measure.
    let us = f.s.scale_columns(&f.u)?;
    let approx = Contraction::new("apk,kqc->ap|qc")?.apply(&us, &f.vt)?;
    approx.axpy(-1.0, &theta)?;
    let reconstruction_error = approx.norm().get()?.powi(2);

    // 7. QR of a site tensor: an isometry Q and a triangular R per sector, Q R = A.
    let qr_f = qr(&a)?;
    let qr_product = Contraction::new("apk,kb->ap|b")?.apply(&qr_f.q, &qr_f.r)?;
    qr_product.axpy(-1.0, &a)?;
    let qr_error = qr_product.norm().get()?;

    // 8. A network contracts several tensors in a cheap order; here it is told the order
    //    of the result's legs (and their split) instead of permuting afterwards.
    let net = Network::new(vec![
        ("apb", a.structure().clone()),
        ("bqc", b.structure().clone()),
    ])?;
    let order = net.optimal()?;
    let theta2 = net.contract_to(&[&a, &b], &order, "ap|qc")?;
    theta2.scale(1.0 / norm);
    theta2.axpy(-1.0, &theta)?;
    let network_error = theta2.norm().get()?;

    Ok(Report {
        block_shape,
        bond_dim,
        charge_zero_values,
        discarded_weight: f.discarded_weight,
        reconstruction_error,
        qr_error,
        network_error,
    })
}

#[allow(dead_code)] // `tests/tutorial.rs` compiles this file for `run` only.
fn main() -> Result<(), Error> {
    let r = run()?;
    println!("block (0, +1 | +1): shape {:?}", r.block_shape);
    println!(
        "SVD kept {} values; charge 0: {:?}",
        r.bond_dim, r.charge_zero_values
    );
    println!(
        "discarded weight {:.3e}, ||theta - U S V†||² = {:.3e}",
        r.discarded_weight, r.reconstruction_error
    );
    println!(
        "||A - Q R|| = {:.1e}, network vs contraction: {:.1e}",
        r.qr_error, r.network_error
    );
    Ok(())
}
