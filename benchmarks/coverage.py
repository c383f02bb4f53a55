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

`--only pooled` measures the benchmark's pooled intervals in worlds with a data-source effect, with the benchmark's
real design (`--plan`: each primary cell's source, and per method its standard error floored at its seed noise, on
its df, from the cell's reports/tables): pool_across_sources' CI of the mean over sources and its prediction interval
for a new configuration from a new source, beside DerSimonian–Laird, Hartung–Knapp and equal weights over
configurations, for every method against Fixed AdaCos, absolute and relative to Fixed AdaCos's score
(`--pooled-out`, benchmarks/results/pooled_coverage.csv; the aggregate writes the relative scale it reads to
reports/benchmark/tables/pooled_coverage.csv itself). `--only three-level` compares a three-level
random-effects model (REML, hand-written) with pool_across_sources on the headline method's design
(benchmarks/results/three_level_coverage.csv; slower: an optimiser per benchmark).

`--only true-effect` measures the two intervals for the true effect in a new source (study.analysis
bayesian_true_effect, at the declared half-normal prior scale and at the 2% margin, and hartung_knapp_true_effect's
Higgins–Thompson–Spiegelhalter interval) beside pool_across_sources' prediction interval, on the verdict's own pool
(the headline method's cells off the floor, relative scale), in the same worlds as `--only pooled` and in worlds
whose configuration sd is a quarter of it; `--worlds` per setting (`--true-effect-out`,
benchmarks/results/true_effect_coverage.csv).

`--only bands` measures the bands the benchmark report pools beside its headline (the tuning cost at each n, the
iteration ratios per method and level) in the same worlds as `--only pooled`, each with its own design
(benchmarks/results/band_coverage.csv).

`--only absolute` runs benchmarks/absolute_coverage.py: the absolute scores' interval over class splits
(study.analysis.absolute_scores, on the logit scale) beside the raw t interval it replaced, in worlds from the
committed cells (benchmarks/results/absolute_coverage.csv).
"""

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, stats

from study.analysis import (SOURCE_SPREAD_PRIOR_SCALE, bayesian_true_effect, hartung_knapp_true_effect,
                            pool_across_sources, source_membership)
from study.analysis.headline import headline_cells
from study.analysis.tuning import MAX_STUDENTISED_DF
from study.benchmark.iterations import headline_log_ratios
from study.benchmark.report import read_cells
from study.benchmark.tuning_cost import cell_lead
from study.analysis.coverage import (CALIBRATED_SPREAD, SOURCE_RATIOS, coverage_table, decision_rates,
                                     source_pooling_coverage, true_effect_coverage, verdict_interval_coverage)
from study.config import AnalysisConfig

WORLD = Path(__file__).resolve().parents[1] / "tests" / "data" / "coverage_world.csv"
# (trials per search, reference runs, class splits) per simulated study.
DESIGNS = ((32, 10, 1), (12, 2, 4))
REFERENCE = "fixed_adacos"
HEADLINE = "arcface_tuned"
# The relative margin (study.benchmark.meta.RELATIVE_MARGIN): the half-normal scale measured beside the declared one.
MARGIN_PRIOR_SCALE = 0.02


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=500, help="simulated studies per world")
    parser.add_argument("--out", default="benchmarks/results/coverage.csv")
    parser.add_argument("--only", choices=("coverage", "verdict", "decisions", "pooled", "three-level", "true-effect",
                                           "absolute", "bands"),
                        help="run only one of the simulations")
    parser.add_argument("--plan", default="benchmarks/cells/plan.json", help="the benchmark whose design is simulated")
    parser.add_argument("--pooled-out", default="benchmarks/results/pooled_coverage.csv")
    parser.add_argument("--benchmarks", type=int, default=4000, help="simulated benchmarks per pooled world")
    parser.add_argument("--worlds", type=int, default=400, help="simulated benchmarks per true-effect setting")
    parser.add_argument("--true-effect-out", default="benchmarks/results/true_effect_coverage.csv")
    parser.add_argument("--bands-out", default="benchmarks/results/band_coverage.csv")
    args = parser.parse_args()
    if args.only == "three-level":
        measure_three_level(args)
        return
    if args.only == "true-effect":
        measure_true_effect_coverage(args)
        return
    if args.only == "absolute":
        measure_absolute_coverage(args)
        return
    if args.only == "bands":
        measure_band_coverage(args)
        return
    if args.only in (None, "pooled"):
        measure_pooled_coverage(args)
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


def measure_absolute_coverage(args) -> None:
    """The absolute scores' intervals now have their own benchmark, benchmarks/absolute_coverage.py (the raw and the
    logit-scale t interval in worlds from every committed cell): run it, at this run's number of studies."""
    import runpy
    import sys

    sys.argv = [str(Path(__file__).with_name("absolute_coverage.py")), "--studies", str(args.studies * 8)]
    runpy.run_path(sys.argv[0], run_name="__main__")


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


def benchmark_design(plan_path: str | Path, design: str = "short") -> pd.DataFrame:
    """One row per method and cell of the benchmark as the aggregate pools them: the short regime's primary cells, or
    (`design` "converged") the headline's converged cells; each with its source, the method − Fixed AdaCos difference
    with its standard error floored at the seed noise and that SE's df, and relative to Fixed AdaCos's score."""
    plan_path = Path(plan_path)
    rows = read_cells(json.loads(plan_path.read_text(encoding="utf-8")), plan_path.parent)
    if design == "converged":
        rows = headline_cells(rows)
    else:
        rows = rows[rows["primary"].astype(bool) & rows["longer_of"].isna()]
    rows = rows[np.isfinite(rows["difference"]) & (rows["standard_error"] > 0)]
    return rows.assign(reference=rows["reference_test_mean"])


def configuration_sd(design: pd.DataFrame, column: str, se_column: str) -> tuple[float, str]:
    """The configuration sd the worlds use, and where it came from: σ̂_c of pool_across_sources on the real cells
    (their spread within sources less their own noise), or the median standard error where that is 0 or undefined."""
    pooled = pool_across_sources(design[column], design[se_column], design["source"])
    if math.isfinite(pooled.configuration_variance) and pooled.configuration_variance > 0:
        return math.sqrt(pooled.configuration_variance), "within-source spread of the real cells"
    return float(design[se_column].median()), "median standard error (no within-source spread to read)"


def band_designs(plan_path: str | Path) -> list[tuple[str, pd.DataFrame]]:
    """The designs of the report's pooled bands beside the headline: per n, the headline cells' search − control leads
    (tables/tuning_cost.csv) and per method and level their log iteration ratios (tables/iterations.csv), each as
    (band, rows of estimate, standard_error, df, source)."""
    plan_path = Path(plan_path)
    rows = read_cells(json.loads(plan_path.read_text(encoding="utf-8")), plan_path.parent)
    headline = headline_cells(rows)
    designs = []
    tuned = headline[headline["method"] == HEADLINE]
    leads = pd.concat([cell_lead(plan_path.parent / row.cell, float(row.reference_test_mean), 0.95)
                       .assign(cell=row.cell, source=row.source) for row in tuned.itertuples()], ignore_index=True)
    leads = leads[leads["n"] <= leads.groupby("cell")["n"].max().min()]  # every n pools the same cells, as the report
    # Where a cell wrote no band on its search curve (se 0), the report takes its lead as exact; the second design
    # carries the cell's last band forward instead, a floor on the noise the first leaves out.
    carried = leads["se"].where(leads["se"] > 0).groupby(leads["cell"]).ffill().fillna(0.0)
    for n, part in leads.assign(carried=carried).groupby("n"):
        part = part.rename(columns={"lead": "estimate"}).assign(df=MAX_STUDENTISED_DF)
        designs.append((f"tuning cost, n = {n}", part.assign(standard_error=part["se"])))
        if (part["se"] == 0).any() and (part["carried"] > 0).all():
            designs.append((f"tuning cost, n = {n}, noise of the last band", part.assign(standard_error=part["carried"])))
    ratios = headline_log_ratios(rows, plan_path.parent)
    ratios = ratios[np.isfinite(ratios["log_ratio"]) & np.isfinite(ratios["standard_error"])]
    for (method, level), part in ratios.groupby(["method", "level"], sort=False):
        designs.append((f"iterations, {method} at {level:g}", part.rename(columns={"log_ratio": "estimate"})))
    return designs


def measure_band_coverage(args) -> None:
    """Coverage of the tuning-cost and iteration-ratio bands (pool_across_sources' CI and new-source prediction) in
    worlds with each band's real design (sources, standard errors on their df) and a source effect from none to 4x
    the configuration spread; written to args.bands_out. A standard error of 0 (a cell that wrote no band on its
    search curve) stays (nearly) 0: the estimate is taken as exact, as the report takes it; where a cell has one at a
    smaller n, a second design ("noise of the last band") draws its cells with that band's noise and still states
    them exact, as the report does (source_pooling_coverage's stated_exact)."""
    start = time.perf_counter()
    tables = []
    for band, design in band_designs(args.plan):
        if design["source"].nunique() < 3:
            continue
        sd, origin = configuration_sd(design, "estimate", "standard_error")
        exact = int((design["se"] == 0).sum()) if "se" in design else 0
        # "noise of the last band": drawn with that noise, stated exact as the report states them
        stated_exact = (design["se"] == 0).to_numpy() if "noise of the last band" in band else None
        table = source_pooling_coverage(design["standard_error"].clip(lower=1e-12), design["df"], design["source"], sd,
                                        benchmarks=args.benchmarks, seed=0, stated_exact=stated_exact)
        table = table[table["read"]]
        tables.append(table.assign(band=band, configuration_sd_from=origin, cells_without_band=exact))
    table = pd.concat(tables, ignore_index=True)
    table = table[["band", *[column for column in table.columns if column != "band"]]]
    Path(args.bands_out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.bands_out, index=False)
    for interval, part in table.groupby("interval"):
        print(f"{interval}: coverage {part['coverage'].min():.3f}-{part['coverage'].max():.3f} over "
              f"{part['band'].nunique()} bands and {part['world'].nunique()} worlds "
              f"(Monte Carlo error ±{part['mc_error'].iloc[0]:.3f})")
    print(f"{len(table)} rows in {time.perf_counter() - start:.0f} s; written to {args.bands_out}")


def measure_pooled_coverage(args) -> None:
    """Coverage of the pooled intervals in worlds with a source effect, with the benchmark's real design, per method
    and scale; written to args.pooled_out."""
    start = time.perf_counter()
    tables, designs = [], {}
    for regime in ("short", "converged"):  # the sensitivity row's design, and the headline's
        design = designs[regime] = benchmark_design(args.plan, regime)
        if design.empty:
            print(f"no finished {regime} cell in {args.plan}: nothing to simulate")
            continue
        design = design.assign(relative=design["difference"] / design["reference"],
                               relative_se=design["standard_error"] / design["reference"])
        for method, rows in design.groupby("method", sort=False):
            if len(rows) < 3:
                continue
            for scale, column, se_column in (("absolute", "difference", "standard_error"),
                                             ("relative", "relative", "relative_se")):
                sd, origin = configuration_sd(rows, column, se_column)
                table = source_pooling_coverage(rows[se_column], rows["df"], rows["source"], sd,
                                                benchmarks=args.benchmarks, seed=0)
                tables.append(table.assign(design=regime, method=method, scale=scale, configuration_sd_from=origin))
    table = pd.concat(tables, ignore_index=True)
    first = ["design", "method", "scale"]
    table = table[[*first, *[column for column in table.columns if column not in first]]]
    design = designs["converged"]
    Path(args.pooled_out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.pooled_out, index=False)
    headline = design[design["method"] == HEADLINE]
    print("\nthe design (" + HEADLINE + "): " + ", ".join(
        f"{row.configuration} [{row.source}] SE {row.standard_error:.5f} on {row.df:g} df ({row.se_from})"
        for row in headline.itertuples()))
    wide = table.pivot_table(index=["design", "method", "scale", "source_ratio"], columns=["pooling", "interval"],
                             values="coverage", sort=False)
    print(wide.round(3).to_string())
    read = table[table["read"]]
    worst = read.groupby("interval")["coverage"].min()
    print(f"\n{args.benchmarks} benchmarks per world: pool_across_sources covered ≥ {worst.min():.3f} "
          f"(CI {worst['mean']:.3f}, prediction {worst['prediction']:.3f}) in "
          f"{read[['design', 'method', 'scale', 'source_ratio']].drop_duplicates().shape[0]} worlds "
          f"({time.perf_counter() - start:.1f} s); written to {args.pooled_out}")


def measure_true_effect_coverage(args) -> None:
    """Coverage of the intervals for the true effect in a new source on the verdict's pool (the headline method's
    cells off the floor, relative scale), in worlds with a source effect; written to args.true_effect_out."""
    start = time.process_time()
    design = benchmark_design(args.plan)
    rows = design[(design["method"] == HEADLINE) & ~design["near_floor"].astype(bool)]
    if len(rows) < 3:
        print(f"fewer than 3 finished {HEADLINE} cells off the floor in {args.plan}: nothing to simulate")
        return
    rows = rows.assign(relative=rows["difference"] / rows["reference"],
                       relative_se=rows["standard_error"] / rows["reference"])
    sd, origin = configuration_sd(rows, "relative", "relative_se")
    scales = (SOURCE_SPREAD_PRIOR_SCALE, MARGIN_PRIOR_SCALE)
    table = pd.concat([true_effect_coverage(rows["relative_se"], rows["df"], rows["source"], configuration,
                                            prior_scales=scales, worlds=args.worlds, seed=seed)
                       for seed, configuration in enumerate((sd, sd / 4))], ignore_index=True)
    Path(args.true_effect_out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.true_effect_out, index=False)
    y, se, sources = rows["relative"], rows["relative_se"], rows["source"]
    pooled, robust = pool_across_sources(y, se, sources), hartung_knapp_true_effect(y, se, sources)
    print(f"the real pool ({HEADLINE} − Fixed AdaCos, relative; {pooled.sources} sources, {pooled.configurations} "
          f"configurations), a new source's 95% interval:")
    for scale in scales:
        bayes = bayesian_true_effect(y, se, sources, prior_scale=scale)
        print(f"  Bayesian, half-normal({scale:g}): [{bayes.prediction_low:+.4f}, {bayes.prediction_high:+.4f}] "
              f"(τ median {bayes.tau:.4f} [{bayes.tau_low:.4f}, {bayes.tau_high:.4f}])")
    print(f"  Hartung–Knapp + HTS: [{robust.prediction_low:+.4f}, {robust.prediction_high:+.4f}]; "
          f"pool_across_sources: [{pooled.prediction_low:+.4f}, {pooled.prediction_high:+.4f}]")
    label = table["estimator"] + np.where(table["prior_scale"].notna(),
                                          " (" + table["prior_scale"].map("{:g}".format) + ")", "")
    wide = table.assign(estimator=label).pivot_table(index=["configuration_sd", "source_ratio"],
                                                     columns=["interval", "estimator"],
                                                     values=["coverage", "median_width"], sort=False)
    print(wide.round(3).to_string())
    prediction = table[table["interval"] == "prediction"].assign(estimator=label)
    worst = prediction.groupby("estimator", sort=False)["coverage"].agg(["min", "max"])
    print(f"\n{args.worlds} benchmarks per setting (Monte Carlo error ±{table['mc_error'].iloc[0]:.3f}); configuration "
          f"sd {sd:.4f} ({origin}) and a quarter of it; prediction coverage "
          + "; ".join(f"{name} {low:.3f}–{high:.3f}" for name, (low, high) in worst.iterrows())
          + f" ({time.process_time() - start:.0f} s CPU); written to {args.true_effect_out}")


def _three_level_reml(y: np.ndarray, variances: np.ndarray, membership: np.ndarray) -> tuple[float, float, float]:
    """(μ̂, SE(μ̂), σ̂²_s + σ̂²_c) of the three-level random-effects model y = μ + a_source + b_configuration + e with
    known sampling variances, σ²_s and σ²_c by restricted maximum likelihood (Konstantopoulos 2011)."""
    together = membership @ membership.T
    scale = math.log(max(float(np.var(y)), 1e-12))

    def fit(log_variances):
        source, configuration = np.exp(log_variances)
        inverse = np.linalg.inv(np.diag(variances + configuration) + source * together)
        information = inverse.sum()
        mean = float(inverse.sum(axis=0) @ y) / information
        residual = y - mean
        return inverse, information, mean, residual

    def restricted_loss(log_variances):
        inverse, information, _, residual = fit(log_variances)
        return 0.5 * (-np.linalg.slogdet(inverse)[1] + math.log(information) + residual @ inverse @ residual)

    best = min((optimize.minimize(restricted_loss, start, method="L-BFGS-B", bounds=[(scale - 25, scale + 5)] * 2)
                for start in ((scale, scale), (scale - 4, scale))), key=lambda result: result.fun)
    _, information, mean, _ = fit(best.x)
    return mean, 1.0 / math.sqrt(information), float(np.exp(best.x).sum())


def measure_three_level(args, benchmarks: int = 500) -> None:
    """A three-level REML model against pool_across_sources on the headline method's real design, same draws."""
    start = time.perf_counter()
    design = benchmark_design(args.plan)
    rows = design[design["method"] == HEADLINE]
    sd, _ = configuration_sd(rows, "difference", "standard_error")
    sigma, df = rows["standard_error"].to_numpy(float), rows["df"].to_numpy(float)
    names, membership = source_membership(list(rows["source"]))
    k, n = len(names), sigma.size
    z, t = stats.norm.ppf(0.975), stats.t.ppf(0.975, k - 1)
    rng = np.random.default_rng(0)
    table = []
    for ratio in SOURCE_RATIOS:
        bounds = {name: [] for name in ("reml_mean_normal", "reml_mean_t", "reml_prediction_t", "sources_mean",
                                        "sources_prediction")}
        truths = []
        for _ in range(benchmarks):
            y = membership @ rng.normal(0, ratio * sd, k) + rng.normal(0, sd, n) + rng.normal(0, 1, n) * sigma
            se = sigma * np.sqrt(rng.chisquare(df) / df)
            truths.append(rng.normal(0, ratio * sd) + rng.normal(0, sd))
            mean, standard_error, heterogeneity = _three_level_reml(y, se ** 2, membership)
            pooled = pool_across_sources(y, se, list(rows["source"]))
            predicted = t * math.sqrt(heterogeneity + standard_error ** 2)
            bounds["reml_mean_normal"].append((mean - z * standard_error, mean + z * standard_error))
            bounds["reml_mean_t"].append((mean - t * standard_error, mean + t * standard_error))
            bounds["reml_prediction_t"].append((mean - predicted, mean + predicted))
            bounds["sources_mean"].append((pooled.low, pooled.high))
            bounds["sources_prediction"].append((pooled.prediction_low, pooled.prediction_high))
        row = {"source_ratio": ratio, "configuration_sd": sd, "benchmarks": benchmarks}
        for name, intervals in bounds.items():
            low, high = np.array(intervals).T
            truth = np.array(truths) if name.endswith("prediction_t") or name.endswith("prediction") else 0.0
            row[f"{name}_coverage"] = float(np.mean((low <= truth) & (truth <= high)))
            row[f"{name}_width"] = float(np.mean(high - low))
        table.append(row)
    table = pd.DataFrame(table)
    path = Path(args.out).with_name("three_level_coverage.csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    print(table.round(3).to_string(index=False))
    print(f"\n({time.perf_counter() - start:.0f} s); written to {path}")


if __name__ == "__main__":
    main()
