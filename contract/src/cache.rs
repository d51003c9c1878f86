//! The plan cache: a repeated contraction (a DMRG sweep applies the same contraction to
//! operands of the same structures again and again) skips planning.
//!
//! Owns: [`PlanCache`]. Invariant: a cached plan is handed out only for operands whose
//! structures are the ones it was planned for (keyed by fingerprint, confirmed equal), with the same
//! spec, conjugation, element type and sector type; anything else is planned afresh.

use crate::error::Error;
use crate::plan::Plan;
use crate::spec::Spec;
use parking_lot::Mutex;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tessera_backends::Scalar;
use tessera_blocks::{AbelianSector, BlockStructure};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    types: (TypeId, TypeId),
    fingerprints: [u64; 2],
    conj: [bool; 2],
    spec: Spec,
}

/// A cache of contraction plans keyed by the operands' structure fingerprints and the spec.
///
/// [`Contraction`](crate::Contraction) uses [`PlanCache::global`] unless given its own.
#[derive(Default)]
pub struct PlanCache {
    plans: Mutex<HashMap<Key, Arc<dyn Any + Send + Sync>>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCache")
            .field("plans", &self.len())
            .field("hits", &self.hits())
            .field("misses", &self.misses())
            .finish()
    }
}

impl PlanCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide cache.
    pub fn global() -> &'static Arc<PlanCache> {
        static GLOBAL: OnceLock<Arc<PlanCache>> = OnceLock::new();
        GLOBAL.get_or_init(|| Arc::new(PlanCache::new()))
    }

    /// The plan for these operands: cached, or made and cached.
    pub(crate) fn plan<T: Scalar, S: AbelianSector>(
        &self,
        spec: &Spec,
        conj: [bool; 2],
        a: &Arc<BlockStructure<S>>,
        b: &Arc<BlockStructure<S>>,
    ) -> Result<Arc<Plan<S>>, Error> {
        let key = Key {
            types: (TypeId::of::<T>(), TypeId::of::<S>()),
            fingerprints: [a.fingerprint(), b.fingerprint()],
            conj,
            spec: spec.clone(),
        };
        if let Some(found) = self.plans.lock().get(&key) {
            let plan = Arc::clone(found)
                .downcast::<Plan<S>>()
                .expect("the key holds the sector type");
            if plan.fits(a, b) {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(plan);
            }
        }
        // Planned outside the lock: planning a large contraction must not stall others.
        self.misses.fetch_add(1, Ordering::Relaxed);
        let plan = Arc::new(Plan::build::<T>(spec, conj, a, b)?);
        self.plans.lock().insert(key, Arc::clone(&plan) as _);
        Ok(plan)
    }

    /// How many lookups found a plan.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// How many lookups had to plan.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// How many plans are cached.
    pub fn len(&self) -> usize {
        self.plans.lock().len()
    }

    /// Whether no plan is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every cached plan.
    pub fn clear(&self) {
        self.plans.lock().clear();
    }
}
