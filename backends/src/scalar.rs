//! The scalar types tensors hold: `f32`, `f64`, `Complex32`, `Complex64`.
//!
//! Owns: the [`Scalar`] trait, the one list of element types every kernel and every test
//! loops over. Invariant: `Scalar::Real` is the type of norms and of singular values, and
//! `conj` is the identity for real types.

use faer::traits::ComplexField;
use num_complex::Complex;
use std::fmt::{Debug, Display};
use std::ops::{Add, AddAssign, Mul, MulAssign, Neg, Sub};
use tessera_core::AnyBits;

/// An element type of a tensor (plain numbers: every bit pattern is a value, so recycled
/// temporaries need no zeroing).
pub trait Scalar:
    AnyBits
    + PartialEq
    + Debug
    + Display
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + MulAssign
{
    /// The real type of norms (`f32` or `f64`).
    type Real: Scalar<Real = Self::Real> + PartialOrd + Into<f64>;

    /// The type's name, as errors print it.
    const NAME: &'static str;
    /// Whether the type is complex.
    const IS_COMPLEX: bool;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;

    /// The complex conjugate (the identity for real types).
    fn conj(self) -> Self;
    /// `|x|^2`.
    fn abs2(self) -> Self::Real;
    /// A real number as this type.
    fn from_real(re: Self::Real) -> Self;
    /// An `f64` as this type (rounded for `f32`).
    fn from_f64(x: f64) -> Self;
    /// A complex number as this type; the imaginary part is dropped for real types.
    fn from_c64(z: Complex<f64>) -> Self;
    /// This value as a `Complex<f64>`.
    fn to_c64(self) -> Complex<f64>;
    /// The square root of a non-negative real.
    fn sqrt_real(re: Self::Real) -> Self::Real;
    /// The machine epsilon of the real type.
    fn epsilon() -> Self::Real;
}

macro_rules! real_scalar {
    ($t:ty, $name:literal) => {
        impl Scalar for $t {
            type Real = $t;
            const NAME: &'static str = $name;
            const IS_COMPLEX: bool = false;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;

            fn conj(self) -> Self {
                self
            }
            fn abs2(self) -> Self {
                self * self
            }
            fn from_real(re: Self) -> Self {
                re
            }
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn from_c64(z: Complex<f64>) -> Self {
                z.re as $t
            }
            fn to_c64(self) -> Complex<f64> {
                Complex::new(self.into(), 0.0)
            }
            fn sqrt_real(re: Self) -> Self {
                re.sqrt()
            }
            fn epsilon() -> Self {
                <$t>::EPSILON
            }
        }
    };
}

macro_rules! complex_scalar {
    ($t:ty, $name:literal) => {
        impl Scalar for Complex<$t> {
            type Real = $t;
            const NAME: &'static str = $name;
            const IS_COMPLEX: bool = true;
            const ZERO: Self = Complex::new(0.0, 0.0);
            const ONE: Self = Complex::new(1.0, 0.0);

            fn conj(self) -> Self {
                Complex::conj(&self)
            }
            fn abs2(self) -> $t {
                self.norm_sqr()
            }
            fn from_real(re: $t) -> Self {
                Complex::new(re, 0.0)
            }
            fn from_f64(x: f64) -> Self {
                Complex::new(x as $t, 0.0)
            }
            fn from_c64(z: Complex<f64>) -> Self {
                Complex::new(z.re as $t, z.im as $t)
            }
            fn to_c64(self) -> Complex<f64> {
                Complex::new(self.re.into(), self.im.into())
            }
            fn sqrt_real(re: $t) -> $t {
                re.sqrt()
            }
            fn epsilon() -> $t {
                <$t>::EPSILON
            }
        }
    };
}

real_scalar!(f32, "f32");
real_scalar!(f64, "f64");
complex_scalar!(f32, "Complex32");
complex_scalar!(f64, "Complex64");

/// A [`Scalar`] that faer computes with: faer's [`ComplexField`] with the same real type.
///
/// Implemented for every scalar (`f32`, `f64`, `Complex32`, `Complex64`). Where both traits
/// are in scope, name the real type as [`Real<T>`] (`T::Real` would be ambiguous).
pub trait Field: Scalar + ComplexField<Real = <Self as Scalar>::Real> {}

impl<T: Scalar + ComplexField<Real = <T as Scalar>::Real>> Field for T {}

/// The real type of a scalar (`f32` for `f32` and `Complex32`, `f64` otherwise).
pub type Real<T> = <T as Scalar>::Real;

#[cfg(test)]
mod tests {
    use super::*;

    fn laws<T: Scalar>(x: T) {
        assert_eq!(x.conj().conj(), x);
        let n: f64 = x.abs2().into();
        let z = x.to_c64();
        assert!((n - z.norm_sqr()).abs() <= 1e-6 * n.max(1.0));
        assert_eq!(T::from_c64(z), x);
        assert_eq!(T::ONE * x, x);
        assert_eq!(T::ZERO + x, x);
    }

    #[test]
    fn every_scalar_keeps_the_laws() {
        laws(1.5_f32);
        laws(-2.25_f64);
        laws(Complex::new(1.0_f32, -3.0));
        laws(Complex::new(0.5_f64, 2.0));
        const { assert!(<Complex<f64>>::IS_COMPLEX && !f64::IS_COMPLEX) };
        assert_eq!(Complex::new(1.0_f64, 2.0).conj(), Complex::new(1.0, -2.0));
    }

    fn is_field<T: Field>() -> usize {
        std::mem::size_of::<Real<T>>()
    }

    #[test]
    fn every_scalar_is_a_faer_field() {
        assert_eq!(is_field::<f32>(), 4);
        assert_eq!(is_field::<f64>(), 8);
        assert_eq!(is_field::<Complex<f32>>(), 4);
        assert_eq!(is_field::<Complex<f64>>(), 8);
    }
}
