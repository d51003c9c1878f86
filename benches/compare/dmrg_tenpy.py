"""TeNPy's two-site DMRG on the problem the `dmrg` example solves by default, for a side-by-side
time at the same energy (issue 26). Run by hand in the environment of `requirements.txt`:

    /work/venv-compare/bin/python benches/compare/dmrg_tenpy.py --sites 32 --chi 256

The spin-1/2 Heisenberg chain (J = 1, open, U(1) with Sz conserved), started from the Neel
state, two-site updates without a mixer, bond dimension at most `--chi`, stopped once a sweep
changes the energy by less than `--tol`: what `cargo run --release --example dmrg -- --sites
32 --chi 256` does. Prints the energy, the sweeps and the wall time of `dmrg.run` (the model
and the initial state are built before the clock starts).
"""

import argparse
import os
import sys
import time


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sites", type=int, default=32)
    p.add_argument("--chi", type=int, default=256)
    p.add_argument("--tol", type=float, default=1e-10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--combine", action="store_true", help="TeNPy's combine option (legs of H_eff grouped)")
    args = p.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import tenpy
    from tenpy.algorithms import dmrg
    from tenpy.models.xxz_chain import XXZChain
    from tenpy.networks.mps import MPS

    tenpy.tools.misc.setup_logging(to_stdout=None)
    model = XXZChain({"L": args.sites, "Jxx": 1.0, "Jz": 1.0, "hz": 0.0, "bc_MPS": "finite"})
    neel = ["up", "down"] * (args.sites // 2) + ["up"] * (args.sites % 2)
    psi = MPS.from_product_state(model.lat.mps_sites(), neel, bc="finite")
    params = {
        "mixer": None,
        "trunc_params": {"chi_max": args.chi, "svd_min": 1e-14},
        "max_E_err": args.tol,
        "max_sweeps": 100,
        "min_sweeps": 2,
        "combine": args.combine,
    }
    start = time.perf_counter()
    info = dmrg.run(psi, model, params)
    wall = time.perf_counter() - start
    sweeps = len(info["sweep_statistics"]["E"])
    print(f"TeNPy {tenpy.__version__}: L = {args.sites}, chi = {args.chi}, {args.threads} threads")
    print(f"E0 = {info['E']:.15f} after {sweeps} sweeps, max chi {max(psi.chi)}")
    print(f"wall {wall:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
