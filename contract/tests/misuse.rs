//! Misuse of contractions gives typed errors and writes nothing; the plan cache is observed
//! to hit.

use std::sync::Arc;
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera_contract::{Contraction, Error, PlanCache, Strategy};

fn leg() -> Leg<U1> {
    Leg::new(Direction::In, [(U1(-1), 2), (U1(0), 3), (U1(1), 1)]).unwrap()
}

/// A U1 matrix `v -> v` (legs `v`, `v*`).
fn matrix(seed: u64) -> AsyncArray<f64, U1> {
    let s = BlockStructure::new(vec![leg()], vec![leg().dual()], U1(0)).unwrap();
    AsyncArray::random(s, seed)
}

#[test]
fn wrong_arity_and_legs_are_refused() {
    let (a, b) = (matrix(1), matrix(2));
    let err = Contraction::new("abc,cd->abd")
        .unwrap()
        .apply(&a, &b)
        .unwrap_err();
    assert_eq!(
        err,
        Error::Arity {
            operand: "A",
            expected: 3,
            given: 2
        }
    );
    // Contracting A's codomain leg (v) with B's codomain leg (v): same direction.
    let err = Contraction::new("ba,bc->ac")
        .unwrap()
        .apply(&a, &b)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Legs {
                label: 'b',
                a_leg: 0,
                b_leg: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("direction"), "{err}");
    // Conjugating B duals its legs, which makes that pair contractible.
    assert!(
        Contraction::new("ba,bc->ac")
            .unwrap()
            .conj_b()
            .apply(&a, &b)
            .is_ok()
    );
    // Different sectors on the contracted pair.
    let other = Leg::new(Direction::In, [(U1(0), 3), (U1(2), 1)]).unwrap();
    let s = BlockStructure::new(vec![other.clone()], vec![other.dual()], U1(0)).unwrap();
    let c = AsyncArray::<f64, U1>::random(s, 3);
    let err = Contraction::new("ab,bc->ac")
        .unwrap()
        .apply(&a, &c)
        .unwrap_err();
    assert!(matches!(err, Error::Legs { label: 'b', .. }), "{err:?}");
}

#[test]
fn a_wrong_or_aliased_output_is_refused_and_nothing_is_written() {
    let (a, b) = (matrix(1), matrix(2));
    let before_a = a.to_dense().unwrap();
    let mm = Contraction::new("ab,bc->ac").unwrap();
    // An output with the legs swapped in direction.
    let s = BlockStructure::new(vec![leg().dual()], vec![leg()], U1(0)).unwrap();
    let wrong = AsyncArray::<f64, U1>::random(s, 4);
    let before = wrong.to_dense().unwrap();
    let err = mm.apply_into_scaled(1.0, &a, &b, 1.0, &wrong).unwrap_err();
    assert!(matches!(err, Error::Output { .. }), "{err:?}");
    assert!(
        err.to_string().contains("expected an output with legs"),
        "{err}"
    );
    assert_eq!(wrong.to_dense().unwrap(), before);
    // The output is operand A itself.
    let err = mm.apply_into_scaled(1.0, &a, &b, 1.0, &a).unwrap_err();
    assert_eq!(err, Error::Aliased { operand: "A" });
    assert_eq!(a.to_dense().unwrap(), before_a);
}

#[test]
fn a_repeated_contraction_hits_the_plan_cache() {
    let cache = Arc::new(PlanCache::new());
    let mm = Contraction::new("ab,bc->ac")
        .unwrap()
        .with_cache(Arc::clone(&cache));
    let (a, b) = (matrix(1), matrix(2));
    let first = mm.plan(&a, &b).unwrap();
    assert_eq!((cache.hits(), cache.misses()), (0, 1));
    // New arrays with equal (not shared) structures: the same plan.
    let (a2, b2) = (matrix(5), matrix(6));
    let again = mm.plan(&a2, &b2).unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!((cache.hits(), cache.misses()), (1, 1));
    mm.apply(&a2, &b2).unwrap();
    assert_eq!((cache.hits(), cache.misses()), (2, 1));
    // Another spec, or conjugation, is another plan.
    let t = mm.clone().conj_a().conj_b();
    let other = t.plan(&a, &b).unwrap();
    assert!(!Arc::ptr_eq(&first, &other));
    assert_eq!((cache.hits(), cache.misses(), cache.len()), (2, 2, 2));
    // The plan is inspectable.
    assert_eq!(first.strategy(), Strategy::SectorGemms);
    assert_eq!(first.sector_gemms(), 3);
    assert_eq!(first.gemms(), 3); // one per U1 sector
    assert_eq!(first.flops(), 2 * (8 + 27 + 1));
    assert_eq!(first.temporary_bytes(), 0);
    let shown = first.to_string();
    for part in [
        "3 GEMMs",
        "72 flop",
        "temporaries 0 bytes",
        "used as stored",
    ] {
        assert!(shown.contains(part), "{part:?} in {shown}");
    }
}
