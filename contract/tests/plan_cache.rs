//! The plan cache is bounded: ever new contractions leave at most its capacity of plans, the
//! least recently used plan goes first, and hits, misses and evictions are counted exactly.

use std::sync::Arc;
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera_contract::{Contraction, DEFAULT_PLAN_CAPACITY, PlanCache};
use tessera_core::CacheStats;

/// A small U1 matrix `v -> v` whose leg carries sectors 0 and `k` (distinct `k`: distinct
/// structures, so distinct plans).
fn matrix(k: i32) -> AsyncArray<f64, U1> {
    let v = Leg::new(Direction::In, [(U1(0), 2), (U1(k), 1)]).unwrap();
    AsyncArray::zeros(BlockStructure::new(vec![v.clone()], vec![v.dual()], U1(0)).unwrap())
}

#[test]
fn three_thousand_distinct_contractions_keep_at_most_capacity_plans() {
    const CAPACITY: usize = 100;
    const DISTINCT: usize = 3000;
    let cache = Arc::new(PlanCache::with_capacity(CAPACITY));
    let mm = Contraction::new("ab,bc->ac")
        .unwrap()
        .with_cache(Arc::clone(&cache));
    let arrays: Vec<_> = (1..=DISTINCT as i32).map(matrix).collect();
    for (k, a) in arrays.iter().enumerate() {
        mm.plan(a, a).unwrap();
        assert!(cache.len() <= CAPACITY, "after {k} contractions");
    }
    assert_eq!(
        cache.stats(),
        CacheStats {
            hits: 0,
            misses: DISTINCT as u64,
            evictions: (DISTINCT - CAPACITY) as u64,
            len: CAPACITY,
            capacity: CAPACITY,
        }
    );
    // The newest CAPACITY contractions are held: planning them again hits.
    let kept = &arrays[DISTINCT - CAPACITY..];
    let before: Vec<_> = kept.iter().map(|a| mm.plan(a, a).unwrap()).collect();
    assert_eq!(
        (cache.hits(), cache.misses()),
        (CAPACITY as u64, DISTINCT as u64)
    );
    // An evicted one is planned afresh, and evicts the least recently used plan: the first
    // of the kept ones (the loop above used them in order).
    mm.plan(&arrays[0], &arrays[0]).unwrap();
    assert_eq!(cache.misses(), DISTINCT as u64 + 1);
    assert_eq!(cache.evictions(), (DISTINCT - CAPACITY) as u64 + 1);
    let second = mm.plan(&kept[1], &kept[1]).unwrap();
    assert!(Arc::ptr_eq(&second, &before[1]), "kept[1] is still cached");
    let first = mm.plan(&kept[0], &kept[0]).unwrap();
    assert!(!Arc::ptr_eq(&first, &before[0]), "kept[0] was evicted");
    assert_eq!(cache.misses(), DISTINCT as u64 + 2);
    // A smaller capacity evicts at once.
    cache.set_capacity(10);
    assert_eq!((cache.len(), cache.capacity()), (10, 10));
    assert_eq!(cache.evictions(), (DISTINCT - CAPACITY) as u64 + 2 + 90);
    // Capacity 0 caches nothing: the same contraction twice plans twice.
    cache.set_capacity(0);
    let (p, q) = (
        mm.plan(&kept[5], &kept[5]).unwrap(),
        mm.plan(&kept[5], &kept[5]).unwrap(),
    );
    assert!(!Arc::ptr_eq(&p, &q));
    assert!(cache.is_empty());
}

#[test]
fn the_global_cache_is_bounded() {
    let global = PlanCache::global();
    assert_eq!(global.capacity(), DEFAULT_PLAN_CAPACITY);
    // Only this test uses the global cache in this process (its own test binary).
    global.set_capacity(256);
    let mm = Contraction::new("ab,bc->ac").unwrap();
    for k in 1..=3000 {
        let a = matrix(k);
        mm.plan(&a, &a).unwrap();
    }
    let s = global.stats();
    assert_eq!((s.len, s.capacity), (256, 256));
    assert!(s.evictions >= 3000 - 256, "{s:?}");
}
