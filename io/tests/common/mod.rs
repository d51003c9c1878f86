//! What the round-trip tests of tessera-io share: a tensor read back is the one written,
//! structure and dense values to the last bit.

use tessera_blocks::AsyncArray;
use tessera_io::{Checkpoint, Element, SectorCodec};

/// The bytes of `v` as the file stores them (so that equal bytes mean equal bits, NaN and
/// signed zeros included).
pub(crate) fn bytes<T: Element>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    T::put(v, &mut out);
    out
}

/// `back` holds tensor `name` with `want`'s structure and, bit for bit, its dense values.
pub(crate) fn assert_holds<T: Element, S: SectorCodec>(
    back: &Checkpoint,
    name: &str,
    want: &AsyncArray<T, S>,
) {
    let got = back.tensor::<T, S>(name).unwrap();
    assert_eq!(got.structure(), want.structure(), "{name}");
    assert_eq!(
        bytes(&got.to_dense().unwrap()),
        bytes(&want.to_dense().unwrap()),
        "{name}"
    );
}
