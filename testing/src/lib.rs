//! Test helpers shared by the workspace's tests: the ones that need no library type.
//!
//! Owns: dense comparisons with a stated tolerance ([`assert_close_each`],
//! [`assert_close_in_norm`], [`assert_close_to_max`], over the element types of [`Approx`])
//! and column-major index arithmetic ([`unravel`], [`unravel_into`], [`ravel`],
//! [`column_major_strides`]), and the launcher of the MPI tests ([`under_mpirun`],
//! [`relaunch_under_mpirun`]). Invariant: this crate depends on no Tessera crate, so any
//! crate's own unit tests can use it without building a second copy of that crate; helpers
//! that need library types (random structures, sector kinds) live in
//! `tessera_blocks::testing` instead.
//!
//! A dev-dependency only (`publish = false`).
//!
//! ```
//! use tessera_testing::{assert_close_each, ravel, unravel};
//!
//! let dims = [2, 3, 4];
//! assert_eq!(unravel(7, &dims), vec![1, 0, 1]); // first index fastest
//! assert_eq!(ravel(&[1, 0, 1], &dims), 7);
//! assert_close_each(&[1.0, 2.0 + 1e-15], &[1.0, 2.0], 1e-12, "two elements");
//! ```

#![deny(missing_docs)]

use num_complex::Complex;
use std::fmt::{self, Debug, Display};

/// An element type the comparisons take: a distance and a magnitude in `f64`.
pub trait Approx: Copy + Display {
    /// `|self - other|`, in `f64`.
    fn distance(self, other: Self) -> f64;
    /// `|self|`, in `f64`.
    fn magnitude(self) -> f64;
}

impl Approx for f64 {
    fn distance(self, other: Self) -> f64 {
        (self - other).abs()
    }
    fn magnitude(self) -> f64 {
        self.abs()
    }
}

impl Approx for f32 {
    fn distance(self, other: Self) -> f64 {
        f64::from((self - other).abs())
    }
    fn magnitude(self) -> f64 {
        f64::from(self.abs())
    }
}

impl Approx for Complex<f64> {
    fn distance(self, other: Self) -> f64 {
        (self - other).norm()
    }
    fn magnitude(self) -> f64 {
        self.norm()
    }
}

impl Approx for Complex<f32> {
    fn distance(self, other: Self) -> f64 {
        f64::from((self - other).norm())
    }
    fn magnitude(self) -> f64 {
        f64::from(self.norm())
    }
}

/// A message built only when a comparison fails: `Lazy(|| format!(..))` where building the
/// text costs more than the comparison (a random case's description, in a loop of
/// thousands).
pub struct Lazy<F: Fn() -> String>(pub F);

impl<F: Fn() -> String> Display for Lazy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&(self.0)())
    }
}

impl<F: Fn() -> String> Debug for Lazy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Display::fmt(self, f)
    }
}

/// Asserts that `got` and `want` have the same length and that every element is within
/// `tol · (1 + |want_i|)` of the wanted one: a relative bound per element, absolute near
/// zero. Panics naming `what`, the element and both values.
#[track_caller]
pub fn assert_close_each<T: Approx>(got: &[T], want: &[T], tol: f64, what: impl Display) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&x, &y)) in got.iter().zip(want).enumerate() {
        assert!(
            x.distance(y) <= tol * (1.0 + y.magnitude()),
            "{what}: element {i}: {x} != {y}"
        );
    }
}

/// Asserts that `got` and `want` have the same length and that every element is within
/// `tol · (1 + ‖want‖₂)` of the wanted one: the bound a computation that mixes all the
/// elements (a contraction, a factorization) can keep. Panics naming the element, both
/// values and `what`.
#[track_caller]
pub fn assert_close_in_norm<T: Approx>(got: &[T], want: &[T], tol: f64, what: impl Display) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want
        .iter()
        .map(|y| y.magnitude() * y.magnitude())
        .sum::<f64>()
        .sqrt();
    for (i, (&x, &y)) in got.iter().zip(want).enumerate() {
        assert!(
            x.distance(y) <= tol * (1.0 + scale),
            "element {i}: {x} != {y}\n{what}"
        );
    }
}

/// Asserts that `got` and `want` have the same length and that every element is within
/// `tol · max(1, max_j |want_j|)` of the wanted one: one absolute bound for the whole
/// slice, scaled by its largest element. Panics naming `what`, the element and both values.
#[track_caller]
pub fn assert_close_to_max<T: Approx>(got: &[T], want: &[T], tol: f64, what: impl Display) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(1.0_f64, |m, y| m.max(y.magnitude()));
    for (i, (&x, &y)) in got.iter().zip(want).enumerate() {
        assert!(
            x.distance(y) <= tol * scale,
            "{what}: element {i}: {x} vs {y}"
        );
    }
}

/// The multi-index of element `k` of a column-major array of `dims` (first index fastest).
pub fn unravel(k: usize, dims: &[usize]) -> Vec<usize> {
    let mut out = vec![0; dims.len()];
    unravel_into(k, dims, &mut out);
    out
}

/// [`unravel`] into `out` (of `dims.len()` entries), for a loop that reuses one index.
pub fn unravel_into(mut k: usize, dims: &[usize], out: &mut [usize]) {
    assert_eq!(out.len(), dims.len(), "one index per dimension");
    for (o, &d) in out.iter_mut().zip(dims) {
        *o = k % d;
        k /= d;
    }
}

/// The position of multi-index `index` in a column-major array of `dims`: the inverse of
/// [`unravel`].
pub fn ravel(index: &[usize], dims: &[usize]) -> usize {
    assert_eq!(index.len(), dims.len(), "one index per dimension");
    index
        .iter()
        .zip(dims)
        .rev()
        .fold(0, |acc, (&i, &d)| acc * d + i)
}

/// The strides, in elements, of a column-major array of `dims`: `1, d0, d0·d1, ...`.
pub fn column_major_strides(dims: &[usize]) -> Vec<isize> {
    let mut acc = 1_isize;
    dims.iter()
        .map(|&d| {
            let s = acc;
            acc *= d as isize;
            s
        })
        .collect()
}

/// Whether this process was started by `mpirun` (OpenMPI, or a PMI launcher).
pub fn under_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// Runs this test binary again under `mpirun --allow-run-as-root --oversubscribe -n N` for
/// each `N` of `sizes`, and panics if a run fails: what an MPI test without a harness does
/// when `cargo test` starts it alone (it then runs its checks once, under mpirun, on every
/// rank). Without `mpirun` it says that it skipped and returns.
///
/// # Panics
///
/// When a run fails, naming its size.
pub fn relaunch_under_mpirun(sizes: &[usize]) {
    use std::process::Command;
    let exe = std::env::current_exe().expect("this test's path");
    if Command::new("mpirun").arg("--version").output().is_err() {
        println!("skipped: mpirun not found (install openmpi-bin)");
        return;
    }
    for n in sizes {
        println!("mpirun -n {n} {}", exe.display());
        let status = Command::new("mpirun")
            .args([
                "--allow-run-as-root",
                "--oversubscribe",
                "-n",
                &n.to_string(),
            ])
            .arg(&exe)
            .status()
            .expect("mpirun starts");
        assert!(status.success(), "the checks failed on {n} ranks: {status}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unravel_and_ravel_are_inverse_and_first_index_fastest() {
        let dims = [3, 1, 4, 2];
        let n: usize = dims.iter().product();
        let strides = column_major_strides(&dims);
        assert_eq!(strides, vec![1, 3, 3, 12]);
        for k in 0..n {
            let idx = unravel(k, &dims);
            assert!(idx.iter().zip(&dims).all(|(i, d)| i < d), "{idx:?}");
            assert_eq!(ravel(&idx, &dims), k);
            let by_strides: isize = idx.iter().zip(&strides).map(|(&i, s)| i as isize * s).sum();
            assert_eq!(by_strides, k as isize);
        }
        assert_eq!(unravel(1, &dims), vec![1, 0, 0, 0]);
        assert_eq!(unravel(3, &dims), vec![0, 0, 1, 0]);
        assert_eq!(unravel(0, &[]), Vec::<usize>::new());
        assert_eq!(ravel(&[], &[]), 0);
    }

    #[test]
    fn close_within_the_bound_passes() {
        let want = [1.0, -2.0, 0.0];
        assert_close_each(&[1.0 + 1e-13, -2.0, 1e-13], &want, 1e-12, "each");
        assert_close_in_norm(&[1.0, -2.0 + 2e-12, 0.0], &want, 1e-12, "norm");
        assert_close_to_max(&[1.0, -2.0, 1.5e-12], &want, 1e-12, "max");
        let z = [Complex::new(1.0_f32, 1.0)];
        assert_close_each(&z, &z, 0.0, "complex, exact");
    }

    #[test]
    #[should_panic(expected = "each: element 1: 2.00001 != 2")]
    fn close_each_fails_past_the_bound() {
        assert_close_each(&[1.0, 2.00001], &[1.0, 2.0], 1e-12, "each");
    }

    #[test]
    #[should_panic(expected = "element 0")]
    fn close_in_norm_fails_past_the_bound() {
        // ‖want‖ = 5: a bound of 6e-12 is passed by 1e-11.
        assert_close_in_norm(&[3.0 + 1e-11, 4.0], &[3.0, 4.0], 1e-12, "norm");
    }

    #[test]
    #[should_panic(expected = "max: element 2")]
    fn close_to_max_fails_past_the_bound() {
        // The largest wanted element is 4: a bound of 4e-12 everywhere, 0 included.
        assert_close_to_max(&[3.0, 4.0, 5e-12], &[3.0, 4.0, 0.0], 1e-12, "max");
    }

    #[test]
    #[should_panic(expected = "lengths")]
    fn different_lengths_fail() {
        assert_close_each(&[1.0], &[1.0, 2.0], 1e-12, "each");
    }

    #[test]
    fn a_lazy_message_is_built_only_on_failure() {
        let built = std::cell::Cell::new(0);
        let what = Lazy(|| {
            built.set(built.get() + 1);
            "case".to_owned()
        });
        assert_close_in_norm(&[1.0], &[1.0], 1e-12, &what);
        assert_eq!(built.get(), 0);
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_close_in_norm(&[2.0], &[1.0], 1e-12, &what)
        }));
        assert!(failed.is_err());
        assert!(built.get() >= 1);
    }
}
