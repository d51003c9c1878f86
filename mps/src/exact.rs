//! Exact diagonalisation: dense many-body matrices of small chains.
//!
//! Owns: the occupation basis of a charge sector ([`sector_basis`]), the Hamiltonian of a
//! [`Terms`] built directly from its terms as written ([`sparse_hamiltonian`],
//! [`hamiltonian`], [`spectrum`], [`ground_energy`] (dense, or Lanczos on larger sectors),
//! [`operator_matrix`]), and the dense matrix of an
//! [`Mpo`] contracted through Tessera's contractions ([`mpo_matrix`]). Invariant: a basis
//! state is the list of local states `s_0, ..., s_{L-1}` encoded as `sum_k s_k d^k` (site 0
//! least significant), standing for the Fock state `e_{s_0} ... e_{s_{L-1}}` (site 0's
//! creation operators leftmost); bases are sorted by that code, and every matrix here is
//! in that basis.
//!
//! The Hamiltonian is built independently of the MPO: each term is applied to each basis
//! state operator by operator in the order written (rightmost first), an odd operator on
//! site `k` taking the explicit Jordan-Wigner sign `(-1)` per odd local state on the sites
//! left of `k`. No reordering and no graded leg is involved, so agreement with
//! [`mpo_matrix`] checks the MPO's signs.
//!
//! ```
//! use tessera_blocks::U1;
//! use tessera_mps::{exact, sites::Site, terms::Terms};
//!
//! // The two-site Heisenberg singlet.
//! let mut h = Terms::new(Site::spin_half(), 2)?;
//! h.add(0.5, [("Sp", 0), ("Sm", 1)])?;
//! h.add(0.5, [("Sm", 0), ("Sp", 1)])?;
//! h.add(1.0, [("Sz", 0), ("Sz", 1)])?;
//! assert!((exact::ground_energy(&h, &U1(0))? + 0.75).abs() < 1e-14);
//! # Ok::<(), tessera_mps::Error>(())
//! ```

use faer::Mat;
use tessera_blocks::AbelianSector;
use tessera_contract::Contraction;

use crate::sites::Site;
use crate::terms::Terms;
use crate::{Error, Mpo, Result};

/// The most product states [`sector_basis`] enumerates (`d^L`).
pub const MAX_PRODUCT_STATES: u64 = 1 << 26;
/// The largest sector [`hamiltonian`] builds as a dense matrix.
pub const MAX_SECTOR_DIM: u64 = 12_000;
/// The largest full space [`mpo_matrix`] and [`operator_matrix`] build (`d^L`).
pub const MAX_FULL_DIM: u64 = 4096;

/// `d^len`, or [`Error::TooLarge`] past `limit`.
fn space_dim(d: usize, len: usize, limit: u64, what: &'static str) -> Result<u64> {
    let mut n: u64 = 1;
    for _ in 0..len {
        n = n.saturating_mul(d as u64);
    }
    if n > limit {
        return Err(Error::TooLarge {
            what,
            dimension: n,
            limit,
        });
    }
    Ok(n)
}

/// The local states of `code`.
fn decode(mut code: u64, d: usize, len: usize) -> Vec<usize> {
    (0..len)
        .map(|_| {
            let s = (code % d as u64) as usize;
            code /= d as u64;
            s
        })
        .collect()
}

fn encode(states: &[usize], d: usize) -> u64 {
    states.iter().rev().fold(0, |c, &s| c * d as u64 + s as u64)
}

/// The sorted codes of the product states of `len` sites of `site` whose charges fuse to
/// `sector`; [`Error::EmptySector`] when there is none, [`Error::TooLarge`] past
/// [`MAX_PRODUCT_STATES`].
pub fn sector_basis<S: AbelianSector>(site: &Site<S>, len: usize, sector: &S) -> Result<Vec<u64>> {
    let d = site.dim();
    let total = space_dim(d, len, MAX_PRODUCT_STATES, "product-state enumeration")? as u64;
    let basis: Vec<u64> = (0..total)
        .filter(|&code| {
            let q = decode(code, d, len)
                .iter()
                .fold(S::trivial(), |q, &s| q.fuse_abelian(site.charge_of(s)));
            q == *sector
        })
        .collect();
    if basis.is_empty() {
        return Err(Error::EmptySector {
            sector: sector.to_string(),
            expected: format!("the total charge of some product state of {len} sites"),
        });
    }
    Ok(basis)
}

/// `(name, site)` operators applied to the local states `x` (rightmost first), with the
/// Jordan-Wigner sign of every odd operator: the resulting states and amplitudes.
fn apply<S: AbelianSector>(
    site: &Site<S>,
    operators: &[(String, usize)],
    x: Vec<usize>,
) -> Result<Vec<(Vec<usize>, f64)>> {
    let d = site.dim();
    let mut current = vec![(x, 1.0)];
    for (name, k) in operators.iter().rev() {
        let op = site.operator(name)?;
        let mut next = Vec::new();
        for (x, a) in current {
            let string = op.is_fermionic()
                && x[..*k]
                    .iter()
                    .filter(|&&s| site.charge_of(s).parity())
                    .count()
                    % 2
                    == 1;
            let sign = if string { -1.0 } else { 1.0 };
            for o in 0..d {
                let v = op.get(o, x[*k]);
                if v != 0.0 {
                    let mut y = x.clone();
                    y[*k] = o;
                    next.push((y, sign * a * v));
                }
            }
        }
        current = next;
    }
    Ok(current)
}

/// A sparse matrix by columns: per column its non-zero `(row, value)` entries.
pub type SparseColumns = Vec<Vec<(usize, f64)>>;

/// The Hamiltonian of `terms` in `sector`, column by column: the basis
/// ([`sector_basis`]) and, per column, its non-zero `(row, value)` entries (rows
/// ascending, each once).
pub fn sparse_hamiltonian<S: AbelianSector>(
    terms: &Terms<S>,
    sector: &S,
) -> Result<(Vec<u64>, SparseColumns)> {
    let (site, len) = (terms.site(), terms.len());
    let basis = sector_basis(site, len, sector)?;
    let mut columns = Vec::with_capacity(basis.len());
    for &code in &basis {
        let mut column: Vec<(usize, f64)> = Vec::new();
        for term in terms.terms() {
            if term.coefficient == 0.0 {
                continue;
            }
            for (y, a) in apply(site, &term.operators, decode(code, site.dim(), len))? {
                let row = basis
                    .binary_search(&encode(&y, site.dim()))
                    .expect("a charge-conserving term stays in its sector");
                column.push((row, term.coefficient * a));
            }
        }
        column.sort_by_key(|e| e.0);
        let mut merged: Vec<(usize, f64)> = Vec::with_capacity(column.len());
        for (r, v) in column {
            match merged.last_mut() {
                Some((last, w)) if *last == r => *w += v,
                _ => merged.push((r, v)),
            }
        }
        merged.retain(|e| e.1 != 0.0);
        columns.push(merged);
    }
    Ok((basis, columns))
}

/// The dense Hamiltonian of `terms` in `sector`: the basis ([`sector_basis`]) and the
/// matrix. [`Error::TooLarge`] past [`MAX_SECTOR_DIM`].
pub fn hamiltonian<S: AbelianSector>(terms: &Terms<S>, sector: &S) -> Result<(Vec<u64>, Mat<f64>)> {
    let basis = sector_basis(terms.site(), terms.len(), sector)?;
    let n = basis.len();
    if n as u64 > MAX_SECTOR_DIM {
        return Err(Error::TooLarge {
            what: "sector Hamiltonian",
            dimension: n as u64,
            limit: MAX_SECTOR_DIM,
        });
    }
    let (basis, columns) = sparse_hamiltonian(terms, sector)?;
    let mut h = Mat::<f64>::zeros(n, n);
    for (col, entries) in columns.iter().enumerate() {
        for &(row, v) in entries {
            h[(row, col)] = v;
        }
    }
    Ok((basis, h))
}

/// The eigenvalues of `terms` in `sector`, ascending (dense, at most [`MAX_SECTOR_DIM`]
/// states).
pub fn spectrum<S: AbelianSector>(terms: &Terms<S>, sector: &S) -> Result<Vec<f64>> {
    let (_, h) = hamiltonian(terms, sector)?;
    h.self_adjoint_eigenvalues(faer::Side::Lower)
        .map_err(|e| Error::Eigensolver(format!("{e:?}")))
}

/// Sectors up to this dimension are diagonalised densely by [`ground_energy`]; larger ones
/// by Lanczos.
pub const DENSE_GROUND_ENERGY_DIM: usize = 1000;

/// The lowest eigenvalue of `terms` in `sector`: faer's dense self-adjoint eigensolver up
/// to [`DENSE_GROUND_ENERGY_DIM`] states, above that Lanczos with full
/// reorthogonalisation on the sparse matrix, restarted from its Ritz vector until the
/// residual norm is below `1e-11 (1 + |E|)` (so the energy is exact to about `1e-13`, the
/// square of the residual over the gap).
pub fn ground_energy<S: AbelianSector>(terms: &Terms<S>, sector: &S) -> Result<f64> {
    let (_, columns) = sparse_hamiltonian(terms, sector)?;
    let n = columns.len();
    if n <= DENSE_GROUND_ENERGY_DIM {
        return Ok(spectrum(terms, sector)?[0]);
    }
    lanczos_lowest(&columns)
}

/// `y = H x` for `H` stored by columns.
fn apply_sparse(columns: &[Vec<(usize, f64)>], x: &[f64]) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for (c, entries) in columns.iter().enumerate() {
        for &(r, v) in entries {
            y[r] += v * x[c];
        }
    }
    y
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The lowest eigenvalue of the symmetric sparse matrix `columns` by restarted Lanczos.
fn lanczos_lowest(columns: &[Vec<(usize, f64)>]) -> Result<f64> {
    const KRYLOV: usize = 200;
    const RESTARTS: usize = 50;
    let n = columns.len();
    // A fixed pseudo-random start (xorshift), so results are reproducible.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut v: Vec<f64> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect();
    let mut energy = f64::NAN;
    for _ in 0..RESTARTS {
        let norm = dot(&v, &v).sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        let mut basis = vec![v.clone()];
        let (mut alpha, mut beta): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
        let (value, y, residual) = loop {
            let k = basis.len() - 1;
            let mut w = apply_sparse(columns, &basis[k]);
            alpha.push(dot(&basis[k], &w));
            for _ in 0..2 {
                for b in &basis {
                    let c = dot(b, &w);
                    w.iter_mut().zip(b).for_each(|(x, y)| *x -= c * y);
                }
            }
            let b = dot(&w, &w).sqrt();
            let m = alpha.len();
            let t = Mat::<f64>::from_fn(m, m, |i, j| match i.abs_diff(j) {
                0 => alpha[i],
                1 => beta[i.min(j)],
                _ => 0.0,
            });
            let eig = t
                .self_adjoint_eigen(faer::Side::Lower)
                .map_err(|e| Error::Eigensolver(format!("{e:?}")))?;
            let value = eig.S().column_vector()[0];
            let y: Vec<f64> = (0..m).map(|i| eig.U()[(i, 0)]).collect();
            let residual = b * y[m - 1].abs();
            if residual < 1e-11 * (1.0 + value.abs()) || m >= KRYLOV.min(n) || b < 1e-300 {
                break (value, y, residual);
            }
            w.iter_mut().for_each(|x| *x /= b);
            beta.push(b);
            basis.push(w);
        };
        energy = value;
        if residual < 1e-11 * (1.0 + value.abs()) || basis.len() >= n {
            return Ok(energy);
        }
        // Restart from the Ritz vector.
        v = vec![0.0; n];
        for (b, c) in basis.iter().zip(&y) {
            v.iter_mut().zip(b).for_each(|(x, y)| *x += c * y);
        }
    }
    Err(Error::Eigensolver(format!(
        "Lanczos did not converge in {RESTARTS} restarts of {KRYLOV} vectors (last Ritz value {energy})"
    )))
}

/// The dense matrix, on the full space of `len` sites (`d^len` states, at most
/// [`MAX_FULL_DIM`]), of the product of `operators` (`(name, site)`, rightmost first;
/// charged products allowed), with the same Jordan-Wigner signs as [`hamiltonian`].
pub fn operator_matrix<S: AbelianSector>(
    site: &Site<S>,
    len: usize,
    operators: &[(&str, usize)],
) -> Result<Mat<f64>> {
    let d = site.dim();
    let n = space_dim(d, len, MAX_FULL_DIM, "operator matrix")? as usize;
    let ops: Vec<(String, usize)> = operators.iter().map(|(o, k)| (o.to_string(), *k)).collect();
    for (o, k) in &ops {
        site.operator(o)?;
        if *k >= len {
            return Err(Error::SiteOutOfRange {
                term: format!("{operators:?}"),
                site: *k,
                len,
            });
        }
    }
    let mut m = Mat::<f64>::zeros(n, n);
    for col in 0..n {
        for (y, a) in apply(site, &ops, decode(col as u64, d, len))? {
            m[(encode(&y, d) as usize, col)] += a;
        }
    }
    Ok(m)
}

/// The label of output (`o`, even) or input (`i`, odd) leg of site `k`.
fn label(k: usize, input: bool) -> char {
    char::from_u32(0x100 + 2 * k as u32 + u32::from(input)).expect("a label below the surrogates")
}

/// The dense matrix `<o|H|i>` of `mpo` on the full space (at most [`MAX_FULL_DIM`] states),
/// by contracting its tensors left to right with Tessera's contractions.
///
/// The contracted tensor has legs `(a, o_0, i_0, ..., o_{L-1}, i_{L-1}, b)`; the last
/// contraction permutes them to `(a, o_0, ..., o_{L-1}, i_{L-1}, ..., i_0, b)` (the
/// permutation carries the graded sign), which is the operator's matrix: a graded operator
/// `sum O e_o e_i*` pairs its input legs nested, so the inputs read in reverse.
pub fn mpo_matrix<S: AbelianSector>(mpo: &Mpo<S>) -> Result<Mat<f64>> {
    let len = mpo.len();
    let dims: Vec<usize> = (0..len)
        .map(|k| mpo.physical_leg(k).expect("a site").dim())
        .collect();
    let mut n: u64 = 1;
    for &d in &dims {
        n = n.saturating_mul(d as u64);
    }
    if n > MAX_FULL_DIM {
        return Err(Error::TooLarge {
            what: "MPO matrix",
            dimension: n,
            limit: MAX_FULL_DIM,
        });
    }
    let n = n as usize;
    let w = mpo.tensors();
    let mut t = w[0].duplicate();
    let mut labels: String = ['a', label(0, false), label(0, true), 'b'].iter().collect();
    for (k, wk) in w.iter().enumerate().skip(1) {
        let (bond, next) = if k % 2 == 1 { ('b', 'c') } else { ('c', 'b') };
        let wl: String = [bond, label(k, false), label(k, true), next]
            .iter()
            .collect();
        let mut out: String = labels[..labels.len() - 'b'.len_utf8()].to_string();
        out.push(label(k, false));
        out.push(label(k, true));
        out.push(next);
        if k == len - 1 {
            out = std::iter::once('a')
                .chain((0..len).map(|j| label(j, false)))
                .chain((0..len).rev().map(|j| label(j, true)))
                .chain(std::iter::once(next))
                .collect();
        }
        t = Contraction::new(&format!("{labels},{wl}->{out}"))?.apply(&t, wk)?;
        labels = out;
    }
    let dense = t.to_dense()?;
    // Column-major over (a, o_0.., i_{L-1}.., i_0, b): the row code is o's code, the column
    // index lists i_{L-1} first.
    let mut m = Mat::<f64>::zeros(n, n);
    for (at, &v) in dense.iter().enumerate() {
        if v == 0.0 {
            continue;
        }
        let (row, mut rest) = (at % n, at / n);
        let mut input = vec![0; len];
        for k in (0..len).rev() {
            input[k] = rest % dims[k];
            rest /= dims[k];
        }
        let mut code = 0usize;
        for k in (0..len).rev() {
            code = code * dims[k] + input[k];
        }
        m[(row, code)] = v;
    }
    Ok(m)
}

/// The rows and columns of `full` (a full-space matrix) on the basis codes `basis`.
pub fn restrict(full: &Mat<f64>, basis: &[u64]) -> Mat<f64> {
    Mat::from_fn(basis.len(), basis.len(), |r, c| {
        full[(basis[r] as usize, basis[c] as usize)]
    })
}
