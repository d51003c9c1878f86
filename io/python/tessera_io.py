#!/usr/bin/env python3
"""Read and write Tessera checkpoints (docs/FORMAT.md, version 1) with numpy only.

    import tessera_io
    tensors, meta = tessera_io.load("state.npz")
    t = tensors["mps/0"]
    print(t.sector_type, t.dense().shape, meta["sweep"])
    tessera_io.save("copy.npz", tensors, meta)

Command line:  tessera_io.py roundtrip IN.npz OUT.npz
reads every tensor of IN, rebuilds each from its dense array (so the dense values are what
travels), and writes OUT with the same metadata. Tessera's tests run it and compare bits.
"""

import sys
import zlib

import numpy as np

VERSION = 1
FIELDS = ["header", "sector_type", "legs", "sectors", "dims", "flux", "blocks", "offsets", "data"]


class Tensor:
    """A block-sparse tensor as stored: legs, flux, present blocks and their data."""

    def __init__(self, sector_type, n_codomain, legs, flux, blocks, block_data, dtype):
        self.sector_type = sector_type  # e.g. "U1", "Product(U1,Z2)"
        self.n_codomain = n_codomain
        self.legs = legs  # list of (direction +1/-1, [(sector words tuple, dim), ...])
        self.flux = flux  # tuple of uint32 words
        self.blocks = blocks  # list of segment-index tuples, one per present block
        self.block_data = block_data  # list of arrays, each of its block's shape
        self.dtype = np.dtype(dtype)  # float64, complex128, ...

    def ranges(self, k):
        """The index ranges, one per leg, that block k occupies in the dense tensor."""
        out = []
        for leg, seg in zip(self.legs, self.blocks[k]):
            dims = [d for _, d in leg[1]]
            start = sum(dims[:seg])
            out.append(slice(start, start + dims[seg]))
        return tuple(out)

    def dense(self):
        """The dense array (one axis per leg); zero outside the blocks."""
        shape = tuple(sum(d for _, d in leg[1]) for leg in self.legs)
        out = np.zeros(shape, dtype=self.dtype)
        for k, data in enumerate(self.block_data):
            out[self.ranges(k)] = data
        return out

    @classmethod
    def from_dense(cls, like, dense):
        """A tensor of `like`'s legs, flux and blocks whose data are cut out of `dense`."""
        data = [np.array(dense[like.ranges(k)]) for k in range(len(like.blocks))]
        return cls(like.sector_type, like.n_codomain, like.legs, like.flux, like.blocks, data,
                   like.dtype)


def _tensor_from_arrays(name, get):
    header = get("header")
    if int(header[0]) != VERSION:
        raise ValueError(f"tensor {name}: format version {header[0]}, expected {VERSION}")
    crc = 0
    for field in FIELDS:
        crc = zlib.crc32(np.ascontiguousarray(get(field)).tobytes(), crc)
    stored = int(get("checksum")[0])
    if crc != stored:
        raise ValueError(f"tensor {name}: checksum {crc:#010x} computed, {stored:#010x} stored")
    n_legs, n_codomain, words, n_blocks, n_elements = (int(x) for x in header[1:])
    dims = get("dims")
    sectors = get("sectors").reshape(len(dims), words)
    legs, at = [], 0
    for direction, n in get("legs").reshape(n_legs, 2):
        segs = [(tuple(int(w) for w in sectors[j]), int(dims[j])) for j in range(at, at + n)]
        legs.append((int(direction), segs))
        at += n
    blocks = [tuple(int(s) for s in row) for row in get("blocks").reshape(n_blocks, n_legs)]
    offsets, data = get("offsets"), get("data")
    if len(data) != n_elements or int(offsets[-1]) != n_elements:
        raise ValueError(f"tensor {name}: {len(data)} elements, header says {n_elements}")
    t = Tensor(bytes(get("sector_type")).decode(), n_codomain, legs,
               tuple(int(w) for w in get("flux")), blocks, [], data.dtype)
    for k in range(n_blocks):
        shape = tuple(legs[i][1][s][1] for i, s in enumerate(blocks[k]))
        chunk = data[int(offsets[k]):int(offsets[k + 1])]
        t.block_data.append(chunk.reshape(shape, order="F"))  # column-major blocks
    return t


def _h5_arrays(path):
    import h5py  # only for .h5 files

    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: arrays.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None)
    return {k: np.atleast_1d(v) if np.ndim(v) == 0 and k == "tessera" else v for k, v in arrays.items()}


def load(path):
    """(tensors, meta): tensors by name, and the other arrays (strings decoded) by name.
    An .h5 path is read with h5py (complex data is the compound {r, i}), any other as npz."""
    if str(path).endswith(".h5"):
        arrays = _h5_arrays(path)
    else:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
    if "tessera" not in arrays or int(arrays["tessera"][0]) != VERSION:
        raise ValueError(f"{path}: not a Tessera checkpoint of version {VERSION}")
    del arrays["tessera"]
    names = [k[: -len("/header")] for k in arrays if k.endswith("/header")]
    tensors = {n: _tensor_from_arrays(n, lambda f, n=n: arrays[f"{n}/{f}"]) for n in names}
    meta = {}
    for k, v in arrays.items():
        if not any(k.startswith(n + "/") for n in names):
            meta[k] = bytes(v).decode() if v.dtype == np.uint8 else v
    return tensors, meta


def _tensor_arrays(t):
    words = len(t.flux)
    sectors = [w for _, segs in t.legs for s, _ in segs for w in s]
    dims = [d for _, segs in t.legs for _, d in segs]
    sizes = [b.size for b in t.block_data]
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype("<i8")
    data = (np.concatenate([b.reshape(-1, order="F") for b in t.block_data])
            if t.block_data else np.zeros(0)).astype(t.dtype.newbyteorder("<"))
    a = {
        "header": np.array([VERSION, len(t.legs), t.n_codomain, words, len(t.blocks),
                            len(data)], dtype="<i8"),
        "sector_type": np.frombuffer(t.sector_type.encode(), dtype=np.uint8),
        "legs": np.array([[d, len(segs)] for d, segs in t.legs], dtype="<i8").reshape(-1, 2),
        "sectors": np.array(sectors, dtype="<u4").reshape(len(dims), words),
        "dims": np.array(dims, dtype="<i8"),
        "flux": np.array(t.flux, dtype="<u4"),
        "blocks": np.array(t.blocks, dtype="<i8").reshape(len(t.blocks), len(t.legs)),
        "offsets": offsets,
        "data": data,
    }
    crc = 0
    for field in FIELDS:
        crc = zlib.crc32(np.ascontiguousarray(a[field]).tobytes(), crc)
    a["checksum"] = np.array([crc], dtype="<u8")
    return a


def save(path, tensors, meta=None):
    """Writes tensors (name -> Tensor) and metadata (name -> array or str) to path.

    An .h5 path is written with h5py, any other as npz: np.savez writes stored
    (uncompressed) members, as the format requires. (Not atomic:
    write to a temporary name and os.replace it for that.)
    """
    arrays = {"tessera": np.array([VERSION], dtype="<i8")}
    for name, t in tensors.items():
        for field, a in _tensor_arrays(t).items():
            arrays[f"{name}/{field}"] = a
    for k, v in (meta or {}).items():
        arrays[k] = np.frombuffer(v.encode(), dtype=np.uint8) if isinstance(v, str) else v
    if str(path).endswith(".h5"):
        import h5py

        with h5py.File(path, "w") as f:
            for k, v in arrays.items():
                f.create_dataset(k, data=v)
        return
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def main(argv):
    if len(argv) != 4 or argv[1] != "roundtrip":
        print(__doc__)
        return 2
    tensors, meta = load(argv[2])
    out = {n: Tensor.from_dense(t, t.dense()) for n, t in tensors.items()}
    save(argv[3], out, meta)
    for n, t in sorted(out.items()):
        print(f"{n}: {t.sector_type}, dense shape {t.dense().shape}, {len(t.blocks)} blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
