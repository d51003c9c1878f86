//! Networks: contracting several tensors in an order chosen from block-sparse flop counts.
//!
//! Owns: [`Network`] (labelled structures) and [`Order`] (a sequence of pairwise steps and
//! its cost). Invariants: costs are computed from structures alone, counting only the block
//! pairs that exist (`2 m n k` per pair, as [`Plan::flops`](crate::Plan::flops)); an
//! intermediate's structure is the full structure of its free legs and fused flux, which
//! does not depend on the order that made it, so orders can be compared by their costs.

use crate::error::Error;
use crate::execute::Contraction;
use hashbrown::HashMap;
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;
use tessera_backends::Field;
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Leg};

/// The most tensors [`Network::optimal`] searches exhaustively (by dynamic programming over
/// subsets); beyond it use [`Network::greedy`].
pub const MAX_EXHAUSTIVE: usize = 12;

/// A contraction order: step `i` contracts nodes `steps[i]`, where nodes `0..n` are the
/// network's tensors and node `n + i` is the result of step `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// The pairwise steps.
    pub steps: Vec<(usize, usize)>,
    /// Their total block-sparse flops.
    pub flops: u64,
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.steps.len() + 1;
        for (i, (x, y)) in self.steps.iter().enumerate() {
            write!(
                f,
                "{}#{} = #{x} * #{y}",
                if i == 0 { "" } else { "; " },
                n + i
            )?;
        }
        write!(f, " ({} flop)", self.flops)
    }
}

/// An array with its leg labels.
type Labelled<T, S> = (AsyncArray<T, S>, Vec<char>);

/// One tensor of a network, or an intermediate: its leg labels and structure.
#[derive(Clone, Debug)]
struct Node<S: AbelianSector> {
    labels: Vec<char>,
    structure: Arc<BlockStructure<S>>,
}

/// Several tensors with labelled legs: a label on two tensors is contracted, a label on one
/// is a leg of the result.
///
/// ```
/// use std::sync::Arc;
/// use tessera_blocks::{BlockStructure, Direction, Leg, U1};
/// use tessera_contract::Network;
///
/// let v = Leg::new(Direction::In, [(U1(0), 4), (U1(1), 4)])?;
/// let m = Arc::new(BlockStructure::new(vec![v.clone()], vec![v.dual()], U1(0))?);
/// let net = Network::new(vec![("ab", m.clone()), ("bc", m.clone()), ("cd", m)])?;
/// let order = net.optimal()?;
/// assert_eq!(order.steps.len(), 2);
/// assert_eq!(order.flops, 2 * 2 * (2 * 4 * 4 * 4)); // two products of two 4x4 blocks
/// assert!(net.greedy()?.flops >= order.flops);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Network<S: AbelianSector> {
    tensors: Vec<Node<S>>,
}

fn labels_of(s: &str) -> Vec<char> {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

impl<S: AbelianSector> Network<S> {
    /// A network of `(labels, structure)` pairs.
    ///
    /// # Errors
    ///
    /// [`Error::Network`] for no tensors, a label count that is not the leg count, or a
    /// label on more than two tensors.
    pub fn new(tensors: Vec<(&str, Arc<BlockStructure<S>>)>) -> Result<Self, Error> {
        let given = tensors.len();
        let bad = |reason: String| Err(Error::Network { given, reason });
        if given == 0 {
            return bad("expected at least one tensor".into());
        }
        let nodes: Vec<Node<S>> = tensors
            .into_iter()
            .map(|(l, s)| Node {
                labels: labels_of(l),
                structure: s,
            })
            .collect();
        for (i, n) in nodes.iter().enumerate() {
            if n.labels.len() != n.structure.num_legs() {
                return bad(format!(
                    "tensor {i} has {} legs but {} labels",
                    n.structure.num_legs(),
                    n.labels.len()
                ));
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            let twice = n
                .labels
                .iter()
                .enumerate()
                .find(|(k, c)| n.labels[..*k].contains(c));
            if let Some((_, c)) = twice {
                return bad(format!(
                    "label {c:?} is on two legs of tensor {i}; expected each label once per \
                     tensor (a partial trace within one tensor is not a network contraction)"
                ));
            }
        }
        let mut count: HashMap<char, usize> = HashMap::new();
        for c in nodes.iter().flat_map(|n| &n.labels) {
            *count.entry(*c).or_default() += 1;
        }
        if let Some((c, k)) = count.iter().find(|(_, k)| **k > 2) {
            return bad(format!("label {c:?} is on {k} legs; expected at most two"));
        }
        Ok(Self { tensors: nodes })
    }

    /// How many tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the network has no tensor (never: [`new`](Network::new) refuses that).
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The block-sparse cost of a given order.
    ///
    /// # Errors
    ///
    /// [`Error::Network`] when the steps do not contract every tensor exactly once; leg
    /// errors of a step.
    pub fn cost(&self, steps: &[(usize, usize)]) -> Result<u64, Error> {
        let n = self.tensors.len();
        let bad = |reason: String| Error::Network { given: n, reason };
        if steps.len() + 1 != n {
            return Err(bad(format!(
                "expected {} steps, given {}",
                n - 1,
                steps.len()
            )));
        }
        let mut nodes: Vec<Option<Node<S>>> = self.tensors.iter().cloned().map(Some).collect();
        let mut flops = 0;
        for &(x, y) in steps {
            let take = |nodes: &mut Vec<Option<Node<S>>>, i: usize| {
                nodes
                    .get_mut(i)
                    .and_then(Option::take)
                    .ok_or_else(|| bad(format!("node {i} is not available at that step")))
            };
            let a = take(&mut nodes, x)?;
            let b = take(&mut nodes, y)?;
            flops = add_flops(flops, pair_flops(&a, &b)?)?;
            nodes.push(Some(merge(&a, &b)?));
        }
        Ok(flops)
    }

    /// A greedy order: at each step the pair of connected nodes whose contraction costs the
    /// fewest block-sparse flops (disconnected pairs only when nothing is connected).
    ///
    /// # Errors
    ///
    /// Leg errors of the intermediates.
    pub fn greedy(&self) -> Result<Order, Error> {
        let n = self.tensors.len();
        let mut live: Vec<(usize, Node<S>)> = self.tensors.iter().cloned().enumerate().collect();
        let mut steps = Vec::new();
        let mut flops = 0;
        while live.len() > 1 {
            let mut best: Option<(bool, u64, usize, usize)> = None;
            for i in 0..live.len() {
                for j in i + 1..live.len() {
                    let (a, b) = (&live[i].1, &live[j].1);
                    let connected = a.labels.iter().any(|c| b.labels.contains(c));
                    let key = (!connected, pair_flops(a, b)?, i, j);
                    if best.is_none_or(|b| key < b) {
                        best = Some(key);
                    }
                }
            }
            let (_, f, i, j) = best.expect("two live nodes");
            let (id_b, b) = live.remove(j);
            let (id_a, a) = live.remove(i);
            flops = add_flops(flops, f)?;
            steps.push((id_a, id_b));
            live.push((n + steps.len() - 1, merge(&a, &b)?));
        }
        Ok(Order { steps, flops })
    }

    /// The cheapest order by block-sparse flops, by dynamic programming over subsets
    /// (connected splits first, as a tensor-network code does). Costs count `2 m n k` per
    /// block pair for every element type.
    ///
    /// # Errors
    ///
    /// [`Error::Network`] above [`MAX_EXHAUSTIVE`] tensors; leg errors of intermediates.
    pub fn optimal(&self) -> Result<Order, Error> {
        self.search(pair_flops)
    }

    /// The order a dense library would choose: the cheapest by dense dimensions (`2` times
    /// the product of every leg dimension involved), with its block-sparse cost. The
    /// baseline that [`optimal`](Network::optimal) is measured against.
    ///
    /// # Errors
    ///
    /// As [`optimal`](Network::optimal).
    pub fn dense_order(&self) -> Result<Order, Error> {
        let order = self.search(|a, b| {
            let dims = |n: &Node<S>, skip: &[char]| -> u64 {
                n.labels
                    .iter()
                    .zip(n.structure.legs())
                    .filter(|(c, _)| !skip.contains(c))
                    .fold(1_u64, |acc, (_, l)| acc.saturating_mul(l.dim() as u64))
            };
            Ok(2_u64
                .saturating_mul(dims(a, &[]))
                .saturating_mul(dims(b, &a.labels)))
        })?;
        let flops = self.cost(&order.steps)?;
        Ok(Order {
            steps: order.steps,
            flops,
        })
    }

    fn search(
        &self,
        cost: impl Fn(&Node<S>, &Node<S>) -> Result<u64, Error>,
    ) -> Result<Order, Error> {
        let n = self.tensors.len();
        if n > MAX_EXHAUSTIVE {
            return Err(Error::Network {
                given: n,
                reason: format!(
                    "expected at most {MAX_EXHAUSTIVE} tensors for an exhaustive search"
                ),
            });
        }
        let full = (1_usize << n) - 1;
        // best[mask] = (cost, split, node)
        let mut best: Vec<Option<(u64, usize, Node<S>)>> = vec![None; full + 1];
        for (i, t) in self.tensors.iter().enumerate() {
            best[1 << i] = Some((0, 0, t.clone()));
        }
        let mut masks: Vec<usize> = (1..=full).filter(|m| m.count_ones() > 1).collect();
        masks.sort_by_key(|m| m.count_ones());
        for mask in masks {
            let low = mask & mask.wrapping_neg();
            let mut found: Option<(bool, u64, usize)> = None;
            let mut node: Option<Node<S>> = None;
            // Submasks holding the lowest bit: each split once.
            let mut s1 = (mask - 1) & mask;
            while s1 > 0 {
                if s1 & low != 0 {
                    let s2 = mask ^ s1;
                    let (c1, _, n1) = best[s1].as_ref().expect("smaller subsets first");
                    let (c2, _, n2) = best[s2].as_ref().expect("smaller subsets first");
                    let connected = n1.labels.iter().any(|c| n2.labels.contains(c));
                    let total = add_flops(add_flops(*c1, *c2)?, cost(n1, n2)?)?;
                    let key = (!connected, total, s1);
                    if found.is_none_or(|f| key < f) {
                        found = Some(key);
                    }
                    if node.is_none() {
                        node = Some(merge(n1, n2)?);
                    }
                }
                s1 = (s1 - 1) & mask;
            }
            let (_, c, split) = found.expect("a set of two or more splits");
            best[mask] = Some((c, split, node.expect("merged once")));
        }
        let mut steps = Vec::new();
        let id = build_steps(&best, full, n, &mut steps);
        debug_assert_eq!(id, n + steps.len() - 1);
        let flops = best[full].as_ref().expect("the whole network").0;
        Ok(Order { steps, flops })
    }

    /// Contracts the network in `order`; returns the result and its leg labels: the free
    /// labels in network order (tensor 0's free legs in their order, then tensor 1's, ...),
    /// whatever the order of the steps, so every order gives the same tensor.
    ///
    /// For fermionic sectors the network means the graded product of its tensors in list
    /// order, each contracted pair evaluated by the crate's sign convention (see the crate
    /// docs, "Fermionic sign convention"); a step that joins nodes out of list order pays
    /// `(-1)` for every pair of odd tensors (odd flux) it moves past each other, so the
    /// result does not depend on the order chosen.
    ///
    /// # Errors
    ///
    /// [`Error::Network`] when `arrays` do not match the network's structures or the order
    /// is invalid; the errors of each pairwise contraction.
    pub fn contract<T: Field>(
        &self,
        arrays: &[&AsyncArray<T, S>],
        order: &Order,
    ) -> Result<Labelled<T, S>, Error> {
        self.contract_impl(arrays, order, None)
    }

    /// The open legs (labels on one tensor), in network order.
    pub fn open_labels(&self) -> Vec<char> {
        let all: Vec<char> = self.tensors.iter().flat_map(|t| t.labels.clone()).collect();
        all.iter()
            .filter(|c| all.iter().filter(|d| d == c).count() == 1)
            .copied()
            .collect()
    }

    /// Like [`contract`](Self::contract), with the result's legs in the order `output`
    /// names them: the open labels, each once, optionally split by one `|` into codomain
    /// and domain (`"da|c"`). Without a `|` the split is the one `contract` gives for this
    /// order. The reordering is folded into the last step's output permutation (no extra
    /// pass over the data), and for fermionic sectors it carries the sign of the odd legs
    /// it crosses, as [`AsyncArray::permute`]: the result is `contract`'s, permuted.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_contract::Network;
    ///
    /// let v = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
    /// let m = Arc::new(BlockStructure::new([v.clone()], [v.dual()], U1(0))?);
    /// let net = Network::new(vec![("ab", m.clone()), ("bc", m.clone())])?;
    /// let (a, b) = (AsyncArray::<f64, U1>::random(m.clone(), 1), AsyncArray::random(m, 2));
    /// let order = net.optimal()?;
    /// let ca = net.contract_to(&[&a, &b], &order, "c|a")?; // the transpose of "a|c"
    /// let (ac, _) = net.contract(&[&a, &b], &order)?;
    /// let want = ac.permute(&[1, 0], 1)?.to_dense()?;
    /// assert!(ca.to_dense()?.iter().zip(&want).all(|(x, y)| (x - y).abs() < 1e-12));
    /// assert!(net.contract_to(&[&a, &b], &order, "ab").is_err()); // b is contracted
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::OutputLabels`] when `output` is not exactly the open labels (nothing is
    /// enrolled); otherwise as [`contract`](Self::contract).
    pub fn contract_to<T: Field>(
        &self,
        arrays: &[&AsyncArray<T, S>],
        order: &Order,
        output: &str,
    ) -> Result<AsyncArray<T, S>, Error> {
        let expected = self.open_labels();
        let bad = |reason: String| Error::OutputLabels {
            expected: expected.iter().collect(),
            given: output.to_string(),
            reason,
        };
        let (labels, split) = match output.split_once('|') {
            Some((cod, dom)) => {
                if dom.contains('|') {
                    return Err(bad("'|' is given twice".into()));
                }
                let cod = labels_of(cod);
                let n = cod.len();
                (cod.into_iter().chain(labels_of(dom)).collect(), Some(n))
            }
            None => (labels_of(output), None),
        };
        for (k, c) in labels.iter().enumerate() {
            if labels[..k].contains(c) {
                return Err(bad(format!("label {c:?} is given twice")));
            }
            if !expected.contains(c) {
                return Err(bad(format!("label {c:?} is not an open leg")));
            }
        }
        if let Some(c) = expected.iter().find(|c| !labels.contains(c)) {
            return Err(bad(format!("open leg {c:?} is missing")));
        }
        let (array, _) = self.contract_impl(arrays, order, Some((labels, split)))?;
        Ok(array)
    }

    /// [`contract`](Self::contract), with the last step's output given as labels (the open
    /// ones, checked) and an optional codomain size.
    fn contract_impl<T: Field>(
        &self,
        arrays: &[&AsyncArray<T, S>],
        order: &Order,
        output: Option<(Vec<char>, Option<usize>)>,
    ) -> Result<Labelled<T, S>, Error> {
        let n = self.tensors.len();
        let bad = |reason: String| Error::Network { given: n, reason };
        if arrays.len() != n {
            return Err(bad(format!("expected {n} arrays, given {}", arrays.len())));
        }
        for (i, (a, t)) in arrays.iter().zip(&self.tensors).enumerate() {
            if **a.structure() != *t.structure {
                return Err(bad(format!(
                    "array {i} does not have tensor {i}'s structure"
                )));
            }
        }
        self.cost(&order.steps)?; // validates the steps before anything is enrolled
        // Where each label first appears: its place in the network order.
        let mut origin: HashMap<char, (usize, usize)> = HashMap::new();
        for (i, t) in self.tensors.iter().enumerate() {
            for (k, &c) in t.labels.iter().enumerate() {
                origin.entry(c).or_insert((i, k));
            }
        }
        // Per node: its array (None for an input), labels, tensors (sorted) and their odd ones.
        struct Made<T: Field, S: AbelianSector> {
            array: AsyncArray<T, S>,
            labels: Vec<char>,
            tensors: Vec<usize>,
        }
        let odd: Vec<bool> = self
            .tensors
            .iter()
            .map(|t| t.structure.flux().parity())
            .collect();
        let mut made: Vec<Option<Made<T, S>>> = Vec::new();
        for (step, &(x, y)) in order.steps.iter().enumerate() {
            let node = |i: usize, made: &[Option<Made<T, S>>]| -> (Vec<char>, Vec<usize>) {
                if i < n {
                    (self.tensors[i].labels.clone(), vec![i])
                } else {
                    let m = made[i - n].as_ref().expect("validated order");
                    (m.labels.clone(), m.tensors.clone())
                }
            };
            let ((la, ta), (lb, tb)) = (node(x, &made), node(y, &made));
            let mut out: Vec<char> = la
                .iter()
                .filter(|c| !lb.contains(c))
                .chain(lb.iter().filter(|c| !la.contains(c)))
                .copied()
                .collect();
            out.sort_by_key(|c| origin[c]);
            // At the last step, the result's legs as asked, and their split when one is
            // asked (else the spec's default: `x`'s free legs form the codomain).
            let mut out_spec: String = out.iter().collect();
            if step + 1 == order.steps.len()
                && let Some((labels, n_codomain)) = &output
            {
                out.clone_from(labels);
                out_spec = match *n_codomain {
                    Some(k) => format!(
                        "{}|{}",
                        out[..k].iter().collect::<String>(),
                        out[k..].iter().collect::<String>()
                    ),
                    None => out.iter().collect(),
                };
            }
            // (-1) per pair of odd tensors that the step's operand order (x's, then y's)
            // puts out of network order.
            let swaps = ta
                .iter()
                .filter(|&&i| odd[i])
                .map(|&i| tb.iter().filter(|&&j| j < i && odd[j]).count())
                .sum::<usize>();
            let alpha = if swaps % 2 == 1 {
                T::ZERO - T::ONE
            } else {
                T::ONE
            };
            let spec = format!(
                "{},{}->{out_spec}",
                la.iter().collect::<String>(),
                lb.iter().collect::<String>(),
            );
            let c = Contraction::new(&spec)?;
            let result = {
                let get = |i: usize| -> &AsyncArray<T, S> {
                    if i < n {
                        arrays[i]
                    } else {
                        &made[i - n].as_ref().expect("validated order").array
                    }
                };
                c.apply_scaled(alpha, get(x), get(y))?
            };
            for i in [x, y] {
                if i >= n {
                    made[i - n] = None; // an intermediate is used once
                }
            }
            let mut tensors: Vec<usize> = ta.into_iter().chain(tb).collect();
            tensors.sort_unstable();
            made.push(Some(Made {
                array: result,
                labels: out,
                tensors,
            }));
        }
        match (made.pop(), output) {
            (Some(Some(last)), _) => Ok((last.array, last.labels)),
            (_, None) => Ok((arrays[0].duplicate(), self.tensors[0].labels.clone())),
            // One tensor: its legs permuted into the order asked for.
            (_, Some((labels, split))) => {
                let own = &self.tensors[0];
                let perm: Vec<usize> = labels
                    .iter()
                    .map(|c| own.labels.iter().position(|d| d == c).expect("checked"))
                    .collect();
                let n_codomain = split.unwrap_or(own.structure.n_codomain());
                Ok((arrays[0].permute(&perm, n_codomain)?, labels))
            }
        }
    }
}

fn build_steps<S: AbelianSector>(
    best: &[Option<(u64, usize, Node<S>)>],
    mask: usize,
    n: usize,
    steps: &mut Vec<(usize, usize)>,
) -> usize {
    if mask.count_ones() == 1 {
        return mask.trailing_zeros() as usize;
    }
    let split = best[mask].as_ref().expect("searched").1;
    let a = build_steps(best, split, n, steps);
    let b = build_steps(best, mask ^ split, n, steps);
    steps.push((a, b));
    n + steps.len() - 1
}

/// The node a pairwise contraction makes: free labels of `a`, then of `b`.
fn merge<S: AbelianSector>(a: &Node<S>, b: &Node<S>) -> Result<Node<S>, Error> {
    let mut labels = Vec::new();
    let mut legs: Vec<Leg<S>> = Vec::new();
    for (x, y) in [(a, b), (b, a)] {
        for (c, leg) in x.labels.iter().zip(x.structure.legs()) {
            if !y.labels.contains(c) {
                labels.push(*c);
                legs.push(leg.clone());
            }
        }
    }
    let n_codomain = a.labels.iter().filter(|c| !b.labels.contains(c)).count();
    let flux = a.structure.flux().fuse_abelian(b.structure.flux());
    Ok(Node {
        labels,
        structure: Arc::new(BlockStructure::from_legs(legs, n_codomain, flux)?),
    })
}

fn flops_overflow() -> Error {
    tessera_blocks::Error::Overflow {
        what: "the flop count of a contraction order",
    }
    .into()
}

/// `a + b` flops, or [`Error::Blocks`] `Overflow` past `u64`.
fn add_flops(a: u64, b: u64) -> Result<u64, Error> {
    a.checked_add(b).ok_or_else(flops_overflow)
}

/// The flops of contracting `a` with `b` over their shared labels: for each tuple of
/// contracted segments, `2 * k * (sum of a's row sizes) * (sum of b's column sizes)`,
/// computed checked ([`Error::Blocks`] `Overflow` past `u64`).
fn pair_flops<S: AbelianSector>(a: &Node<S>, b: &Node<S>) -> Result<u64, Error> {
    let shared: Vec<char> = a
        .labels
        .iter()
        .copied()
        .filter(|c| b.labels.contains(c))
        .collect();
    let pos = |n: &Node<S>| -> Vec<usize> {
        shared
            .iter()
            .map(|c| n.labels.iter().position(|x| x == c).expect("shared label"))
            .collect()
    };
    let (pa, pb) = (pos(a), pos(b));
    fn product(dims: impl Iterator<Item = usize>) -> Result<u64, Error> {
        dims.into_iter()
            .try_fold(1_u64, |acc, d| acc.checked_mul(d as u64))
            .ok_or_else(flops_overflow)
    }
    let mut by_k: HashMap<SmallVec<[usize; 4]>, (u64, u64)> = HashMap::new();
    for blk in a.structure.blocks() {
        let key: SmallVec<[usize; 4]> = pa.iter().map(|&p| blk.segments()[p]).collect();
        let k = product(pa.iter().map(|&p| blk.shape()[p]))?;
        let rows = product(
            &mut (0..blk.shape().len())
                .filter(|i| !pa.contains(i))
                .map(|i| blk.shape()[i]),
        )?;
        let e = by_k.entry(key).or_insert((0, k));
        e.0 = add_flops(e.0, rows)?;
    }
    let mut flops = 0_u64;
    for blk in b.structure.blocks() {
        let key: SmallVec<[usize; 4]> = pb.iter().map(|&p| blk.segments()[p]).collect();
        if let Some(&(rows, k)) = by_k.get(&key) {
            let cols = product(
                &mut (0..blk.shape().len())
                    .filter(|i| !pb.contains(i))
                    .map(|i| blk.shape()[i]),
            )?;
            let f = [rows, k, cols]
                .iter()
                .try_fold(2_u64, |acc, &x| acc.checked_mul(x))
                .ok_or_else(flops_overflow)?;
            flops = add_flops(flops, f)?;
        }
    }
    Ok(flops)
}
