"""Tests for study.report: a small synthetic study analysed and written to a temporary folder.

The numbers the report must show are recomputed here with numpy and scipy, independently of
study.analysis, and looked for in report.md, report.html and metrics.json.
"""

import itertools
import json
import math
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy import stats

from study.analysis import analyse_study, recommend
from study.config import StudyParams
from study.report import trials_interval, verdict, verdict_sentences, write_report
from study.report.answer_card import CARD_WORDS

OBJECTIVE = "accuracy"
SEEDS = (0, 1, 2)
ITERATIONS = (0, 20, 40, 60, 80)
NUM_CLASSES = 10
METRICS = ("accuracy", "knn_accuracy", "precision_at_1", "r_precision", "map_at_r", "roc_auc", "eer",
           "tar_at_far_1e-2", "tar_at_far_1e-3", "verification_accuracy")
# Final val / test accuracy of each method at seeds 0, 1, 2 (NaN: that run diverged).
FINAL_SCORES = {
    "fixed_adacos": [0.960, 0.965, 0.970],
    "dynamic_adacos": [0.955, 0.962, 0.966],
    "softmax": [0.900, 0.905, 0.910],  # never reaches 95% of the best: a "not reached" target
    "arcface_default": [0.930, 0.935, math.nan],  # seed 2 diverged
    "arcface_tuned": [0.962, 0.968, 0.966],
}
RATES = {"fixed_adacos": 0.08, "dynamic_adacos": 0.06, "softmax": 0.05, "arcface_default": 0.03, "arcface_tuned": 0.04}
ARCFACE_VALUES = [0.90, 0.93, 0.95, 0.96, 0.97, 0.94, 0.955, 0.92]
ARCFACE_SECONDS = [20.0, 22.0, 18.0, 21.0, 19.0, 20.0, 23.0, 17.0]
TRIAL_TEST_OFFSET = 0.005  # each completed trial's test accuracy is its val accuracy plus this


def make_study(arcface_tuned_test=None):
    """Synthetic trials, evaluated runs and their val curves of a realistic small study."""
    rng = np.random.default_rng(0)
    trial_rows = []
    for trial, (value, seconds) in enumerate(zip(ARCFACE_VALUES, ARCFACE_SECONDS)):
        trial_rows.append({"loss": "arcface", "repeat": 0, "trial": trial, "state": "COMPLETE",
                           "s": float(2 + 4 * trial), "m": 0.1 * trial, "value": value,
                           "test_value": value + TRIAL_TEST_OFFSET, "seconds": seconds, "status": "completed"})
    trial_rows.append({"loss": "arcface", "repeat": 0, "trial": 8, "state": "FAIL", "s": 120.0, "m": 0.95,
                       "value": math.nan, "test_value": math.nan, "seconds": 4.0, "status": "diverged"})
    trial_rows.append({"loss": "arcface", "repeat": 0, "trial": 9, "state": "PRUNED", "s": 1.5, "m": 0.2,
                       "value": math.nan, "test_value": math.nan, "seconds": 6.0, "status": "stopped"})
    trials = pd.DataFrame(trial_rows).assign(objective=OBJECTIVE, device="cpu", iterations=80, reason="")

    run_rows, history_rows = [], []
    for method, finals in FINAL_SCORES.items():
        tests = finals if method != "arcface_tuned" or arcface_tuned_test is None else arcface_tuned_test
        for seed, final, test in zip(SEEDS, finals, tests):
            diverged = math.isnan(final)
            row = {"method": method, "loss": method.replace("_tuned", "").replace("_default", ""),
                   "s": {"arcface_default": 64.0, "arcface_tuned": 10.0}.get(method, math.nan),
                   "m": {"arcface_default": 0.5, "arcface_tuned": 0.4}.get(method, math.nan), "seed": seed,
                   "status": "diverged" if diverged else "completed", "reason": "non-finite loss" if diverged else "",
                   "seconds": 30.0 + seed, "device": "cpu", "iterations": 40 if diverged else 80,
                   "objective": OBJECTIVE, "val_score": final, "checkpoint": ""}
            for metric in METRICS:
                row[f"test_{metric}"] = math.nan if diverged else (
                    test if metric == "accuracy" else float(rng.uniform(0.5, 0.9)))
            run_rows.append(row)
            for iteration in ITERATIONS:
                level = 0.95 if diverged else final
                score = level * (1 - math.exp(-RATES[method] * iteration)) + 0.1 * math.exp(-RATES[method] * iteration)
                if diverged and iteration > 40:
                    continue
                history_rows.append({
                    "method": method, "seed": seed, "iteration": iteration, "epoch": iteration // 20,
                    "train_loss": 2.0 * math.exp(-0.03 * iteration),
                    "s": (3.1 + 0.02 * iteration + 0.1 * seed) if method == "dynamic_adacos" else math.nan,
                    "theta_med_deg": math.nan if iteration == 0 else 80 - 0.5 * iteration + seed,
                    "cos_target_mean": math.nan if iteration == 0 else 0.1 + 0.008 * iteration,
                    "cos_nontarget_mean": math.nan if iteration == 0 else 0.02 - 0.0001 * iteration,
                    OBJECTIVE: math.nan if diverged and iteration == 40 else score,
                    "precision_at_1": score, "map_at_r": score - 0.1, "seconds": iteration / 3})
    return trials, pd.DataFrame(run_rows), pd.DataFrame(history_rows)


# Absolute margins (accuracy 0.005), which these tests' wording reads; the shipped share of the score is read in
# tests/test_learning_curves.py and tests/test_decision.py.
ABSOLUTE_MARGINS = {"accuracy": 0.005, "retrieval": 0.01, "verification": 0.01}
PARAMS = StudyParams.from_dict({"analysis": {"n_bootstrap": 200, "equivalence_margin": ABSOLUTE_MARGINS},
                                "runs": {"seeds": list(SEEDS)}})
MANIFEST = {"source": "digits", "protocol": "closed", "seed": 0, "fractions": [0.6, 0.2, 0.2],
            "splits": {name: {"file": f"{name}.pt", "num_samples": count, "num_classes": NUM_CLASSES}
                       for name, count in (("train", 1078), ("val", 359), ("test", 360))}}
ENVIRONMENT = {"git_revision": "0123abc", "params_hash": "feedbeef", "device": "cpu (test)",
               "packages": {"numpy": np.__version__, "pandas": pd.__version__}}


def analyse(trials, runs, history):
    return analyse_study(trials, runs, history, OBJECTIVE, PARAMS.analysis, num_classes=NUM_CLASSES)


@pytest.fixture(scope="module")
def study():
    return make_study()


@pytest.fixture(scope="module")
def written(study, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("report")
    analysis = analyse(*study)
    # No benchmark beside it: the report must not depend on what the repository's benchmark holds.
    return analysis, write_report(analysis, PARAMS, MANIFEST, ENVIRONMENT, out_dir,
                                  benchmark_numbers=out_dir / "no-benchmark.json"), out_dir


FIGURES = ("tuning_trials", "tuning_seconds", "expected_best_val", "convergence", "crossings", "angles",
           "dynamic_scale", "landscape", "final_test")


def test_every_figure_is_a_valid_png(written):
    _, paths, out_dir = written
    for name in FIGURES:
        path = out_dir / "figures" / f"{name}.png"
        assert paths[f"figures/{name}.png"] == path
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] > 400 and image.size[1] > 200


def test_every_table_is_written_with_its_columns(written):
    _, paths, out_dir = written
    for name in ("tuning_curves", "tuning_search_wide", "tuning_controls_wide", "break_even", "run_scores",
                 "final_test", "differences",
                 "convergence", "convergence_speed", "curves", "angles", "landscape", "curves_wide", "crossings"):
        assert paths[f"tables/{name}.csv"].is_file()
    assert "tables/reproduction.csv" not in paths  # report.reproduce is not set
    curves = pd.read_csv(out_dir / "tables" / "tuning_curves.csv")
    assert list(curves.columns) == ["method", "kind", "n", "expected_test", "low", "high", "expected_val", "seconds"]
    # Every finished trial is a draw: 8 completed, 1 failed, 1 pruned.
    assert list(curves.loc[curves["kind"] == "search", "n"]) == list(range(1, len(ARCFACE_VALUES) + 3))
    assert list(curves.loc[curves["method"] == "fixed_adacos", "n"]) == [1, 2, 3]
    # Per-seed test scores of every run, for anyone who wants to redo the statistics.
    run_scores = pd.read_csv(out_dir / "tables" / "run_scores.csv")
    assert len(run_scores) == len(SEEDS) * len(FINAL_SCORES) and "test_accuracy" in run_scores
    curves = pd.read_csv(out_dir / "tables" / "curves.csv")
    assert {"method", "iteration", "mean", "low", "high"} <= set(curves.columns)
    # The wide layouts dvc.yaml's plots read: one column per method.
    wide = pd.read_csv(out_dir / "tables" / "curves_wide.csv")
    assert list(wide.columns) == ["iteration", *FINAL_SCORES]
    searches = pd.read_csv(out_dir / "tables" / "tuning_search_wide.csv")
    controls = pd.read_csv(out_dir / "tables" / "tuning_controls_wide.csv")
    assert list(searches.columns) == ["n", "arcface_search"]
    assert searches["n"].tolist() == list(range(1, len(ARCFACE_VALUES) + 3))  # failed and pruned trials count
    assert {"n", "fixed_adacos", "dynamic_adacos"} <= set(controls.columns)
    # A control stops at its number of seeds: no empty cell that a plot would draw as zero.
    assert controls["n"].tolist() == list(range(1, len(SEEDS) + 1)) and not controls.isna().any().any()


def selected_by_enumeration(selection, reported, n):
    """E[reported score of the best-by-selection trial] over every n-subset of the trials, in plain Python."""
    values = []
    for draw in itertools.combinations(range(len(selection)), n):
        best = max(selection[i] for i in draw)
        tied = [reported[i] for i in draw if selection[i] == best]
        values.append(sum(tied) / len(tied))
    return sum(values) / len(values)


def independent_break_even():
    """(trials, device-seconds, gain of the whole search) against Fixed AdaCos's mean test accuracy of one run."""
    target = float(np.mean(FINAL_SCORES["fixed_adacos"]))
    # The failed trial is a draw at the floor (0); the pruned one is drawn, never selected, and leaves the floor.
    selection = [*ARCFACE_VALUES, 0.0, -math.inf]
    reported = [value + TRIAL_TEST_OFFSET for value in ARCFACE_VALUES] + [0.0, 0.0]
    curve = [selected_by_enumeration(selection, reported, n) for n in range(1, len(selection) + 1)]
    seconds_per_trial = (sum(ARCFACE_SECONDS) + 4.0 + 6.0) / len(selection)
    first = next((n for n, value in enumerate(curve, start=1) if value >= target - 1e-12), None)
    return first, None if first is None else first * seconds_per_trial, curve[-1] - target


def paired(a, b):
    result = stats.ttest_rel(a, b)
    interval = result.confidence_interval(0.95)
    return float(np.mean(np.subtract(a, b))), float(interval.low), float(interval.high), float(result.pvalue)


def test_report_opens_with_the_verdict_and_has_every_section_and_the_numbers(written):
    analysis, paths, _ = written
    text = paths["report.md"].read_text(encoding="utf-8")
    difference, low, high, _ = paired(FINAL_SCORES["arcface_tuned"], FINAL_SCORES["fixed_adacos"])
    share = 100 * difference / np.mean(FINAL_SCORES["fixed_adacos"])
    # The answer card first: at most 3 sentences of at most 25 words, its numbers computed independently here.
    # Open evidence is still a decision: the default, with what tuning adds and what it costs.
    assert text.startswith(f"# {PARAMS.report.title}\n\n## The answer in a minute\n\n**Use Fixed AdaCos: tuned "
                           f"ArcFace adds {share:+.1f}% [")
    card = text.split("## The answer in a minute\n\n**", 1)[1].split("**", 1)[0]
    card_sentences = re.split(r"(?<=\.) (?=[A-Z])", card)
    assert len(card_sentences) <= 3 and all(len(sentence.split()) <= CARD_WORDS for sentence in card_sentences), card
    assert f"{difference:+.4f} ({share:+.1f}%), 95% CI [{low:+.4f}, {high:+.4f}]" in text.split("## Verdict")[0]
    # No paragraph (or list item) a reader must wade through: none over 120 words.
    paragraphs = [block for block in re.split(r"\n\s*\n|\n(?=- )", text)
                  if not block.lstrip().startswith(("|", "#", "!"))]
    assert max(len(block.split()) for block in paragraphs) <= 120
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings == ["The answer in a minute", "Verdict", "Training length and convergence", "Beside the benchmark",
                        "Tuning cost and iterations, in the benchmark's form", "What this answers", "Setup", "Tuning cost versus accuracy",
                        "Final comparison on test", "Convergence", "Convergence claim", "Angle dynamics",
                        "The (s, m) landscape", "Reproducibility"]
    for name in FIGURES:
        assert f"(figures/{name}.png)" in text
    verdict_text = text.split("## Verdict\n", 1)[1].split("\n## ", 1)[0]
    # The one figure that shows the answer comes right after the recommendation, then the numbers.
    assert verdict_text.index("figures/tuning_trials.png") < verdict_text.index("The numbers behind the recommendation")
    sentences = verdict_sentences(analysis)
    # The statistics are the numbers table's rows, not a paragraph; every other sentence is one.
    assert f"**{sentences[0]}**" in verdict_text and all(f"\n{sentence}\n" in verdict_text for sentence in sentences[2:])
    assert sentences[1].startswith("The statistics:") and sentences[1] not in verdict_text
    row = next(line for line in verdict_text.splitlines() if line.startswith("| tuned ArcFace − Fixed AdaCos"))
    assert f"[{low:+.4f}, {high:+.4f}]" in row and "TOST p = " in row and "t-test p = " in row
    trials, seconds, gain = independent_break_even()
    assert trials is not None and f"after {trials} trials" in verdict_text
    assert f"about {seconds:,.0f} s" in verdict_text or f"about {seconds:.1f} s" in verdict_text
    assert f"buys {gain:+.4f}" in verdict_text
    assert sentences[0].startswith(f"Tuned ArcFace scores {difference:.4f} above Fixed AdaCos on test accuracy")
    assert f"95% CI [{low:+.4f}, {high:+.4f}], paired over 3 seeds" in sentences[1]
    # Three seeds resolve neither a difference nor equivalence within ±0.005: the option that needs no tuning, with
    # what tuning is expected to add.
    assert ": use Fixed AdaCos, which needs no tuning; tuning is expected to add " in sentences[0]
    assert 'That is not "no difference"' in sentences[1]
    # ArcFace at its defaults, with its diverged seed, and the convergence comparison.
    assert "at the usual defaults (s = 64, m = 0.5 rad)" in verdict_text and "1 of its 3 runs diverged" in verdict_text
    assert "of its own final val score" in verdict_text
    # The softmax target that is never reached is shown as such, not as a number; three seeds give no interval.
    assert "not reached (no interval; 0/3 seeds)" in text
    assert "No benchmark aggregate" in text.split("## Beside the benchmark\n", 1)[1].split("\n## ", 1)[0]
    assert "0123abc" in text and "feedbeef" in text


def test_final_table_marks_undecided_differences(written):
    _, paths, _ = written
    text = paths["report.md"].read_text(encoding="utf-8").split("## Final comparison on test")[1]
    row = next(line for line in text.splitlines() if line.startswith("| ArcFace tuned |"))
    difference, low, high, _ = paired(FINAL_SCORES["arcface_tuned"], FINAL_SCORES["fixed_adacos"])
    assert f"{difference:+.4f} [{low:+.4f}, {high:+.4f}] (n.s.)" in row
    assert "| 10 |" in row  # the whole search: 8 completed + 1 failed + 1 pruned trial
    default_row = next(line for line in text.splitlines() if line.startswith("| ArcFace default |"))
    assert "2 (1 diverged)" in default_row


def test_html_links_its_figures_and_nothing_outside_its_folder(written):
    _, paths, _ = written
    page = paths["report.html"].read_text(encoding="utf-8")
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) == len(FIGURES)
    for source in images:
        assert source.startswith("figures/") and source.endswith(".png")
        assert (paths["report.html"].parent / source).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(re.findall(r'(?:src|href)="([^"#]+)"', page)) == set(images)
    assert "<link" not in page and "<script" not in page and "http" not in page and "url(" not in page
    assert "base64" not in page
    headings = re.findall(r"<h2>(.+?)</h2>", page)
    assert headings[:2] == ["The answer in a minute", "Verdict"] and "Tuning cost versus accuracy" in headings
    assert "<table>" in page


def test_metrics_json_is_strict_small_and_holds_the_verdict(written):
    _, paths, _ = written
    metrics = json.loads(paths["metrics.json"].read_text(encoding="utf-8"),
                         parse_constant=lambda name: pytest.fail(f"metrics.json contains {name}"))
    for method, finals in FINAL_SCORES.items():
        values = np.array(finals)[np.isfinite(finals)]
        assert metrics[method] ["test_accuracy"]["mean"] == pytest.approx(values.mean())
        assert metrics[method]["test_accuracy"]["std"] == pytest.approx(values.std(ddof=1))
        assert metrics[method]["run_seconds"] == pytest.approx(np.mean([30.0 + seed for seed in SEEDS]))
        assert "test_map_at_r" not in metrics[method]  # every metric is in tables/final_test.csv
    assert metrics["arcface_tuned"]["tuning_trials"] == 10
    assert metrics["arcface_tuned"]["tuning_seconds"] == pytest.approx(sum(ARCFACE_SECONDS) + 10.0)
    assert metrics["fixed_adacos"]["tuning_trials"] == 0
    assert "reproduction" not in metrics
    verdict_entry = metrics["verdict"]
    difference, low, high, _ = paired(FINAL_SCORES["arcface_tuned"], FINAL_SCORES["fixed_adacos"])
    assert verdict_entry["recommendation"] == "fixed_adacos" and verdict_entry["metric"] == "test_accuracy"
    # The pipeline's verdict is recommend()'s output on the report's own run_scores table, cost and search variance
    # included (the report computes the differences once and shares them with the verdict).
    analysis = written[0]
    expected = recommend(analysis.run_scores, "accuracy", PARAMS.analysis,
                         {"cost": analysis.verdict_facts["cost"],
                          "search_variance": analysis.verdict_facts["variance_sources"]["search"]})
    assert json.loads(json.dumps(expected, default=str)) == verdict_entry
    compared = verdict_entry["tuned"]  # recommend()'s comparison of tuned ArcFace with Fixed AdaCos
    assert compared["margin"] == 0.005 and compared["pairs"] == 3 and compared["test"] == "paired"
    assert (compared["difference"], compared["low"], compared["high"]) == (
        pytest.approx(difference), pytest.approx(low), pytest.approx(high))
    trials, seconds, gain = independent_break_even()
    even = metrics["break_even"]["arcface"]["fixed_adacos"]
    assert even["trials"] == trials and even["seconds"] == pytest.approx(seconds) and even["reached"]
    assert even["low"] <= trials and even["max_trials"] == 10
    assert even["target"] == pytest.approx(np.mean(FINAL_SCORES["fixed_adacos"]))
    assert verdict_entry["cost"]["gain"] == pytest.approx(gain) and verdict_entry["cost"]["trials"] == trials
    assert set(metrics["break_even"]["arcface"]) == {"fixed_adacos", "dynamic_adacos"}
    assert len(paths["metrics.json"].read_text(encoding="utf-8").splitlines()) < 250


@pytest.mark.slow
def test_verdict_recommends_tuning_when_tuned_arcface_is_significantly_better():
    better = [0.980, 0.9851, 0.9902]  # Fixed AdaCos + 0.0200, 0.0201, 0.0202: a clear paired gain
    analysis = analyse(*make_study(arcface_tuned_test=better))
    text = verdict(analysis)
    difference, low, high, p_value = paired(better, FINAL_SCORES["fixed_adacos"])
    assert low > 0 and p_value * len(METRICS) < 0.05  # significant even after Holm's worst case
    lead, statistics = verdict_sentences(analysis)[:2]
    assert lead.startswith(f"Tuned ArcFace scores {difference:.4f} above Fixed AdaCos on test accuracy, at least the "
                           "±0.005 that matters")
    assert ": tune ArcFace; the ArcFace search cost 10 trials" in lead
    assert f"[{low:+.4f}, {high:+.4f}]" in statistics and "[" not in lead and "p =" not in lead
    assert text.startswith(lead)


@pytest.mark.slow
def test_verdict_when_break_even_is_not_reached_and_adacos_is_better():
    trials, runs, history = make_study(arcface_tuned_test=[0.90, 0.905, 0.91])
    trials.loc[trials["state"] == "COMPLETE", "test_value"] = 0.5  # the search never comes near AdaCos on test
    text = verdict(analyse(trials, runs, history))
    assert f"does not match it within the {len(ARCFACE_VALUES) + 2} trials run" in text
    difference = np.mean(np.subtract([0.90, 0.905, 0.91], FINAL_SCORES["fixed_adacos"]))
    assert text.startswith(f"Tuned ArcFace scores {-difference:.4f} below Fixed AdaCos on test accuracy, at least the "
                           "±0.005 that matters")
    assert "that matters (0.5% of Fixed AdaCos's score, 1 of Fixed AdaCos's seed-to-seed sd within a split, " in text
    assert ": use Fixed AdaCos, which needs no tuning; the ArcFace search cost 10 trials" in text


@pytest.mark.slow
def test_report_without_dynamic_adacos_or_search(tmp_path):
    trials, runs, history = make_study()
    runs = runs[runs["method"] != "dynamic_adacos"]
    history = history[history["method"] != "dynamic_adacos"]
    analysis = analyse(trials.iloc[0:0], runs, history)
    paths = write_report(analysis, PARAMS, MANIFEST, ENVIRONMENT, tmp_path)
    assert "figures/dynamic_scale.png" not in paths and "figures/landscape.png" not in paths
    text = paths["report.md"].read_text(encoding="utf-8")
    assert "No loss was searched" in text and "## Verdict" in text
    json.loads(paths["metrics.json"].read_text(encoding="utf-8"))


# --- the convergence claim -----------------------------------------------------------------------


def mean_val_curves(history):
    """Mean val objective over the seeds with a finite score, per method and iteration, in plain Python."""
    sums = {}
    for row in history.itertuples():
        value = getattr(row, OBJECTIVE)
        if not math.isnan(value):
            total, count = sums.get((row.method, row.iteration), (0.0, 0))
            sums[(row.method, row.iteration)] = (total + value, count + 1)
    return {key: total / count for key, (total, count) in sums.items()}


def independent_crossing(curves, adacos, arcface):
    """(lasting overtake iteration or None, ahead from the start, last common iteration), walking back from the end."""
    common = sorted({i for m, i in curves if m == adacos} & {i for m, i in curves if m == arcface})
    start = None
    for iteration in reversed(common):
        if curves[(adacos, iteration)] < curves[(arcface, iteration)]:
            break
        start = iteration
    return start, start == common[0], common[-1]


def independent_arcface_lead(curves, adacos, arcface):
    """(start of ArcFace's final strict lead or None, whether AdaCos was strictly ahead before it)."""
    common = sorted({i for m, i in curves if m == adacos} & {i for m, i in curves if m == arcface})
    start = None
    for iteration in reversed(common):
        if not curves[(arcface, iteration)] > curves[(adacos, iteration)]:
            break
        start = iteration
    led = start is not None and any(curves[(adacos, i)] > curves[(arcface, i)] for i in common if i < start)
    return start, led


def sync_final_val(runs, history):
    """Each run's final val score set to its curve's last evaluation, as the runs stage records it."""
    last = history.sort_values("iteration").groupby(["method", "seed"])[OBJECTIVE].last()
    runs = runs.copy()
    runs["val_score"] = [last.get((row.method, row.seed), math.nan) for row in runs.itertuples()]
    return runs


def final_gap_significant(runs, adacos, arcface):
    """Whether AdaCos − ArcFace in final val score differs from zero across the seeds both finished (paired t)."""
    a = runs[runs["method"] == adacos].set_index("seed")["val_score"]
    b = runs[runs["method"] == arcface].set_index("seed")["val_score"]
    both = pd.concat([a, b], axis=1, join="inner").dropna()
    differences = (both.iloc[:, 0] - both.iloc[:, 1]).to_numpy()
    if np.ptp(differences) == 0:
        return differences[0] != 0
    return stats.ttest_rel(both.iloc[:, 0], both.iloc[:, 1]).pvalue < 0.05


def test_crossings_table_metrics_and_sentences(study, written):
    analysis, paths, out_dir = written
    curves = mean_val_curves(study[2])
    table = pd.read_csv(out_dir / "tables" / "crossings.csv", keep_default_na=True)
    assert list(table.columns)[:6] == ["adacos_method", "arcface_method", "crossing_iteration", "ahead_from_start",
                                       "arcface_ahead_from", "adacos_led_before"]
    metrics = json.loads(paths["metrics.json"].read_text(encoding="utf-8"))
    text = paths["report.md"].read_text(encoding="utf-8").split("## Convergence claim\n", 1)[1].split("\n## ", 1)[0]
    assert "20,000" in text and "(figures/crossings.png)" in text
    for row in table.itertuples():
        start, from_start, last = independent_crossing(curves, row.adacos_method, row.arcface_method)
        assert (None if pd.isna(row.crossing_iteration) else int(row.crossing_iteration)) == start
        assert bool(row.ahead_from_start) == from_start and row.last_iteration == last
        entry = metrics["crossings"][f"{row.adacos_method}_vs_{row.arcface_method}"]
        assert entry["crossing_iteration"] == start
        arcface_start, led = independent_arcface_lead(curves, row.adacos_method, row.arcface_method)
        assert entry["arcface_ahead_from"] == arcface_start and bool(row.adacos_led_before) == led
        assert (None if pd.isna(row.arcface_ahead_from) else int(row.arcface_ahead_from)) == arcface_start
        significant = final_gap_significant(study[1], row.adacos_method, row.arcface_method)
        assert bool(row.gap_significant) == entry["gap_significant"] == significant
    assert "before the ~20,000 of the paper's figure" in text and f"end by iteration {max(ITERATIONS)}" in text


@pytest.mark.slow
def test_crossing_sentences_for_a_late_overtake_and_none():
    trials, runs, history = make_study()
    # Fixed AdaCos's curve starts low and overtakes tuned ArcFace at the last evaluation only; Dynamic AdaCos's
    # final evaluations fall below every ArcFace curve.
    fixed = history["method"] == "fixed_adacos"
    history.loc[fixed & (history["iteration"] < max(ITERATIONS)), OBJECTIVE] = 0.05
    tuned_last = history[(history["method"] == "arcface_tuned") & (history["iteration"] == max(ITERATIONS))]
    history.loc[fixed & (history["iteration"] == max(ITERATIONS)), OBJECTIVE] = tuned_last[OBJECTIVE].to_numpy() + 0.01
    dynamic = history["method"] == "dynamic_adacos"
    history.loc[dynamic & (history["iteration"] == max(ITERATIONS)), OBJECTIVE] = 0.2
    runs = sync_final_val(runs, history)
    assert final_gap_significant(runs, "fixed_adacos", "arcface_tuned")
    assert final_gap_significant(runs, "dynamic_adacos", "arcface_tuned")
    analysis = analyse(trials, runs, history)
    from study.report.sections import crossings_section
    from study.report import render_markdown  # the section alone: no figures to draw

    text = render_markdown("t", [crossings_section(analysis, {})])
    curves = mean_val_curves(history)
    assert independent_crossing(curves, "fixed_adacos", "arcface_tuned")[0] == max(ITERATIONS)
    assert f"Fixed AdaCos overtakes ArcFace tuned for good at iteration {max(ITERATIONS)} of {max(ITERATIONS)}" in text
    gap = curves[("arcface_tuned", max(ITERATIONS))] - 0.2
    # Dynamic AdaCos led tuned ArcFace before its last evaluation (the fixture's curves), then fell behind for good.
    assert any(curves[("dynamic_adacos", i)] > curves[("arcface_tuned", i)] for i in ITERATIONS[:-1])
    assert (f"Dynamic AdaCos leads ArcFace tuned early, but ArcFace tuned overtakes it for good at iteration "
            f"{max(ITERATIONS)} of {max(ITERATIONS)} and Dynamic AdaCos ends behind by {gap:.4f} at the last "
            "evaluation: the opposite order to the paper's figure") in text
    # A curve that never leads is said to be never ahead, with where it fell behind for good.
    history.loc[dynamic, OBJECTIVE] = 0.01 + 0.001 * history.loc[dynamic, "seed"]
    runs = sync_final_val(runs, history)
    text = render_markdown("t", [crossings_section(analyse(trials, runs, history), {})])
    assert (f"Dynamic AdaCos is never ahead of ArcFace tuned (level at most, then behind for good from iteration "
            f"{min(ITERATIONS)})") in text



@pytest.mark.slow
def test_runs_past_20000_iterations_count_the_late_overtakes_on_either_side():
    trials, runs, history = make_study()
    # The fixture's iterations stretched to 0, 10,000, ..., 40,000; Fixed AdaCos overtakes only at the last
    # evaluation and Dynamic AdaCos loses its lead there, both past the paper's ~20,000.
    history["iteration"] = history["iteration"] * 500
    fixed, dynamic = history["method"] == "fixed_adacos", history["method"] == "dynamic_adacos"
    last = int(history["iteration"].max())
    history.loc[fixed & (history["iteration"] < last), OBJECTIVE] = 0.05
    history.loc[dynamic & (history["iteration"] == last), OBJECTIVE] = 0.2 + 0.001 * history.loc[
        dynamic & (history["iteration"] == last), "seed"]
    runs = sync_final_val(runs, history)
    from study.report.sections import crossings_section
    from study.report import render_markdown

    text = render_markdown("t", [crossings_section(analyse(trials, runs, history), {})])
    curves = mean_val_curves(history)
    pairs = [(a, b) for a in ("fixed_adacos", "dynamic_adacos") for b in ("arcface_tuned", "arcface_default")]
    late_adacos = late_arcface = 0
    for adacos, arcface in pairs:
        if not final_gap_significant(runs, adacos, arcface):
            continue  # a lead is only claimed where the final gap is significant
        start, from_start, _ = independent_crossing(curves, adacos, arcface)
        late_adacos += start is not None and not from_start and start >= 20000
        start, adacos_led = independent_arcface_lead(curves, adacos, arcface)
        late_arcface += adacos_led and start >= 20000
    assert late_adacos >= 1 and late_arcface >= 1  # the fixture makes both happen
    assert f"These runs reach iteration {last:,}, past the ~20,000 of the paper's figure" in text
    assert (f"In {late_adacos} of the 4 pairs AdaCos overtakes ArcFace for good only at iteration 20,000 or "
            f"later, as in the paper's figure; in {late_arcface} ArcFace overtakes an AdaCos lead that late "
            "instead.") in text



def median_iterations_to_own_95_percent(runs, history, method):
    """Median over seeds of the first iteration at 95% of the method's own mean final val score, in plain Python
    (a seed that never gets there counts as slower than all)."""
    finals = [row.val_score for row in runs.itertuples() if row.method == method and not math.isnan(row.val_score)]
    target = 0.95 * sum(finals) / len(finals)
    firsts = []
    for seed in sorted(set(runs.loc[runs["method"] == method, "seed"])):
        curve = history[(history["method"] == method) & (history["seed"] == seed)].sort_values("iteration")
        firsts.append(next((row.iteration for row in curve.itertuples() if getattr(row, OBJECTIVE) >= target),
                           math.inf))
    return sorted(firsts)[len(firsts) // 2]  # three seeds: the middle one


@pytest.mark.slow
def test_the_verdict_writes_long_iteration_counts_with_thousands_separators():
    trials, runs, history = make_study()
    history["iteration"] = history["iteration"] * 500  # the fixture's curves over 40,000 iterations
    text = verdict(analyse(trials, runs, history))
    reference = median_iterations_to_own_95_percent(runs, history, "fixed_adacos")
    tuned = median_iterations_to_own_95_percent(runs, history, "arcface_tuned")
    assert len(SEEDS) == 3 and 1000 <= abs(tuned - reference) < math.inf
    assert f"tuned ArcFace needs {tuned - reference:+,} iterations against Fixed AdaCos in the median" in text


# --- reproduction of a published setup -----------------------------------------------------------

FALLBACK_MANIFEST = {**MANIFEST, "source": "mnist5k", "requested_source": "torchvision:MNIST",
                     "fallback_reason": "could not download torchvision dataset MNIST (no network)"}


@pytest.mark.slow
def test_reproduction_section_when_report_reproduce_is_set(study, tmp_path):
    trials, runs, history = study
    # Seed 003's two named runs, scored by 1-NN on embeddings at each seed.
    named = {"seed003_arcface": [0.970, 0.975, 0.980], "seed003_simple_arcface": [0.90, 0.91, 0.92]}
    extra = [runs[runs["method"] == "fixed_adacos"].assign(method=method, test_knn_accuracy=values)
             for method, values in named.items()]
    runs = pd.concat([runs, *extra], ignore_index=True)
    params = StudyParams.from_dict({"analysis": {"n_bootstrap": 200}, "runs": {"seeds": list(SEEDS)},
                                    "report": {"reproduce": "seed003-mnist", "dpi": 50}})
    paths = write_report(analyse(trials, runs, history), params, FALLBACK_MANIFEST, ENVIRONMENT, tmp_path)
    text = paths["report.md"].read_text(encoding="utf-8")
    section = text.split("\n## Reproduction\n", 1)[1].split("\n## ", 1)[0]
    assert text.index("## Verdict") < text.index("## Reproduction") < text.index("## Reproducibility")
    # The fallback is named, with why, and the published data beside it.
    assert "This run used `mnist5k`" in section and "`torchvision:MNIST` could not be had" in section
    assert "no network" in section and "60,000" in section
    assert "mean ± 2 std" in section and "`test_knn_accuracy`" in section and "`test_accuracy`" in section
    assert "CenterInvariant" in section and "CosFace with m = 28.6 and s = 64" in section

    table = pd.read_csv(paths["tables/reproduction.csv"]).set_index("method")
    metrics = json.loads(paths["metrics.json"].read_text(encoding="utf-8"))["reproduction"]
    assert metrics["setup"] == "seed003-mnist"
    published = {"seed003_arcface": 97.36, "seed003_simple_arcface": 95.78, "fixed_adacos": 98.09, "softmax": 98.17}
    for method, value in published.items():
        metric = "test_accuracy" if method == "softmax" else "test_knn_accuracy"
        ours = 100 * runs.loc[runs["method"] == method, metric].to_numpy(dtype=float)
        mean, std = ours.mean(), ours.std(ddof=1)
        within = bool(abs(value - mean) <= 2 * std)
        assert table.loc[method, "metric"] == metric
        assert table.loc[method, "mean_percent"] == pytest.approx(mean)
        assert table.loc[method, "std_percent"] == pytest.approx(std)
        assert bool(table.loc[method, "within_spread"]) == within
        assert metrics["results"][method]["within_spread"] == within
        assert metrics["results"][method]["difference_points"] == pytest.approx(mean - value)
        row = next(line for line in section.splitlines() if f"| `{method}` |" in line)
        assert f"| {value:.2f} |" in row and f"{mean:.2f} ± {std:.2f} (3 seeds)" in row
        assert f"| {mean - value:+.2f} |" in row and row.rstrip(" |").endswith("yes" if within else "no")
    # Softmax (cross-entropy, by argmax) reaches 90.50 ± 0.50 here: 98.17 lies outside that spread.
    assert not table.loc["softmax", "within_spread"]


@pytest.mark.slow
def test_reproduction_data_note_without_a_fallback(study):
    from study.analysis import reproduction_table
    from study.published import SEED003_MNIST
    from study.report.reproduction import reproduction_section
    from study.report import render_markdown  # the section alone: no figures to draw

    manifest = {**MANIFEST, "source": "torchvision:MNIST", "requested_source": "torchvision:MNIST",
                "fallback_reason": None}
    analysis = analyse(*study)
    text = render_markdown("t", [reproduction_section(SEED003_MNIST, reproduction_table(analysis.run_scores,
                                                                                          SEED003_MNIST), manifest)])
    assert "This run used `torchvision:MNIST`" in text and "as requested" in text
    assert "could not be had" not in text and "re-split by our prepare stage" in text
    assert "| `seed003_arcface` |" in text and "not run" in text  # the study has no such run



# --- runs that ended at chance --------------------------------------------------------------------


@pytest.mark.slow
def test_a_collapsed_network_scores_roc_auc_one_half_and_is_reported_at_chance():
    from study.metrics import verification_metrics
    from study.report.sections import final_section
    from study.report import metrics_summary, render_markdown

    # One output for every input: every pair ties, so genuine and impostor pairs cannot be told apart.
    labels = np.repeat(np.arange(5), 8)
    assert verification_metrics(np.ones((40, 6)), labels)["roc_auc"] == 0.5
    trials, runs, history = make_study()
    softmax = runs.index[(runs["method"] == "softmax")][:2]
    runs.loc[softmax, "test_roc_auc"] = 0.5
    analysis = analyse(trials, runs, history)
    costs = analysis.costs.set_index("method")
    assert costs.loc["softmax", "at_chance"] == 2 and costs.drop(index="softmax")["at_chance"].eq(0).all()
    text = render_markdown("t", [final_section(analysis, {})])
    assert "| Softmax | " in text and "(2 at chance)" in text
    assert f"Runs at chance: Softmax 2 of {len(SEEDS)}." in text
    summary = metrics_summary(analysis)
    assert summary["softmax"]["runs_at_chance"] == 2 and summary["fixed_adacos"]["runs_at_chance"] == 0


@pytest.mark.slow
def test_models_that_learned_nothing_are_said_to_and_nothing_is_recommended():
    trials, runs, history = make_study()
    compared = runs["method"].isin(["fixed_adacos", "arcface_tuned"])
    runs.loc[compared, "test_roc_auc"] = np.tile([0.49, 0.50, 0.52], 2)  # t interval (0.469, 0.538) covers 0.5
    analysis = analyse(trials, runs, history)
    facts = analysis.verdict_facts
    assert (facts["recommendation"], facts["reason"]) == ("undecided", "nothing_learned")
    assert facts["at_chance"]["fixed_adacos"]["mean"] == pytest.approx(0.5033333)
    lead = verdict(analysis)
    assert lead.startswith("The models learned nothing: test ROC AUC is at chance (0.5) for every method compared")
    assert "labels that do not match the images" in lead and "use Fixed AdaCos" not in lead
    # One method above chance by its interval: the study learned something, and the usual rule decides.
    runs.loc[runs["method"] == "arcface_tuned", "test_roc_auc"] = [0.60, 0.61, 0.62]
    assert analyse(trials, runs, history).verdict_facts["reason"] != "nothing_learned"


@pytest.mark.slow
def test_the_verdict_names_the_other_metrics_where_tuning_wins_or_loses():
    trials, runs, history = make_study()
    tuned, reference = runs["method"] == "arcface_tuned", runs["method"] == "fixed_adacos"
    # Tuned ArcFace: clearly higher MAP@R (better), clearly higher EER (worse: lower is better), the rest level.
    for metric in METRICS[1:]:
        runs.loc[tuned | reference, f"test_{metric}"] = [0.70, 0.71, 0.72] * 2
    runs.loc[tuned, "test_map_at_r"] = [0.80, 0.81, 0.82]
    runs.loc[tuned, "test_eer"] = [0.90, 0.91, 0.92]
    facts = analyse(trials, runs, history).verdict_facts
    assert facts["tuned_better_metrics"] == ["test_map_at_r"] and facts["tuned_worse_metrics"] == ["test_eer"]
    assert facts["other_metrics"] == len(METRICS) - 1
    text = verdict(analyse(trials, runs, history))
    assert (f"Of the other {len(METRICS) - 1} test metrics (Holm-corrected), tuned ArcFace (tuned for val accuracy) is "
            "significantly better than Fixed AdaCos, by at least the margin, on MAP@R and significantly worse by at "
            "least the margin on EER.") in text
    # The objective shows no significant difference while these do: the verdict says they disagree.
    assert "The objective (accuracy) and these metrics disagree" in text
    runs.loc[tuned, "test_map_at_r"] = [0.70, 0.71, 0.72]
    assert "is significantly worse than Fixed AdaCos by at least the margin on EER." in verdict(
        analyse(trials, runs, history))
    runs.loc[tuned, "test_eer"] = [0.70, 0.71, 0.72]
    assert (f"On none of the other {len(METRICS) - 1} test metrics does tuned ArcFace differ from Fixed AdaCos "
            "significantly" in verdict(analyse(trials, runs, history)))


@pytest.mark.slow
def test_a_win_on_the_objective_with_losses_elsewhere_is_qualified():
    trials, runs, history = make_study(arcface_tuned_test=[0.980, 0.9851, 0.9902])  # clearly better on accuracy
    tuned, reference = runs["method"] == "arcface_tuned", runs["method"] == "fixed_adacos"
    for metric in METRICS[1:]:
        runs.loc[tuned | reference, f"test_{metric}"] = [0.70, 0.71, 0.72] * 2
    runs.loc[tuned, "test_map_at_r"] = [0.60, 0.61, 0.62]
    text = verdict(analyse(trials, runs, history))
    assert ": tune ArcFace;" in text.split(". ", 1)[0]
    assert "significantly worse than Fixed AdaCos by at least the margin on MAP@R" in text
    assert ("The objective (accuracy) and these metrics disagree: if what you deploy is judged by them, search on "
            "that metric (train.objective) before deciding.") in text


# --- the reproducibility footer's revision ------------------------------------------------------

def test_the_revision_is_dirty_for_changed_code_or_params_but_not_for_the_pipelines_own_outputs(tmp_path,
                                                                                                monkeypatch):
    from stages.report import git_revision

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout.strip()

    (tmp_path / "reports").mkdir()
    for name in ("params.yaml", "dvc.lock", "reports/report.md"):
        (tmp_path / name).write_text("first\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    commit = git("rev-parse", "--short", "HEAD")
    # A rerun of the pipeline rewrites its lock file and report, and creates untracked files.
    (tmp_path / "dvc.lock").write_text("second\n")
    (tmp_path / "reports" / "report.md").unlink()
    (tmp_path / "new.txt").write_text("untracked\n")
    for where in (tmp_path, tmp_path / "reports"):  # the check covers the whole tree, wherever it runs from
        monkeypatch.chdir(where)
        assert git_revision() == commit
    (tmp_path / "params.yaml").write_text("changed\n")
    for where in (tmp_path, tmp_path / "reports"):
        monkeypatch.chdir(where)
        assert git_revision() == f"{commit}-dirty"


def test_one_seed_per_method_leaves_fixed_adacos_and_says_why():
    trials, runs, history = make_study()
    runs, history = runs[runs["seed"] == 0], history[history["seed"] == 0]
    analysis = analyse(trials, runs, history)
    assert analysis.verdict_facts["recommendation"] == "fixed_adacos"
    lead, statistics = verdict_sentences(analysis)[:2]
    assert ": use Fixed AdaCos, which needs no tuning; tuning is expected to add " in lead
    assert lead.endswith("; the ArcFace search cost 10 trials and 170 s of device time.")
    assert "with one seed per method nothing can be judged against the ±0.005 that matters" in lead
    assert "nothing is known about seed-to-seed spread" in statistics
    # With the CPU time each trial's process spent (20 s a trial here), the cost says it beside the device time.
    analysis = analyse(trials.assign(cpu_seconds=20.0), runs, history)
    assert verdict_sentences(analysis)[0].endswith("; the ArcFace search cost 10 trials and 170 s of device time, "
                                                   "200 s of CPU time.")


# --- rendering and figure styles ------------------------------------------------------------


def test_html_names_a_linked_figure_that_is_missing(tmp_path):
    from study.report import FigureRef, Section, render_html

    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "here.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    sections = [Section("S", [FigureRef("figures/here.png", "here"), FigureRef("figures/gone.png", "gone")])]
    with pytest.raises(FileNotFoundError, match=r"figures/gone\.png; write the figures before the page") as raised:
        render_html("T", sections, tmp_path)
    assert "here.png" not in str(raised.value)
    page = render_html("T", [Section("S", sections[0].blocks[:1])], tmp_path)
    assert '<img src="figures/here.png" alt="here">' in page


def test_a_saved_figure_is_a_small_palette_png_that_shows_what_matplotlib_drew(tmp_path):
    from matplotlib.figure import Figure

    from study.report import save_figure

    figure = Figure(figsize=(4, 3))
    ax = figure.subplots()
    x = np.linspace(0, 1, 200)
    for shift in range(6):  # lines, a translucent band and a colour map: what the reports draw
        ax.plot(x, np.sin(6 * x + shift), lw=1.5)
    ax.fill_between(x, -0.5, 0.5, alpha=0.2)
    ax.imshow(np.outer(x, x), extent=(0, 1, -1, 1), aspect="auto", alpha=0.5)
    path = save_figure(figure, tmp_path / "deep" / "drawn.png", 100)
    reference = tmp_path / "reference.png"
    figure.savefig(reference, format="png", dpi=100, bbox_inches="tight")  # matplotlib's own RGBA file
    with Image.open(path) as saved, Image.open(reference) as drawn:
        assert saved.mode == "P" and saved.size == drawn.size and len(saved.getcolors(1 << 16)) <= 256
        assert drawn.mode == "RGBA" and saved.info["dpi"] == pytest.approx((100, 100), abs=0.01)
        error = np.abs(np.asarray(saved.convert("RGB"), dtype=int) - np.asarray(drawn.convert("RGB"), dtype=int))
    assert error.mean() < 2.0 and np.quantile(error, 0.99) < 24
    assert path.stat().st_size < 0.6 * reference.stat().st_size


def test_html_escapes_text_renders_inline_marks_and_keeps_numbers_on_one_line(tmp_path):
    from study.report import Bullets, Section, Table, render_html, render_markdown

    sections = [Section("A & B", ["x < y, **bold**, *emphasis* and `code`", Bullets(["<script>alert(1)</script>"]),
                                  Table(pd.DataFrame({"mean ± std": ["0.9850 ± 0.0015"],
                                                      "note": ["a long sentence " * 4]}), "the | caption")])]
    page = render_html("T <1>", sections, tmp_path)
    assert "<title>T &lt;1&gt;</title>" in page and "<h2>A &amp; B</h2>" in page
    assert "<p>x &lt; y, <strong>bold</strong>, <em>emphasis</em> and <code>code</code></p>" in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # A "mean ± std" never breaks; a long prose cell may; a two-column table stays a plain table in the text column.
    assert ('<td data-label="mean ± std"><span class="value"><span class="nowrap">0.9850 ± 0.0015</span></span></td>'
            in page and '<td data-label="note"><span class="value">a long sentence' in page)
    assert '<div class="table-box"><table>' in page and ".nowrap { white-space: nowrap; }" in page.replace(
        "td.short, .nowrap", ".nowrap")
    assert 'name="viewport"' in page
    markdown = render_markdown("T", sections)
    assert "| mean ± std | note |\n|---|---|\n| 0.9850 ± 0.0015 | a long sentence" in markdown
    assert "## A & B\n\nx < y, **bold**" in markdown and "- <script>alert(1)</script>" in markdown


def test_html_tables_wrap_to_the_window_and_become_cards_on_a_phone(tmp_path):
    """A table of many columns must not scroll and hide its right-hand columns: it may use the window's width beside
    the text column, its cells wrap between (never inside) intervals, and on a narrow screen each row becomes a card
    whose cells carry their column's name."""
    from study.report import Section, Table, render_html

    columns = [f"column {index} with a long header" for index in range(15)]
    wide = pd.DataFrame([[f"+0.00{index} [-0.0207, +0.0254] (n.s.)" for index in range(15)]] * 2, columns=columns)
    narrow = pd.DataFrame({"split": ["train"], "samples": [144], "classes": [12]})
    page = render_html("T", [Section("S", [Table(wide, "wide"), Table(narrow, "narrow")])], tmp_path)
    style = page[page.index("<style>"):page.index("</style>")]
    assert '<div class="table-box wide"><table class="stacked">' in page
    assert '<div class="table-box"><table>' in page  # three short columns fit a phone as they are
    # Every cell names its column (the card's label) and keeps its interval whole.
    cells = re.findall(r'<td data-label="([^"]*)"[^>]*><span class="value">(.*?)</span></td>', page)
    assert [label for label, _ in cells[:15]] == columns
    assert '+0.000 <span class="nowrap">[-0.0207, +0.0254]</span> (n.s.)' in cells[0][1]
    # The CSS: wide boxes fit their content up to the window; headers and long cells may wrap; cards on a phone.
    assert re.search(r"\.table-box\.wide \{[^}]*width: fit-content[^}]*\}", style)
    assert "th.short" not in style and "white-space: nowrap" not in style.split("td.short, .nowrap")[0]
    phone = style[style.index("@media (max-width: 40rem)"):]
    assert "table.stacked td::before { content: attr(data-label)" in phone
    assert "table.stacked thead { display: none; }" in phone


def test_a_long_table_waits_behind_a_one_line_summary_in_html(tmp_path):
    """As cards on a 420 px screen the per-metric comparison (40 rows of 15 columns) made the page 37,000 px long: in
    HTML a table of more than LONG_TABLE_ROWS rows is collapsed behind one line, its caption above it; Markdown keeps
    every row in view."""
    from study.report import Section, Table, render_html, render_markdown
    from study.report.document import LONG_TABLE_ROWS

    long = pd.DataFrame({"metric": [f"metric {i}" for i in range(LONG_TABLE_ROWS + 1)],
                         "difference": ["+0.0010 [-0.0020, +0.0040]"] * (LONG_TABLE_ROWS + 1)})
    short = long.head(LONG_TABLE_ROWS)
    sections = [Section("S", [Table(long, "the long one"), Table(short, "the short one"),
                              Table(long, "named", summary="Tuned ArcFace better on **2** of 11 metrics")])]
    page = render_html("T", sections, tmp_path)
    summaries = re.findall(r'<details class="long-table"><summary>(.*?)</summary>\s*<div class="table-box', page)
    assert summaries == [f"Show the table: {LONG_TABLE_ROWS + 1} rows of 2 columns",
                         "Tuned ArcFace better on <strong>2</strong> of 11 metrics"]
    assert page.count("<details") == page.count("</details>") == 2  # the short table stays in view
    assert re.search(r'<p class="caption">the long one</p>\s*<details', page)
    assert page.count(f"metric {LONG_TABLE_ROWS}</span>") == 2  # collapsed, not cut: every row is in the page
    assert "details.long-table > summary" in page
    assert "<details" not in render_markdown("T", sections) and f"| metric {LONG_TABLE_ROWS} |" in render_markdown(
        "T", sections)


def _with(analysis, **frames):
    import dataclasses

    return dataclasses.replace(analysis, **frames)


def _panel_of(figure, gid):
    """The axes holding the artist of `gid`, and that artist."""
    for ax in figure.axes:
        for artist in [*ax.lines, *ax.texts, *ax.collections]:
            if artist.get_gid() == gid:
                return ax, artist
    return None, None


def _coloured_lines(ax):
    """A panel's method curves in colour (not the grey context behind them)."""
    from study.report.palette import CONTEXT

    return [line for line in ax.lines if str(line.get_gid()).startswith(("search:", "control:", "curve:"))
            and line.get_color() != CONTEXT["color"]]


def test_two_tuning_curves_with_the_same_values_are_both_visible(written):
    """Fixed and Dynamic AdaCos's controls often coincide: each gets a panel of its own, where no other coloured curve
    lies on it, instead of one line hiding the other."""
    from study.report import method_styles
    from study.report.tuning_figures import draw_tuning

    analysis = written[0]
    curves = analysis.tuning_curves.copy()
    fixed = curves[(curves["method"] == "fixed_adacos") & (curves["kind"] == "control")]
    dynamic = curves.index[(curves["method"] == "dynamic_adacos") & (curves["kind"] == "control")]
    curves.loc[dynamic, ["expected_test", "low", "high", "seconds"]] = fixed[
        ["expected_test", "low", "high", "seconds"]].to_numpy()
    same = _with(analysis, tuning_curves=curves)
    for x in ("n", "seconds"):
        figure = draw_tuning(same, method_styles(same, "colorblind"), x)
        panels = {}
        for gid in ("control:fixed_adacos", "control:dynamic_adacos", "search:arcface"):
            ax, line = _panel_of(figure, gid)
            assert line is not None and line.get_visible(), gid
            assert _coloured_lines(ax) == [line]  # alone in colour in its panel: nothing drawn over it
            panels[gid] = ax
        assert len(set(map(id, panels.values()))) == 3
        np.testing.assert_allclose(_panel_of(figure, "control:fixed_adacos")[1].get_ydata(),
                                   _panel_of(figure, "control:dynamic_adacos")[1].get_ydata())


def test_the_break_even_star_is_drawn_where_reached_and_not_reached_is_said_where_not(written):
    """The caption promises a star: it is drawn at the break-even when reached, and where it is not the search's panel
    says "not reached" and the caption no longer promises a star."""
    from study.report import method_styles
    from study.report.tuning_figures import break_even_note, draw_tuning

    analysis = written[0]
    styles = method_styles(analysis, "colorblind")
    even = analysis.break_even[analysis.break_even["reference"] == "fixed_adacos"].iloc[0]
    assert even["reached"]  # the fixture's search reaches Fixed AdaCos's one-run mean
    for x in ("n", "seconds"):
        figure = draw_tuning(analysis, styles, x)
        ax, star = _panel_of(figure, "break-even")
        assert star is not None and star.get_marker() == "*"
        curve = analysis.tuning_curves[(analysis.tuning_curves["method"] == "arcface")
                                       & (analysis.tuning_curves["n"] == even["trials"])]
        assert star.get_xdata()[0] == pytest.approx(curve[x].iloc[0])
        assert ax is _panel_of(figure, "search:arcface")[0]
        assert _panel_of(figure, "break-even not reached") == (None, None)
    assert "star marks the break-even" in break_even_note(analysis)

    unreached = analysis.break_even.assign(reached=False, trials=None, seconds=math.nan)
    missed = _with(analysis, break_even=unreached)
    for x in ("n", "seconds"):
        figure = draw_tuning(missed, styles, x)
        assert _panel_of(figure, "break-even") == (None, None)
        ax, words = _panel_of(figure, "break-even not reached")
        assert ax is _panel_of(figure, "search:arcface")[0]
        assert f"not reached\nwithin {int(even['max_trials'])} trials" in words.get_label()
        assert "95% interval [1, not within 2]" in words.get_label()  # bounds only within the valid trials
        assert "break-even not reached" in ax.get_title()
    note = break_even_note(missed)
    assert "not reached" in note and "star marks" not in note


def test_bands_are_drawn_only_where_the_interval_is_valid_and_the_panel_says_so(written):
    from matplotlib.collections import PolyCollection
    from study.report import method_styles
    from study.report.tuning_figures import draw_tuning

    analysis = written[0]
    search = analysis.tuning_curves[analysis.tuning_curves["kind"] == "search"]
    valid_to = int(search.loc[search["low"].notna(), "n"].max())
    assert valid_to < search["n"].max()  # the studentised interval stops before the curve does
    figure = draw_tuning(analysis, method_styles(analysis, "colorblind"), "n")
    ax, _ = _panel_of(figure, "search:arcface")
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert band.get_paths()[0].vertices[:, 0].max() == pytest.approx(valid_to)
    assert f"band for n ≤ {valid_to} only" in ax.get_title()
    assert "too few runs for a band" in _panel_of(figure, "control:fixed_adacos")[0].get_title()


def test_convergence_bands_do_not_overlap_and_are_light(written):
    """Overlaid, three translucent bands turned brown and their lines could not be told apart: each method now has a
    panel with one light band of its own colour."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgb
    from study.report import method_styles
    from study.report.figures import draw_convergence

    analysis = written[0]
    styles = method_styles(analysis, "colorblind")
    figure = draw_convergence(analysis, styles)
    methods = list(dict.fromkeys(analysis.curves["method"]))
    for method in methods:
        ax, line = _panel_of(figure, f"curve:{method}")
        assert _coloured_lines(ax) == [line]
        (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert band.get_alpha() <= 0.25 and to_rgb(band.get_facecolor()[0][:3]) == pytest.approx(to_rgb(styles[method].colour))
    assert len({id(_panel_of(figure, f"curve:{m}")[0]) for m in methods}) == len(methods)


def test_the_seconds_axis_says_where_and_under_what_load_it_was_measured(written):
    from study.report.tuning_figures import measurement_conditions

    _, _, out_dir = written
    conditions = measurement_conditions(PARAMS, ENVIRONMENT)
    assert ENVIRONMENT["device"] in conditions and "at once" in conditions and "load" in conditions
    report = (out_dir / "report.md").read_text(encoding="utf-8")
    assert f"measured on {conditions}" in report  # the caption says it, as the figure's title does


def test_figure_text_stays_legible_on_a_420_px_screen(written):
    """At 420 px the HTML report shrinks each figure to a 388 px image; its legend text must stay about 9 px high (it
    was 5 px): every figure's width in pixels is bounded by that (tests/test_figures.py checks every text)."""
    from study.report.plotting import TEXT_SIZES

    _, paths, _ = written
    legend_pixels = TEXT_SIZES["legend.fontsize"] / 72 * PARAMS.report.dpi
    for name, path in paths.items():
        if name.startswith("figures/"):
            with Image.open(path) as image:
                assert legend_pixels * 388 / image.size[0] >= 9, (name, image.size)


@pytest.mark.parametrize("values, expected", [
    # One low outlier: the scale follows the other trials (Tukey's fences at 1.5 IQR of the quartiles).
    ([0.84, 0.95, 0.952, 0.954, 0.956, 0.958, 0.96], (0.95, 0.96)),
    ([0.1, 0.2, 0.3, 0.4], (0.1, 0.4)),  # no outlier: the whole range
    ([0.5, 0.5, 0.5], (0.49, 0.51)),  # every trial alike: a small range around them
])
def test_robust_colour_range_clips_outliers_only(values, expected):
    from study.report.figures import robust_colour_range

    q1, q3 = np.percentile(values, [25, 75])
    low, high = robust_colour_range(pd.Series(values))
    assert (low, high) == pytest.approx(expected)
    if expected != (0.49, 0.51):
        inside = [v for v in values if q1 - 1.5 * (q3 - q1) <= v <= q3 + 1.5 * (q3 - q1)]
        assert (low, high) == pytest.approx((min(inside), max(inside)))


def test_every_method_has_its_own_colour_line_style_and_marker(written):
    from study.report import method_styles

    analysis = written[0]
    styles = method_styles(analysis, "colorblind")
    assert set(styles) >= set(analysis.methods)
    for attribute in ("colour", "linestyle", "marker"):
        values = [repr(getattr(style, attribute)) for style in styles.values()]
        assert len(set(values)) == len(values), attribute


@pytest.mark.slow
def test_a_report_that_fails_midway_leaves_the_previous_one_whole_and_a_finished_one_replaces_it(
        study, tmp_path, monkeypatch):
    import study.report.writer as writer

    analysis = analyse(*study)
    write_report(analysis, PARAMS, MANIFEST, ENVIRONMENT, tmp_path)
    (tmp_path / "figures" / "stale.png").write_bytes(b"a figure the next report does not draw")
    previous = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    retitled = PARAMS.replace(report=PARAMS.report.replace(title="The next report"))

    def broken(*args, **kwargs):
        raise RuntimeError("the landscape failed")

    monkeypatch.setattr(writer, "figure_landscape", broken)  # after several figures and before the tables
    with pytest.raises(RuntimeError, match="the landscape failed"):
        write_report(analysis, retitled, MANIFEST, ENVIRONMENT, tmp_path)
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == previous

    monkeypatch.undo()
    paths = write_report(analysis, retitled, MANIFEST, ENVIRONMENT, tmp_path)
    assert "The next report" in (tmp_path / "report.md").read_text(encoding="utf-8")
    assert not (tmp_path / "figures" / "stale.png").exists()  # the previous report's stale files go with it
    assert {path for path in tmp_path.rglob("*") if path.is_file()} == set(paths.values())


# --- the lead sentence in plain order, interval notation, the study beside the benchmark ------------------------------


def holm_by_hand(p_values):
    """Holm's step-down adjusted p-values, in plain Python."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def test_the_lead_says_difference_relevance_choice_and_cost_and_the_statistics_follow():
    # Tuned ArcFace + 0.0015, 0.0020, 0.0025 over Fixed AdaCos: its own 95% CI excludes zero, Holm over the ten test
    # metrics does not, and TOST puts it inside ±0.005. The lead states none of those numbers.
    tuned = [0.9615, 0.9670, 0.9725]
    analysis = analyse(*make_study(arcface_tuned_test=tuned))
    lead, statistics = verdict_sentences(analysis)[:2]
    difference, low, high, p_value = paired(tuned, FINAL_SCORES["fixed_adacos"])
    runs = make_study(arcface_tuned_test=tuned)[1]
    p_values = [stats.ttest_rel(runs.loc[runs["method"] == "arcface_tuned", f"test_{metric}"].to_numpy(),
                                runs.loc[runs["method"] == "fixed_adacos", f"test_{metric}"].to_numpy()).pvalue
                for metric in METRICS]
    holm = holm_by_hand(p_values)[0]
    assert low > 0 and p_value < 0.05 < holm  # the case a newcomer read as a contradiction
    order = [lead.index(part) for part in (f"scores {difference:.4f} above Fixed AdaCos", "inside the ±0.005 that matters",
                                           "use Fixed AdaCos", "needs no tuning", "the ArcFace search cost 10 trials")]
    assert order == sorted(order)
    assert not any(mark in lead for mark in ("CI", "p =", "[", "Holm", "TOST"))
    assert f"95% CI [{low:+.4f}, {high:+.4f}]" in statistics and f"p = {holm:.3g} after Holm's correction" in statistics
    assert "it excludes zero, but corrected for the 10 metrics the difference from zero is not significant" in statistics
    assert "equivalent within ±0.005 by two one-sided tests" in statistics


def test_interval_notation_is_explained_under_the_table_where_it_first_appears(written):
    from study.report.verdict import interval_notes

    assert interval_notes([(2, None, 3)]) == ("Interval notation: [2, not within 3]: at least 2 trials; where the "
                                              "interval ends is not shown within the first 3, the ones an interval is "
                                              "given for.")
    assert interval_notes([(None, None, 4), (0, 0, 0), (2, 5, 6)]).count(";") == 1  # [2, 5] needs no note
    assert interval_notes([(2, 5, 6)]) is None
    _, paths, _ = written
    text = paths["report.md"].read_text(encoding="utf-8")
    even = written[0].break_even.set_index("reference").loc["fixed_adacos"]
    shown = trials_interval(even["trials_low"], even["trials_high"], even["max_trials"], even["valid_trials"])
    assert "not within" in shown or "beyond" in shown
    first_use, note = text.index(shown), text.index("Interval notation: ")
    assert first_use < note < text.index(shown, first_use + 1)  # under the table, before the notation's next use
    assert text[note:].split("\n", 1)[0].count(f"{shown}:") == 1


def benchmark_file(tmp_path, **pooled):
    """A benchmark.json as the aggregate writes it (study/benchmark/report.py), with a pooled tuned ArcFace row."""
    converged = {"mean": 0.01, "low": -0.01, "high": 0.03, "prediction_low": -0.02, "prediction_high": 0.04,
                 "prediction_standard_error": 0.012, "sources": 5}
    short = {"mean": 0.0, "low": -0.02, "high": 0.02, "prediction_low": -0.05, "prediction_high": 0.06,
             "prediction_standard_error": 0.02, "sources": 6}
    row = ({"method": "arcface_tuned", "metric": "test_accuracy"} | converged
           | {f"short_{key}": value for key, value in short.items()} | pooled)
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps({"title": "b", "confidence": 0.95, "margin": 0.02, "pooled": {"arcface_tuned": row}}))
    return path


def test_the_study_beside_the_benchmark_on_a_fixture(tmp_path):
    from study.report.beside import BENCHMARK_NUMBERS, benchmark_section, beside_benchmark
    from study.report.document import render_markdown

    analysis = analyse(*make_study())
    analysis.plateau["converged"] = True  # like with like: a converged study beside the benchmark's converged cells
    facts = beside_benchmark(analysis, benchmark_file(tmp_path))
    # The study's own: paired over three seeds of one split (the floor is the paired t interval there), relative to
    # Fixed AdaCos's mean; combined with the pool by the normal-normal posterior.
    reference = np.mean(FINAL_SCORES["fixed_adacos"])
    difference, low, high, _ = paired(FINAL_SCORES["arcface_tuned"], FINAL_SCORES["fixed_adacos"])
    own, own_se = difference / reference, np.std(np.subtract(FINAL_SCORES["arcface_tuned"],
                                                             FINAL_SCORES["fixed_adacos"]), ddof=1) / 3 ** 0.5 / reference
    weight = 0.012 ** 2 / (0.012 ** 2 + own_se ** 2)
    together, half = 0.01 + weight * (own - 0.01), 1.959964 * (weight ** 0.5) * own_se
    assert facts["status"] == "ok" and facts["own"] == pytest.approx(own)
    assert (facts["own_low"], facts["own_high"]) == (pytest.approx(low / reference), pytest.approx(high / reference))
    assert facts["together"] == pytest.approx(together) and facts["together_high"] == pytest.approx(together + half)
    text = render_markdown("t", [benchmark_section(facts)])
    assert f"{100 * own:+.1f}% of Fixed AdaCos's score [{100 * low / reference:+.1f}%, {100 * high / reference:+.1f}%]" \
        in text
    assert "converged cells predict [-2.0%, +4.0%] for a new data source (95% prediction interval over 5 sources" \
        in text
    # A study still improving at its end sits beside the benchmark's short-training cells instead.
    analysis.plateau.loc[analysis.plateau["method"] == "fixed_adacos", "converged"] = False
    short = beside_benchmark(analysis, benchmark_file(tmp_path))
    assert (short["regime"], short["predicted_low"], short["sources"]) == ("short", -0.05, 6)
    assert "short-training cells predict [-5.0%, +6.0%]" in render_markdown("t", [benchmark_section(short)])
    assert f"both together say {100 * together:+.1f}%" in text and f"puts {weight:.0%} of the weight" in text
    assert "±2% of Fixed AdaCos's score" in text
    # What the repository's report stage reads, relative to where DVC runs it.
    assert BENCHMARK_NUMBERS.as_posix() == "reports/benchmark/benchmark.json"


@pytest.mark.parametrize("case, expected", [
    ("absent", "No benchmark aggregate"),
    ("older", "holds no prediction for a new data source in the form this report reads"),
    ("other metric", "pooled test MAP@R, this study's objective is test accuracy"),
    ("unreadable", "could not be read"),
])
def test_the_benchmark_section_says_why_when_nothing_can_be_set_beside(tmp_path, case, expected):
    from study.report.beside import benchmark_section, beside_benchmark

    analysis = analyse(*make_study())
    path = tmp_path / "benchmark.json"
    if case == "older":  # the layout of reports/benchmark/benchmark.json before the benchmark's version 2
        path.write_text(json.dumps({"pooled": {"arcface": {"loss": "arcface", "estimate": 0.003}}}))
    elif case == "other metric":
        path = benchmark_file(tmp_path, metric="test_map_at_r")
    elif case == "unreadable":
        path.write_text("{not json")
    facts = beside_benchmark(analysis, path)
    assert facts["status"] == case
    section = benchmark_section(facts)
    assert section.heading == "Beside the benchmark" and expected in section.blocks[0]


def test_the_report_places_the_benchmark_beside_its_verdict(tmp_path):
    analysis = analyse(*make_study())
    paths = write_report(analysis, PARAMS, MANIFEST, ENVIRONMENT, tmp_path / "report",
                         benchmark_numbers=benchmark_file(tmp_path))
    text = paths["report.md"].read_text(encoding="utf-8")
    section = text.split("## Beside the benchmark\n", 1)[1].split("\n## ", 1)[0]
    assert text.index("## Verdict") < text.index("## Beside the benchmark") < text.index("## What this answers")
    assert "The benchmark's short-training cells predict [-5.0%, +6.0%] for a new data source" in section


def test_variance_shares_are_flagged_as_point_estimates_and_truncations_named():
    from study.report.verdict import variance_sentence

    sources = {"split": 0.0, "search": 0.0, "seed": 2e-5, "shares": {"split": 0.0, "search": 0.0, "seed": 1.0},
               "truncated": ["split", "search"], "dominant": "seed", "splits": 4, "seeds": 2}
    text = variance_sentence({"variance_sources": sources})
    assert "the class split 0%, the search 0%, the training seed 100%: the training seed dominates" in text
    assert "point estimates (moment estimates from 4 splits, with no interval" in text
    assert "the estimates for the class split and the search came out below zero and are shown as 0%" in text


def test_the_study_gives_its_tuning_cost_and_iterations_in_the_benchmarks_form(written):
    """The section's numbers recomputed by hand from the tables the report wrote beside it."""
    _, paths, out_dir = written
    text = paths["report.md"].read_text(encoding="utf-8")
    section = text.split("## Tuning cost and iterations, in the benchmark's form\n", 1)[1].split("\n## ", 1)[0]
    curves = pd.read_csv(out_dir / "tables" / "tuning_curves.csv")
    runs = pd.read_csv(out_dir / "tables" / "run_scores.csv")
    reference = runs.loc[runs["method"] == "fixed_adacos", f"test_{OBJECTIVE}"].mean()
    first = {kind: curves[(curves["kind"] == kind) & (curves["n"] == 1)
                          & (curves["method"] == ("arcface" if kind == "search" else "fixed_adacos"))].iloc[0]
             for kind in ("search", "control")}
    lead = (first["search"]["expected_test"] - first["control"]["expected_test"]) / reference
    assert f"| 1 | {100 * lead:+.1f}% " in section
    learning = pd.read_csv(out_dir / "tables" / "learning_curves.csv")
    reached = []
    for _, run in learning[learning["method"] == "arcface_tuned"].groupby(["split", "seed"]):
        run = run.sort_values("iteration")
        positive = learning.loc[learning["iteration"] > 0, "iteration"].min()
        reached.append(max(run.loc[run["val"] >= 0.95 * run["val"].max(), "iteration"].iloc[0], positive))
    assert f"| ArcFace tuned | 95% | {np.median(reached):,.0f} |" in section
    assert "With its fixed scale, Fixed AdaCos reaches 95% of its own best val in" in section
