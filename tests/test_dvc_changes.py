"""Params that validate refuses remove nothing and rewrite nothing under `dvc repro`; under `dvc exp run -S`, where DVC
rewrites params.yaml and removes outputs before any stage runs, validate's message says so and how to undo it, and
doing what it says gives the workspace back."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import copy_study
from study import dvc_changes
from study.dvc_changes import after_refusal, stage_names

GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
TYPO = "search.losses=[arcfce]"


def test_stage_names_expand_foreach_from_the_raw_params():
    pipeline = {"stages": {"validate": {"cmd": "v"}, "search": {"foreach": "${search.losses}", "do": {}},
                           "runs": {"foreach": ["a", "b"], "do": {}}, "fixed": {"foreach": "${runs.fixed}", "do": {}}}}
    params = {"search": {"losses": ["arcfce"]}, "runs": {"fixed": {"arcface_default": {"s": 64}}}}
    assert stage_names(pipeline, params) == {"validate", "search@arcfce", "runs@a", "runs@b", "fixed@arcface_default"}
    assert stage_names(pipeline, {"search": {"losses": "arcface"}}) is None  # not a list: unknown, never guessed


def test_under_dvc_repro_the_refusal_says_nothing_was_deleted(monkeypatch):
    monkeypatch.delenv(dvc_changes.EXPERIMENT, raising=False)
    assert after_refusal() == ("No other stage ran and no output was deleted; fix the above and run `dvc repro` "
                               "again.")


def test_an_experiment_in_a_temporary_copy_leaves_the_workspace_alone(monkeypatch, tmp_path):
    monkeypatch.setenv(dvc_changes.EXPERIMENT, "abc123")
    monkeypatch.setenv(dvc_changes.DVC_ROOT, str(tmp_path / "workspace"))
    assert "your workspace is as it was" in after_refusal(tmp_path / "executor")


def every_output(root: Path) -> list[str]:
    """Every output the study's pipeline declares with its params.yaml, foreach stages expanded."""
    pipeline = yaml.safe_load((root / "dvc.yaml").read_text())
    params = yaml.safe_load((root / "params.yaml").read_text())
    paths = []
    for stage in pipeline["stages"].values():
        body, items = stage.get("do", stage), [None]
        if "foreach" in stage:
            section, key = stage["foreach"].strip("${}").split(".")
            items = params[section][key]
        for entry in [*body.get("outs", []), *body.get("metrics", [])]:
            path = next(iter(entry)) if isinstance(entry, dict) else entry
            paths += [path.replace("${item}", str(item)) for item in items]
    return paths


def files_under(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for folder in ("data", "results", "reports")
            for path in sorted((root / folder).rglob("*")) if path.is_file()}


@pytest.fixture
def finished_study(tmp_path):
    """The study's pipeline and code in a git + DVC repository, every output there (a stand-in file each, committed
    to DVC's cache as `dvc repro` leaves them), all of it committed."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    root = copy_study(tmp_path / "repo")
    (root / ".dvc" / ".gitignore").write_text("/config.local\n/tmp\n/cache\n")
    from study.validation import VALIDATED_TEXT

    for path in every_output(root):
        target = root / path
        if path == "data/source":  # validate's link to the images, a file for the default study's generated source
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("the source link validate keeps\n")
        elif target.suffix:  # a file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(VALIDATED_TEXT if path == "results/validated.txt" else f"{path}\n")
        else:  # a folder
            target.mkdir(parents=True, exist_ok=True)
            (target / "part.csv").write_text(f"{path}\n")
    dvc(["commit", "--force", "--quiet"], root, check=True)
    for command in (["add", "-A"], ["commit", "-q", "-m", "a finished study"]):
        subprocess.run([*GIT, *command], cwd=root, check=True)
    return root


def dvc(args: list[str], cwd: Path, check: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 or not check, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_refused_params_under_dvc_repro_remove_and_rewrite_nothing(finished_study):
    """SLOW (about 10 s): the typo through `dvc repro`."""
    root, before = finished_study, files_under(finished_study)
    params = root / "params.yaml"
    typo = params.read_text().replace("losses: [arcface]", "losses: [arcfce]")
    params.write_text(typo)
    done = dvc(["repro"], root)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "'arcfce' cannot be searched" in said
    assert "No other stage ran and no output was deleted" in said
    assert files_under(root) == before and params.read_text() == typo


@pytest.mark.slow
def test_refused_params_under_dvc_exp_run_say_what_dvc_changed_and_how_to_undo_it(finished_study):
    """SLOW (about 15 s): the typo through `dvc exp run -S`, then the commands the message gives."""
    root, before = finished_study, files_under(finished_study)
    params_before = (root / "params.yaml").read_bytes()
    done = dvc(["exp", "run", "-S", TYPO], root)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "'arcfce' cannot be searched" in said
    message = said.split("cannot be searched")[1]
    removed = sorted(set(before) - set(files_under(root)))
    # What DVC removed (the outputs of search@arcface and tuned@arcface) and that it rewrote params.yaml.
    assert removed == ["results/runs/arcface_tuned/part.csv", "results/search/arcface/part.csv"]
    assert (root / "params.yaml").read_bytes() != params_before
    assert "removed results/search/arcface and results/runs/arcface_tuned" in message
    assert "rewrote the whole file's layout" in message and "no output was deleted" not in message
    undo = message.split("To get back where you were: `")[1].split("`")[0]
    assert undo == "git checkout params.yaml && dvc checkout"
    for command in undo.split(" && "):
        program, *args = command.split()
        if program == "dvc":
            dvc(args, root, check=True)
        else:
            subprocess.run([program, *args], cwd=root, check=True, capture_output=True)
    assert files_under(root) == before and (root / "params.yaml").read_bytes() == params_before
