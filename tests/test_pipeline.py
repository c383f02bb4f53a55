"""The whole study through `dvc repro` on digits with tiny budgets, in a temporary copy of the repository."""

import json
import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from PIL import Image

from study.analysis import expected_best_after_n_trials
from study.validation import VALIDATED_TEXT

from conftest import REPO, copy_study, run_stages, trained_trials

# Each test runs the study through `dvc repro`: minutes on 2 cores.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("dvc") is None, reason="dvc is not installed")]


def make_study_copy(root: Path, **overrides) -> Path:
    """A git + DVC repository holding the study's code and a params.yaml shrunk for a smoke run."""
    copy_study(root)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(dataset="digits", seeds=None)  # one class split: split 0
    params["model"].update(name="mlp", embedding_size=16)
    params["train"].update(epochs=2, eval_every=4, device="cpu", lr=0.01)
    params["search"].update(n_trials=4)
    params["runs"].update(seeds=[0, 1], plateau_cap=1)  # the declared length: this tests the stages
    params["analysis"].update(n_bootstrap=200)
    params["report"]["dpi"] = 60  # figures drawn at half the shipped resolution: a report stage 12.7 s -> 10.2 s
    params["data"]["protocol"] = "closed"  # digits has 10 classes: too few to split into train, val and test sets
    params["train"]["objective"] = "accuracy"
    for key, value in overrides.items():
        section, name = key.split("__")
        params[section][name] = value
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def _trials(root: Path) -> pd.DataFrame:
    """Every class split's ArcFace trials that trained."""
    return trained_trials(sorted((root / "results" / "search" / "arcface").glob("split*/trials.csv")))


def dvc(root: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(["dvc", *args], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"dvc {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def ran_stages(output: str) -> set[str]:
    return {line.split("'")[1] for line in output.splitlines() if line.startswith("Running stage")}


def test_a_null_study_through_dvc_repro_recommends_no_tuning_and_reruns_only_what_changed(tmp_path):
    """ArcFace's search pinned to s ≈ s_f and m ≈ 0, where ArcFace is Fixed AdaCos: tuning can buy nothing.

    The selection-aware tuning cost must say so (the expected test gain's interval covers zero, no
    recommendation to tune), while the classic quantity on the same trials, the expected best val score
    against Fixed AdaCos's mean val score, shows a gain: the maximum of seed noise.
    """
    s_f = math.sqrt(2) * math.log(10 - 1)  # digits, closed protocol: C = 10
    root = make_study_copy(tmp_path, data__protocol="closed", train__objective="accuracy", search__n_trials=8,
                           search__s_range=[0.99 * s_f, 1.01 * s_f], search__m_range={"arcface": [0.0, 0.01]},
                           runs__seeds=[0, 1, 2], train__parallel=1)  # packing: the Ctrl-C test below
    first = dvc(root, "repro")
    assert "leaked" not in first  # each stage's objects freed at exit without a binding's leak warning (stages.begin)
    assert {"prepare", "search@arcface", "runs@fixed_adacos", "runs@dynamic_adacos",
            "runs@arcface_default", "tuned@arcface", "evaluate", "report"} <= ran_stages(first)

    reports = root / "reports"
    report = (reports / "report.md").read_text()
    card, verdict = report.split("\n## ")[1:3]
    # The answer card first, in plain words (what to use, no statistic in it), then the verdict with its numbers.
    assert card.startswith("The answer in a minute\n\n**Use Fixed AdaCos")
    assert "CI" not in card.split("**")[1] and " p = " not in card.split("**")[1]
    assert verdict.startswith("Verdict\n\n**Tuned ArcFace scores ")
    lead = verdict.split("**")[1]
    assert "use Fixed AdaCos" in lead and "CI" not in lead and " p = " not in lead
    for heading in ("Tuning cost versus accuracy", "Final comparison on test", "Convergence"):
        assert heading in report
    html = (reports / "report.html").read_text()
    assert '<img src="figures/' in html and "base64" not in html
    figures = sorted((reports / "figures").glob("*.png"))
    assert figures
    for figure in figures:
        with Image.open(figure) as image:
            assert image.size[0] > 100
    metrics = json.loads((reports / "metrics.json").read_text())
    runs = pd.read_csv(root / "results" / "evaluation" / "runs.csv")
    assert set(runs["method"]) == {"fixed_adacos", "dynamic_adacos", "arcface_default", "arcface_tuned"}
    assert len(runs) == 12 and runs["test_accuracy"].notna().all()
    trials = _trials(root)
    assert len(trials) == 8 and (trials["state"] == "COMPLETE").all()
    assert trials["s"].between(0.99 * s_f, 1.01 * s_f).all() and trials["m"].between(0, 0.01).all()
    # Each trial trained at its own seed, never a final one, and was scored on test.
    assert trials["seed"].nunique() == 8 and not set(trials["seed"]) & {0, 1, 2}
    assert trials["test_value"].notna().all()
    curve = pd.read_csv(reports / "tables" / "tuning_curves.csv").query("kind == 'search'")
    assert curve["n"].tolist() == list(range(1, 9))
    assert curve["expected_test"].iloc[0] == pytest.approx(trials["test_value"].mean())
    assert json.dumps(metrics)  # strict JSON, no NaN

    # The null study: no recommendation to tune, and the expected test gain of the search covers zero ...
    assert metrics["verdict"]["recommendation"] != "arcface_tuned"
    cost = metrics["verdict"]["cost"]  # at the largest n with a valid interval
    assert cost["gain_low"] <= 0.0 <= cost["gain_high"] and cost["gain_n"] == cost["valid_trials"] >= 1
    # ... while the old quantity on the same trials, expected best val (Dodge, with replacement) against Fixed
    # AdaCos's mean val, claims a gain: the best of 8 draws of seed noise.
    fixed = runs[runs["method"] == "fixed_adacos"]
    old_gain = expected_best_after_n_trials(trials["value"], replacement=True)[-1] - fixed["val_score"].mean()
    assert old_gain > 0 and old_gain > cost["gain"]
    even = pd.read_csv(reports / "tables" / "break_even.csv").query("reference == 'fixed_adacos'").iloc[0]
    # The report's classic number uses the figure's estimator (without replacement): at n = N, the best val.
    assert even["old_val_gain"] == pytest.approx(trials["value"].max() - fixed["val_score"].mean())

    assert ran_stages(dvc(root, "repro")) == set()
    assert "Data and pipelines are up to date" in dvc(root, "status")
    assert dvc(root, "metrics", "show").count("fixed_adacos") >= 1
    dvc(root, "plots", "show", "-o", str(tmp_path / "plots"))
    assert (tmp_path / "plots" / "index.html").is_file()

    params = yaml.safe_load((root / "params.yaml").read_text())
    params["report"]["dpi"] = 80
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = subprocess.run(["dvc", "status", "--json"], cwd=root, capture_output=True, text=True, check=True)
    assert set(json.loads(status.stdout)) == {"validate", "report"}  # validate reads every key, changes nothing

    params["search"]["n_trials"] = 9
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    rerun = ran_stages(dvc(root, "repro"))
    # validate reran on the changed params; its output is the same bytes, so what only it feeds stays up to date.
    assert {"validate", "search@arcface", "report"} <= rerun and "prepare" not in rerun
    assert "runs@fixed_adacos" not in rerun
    assert (root / "results" / "validated.txt").read_text() == VALIDATED_TEXT
    trials_after = _trials(root)
    assert len(trials_after) == 9
    assert trials_after[["s", "m", "seed"]].iloc[:8].values.tolist() == trials[["s", "m", "seed"]].values.tolist()


def _default_sigint() -> None:
    # A process started from a non-interactive shell's background job inherits SIGINT ignored, and so would dvc and
    # the stage (which keep an ignored SIGINT ignored, as a user's nohup asks): the test's Ctrl-C must reach them.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_interrupts_the_search_in_a_few_lines_and_a_rerun_draws_the_uninterrupted_searchs_points(tmp_path):
    trials = 20  # enough that the search is still running, however slow the machine, when 3 have finished
    overrides = dict(search__n_trials=trials, train__epochs=3)
    root = make_study_copy(tmp_path / "interrupted", **overrides)
    dvc(root, "repro", "prepare")
    env = {**os.environ, "PYTHONPATH": str(root)}
    process = subprocess.Popen(["dvc", "repro", "search@arcface"], cwd=root, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               preexec_fn=_default_sigint)
    journal = root / "results" / "trials" / "journal.log"
    deadline = time.time() + 600  # generous: only a hung search gets near it
    while time.time() < deadline and (seen := journal_finished_trials(journal)) < 3:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)
    sent = time.monotonic()
    output, _ = process.communicate(timeout=60)
    took = time.monotonic() - sent
    kept = journal_finished_trials(journal)
    # Two different failures: the poll saw the search already done (the test was starved of CPU and never
    # interrupted it), or the search ran on after SIGINT (the interrupt was lost).
    assert seen < trials, f"the search finished before the test could interrupt it ({seen} trials when polled)"
    assert 3 <= kept < trials, f"the search ran on after SIGINT: {kept} trials kept, {seen} when it was sent"
    # An interruption, not a crash: within seconds, a few lines, no traceback, what was kept and how to resume.
    after = output[output.find("Running stage"):]
    assert took < 15 and "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "finished trials of arcface (split 0) kept; run dvc repro again to resume" in after, output
    assert len(after.splitlines()) <= 25, output

    dvc(root, "repro", "search@arcface")
    resumed = _trials(root)
    assert (resumed["state"] == "COMPLETE").sum() == trials
    # The uninterrupted search in a second copy: the resumed one trained exactly its points at its seeds, to the same
    # val and test scores, so everything downstream of the search (tuned runs, verdict) is the same too.
    whole = make_study_copy(tmp_path / "whole", **overrides)
    run_stages(whole, [["stages.prepare"], ["stages.search", "--loss", "arcface"]])  # DVC was tested above
    points = ["trial", "s", "m", "seed", "iterations", "value", "test_value"]
    done = resumed[resumed["state"] == "COMPLETE"][points].sort_values("trial", ignore_index=True)
    pd.testing.assert_frame_equal(done, _trials(whole)[points].sort_values("trial", ignore_index=True))


def journal_finished_trials(journal: Path) -> int:
    """COMPLETE trials recorded in an Optuna journal file, read without Optuna."""
    if not journal.is_file():
        return 0
    count = 0
    for line in journal.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        count += entry.get("op_code") == 6 and entry.get("state") == 1  # SET_TRIAL_STATE_VALUES to COMPLETE
    return count
