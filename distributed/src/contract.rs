//! Distributed contraction: planned on every rank from metadata alone, computed by the
//! owners of the output blocks.
//!
//! Owns: [`contract`]. Invariants: every rank derives the same pairing of blocks from the
//! structures (no message is needed to plan); an operand block is sent once to each rank
//! that needs it, by its owner, as soon as its last write is done; each rank computes exactly
//! the output blocks it owns, through the local planner with a masked output (so only the
//! pairs that write them run).

use crate::array::{DistArray, copy_block, recv_block, restricted, send_block};
use crate::error::Error;
use crate::map::ProcessMap;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_backends::Field;
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure};
use tessera_contract::Contraction;

/// Where an output leg comes from.
#[derive(Clone, Copy)]
enum Source {
    A(usize),
    B(usize),
}

/// Which ranks need each block of `A` and of `B`: the owners of the output blocks their
/// pairs write. Pairs meet on equal segments of the contracted legs (contractible legs have
/// the same segments), and write the output block of the free legs' segments.
fn needs<S: AbelianSector>(
    labels: [&[char]; 3],
    contracted: &[char],
    a: &BlockStructure<S>,
    b: &BlockStructure<S>,
    output: &BlockStructure<S>,
    owner: impl Fn(usize) -> usize,
) -> [Vec<Vec<usize>>; 2] {
    let [la, lb, lo] = labels;
    let pos = |l: &[char], c: &char| l.iter().position(|x| x == c);
    let ka: Vec<usize> = contracted.iter().filter_map(|c| pos(la, c)).collect();
    let kb: Vec<usize> = contracted.iter().filter_map(|c| pos(lb, c)).collect();
    let from: Vec<Source> = lo
        .iter()
        .map(|c| match pos(la, c) {
            Some(i) => Source::A(i),
            None => Source::B(pos(lb, c).expect("an output label is on A or B")),
        })
        .collect();
    let mut b_of_k: HashMap<Vec<usize>, Vec<usize>> = HashMap::new();
    for blk in b.blocks() {
        let key = kb.iter().map(|&i| blk.segments()[i]).collect();
        b_of_k.entry(key).or_default().push(blk.id());
    }
    let mut need_a = vec![Vec::new(); a.num_blocks()];
    let mut need_b = vec![Vec::new(); b.num_blocks()];
    let mut seg = vec![0; lo.len()];
    for blk in a.blocks() {
        let key: Vec<usize> = ka.iter().map(|&i| blk.segments()[i]).collect();
        let Some(partners) = b_of_k.get(&key) else {
            continue;
        };
        for &bi in partners {
            let bb = b.block(bi).expect("a block of B");
            for (s, f) in seg.iter_mut().zip(&from) {
                *s = match *f {
                    Source::A(i) => blk.segments()[i],
                    Source::B(j) => bb.segments()[j],
                };
            }
            if let Some(c) = output.block_id(&seg) {
                let r = owner(c);
                need_a[blk.id()].push(r);
                need_b[bi].push(r);
            }
        }
    }
    for v in need_a.iter_mut().chain(need_b.iter_mut()) {
        v.sort_unstable();
        v.dedup();
    }
    [need_a, need_b]
}

/// `op(A) op(B)` as `contraction` says, distributed: the output placed by `map`, each of its
/// blocks computed by its owner from the operand blocks it needs, which their owners send
/// it (once each). Every rank plans from the structures alone. Returns at once: reading the
/// result waits for the blocks read.
///
/// # Errors
///
/// The contraction's planning errors (legs that do not fit the spec), the map's, and
/// allocation errors; on one rank, they abort the operation on every rank.
pub fn contract<T: Field, S: AbelianSector>(
    contraction: &Contraction,
    a: &DistArray<T, S>,
    b: &DistArray<T, S>,
    map: &ProcessMap,
) -> Result<DistArray<T, S>, Error> {
    let comm = a.comm();
    let op = comm.begin();
    comm.or_abort(op, || {
        // From the legs alone: each rank plans only its own blocks, below.
        let output = Arc::new(contraction.output_of(a.structure(), b.structure())?);
        let owners = map.resolve(&output, comm.size())?;
        let spec = contraction.spec();
        let [need_a, need_b] = needs(
            [spec.a(), spec.b(), spec.output()],
            &spec.contracted(),
            a.structure(),
            b.structure(),
            &output,
            |c| owners.of(c),
        );
        let me = comm.rank();
        // Each operand as this rank reads it: its own local array when every block it needs
        // is its own (the pairs that write other ranks' blocks are not planned), else a
        // working copy of the blocks it needs, owned or received.
        let mut working: [Option<AsyncArray<T, S>>; 2] = [None, None];
        for (which, (x, need)) in [(a, &need_a), (b, &need_b)].into_iter().enumerate() {
            let needed = |g: usize| need[g].binary_search(&me).is_ok();
            let receives = (0..need.len()).any(|g| needed(g) && x.local_id(g).is_none());
            let copy = if receives {
                let (structure, id) = restricted(x.structure(), needed)?;
                Some((AsyncArray::try_empty(structure)?, id))
            } else {
                None
            };
            for (g, ranks) in need.iter().enumerate() {
                let item = (2 * g + which) as u64;
                match (x.local_id(g), &copy) {
                    (Some(l), copy) => {
                        let others = ranks.iter().copied().filter(|&r| r != me).collect();
                        send_block(comm, op, item, x.local(), l, others)?;
                        if let Some((w, id)) = copy
                            && id[g] != usize::MAX
                        {
                            copy_block(x.local(), l, w, id[g])?;
                        }
                    }
                    (None, Some((w, id))) if id[g] != usize::MAX => {
                        recv_block(comm, op, item, x.owners().of(g), w, id[g])?;
                    }
                    (None, _) => {}
                }
            }
            working[which] = copy.map(|(w, _)| w);
        }
        let [wa, wb] = &working;
        let me_owns = |g: usize| owners.of(g) == me;
        let (mine, local_id) = restricted(&output, me_owns)?;
        let local = AsyncArray::try_empty(mine)?;
        contraction.apply_into(
            wa.as_ref().unwrap_or(a.local()),
            wb.as_ref().unwrap_or(b.local()),
            &local,
        )?;
        Ok(DistArray::from_parts(comm, output, owners, local, local_id))
    })
}
