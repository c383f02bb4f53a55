"""Coverage of the interval a study's report prints for its iterations ratio (study.analysis.iteration_ratios.
study_iterations: the t interval over class splits, widened to the evaluation schedule's steps).

Simulated studies of the default design (4 class splits × 2 seeds, 500 iterations, val read at 20 log-spaced
evaluations as train.eval_points: 20 places them) with every variance source a study has: a class split's effect on
how fast both methods learn (shared by the pair), a seed's effect on each run, and the schedule's coarseness. Each run's
val curve is 1 − exp(−t/τ) with log τ = method + split + seed; the truth is the ratio of the iterations to 95% (and
99%) of each run's own best val on a continuous schedule, exp(E[log t_method − log t_FixedAdaCos]), from a Monte Carlo
of a million pairs. Writes benchmarks/results/study_iteration_coverage.csv.

    python benchmarks/study_iteration_coverage.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.analysis.iteration_ratios import LEVELS, study_iterations  # noqa: E402

SPLITS, SEEDS, LENGTH = 4, 2, 500
SCHEDULE = np.unique(np.concatenate([[0], np.round(np.geomspace(10, LENGTH, 19)), [LENGTH // 2]])).astype(int)
STUDIES = 1000


def reached(tau: np.ndarray, level: float) -> np.ndarray:
    """Continuous iterations to level × the run's best (its value at LENGTH) of 1 − exp(−t/τ)."""
    return -tau * np.log(1 - level * (1 - np.exp(-LENGTH / tau)))


def truth(centre: float, seed_sd: float, split_sd: float, ratio: float, level: float, rng) -> float:
    split = rng.normal(0, split_sd, 1_000_000)
    fixed = np.exp(centre + split + rng.normal(0, seed_sd, split.size))
    other = np.exp(centre + np.log(ratio) + split + rng.normal(0, seed_sd, split.size))
    return float(np.exp(np.mean(np.log(reached(other, level)) - np.log(reached(fixed, level)))))


def one_study(centre: float, seed_sd: float, split_sd: float, ratio: float, rng) -> pd.DataFrame:
    rows = []
    for split in range(SPLITS):
        effect = rng.normal(0, split_sd)
        for seed in range(SEEDS):
            for method, shift in (("fixed_adacos", 0.0), ("arcface_tuned", np.log(ratio))):
                tau = np.exp(centre + shift + effect + rng.normal(0, seed_sd))
                rows += [{"method": method, "split": split, "seed": seed, "iteration": int(t),
                          "val": 1 - np.exp(-t / tau)} for t in SCHEDULE]
    return pd.DataFrame(rows)


def main() -> None:
    rng = np.random.default_rng(0)
    started, table = time.time(), []
    # τ near 100 iterations (95% of the best near 300 of 500, as the default study), a seed sd of 5–20% on the
    # speed, splits that differ by 20%, and methods as fast (1×) or 1.5× slower.
    for centre, seed_sd, split_sd, ratio in [(np.log(100), 0.05, 0.2, 1.0), (np.log(100), 0.2, 0.2, 1.0),
                                             (np.log(100), 0.05, 0.2, 1.5), (np.log(100), 0.2, 0.2, 1.5)]:
        truths = {level: truth(centre, seed_sd, split_sd, ratio, level, rng) for level in LEVELS}
        held = {level: [] for level in LEVELS}
        widths = {level: [] for level in LEVELS}
        for _ in range(STUDIES):
            shown = study_iterations(one_study(centre, seed_sd, split_sd, ratio, rng), {}, 0.95)
            for row in shown[shown["method"] == "arcface_tuned"].itertuples():
                held[row.level].append(row.ratio_low <= truths[row.level] <= row.ratio_high)
                widths[row.level].append(row.ratio_high / row.ratio_low)
        for level in LEVELS:
            coverage = float(np.mean(held[level]))
            table.append({"ratio": ratio, "seed_sd": seed_sd, "split_sd": split_sd, "level": level,
                          "true_ratio": truths[level], "studies": STUDIES, "coverage": coverage,
                          "mc_error": float(np.sqrt(0.95 * 0.05 / STUDIES)),
                          "median_width_ratio": float(np.median(widths[level]))})
            print(f"ratio {ratio}, seed sd {seed_sd}, level {level}: coverage {coverage:.3f} "
                  f"({time.time() - started:.0f} s)", flush=True)
    out = REPO / "benchmarks" / "results" / "study_iteration_coverage.csv"
    pd.DataFrame(table).to_csv(out, index=False, float_format="%.4g")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
