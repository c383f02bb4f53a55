"""The whole study through `dvc repro` on digits with tiny budgets, in a temporary copy of the repository."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
COPIED = ["dvc.yaml", "params.yaml", "stages", "study", ".dvc/config", ".dvcignore"]

pytestmark = pytest.mark.skipif(shutil.which("dvc") is None, reason="dvc is not installed")


def make_study_copy(root: Path, **overrides) -> Path:
    """A git + DVC repository holding the study's code and a params.yaml shrunk for a smoke run."""
    for name in COPIED:
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["dataset"] = "digits"
    params["model"].update(name="mlp", embedding_size=16)
    params["train"].update(epochs=2, eval_every=4, device="cpu", lr=0.01)
    params["search"].update(n_trials=4)
    params["runs"].update(seeds=[0, 1])
    params["analysis"].update(n_bootstrap=200)
    for key, value in overrides.items():
        section, name = key.split("__")
        params[section][name] = value
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def dvc(root: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(["dvc", *args], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"dvc {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def ran_stages(output: str) -> set[str]:
    return {line.split("'")[1] for line in output.splitlines() if line.startswith("Running stage")}


def test_dvc_repro_runs_the_study_writes_the_report_and_reruns_only_what_changed(tmp_path):
    root = make_study_copy(tmp_path)
    first = dvc(root, "repro")
    assert {"prepare", "search@arcface", "runs@fixed_adacos", "runs@dynamic_adacos", "runs@softmax",
            "runs@arcface_default", "tuned@arcface", "evaluate", "report"} <= ran_stages(first)

    reports = root / "reports"
    report = (reports / "report.md").read_text()
    for heading in ("Tuning cost versus accuracy", "Final comparison on test", "Convergence", "Verdict"):
        assert heading in report
    html = (reports / "report.html").read_text()
    assert "data:image/png;base64," in html
    figures = sorted((reports / "figures").glob("*.png"))
    assert figures
    for figure in figures:
        with Image.open(figure) as image:
            assert image.size[0] > 100
    metrics = json.loads((reports / "metrics.json").read_text())
    runs = pd.read_csv(root / "results" / "evaluation" / "runs.csv")
    assert set(runs["method"]) == {"fixed_adacos", "dynamic_adacos", "softmax", "arcface_default", "arcface_tuned"}
    assert len(runs) == 10 and runs["test_accuracy"].notna().all()
    trials = pd.read_csv(root / "results" / "search" / "arcface" / "trials.csv")
    assert len(trials) == 4
    expected_best = pd.read_csv(reports / "tables" / "expected_best.csv")
    assert expected_best["n"].tolist() == [1, 2, 3, 4]
    assert expected_best["expected_best"].iloc[0] == pytest.approx(trials["value"].mean())
    assert json.dumps(metrics)  # strict JSON, no NaN
    assert "fixed_adacos" in json.dumps(metrics)

    assert ran_stages(dvc(root, "repro")) == set()
    assert "Data and pipelines are up to date" in dvc(root, "status")
    assert dvc(root, "metrics", "show").count("fixed_adacos") >= 1
    dvc(root, "plots", "show", "-o", str(tmp_path / "plots"))
    assert (tmp_path / "plots" / "index.html").is_file()

    params = yaml.safe_load((root / "params.yaml").read_text())
    params["report"]["dpi"] = 80
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert ran_stages(dvc(root, "repro")) == {"report"}

    params["search"]["n_trials"] = 5
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    rerun = ran_stages(dvc(root, "repro"))
    assert "search@arcface" in rerun and "prepare" not in rerun and "runs@fixed_adacos" not in rerun
    trials_after = pd.read_csv(root / "results" / "search" / "arcface" / "trials.csv")
    assert len(trials_after) == 5
    assert trials_after[["s", "m"]].iloc[:4].values.tolist() == trials[["s", "m"]].values.tolist()


def test_killing_the_search_keeps_its_finished_trials(tmp_path):
    root = make_study_copy(tmp_path, search__n_trials=40, train__epochs=3)
    dvc(root, "repro", "prepare")
    env = {**os.environ, "PYTHONPATH": str(root)}
    process = subprocess.Popen(["dvc", "repro", "search@arcface"], cwd=root, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    journal = root / "results" / "search" / "arcface" / "journal.log"
    deadline = time.time() + 600  # generous: only a hung search gets near it
    while time.time() < deadline and journal_finished_trials(journal) < 3:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)
    process.wait(timeout=60)
    kept = journal_finished_trials(journal)
    assert 3 <= kept < 40, "the search was not interrupted mid-way"

    dvc(root, "repro", "search@arcface")
    trials = pd.read_csv(root / "results" / "search" / "arcface" / "trials.csv")
    assert (trials["state"] == "COMPLETE").sum() == 40
    assert trials["trial"].tolist()[:kept] == list(range(kept))


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
