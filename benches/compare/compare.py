#!/usr/bin/env python3
"""Peer comparison for Tessera's ``contract/heff/chi{chi}`` criterion bench.

Run by hand, never in CI (see ``README.md`` next to this file for the set-up).

What is timed
-------------
The DMRG two-site effective Hamiltonian applied to a two-site wave function,
``H_eff theta = LP * theta * W0 * W1 * RP``, on the U(1) Heisenberg structures of
``benches/data/heff_heisenberg_chi{chi}.json``: the very files and the very
contraction chain that ``benches/contract.rs`` (``load_heff`` / ``apply_heff``)
runs for Tessera. Each file holds

- ``operands``: ``LP``, ``W0``, ``W1``, ``RP``, ``theta``, each with ``legs``
  (``label``, ``dir`` = +1/-1, ``sectors`` = ``[[charge, dim], ...]``) and ``flux``;
- ``rule``: a block (one sector per leg) is stored when
  ``sum(dir * charge) == flux``;
- ``chain``: steps ``[x, y, labels_of_x, labels_of_y]``, ``"T"`` being the running
  result; each step is a tensordot over the labelled legs, the output legs being
  the leftover legs of ``x`` then those of ``y``.

Every operand is filled with random normal blocks (numpy, seeded), and the *same*
block data is handed to every peer:

- ``tenpy``: TeNPy's ``tenpy.linalg.np_conserved.Array`` (U(1) ``ChargeInfo([1])``,
  ``LegCharge.from_qind`` with the file's sector order, ``qconj`` = ``dir``), chain
  run with ``npc.tensordot``; TeNPy's ``TwoSiteH`` (``combine=False``) runs the
  same order LP*theta, W0, W1, RP.
- ``symmray``: ``symmray.U1Array`` (block-sparse "sparse" layout, a dict of
  blocks; ``BlockIndex(chargemap, dual=(dir == -1))``), chain run with
  ``symmray.tensordot`` in its default mode (``"auto"``, i.e. ``"fused"`` for any
  contraction over at least one leg).
- ``symmray-packed``: ``symmray.U1ArrayPacked`` (all blocks in one buffer, cached
  contraction plans, own thread pool; numba kernels when numba is installed,
  else numpy ones), converted from the ``symmray`` arrays with
  ``U1ArrayPacked.from_blocksparse``.
- ``dense``: one square numpy GEMM ``C = A @ B`` with ``n = round((flops / 2) **
  (1/3))``, the size ``dense_baseline`` in ``benches/contract.rs`` uses for the
  Tessera bench's own ``dense_faer_same_flops`` reference.

Only the chain of tensordots is timed (inputs built beforehand, result not
transposed back to ``(vL, p0, p1, vR)``; Tessera's bench does not transpose either).

Flops
-----
Counted here from the structures alone, the way Tessera's ``Plan::flops`` counts
them: for every step, the sum over pairs of blocks that meet on the contracted
sectors of ``2 m n k``. Tessera's intermediate results hold every block the rule
allows (some of them never written, i.e. zero), and those blocks take part in the
next step; the count with intermediates holding only the blocks some pair
produced (what TeNPy computes) is reported too (``flops_produced``): it is a few
hundred flops smaller. GFLOP/s columns use Tessera's count for every peer, so they
compare with criterion's ``elem/s`` for ``contract/heff/chi{chi}``.

Correctness
-----------
For the chi values given by ``--check-chi`` (default 128), the results of all
peers are compared block by block with each other and with a dense numpy
``np.tensordot`` chain over the densified operands (relative Frobenius error;
the run fails above ``--check-tol``). Stored element counts of every operand are
checked against the count of blocks allowed by the rule (what Tessera stores).

Threads
-------
``--threads N`` (default 2, as ``Runtime::new(2)`` in the Rust bench) sets
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``,
``NUMBA_NUM_THREADS`` and ``SYMMRAY_NUM_THREADS`` before numpy is imported, and
the thread pools that threadpoolctl reports are printed.

Example::

    /work/venv-compare/bin/python benches/compare/compare.py --chi 128 256 512 1024 \
        --json /tmp/heff_compare.json
"""

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.normpath(os.path.join(HERE, "..", "data"))
DEFAULT_REPS = {128: 30, 256: 30, 512: 20, 1024: 10}
ALL_PEERS = ("tenpy", "symmray", "symmray-packed", "numba-packed", "dense")

# Filled in by ``import_libraries`` once the thread variables are set.
np = None
npc = None
sr = None


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Time TeNPy and symmray (and a dense numpy GEMM) on the H_eff "
        "structures of Tessera's contract/heff/chi{chi} bench.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--chi", type=int, nargs="+", default=[128, 256, 512, 1024],
                   help="bond dimensions (benches/data/heff_heisenberg_chi{chi}.json)")
    p.add_argument("--files", nargs="+", default=None, metavar="NAME",
                   help="other structure files in --data to time instead of --chi (for "
                   "example block_gemm_u1_41.json, the workload of "
                   "contract/block_gemm/u1_41_upto32); each is cross-checked, and "
                   "timed 200 times unless --reps says otherwise")
    p.add_argument("--threads", type=int, default=2,
                   help="BLAS / OpenMP / numba / symmray threads")
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions per peer and chi (default: "
                   + ", ".join(f"{c}: {r}" for c, r in DEFAULT_REPS.items())
                   + "; 5 for other chi)")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed runs per peer and chi before timing (numba compiles "
                   "symmray-packed's kernels on the first)")
    p.add_argument("--peers", nargs="+", default=list(ALL_PEERS), choices=ALL_PEERS,
                   help="what to time")
    p.add_argument("--check-chi", type=int, nargs="*", default=[128],
                   help="chi values whose results are cross-checked between peers and "
                   "against a dense numpy chain (nothing: no check)")
    p.add_argument("--check-tol", type=float, default=1e-12,
                   help="largest relative Frobenius error the cross-check accepts")
    p.add_argument("--seed", type=int, default=1234, help="seed of the random blocks")
    p.add_argument("--data", default=DEFAULT_DATA, help="folder of the structure files")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="also write machine info and results as JSON to PATH")
    return p.parse_args(argv)


def set_threads(n):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS", "SYMMRAY_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        os.environ[var] = str(n)


def import_libraries(peers):
    """Import numpy and the peers (after ``set_threads``)."""
    global np, npc, sr
    import numpy
    np = numpy
    if "tenpy" in peers:
        import tenpy.linalg.np_conserved as _npc
        npc = _npc
    if "symmray" in peers or "symmray-packed" in peers:
        import symmray as _sr
        sr = _sr


# --------------------------------------------------------------------------- #
# Structures (pure Python: no peer involved)
# --------------------------------------------------------------------------- #


class Leg:
    """One leg: its label, direction (+1 / -1) and sectors ``[(charge, dim)]`` in
    the order of the file."""

    __slots__ = ("label", "dir", "sectors")

    def __init__(self, label, dir, sectors):
        self.label = label
        self.dir = int(dir)
        self.sectors = [(int(c), int(d)) for c, d in sectors]

    @property
    def dim(self):
        return sum(d for _, d in self.sectors)

    def offsets(self):
        """Charge -> (start, dim) along the leg, in the file's sector order."""
        out, start = {}, 0
        for c, d in self.sectors:
            out[c] = (start, d)
            start += d
        return out


class Structure:
    """Legs, flux and stored blocks (charges tuple -> shape) of one tensor."""

    def __init__(self, legs, flux, blocks=None):
        self.legs = list(legs)
        self.flux = int(flux)
        self.blocks = allowed_blocks(self.legs, self.flux) if blocks is None else blocks

    @property
    def labels(self):
        return [leg.label for leg in self.legs]

    def elements(self):
        return sum(math.prod(s) for s in self.blocks.values())


def allowed_blocks(legs, flux):
    """Every block the rule allows: charges tuple -> shape, in file order."""
    out = {}
    for combo in itertools.product(*(leg.sectors for leg in legs)):
        if sum(leg.dir * c for leg, (c, _) in zip(legs, combo)) == flux:
            out[tuple(c for c, _ in combo)] = tuple(d for _, d in combo)
    return out


def load_structure(path):
    """The operands (name -> Structure) and chain of one structure file."""
    with open(path) as f:
        data = json.load(f)
    operands = {}
    for name, op in data["operands"].items():
        legs = [Leg(l["label"], l["dir"], l["sectors"]) for l in op["legs"]]
        operands[name] = Structure(legs, op["flux"][0])
    chain = [(x, y, list(ax), list(ay)) for x, y, ax, ay in data["chain"]]
    return data, operands, chain


def plan_chain(operands, chain):
    """Walk the chain on structures alone.

    Returns a list of steps ``(x, y, axes_x, axes_y)`` with integer axes, the flop
    counts (``tessera``: intermediates hold every allowed block, as Tessera's;
    ``produced``: only blocks some pair wrote, as TeNPy's), per-step flops (Tessera
    count) and the final structure (every allowed block).
    """
    steps, per_step = [], []
    totals = {"tessera": 0, "produced": 0}
    running = {"tessera": None, "produced": None}
    for x, y, ax, ay in chain:
        for mode in ("tessera", "produced"):
            a = running[mode] if x == "T" else operands[x]
            b = running[mode] if y == "T" else operands[y]
            ia = [a.labels.index(l) for l in ax]
            ib = [b.labels.index(l) for l in ay]
            fa = [i for i in range(len(a.legs)) if i not in ia]
            fb = [j for j in range(len(b.legs)) if j not in ib]
            for i, j in zip(ia, ib):
                la, lb = a.legs[i], b.legs[j]
                if la.dir != -lb.dir or la.sectors != lb.sectors:
                    raise ValueError(f"legs {la.label} and {lb.label} do not contract")
            by_key = {}
            for s, shape in b.blocks.items():
                by_key.setdefault(tuple(s[j] for j in ib), []).append((s, shape))
            flops, produced = 0, {}
            for s, shape in a.blocks.items():
                m = math.prod(shape[i] for i in fa)
                k = math.prod(shape[i] for i in ia)
                for s2, shape2 in by_key.get(tuple(s[i] for i in ia), ()):
                    n = math.prod(shape2[j] for j in fb)
                    flops += 2 * m * n * k
                    key = tuple(s[i] for i in fa) + tuple(s2[j] for j in fb)
                    produced[key] = tuple(shape[i] for i in fa) + tuple(shape2[j] for j in fb)
            legs = [a.legs[i] for i in fa] + [b.legs[j] for j in fb]
            flux = a.flux + b.flux
            out = Structure(legs, flux) if mode == "tessera" else Structure(legs, flux, produced)
            running[mode] = out
            totals[mode] += flops
            if mode == "tessera":
                per_step.append(flops)
                steps.append((x, y, tuple(ia), tuple(ib)))
    return steps, totals, per_step, running["tessera"]


# --------------------------------------------------------------------------- #
# Data: one set of random blocks, handed to every peer
# --------------------------------------------------------------------------- #


def random_blocks(operands, seed):
    """name -> {charges: C-contiguous float64 block}, seeded per operand."""
    out = {}
    for i, (name, s) in enumerate(operands.items()):
        rng = np.random.default_rng([seed, i])
        out[name] = {key: rng.standard_normal(shape) for key, shape in s.blocks.items()}
    return out


def to_dense(legs, blocks):
    """Dense array (file sector order on every leg) from a block dict."""
    offs = [leg.offsets() for leg in legs]
    dense = np.zeros([leg.dim for leg in legs])
    for key, block in blocks.items():
        idx = tuple(slice(o[c][0], o[c][0] + o[c][1]) for o, c in zip(offs, key))
        dense[idx] = block
    return dense


# --------------------------------------------------------------------------- #
# Peers: build operands, run the chain, read blocks back
# --------------------------------------------------------------------------- #


def run_chain(tensordot, arrays, steps):
    t = None
    for x, y, ia, ib in steps:
        a = t if x == "T" else arrays[x]
        b = t if y == "T" else arrays[y]
        t = tensordot(a, b, (ia, ib))
    return t


class TenpyPeer:
    name = "tenpy"

    def __init__(self, operands, blocks):
        self.chinfo = npc.ChargeInfo([1], ["2Sz"])
        self.arrays = {}
        for name, s in operands.items():
            legs = [self.leg(l) for l in s.legs]
            arr = npc.Array(legs, dtype=np.float64, qtotal=[s.flux])
            pos = [{c: q for q, (c, _) in enumerate(l.sectors)} for l in s.legs]
            for key, block in blocks[name].items():
                qind = np.array([p[c] for p, c in zip(pos, key)], dtype=np.intp)
                arr.get_block(qind, insert=True)[...] = block
            arr.isort_qdata()
            arr.test_sanity()
            self.arrays[name] = arr

    def leg(self, leg):
        slices = np.cumsum([0] + [d for _, d in leg.sectors]).astype(np.intp)
        charges = np.array([[c] for c, _ in leg.sectors], dtype=np.int_)
        return npc.LegCharge.from_qind(self.chinfo, slices, charges, qconj=leg.dir)

    def run(self, steps):
        return run_chain(lambda a, b, axes: npc.tensordot(a, b, axes=axes), self.arrays, steps)

    @staticmethod
    def blocks(result):
        out = {}
        for qind, block in zip(result._qdata, result._data):
            key = tuple(int(leg.charges[q][0]) for leg, q in zip(result.legs, qind))
            out[key] = np.asarray(block)
        return out

    @staticmethod
    def stored(arr):
        return int(sum(b.size for b in arr._data))


class SymmrayPeer:
    name = "symmray"

    def __init__(self, operands, blocks):
        self.arrays = {}
        for name, s in operands.items():
            indices = tuple(
                sr.BlockIndex(chargemap={c: d for c, d in l.sectors}, dual=(l.dir == -1))
                for l in s.legs
            )
            arr = sr.U1Array(
                indices=indices,
                charge=s.flux,
                blocks={k: b.copy() for k, b in blocks[name].items()},
            )
            arr.check()
            self.arrays[name] = arr

    def run(self, steps):
        return run_chain(lambda a, b, axes: sr.tensordot(a, b, axes=axes), self.arrays, steps)

    @staticmethod
    def blocks(result):
        return {tuple(int(c) for c in k): np.asarray(b)
                for k, b in result.get_sector_block_pairs()}

    @staticmethod
    def stored(arr):
        return int(sum(np.size(b) for _, b in arr.get_sector_block_pairs()))


class SymmrayPackedPeer(SymmrayPeer):
    name = "symmray-packed"

    def __init__(self, operands, blocks):
        sparse = SymmrayPeer(operands, blocks)
        self.arrays = {n: sr.U1ArrayPacked.from_blocksparse(a) for n, a in sparse.arrays.items()}
        for a in self.arrays.values():
            a.check()

    @staticmethod
    def blocks(result):
        return SymmrayPeer.blocks(result.to_blocksparse())

    @staticmethod
    def stored(arr):
        return SymmrayPeer.stored(arr.to_blocksparse())


class NumbaPackedPeer:
    """A hand-written block-sparse matrix product, as a code without a tensor library writes
    it: the blocks of A, B and C packed in one flat array each, one numba-parallel loop over
    the blocks of C, each block product an explicit loop nest that numba vectorises. Only
    for one-step chains of two matrices (``A(a, b) B(b, c)``), so not run on H_eff."""

    name = "numba-packed"
    _kernel = None

    @staticmethod
    def supports(operands, chain):
        if len(chain) != 1 or not all(len(s.legs) == 2 for s in operands.values()):
            return False
        x, y, ax, ay = chain[0]
        return ax == [operands[x].labels[1]] and ay == [operands[y].labels[0]]

    @classmethod
    def kernel(cls):
        if cls._kernel is None:
            import numba

            @numba.njit(parallel=True, fastmath=True)
            def product(a, b, c, starts, pairs):
                for ci in numba.prange(len(starts) - 1):
                    for p in range(starts[ci], starts[ci + 1]):
                        oa, ob, oc, m, k, n = pairs[p]
                        x = a[oa:oa + m * k].reshape((m, k))
                        y = b[ob:ob + k * n].reshape((k, n))
                        z = c[oc:oc + m * n].reshape((m, n))
                        if p == starts[ci]:
                            z[:, :] = 0.0
                        for i in range(m):
                            for l in range(k):
                                v = x[i, l]
                                for j in range(n):
                                    z[i, j] += v * y[l, j]

            cls._kernel = product
        return cls._kernel

    def __init__(self, operands, blocks):
        (xa, a), (xb, b) = list(operands.items())[:2]

        def pack(bl):
            keys = list(bl)
            offs = np.cumsum([0] + [bl[k].size for k in keys])
            flat = np.concatenate([bl[k].ravel() for k in keys]) if keys else np.zeros(0)
            return flat, dict(zip(keys, offs[:-1].tolist()))

        self.a, offa = pack(blocks[xa])
        self.b, offb = pack(blocks[xb])
        by_c = {}
        for (qa, qk), blk in blocks[xa].items():
            for (qk2, qc), blk2 in blocks[xb].items():
                if qk2 == qk:
                    by_c.setdefault((qa, qc), []).append(
                        (offa[(qa, qk)], offb[(qk2, qc)], blk.shape[0], blk.shape[1],
                         blk2.shape[1]))
        pairs, starts, self.c_keys, oc = [], [0], [], 0
        for key, ps in by_c.items():
            m, n = ps[0][2], ps[0][4]
            self.c_keys.append((key, oc, (m, n)))
            pairs += [(p[0], p[1], oc, p[2], p[3], p[4]) for p in ps]
            starts.append(len(pairs))
            oc += m * n
        self.pairs = np.array(pairs, dtype=np.int64).reshape(-1, 6)
        self.starts = np.array(starts, dtype=np.int64)
        self.c = np.zeros(oc)
        self.arrays = {xa: self.a, xb: self.b}

    def run(self, steps):
        self.kernel()(self.a, self.b, self.c, self.starts, self.pairs)
        return self

    def blocks(self, result=None):
        return {key: self.c[o:o + m * n].reshape(m, n).copy() for key, o, (m, n) in self.c_keys}

    def stored(self, arr):
        return int(arr.c.size if arr is self else arr.size)


PEER_CLASSES = {"tenpy": TenpyPeer, "symmray": SymmrayPeer, "symmray-packed": SymmrayPackedPeer,
                "numba-packed": NumbaPackedPeer}


# --------------------------------------------------------------------------- #
# Timing
# --------------------------------------------------------------------------- #


def time_it(fn, reps, warmup):
    """Seconds of ``reps`` calls of ``fn`` (after ``warmup`` untimed ones)."""
    import gc
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        r = fn()
        times.append(time.perf_counter() - t0)
        del r
    return times


def dense_gemm(flops, reps, warmup, seed):
    n = max(1, round((flops / 2) ** (1 / 3)))
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    c = np.empty((n, n))
    times = time_it(lambda: np.matmul(a, b, out=c), reps, warmup)
    return n, 2 * n**3, times


def rel_err(x, y):
    """Relative Frobenius distance of two block dicts (missing blocks are zero)."""
    num = den = 0.0
    for key in set(x) | set(y):
        bx, by = x.get(key), y.get(key)
        if bx is None:
            bx = np.zeros_like(by)
        if by is None:
            by = np.zeros_like(bx)
        num += float(np.sum((bx - by) ** 2))
        den += float(np.sum(by**2))
    return math.sqrt(num / den) if den else math.sqrt(num)


def cross_check(chi, operands, blocks, steps, final, peers, results, tol):
    """Compare every peer's result with a dense numpy chain and with each other."""
    dense = {name: to_dense(s.legs, blocks[name]) for name, s in operands.items()}
    ref = run_chain(lambda a, b, axes: np.tensordot(a, b, axes=axes), dense, steps)
    report = {"chi": chi, "vs_dense": {}, "pairwise": {}, "stored_elements": {}}
    got = {p.name: p.blocks(results[p.name]) for p in peers}
    ok = True
    for name, bl in got.items():
        # Every stored block lies in the rule's structure; then compare densely.
        extra = set(bl) - set(final.blocks)
        if extra:
            ok = False
            print(f"  {name}: blocks outside the rule: {sorted(extra)[:4]}")
        err = float(np.linalg.norm(to_dense(final.legs, bl) - ref) / np.linalg.norm(ref))
        report["vs_dense"][name] = err
        ok &= err <= tol
    names = list(got)
    for i, j in itertools.combinations(range(len(names)), 2):
        err = rel_err(got[names[i]], got[names[j]])
        report["pairwise"][f"{names[i]} vs {names[j]}"] = err
        ok &= err <= tol
    # Stored elements of the inputs: all three must store exactly the rule's blocks.
    for p in peers:
        report["stored_elements"][p.name] = {n: p.stored(a) for n, a in p.arrays.items()}
    report["stored_elements"]["rule (Tessera)"] = {n: s.elements() for n, s in operands.items()}
    for p in peers:
        if report["stored_elements"][p.name] != report["stored_elements"]["rule (Tessera)"]:
            ok = False
            print(f"  {p.name}: stored elements differ from the rule's")
    report["result_elements"] = {
        "rule (Tessera)": final.elements(),
        **{name: int(sum(b.size for b in bl.values())) for name, bl in got.items()},
    }
    report["ok"] = bool(ok)
    return report


# --------------------------------------------------------------------------- #
# Machine info
# --------------------------------------------------------------------------- #


def machine_info(threads):
    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "threads": threads, "cpus_online": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
        info["simd"] = [x for x in ("avx2", "fma", "avx512f") if x in flags]
    except OSError:
        pass
    try:
        with open("/proc/loadavg") as f:
            info["loadavg_start"] = f.read().split()[:3]
    except OSError:
        pass
    versions = {"numpy": np.__version__}
    try:
        from importlib.metadata import version
        for pkg in ("physics-tenpy", "symmray", "numba", "scipy", "threadpoolctl"):
            try:
                versions[pkg] = version(pkg)
            except Exception:
                versions[pkg] = None
    except ImportError:
        pass
    info["versions"] = versions
    # numpy's BLAS, from its build config (numpy >= 1.25 returns a dict).
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        info["numpy_blas"] = f"{blas.get('name')} {blas.get('version')}"
        if blas.get("openblas configuration"):
            info["numpy_blas"] += f" ({blas['openblas configuration']})"
    except Exception as e:  # pragma: no cover - older numpy
        info["numpy_blas"] = f"unknown ({e})"
    try:
        from threadpoolctl import threadpool_info
        info["threadpools"] = [
            {k: p.get(k) for k in ("user_api", "internal_api", "num_threads", "version",
                                   "architecture")}
            for p in threadpool_info()
        ]
    except ImportError:
        info["threadpools"] = None
    if npc is not None:
        from tenpy.tools import optimization
        info["tenpy_cython"] = bool(optimization.have_cython_functions)
        info["tenpy_cython_mkl"] = bool(optimization.compiled_with_MKL)
        # The block-pair loop of npc.tensordot: compiled when it comes from _npc_helper.
        info["tenpy_tensordot_worker"] = getattr(npc._tensordot_worker, "__module__", "?")
    if sr is not None:
        try:
            from symmray.packed.kernels import get_kernels_name
            from symmray.packed.parallel import get_num_threads
            info["symmray_packed_kernels"] = get_kernels_name()
            info["symmray_packed_threads"] = get_num_threads()
        except Exception as e:  # pragma: no cover
            info["symmray_packed_kernels"] = f"unknown ({e})"
    return info


def print_info(info):
    print("## Machine")
    print(f"- CPU: {info.get('cpu')} ({info.get('cpus_online')} online, SIMD "
          f"{', '.join(info.get('simd', []))}), load average at start "
          f"{' '.join(info.get('loadavg_start', []))}")
    print(f"- Python {info['python']} on {info['platform']}")
    print(f"- threads: {info['threads']} (OMP/OPENBLAS/MKL/NUMBA/SYMMRAY_NUM_THREADS)")
    print(f"- numpy BLAS: {info['numpy_blas']}")
    for p in info.get("threadpools") or []:
        print(f"  - threadpool {p['internal_api']} ({p['user_api']}) "
              f"{p['version']} {p.get('architecture')}: {p['num_threads']} threads")
    print("- versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    if "tenpy_cython" in info:
        print(f"- TeNPy compiled Cython helpers (_npc_helper) loaded: {info['tenpy_cython']}"
              f" (with MKL: {info['tenpy_cython_mkl']}); npc._tensordot_worker from "
              f"{info['tenpy_tensordot_worker']}")
    if "symmray_packed_kernels" in info:
        print(f"- symmray packed kernels: {info['symmray_packed_kernels']}, "
              f"{info.get('symmray_packed_threads')} threads")
    print()


# --------------------------------------------------------------------------- #


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    import_libraries(args.peers + (["tenpy", "symmray"] if args.check_chi else []))
    info = machine_info(args.threads)
    print_info(info)

    out = {"machine": info, "args": vars(args), "results": [], "checks": []}
    all_ok = True
    if args.files:
        targets = [(os.path.splitext(f)[0], os.path.join(args.data, f)) for f in args.files]
    else:
        targets = [(chi, os.path.join(args.data, f"heff_heisenberg_chi{chi}.json"))
                   for chi in args.chi]
    for chi, path in targets:
        raw, operands, chain = load_structure(path)
        steps, flops, per_step, final = plan_chain(operands, chain)
        reps = args.reps or (200 if args.files else DEFAULT_REPS.get(chi, 5))
        print(f"### chi {chi}: {raw.get('source', '')}")
        print(f"flops {flops['tessera']:,} (Tessera's count; per step "
              f"{', '.join(f'{f:,}' for f in per_step)}), produced-only "
              f"{flops['produced']:,}; operand elements "
              + ", ".join(f"{n} {s.elements():,}" for n, s in operands.items()))
        t0 = time.perf_counter()
        blocks = random_blocks(operands, args.seed)
        peers, results = [], {}
        check = bool(args.files) or chi in (args.check_chi or [])
        names = [p for p in args.peers if p != "dense"
                 and (p != "numba-packed" or NumbaPackedPeer.supports(operands, chain))]
        if check:
            names = list(dict.fromkeys(names + ["tenpy", "symmray"]))
        for name in names:
            peers.append(PEER_CLASSES[name](operands, blocks))
        print(f"(built operands in {time.perf_counter() - t0:.2f} s)")
        if check:
            for p in peers:
                results[p.name] = p.run(steps)
            report = cross_check(chi, operands, blocks, steps, final, peers, results,
                                 args.check_tol)
            all_ok &= report["ok"]
            out["checks"].append(report)
            print(f"cross-check ({'OK' if report['ok'] else 'FAILED'}, tol "
                  f"{args.check_tol:g}): vs dense numpy chain "
                  + ", ".join(f"{k} {v:.1e}" for k, v in report["vs_dense"].items())
                  + "; pairwise "
                  + ", ".join(f"{k} {v:.1e}" for k, v in report["pairwise"].items()))
            print(f"stored elements: inputs equal the rule's for every peer: "
                  f"{all(report['stored_elements'][p.name] == report['stored_elements']['rule (Tessera)'] for p in peers)}"
                  f"; result " + ", ".join(f"{k} {v:,}" for k, v in report["result_elements"].items()))
            results.clear()
        for p in peers:
            if p.name not in args.peers:
                continue
            times = time_it(lambda: p.run(steps), reps, args.warmup)
            out["results"].append(row(chi, p.name, flops["tessera"], flops["produced"], times))
            print(f"  {p.name:15s} median {1e3 * statistics.median(times):9.3f} ms  "
                  f"best {1e3 * min(times):9.3f} ms  ({reps} reps)")
        del peers
        if "dense" in args.peers:
            n, dflops, times = dense_gemm(flops["tessera"], reps, args.warmup, args.seed)
            r = row(chi, "dense", dflops, dflops, times)
            r["n"] = n
            out["results"].append(r)
            print(f"  {'dense':15s} median {1e3 * statistics.median(times):9.3f} ms  "
                  f"best {1e3 * min(times):9.3f} ms  (n = {n}, {dflops:,} flops)")
        print()

    try:
        with open("/proc/loadavg") as f:
            info["loadavg_end"] = f.read().split()[:3]
    except OSError:
        pass
    print_table(out["results"], args.peers)
    if "loadavg_end" in info:
        print(f"\nload average at end: {' '.join(info['loadavg_end'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json}")
    if not all_ok:
        print("CROSS-CHECK FAILED", file=sys.stderr)
        return 1
    return 0


def row(chi, peer, flops, flops_produced, times):
    med, best = statistics.median(times), min(times)
    return {
        "chi": chi, "peer": peer, "reps": len(times), "flops": flops,
        "flops_produced": flops_produced, "median_ms": 1e3 * med, "best_ms": 1e3 * best,
        "gflops_median": flops / med * 1e-9, "gflops_best": flops / best * 1e-9,
        "times_ms": [1e3 * t for t in times],
    }


def print_table(rows, peers):
    print("## Results (ms: median / best; GFLOP/s from the median)")
    print()
    print("| chi | peer | flops | median ms | best ms | GFLOP/s | x dense (median) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    dense = {r["chi"]: r for r in rows if r["peer"] == "dense"}
    for r in rows:
        d = dense.get(r["chi"])
        ratio = f"{r['median_ms'] / d['median_ms']:.2f}" if d else "-"
        name = r["peer"] + (f" (n={r['n']})" if r["peer"] == "dense" else "")
        print(f"| {r['chi']} | {name} | {r['flops']:,} | {r['median_ms']:.3f} | "
              f"{r['best_ms']:.3f} | {r['gflops_median']:.2f} | {ratio} |")


if __name__ == "__main__":
    sys.exit(main())
