//! Codecs: how sector labels and element types are written.
//!
//! Owns [`SectorCodec`] (a sector's type name and its decoding from the `u32` words that
//! [`Sector::encode`](tessera_blocks::Sector::encode) writes) and [`Element`] (an element type's npy descriptor and its
//! little-endian bytes). Invariant: `decode(encode(s)) == s` for every sector value, and
//! `decode` accepts only canonical words (so a file names exactly one tensor).

use num_complex::Complex;
use tessera_backends::Scalar;
#[cfg(test)]
use tessera_blocks::Sector;
use tessera_blocks::{AbelianSector, FermionParity, Product, Trivial, U1, Zn};

/// A sector type that can be saved: its name in files and its decoding.
pub trait SectorCodec: AbelianSector {
    /// The type name written to files (`"U1"`, `"Z2"`, `"Product(U1,FermionParity)"`, ...).
    fn type_name() -> String;
    /// The sector of exactly [`Sector::ENCODED_WORDS`](tessera_blocks::Sector::ENCODED_WORDS) words, `None` for words that encode
    /// no canonical label.
    fn decode(words: &[u32]) -> Option<Self>;
}

impl SectorCodec for Trivial {
    fn type_name() -> String {
        "Trivial".to_owned()
    }
    fn decode(words: &[u32]) -> Option<Self> {
        words.is_empty().then_some(Trivial)
    }
}

impl SectorCodec for U1 {
    fn type_name() -> String {
        "U1".to_owned()
    }
    fn decode(words: &[u32]) -> Option<Self> {
        match words {
            [w] => Some(U1(i32::from_le_bytes(w.to_le_bytes()))),
            _ => None,
        }
    }
}

impl<const N: u32> SectorCodec for Zn<N> {
    fn type_name() -> String {
        format!("Z{N}")
    }
    fn decode(words: &[u32]) -> Option<Self> {
        match words {
            [w] if *w < N => Some(Zn::new(*w)),
            _ => None,
        }
    }
}

impl SectorCodec for FermionParity {
    fn type_name() -> String {
        "FermionParity".to_owned()
    }
    fn decode(words: &[u32]) -> Option<Self> {
        match words {
            [0] => Some(FermionParity::EVEN),
            [1] => Some(FermionParity::ODD),
            _ => None,
        }
    }
}

impl<A: SectorCodec, B: SectorCodec> SectorCodec for Product<A, B> {
    fn type_name() -> String {
        format!("Product({},{})", A::type_name(), B::type_name())
    }
    fn decode(words: &[u32]) -> Option<Self> {
        if words.len() != A::ENCODED_WORDS + B::ENCODED_WORDS {
            return None;
        }
        let (a, b) = words.split_at(A::ENCODED_WORDS);
        Some(Product(A::decode(a)?, B::decode(b)?))
    }
}

/// An element type that can be saved: its npy descriptor and little-endian bytes.
pub trait Element: Scalar + Send + Sync + 'static {
    /// The npy/numpy type descriptor (`"<f8"`, `"<c16"`, ...).
    const DESCR: &'static str;
    /// Bytes per element.
    const SIZE: usize;
    /// Appends the little-endian bytes of `values` to `out`.
    fn put(values: &[Self], out: &mut Vec<u8>);
    /// The elements of `bytes` (whose length is a multiple of [`SIZE`](Self::SIZE)).
    fn get(bytes: &[u8]) -> Vec<Self>;
}

macro_rules! real_element {
    ($t:ty, $descr:literal, $cdescr:literal, $n:literal) => {
        impl Element for $t {
            const DESCR: &'static str = $descr;
            const SIZE: usize = $n;
            fn put(values: &[Self], out: &mut Vec<u8>) {
                out.reserve(values.len() * $n);
                for v in values {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            fn get(bytes: &[u8]) -> Vec<Self> {
                bytes
                    .chunks_exact($n)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunks of SIZE bytes")))
                    .collect()
            }
        }
        impl Element for Complex<$t> {
            const DESCR: &'static str = $cdescr;
            const SIZE: usize = 2 * $n;
            fn put(values: &[Self], out: &mut Vec<u8>) {
                out.reserve(values.len() * 2 * $n);
                for v in values {
                    out.extend_from_slice(&v.re.to_le_bytes());
                    out.extend_from_slice(&v.im.to_le_bytes());
                }
            }
            fn get(bytes: &[u8]) -> Vec<Self> {
                bytes
                    .chunks_exact(2 * $n)
                    .map(|c| {
                        let (re, im) = c.split_at($n);
                        Complex::new(
                            <$t>::from_le_bytes(re.try_into().expect("SIZE/2 bytes")),
                            <$t>::from_le_bytes(im.try_into().expect("SIZE/2 bytes")),
                        )
                    })
                    .collect()
            }
        }
    };
}
real_element!(f32, "<f4", "<c8", 4);
real_element!(f64, "<f8", "<c16", 8);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_blocks::Z2;

    #[test]
    fn sectors_round_trip_and_reject_non_canonical_words() {
        type P = Product<U1, Product<Z2, FermionParity>>;
        assert_eq!(P::type_name(), "Product(U1,Product(Z2,FermionParity))");
        let s: P = Product(U1(-7), Product(Z2::new(1), FermionParity::ODD));
        let mut w = Vec::new();
        s.encode(&mut w);
        assert_eq!(P::decode(&w), Some(s));
        assert_eq!(Z2::decode(&[2]), None);
        assert_eq!(FermionParity::decode(&[2]), None);
        assert_eq!(U1::decode(&[]), None);
        assert_eq!(<Complex<f64>>::DESCR, "<c16");
        assert_eq!(<Complex<f32>>::DESCR, "<c8");
    }
}
