//! Coalesced views over several blocks, with composite hazard sets, and per-sector
//! factorizations. Arrives with the coalesce issue; this crate fixes its place in the
//! dependency order.

#![deny(missing_docs)]
