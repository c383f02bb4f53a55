"""Storage faults end cleanly: a read-only trials folder, a full disk and a lost database each end a stage with one
message naming the path or URL and the fix (no traceback), the read-only folder caught by the validate stage before
DVC deletes any output; a journal append that fails is cut back, and a torn journal is never written empty."""

import builtins
import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest

import stages.validate
from study.results import JOURNAL, TRIALS_DIR, search_dir
from study.storage import journal_storage
from tests.test_faults import ENVIRONMENT, postgres_server, study_folder

AS_ROOT = os.geteuid() == 0


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` made read-only: a read-only bind mount as root (who may write anywhere else), else its mode."""
    folder.mkdir(parents=True, exist_ok=True)
    if not AS_ROOT:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder), str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@contextlib.contextmanager
def full_disk(folder: Path, free_bytes: int = 4096, before_filling=None):
    """`folder` on a small tmpfs filled up to `free_bytes` (after `before_filling()`); yields a function that frees
    it."""
    if not AS_ROOT or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    folder.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    filler = folder / "filler"
    try:
        if before_filling:
            before_filling()
        with open(filler, "wb") as handle:
            with contextlib.suppress(OSError):
                handle.write(b"\0" * (shutil.disk_usage(folder).free - free_bytes))
        yield lambda: filler.unlink()
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def run(root: Path, *arguments: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", *arguments], cwd=root, env=ENVIRONMENT, capture_output=True,
                          text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def whole_lines(journal: Path) -> bool:
    data = journal.read_bytes()
    return data.endswith(b"\n") and all(json.loads(line) for line in data.splitlines())


def test_validate_refuses_a_read_only_trials_folder_before_any_stage_deletes_an_output(tmp_path, monkeypatch):
    root = study_folder(tmp_path)
    monkeypatch.chdir(root)
    with read_only(root / TRIALS_DIR):
        with pytest.raises(SystemExit) as stopped:
            stages.validate.main()
    message = str(stopped.value.code)
    assert "search.storage" in message and str(TRIALS_DIR) in message, message
    assert ("read-only" in message and "remount it writable" in message) or "chmod" in message, message


@pytest.mark.slow
@pytest.mark.parametrize("stage", [("stages.search", "--loss", "arcface"), ("stages.runs", "--method", "softmax")],
                         ids=["search", "runs"])
def test_a_stage_on_a_read_only_trials_folder_ends_with_one_message(tmp_path, stage):
    root = study_folder(tmp_path)
    with read_only(root / TRIALS_DIR):
        code, output = run(root, *stage)
    assert code != 0 and "Traceback" not in output, output
    assert str(TRIALS_DIR) in output.splitlines()[-1] and "run the stage again" in output, output


@pytest.mark.slow
def test_a_full_disk_ends_the_search_with_one_message_and_loses_nothing(tmp_path):
    root = study_folder(tmp_path, train={"parallel": 1}, n_trials=4)
    with full_disk(root / TRIALS_DIR) as free_it:
        code, output = run(root, "stages.search", "--loss", "arcface")
        assert code != 0 and "Traceback" not in output and "Should not reach" not in output, output
        assert f"no space left on the disk of {TRIALS_DIR}" in output and "df -h" in output, output
        assert not (root / JOURNAL).exists() or whole_lines(root / JOURNAL)
        free_it()
        code, output = run(root, "stages.search", "--loss", "arcface")
        assert code == 0, output
        assert not list((root / TRIALS_DIR).glob("*.torn-*"))
    trials = pd.read_csv(root / search_dir("arcface", 0) / "trials.csv")
    assert (trials["state"] == "COMPLETE").sum() == 4 and "RUNNING" not in set(trials["state"])


@pytest.mark.slow
def test_a_torn_journal_on_a_full_disk_is_left_as_it_was_not_cut_into_an_empty_side_file(tmp_path):
    root = study_folder(tmp_path)
    torn = b'{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [2]}\n{"op_code": 5, "wor'
    with full_disk(root / TRIALS_DIR, free_bytes=0, before_filling=lambda: (root / JOURNAL).write_bytes(torn)):
        before = (root / JOURNAL).read_bytes()
        assert before == torn
        code, output = run(root, "stages.search", "--loss", "arcface")
        assert code != 0 and "Traceback" not in output and "no space left" in output, output
        assert (root / JOURNAL).read_bytes() == before
        assert not [path for path in (root / TRIALS_DIR).iterdir() if ".torn" in path.name]


def test_a_journal_append_that_fails_midway_is_cut_back_to_its_last_whole_line(tmp_path, monkeypatch):
    journal = tmp_path / "journal.log"
    study = optuna.create_study(storage=journal_storage(journal))
    study.set_user_attr("before", 1)
    size = journal.stat().st_size
    real_open = builtins.open

    class HalfWritten:
        """A file whose write stores half the bytes, then finds the disk full (a short write, then ENOSPC)."""

        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            self.handle.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    def full_once(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if str(file) == str(journal) and "a" in mode:
            monkeypatch.setattr(builtins, "open", real_open)
            return HalfWritten(handle)
        return handle

    monkeypatch.setattr(builtins, "open", full_once)
    with pytest.raises(OSError):
        study.set_user_attr("lost", 2)
    assert journal.stat().st_size == size  # nothing torn left behind for the next writer to append after
    study.set_user_attr("after", 3)
    reopened = optuna.load_study(study_name=study.study_name, storage=journal_storage(journal))
    assert reopened.user_attrs == {"before": 1, "after": 3} and whole_lines(journal)


@pytest.mark.filterwarnings("ignore:.*cut off mid-write")
def test_a_line_torn_by_a_writer_killed_mid_run_is_cut_before_the_next_append(tmp_path):
    """A packed worker killed while appending tears the journal's last line; the stage, whose storage was opened
    (and repaired) long before, appends next."""
    journal = tmp_path / "journal.log"
    study = optuna.create_study(storage=journal_storage(journal))
    study.set_user_attr("before", 1)
    with open(journal, "ab") as handle:
        handle.write(b'{"op_code": 5, "worker_id": "killed", "study_id": 0, "user_a')
    study.set_user_attr("after", 2)
    reopened = optuna.load_study(study_name=study.study_name, storage=journal_storage(journal))
    assert reopened.user_attrs == {"before": 1, "after": 2} and whole_lines(journal)
    assert [path.read_bytes() for path in tmp_path.glob("journal.log.torn-*")] == [
        b'{"op_code": 5, "worker_id": "killed", "study_id": 0, "user_a']


@pytest.fixture
def postgres():
    """A PostgreSQL server of Debian's package for the test (psycopg and the server needed), and a way to stop it."""
    pytest.importorskip("psycopg")
    with postgres_server() as server:
        if server is None:
            pytest.skip("PostgreSQL's server is not installed")
        yield server


@pytest.mark.slow
def test_a_database_lost_mid_search_ends_it_with_one_message_naming_the_url(tmp_path, postgres):
    url, stop = postgres
    root = study_folder(tmp_path, storage=url, n_trials=50)
    process = subprocess.Popen([sys.executable, "-m", "stages.search", "--loss", "arcface"], cwd=root,
                               env=ENVIRONMENT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        if "trials finished" in line:
            break
    time.sleep(2)
    stop()
    output = process.communicate(timeout=120)[0]
    assert process.returncode != 0 and "Traceback" not in output and "exceeding max length" not in output, output
    last = output.strip().splitlines()[-1]
    assert "lost the study database postgresql+psycopg://study@/studies" in last and "run the stage again" in last
