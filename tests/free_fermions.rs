//! Free fermions as an end-to-end check of the fermionic sign convention (see the contract
//! crate's docs): the library's two-site DMRG (`tessera::mps::dmrg`) on `FermionicU1`
//! block-sparse tensors whose MPO is written on graded legs, with no Jordan-Wigner string
//! anywhere. The odd MPO bond sectors carry the fermion between the two ends of a hopping
//! term, and the graded contractions supply every sign. Checked against the sum of the
//! single-particle energies (open chains of 16 and 32 sites, half filling, to `1e-10`) and,
//! at small sizes and every filling, against exact diagonalisation of the dense many-body
//! Hamiltonian built with explicit Jordan-Wigner signs. Next-nearest-neighbour hopping is
//! included because with nearest-neighbour hopping alone an open chain of fermions has the
//! spectrum of hard-core bosons, so it cannot tell a right sign from a missing one; a hop
//! over a site can.
//!
//! # How the signs work out
//!
//! Every tensor here (MPS, MPO, environments, `theta`) has even flux, so it is an even
//! element of the graded tensor product of its legs and commutes with every other: the value
//! of the network `<psi|H|psi>` does not depend on the order of its tensors, and the
//! pairwise contractions (associative under the convention) compute it in any order.
//!
//! - MPS tensor `A(k, s, r)`: left bond `In`, physical `In`, right bond `Out`. Neighbours
//!   meet bra first (`A_i`'s `Out` bond, then `A_{i+1}`'s `In` bond), so the chain is the
//!   plain product: the state is `sum psi[s] e_{s_1} ... e_{s_L} e^{edge}`, which is the
//!   Fock state `(c_1^+)^{s_1} ... (c_L^+)^{s_L} |0>` (the graded tensor product of the
//!   sites' Fock spaces is the Fock space of the chain).
//! - MPO tensor `W(a, u, s, b)`: left bond `In`, output (ket) `In`, input (bra) `Out`, right
//!   bond `Out`, `W[a, u, s, b] = <u|O_ab|s>`. The chain of `W`s is the graded tensor
//!   product of the site operators `O_ab` (the bonds meet bra first, sign-free), and the
//!   graded tensor product of `a^+` on site `i` with `a` on site `j > i` is `c_i^+ c_j`,
//!   Jordan-Wigner string included; `c_j^+ c_i` is `-a ⊗ a^+` (the odd factors swap).
//! - The bra: the graded adjoint of an element `sum x e_1 ... e_n` is `sum conj(x) e_n^* ...
//!   e_1^*`, the same coefficients on the legs *reversed* (and dualled); it is
//!   antimultiplicative, `(A B)^+ = B^+ A^+`, so the bra layer of the network is the ket
//!   layer's adjoints. The library's conjugate (`conj_b`) conjugates and duals in place, and
//!   a permutation only relabels an element (it carries the Koszul sign so that the element
//!   stays the same), so no sequence of library operations reverses the legs *without* that
//!   sign. Read in the original leg order, the adjoint is the in-place conjugate times the
//!   reversal sign, `(-1)` per pair of odd legs of a block: `tessera::mps::graded::
//!   reversal_signed` applies it, and the engine passes it as the bra operand of every
//!   environment update. Without it the energies are wrong
//!   (`the_in_place_conjugate_is_not_the_adjoint`, which runs the engine with
//!   `Bra::InPlaceConjugate`): for an MPS tensor the sign is `(-1)^{|r| + |k| |s|}`, and its
//!   `(-1)^{|r|}` on every bond is a Jordan-Wigner-like string inside the bond sums.
//! - The twist: the graded pairing of an adjoint with a ket, `x^+ y`, meets the pairs of
//!   their `Out` legs ket first, so it is `sum conj(x) y` times `(-1)` per odd `Out` leg, not
//!   the Hilbert-space inner product. Inside the network every bond is closed and the
//!   adjoint is exact, so this matters only for open `Out` legs: the right edge of the MPS
//!   (it carries the particle number) and the right bond `r` of `theta`. So the engine's
//!   right edge environment is the identity twisted on its bra leg, and its effective
//!   Hamiltonian is the network `L W W R theta` with the right environment twisted on its bra
//!   leg (the output's `Out` leg, `tessera::mps::graded::twisted`): then `<theta'|H_eff
//!   theta>` (plain inner product, as Lanczos uses) is `<psi'|H|psi>` and `H_eff` is
//!   symmetric (tested, and the same network without the twist is not). With `L` and `R` the
//!   environments of left and right isometries (SVD factors, orthonormal as plain matrices),
//!   `theta -> psi` is an isometry, so Lanczos on `H_eff` is the usual DMRG step.
//!
//! Both signs in their smallest form, on one tensor: the full contraction of `conj(A)` with
//! `A` is `<A|A>` only with the reversal sign and the twist
//! (`a_tensor_paired_with_its_conjugate_is_its_norm_only_with_the_reversal_sign_and_twist`).
//!
//! This file's own: the MPO and its leg order, the product state and the dense references;
//! the sweep, the Lanczos solver, the environments and both signs are the engine's.

use std::sync::Arc;
use tessera::blocks::{
    AsyncArray, BlockStructure, Direction, FermionParity, FermionicU1, Leg, Product, Sector, U1,
};
use tessera::contract::Contraction;
use tessera::mps::dmrg::{Bra, Dmrg, Settings, Toward};
use tessera::mps::graded::{reversal_signed, twisted};
use tessera::mps::{Mpo, Mps};
use tessera::prelude::Runtime;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, BoxError>;
type Tensor = AsyncArray<f64, FermionicU1>;

/// The sector of `n` particles: charge `n`, parity that of `n`.
fn charge(n: i32) -> FermionicU1 {
    Product(U1(n), FermionParity::new(n % 2 != 0))
}

/// The physical leg (`In`): empty (even), occupied (odd).
fn physical_leg() -> Result<Leg<FermionicU1>> {
    Ok(Leg::new(Direction::In, [(charge(0), 1), (charge(1), 1)])?)
}

/// MPO bond states by their dense index on the bulk MPO leg (segments: charge -1, 0, +1, two
/// states each): an `a` placed on the site just left of the bond (`M1`) or on the one
/// before (`M2`), waiting for its `a^+`; nothing placed yet; the term complete; likewise an
/// `a^+` waiting for its `a` (`P1`, `P2`). The four waiting states are odd: they carry the
/// fermion.
const M1: usize = 0;
const M2: usize = 1;
const START: usize = 2;
const DONE: usize = 3;
const P1: usize = 4;
const P2: usize = 5;
const MPO_DIM: usize = 6;

fn mpo_leg() -> Result<Leg<FermionicU1>> {
    Ok(Leg::new(
        Direction::In,
        [(charge(-1), 2), (charge(0), 2), (charge(1), 2)],
    )?)
}

/// The MPO tensor of `H = -sum_i [t1 (c_i^+ c_{i+1} + h.c.) + t2 (c_i^+ c_{i+2} + h.c.)]`
/// that keeps the bond states `rows` on its left leg and `cols` on its right one (all six in
/// the bulk; "nothing placed" alone on the left edge and "term complete" alone on the right
/// edge, one-dimensional and even there). Legs `(a In, u In, s Out, b Out)`,
/// `W[a, u, s, b] = <u|O_ab|s>`. The hop over a site passes its middle site with the plain
/// identity: the odd bond makes it a string.
fn mpo_tensor((t1, t2): (f64, f64), rows: &[usize], cols: &[usize]) -> Result<Tensor> {
    let (p, m) = (physical_leg()?, mpo_leg()?);
    let edge = Leg::new(Direction::In, [(charge(0), 1)])?;
    let a = if rows.len() == MPO_DIM {
        m.clone()
    } else {
        edge.clone()
    };
    let b = if cols.len() == MPO_DIM {
        m.dual()
    } else {
        edge.dual()
    };
    let s = BlockStructure::new([a, p.clone()], [p.dual(), b], charge(0))?;
    let identity = |u: usize, s: usize| f64::from(u8::from(u == s));
    let create = |u: usize, s: usize| f64::from(u8::from(u == 1 && s == 0));
    let annihilate = |u: usize, s: usize| f64::from(u8::from(u == 0 && s == 1));
    let (nr, nc) = (rows.len(), cols.len());
    let mut dense = vec![0.0; nr * 4 * nc];
    for (u, s_) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        // c_i^+ c_j = a^+ ⊗ a and c_j^+ c_i = -a ⊗ a^+ (i < j), times -t.
        let entries = [
            (START, START, identity(u, s_)),
            (DONE, DONE, identity(u, s_)),
            (START, P1, create(u, s_)),
            (START, M1, annihilate(u, s_)),
            (P1, DONE, -t1 * annihilate(u, s_)),
            (M1, DONE, t1 * create(u, s_)),
            (P1, P2, identity(u, s_)),
            (M1, M2, identity(u, s_)),
            (P2, DONE, -t2 * annihilate(u, s_)),
            (M2, DONE, t2 * create(u, s_)),
        ];
        for (a, b, v) in entries {
            let (Some(r), Some(c)) = (
                rows.iter().position(|&x| x == a),
                cols.iter().position(|&x| x == b),
            ) else {
                continue;
            };
            dense[r + nr * (u + 2 * (s_ + 2 * c))] += v;
        }
    }
    Ok(Tensor::from_dense(s, &dense)?)
}

/// The MPO of the hopping chain on `l` sites.
fn mpo(l: usize, t: (f64, f64)) -> Result<Mpo<FermionicU1>> {
    let all: Vec<usize> = (0..MPO_DIM).collect();
    let tensors = (0..l)
        .map(|i| {
            let rows = if i == 0 { &[START][..] } else { &all };
            let cols = if i == l - 1 { &[DONE][..] } else { &all };
            mpo_tensor(t, rows, cols)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Mpo::new(tensors)?)
}

/// A product state of `n` particles on `l` sites, spread evenly (at half filling every
/// second site is occupied): bond dimension 1.
fn product_state(l: usize, n: usize) -> Result<Mps<FermionicU1>> {
    let mut placed = 0;
    let states: Vec<usize> = (0..l)
        .map(|i| {
            let occupied = (i + 1) * n / l > placed;
            placed += usize::from(occupied);
            usize::from(occupied)
        })
        .collect();
    Ok(Mps::product_state(&vec![physical_leg()?; l], &states)?)
}

/// The settings of these runs: bond dimension `chi`, at most 30 sweeps to `1e-12`, Lanczos
/// to `1e-9` in at most 60 iterations, the bra made as `bra` says.
fn settings(chi: usize, bra: Bra) -> Settings {
    Settings {
        sweeps: 30,
        tol: 1e-12,
        lanczos_tol: 1e-9,
        lanczos_iter: 60,
        bra,
        ..Settings::new(chi)
    }
}

/// A DMRG run on `l` sites with `n` particles, hopping `t`, bond dimension `chi`.
fn run(l: usize, n: usize, t: (f64, f64), chi: usize, bra: Bra) -> Result<Dmrg<FermionicU1>> {
    assert!(l >= 2 && n <= l && chi >= 1);
    Ok(Dmrg::new(
        mpo(l, t)?,
        product_state(l, n)?,
        settings(chi, bra),
    )?)
}

/// The single-particle hopping matrix of the open chain.
fn hopping(l: usize, (t1, t2): (f64, f64)) -> faer::Mat<f64> {
    faer::Mat::<f64>::from_fn(l, l, |i, j| match i.abs_diff(j) {
        1 => -t1,
        2 => -t2,
        _ => 0.0,
    })
}

/// The exact ground-state energy of `n` free fermions: the sum of the `n` lowest
/// single-particle energies.
fn free_fermion_energy(l: usize, n: usize, t: (f64, f64)) -> f64 {
    let e = hopping(l, t)
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .expect("the dense eigensolver converges");
    e[..n].iter().sum()
}

/// The lowest energy of the dense many-body Hamiltonian with `n` particles, in the basis of
/// bit strings (bit `i`: site `i` occupied; the Fock state `prod_i (c_i^+)^{b_i} |0>`, sites
/// in increasing order). With `fermions`, `c_i^+ c_j` carries the Jordan-Wigner sign
/// `(-1)` per occupied site strictly between `i` and `j`; without, the particles are
/// hard-core bosons.
fn exact_diagonalisation(l: usize, n: usize, t: (f64, f64), fermions: bool) -> f64 {
    let basis: Vec<u32> = (0..1u32 << l)
        .filter(|b| b.count_ones() as usize == n)
        .collect();
    let h1 = hopping(l, t);
    let mut h = faer::Mat::<f64>::zeros(basis.len(), basis.len());
    for (col, &b) in basis.iter().enumerate() {
        for i in 0..l {
            for j in 0..l {
                // c_i^+ c_j |b>: j occupied, i empty.
                if i == j || h1[(i, j)] == 0.0 || b >> j & 1 == 0 || b >> i & 1 == 1 {
                    continue;
                }
                let (lo, hi) = (i.min(j), i.max(j));
                let between = (b >> (lo + 1)) & ((1u32 << (hi - lo - 1)) - 1);
                let sign = if fermions && between.count_ones() % 2 == 1 {
                    -1.0
                } else {
                    1.0
                };
                let to = b ^ (1 << i) ^ (1 << j);
                let row = basis.binary_search(&to).expect("a state of the sector");
                h[(row, col)] += sign * h1[(i, j)];
            }
        }
    }
    h.self_adjoint_eigenvalues(faer::Side::Lower)
        .expect("the dense eigensolver converges")[0]
}

fn dmrg(runtime: &Runtime, l: usize, n: usize, t: (f64, f64), chi: usize, bra: Bra) -> f64 {
    runtime
        .enter(|| -> Result<f64> { Ok(run(l, n, t, chi, bra)?.run(|_| {}, |_| {})?) })
        .expect("the DMRG run succeeds")
}

#[test]
fn the_dense_references_agree_and_tell_fermions_from_hard_core_bosons() {
    for (l, t) in [(6, (1.0, 0.0)), (6, (1.0, 0.5)), (8, (0.7, -0.4))] {
        for n in 0..=l {
            let ed = exact_diagonalisation(l, n, t, true);
            let free = free_fermion_energy(l, n, t);
            assert!((ed - free).abs() < 1e-12, "L {l}, N {n}, t {t:?}");
        }
    }
    // Nearest-neighbour hopping alone cannot see the statistics; a hop over a site can.
    let boson = |n, t| exact_diagonalisation(8, n, t, false);
    let fermion = |n, t| exact_diagonalisation(8, n, t, true);
    assert!((boson(4, (1.0, 0.0)) - fermion(4, (1.0, 0.0))).abs() < 1e-12);
    assert!((boson(4, (1.0, 0.5)) - fermion(4, (1.0, 0.5))).abs() > 1e-2);
    // The open nearest-neighbour chain's energies are -2 cos(pi k / (L + 1)).
    let l = 16;
    let cosines: f64 = (1..=l / 2)
        .map(|k| -2.0 * (std::f64::consts::PI * k as f64 / (l as f64 + 1.0)).cos())
        .sum();
    assert!((free_fermion_energy(l, l / 2, (1.0, 0.0)) - cosines).abs() < 1e-12);
}

#[test]
fn dmrg_equals_exact_diagonalisation_at_every_filling() {
    let runtime = Runtime::new(2).unwrap();
    // chi = 2^(L/2): no truncation, so DMRG is exact in every particle-number sector, odd
    // ones included (their right edge leg is odd).
    for (l, t) in [(6, (1.0, 0.5)), (6, (1.0, 0.0)), (8, (0.7, -0.4))] {
        for n in 0..=l {
            let exact = exact_diagonalisation(l, n, t, true);
            let got = dmrg(&runtime, l, n, t, 1 << (l / 2), Bra::Adjoint);
            assert!(
                (got - exact).abs() < 1e-10,
                "L {l}, N {n}, t {t:?}: DMRG {got}, exact {exact}"
            );
        }
    }
}

#[test]
fn the_effective_hamiltonian_is_symmetric_and_its_expectation_is_the_energy() {
    let runtime = Runtime::new(2).unwrap();
    runtime
        .enter(|| -> Result<()> {
            let (l, n, t) = (8, 3, (1.0, 0.5));
            let mut run = run(l, n, t, 16, Bra::Adjoint)?;
            run.run(|_| {}, |_| {})?;
            // After a run the centre is at (0, 1); move it to (3, 4), a bulk pair.
            for i in 0..3 {
                run.step(i, Toward::Right)?;
            }
            let theta = run.pair(3)?;
            let x = AsyncArray::random(Arc::clone(theta.structure()), 7);
            let y = AsyncArray::random(Arc::clone(theta.structure()), 8);
            let h = run.effective_hamiltonian(3)?;
            let xhy = x.inner(&h.apply(&y)?)?.get()?;
            let yhx = y.inner(&h.apply(&x)?)?.get()?;
            assert!((xhy - yhx).abs() < 1e-12 * (1.0 + xhy.abs()), "{xhy} {yhx}");
            // <psi|H|psi> of the current state, through the environments, is the ground
            // energy (the state is converged and exact at chi = 16).
            let e = theta.inner(&h.apply(&theta)?)?.get()? / theta.inner(&theta)?.get()?;
            let exact = exact_diagonalisation(l, n, t, true);
            assert!((e - exact).abs() < 1e-8, "{e} vs {exact}");
            // The same network L W W R without the twist on R is not symmetric.
            let w: Vec<Tensor> = run.mpo().tensors()[3..5]
                .iter()
                .map(|w| w.duplicate())
                .collect();
            let (left, right) = run.environments(3)?;
            let (left, right) = (left.duplicate(), right.duplicate());
            let steps = [
                Contraction::new("kay,kstr->yastr")?,
                Contraction::new("yastr,ausb->yubtr")?,
                Contraction::new("yubtr,bvtc->yuvcr")?,
                Contraction::new("yuvcr,rcz->yu|vz")?,
            ];
            let untwisted = |theta: &Tensor| -> Result<Tensor> {
                let t = steps[0].apply(&left, theta)?;
                let t = steps[1].apply(&t, &w[0])?;
                let t = steps[2].apply(&t, &w[1])?;
                Ok(steps[3].apply(&t, &right)?)
            };
            let xhy = x.inner(&untwisted(&y)?)?.get()?;
            let yhx = y.inner(&untwisted(&x)?)?.get()?;
            assert!((xhy - yhx).abs() > 1e-3, "{xhy} {yhx}");
            // With the twist this network is the engine's.
            let twisted_right = twisted(&right, 2)?;
            let t = steps[0].apply(&left, &x)?;
            let t = steps[1].apply(&t, &w[0])?;
            let t = steps[2].apply(&t, &w[1])?;
            let mine = steps[3].apply(&t, &twisted_right)?.to_dense()?;
            let engine = run.effective_hamiltonian(3)?.apply(&x)?.to_dense()?;
            assert!(mine.iter().zip(&engine).all(|(a, b)| (a - b).abs() < 1e-12));
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_in_place_conjugate_is_not_the_adjoint() {
    // The same run with the bra conjugated in place (no reversal) gives a wrong energy.
    let runtime = Runtime::new(2).unwrap();
    let (l, n, t) = (6, 3, (1.0, 0.5));
    let exact = exact_diagonalisation(l, n, t, true);
    let wrong = dmrg(&runtime, l, n, t, 8, Bra::InPlaceConjugate);
    assert!((wrong - exact).abs() > 1e-3, "{wrong} vs {exact}");
}

#[test]
fn half_filled_chains_of_16_and_32_sites_give_the_free_fermion_energy() {
    let runtime = Runtime::new(2).unwrap();
    for (l, chi) in [(16, 64), (32, 128)] {
        let exact: f64 = (1..=l / 2)
            .map(|k| -2.0 * (std::f64::consts::PI * k as f64 / (l as f64 + 1.0)).cos())
            .sum();
        let got = dmrg(&runtime, l, l / 2, (1.0, 0.0), chi, Bra::Adjoint);
        println!("L = {l}: DMRG {got:.15}, exact {exact:.15}");
        assert!((got - exact).abs() < 1e-10, "L {l}: {got} vs {exact}");
    }
}

#[test]
fn a_hop_over_a_site_gives_the_free_fermion_energy_at_16_sites() {
    // The Jordan-Wigner string of c_i^+ c_{i+2} comes from the odd MPO bond passing site
    // i + 1: hard-core bosons would give another energy.
    let runtime = Runtime::new(2).unwrap();
    let (l, t) = (16, (1.0, 0.5));
    let exact = free_fermion_energy(l, l / 2, t);
    let got = dmrg(&runtime, l, l / 2, t, 64, Bra::Adjoint);
    println!("L = {l}, t2 = {}: DMRG {got:.15}, exact {exact:.15}", t.1);
    assert!((got - exact).abs() < 1e-10, "{got} vs {exact}");
}

#[test]
fn a_tensor_paired_with_its_conjugate_is_its_norm_only_with_the_reversal_sign_and_twist() {
    // The minimal form of what the DMRG needs: for A(k In, s In, r Out), the full
    // contraction of conj(A) with A (in place, as `conj_a` does) is not <A|A> but
    // sum_blocks (-1)^(pairs of odd legs + |r|) |A_b|^2; with the reversal sign on the
    // conjugated operand and the twist on the Out leg it is <A|A>.
    let runtime = Runtime::new(2).unwrap();
    runtime
        .enter(|| -> Result<()> {
            let v = Leg::new(Direction::In, (-1..=2).map(|n| (charge(n), 2)))?;
            let s = BlockStructure::new([v.clone(), physical_leg()?], [v.dual()], charge(0))?;
            let a = AsyncArray::<f64, _>::random(s, 11);
            let pair = Contraction::new("ksr,ksr->")?.conj_a();
            let in_place = pair.apply(&a, &a)?.to_dense()?[0];
            let mut want = 0.0;
            for (b, data) in a.structure().blocks().zip(a.to_blocks()?) {
                let p: Vec<bool> = b.sectors().iter().map(|s| s.parity()).collect();
                let pairs = usize::from(p[0] && p[1])
                    + usize::from(p[0] && p[2])
                    + usize::from(p[1] && p[2]);
                let sign = if (pairs + usize::from(p[2])) % 2 == 1 {
                    -1.0
                } else {
                    1.0
                };
                want += sign * data.iter().map(|x| x * x).sum::<f64>();
            }
            let norm2 = a.inner(&a)?.get()?;
            assert!(
                (in_place - want).abs() < 1e-12 * norm2,
                "{in_place} vs {want}"
            );
            assert!(
                (in_place - norm2).abs() > 1e-2 * norm2,
                "{in_place} vs {norm2}"
            );
            let adjoint = pair.apply(&reversal_signed(&a)?, &twisted(&a, 2)?)?;
            let got = adjoint.to_dense()?[0];
            assert!((got - norm2).abs() < 1e-12 * norm2, "{got} vs {norm2}");
            Ok(())
        })
        .unwrap();
}
