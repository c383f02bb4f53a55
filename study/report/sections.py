"""The report's sections, each built from the analysis's tables: setup, tuning cost, final comparison,
convergence, the convergence claim, angle dynamics, the landscape and the reproducibility footer."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from study.analysis import (ABSOLUTE_METRICS, REFERENCE_METHOD, TEST_PREFIX, StudyAnalysis, absolute_scores,
                            count_or_none)
from study.config import METRIC_KIND, StudyParams
from study.published import ADACOS_PAPER_CROSSOVER_ITERATIONS, published_setup
import study.report.formats as fmt
from study.report.document import Bullets, Section, Table
from study.report.formats import loss_name, method_name, metric_name, trials_interval
from study.report.reproduction import reproduction_section
from study.report.answer_card import STATISTICS_TERMS, card_section, share, train_next
from study.report.benchmark_form import benchmark_form_section
from study.report.beside import BENCHMARK_NUMBERS, benchmark_section, beside_benchmark
from study.report.verdict import (STATISTICS_OPENING, break_even_intervals, detectable_words, interval_notes,
                                  key_numbers, overtaking_sentence, verdict_sentences)


def _splits_words(seeds) -> str:
    """'split seed 0', or '3 class splits (seeds 0, 1, 2), each with its own search and runs'."""
    if len(seeds) == 1:
        return f"split seed {seeds[0]}"
    return (f"{len(seeds)} class splits (seeds {', '.join(str(seed) for seed in seeds)}), each with its own search and "
            "runs")


def setup_section(analysis: StudyAnalysis, params: StudyParams, manifest: dict) -> Section:
    train, search = params.train, params.search
    splits = manifest.get("splits", {})
    split_table = pd.DataFrame([{"split": name, "samples": entry.get("num_samples", "n/a"),
                                 "classes": entry.get("num_classes", "n/a")} for name, entry in splits.items()])
    budget = (f"budget {search.n_trials} trials per loss" + (f" in each of {search.repeats} independent repeats"
                                                             if search.repeats > 1 else "")
              + f", {search.sampler} sampler (seed {search.seed}), pruner {search.pruner}, "
              f"s log-uniform in [{search.s_range[0]:g}, {search.s_range[1]:g}]")
    ranges = ", ".join(f"m for {loss_name(loss)} in [{low:g}, {high:g}] rad"
                       for loss, (low, high) in search.m_range.items() if loss in search.losses)
    rate = "the learning rate chosen by val (below)" if manifest.get("learning_rates") else f"lr {train.lr:g}"
    bullets = [
        f"Data: `{manifest.get('source', params.data.dataset)}`, {manifest.get('protocol', params.data.protocol)} "
        f"protocol, {_splits_words(manifest.get('split_seeds', [manifest.get('seed', params.data.seed)]))}, fractions "
        f"{', '.join(f'{f:g}' for f in manifest.get('fractions', params.data.fractions))} (train, val, test).",
        f"Model: `{params.model.name}`, {params.model.embedding_size}-d embedding"
        + (", pretrained" if params.model.pretrained else "") + ".",
        f"Training (identical for every loss): {train.optimizer}, {rate}, weight decay "
        f"{train.weight_decay:g}, {train.schedule} schedule, {train.epochs} epochs"
        + (f" capped at {train.max_iterations} iterations" if train.max_iterations else "")
        + f", batch {train.batch_size}, "
        + (f"val evaluated at about {train.eval_points} log-spaced iterations (half-way and the last among them)"
           if train.eval_points else f"val evaluated every {train.eval_every} iterations")
        + (", the weights val scored best kept (early stopping)." if train.checkpoint == "best_val"
           else ", the last weights kept."),
        f"Objective: val {metric_name(analysis.objective)} (`{analysis.objective}`) selects; final runs at seeds "
        f"{', '.join(map(str, params.runs.seeds))}, every method at the same seeds (same initialisation and data "
        "order, so the comparisons pair by seed). Each search trial trains at its own seed, derived from the search "
        "seed and the trial number and never one of these.",
        f"Search: {', '.join(loss_name(loss) for loss in search.losses)}; {budget}"
        + (f"; {ranges}" if ranges else "") + ".",
    ]
    if manifest.get("learning_rates"):
        bullets.insert(3, f"Learning rate: {manifest['learning_rates']}.")
    advice = manifest.get("advice")
    if advice:
        where = (f"stopped at round {advice['round']} of {advice['budget']}" if advice["round"] < advice["budget"]
                 else f"ran all {advice['budget']} rounds")
        bullets.append(f"Searched in rounds, one trial per class split a round, to stop once `study advise` said so "
                       f"(search.stop_early: {search.stop_early}): the searches {where}, where the advice said "
                       f"\"{advice['says']}\"; {advice['saved_trials']} trials, about {advice['saved_seconds']:,.0f} "
                       f"device-seconds, were not run. Its reading there: {advice['lines'][1]}")
    if manifest.get("fallback_reason"):
        bullets.insert(1, f"`{manifest.get('requested_source')}` was asked for but could not be had, so this study "
                          f"ran on the fallback `{manifest.get('source')}` ({manifest['fallback_reason']}).")
    if analysis.num_classes is not None:
        bullets.append(f"Training classes C = {analysis.num_classes}, so AdaCos's fixed scale s_f = √2·ln(C−1) = "
                       + (f"{analysis.s_f:.3f}." if analysis.s_f is not None else "undefined (C < 3)."))
    blocks = [Bullets(bullets)]
    if len(split_table):
        blocks.append(Table(split_table, "Splits (from the prepare stage's manifest)"))
    if len(analysis.search_summary):
        searches = analysis.search_summary
        table = pd.DataFrame({
            "loss": searches["loss"].map(loss_name), "repeats": searches["repeats"], "trials": searches["trials"],
            "completed": searches["complete"], "pruned": searches["pruned"], "failed": searches["failed"],
            # Killed mid-trial and retried, or never run: no evidence, left out of every curve and cost.
            "interrupted": searches["interrupted"],
            "device-seconds": searches["seconds"].map(fmt.seconds),
            "CPU-seconds": searches["cpu_seconds"].map(fmt.seconds),
            "per trial": searches["seconds_per_trial"].map(fmt.seconds),
            f"best val {metric_name(analysis.objective)}": searches["best_value"].map(fmt.score),
            "best s": searches["best_s"].map(lambda v: "n/a" if fmt.missing(v) else f"{v:.3g}"),
            "best m (rad)": searches["best_m"].map(lambda v: "n/a" if fmt.missing(v) else f"{v:.3g}"),
        })
        blocks.append(Table(table, "The searches as run"))
    return Section("Setup", blocks)


def tuning_section(analysis: StudyAnalysis, figures: dict) -> Section:
    objective = metric_name(analysis.objective)
    confidence = f"{analysis.confidence:.0%}"
    blocks = [
        f"A practitioner who runs n tuning trials keeps the one val prefers and deploys it; what they get is that "
        f"trial's **test** {objective}. Each trial trained at its own seed and was scored on test once trained, "
        "recorded but never used to choose. Failed (diverged) trials enter at the metric's floor (a user pays for "
        "them), pruned ones are paid for but never selected. "
        f"Estimator: {analysis.estimator['text']}. Bands ({confidence}): {analysis.estimator['interval']}. Their "
        "coverage was measured in simulated worlds with a known truth calibrated from a real search "
        "(benchmarks/coverage.py; the table is benchmarks/results/coverage.csv).",
        "The untuned methods get the same treatment over their seeds (train n seeds, keep the one val prefers): "
        "this budget-matched control separates what tuning s and m buys from what picking among n trainings buys.",
    ]
    blocks += [figures[name] for name in ("tuning_trials", "tuning_seconds") if name in figures]
    rows, intervals = [], []
    for row in analysis.break_even.itertuples():
        interval = trials_interval(row.trials_low, row.trials_high, row.max_trials, row.valid_trials)
        control_n = count_or_none(row.control_n) or 0
        control_valid = control_n if (count_or_none(row.control_splits) or 0) > 1 else 0
        control_interval = trials_interval(row.control_trials_low, row.control_trials_high, control_n, control_valid)
        intervals += [(row.control_trials_low, row.control_trials_high, control_valid)] if control_n else []
        intervals.append((row.trials_low, row.trials_high, row.valid_trials))
        rows.append({"searched loss": loss_name(row.loss), "reference": method_name(row.reference),
                     f"against the best of n of its seeds by val: break-even trials [{confidence}]":
                         (f"{_trials_cell(row.control_trials, row.control_trials_high, control_n)} {control_interval}"
                          if control_n else "n/a (no seeds)"),
                     f"gap at n = seeds [{confidence}]": (f"{fmt.signed(row.control_gap)} "
                                                          f"{fmt.interval(row.control_low, row.control_high)}"
                                                          if control_n else "n/a"),
                     f"target: its mean test {objective} of one run": fmt.score(row.target),
                     f"break-even trials against one run [{confidence}]":
                         f"{_trials_cell(row.trials, row.trials_high, row.max_trials)} {interval}",
                     "device-seconds": fmt.seconds(row.seconds) if bool(row.reached) else "n/a",
                     f"gain of the whole search on test [{confidence}]":
                         f"{fmt.signed(row.gain)} {fmt.interval(row.gain_low, row.gain_high)}",
                     "old: expected best val − mean val": fmt.signed(row.old_val_gain),
                     "old break-even": fmt.count(row.old_trials) if count_or_none(row.old_trials) else
                     f"not within {row.max_trials}"})
    if rows:
        blocks.append(Table(pd.DataFrame(rows), "Break-even: the fewest trials whose val-selected test score reaches "
                                                "the budget-matched control (the best of as many runs of the reference "
                                                "picked by val) and, beside it, the reference's mean test score of one "
                                                "run"))
        notes = interval_notes(intervals)
        blocks.append(
            "A break-even is stated as reached only where its interval shows it; a number marked \"point estimate\" "
            "is where the curve's estimate crosses, with an interval that does not confirm it. The budget-matched "
            "control exists for n up to the reference's seeds per class split (the same number of trainings); its "
            "interval is a t interval over the class splits of the per-split gap (each split ran its own search and "
            "seeds). The last two columns are the classic quantities, for contrast: the expected *maximum* of n val "
            "scores against the reference's *mean* val score. The maximum includes the best of n draws of seed noise, "
            "so it shows a gain and an early break-even even where tuning buys nothing on held-out data."
            + (f" {notes}" if notes else ""))
        luck = analysis.search_summary.dropna(subset=["seed_luck"]) if "seed_luck" in analysis.search_summary \
            else analysis.search_summary.iloc[:0]
        if len(luck):
            blocks.append("Seed luck, the test score of the trial each search selected against its (s, m) retrained "
                          "at fresh seeds (the tuned runs' mean on the same split): " + "; ".join(
                              f"{loss_name(row.loss)} {fmt.signed(row.seed_luck)} "
                              + (f"{fmt.interval(row.seed_luck_low, row.seed_luck_high)} ({confidence} t interval "
                                 f"over {row.seed_luck_splits} class splits)" if row.seed_luck_splits > 1
                                 else "(one class split: no interval)") for row in luck.itertuples())
                          + ". A search's own best score holds that much of its trial's seed, which a user who "
                            "retrains the found values does not keep.")
    else:
        blocks.append("No loss was searched, so there is no tuning curve.")
    if "tuning_val" in figures:
        blocks.append(figures["tuning_val"])
    return Section("Tuning cost versus accuracy", blocks)


def _trials_cell(trials, high, limit) -> str:
    """A break-even in a table: '3', '4 (point estimate)' where the interval does not show it, or 'not within 12'."""
    if count_or_none(trials) is None:
        return f"not within {limit}"
    return fmt.count(trials) + ("" if count_or_none(high) is not None else " (point estimate)")


def _difference_cell(row) -> str:
    if fmt.missing(row["difference"]):
        return "n/a (no finished runs)"
    cell = f"{fmt.signed(row['difference'])} {fmt.interval(row['low'], row['high'])}"
    return cell if row["significant"] else cell + (" (equivalent)" if row["equivalent"] else " (n.s.)")


def absolute_shown(run_scores: pd.DataFrame, methods: list[str], confidence: float, objective: str) -> pd.DataFrame:
    """Each method's absolute test scores (mean [CI]) on the retrieval metrics papers lead with, PML-style, and its
    objective's difference to Fixed AdaCos in % of Fixed AdaCos's score beside them."""
    scores = absolute_scores(run_scores, methods, confidence).set_index(["method", "metric"])
    if scores.empty:
        return pd.DataFrame()
    reference = (scores.loc[(REFERENCE_METHOD, objective), "mean"] if (REFERENCE_METHOD, objective) in scores.index
                 else math.nan)
    rows = []
    for method in methods:
        row = {"method": method_name(method)}
        for metric in ABSOLUTE_METRICS:
            found = scores.loc[(method, metric)] if (method, metric) in scores.index else None
            row[metric_name(metric)] = ("n/a" if found is None else f"{fmt.score(found['mean'])} "
                                        f"[{fmt.score(found['low'])}, {fmt.score(found['high'])}]")
        mean = scores.loc[(method, objective), "mean"] if (method, objective) in scores.index else math.nan
        row[f"{metric_name(objective)} vs Fixed AdaCos"] = ("reference" if method == REFERENCE_METHOD else
                                                            share(mean - reference, reference))
        rows.append(row)
    return pd.DataFrame(rows)


def final_section(analysis: StudyAnalysis, figures: dict) -> Section:
    objective = f"{TEST_PREFIX}{analysis.objective}"
    final = analysis.final.set_index(["method", "metric"])
    differences = analysis.differences.set_index(["method", "metric"])
    costs = analysis.costs.set_index("method")
    ci = f"{analysis.confidence:.0%} CI"

    def mean_std(method, metric):
        if (method, metric) not in final.index:
            return "n/a"
        row = final.loc[(method, metric)]
        return "n/a" if row["n"] == 0 else f"{fmt.score(row['mean'])} ± {fmt.score(row['std'])}"

    headline = []
    for method in analysis.methods:
        cost = costs.loc[method] if method in costs.index else None
        n = int(final.loc[(method, objective), "n"]) if (method, objective) in final.index else 0
        notes = [f"{int(cost[key])} {word}" for key, word in (("diverged", "diverged"), ("at_chance", "at chance"))
                 if cost is not None and cost[key]]
        seeds = f"{n}" + (f" ({', '.join(notes)})" if notes else "")
        row = differences.loc[(method, objective)] if (method, objective) in differences.index else None
        headline.append({"method": method_name(method), f"test {metric_name(objective)} (mean ± std)":
                         mean_std(method, objective), "seeds": seeds,
                         f"− Fixed AdaCos [{ci}]": "reference" if method == REFERENCE_METHOD else
                         "n/a" if row is None else _difference_cell(row),
                         "p (Holm)": "" if row is None or fmt.missing(row["p_holm"]) else f"{row['p_holm']:.3g}",
                         "detectable at 80% power": "" if row is None else detectable_words(row),
                         "tuning trials": fmt.count(cost["tuning_trials"]) if cost is not None else "n/a",
                         "tuning device-seconds": fmt.seconds(cost["tuning_seconds"]) if cost is not None else "n/a",
                         "one run": fmt.seconds(cost["run_seconds"]) if cost is not None else "n/a"})
    metrics = list(dict.fromkeys(analysis.final["metric"]))
    every_metric = pd.DataFrame([{"method": method_name(method),
                                  **{metric_name(metric): mean_std(method, metric) for metric in metrics}}
                                 for method in analysis.methods])
    every_difference = pd.DataFrame([{
        "method": method_name(row.method), "metric": metric_name(row.metric),
        "difference": fmt.signed(row.difference), f"{ci} ({row.test})": fmt.interval(row.low, row.high),
        "p": "n/a" if fmt.missing(row.p_value) else f"{row.p_value:.3g}",
        "p (Holm)": "n/a" if fmt.missing(row.p_holm) else f"{row.p_holm:.3g}",
        "Welch": f"{fmt.signed(row.welch_difference)} {fmt.interval(row.welch_low, row.welch_high)}",
        "margin": f"±{row.margin:.3g}", "margin in seed sds within a split": "n/a"
        if fmt.missing(row.margin_seed_sds) else f"{row.margin_seed_sds:.2g} (sd {row.seed_sd:.4f}, {row.seed_sd_df} df)",
        "margin, share of remaining error": "n/a" if fmt.missing(row.margin_error_share)
        else f"{row.margin_error_share:.1%}",
        "TOST p (Holm)": "n/a" if fmt.missing(row.tost_p_holm) else f"{row.tost_p_holm:.3g}",
        "verdict": ("counts (significant, beyond the margin)" if row.significant and abs(row.difference) >= row.margin
                    else "significant, within the margin" if row.significant and row.equivalent
                    else "significant, not shown to reach the margin" if row.significant
                    else "equivalent" if row.equivalent else "undecided"),
        "detectable": detectable_words(row._asdict()),
        "seeds (or splits) to resolve": "n/a" if pd.isna(row.seeds_to_resolve) else
        f"{int(row.seeds_to_resolve):,} {row.unit}",
        "direction": "higher is better" if row.higher_is_better else "lower is better",
    } for row in analysis.differences.itertuples()])
    alpha = 1 - analysis.confidence
    blocks = [
        f"Every run of the final comparison evaluated once on test; every method ran at the same seeds, so each "
        f"difference to Fixed AdaCos is paired by seed (same initialisation and data order), with Welch's unpaired "
        f"interval beside it. With several class splits, each split's seeds are averaged first and the interval is "
        f"a t interval over splits (a one-way random-effects model): it carries the split-to-split variance and, "
        f"since each split ran its own search, the search-to-search variance; its standard error never falls below "
        f"what the within-split seed noise implies (with few splits their own spread can, by chance). Each method's "
        f"differences on the "
        f"{len(metrics)} test metrics are one family: p-values are Holm-corrected and \"significant\" means Holm "
        f"p < {alpha:.2g}. A difference counts only when it is significant and at least the metric's margin "
        f"(analysis.equivalence_margin; the table gives each margin in Fixed AdaCos's seed-to-seed sd within a split, "
        f"pooled over splits, and as a share of its remaining error); it is called equivalent when two one-sided "
        f"tests put it inside the margin; otherwise it is undecided, and the table says the smallest difference the "
        f"study detects with 80% power at Holm's strictest level (\"not detectable\" where none inside the metric's "
        f"range is) and about how many seeds (or splits) would resolve it. Diverged runs are left "
        "out of the means and counted. Tuning cost is the whole search behind a tuned method, failed and pruned "
        "trials included.",
        Table(pd.DataFrame(headline), f"Test {metric_name(objective)}, tuning cost and the difference to Fixed AdaCos"),
    ]
    at_chance = analysis.costs[analysis.costs["at_chance"] > 0]
    if len(at_chance):
        blocks.append(
            "Runs at chance: " + ", ".join(f"{method_name(row.method)} {row.at_chance} of {row.runs}"
                                           for row in at_chance.itertuples())
            + ". They finished without a NaN but ended with test ROC AUC 0.5: every test embedding scores every pair "
              "alike, the mark of a network collapsed to one output (dead ReLUs under a too large learning rate, "
              "for example). They stay in the means above, as what the method delivered on those seeds.")
    if "final_test" in figures:
        blocks.append(figures["final_test"])
    if len(metrics) > 1:
        blocks.append(Table(every_metric, "Every test metric (mean ± std over seeds; per-seed scores in "
                                          "tables/run_scores.csv)"))
    if len(every_difference):
        blocks.append(Table(every_difference, "Every test metric: method − Fixed AdaCos (for EER, lower is better, "
                                              "so a negative difference favours the method)"))
    return Section("Final comparison on test", blocks)


def convergence_section(analysis: StudyAnalysis, figures: dict) -> Section:
    objective = metric_name(analysis.objective)
    if not analysis.targets:
        return Section("Convergence", ["No run finished with a finite val score, so there are no targets."])
    confidence = f"{analysis.confidence:.0%}"
    best = (f"{fmt.score(analysis.best_final_val)}, the mean final val {objective} of "
            f"{method_name(analysis.best_final_method)}")
    tables = []
    for basis, title in (("own", "of each method's own final val score"),
                         ("best", "of the best method's final val score (the same targets for every method)")):
        rows = []
        for method in analysis.methods:
            row = {"method": method_name(method)}
            for found in analysis.convergence[(analysis.convergence["method"] == method)
                                              & (analysis.convergence["basis"] == basis)].itertuples():
                column = f"to {found.fraction:.0%}" + (f" ({found.target:.4f})" if basis == "best" else "")
                interval = ("(no interval; " if fmt.missing(found.coverage) else
                            f"[{fmt.iterations(found.low)}, {fmt.iterations(found.high)}] ({found.coverage:.1%}; ")
                row[column] = (f"{fmt.iterations(found.median_iteration)} {interval}"
                               f"{found.seeds_reached}/{found.seeds} seeds)")
            speed = analysis.convergence_speed[(analysis.convergence_speed["method"] == method)
                                               & (analysis.convergence_speed["basis"] == basis)]
            for found in speed.itertuples():
                row[f"− Fixed AdaCos at {found.fraction:.0%}"] = _speed_cell(found, method)
            rows.append(row)
        tables.append(Table(pd.DataFrame(rows).fillna("—"), f"Median iterations to fractions {title}, each with its "
                                                            "distribution-free interval and that interval's exact "
                                                            "coverage"))
    blocks = [
        "Iterations to a target, per run the first evaluated iteration at or above it; per method the median over "
        "seeds. A seed that never reached the target counts as slower than every seed that did, so a median is "
        "\"not reached\" when half the seeds or more missed it. Two kinds of target: fractions of each method's "
        f"*own* mean final val score (how fast it gets near where it ends), and fractions of the best method's "
        f"({best}). Each median's interval is distribution-free, from the seeds' order statistics, and covers "
        "the true median with at least the exact probability printed beside it (binomial, whatever the "
        f"distribution; at least {confidence}); with fewer than 6 seeds no such interval reaches {confidence}, and "
        "none is printed (\"no interval\"). A bootstrap of a median over so few runs has no such guarantee, so none "
        "is used. The difference to Fixed AdaCos is the difference of the medians, a point estimate without an "
        "interval (\"neither reached\" where neither median run reaches the target, never a difference of 0); a "
        "method is called faster or slower only where the exact sign test over paired seeds (runs at one seed "
        f"share initialisation and data order) rejects at {1 - analysis.confidence:.2g}.",
        *tables,
    ]
    if "convergence" in figures:
        blocks.append(figures["convergence"])
    return Section("Convergence", blocks)


def _speed_cell(found, method: str) -> str:
    """'+10 (point estimate); sooner on 1, later on 5 of 8 seeds, sign test p = 0.22 (n.s.)'."""
    if found.reached == "neither":
        difference = "neither reached"
    elif found.reached == "both":
        difference = f"{fmt.signed_iterations(found.difference)} (point estimate)"
    else:
        difference = f"only {'this method' if found.reached == 'method' else 'Fixed AdaCos'} reached"
    judged = "faster" if found.faster == method else "slower" if isinstance(found.faster, str) else "n.s."
    pairs = found.faster_seeds + found.slower_seeds + found.tied_seeds
    return (f"{difference}; sooner on {found.faster_seeds}, later on {found.slower_seeds} of {pairs} seeds, sign test "
            f"p = {fmt.p_value(found.p_value)} ({judged})")


def _crossing_sentence(pair, objective: str) -> str:
    """What one (AdaCos, ArcFace) pair's curves show, from its row of `analysis.crossings`."""
    adacos, arcface = method_name(pair.adacos_method), method_name(pair.arcface_method)
    first, last = fmt.iteration_number(pair.first_iteration), fmt.iteration_number(pair.last_iteration)
    if not fmt.missing(pair.gap_at_end) and not pair.gap_significant:
        return (f"{adacos} and {arcface} end level within seed noise: the final val gap {fmt.signed(pair.gap_at_end)} "
                f"(CI {fmt.interval(pair.gap_low, pair.gap_high)} over seeds) is not significant, so no lasting "
                "overtake is claimed either way.")
    if pd.isna(pair.crossing_iteration):
        if fmt.missing(pair.gap_at_end):
            return (f"{adacos} does not overtake {arcface} for good within the run's {last} iterations: it has no "
                    "val score at the end (every seed diverged).")
        behind = f"behind by {-pair.gap_at_end:.4f} at the last evaluation"
        if pair.adacos_led_before:
            return (f"{adacos} leads {arcface} early, but {arcface} overtakes it for good at iteration "
                    f"{fmt.iteration_number(pair.arcface_ahead_from)} of {last} and {adacos} ends {behind}: the "
                    "opposite order to the paper's figure, where AdaCos is the one that overtakes late.")
        return (f"{adacos} is never ahead of {arcface} (level at most, then behind for good from iteration "
                f"{fmt.iteration_number(pair.arcface_ahead_from)}) and does not overtake it within the run's {last} "
                f"iterations; it ends {behind}.")
    gap = "" if fmt.missing(pair.gap_at_end) else f" (ahead by {pair.gap_at_end:.4f} at the end)"
    if pair.ahead_from_start:
        return (f"{adacos} is at or above {arcface} at every evaluation from iteration {first} to the end of the run "
                f"at iteration {last}{gap}: ahead from the start, it never needs to overtake.")
    share = pair.crossing_iteration / pair.last_iteration if pair.last_iteration else math.nan
    return (f"{adacos} overtakes {arcface} for good at iteration {fmt.iteration_number(pair.crossing_iteration)} of "
            f"{last} ({share:.0%} of the run) and stays at or above it to the end{gap}; before that its mean val "
            f"{objective} fell below {arcface}'s at least once.")


def crossings_section(analysis: StudyAnalysis, figures: dict) -> Section:
    objective = metric_name(analysis.objective)
    paper = fmt.iteration_number(ADACOS_PAPER_CROSSOVER_ITERATIONS)
    blocks = [
        f"The AdaCos paper's training curves suggest that AdaCos only overtakes ArcFace after about {paper} "
        f"iterations. For each AdaCos variant against each ArcFace variant run here, the mean val {objective} over "
        "seeds is compared at every iteration both were evaluated at; the crossing is where the final stretch "
        "begins in which AdaCos stays at or above ArcFace to the end of the run (a lead that is lost again does not "
        "count, and ties count as not behind). Where AdaCos ends behind, the reverse is reported: where ArcFace's "
        "final lead begins, and whether AdaCos led before it. A lead is claimed only where the final val gap is "
        "significant across seeds (paired by seed): mean curves that end a hair apart say nothing about who ends "
        "ahead."]
    crossings = analysis.crossings
    if crossings.empty:
        blocks.append("No Fixed or Dynamic AdaCos run and no tuned or default ArcFace run recorded val curves side "
                      "by side, so there is nothing to compare.")
        return Section("Convergence claim", blocks)
    rows = [{"AdaCos": method_name(row.adacos_method), "ArcFace": method_name(row.arcface_method),
             "overtakes for good at iteration": "not within the run" if pd.isna(row.crossing_iteration) else
             fmt.iteration_number(row.crossing_iteration) + (" (ahead from the start)" if row.ahead_from_start else ""),
             "ahead from the start": "yes" if row.ahead_from_start else "no",
             "ArcFace ahead for good from": "—" if pd.isna(row.arcface_ahead_from) else
             fmt.iteration_number(row.arcface_ahead_from) + (" (AdaCos led before)" if row.adacos_led_before else ""),
             "evaluated iterations": f"{fmt.iteration_number(row.first_iteration)}–{fmt.iteration_number(row.last_iteration)}",
             f"AdaCos − ArcFace at the end (val {objective}) [CI over seeds]":
                 f"{fmt.signed(row.gap_at_end)} {fmt.interval(row.gap_low, row.gap_high)}"
                 + ("" if row.gap_significant else " (n.s.: no lasting lead claimed)")}
            for row in crossings.itertuples()]
    blocks.append(Table(pd.DataFrame(rows), "Where AdaCos's mean val curve overtakes ArcFace's for good, or ArcFace's "
                                            "overtakes AdaCos's"))
    blocks.append(" ".join(_crossing_sentence(row, objective) for row in crossings.itertuples()))
    longest = int(crossings["last_iteration"].max())
    # Only a final gap that is significant across seeds supports a claim about who ends ahead.
    resolved = crossings[crossings["gap_significant"]]
    at_or_above = resolved[resolved["crossing_iteration"].notna()]
    reversed_order = int(resolved["adacos_led_before"].sum())
    summary = (f"{len(resolved)} of {fmt.plural(len(crossings), 'pair')} end with a significant gap; "
               f"{len(at_or_above)} with AdaCos ahead"
               + (f", and in {reversed_order} ArcFace overtakes an early AdaCos lead" if reversed_order else ""))
    late = ADACOS_PAPER_CROSSOVER_ITERATIONS
    late_adacos = int(((~at_or_above["ahead_from_start"]) & (at_or_above["crossing_iteration"] >= late)).sum())
    # The mirror image of the paper's claim: ArcFace taking over an AdaCos lead only that late.
    late_arcface = int((resolved["adacos_led_before"] & (resolved["arcface_ahead_from"] >= late)).sum())
    if longest < late:
        blocks.append(f"These runs end by iteration {fmt.iteration_number(longest)}, before the ~{paper} of the paper's "
                      f"figure, so they cannot show a crossing that late. Within them, {summary}.")
    else:
        blocks.append(f"These runs reach iteration {fmt.iteration_number(longest)}, past the ~{paper} of the paper's "
                      f"figure: {summary}. In {late_adacos} of the {fmt.plural(len(crossings), 'pair')} AdaCos overtakes "
                      f"ArcFace for good only at iteration {paper} or later, as in the paper's figure"
                      + (f"; in {late_arcface} ArcFace overtakes an AdaCos lead that late instead" if late_arcface
                         else "") + ".")
    if "crossings" in figures:
        blocks.append(figures["crossings"])
    return Section("Convergence claim", blocks)


def angles_section(analysis: StudyAnalysis, figures: dict) -> Section:
    blocks = ["The median angle between each embedding and its own class weight, and the mean cosine to the other "
              "classes, over training (mean over seeds; measured on the training batch of the step before each "
              "evaluation). AdaCos's argument is that a well-chosen scale keeps the target angle falling steadily "
              "while the non-target cosines stay near zero."]
    blocks += [figures[name] for name in ("angles", "dynamic_scale") if name in figures]
    if "dynamic_scale" not in figures:
        blocks.append("No Dynamic AdaCos runs recorded their scale, so its scale curve is not shown.")
    return Section("Angle dynamics", blocks)


def landscape_section(analysis: StudyAnalysis, figures: dict) -> Section:
    if "landscape" not in figures:
        return Section("The (s, m) landscape", ["No loss was searched."])
    s_f = f" AdaCos's s_f = {analysis.s_f:.3f} is the dashed vertical line." if analysis.s_f is not None else ""
    return Section("The (s, m) landscape", [
        f"Every finished trial of each search, coloured by its val {metric_name(analysis.objective)}; failed "
        f"(diverged) and pruned trials in grey, the best trial as a red star (one per class split; several splits "
        f"are numbered, each with its own marker, set a little apart in s).{s_f} The colour scale spans the trials' "
        "central range (within 1.5 interquartile ranges of the quartiles), so one outlier cannot give every other "
        "trial the same colour; trials outside it are marked ▼ (below) or ▲ (above), their scores in the legend.",
        figures["landscape"],
    ])


def footer_section(environment: dict) -> Section:
    def describe(value) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{key} {item}" for key, item in value.items())
        if isinstance(value, (list, tuple)):
            return ", ".join(map(str, value))
        return str(value)

    items = [f"{key.replace('_', ' ')}: `{describe(value)}`" for key, value in environment.items()]
    return Section("Reproducibility", [Bullets(items or ["no environment recorded"])])


def convergence_sentence(analysis: StudyAnalysis) -> str:
    """Whether the methods compared converged by the plateau rule, and what the answer is then about."""
    plateau = analysis.plateau.set_index("method")
    if plateau.empty:
        return ""
    lengths = plateau["last_iteration"]
    converged = [method_name(m) for m in analysis.methods if m in plateau.index and plateau.loc[m, "converged"]]
    not_converged = [f"{method_name(m)} ({fmt.rise(plateau.loc[m, 'rise'])})" for m in analysis.methods
                     if m in plateau.index and not plateau.loc[m, "converged"]]
    compared = [REFERENCE_METHOD] + [m for m in analysis.methods if m.endswith("_tuned")][:1]
    short = any(m in plateau.index and not plateau.loc[m, "converged"] for m in compared)
    each = fmt.listing([f"{method_name(m)} {fmt.iterations(lengths[m])}" for m in analysis.methods if m in lengths])
    lead = (f"Every run trained {fmt.iterations(lengths.max())} iterations and" if lengths.nunique() == 1 else
            f"Each method trained until its runs met the plateau rule, up to runs.plateau_cap ({each} iterations); "
            "every run")
    parts = [f"{lead} kept the checkpoint val selected."]
    if converged:
        parts.append(f"Converged (best val rose under 1% over the second half): {fmt.listing(converged)}.")
    if not_converged:
        parts.append(f"Still improving: {fmt.listing(not_converged)}.")
    parts.append(f"So this answer is for training this short, not for converged models; train "
                 f"{train_next(analysis.plateau)} iterations (train.epochs, or a larger runs.plateau_cap) and check "
                 "again for the converged answer." if short else "So the answer compares converged models.")
    return " ".join(parts)


def plateau_shown(plateau: pd.DataFrame) -> Table:
    """study.plateau.plateau_table as the reader sees it."""
    rows = [{"method": method_name(row.method), "converged": "yes" if row.converged else "no",
             "runs meeting the rule": f"{row.runs_converged} of {row.runs}",
             "best val at half-way": fmt.score(row.best_at_half), "at the end": fmt.score(row.best_at_end),
             "rise": fmt.rise(row.rise), "iteration val selected (median)": fmt.iterations(row.selected_iteration)}
            for row in plateau.itertuples()]
    return Table(pd.DataFrame(rows), "The plateau rule per method: the mean over runs of the best val score so far at "
                                     "half-way and at the end")


def overtaking_bullets(crossovers: pd.DataFrame) -> list:
    """One sentence per AdaCos × ArcFace pair of study.analysis.learning_curves.crossover_table ([] without any)."""
    found = crossovers.dropna(subset=["difference_at_end"])
    return [Bullets([overtaking_sentence(pair) for pair in found.to_dict("records")])] if len(found) else []


def training_length_section(analysis: StudyAnalysis, figures: dict) -> Section:
    """Each method's learning curve on test and its convergence by the plateau rule of docs/analysis.md."""
    blocks = [convergence_sentence(analysis), plateau_shown(analysis.plateau),
              *overtaking_bullets(analysis.learning_crossovers)]
    if "learning_curves" in figures:
        blocks.append(figures["learning_curves"])
    return Section("Training length and convergence", blocks)


def answer_section(analysis: StudyAnalysis, figures: dict) -> Section:
    """The answer first: the recommendation, the figure that shows it, the numbers behind it, then the full verdict."""
    sentences = verdict_sentences(analysis)
    blocks = [f"**{sentences[0]}**"]
    if "tuning_trials" in figures:
        blocks.append(figures["tuning_trials"])
    absolute = absolute_shown(analysis.run_scores, analysis.methods, analysis.confidence, analysis.objective)
    if len(absolute):
        runs = analysis.run_scores
        over = ("class splits (each split's seeds averaged)" if "split" in runs and runs["split"].nunique() > 1
                else "seeds")
        blocks.append(Table(absolute, f"Absolute test scores first: mean [{analysis.confidence:.0%} t interval over "
                                      f"{over}, on the logit scale], and the difference in % of Fixed AdaCos's score"))
    numbers = key_numbers(analysis)
    if len(numbers):
        blocks.append(Table(numbers, "The numbers behind the recommendation, one claim a row"))
        blocks.append(STATISTICS_TERMS)
        notes = interval_notes(break_even_intervals(analysis.verdict_facts["break_even"]))
        if notes:
            blocks.append(notes)  # where the notation first appears
    # A paragraph each: the variance, the cost, the other metrics, ...; the statistics are the table's rows.
    blocks += [sentence for sentence in sentences[1:] if not sentence.startswith(STATISTICS_OPENING)]
    return Section("Verdict", blocks)


def report_sections(analysis: StudyAnalysis, params: StudyParams, manifest: dict, environment: dict,
                    figures: dict, reproduction: pd.DataFrame | None = None,
                    benchmark_numbers: Path = BENCHMARK_NUMBERS) -> list[Section]:
    """Every section of the report, the verdict first and the study beside the benchmark (`benchmark_numbers`, the
    committed benchmark's aggregate) second."""
    objective = metric_name(analysis.objective)
    answers = (
        "ArcFace has two hyperparameters, the scale s and the margin m, that practitioners tune over many runs; "
        "AdaCos claims to need none (a fixed scale from the class count, or one that adapts every step). This report "
        f"measures, on this data, what a search of n trials buys on the held-out test split (the test {objective} of "
        "the trial val selects) and after how many trials it matches Fixed AdaCos, at an equal number of trainings "
        "(the best of n Fixed AdaCos seeds picked by val) and against one Fixed AdaCos run, how tuned ArcFace "
        f"retrained at fresh seeds compares with Fixed AdaCos on every test metric (paired by seed, with "
        f"{analysis.confidence:.0%} intervals, Holm-corrected, and equivalence tests), how ArcFace at its usual "
        "defaults fares, and how many iterations each method needs to converge. Val selects; test only reports."
    )
    figures_after_answer = {name: figure for name, figure in figures.items()
                            if name not in ("tuning_trials", "learning_curves")}
    return [
        card_section(analysis, manifest), answer_section(analysis, figures),  # the answer first, whole
        training_length_section(analysis, figures),
        benchmark_section(beside_benchmark(analysis, benchmark_numbers)),
        benchmark_form_section(analysis, params.analysis.score_share(METRIC_KIND[analysis.objective])),
        Section("What this answers", [answers]),
        setup_section(analysis, params, manifest), tuning_section(analysis, figures_after_answer),
        final_section(analysis, figures), convergence_section(analysis, figures),
        crossings_section(analysis, figures), angles_section(analysis, figures), landscape_section(analysis, figures),
        *([reproduction_section(published_setup(params.report.reproduce), reproduction, manifest)]
          if params.report.reproduce and reproduction is not None else []),
        footer_section(environment),
    ]
