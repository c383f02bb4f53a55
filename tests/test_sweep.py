"""The class-count sweep: C → dataset class count, the generated DVC pipelines, the aggregate, and one real sweep."""

import json
import math
import os
import posixpath
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from PIL import Image

import study.report
from conftest import dvc_study
from study.cli import main
from study.config import load_params
from study.many_studies import module_sources, reproduce, study_pipeline
from study.presets import build_preset
from study.sources import ImageSet
from study.splits import split_dataset
from study.sweep import (AGGREGATE_MODULES, SweepError, aggregate_sweep, class_count_dir, class_count_params,
                         class_count_table, default_dataset_template, total_classes_for, trend_sentences, write_sweep,
                         write_sweep_report)

REPO = Path(__file__).resolve().parents[1]
# What a repository needs for the sweep's pipelines: the study's pipeline, its params and the code its stages declare.
COPIED = ["dvc.yaml", "params.yaml", ".dvcignore", "stages", "study"]


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


# --- the aggregate, on synthetic finished studies ---------------------------------------------------------------


def write_finished_study(directory: Path, *, difference: float, half_width: float = 0.005,
                         break_even: int | None = 3, max_trials: int = 12, best_s: float = 20.0,
                         best_m: float = 0.4, train_classes: int = 10) -> None:
    """The four files the aggregate reads, as the prepare, report and search stages write them."""
    (directory / "data" / "prepared" / "split0").mkdir(parents=True, exist_ok=True)
    (directory / "data" / "prepared" / "split0" / "manifest.json").write_text(json.dumps(
        {"source": f"glyphs:{train_classes}", "splits": {"train": {"num_classes": train_classes}}}))
    adacos, tuned = 0.80, 0.80 + difference
    metrics = {
        "fixed_adacos": {"test_map_at_r": {"mean": adacos, "std": 0.01, "n": 3}},
        "arcface_tuned": {"test_map_at_r": {"mean": tuned, "std": 0.01, "n": 3}},
        "break_even": {"arcface": {"fixed_adacos": {
            "trials": break_even, "low": None if break_even is None else 1, "high": None,
            "seconds": None if break_even is None else 4.0 * break_even, "reached": break_even is not None,
            "max_trials": max_trials, "target": 0.81}}},
        "verdict": {"recommendation": "undecided", "cost": {"gain": difference, "gain_low": difference - 0.01,
                                                            "gain_high": difference + 0.01}},
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
    (directory / "results" / "search" / "arcface" / "split0").mkdir(parents=True, exist_ok=True)
    (directory / "results" / "search" / "arcface" / "split0" / "best.json").write_text(json.dumps(
        {"loss": "arcface", "trial": 4, "objective": "map_at_r", "value": 0.82,
         "hyperparameters": {"s": best_s, "m": best_m}, "complete_trials": max_trials}))


def synthetic_sweep(root: Path, differences, break_evens=(2, 5, None), best_s=(8.0, 16.0, 40.0)) -> dict[int, Path]:
    directories = {}
    for classes, difference, even, s in zip((10, 30, 100), differences, break_evens, best_s):
        directories[classes] = class_count_dir(root, classes)
        write_finished_study(directories[classes], difference=difference, break_even=even, best_s=s,
                             train_classes=classes)
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
    assert 'src="class_count.png"' in html and "base64" not in html


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



def test_the_best_s_sentence_says_where_it_stays_and_where_it_moves(tmp_path):
    def scale_sentence(name, best_s):
        sentences = trend_sentences(class_count_table(synthetic_sweep(tmp_path / name, (0.0, 0.0, 0.0),
                                                                      best_s=best_s)))
        return sentences[sentences.index("The search's best s"):]

    # Two class counts share their best s: it does not grow from C = 10 to 30.
    assert scale_sentence("a", (8.0, 8.0, 40.0)).startswith(
        "The search's best s stays at 8 from C = 10 to 30, then grows from C = 30 to 100, while s_f grows throughout: "
        "8 against s_f = 3.11 at C = 10, 8 against s_f = 4.76 at C = 30, 40 against s_f = 6.5 at C = 100.")
    assert scale_sentence("b", (16.0, 16.0, 16.0)).startswith("The search's best s stays at 16 at every C, while s_f "
                                                              "grows:")
    assert scale_sentence("c", (40.0, 16.0, 8.0)).startswith("The search's best s shrinks as C grows, while s_f grows:")
    assert scale_sentence("d", (8.0, 40.0, 16.0)).startswith(
        "The search's best s grows from C = 10 to 30, then shrinks from C = 30 to 100, while s_f grows throughout")
    # Compared as printed: 8.001 and 8.0 both read 8.
    assert "stays at 8 from C = 10 to 30" in scale_sentence("e", (8.0, 8.001, 40.0))


def test_the_aggregate_stage_checks_each_cs_training_classes(tmp_path):
    synthetic_sweep(tmp_path / "sweeps", (-0.03, -0.01, 0.02))
    written = aggregate_sweep([100, 10, 30], tmp_path / "sweeps", tmp_path / "agg", label="sweeps")
    assert pd.read_csv(written["class_count.csv"])["C"].tolist() == [10, 30, 100]
    assert "under `sweeps`" in written["report.md"].read_text()
    write_finished_study(class_count_dir(tmp_path / "sweeps", 30), difference=0.0, train_classes=29)
    with pytest.raises(SweepError, match=r"C=30: data.dataset=glyphs:29 gives 29 training classes, not 30"):
        aggregate_sweep([10, 30, 100], tmp_path / "sweeps", tmp_path / "agg")


# --- the pipelines DVC runs ------------------------------------------------------------------------


def stage_bodies(pipeline: dict) -> dict:
    return {name: stage.get("do", stage) for name, stage in pipeline["stages"].items()}


def entry_paths(entries) -> list[str]:
    return [next(iter(entry)) if isinstance(entry, dict) else entry for entry in entries]


def test_each_cs_pipeline_is_the_repositorys_with_the_code_taken_from_the_root():
    root = yaml.safe_load((REPO / "dvc.yaml").read_text())
    folder = REPO / "sweeps" / "glyphs" / "C10"  # three levels down: the code is ../../../stages/…
    generated = study_pipeline(root, posixpath.relpath(REPO, folder))
    assert "plots" not in generated and list(generated["stages"]) == list(root["stages"])
    for name, stage in root["stages"].items():
        assert generated["stages"][name].get("foreach") == stage.get("foreach")
    rebased = 0
    for name, body in stage_bodies(root).items():
        copy = stage_bodies(generated)[name]
        # Same command, params and outputs: the stage runs unchanged in the C's folder, on the C's params.yaml. Its
        # metrics are plain outs there, so the repository's `dvc metrics show` lists the default study's alone.
        expected = {key: value for key, value in body.items() if key not in ("deps", "metrics")}
        if "metrics" in body:
            expected["outs"] = [*body.get("outs", []), *body["metrics"]]
        assert "metrics" not in copy
        assert {key: value for key, value in copy.items() if key != "deps"} == expected
        # Every dep but the benchmark's prediction, which only the repository's own study sets beside itself.
        deps = [dep for dep in body["deps"] if not entry_paths([dep])[0].startswith("reports/benchmark/")]
        assert len(copy["deps"]) == len(deps)
        for dep, mine in zip(entry_paths(deps), entry_paths(copy["deps"])):
            # Every dep is the same file: the root's code, or the C's own data and results.
            shared = os.path.normpath(folder / mine) == os.path.normpath(REPO / dep)
            assert shared or mine == dep, (name, dep, mine)
            if shared:
                rebased += 1
                assert mine.startswith("../../../") and dep.startswith(("stages/", "study/"))
            else:
                assert dep.startswith(("data/", "results/", "reports/")), (name, dep)
    assert rebased >= len(root["stages"])  # every stage runs the code of its stages/ module at least


def study_repository(root: Path, pipeline: str | None = None, *, init: bool = True) -> Path:
    """The study's pipeline, params and code (or only the dvc.yaml `pipeline`) in a git + DVC repository, or
    (`init=False`) in a folder with the .dvc folder the sweep looks for."""
    if pipeline is not None:
        root.mkdir(parents=True, exist_ok=True)
        (root / "dvc.yaml").write_text(pipeline)
    return dvc_study(root, COPIED if pipeline is None else [], init=init)


def test_the_sweep_writes_every_cs_pipeline_and_the_aggregate_reading_declared_inputs(tmp_path, monkeypatch):
    root = study_repository(tmp_path, init=False)
    monkeypatch.chdir(root)
    arguments = dict(preset="glyphs-sweep", assignments=["search.losses=[arcface, cosface]", "report.dpi=90"],
                     out_dir="sweeps/glyphs", report_dir="reports/sweep", log=lambda message: None)
    sweep = write_sweep([30, 10], **arguments)
    out = root / "sweeps" / "glyphs"
    assert sweep.pipelines == (out / "C10" / "dvc.yaml", out / "C30" / "dvc.yaml", out / "dvc.yaml")
    assert load_params(str(out / "C10" / "params.yaml")).data.dataset == "glyphs:19:40"
    assert load_params(str(out / "C30" / "params.yaml")).data.dataset == "glyphs:59:40"
    stage = yaml.safe_load((out / "dvc.yaml").read_text())["stages"]["aggregate"]
    assert stage["cmd"] == ("python -m stages.sweep_report --classes 10 30 --report-dir ../../reports/sweep "
                            "--label sweeps/glyphs --dpi 90")
    inputs = ["data/prepared/split0/manifest.json", "reports/metrics.json", "reports/tables/differences.csv",
              "results/search/arcface/split0/best.json", "results/search/cosface/split0/best.json"]
    # The code it runs, from the root: stages/sweep_report.py, the study.sweep and study.report packages, ...
    code = [f"../../{path}" for module in AGGREGATE_MODULES for path in module_sources(root, module)]
    assert stage["deps"] == [f"C{c}/{path}" for c in (10, 30) for path in inputs] + code
    assert code[:2] == ["../../stages/sweep_report.py", "../../study/sweep/__init__.py"]
    # File by file, compiled code left out: DVC would hash a folder outside its project with its __pycache__.
    assert "../../study/sweep/pipelines.py" in code and not any("__pycache__" in path for path in code)
    assert all((out / path).is_file() for path in code)
    assert stage["outs"] == [{f"../../reports/sweep/{name}": {"cache": False}} for name in sweep.outputs]
    assert sweep.outputs["report.md"] == root / "reports" / "sweep" / "report.md"
    # The sweep's own DVC project: the repository's DVC leaves it out of its own study's views.
    assert sweep.project.root == out and (out / ".dvc" / "config").is_file() and sweep.project.repository == root
    # Rewritten unchanged: the same bytes, so DVC sees nothing new.
    before = {path: path.read_bytes() for path in out.rglob("*.yaml")}
    write_sweep([10, 30], **arguments)
    assert {path: path.read_bytes() for path in out.rglob("*.yaml")} == before


def test_the_sweep_refuses_what_it_must_not_overwrite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = dict(preset="default", assignments=["data.dataset=digits", "data.protocol=closed"],
                  dataset_template="digits", log=lambda message: None)
    with pytest.raises(SweepError, match="not inside a DVC repository"):
        write_sweep([10], out_dir="outside", **common)
    study_repository(tmp_path / "repo", init=False)
    with pytest.raises(ValueError, match="--out must be a folder inside the repository"):
        write_sweep([10], out_dir="repo", report_dir="repo/reports", **common)  # would replace the study's dvc.yaml
    (tmp_path / "repo" / "mine").mkdir()
    (tmp_path / "repo" / "mine" / "dvc.yaml").write_text("stages: {}\n")
    with pytest.raises(SweepError, match="was not written by `study sweep`"):
        write_sweep([10], out_dir="repo/mine", report_dir="repo/reports", **common)


def dvc_status(root: Path, *targets: Path) -> set[str]:
    """The stages DVC would run (each judged on its own deps, params and command) in the DVC project `root`, by
    DVC's name."""
    done = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", *map(str, targets)], cwd=root,
                          capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


def ran_stages(output: str) -> set[str]:
    return {line.split("'")[1] for line in output.splitlines() if "Running stage '" in line}


FAILING = """stages:
  prepare:
    cmd: python -c "import os; os.makedirs('data/prepared'); open('data/prepared/manifest.json', 'w').write('{}')"
    outs: [data/prepared]
  report:
    cmd: python -c "print('drawing the figures'); raise SystemExit(3)"
    deps: [data/prepared/manifest.json]
    outs: [reports/metrics.json]
"""


@pytest.mark.slow
def test_a_failing_stage_stops_the_sweep_saying_where_and_keeps_what_finished(tmp_path, monkeypatch):
    root = study_repository(tmp_path / "repo", FAILING)
    monkeypatch.chdir(root)
    messages = []
    sweep = write_sweep([10], "default", ["data.dataset=digits", "data.protocol=closed"], "digits",
                        log=messages.append)
    with pytest.raises(SweepError) as failure:
        reproduce(sweep.project, sweep.pipelines, log=messages.append, unit="class count")
    message = str(failure.value)
    assert message.startswith("C10: stage report failed") and "Every stage that finished is kept" in message
    assert "drawing the figures" in messages
    assert "$ cd sweeps && dvc repro --keep-going C10/dvc.yaml dvc.yaml" in messages  # the sweep's own DVC project
    # prepare finished and is recorded: the rerun skips it and fails at the same stage.
    assert dvc_status(sweep.project.root, *sweep.pipelines) == {"C10/dvc.yaml:report", "aggregate"}
    messages.clear()
    with pytest.raises(SweepError, match="C10: stage report failed"):
        reproduce(sweep.project, sweep.pipelines, log=messages.append)
    assert ran_stages("\n".join(messages)) == {"C10/dvc.yaml:report"}


# --- the real thing -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_real_sweep_through_dvc_reruns_nothing_when_unchanged_and_only_the_reports_after_a_report_change(
        tmp_path, monkeypatch, capsys):
    """SLOW (about a minute on 2 cores): `study sweep` runs every real stage through `dvc repro`, tiny budgets."""
    root = study_repository(tmp_path / "repo")
    tiny = ["data.dataset=digits", "data.protocol=closed", "model.name=mlp", "model.embedding_size=16", "train.epochs=1",
            "train.eval_every=5", "train.device=cpu", "train.parallel=1", "search.n_trials=2", "runs.seeds=[0]",
            "runs.methods=[fixed_adacos]", "runs.plateau_cap=1", "analysis.n_bootstrap=100"]
    arguments = ["sweep", "--classes", "10", "--preset", "default", "--dataset-template", "digits", "--out", "sweeps",
                 "--report-dir", "agg", *(word for assignment in tiny for word in ("--set", assignment))]
    monkeypatch.chdir(root)
    assert main(arguments) == 0, capsys.readouterr().err
    stages = {f"C10/dvc.yaml:{stage}" for stage in ("validate", "prepare", "search@arcface", "runs@fixed_adacos",
                                                    "tuned@arcface", "evaluate", "report")}
    aggregate = {"aggregate"}
    assert ran_stages(capsys.readouterr().err) == stages | aggregate
    study_dir = root / "sweeps" / "C10"
    assert load_params(str(study_dir / "params.yaml")).train.epochs == 1
    metrics = json.loads((study_dir / "reports" / "metrics.json").read_text())
    assert metrics["break_even"]["arcface"]["fixed_adacos"]["max_trials"] == 2
    table = pd.read_csv(root / "agg" / "class_count.csv")
    assert table["C"].tolist() == [10] and table["s_f"].iloc[0] == pytest.approx(3.107, abs=1e-3)
    assert math.isfinite(table["difference"].iloc[0]) and math.isfinite(table["best_s"].iloc[0])
    assert 'src="class_count.png"' in (root / "agg" / "report.html").read_text()
    pipelines = [study_dir / "dvc.yaml", root / "sweeps" / "dvc.yaml"]
    written = {path: path.read_bytes() for path in [*pipelines, study_dir / "params.yaml"]}

    # (1) The same command again: every file as it was, and DVC runs nothing.
    assert main(arguments) == 0
    assert ran_stages(capsys.readouterr().err) == set()
    assert {path: path.read_bytes() for path in written} == written

    # (2) The report's code changes: only the C's report stage and the aggregate are out of date, and only they run.
    report_code = root / Path(study.report.__file__).relative_to(REPO)
    report_code.write_text(report_code.read_text() + "# a comment: the report's code changed\n")
    assert dvc_status(root / "sweeps", *pipelines) == {"C10/dvc.yaml:report"} | aggregate
    assert main(arguments) == 0
    assert ran_stages(capsys.readouterr().err) == {"C10/dvc.yaml:report"} | aggregate
    assert dvc_status(root / "sweeps", *pipelines) == set()
    # A report param changed at every C (the figures' dpi) makes the same two stages out of date, and validate,
    # which reads every key (its output stays the same bytes, so it makes nothing else rerun); nothing else.
    write_sweep([10], "default", [*tiny, "report.dpi=60"], "digits", "sweeps", "agg", log=lambda message: None)
    assert dvc_status(root / "sweeps", *pipelines) == {"C10/dvc.yaml:validate", "C10/dvc.yaml:report"} | aggregate
