//! The plan cache: a repeated contraction (a DMRG sweep applies the same contraction to
//! operands of the same structures again and again) skips planning.
//!
//! Owns: [`PlanCache`]. Invariants: a cached plan is handed out only for operands whose
//! structures are the ones it was planned for (keyed by fingerprint, confirmed equal), with
//! the same spec, conjugation, element type and sector type; anything else is planned
//! afresh. The cache holds at most its capacity of plans ([`DEFAULT_PLAN_CAPACITY`] unless
//! set), evicting the least recently used one (a [`tessera_core::LruCache`]), so a program
//! that contracts ever new structures keeps a bounded number of plans.

use crate::error::Error;
use crate::plan::Plan;
use crate::small::SMALL_OPERAND_MIN_ELEMS;
use crate::spec::Spec;
use std::any::{Any, TypeId};
use std::sync::{Arc, OnceLock};
use tessera_backends::Scalar;
use tessera_blocks::{AbelianSector, BlockStructure};
use tessera_core::{CacheStats, LruCache};

/// How many plans a [`PlanCache`] holds unless told otherwise: a DMRG sweep over a hundred
/// sites uses a few contractions per site and bond dimension, a few hundred plans, each of
/// them (for such tensors) kilobytes to a few megabytes of tables.
pub const DEFAULT_PLAN_CAPACITY: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    types: (TypeId, TypeId),
    fingerprints: [u64; 2],
    /// The output's fingerprint when only some output blocks are computed.
    output: Option<u64>,
    conj: [bool; 2],
    spec: Spec,
}

/// A cache of contraction plans keyed by the operands' structure fingerprints and the spec,
/// holding at most [`capacity`](PlanCache::capacity) plans and evicting the least recently
/// used one when full.
///
/// [`Contraction`](crate::Contraction) uses [`PlanCache::global`] unless given its own.
///
/// ```
/// use tessera_contract::PlanCache;
///
/// let cache = PlanCache::with_capacity(64);
/// cache.set_capacity(16); // evicts least recently used plans beyond 16
/// let stats = cache.stats();
/// assert_eq!((stats.capacity, stats.len, stats.hits), (16, 0, 0));
/// PlanCache::global().set_capacity(4096); // the process-wide cache is bounded too
/// ```
pub struct PlanCache {
    plans: LruCache<Key, Arc<dyn Any + Send + Sync>>,
    /// The least elements of the large operand for which its plans choose
    /// [`Strategy::SmallOperand`](crate::Strategy::SmallOperand) where it applies.
    small_operand_min: usize,
}

impl Default for PlanCache {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl PlanCache {
    /// An empty cache of [`DEFAULT_PLAN_CAPACITY`] plans.
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_PLAN_CAPACITY)
    }

    /// An empty cache that holds at most `capacity` plans (0: none, every contraction is
    /// planned afresh).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            plans: LruCache::new(capacity),
            small_operand_min: SMALL_OPERAND_MIN_ELEMS,
        }
    }

    /// This cache with plans that choose [`Strategy::SmallOperand`](crate::Strategy::SmallOperand)
    /// where it applies and the large operand has at least `elems` elements (by default
    /// [`SMALL_OPERAND_MIN_ELEMS`]): 0 takes it wherever it applies, `usize::MAX` never (every
    /// contraction then runs as GEMMs on matrix forms, as a device runs it: to compare the
    /// two, or to time the GEMMs).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_contract::{Contraction, PlanCache, Strategy};
    ///
    /// let v = Leg::new(Direction::In, [(U1(0), 40), (U1(1), 30)])?;
    /// let p = Leg::new(Direction::In, [(U1(0), 1), (U1(1), 1)])?;
    /// let x = BlockStructure::new(vec![v.clone(), p.clone()], vec![v.dual()], U1(0))?;
    /// let gate = BlockStructure::new(vec![p.dual()], vec![p.clone()], U1(0))?;
    /// let (x, g) = (AsyncArray::<f64, U1>::random(x, 1), AsyncArray::<f64, U1>::random(gate, 2));
    /// // The gate on the middle leg: X would be permuted for a GEMM.
    /// let spec = Contraction::new("ysr,st->ytr")?;
    /// let always = spec.clone().with_cache(Arc::new(PlanCache::new().with_small_operand_min(0)));
    /// assert_eq!(always.plan(&x, &g)?.strategy(), Strategy::SmallOperand);
    /// let never = PlanCache::new().with_small_operand_min(usize::MAX);
    /// let gemms = spec.clone().with_cache(Arc::new(never));
    /// assert_eq!(gemms.plan(&x, &g)?.strategy(), Strategy::SectorGemms);
    /// let (one, two) = (always.apply(&x, &g)?.to_dense()?, gemms.apply(&x, &g)?.to_dense()?);
    /// assert!(one.iter().zip(&two).all(|(a, b)| (a - b).abs() < 1e-12));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_small_operand_min(mut self, elems: usize) -> Self {
        self.small_operand_min = elems;
        self
    }

    /// The process-wide cache (of [`DEFAULT_PLAN_CAPACITY`] plans until
    /// [`set_capacity`](PlanCache::set_capacity) says otherwise).
    pub fn global() -> &'static Arc<PlanCache> {
        static GLOBAL: OnceLock<Arc<PlanCache>> = OnceLock::new();
        GLOBAL.get_or_init(|| Arc::new(PlanCache::new()))
    }

    /// The plan for these operands: cached, or made and cached. `output`: a structure with
    /// some of the output's blocks, the only ones to compute (`None`: all).
    pub(crate) fn plan<T: Scalar, S: AbelianSector>(
        &self,
        spec: &Spec,
        conj: [bool; 2],
        a: &Arc<BlockStructure<S>>,
        b: &Arc<BlockStructure<S>>,
        output: Option<&Arc<BlockStructure<S>>>,
    ) -> Result<Arc<Plan<S>>, Error> {
        let key = Key {
            types: (TypeId::of::<T>(), TypeId::of::<S>()),
            fingerprints: [a.fingerprint(), b.fingerprint()],
            output: output.map(|c| c.fingerprint()),
            conj,
            spec: spec.clone(),
        };
        // A fingerprint match is confirmed against the structures themselves; a plan for
        // other structures with the same fingerprints is a miss, and replaced below.
        let fits = |found: &Arc<dyn Any + Send + Sync>| {
            found.downcast_ref::<Plan<S>>().is_some_and(|plan| {
                plan.fits(a, b)
                    && output
                        .is_none_or(|c| Arc::ptr_eq(c, plan.output()) || **c == **plan.output())
            })
        };
        if let Some(found) = self.plans.get_if(&key, fits) {
            return Ok(found
                .downcast::<Plan<S>>()
                .expect("the key holds the sector type"));
        }
        // Planned outside the lock: planning a large contraction must not stall others.
        let mask = output.map(|c| c.present_mask());
        let plan = Arc::new(Plan::build::<T>(
            spec,
            conj,
            a,
            b,
            self.small_operand_min,
            mask,
        )?);
        self.plans.insert(key, Arc::clone(&plan) as _);
        Ok(plan)
    }

    /// How many lookups found a plan.
    pub fn hits(&self) -> u64 {
        self.plans.stats().hits
    }

    /// How many lookups had to plan.
    pub fn misses(&self) -> u64 {
        self.plans.stats().misses
    }

    /// How many plans were evicted to make room.
    pub fn evictions(&self) -> u64 {
        self.plans.stats().evictions
    }

    /// Hits, misses, evictions, the number of plans held and the capacity, read together.
    pub fn stats(&self) -> CacheStats {
        self.plans.stats()
    }

    /// The most plans the cache holds.
    pub fn capacity(&self) -> usize {
        self.plans.capacity()
    }

    /// Sets the capacity, evicting the least recently used plans until the cache fits
    /// (plans in use stay alive with their users).
    pub fn set_capacity(&self, capacity: usize) {
        self.plans.set_capacity(capacity);
    }

    /// How many plans are cached.
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    /// Whether no plan is cached.
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// Drops every cached plan (the counters are kept).
    pub fn clear(&self) {
        self.plans.clear();
    }
}
