"""Coverage of the tuning intervals the report shows, in simulated worlds with a known truth.

The worlds are calibrated from the default study's ArcFace search at 7162b85 (32 random-search trials, MAP@R on
160 glyph classes) and its 10 Fixed AdaCos seeds (tests/data/coverage_world.csv): tuning pays after about two
trials, breaks even late (beyond the trials an interval is valid for) or never pays. Each simulated study draws
N trials and R reference runs; the table gives, per world, interval and n, the share of studies whose 95%
interval held the truth with its Monte Carlo error, and the mean width against the estimate's real spread
(2 · 1.96 · its sd over the studies). The earlier percentile bootstrap is measured beside, for contrast.
It also measures the decision rule: how often `recommend` says "tune" in studies of 10 seeds with no gain, half
the margin and twice the margin, and how often a Dynamic − Fixed AdaCos difference of a fifth of the margin
changes its recommendation (benchmarks/results/decisions.csv).

    python benchmarks/coverage.py [--studies 500] [--out benchmarks/results/coverage.csv]

Two designs are simulated: one split of 32 trials and 10 reference runs (the default study at 7162b85), and four
splits of 12 trials and 2 reference runs each (the default study now). `--only coverage` or `--only decisions`
runs one part; `--only verdict` measures the verdict's own interval (tuned ArcFace − Fixed AdaCos, paired over seeds or
over class splits) in benchmarks/results/verdict_coverage.csv.
"""

import argparse
import time
from pathlib import Path

import pandas as pd

from study.analysis.coverage import CALIBRATED_SPREAD, coverage_table, decision_rates, verdict_interval_coverage
from study.config import AnalysisConfig

WORLD = Path(__file__).resolve().parents[1] / "tests" / "data" / "coverage_world.csv"
# (trials per search, reference runs, class splits) per simulated study.
DESIGNS = ((32, 10, 1), (12, 2, 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=500, help="simulated studies per world")
    parser.add_argument("--out", default="benchmarks/results/coverage.csv")
    parser.add_argument("--only", choices=("coverage", "verdict", "decisions"), help="run only one of the simulations")
    args = parser.parse_args()
    if args.only in (None, "coverage"):
        measure_coverage(args)
    if args.only in (None, "verdict"):
        measure_verdict_coverage(args)
    if args.only in (None, "decisions"):
        measure_decisions(args)


def measure_coverage(args) -> None:
    """The coverage table, written to args.out."""
    world = pd.read_csv(WORLD)
    trials, reference = world[world["kind"] == "trial"], world[world["kind"] == "fixed_adacos"]
    start = time.perf_counter()
    table = pd.concat([coverage_table(trials["val"], trials["test"], reference["test"], n_trials, n_references,
                                      args.studies, with_bootstrap=splits == 1, splits=splits)
                       for n_trials, n_references, splits in DESIGNS], ignore_index=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    shown = table[table["method"] != "percentile bootstrap (earlier)"]
    print(table.round(4).to_string(index=False))
    print(f"\n{args.studies} studies per world and design: lowest coverage of the "
          f"intervals the report shows {shown['coverage'].min():.3f}, widest {shown['width_ratio'].max():.2f}× the "
          f"real spread ({time.perf_counter() - start:.0f} s); written to {args.out}")


def measure_verdict_coverage(args) -> None:
    """Coverage of the verdict's interval (tuned ArcFace − Fixed AdaCos), written beside args.out as verdict.csv."""
    start = time.perf_counter()
    seed_sd = CALIBRATED_SPREAD["tuned"]
    designs = [("1 split × 10 seeds (7162b85)", 1, 10, 0.0), ("4 splits × 2 seeds, no split effect (now)", 4, 2, 0.0),
               ("4 splits × 2 seeds, split sd = seed sd", 4, 2, seed_sd),
               ("4 splits × 2 seeds, split sd = 3 × seed sd", 4, 2, 3 * seed_sd),
               ("3 splits × 3 seeds, split sd = seed sd (a benchmark cell)", 3, 3, seed_sd)]
    table = verdict_interval_coverage(AnalysisConfig(), designs, studies=args.studies)
    path = Path(args.out).with_name("verdict_coverage.csv")
    table.to_csv(path, index=False)
    print("\n" + table.round(4).to_string(index=False))
    print(f"\nthe verdict's interval in {args.studies} studies per design ({time.perf_counter() - start:.0f} s); "
          f"written to {path}")


def measure_decisions(args) -> None:
    """The decision rule's rates, written beside args.out as decisions.csv."""
    start = time.perf_counter()
    decisions = decision_rates(AnalysisConfig(), seeds=10, studies=args.studies)
    decisions_path = Path(args.out).with_name("decisions.csv")
    decisions.to_csv(decisions_path, index=False)
    print("\n" + decisions.round(4).to_string(index=False))
    print(f"\nthe decision rule in {args.studies} studies of 10 seeds per world "
          f"({time.perf_counter() - start:.0f} s); written to {decisions_path}")


if __name__ == "__main__":
    main()
