"""The class-count sweep: C → dataset class count, the stage list, skip-if-finished, the aggregate, and one real sweep."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from study.cli import main
from study.config import load_params
from study.data import ImageSet, split_dataset
from study.presets import build_preset, write_params
from study.sweep import (SweepError, class_count_dir, class_count_params, class_count_table, default_dataset_template,
                         is_finished, pipeline_stages, run_sweep, total_classes_for, trend_sentences,
                         write_sweep_report)

REPO = Path(__file__).resolve().parents[1]


def one_image_per_class(num_classes: int) -> ImageSet:
    return ImageSet(np.arange(num_classes), [f"class {k}" for k in range(num_classes)],
                    images=torch.zeros((num_classes, 1, 1, 1), dtype=torch.uint8))


# --- C → the dataset's class count ------------------------------------------------------------


def open_split_train_classes(total: int, fractions) -> int | None:
    """Train classes of an actual open split of `total` classes, or None where the split is refused."""
    try:
        return split_dataset(one_image_per_class(total), "open", fractions)["train"].num_classes
    except ValueError:
        return None


@pytest.mark.parametrize("fractions", [(0.6, 0.2, 0.2), (0.7, 0.1, 0.2), (0.5, 0.25, 0.25), (0.8, 0.1, 0.1),
                                       (0.34, 0.33, 0.33)])
def test_open_protocol_total_gives_exactly_c_training_classes_when_actually_split(fractions):
    for classes in (3, 4, 5, 10, 16, 30, 100, 257, 1000):
        try:
            total = total_classes_for(classes, "open", fractions)
        except ValueError:
            # Refused only where no dataset size at all gives exactly C training classes.
            assert classes <= 30, "the usual class counts are possible with these fractions"
            assert all(open_split_train_classes(n, fractions) != classes for n in range(3, 4 * classes + 10))
            continue
        for seed in (0, 1):
            splits = split_dataset(one_image_per_class(total), "open", fractions, seed=seed)
            assert splits["train"].num_classes == classes, (classes, total, fractions)
            assert min(splits["val"].num_classes, splits["test"].num_classes) >= 2
        # The smallest such total (every smaller one checked where that is cheap).
        smaller = range(3, total) if classes <= 30 else [total - 1]
        assert all(open_split_train_classes(n, fractions) != classes for n in smaller)


def test_total_classes_known_values_and_closed_protocol():
    # 0.6·16 = 9.6 rounds to 10 train classes; 0.6·15 = 9 does not reach 10.
    assert total_classes_for(10, "open", (0.6, 0.2, 0.2)) == 16
    assert total_classes_for(10, "closed", (0.6, 0.2, 0.2)) == 10
    assert total_classes_for(1000, "closed", (0.8, 0.1, 0.1)) == 1000


def test_impossible_class_counts_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="C ≥ 3"):
        total_classes_for(2, "closed", (0.6, 0.2, 0.2))
    # 0.9 of 3 or 4 classes rounds to 3 or 4 train classes, leaving no room for 2 val and 2 test classes.
    with pytest.raises(ValueError, match="no class count gives exactly 3 training classes"):
        total_classes_for(3, "open", (0.9, 0.05, 0.05))


def test_the_dataset_template_takes_the_total_class_count():
    assert default_dataset_template("glyphs:100:40") == "glyphs:{total}:40"
    assert default_dataset_template("glyphs:100:40:32") == "glyphs:{total}:40:32"
    assert default_dataset_template("glyphs:100") == "glyphs:{total}"
    assert default_dataset_template("digits") == "digits"
    base = build_preset("default", ["data.protocol=open", "data.dataset=glyphs:100:40", "data.fractions=[0.6, 0.2, 0.2]"])
    assert class_count_params(base, 10, "glyphs:{total}:40").data.dataset == "glyphs:16:40"
    closed = build_preset("default", ["data.dataset=digits", "data.protocol=closed"])
    assert class_count_params(closed, 30, "glyphs:{total}").data.dataset == "glyphs:30"
    # A source of fixed size keeps that many of its classes instead.
    folder = class_count_params(base, 10, "folder:/data/faces").data
    assert (folder.dataset, folder.classes) == ("folder:/data/faces", 16)
    assert class_count_params(base, 10, "glyphs:{total}:40").data.classes is None


def test_the_glyphs_sweep_preset_is_an_open_map_at_r_study_on_glyphs():
    params = build_preset("glyphs-sweep")
    assert params.data.dataset.startswith("glyphs:") and params.data.protocol == "open"
    assert params.train.objective == "map_at_r" and params.model.name == "cnn"
    assert "{total}" in default_dataset_template(params.data.dataset)


# --- the stages, from dvc.yaml ----------------------------------------------------------------


def test_stages_come_from_dvc_yaml_in_order_with_foreach_expanded():
    params = build_preset("default", ["search.losses=[arcface, cosface]", "runs.methods=[fixed_adacos, softmax]"])
    stages = pipeline_stages(params, REPO / "dvc.yaml")
    assert [stage.name for stage in stages] == [
        "prepare", "search@arcface", "search@cosface", "runs@fixed_adacos", "runs@softmax", "tuned@arcface",
        "tuned@cosface", "evaluate", "report"]
    named = {stage.name: stage.argv for stage in stages}
    assert named["search@cosface"] == (sys.executable, "-m", "stages.search", "--loss", "cosface")
    assert named["runs@softmax"] == (sys.executable, "-m", "stages.runs", "--method", "softmax")
    assert named["tuned@arcface"] == (sys.executable, "-m", "stages.runs", "--tuned", "arcface")


# --- synthetic finished studies ---------------------------------------------------------------


def write_finished_study(directory: Path, *, difference: float, half_width: float = 0.005,
                         break_even: int | None = 3, max_trials: int = 12, best_s: float = 20.0,
                         best_m: float = 0.4) -> None:
    """The three files the aggregate reads, as the report and search stages write them."""
    adacos, tuned = 0.80, 0.80 + difference
    metrics = {
        "fixed_adacos": {"test_map_at_r": {"mean": adacos, "std": 0.01, "n": 3}},
        "arcface_tuned": {"test_map_at_r": {"mean": tuned, "std": 0.01, "n": 3}},
        "break_even": {"arcface": {"fixed_adacos": {
            "trials": break_even, "low": None if break_even is None else 1, "high": None,
            "seconds": None if break_even is None else 4.0 * break_even, "reached": break_even is not None,
            "max_trials": max_trials, "target": 0.81}}},
        "verdict": {"recommendation": "undecided", "search_gain": difference, "search_gain_low": difference - 0.01,
                    "search_gain_high": difference + 0.01},
    }
    (directory / "reports" / "tables").mkdir(parents=True, exist_ok=True)
    (directory / "reports" / "metrics.json").write_text(json.dumps(metrics))
    low, high = difference - half_width, difference + half_width
    pd.DataFrame([
        {"method": "arcface_tuned", "metric": "test_map_at_r", "difference": difference, "low": low, "high": high,
         "p_value": 0.01 if low > 0 or high < 0 else 0.4, "p_holm": 0.02 if low > 0 or high < 0 else 0.8,
         "significant": low > 0 or high < 0,
         "higher_is_better": True},
        {"method": "arcface_tuned", "metric": "test_accuracy", "difference": 9.0, "low": 8.0, "high": 10.0,
         "p_value": 0.0, "significant": True, "higher_is_better": True},
        {"method": "softmax", "metric": "test_map_at_r", "difference": 7.0, "low": 6.0, "high": 8.0,
         "p_value": 0.0, "significant": True, "higher_is_better": True},
    ]).to_csv(directory / "reports" / "tables" / "differences.csv", index=False)
    (directory / "results" / "search" / "arcface").mkdir(parents=True, exist_ok=True)
    (directory / "results" / "search" / "arcface" / "best.json").write_text(json.dumps(
        {"loss": "arcface", "trial": 4, "objective": "map_at_r", "value": 0.82,
         "hyperparameters": {"s": best_s, "m": best_m}, "complete_trials": max_trials}))


def synthetic_sweep(root: Path, differences, break_evens=(2, 5, None)) -> dict[int, Path]:
    directories = {}
    for classes, difference, even, best_s in zip((10, 30, 100), differences, break_evens, (8.0, 16.0, 40.0)):
        directories[classes] = class_count_dir(root, classes)
        write_finished_study(directories[classes], difference=difference, break_even=even, best_s=best_s)
    return directories


def test_the_table_has_one_row_per_c_with_the_studys_numbers(tmp_path):
    table = class_count_table(synthetic_sweep(tmp_path, (-0.03, -0.01, 0.02)))
    assert table["C"].tolist() == [10, 30, 100]
    # s_f = √2·ln(C−1), from the spec's published values.
    assert table["s_f"].tolist() == pytest.approx([3.107, 4.762, 6.499], abs=1e-3)
    assert table["best_s"].tolist() == [8.0, 16.0, 40.0] and table["best_m"].tolist() == [0.4, 0.4, 0.4]
    assert table["break_even_reached"].tolist() == [True, True, False]
    assert table["break_even_trials"].iloc[:2].tolist() == [2, 5] and math.isnan(table["break_even_trials"].iloc[2])
    assert table["break_even_seconds"].iloc[:2].tolist() == [8.0, 20.0]
    # The objective's row of differences.csv, not another metric's or another method's.
    assert table["difference"].tolist() == pytest.approx([-0.03, -0.01, 0.02])
    assert table["difference_low"].tolist() == pytest.approx([-0.035, -0.015, 0.015])
    assert table["significant"].tolist() == [True, True, True]
    assert table["tuned_test_mean"].tolist() == pytest.approx([0.77, 0.79, 0.82])
    assert table["adacos_test_mean"].tolist() == pytest.approx([0.80, 0.80, 0.80])
    assert set(table["objective"]) == {"map_at_r"} and set(table["tuned_loss"]) == {"arcface"}


def test_the_aggregate_writes_table_figure_and_reports(tmp_path):
    table = class_count_table(synthetic_sweep(tmp_path / "sweeps", (-0.03, -0.01, 0.02)))
    written = write_sweep_report(table, tmp_path / "reports" / "sweep", sweep_dir="sweeps")
    assert pd.read_csv(written["class_count.csv"])["C"].tolist() == [10, 30, 100]
    with Image.open(written["class_count.png"]) as image:
        image.verify()
    with Image.open(written["class_count.png"]) as image:
        assert image.format == "PNG" and image.size[0] > 800
    markdown = written["report.md"].read_text()
    assert "## Class count" in markdown and "](class_count.png)" in markdown
    assert "not within 12" in markdown and trend_sentences(table) in markdown
    html = written["report.html"].read_text()
    assert "data:image/png;base64," in html and 'src="class_count.png"' not in html


def test_the_trend_sentence_follows_the_numbers(tmp_path):
    # Differences on a straight line in log10 C: −0.03 at C = 10, rising by 0.02 per tenfold C.
    line = [-0.03 + 0.02 * math.log10(c / 10) for c in (10, 30, 100)]
    growing = trend_sentences(class_count_table(synthetic_sweep(tmp_path / "a", line)))
    shrinking = trend_sentences(class_count_table(synthetic_sweep(tmp_path / "b", [-d for d in line])))
    assert "in favour of tuned ArcFace as C grows" in growing and "+0.0200 per tenfold C" in growing
    assert "in favour of Fixed AdaCos as C grows" in shrinking and "-0.0200 per tenfold C" in shrinking
    assert "-0.0300 at C = 10, -0.0100 at C = 100" in growing
    assert "Break-even trials rise with C (C = 10: 2, C = 30: 5, C = 100: not within 12)" in growing
    falling = trend_sentences(class_count_table(synthetic_sweep(tmp_path / "c", (0.0, 0.0, 0.0), (None, 6, 1))))
    assert "Break-even trials fall with C" in falling
    # Wide intervals: the slope's direction is still stated, and so is that the seeds cannot resolve it.
    unresolved = class_count_table(synthetic_sweep(tmp_path / "d", (-0.001, 0.0, 0.001)))
    unresolved[["difference_low", "difference_high"]] = [[-0.05, 0.05]] * 3
    assert "the trend is not resolved" in trend_sentences(unresolved)
    never = trend_sentences(class_count_table(synthetic_sweep(tmp_path / "e", (0.0, 0.0, 0.0), (None, None, None))))
    assert "never reached" in never
    # Best s 8, 16, 40 at C = 10, 30, 100 (synthetic_sweep); s_f = √2·ln(C−1): 3.11, 4.76, 6.5.
    assert ("The search's best s grows with C, as s_f does: 8 against s_f = 3.11 at C = 10, 16 against s_f = 4.76 "
            "at C = 30, 40 against s_f = 6.5 at C = 100.") in growing


# --- skip-if-finished and failures ---------------------------------------------------------------


def failing_pipeline(path: Path) -> Path:
    path.write_text("stages:\n  prepare:\n    cmd: python -c \"print('loading the data'); raise SystemExit(3)\"\n")
    return path


def test_is_finished_needs_the_metrics_and_the_same_params(tmp_path):
    params = build_preset("default", ["data.dataset=digits"])
    directory = tmp_path / "C10"
    directory.mkdir()
    write_params(params, directory / "params.yaml", "default")
    assert not is_finished(directory, params)  # interrupted: no metrics.json yet
    write_finished_study(directory, difference=0.0)
    assert is_finished(directory, params)
    assert not is_finished(directory, build_preset("default", ["data.dataset=digits", "train.epochs=2"]))
    (directory / "params.yaml").write_text("train: {epochs: 0}\n")
    assert not is_finished(directory, params)


def test_a_finished_c_is_skipped_and_a_failing_stage_stops_the_sweep_saying_where(tmp_path):
    pipeline = failing_pipeline(tmp_path / "dvc.yaml")
    common = dict(preset="default", dataset_template="digits", out_dir=tmp_path / "sweeps",
                  report_dir=tmp_path / "report", dvc_file=pipeline, log=lambda message: None)
    assignments = ["data.dataset=digits"]
    params = class_count_params(build_preset("default", assignments), 10, "digits")
    directory = class_count_dir(tmp_path / "sweeps", 10)
    directory.mkdir(parents=True)
    write_params(params, directory / "params.yaml", "default")
    write_finished_study(directory, difference=0.01)
    # Finished with the same params: no stage runs (the only stage would fail), the aggregate is written.
    written = run_sweep([10], assignments=assignments, **common)
    assert pd.read_csv(written["class_count.csv"])["C"].tolist() == [10]
    # Changed params: the study runs again, and the failing stage stops the sweep.
    with pytest.raises(SweepError) as failure:
        run_sweep([10], assignments=assignments + ["train.epochs=2"], **common)
    message = str(failure.value)
    assert "C=10: stage prepare failed (exit 3)" in message and "loading the data" in message
    assert "finished class counts are kept" in message
    # The stale metrics.json is gone, so the rerun with the old params is not mistaken for finished.
    assert not is_finished(directory, params)


# --- the real thing -----------------------------------------------------------------------------


def test_end_to_end_sweep_on_digits_runs_the_real_stages(tmp_path, monkeypatch, capsys):
    """SLOW (about a minute on 2 cores): `study sweep` runs every real stage as a subprocess, tiny budgets; a rerun skips."""
    arguments = ["sweep", "--classes", "10", "--preset", "default", "--dataset-template", "digits", "--out", "sweeps",
                 "--report-dir", "agg"]
    for assignment in ("data.dataset=digits", "data.protocol=closed", "model.name=mlp", "model.embedding_size=16", "train.epochs=1",
                       "train.eval_every=5", "train.device=cpu", "search.n_trials=2", "runs.seeds=[0]",
                       "runs.methods=[fixed_adacos]", "analysis.n_bootstrap=100"):
        arguments += ["--set", assignment]
    monkeypatch.chdir(tmp_path)
    assert main(arguments) == 0, capsys.readouterr().err
    progress = capsys.readouterr().err
    study = tmp_path / "sweeps" / "C10"
    for stage in ("prepare", "search@arcface", "runs@fixed_adacos", "tuned@arcface", "evaluate", "report"):
        assert f"C=10: {stage} done in" in progress
        assert (study / "logs" / f"{stage}.log").is_file()
    assert load_params(str(study / "params.yaml")).train.epochs == 1
    assert json.loads((study / "reports" / "metrics.json").read_text())["break_even"]["arcface"]["fixed_adacos"]["max_trials"] == 2
    table = pd.read_csv(tmp_path / "agg" / "class_count.csv")
    assert table["C"].tolist() == [10] and table["s_f"].iloc[0] == pytest.approx(3.107, abs=1e-3)
    assert math.isfinite(table["difference"].iloc[0]) and math.isfinite(table["best_s"].iloc[0])
    assert "data:image/png;base64," in (tmp_path / "agg" / "report.html").read_text()
    assert main(arguments) == 0
    again = capsys.readouterr().err
    assert "finished earlier with the same params, skipped" in again and "prepare (1/" not in again
