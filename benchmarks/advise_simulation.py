"""What `study advise` decides, and what its decisions cost against knowing the truth, beside three other ways to stop
tuning, in worlds calibrated from the benchmark's cells.

Each world is built from one committed random-search cell (reports/tables/landscape.csv and run_scores.csv): its
ArcFace trials, centred on their split's Fixed AdaCos means, are the world's distribution of (s, m) draws; a drawn trial
is one of them with fresh seed noise added (normal, with the covariance of the cell's Fixed AdaCos runs: val and test
move together with the seed), a split shifts all of its trials by a normal interaction of the cell's own size, and
Fixed AdaCos runs are its mean plus that seed noise. Every trial is shifted by one constant so that the true
budget-matched difference of a search of `budget` trials (the expected test score of the trial val selects among
`budget` draws, less that of the Fixed AdaCos seed val selects among as many) is −2, −1, −½, 0, ½, 1 or 2 times the
margin (2% of the cell's Fixed AdaCos test score); the truth by Monte Carlo over 40,000 searches.

Each simulated study has `splits` class splits and a budget of `budget` trials per split, and two Fixed AdaCos runs a
split (the default study's design: 4 splits, 12 trials), and one training is worth `--price` of the score (the
default analysis.price_per_training, 0.1%). The rules:
- advice: `study advise` after every round (study.advice.judge at α/budget a side), stopping at its first "stop": a
  test's answer, or more trials not expected to be worth their price; it ends in "use Fixed AdaCos" or "use tuned
  ArcFace", never undecided. Its prior is the benchmark's (`prior` benchmark: every source, the cell's own included, as
  a user of the committed benchmark has it) or the benchmark without the cell's own source (`leave_one_source_out`:
  a new source, as the advice meets one);
- advice_tests_only: the same tests without the price stop (to the budget unless a test answers);
- advice_futility_stop: the rule before the price stop (the tests, and a stop when the chance that the budget settles
  it is below 10%), ending in Fixed AdaCos where no test answered;
- fixed: the whole design, judged once at α (what the default study does; its two retrains of the tuned
  configuration a split are counted in its trainings, not simulated);
- patience: each split's search stops after 10 trials in a row without a better val score (or at the budget), then
  judged once at α;
- terminator: each split's search stops when Optuna's regret bound (RegretBoundEvaluator, from the 3rd trial on) falls
  below the seed sd of val (StaticErrorEvaluator), then judged once at α; a Gaussian process per look, so it runs on
  fewer worlds of fewer cells (`--terminator-worlds`, `--terminator-cells`).
The rules judged once use a flat prior. Every rule's answer is tuned ArcFace where tuning pays (its lower bound beyond
the margin and the search's price, price × (budget − 1)) and Fixed AdaCos otherwise.

Per rule, prior and truth: the share of studies ending in each answer (use_fixed_adacos, use_tuned_arcface) and in
each state of the evidence (tuning_pays, equivalent, adacos_better, not_worth_it, futile, budget_spent; decided_by_test:
the first three); right_choice, the share whose answer is the one knowing the truth gives (tuned ArcFace where the truth
exceeds the search's price, else Fixed AdaCos); and the regret against knowing the truth, who trains nothing to find
out and deploys the better answer at its price: regret_score, the score lost (a share of Fixed AdaCos's score: the
truth where the answer is Fixed AdaCos and the truth says tune; minus the truth where the answer tunes and the truth
says not to, a score bought above its price), regret_trainings, the trainings spent beyond the truth's (the study's,
plus one for Fixed AdaCos or `budget` for a search deployed, less the truth's own), and regret, both in score
(regret_score + price × regret_trainings). false_tuning_pays is the rate of "tuning pays" where the truth is at or
within the margin, false_equivalent of "equivalent" where it is at or beyond it, false_adacos_better of "Fixed AdaCos
is better" where it is at or above minus the margin (NaN elsewhere), with their Monte Carlo error (that of the larger
rate, at least 5%'s); `coverage`, for the advice rules, the share of studies whose interval at the stop held the truth
(nominal: 1 − 2α/budget).

    python benchmarks/advise_simulation.py [--worlds 20] [--terminator-worlds 2] [--out benchmarks/results/advise_simulation.csv]
"""

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from study.advice import (DEFAULT_PRICE, FUTILITY, AdviceError, Prior, benchmark_prior, centre_arrays,
                          expected_maximum, judge)

ROOT = Path(__file__).resolve().parents[1]
CELLS = ROOT / "benchmarks" / "cells"
TRUTHS = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)  # multiples of the margin
MARGIN = 0.02
ALPHA = 0.05
PATIENCE = 10
DECISIONS = ("tuning_pays", "equivalent", "adacos_better", "not_worth_it", "futile", "budget_spent")
COLUMNS = ["rule", "prior", "truth", "worlds", "use_fixed_adacos", "use_tuned_arcface", "decided_by_test",
           *DECISIONS, "right_choice", "regret_score", "regret_trainings", "regret", "mean_trainings",
           "false_tuning_pays", "false_equivalent", "false_adacos_better", "mc_error", "coverage",
           "fixed_design_trainings", "cells", "splits", "budget", "price"]


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


def simulate(world: CellWorld, truth_multiple: float, worlds: int, splits: int, budget: int, priors: dict,
             price: float, terminator_worlds: int, rng) -> list[dict]:
    """`worlds` studies of one cell's world at one truth, each under every rule (the advice's under every prior)."""
    world.set_truth(truth_multiple * MARGIN * world.scale, budget, rng)
    flat = Prior.flat("map_at_r")
    rows = []

    def row(rule, prior_name, result, trainings, held=math.nan):
        rows.append({"rule": rule, "prior": prior_name, "truth": truth_multiple, "cell": world.name,
                     "decision": result.decision, "choice": result.choice, "trainings": trainings, "held": held})

    for index in range(worlds):
        val, test, drawn = world.draw_trials(rng, (splits, budget))
        interaction = rng.normal(0, world.interaction_sd, (splits, 1))
        val, test = val + interaction, test + interaction
        reference_val, reference_test = world.seed_noise(rng, (splits, 2))
        run_split = np.repeat(np.arange(splits), 2)

        def judged(counts, level, chosen_prior, last=True, **rule):
            # On the scale of the scores (Fixed AdaCos's true mean is the cell's), as `study advise` reads a study.
            evidence = centre_arrays(np.repeat(np.arange(splits), counts),
                                     np.concatenate([val[j, :counts[j]] for j in range(splits)]),
                                     np.concatenate([test[j, :counts[j]] for j in range(splits)]) + world.scale,
                                     run_split, reference_val.ravel(), reference_test.ravel() + world.scale)
            return judge(evidence, budget, last, MARGIN, chosen_prior, level, price=price, **rule)

        for prior_name, prior in priors.items():
            for rule, options in (("advice", {}), ("advice_tests_only", {"value_stop": False}),
                                  ("advice_futility_stop", {"value_stop": False, "futility": FUTILITY})):
                for round_ in range(2, budget + 1):
                    result = judged([round_] * splits, ALPHA / budget, prior, last=round_ == budget, **options)
                    if result.decision != "run_more":
                        break
                # Its interval at the stop holds the truth (relative to Fixed AdaCos's true score)?
                row(rule, prior_name, result, splits * round_ + 2 * splits,
                    result.low <= truth_multiple * MARGIN <= result.high)
        row("fixed", "flat", judged([budget] * splits, ALPHA, flat), splits * budget + 4 * splits)
        stops = [patience_stop(val[j]) for j in range(splits)]
        row("patience", "flat", judged(stops, ALPHA, flat), sum(stops) + 2 * splits)
        if index < terminator_worlds:
            stops = [terminator_stop(world, drawn[j], val[j]) for j in range(splits)]
            row("terminator", "flat", judged(stops, ALPHA, flat), sum(stops) + 2 * splits)
    return rows


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


def summarise(rows: pd.DataFrame, splits: int, budget: int, price: float) -> pd.DataFrame:
    """One row per rule, prior and truth (see the module's docstring)."""
    fixed_trainings = splits * budget + 4 * splits
    cost = price * (budget - 1)  # a search's trainings beyond Fixed AdaCos's one
    table = []
    for (rule, prior, truth), group in rows.groupby(["rule", "prior", "truth"], sort=False):
        share = lambda column, value: float((group[column] == value).mean())  # noqa: E731
        relative = truth * MARGIN
        tune = group["choice"] == "arcface_tuned"
        truth_tunes = relative > cost
        regret_score = ((relative if truth_tunes else 0.0) - np.where(tune, relative, 0.0)).mean()
        regret_trainings = (group["trainings"] + np.where(tune, budget, 1) - (budget if truth_tunes else 1)).mean()
        wrong = {"false_tuning_pays": share("decision", "tuning_pays") if truth <= 1.0 else math.nan,
                 "false_equivalent": share("decision", "equivalent") if abs(truth) >= 1.0 else math.nan,
                 "false_adacos_better": share("decision", "adacos_better") if truth >= -1.0 else math.nan}
        worst = np.nanmax([*wrong.values(), 0.05])
        table.append({"rule": rule, "prior": prior, "truth": truth, "worlds": len(group),
                      "use_fixed_adacos": share("choice", "fixed_adacos"), "use_tuned_arcface": float(tune.mean()),
                      "decided_by_test": float(group["decision"].isin(DECISIONS[:3]).mean()),
                      **{decision: share("decision", decision) for decision in DECISIONS},
                      "right_choice": float((tune == truth_tunes).mean()), "regret_score": regret_score,
                      "regret_trainings": regret_trainings, "regret": regret_score + price * regret_trainings,
                      "mean_trainings": group["trainings"].mean(), **wrong,
                      "mc_error": math.sqrt(worst * (1 - worst) / len(group)),
                      "coverage": pd.to_numeric(group["held"], errors="coerce").mean(),
                      "fixed_design_trainings": fixed_trainings, "cells": group["cell"].nunique(), "splits": splits,
                      "budget": budget, "price": price})
    return pd.DataFrame(table, columns=COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", type=int, default=20, help="simulated studies per cell and truth")
    parser.add_argument("--terminator-worlds", type=int, default=2,
                        help="of them, how many also run the Terminator, in the --terminator-cells only")
    parser.add_argument("--terminator-cells", nargs="*", default=["digits-closed-conv", "glyphs-open-c100-conv"],
                        help="the cells whose worlds also run the Terminator (a Gaussian process per look: slow)")
    parser.add_argument("--splits", type=int, default=4)
    parser.add_argument("--budget", type=int, default=12)
    parser.add_argument("--price", type=float, default=DEFAULT_PRICE,
                        help="what one training is worth, a share of the score (default: analysis.price_per_training)")
    parser.add_argument("--cells", nargs="*", help="cell folders under benchmarks/cells (default: every committed "
                        "random-search cell of the benchmark)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "advise_simulation.csv")
    args = parser.parse_args()
    cells_csv = ROOT / "reports" / "benchmark" / "tables" / "cells.csv"
    everyone = benchmark_prior(cells_csv, "map_at_r")
    cells = pd.read_csv(cells_csv)
    names = args.cells or sorted(cells.loc[cells["sampler"] == "random", "cell"].unique())
    source_of = cells.drop_duplicates("cell").set_index("cell")["source"]
    rng = np.random.default_rng(0)
    rows, started = [], time.time()
    for number, name in enumerate(names, start=1):
        try:
            alone = benchmark_prior(cells_csv, "map_at_r", leave_out_source=source_of[name])
        except AdviceError:  # the benchmark without this source converged nowhere: no prior but a flat one
            alone = Prior.flat("map_at_r")
        world = CellWorld(CELLS / name)
        for truth in TRUTHS:
            terminator_worlds = args.terminator_worlds if name in args.terminator_cells else 0
            rows += simulate(world, truth, args.worlds, args.splits, args.budget,
                             {"benchmark": everyone, "leave_one_source_out": alone}, args.price, terminator_worlds, rng)
        print(f"cell {number} of {len(names)}, {name}: {args.worlds} worlds at each of {len(TRUTHS)} truths "
              f"({time.time() - started:.0f} s)", flush=True)
    table = summarise(pd.DataFrame(rows), args.splits, args.budget, args.price)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False, float_format="%.4g")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
