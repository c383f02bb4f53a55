"""Error rates of `study advise` against three other ways to stop tuning, in worlds calibrated from the benchmark's cells.

Each world is built from one committed random-search cell (reports/tables/landscape.csv and run_scores.csv): its
ArcFace trials, centred on their split's Fixed AdaCos means, are the world's distribution of (s, m) draws; a drawn trial
is one of them with fresh seed noise added (normal, with the covariance of the cell's Fixed AdaCos runs: val and test
move together with the seed), a split shifts all of its trials by a normal interaction of the cell's own size, and
Fixed AdaCos runs are its mean plus that seed noise. Every trial is shifted by one constant so that the true
budget-matched difference of a search of `budget` trials (the expected test score of the trial val selects among
`budget` draws, less that of the Fixed AdaCos seed val selects among as many) is 0, half the margin, the margin or
twice it (the margin: 2% of the cell's Fixed AdaCos test score); the truth by Monte Carlo over 40,000 searches.

Each simulated study has `splits` class splits and a budget of `budget` trials per split, and two Fixed AdaCos runs a
split (the default study's design: 4 splits, 12 trials). The rules:
- advice: `study advise` after every round (study.advice.judge at α/budget a side, the benchmark's prior), stopping
  at its first "stop", a futile one included (the budget unlikely to settle it: `futile`, counted as undecided);
- advice_without_futility: the same without the futile stop (what the futile stop costs and saves);
- fixed: the whole design, judged once at α (what the default study does; its two retrains of the tuned
  configuration a split are counted in its trainings, not simulated);
- patience: each split's search stops after 10 trials in a row without a better val score (or at the budget), then
  judged once at α;
- terminator: each split's search stops when Optuna's regret bound (RegretBoundEvaluator, from the 3rd trial on) falls
  below the seed sd of val (StaticErrorEvaluator), then judged once at α; a Gaussian process per look, so it runs on
  fewer worlds of fewer cells (`--terminator-worlds`, `--terminator-cells`).
false_equivalent is the rate of "equivalent" where the truth is at or beyond the margin, false_tuning_pays the rate
of "tuning pays" where it is at or within it (NaN elsewhere), with their Monte Carlo error (that of the larger
rate, at least 5%'s), and false_adacos_better the rate of "Fixed AdaCos is better" (false at every truth simulated); `coverage`, for the
advice, the share of studies whose interval at the stop held the truth (nominal: 1 − 2α/budget).

    python benchmarks/advise_simulation.py [--worlds 200] [--terminator-worlds 10] [--out benchmarks/results/advise_simulation.csv]
"""

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from study.advice import FUTILITY, Prior, benchmark_prior, centre_arrays, expected_maximum, judge

ROOT = Path(__file__).resolve().parents[1]
CELLS = ROOT / "benchmarks" / "cells"
TRUTHS = (0.0, 0.5, 1.0, 2.0)  # multiples of the margin
MARGIN = 0.02
ALPHA = 0.05
PATIENCE = 10
COLUMNS = ["rule", "truth", "worlds", "false_equivalent", "false_tuning_pays", "mean_trainings", "mc_error",
           "false_adacos_better",
           "equivalent", "tuning_pays", "adacos_better", "undecided", "futile", "fixed_design_trainings", "cells",
           "splits", "budget", "coverage"]


class CellWorld:
    """One cell's calibrated world (see the module's docstring)."""

    def __init__(self, cell: Path):
        tables = cell / "reports" / "tables"
        objective = json.loads((cell / "reports" / "metrics.json").read_text()).get("objective", "map_at_r")
        trials = pd.read_csv(tables / "landscape.csv")
        trials = trials[trials["loss"] == "arcface"]
        runs = pd.read_csv(tables / "run_scores.csv")
        runs = runs[runs["method"] == "fixed_adacos"]
        means = runs.groupby("split")[["val_score", f"test_{objective}"]].mean()
        self.name = cell.name
        self.val = trials["value"].fillna(0.0).to_numpy() - means["val_score"].reindex(trials["split"]).to_numpy()
        self.test = (trials["test_value"].fillna(0.0).to_numpy()
                     - means[f"test_{objective}"].reindex(trials["split"]).to_numpy())
        self.s, self.m = trials["s"].to_numpy(), trials["m"].to_numpy()
        residual = runs[["val_score", f"test_{objective}"]].to_numpy() - means.reindex(runs["split"]).to_numpy()
        df = len(runs) - len(means)
        self.seed_covariance = residual.T @ residual / df  # val and test move together with the seed
        self.val_sd, self.test_sd = np.sqrt(np.diag(self.seed_covariance))
        self.scale = float(runs[f"test_{objective}"].mean())
        split_means = pd.Series(self.test).groupby(trials["split"].to_numpy()).agg(["mean", "var", "size"])
        within = (split_means["var"] / split_means["size"]).mean() + self.test_sd ** 2 / 2
        self.interaction_sd = math.sqrt(max(0.0, split_means["mean"].var(ddof=1) - within))
        self.shift = 0.0

    def seed_noise(self, rng, shape):
        """(val, test) seed noise of `shape` trainings, correlated as the cell's Fixed AdaCos runs are."""
        noise = rng.multivariate_normal(np.zeros(2), self.seed_covariance, size=shape)
        return noise[..., 0], noise[..., 1]

    def draw_trials(self, rng, shape):
        """(val, test, index of the real trial) of `shape` draws."""
        index = rng.integers(0, self.val.size, size=shape)
        val_noise, test_noise = self.seed_noise(rng, shape)
        return self.val[index] + val_noise + self.shift, self.test[index] + test_noise + self.shift, index

    def set_truth(self, truth: float, budget: int, rng) -> None:
        """Shift every trial so that the true budget-matched difference (the val-selected trial of `budget` draws less
        the val-selected of `budget` Fixed AdaCos seeds, whose gain over one is E[max]·cov/sd(val)) is `truth`."""
        self.shift = 0.0
        val, test, _ = self.draw_trials(rng, (40_000, budget))
        best = test[np.arange(len(test)), np.argmax(val, axis=1)].mean()
        luck = expected_maximum(budget) * self.seed_covariance[0, 1] / self.val_sd
        self.shift = truth - (best - luck)


def simulate(world: CellWorld, truth_multiple: float, worlds: int, splits: int, budget: int, prior: Prior,
             terminator_worlds: int, rng) -> list[dict]:
    world.set_truth(truth_multiple * MARGIN * world.scale, budget, rng)
    flat = Prior.flat(prior.metric)
    outcomes = {rule: [] for rule in ("advice", "advice_without_futility", "fixed", "patience", "terminator")}
    for index in range(worlds):
        val, test, drawn = world.draw_trials(rng, (splits, budget))
        interaction = rng.normal(0, world.interaction_sd, (splits, 1))
        val, test = val + interaction, test + interaction
        reference_val, reference_test = world.seed_noise(rng, (splits, 2))
        run_split = np.repeat(np.arange(splits), 2)

        def judged(counts, level, chosen_prior, last=True, whole=False, futility=FUTILITY):
            # On the scale of the scores (Fixed AdaCos's true mean is the cell's), as `study advise` reads a study.
            evidence = centre_arrays(np.repeat(np.arange(splits), counts),
                                     np.concatenate([val[j, :counts[j]] for j in range(splits)]),
                                     np.concatenate([test[j, :counts[j]] for j in range(splits)]) + world.scale,
                                     run_split, reference_val.ravel(), reference_test.ravel() + world.scale)
            result = judge(evidence, budget, last, MARGIN, chosen_prior, level, futility)
            return result if whole else result.decision

        for rule, futility in (("advice", FUTILITY), ("advice_without_futility", 0.0)):
            for round_ in range(2, budget + 1):
                result = judged([round_] * splits, ALPHA / budget, prior, last=round_ == budget, whole=True,
                                futility=futility)
                if result.decision != "run_more":
                    break
            # Its interval at the stop holds the truth (relative to Fixed AdaCos's true score)?
            held = result.low <= truth_multiple * MARGIN <= result.high
            outcomes[rule].append((result.decision, splits * round_ + 2 * splits, held))
        outcomes["fixed"].append((judged([budget] * splits, ALPHA, flat), splits * budget + 4 * splits))
        stops = [patience_stop(val[j]) for j in range(splits)]
        outcomes["patience"].append((judged(stops, ALPHA, flat), sum(stops) + 2 * splits))
        if index < terminator_worlds:
            stops = [terminator_stop(world, drawn[j], val[j]) for j in range(splits)]
            outcomes["terminator"].append((judged(stops, ALPHA, flat), sum(stops) + 2 * splits))
    return [{"rule": rule, "truth": truth_multiple, "cell": world.name, "decision": row[0], "trainings": row[1],
             "held": row[2] if len(row) > 2 else math.nan} for rule, rows in outcomes.items() for row in rows]


def patience_stop(val) -> int:
    """Trials a search runs when it stops after PATIENCE trials in a row without a better val score."""
    best, since = -math.inf, 0
    for count, value in enumerate(val, start=1):
        best, since = (value, 0) if value > best else (best, since + 1)
        if since >= PATIENCE:
            return count
    return len(val)


def terminator_stop(world: CellWorld, drawn, val) -> int:
    """Trials a search runs when Optuna's Terminator (regret bound below the seed sd of val) stops it."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.terminator import RegretBoundEvaluator, StaticErrorEvaluator

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    space = {"s": FloatDistribution(0.25, 512.0, log=True), "m": FloatDistribution(0.0, 1.0)}
    trials = [optuna.trial.create_trial(params={"s": float(world.s[i]), "m": float(world.m[i])}, distributions=space,
                                        value=float(value)) for i, value in zip(drawn, val)]
    regret, error = RegretBoundEvaluator(), StaticErrorEvaluator(float(world.val_sd))
    for count in range(3, len(trials)):
        shown = trials[:count]
        if regret.evaluate(shown, optuna.study.StudyDirection.MAXIMIZE) < error.evaluate(
                shown, optuna.study.StudyDirection.MAXIMIZE):
            return count
    return len(trials)


def summarise(rows: pd.DataFrame, splits: int, budget: int) -> pd.DataFrame:
    fixed_trainings = splits * budget + 4 * splits
    table = []
    for (rule, truth), group in rows.groupby(["rule", "truth"], sort=False):
        rates = group["decision"].value_counts(normalize=True)
        share = lambda name: float(rates.get(name, 0.0))  # noqa: E731
        worlds = len(group)
        wrong_equivalent = share("equivalent") if truth >= 1.0 else math.nan
        wrong_pays = share("tuning_pays") if truth <= 1.0 else math.nan
        worst = np.nanmax([wrong_equivalent, wrong_pays, 0.05])
        table.append({"rule": rule, "truth": truth, "worlds": worlds, "false_equivalent": wrong_equivalent,
                      "false_tuning_pays": wrong_pays, "mean_trainings": group["trainings"].mean(),
                      "mc_error": math.sqrt(worst * (1 - worst) / worlds),
                      "false_adacos_better": share("adacos_better"), "equivalent": share("equivalent"),
                      "tuning_pays": share("tuning_pays"), "adacos_better": share("adacos_better"),
                      "undecided": share("run_more") + share("budget_spent") + share("futile"),
                      "futile": share("futile"),
                      "fixed_design_trainings": fixed_trainings, "cells": group["cell"].nunique(), "splits": splits,
                      "budget": budget, "coverage": group["held"].mean()})
    return pd.DataFrame(table, columns=COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", type=int, default=200, help="simulated studies per cell and truth")
    parser.add_argument("--terminator-worlds", type=int, default=10,
                        help="of them, how many also run the Terminator, in the --terminator-cells only")
    parser.add_argument("--terminator-cells", nargs="*", default=["digits-closed-conv", "glyphs-open-c100-conv"],
                        help="the cells whose worlds also run the Terminator (a Gaussian process per look: slow)")
    parser.add_argument("--splits", type=int, default=4)
    parser.add_argument("--budget", type=int, default=12)
    parser.add_argument("--cells", nargs="*", help="cell folders under benchmarks/cells (default: every committed "
                        "random-search cell of the benchmark)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "advise_simulation.csv")
    args = parser.parse_args()
    prior = benchmark_prior(ROOT / "reports" / "benchmark" / "tables" / "cells.csv", "map_at_r")
    cells = pd.read_csv(ROOT / "reports" / "benchmark" / "tables" / "cells.csv")
    names = args.cells or sorted(cells.loc[cells["sampler"] == "random", "cell"].unique())
    rng = np.random.default_rng(0)
    rows, started = [], time.time()
    for name in names:
        world = CellWorld(CELLS / name)
        for truth in TRUTHS:
            terminator_worlds = args.terminator_worlds if name in args.terminator_cells else 0
            rows += simulate(world, truth, args.worlds, args.splits, args.budget, prior, terminator_worlds, rng)
            print(f"{name}, truth {truth:g}× the margin: {args.worlds} worlds done ({time.time() - started:.0f} s)",
                  flush=True)
    table = summarise(pd.DataFrame(rows), args.splits, args.budget)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False, float_format="%.4g")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
