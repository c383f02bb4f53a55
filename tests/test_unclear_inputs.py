"""Failures that used to be unclear (a traceback, a Python dict, the wrong reason, a warning after the last line) end
with one line naming the problem and the fix: a folder dataset that shrank since it was prepared, links in it that
lead nowhere, a file given as a folder, a dataset spec YAML read as a mapping, a YAML tag in `--set`, a report folder
that refuses writes, and the semaphores of a packed worker ended by a signal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

import stages.prepare
import stages.report
import study.report.writer as writer
from study import cli
from study.config import ConfigError
from study.presets import build_preset

from conftest import REPO, copy_study
from test_bad_inputs import COPIED, PREVIOUS_REPORT, Case, dvc, folder_dataset, image_folder, params_text, validated
from test_storage_faults import read_only


def one_line(message: str) -> str:
    assert "\n" not in message.strip() and "Traceback" not in message, message
    return message


# --- messages of params and data, one line each ---------------------------------------------------------------------


def link_in_folder(name: str, target: str) -> Callable[[Path, pytest.MonkeyPatch], dict]:
    """An image folder holding a link `class0/<name>` to `target` (relative to its class folder)."""
    def setup(folder: Path, monkeypatch) -> dict:
        values = folder_dataset(classes=3, per_class=12)(folder, monkeypatch)
        os.symlink(target, folder / "images" / "class0" / name)
        return values
    return setup


def preset_with(*assignments: str) -> Callable[[Path, pytest.MonkeyPatch], str]:
    """`study preset default --set …` into the case's folder: its message (printed on stderr, read by the test)."""
    def run(folder: Path, monkeypatch) -> str:
        code = cli.main(["preset", "default", "--output", str(folder / "params.yaml"),
                         *[part for assignment in assignments for part in ("--set", assignment)]])
        assert code == 2 and not (folder / "params.yaml").exists()
        return ""
    return run


CASES = [
    Case("a link to itself in the image folder", validated(setup=link_in_folder("loop.png", "loop.png")),
         ("data.dataset: ", "class0/loop.png", "is a link to loop.png, which leads back to itself",
          "remove it or move it out of")),
    Case("a link to nothing in the image folder", validated(setup=link_in_folder("gone.png", "nowhere.png")),
         ("data.dataset: ", "class0/gone.png", "is a link to nowhere.png, which does not exist", "remove it")),
    Case("folder: given a file", validated({"data.dataset": "folder:/etc/passwd", "data.image_size": 8}),
         ("data.dataset: ", "/etc/passwd is a file, not a folder", "one sub-folder of images per class"),
         ("does not exist",)),
    Case("folder: given a file, with a fallback", validated(
        {"data.dataset": "folder:/etc/passwd", "data.image_size": 8, "data.fallback": "digits"}),
         ("data.dataset: ", "/etc/passwd is a file, not a folder"), ("does not exist",)),
    Case("idx: given a file", validated({"data.dataset": "idx:/etc/passwd"}),
         ("data.dataset: ", "/etc/passwd is a file, not a folder", "the MNIST-layout files"), ("does not exist",)),
    Case("compose with an empty base, through --set", preset_with("data.dataset=compose:2:40:"),
         ("data.dataset: compose:2:40: ends in ':' with nothing after it", "YAML reads as a mapping",
          "compose:<parts>:<instances per class>:<base dataset>", "compose:2:60:mnist5k"), ("{", "None")),
    Case("compose with an empty base, as dvc exp run -S writes it", validated(
        {"data.dataset": {"compose:2:40": None}}),
         ("data.dataset: compose:2:40: ends in ':'", "compose:<parts>:<instances per class>:<base dataset>"),
         ("{", "None")),
    Case("a fallback ending in ':'", preset_with("data.fallback=folder:"),
         ("data.fallback: folder: ends in ':'", "e.g. folder:/data/faces"), ("{",)),
    Case("a Python tag in --set", preset_with("train.lr=!!python/object:os.system x"),
         ("--set train.lr", "is not plain YAML", "values are plain YAML (numbers, strings, lists, maps)"),
         ("ConstructorError",)),
    Case("a local tag in --set", preset_with("train.epochs=!custom 3"),
         ("--set train.epochs", "tag '!custom'", "values are plain YAML (numbers, strings, lists, maps)")),
    Case("broken YAML in --set", preset_with("search.losses=[arcface"),
         ("--set search.losses", "is not plain YAML", "numbers, strings, lists, maps")),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_an_unclear_failure_is_one_line_naming_the_problem_and_the_fix(case, tmp_path, monkeypatch, capsys):
    message = one_line(case.run(tmp_path, monkeypatch) or capsys.readouterr().err)
    for needle in case.needles:
        assert needle in message, f"{needle!r} missing from:\n{message}"
    for unclear in case.absent:
        assert unclear not in message, message


# --- the environment and a worker's arguments (issue 55's cases not concluded under load) -----------------------------


@pytest.mark.parametrize("name, value", [("OMP_NUM_THREADS", "abc"), ("OMP_NUM_THREADS", "0"),
                                         ("MKL_NUM_THREADS", "-2")])
def test_a_thread_variable_that_is_no_thread_count_is_refused_by_validate_naming_it(monkeypatch, name, value):
    import study.validation as validation
    from study.config import StudyParams

    monkeypatch.setattr(validation, "declared_problems", lambda params: ([], None))  # the data's checks: seconds
    monkeypatch.setenv(name, value)
    problems = validation.study_problems(StudyParams.from_dict({"train": {"device": "cpu"}}))[0]
    assert problems == [f"{name}={value!r} in the environment is not a thread count, so OpenMP ignores it (and says "
                        f"\"Invalid value\" at every stage's start); unset it (unset {name}) or give a whole number, "
                        f"e.g. {name}=1, and set train.threads for the runs' own"], problems
    for counted in ("1", "4", " 4,2 "):  # OpenMP's own forms, a list one per nesting level among them
        monkeypatch.setenv(name, counted)
        assert validation.thread_variable_problems() == []


def test_cuda_asked_for_where_cuda_visible_devices_hides_every_gpu_names_the_variable(monkeypatch):
    import torch

    from study.training import resolve_device

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "garbage")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # what CUDA makes of it, on a GPU machine too
    with pytest.raises(RuntimeError) as error:
        resolve_device("cuda")
    assert one_line(str(error.value)) == (
        "device 'cuda' was asked for but CUDA is not available on this machine (CUDA_VISIBLE_DEVICES='garbage' shows "
        "only the GPUs it lists: unset it, or list them, e.g. CUDA_VISIBLE_DEVICES=0); use device auto (CUDA when "
        "present) or cpu")


@pytest.mark.parametrize("arguments, said", [
    (["--threads", "0"], "--threads 0: give a whole number of at least 1, the torch threads of this process, e.g. "
                         "--threads 2, or leave it out for train.threads"),
    (["--trials", "-3"], "--trials -3: give a whole number of at least 1, the trials to serve before it stops, e.g. "
                         "--trials 10, or leave it out to serve until the budget is met"),
    (["--cells", "nowhere", "--trials", "0"], "--trials 0: give a whole number of at least 1"),
], ids=["--threads 0", "--trials -3", "--cells with --trials 0"])
def test_a_worker_given_no_threads_or_a_negative_trial_count_says_so_before_opening_anything(tmp_path, monkeypatch,
                                                                                           capsys, arguments, said):
    monkeypatch.chdir(tmp_path)  # no params.yaml, no benchmark: the arguments are refused before either is read
    assert cli.main(["worker", *arguments]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"study: error: {said}") and one_line(error), error


def test_a_yaml_tag_in_set_never_constructs_its_object():
    with pytest.raises(ConfigError, match="train.lr"):
        build_preset("default", ["train.lr=!!python/object/apply:os.system ['touch /tmp/never']"])


# --- a folder dataset that shrank after prepare ran ------------------------------------------------------------------


def test_prepare_on_a_folder_too_small_to_split_ends_with_one_line(tmp_path, monkeypatch):
    """What validate would have said, said by prepare itself should it still meet the folder."""
    values = folder_dataset(classes=3, per_class=2)(tmp_path, monkeypatch)
    (tmp_path / "params.yaml").write_text(params_text(values))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        stages.prepare.main()
    message = one_line(str(stopped.value.code))
    # fractions (0.5, 0.25, 0.25): 4 images per class give train 2, val 1, test 1; 3 leave one split empty
    assert message.startswith("prepare: data.dataset: class 'class0' has 2 samples"), message
    assert "give each class at least 4 images, or change data.fractions" in message, message


def test_prepare_on_a_folder_that_is_gone_ends_with_one_line(tmp_path, monkeypatch):
    values = folder_dataset()(tmp_path, monkeypatch)
    (tmp_path / "params.yaml").write_text(params_text(values))
    shutil.rmtree(tmp_path / "images")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        stages.prepare.main()
    message = one_line(str(stopped.value.code))
    assert "data.dataset: image folder" in message and "does not exist" in message, message


def prepared(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted((root / "data" / "prepared").rglob("*"))
            if path.is_file()}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("dvc") is None or shutil.which("git") is None, reason="dvc and git are needed")
def test_images_deleted_from_a_folder_dataset_stop_dvc_repro_at_validate_and_keep_the_prepared_data(tmp_path):
    """The images are validate's concern too (its link data/source is its output): deleting them reruns validate,
    which refuses the folder before DVC deletes prepare's output to rerun it."""
    images = image_folder(tmp_path / "images", classes=3, per_class=12)  # test: 9 images, 18 pairs for 10 folds
    root = copy_study(tmp_path / "study", COPIED)
    (root / "params.yaml").write_text(params_text({"data.dataset": f"folder:{images}", "data.image_size": 8,
                                                   "train.batch_size": 4}))
    done = dvc(root, "repro", "prepare")
    assert done.returncode == 0, done.stdout + done.stderr
    before = prepared(root)
    for path in sorted((images / "class0").iterdir())[2:]:
        path.unlink()

    done = dvc(root, "repro", "prepare")
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Running stage 'validate'" in output, output
    assert "Running stage 'prepare'" not in output and "Traceback" not in output, output
    assert "data.dataset: class 'class0' has 2 samples" in output and "at least 4 images" in output, output
    assert prepared(root) == before


# --- a report folder that refuses writes -----------------------------------------------------------------------------


def test_the_report_stage_on_a_read_only_reports_folder_ends_with_one_line_before_its_analysis(tmp_path, monkeypatch):
    (tmp_path / "params.yaml").write_text(params_text({}))
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "report.md").write_text(PREVIOUS_REPORT)
    monkeypatch.chdir(tmp_path)
    with read_only(tmp_path / "reports"):
        with pytest.raises(SystemExit) as stopped:
            stages.report.main()  # no results exist: the stage must stop before it reads any
    message = one_line(str(stopped.value.code))
    assert message.startswith("report: reports/ is on a read-only file system") or "chmod u+w reports" in message
    assert "run `dvc repro report` again" in message, message
    assert [path.name for path in (tmp_path / "reports").iterdir()] == ["report.md"]
    assert (tmp_path / "reports" / "report.md").read_text() == PREVIOUS_REPORT


def test_a_report_written_into_a_read_only_folder_raises_one_message_and_writes_nothing(tmp_path):
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    (out_dir / "report.md").write_text(PREVIOUS_REPORT)
    with read_only(out_dir):
        with pytest.raises(writer.UnwritableReportFolder) as refused:
            writer.write_report(None, None, {}, {}, out_dir)  # refused before it writes a figure
    assert str(out_dir) in str(refused.value) and "then run `dvc repro report` again" in str(refused.value)
    assert [path.name for path in out_dir.iterdir()] == ["report.md"]


# --- a packed worker ended by a signal leaves no semaphore behind ----------------------------------------------------


WORKER_ENDED_BY_SIGTERM = """
import multiprocessing, multiprocessing.resource_tracker, os, signal

def packed_worker():
    from tqdm.auto import tqdm  # what training shows progress with: it makes a named semaphore for its lock
    tqdm(total=1, disable=True).close()
    from study.interruptions import end_by
    end_by(signal.SIGTERM)

if __name__ == "__main__":
    multiprocessing.resource_tracker.ensure_running()  # as study.packing.packed starts it, shared with its workers
    worker = multiprocessing.get_context("spawn").Process(target=packed_worker)
    worker.start()
    worker.join()
    print(worker.exitcode)
"""


def test_a_worker_ended_by_a_signal_releases_its_semaphores_so_the_tracker_warns_of_none(tmp_path):
    (tmp_path / "stage.py").write_text(WORKER_ENDED_BY_SIGTERM)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "stage.py"], cwd=tmp_path, env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "-15", done.stdout + done.stderr  # still ended by its signal, as its stage reads
    assert "leaked semaphore" not in done.stderr and "resource_tracker" not in done.stderr, done.stderr
