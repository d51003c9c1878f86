#!/usr/bin/env python3
"""Plot the measurement report of a DMRG run (the JSON of `tessera_mps::observables::Report`).

Draws, in one figure:

1. the entanglement entropy profile S(bond) (von Neumann, natural log; bond b lies between
   sites b and b + 1);
2. the entanglement spectrum of the central bond: -ln(lambda^2) of every Schmidt value,
   grouped by the charge sector of the left part;
3. the one-site profiles <O_i> of every operator in the report;
4. the decay of every two-point correlation |<O_i P_j>| with the distance r = |j - i|,
   averaged over the pairs at each distance, on a logarithmic axis (a straight line is
   exponential decay);
5. the energy after each sweep, when the report has them (the distance to the final
   energy, on a logarithmic axis).

Run it on the report that the DMRG driver writes next to its summary:

    python3 examples/dmrg/plot.py report.json                 # opens a window
    python3 examples/dmrg/plot.py report.json --out fig.png   # headless, writes a file

With `--out` the script uses matplotlib's non-interactive Agg backend, so it runs without a
display (on a cluster node, in CI). Needs Python 3.8+ and matplotlib (`pip install
matplotlib`); nothing else.
"""

import argparse
import json
import math
import sys


def load(path):
    """The report as a dict, with the fields the plots read checked for presence."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    for key in ("sites", "entanglement", "one_site", "correlations"):
        if key not in report:
            raise ValueError(f"{path}: not a measurement report (no '{key}' field)")
    return report


def decay(matrix):
    """Mean |C[i][j]| over the pairs at each distance r = |j - i| >= 1: (distances, means)."""
    n = len(matrix)
    rs, means = [], []
    for r in range(1, n):
        values = [abs(matrix[i][i + r]) for i in range(n - r)]
        values += [abs(matrix[i + r][i]) for i in range(n - r)]
        rs.append(r)
        means.append(sum(values) / len(values))
    return rs, means


def plot(report, out=None):
    import matplotlib

    if out is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = report.get("sweep_energies") or []
    panels = 5 if sweeps else 4
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6), constrained_layout=True)
    title = f"L = {report['sites']}, charge {report.get('charge', '?')}"
    if report.get("energy") is not None:
        title += f", E = {report['energy']:.10g}"
    fig.suptitle(title)

    # 1. Entropy profile.
    ax = axes[0]
    bonds = [b["bond"] for b in report["entanglement"]]
    entropy = [b["entropy"] for b in report["entanglement"]]
    ax.plot(bonds, entropy, "o-", color="C0")
    ax.set_xlabel("bond b (between sites b and b + 1)")
    ax.set_ylabel("entanglement entropy S")
    ax.set_title("entropy profile")
    ax.grid(alpha=0.3)

    # 2. Entanglement spectrum of the central bond.
    ax = axes[1]
    if report["entanglement"]:
        centre = report["entanglement"][len(report["entanglement"]) // 2]
        for k, sector in enumerate(centre["spectrum"]):
            levels = [-2.0 * math.log(v) for v in sector["values"] if v > 0]
            ax.plot([k] * len(levels), levels, "_", markersize=14, color="C1")
        ax.set_xticks(range(len(centre["spectrum"])))
        ax.set_xticklabels([s["sector"] for s in centre["spectrum"]], rotation=45,
                           fontsize="small")
        ax.set_title(f"entanglement spectrum, bond {centre['bond']}")
    ax.set_xlabel("charge of the left part")
    ax.set_ylabel("-ln(lambda^2)")
    ax.grid(alpha=0.3)

    # 3. One-site profiles.
    ax = axes[2]
    for k, (name, values) in enumerate(sorted(report["one_site"].items())):
        ax.plot(range(len(values)), values, "o-", color=f"C{k}", label=f"<{name}_i>")
    ax.set_xlabel("site i")
    ax.set_ylabel("expectation value")
    ax.set_title("one-site profiles")
    if report["one_site"]:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)

    # 4. Correlation decay.
    ax = axes[3]
    drawn = False
    for k, c in enumerate(report["correlations"]):
        rs, means = decay(c["matrix"])
        points = [(r, m) for r, m in zip(rs, means) if m > 0 and math.isfinite(m)]
        if not points:
            continue
        ax.semilogy(*zip(*points), "o-", color=f"C{k}", label=f"|<{c['left']}_i {c['right']}_j>|")
        drawn = True
    ax.set_xlabel("distance r = |j - i|")
    ax.set_ylabel("mean |correlation|")
    ax.set_title("correlation decay")
    if drawn:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")

    # 5. Convergence of the sweeps.
    if sweeps:
        ax = axes[4]
        final = report["energy"] if report.get("energy") is not None else sweeps[-1]
        gaps = [(k + 1, abs(e - final)) for k, e in enumerate(sweeps) if abs(e - final) > 0]
        if gaps:
            ax.semilogy(*zip(*gaps), "o-", color="C3")
        ax.set_xlabel("sweep")
        ax.set_ylabel("|E(sweep) - E|")
        ax.set_title("convergence")
        ax.grid(alpha=0.3, which="both")

    if out is None:
        plt.show()
    else:
        fig.savefig(out, dpi=120)
        print(f"wrote {out}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Plot a DMRG measurement report (JSON): entropy profile, "
        "entanglement spectrum, one-site profiles, correlation decay, sweep convergence."
    )
    parser.add_argument("report", help="the report JSON written by the DMRG driver")
    parser.add_argument("--out", help="write the figure to this file (PNG, PDF, SVG) "
                        "instead of opening a window; runs headless")
    args = parser.parse_args(argv)
    try:
        report = load(args.report)
    except (OSError, ValueError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2
    plot(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
