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
def full_disk(folder: Path, free_bytes: int = 4096, before_filling=None, size: str = "256k"):
    """`folder` on a small tmpfs (of `size`) filled up to `free_bytes` (after `before_filling()`); yields a function
    that frees it."""
    if not AS_ROOT or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    folder.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]).returncode != 0:
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


def test_a_database_that_dies_while_a_worker_opens_it_ends_the_worker_with_one_line(tmp_path, monkeypatch):
    """Seen once in the full suite: a packed worker started as its database was stopped; Optuna's storage failed
    mid-connection with StorageInternalError (not the driver's error that a refused connection gives), which the
    worker printed as three tracebacks."""
    import sqlalchemy

    import study.workers as workers
    from study.config import load_params
    from study.storage import StorageFault

    root = study_folder(tmp_path)

    def dies_while_opened(search, journal):
        lost = sqlalchemy.exc.OperationalError("SELECT version_info", {}, Exception("server closed the connection"))
        raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from lost

    monkeypatch.setattr(workers, "open_storage", dies_while_opened)
    params = load_params(root / "params.yaml")
    with pytest.raises(StorageFault) as raised:
        workers.serve_study(params, root, [lambda *arguments, **options: None])
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and "server closed the connection" in message, message
    assert "run the stage again" in message


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
    socket = url.split("host=")[1].replace("&port=", ":")  # shown as its host alone: no user, database or query
    assert f"lost the study database postgresql+psycopg://***@{socket} " in last and "run the stage again" in last


# --- a full disk anywhere: one line naming the path that failed, and no partial file (issue 28) ------------------


@pytest.mark.parametrize("write", ["bytes", "csv", "checkpoint"])
def test_a_write_that_fails_leaves_no_temporary_file_and_names_its_path(tmp_path, monkeypatch, write):
    import torch

    from study.models import build_model
    from study.results import write_bytes, write_csv
    from study.storage import fault_message
    from study.training import RunResult, save_checkpoint

    target = tmp_path / "out" / {"bytes": "data.bin", "csv": "table.csv", "checkpoint": "seed0.pt"}[write]

    def full(descriptor):  # the disk fills as the file is synced (as on NFS, or past a quota)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as error:
        if write == "bytes":
            write_bytes(b"x" * 1000, target)
        elif write == "csv":
            write_csv(pd.DataFrame({"a": [1, 2]}), target)
        else:
            model = build_model("mlp", 8, (1, 8, 8))
            save_checkpoint(RunResult("completed", "", model=model, loss=torch.nn.Linear(2, 2)), target, loss="x")
    assert error.value.errno == errno.ENOSPC and error.value.filename == str(target)
    assert list(target.parent.iterdir()) == []  # no .tmp left behind, and nothing under the final name
    assert fault_message(error.value, "results/trials/journal.log").startswith(
        f"no space left on the disk of {target}: free space there (df -h {target.parent})")


@pytest.mark.slow
def test_a_full_disk_while_a_checkpoint_is_saved_ends_with_one_line_naming_it_and_no_partial_file(tmp_path):
    root = study_folder(tmp_path, train={"parallel": 1})
    store = root / TRIALS_DIR / "checkpoints"  # a disk of its own, full: the journal's has room
    with full_disk(store, free_bytes=0, size="16m") as free_it:  # room for the checkpoints, once freed
        code, output = run(root, "stages.runs", "--method", "softmax")
        assert code != 0 and "Traceback" not in output and "RuntimeError" not in output, output
        last = output.strip().splitlines()[-1]
        assert f"no space left on the disk of {store.relative_to(root)}/final/softmax/split0/seed" in last, output
        assert ".pt: free space there (df -h" in last and "run the stage again" in last, output
        assert [path.name for path in store.rglob("*") if path.is_file()] == ["filler"]
        free_it()
        code, output = run(root, "stages.runs", "--method", "softmax")
        assert code == 0, output
    assert not [path for path in (root / "results").rglob("*.tmp")]


@pytest.mark.slow
def test_a_full_disk_under_the_stage_outputs_names_that_disk_not_the_trials_one(tmp_path):
    root = study_folder(tmp_path, train={"parallel": 1}, n_trials=2)
    outputs = root / "results" / "search"  # full; results/trials, on another file system, has room
    with full_disk(outputs, free_bytes=0):
        code, output = run(root, "stages.search", "--loss", "arcface")
        assert code != 0 and "Traceback" not in output, output
        last = output.strip().splitlines()[-1]
        assert "no space left on the disk of results/search/arcface/split0/trials.csv" in last, output
        assert "df -h results/search/arcface/split0" in last and "results/trials" not in last, output
        assert [path.name for path in outputs.rglob("*") if path.is_file()] == ["filler"]


@pytest.mark.parametrize("url, module, package", [
    ("mysql://ann@127.0.0.1:1/study", "MySQLdb", "pip install mysqlclient"),
    ("mysql+pymysql://ann@127.0.0.1:1/study", "pymysql", "pip install pymysql"),
    ("postgresql://ann@127.0.0.1:1/study", "psycopg", "pip install -c constraints.txt -e \".[postgres]\""),
], ids=["mysql", "mysql+pymysql", "postgresql"])
def test_a_missing_database_driver_is_named_for_the_urls_own_dialect(monkeypatch, url, module, package):
    import importlib.util

    from study.config import StudyParams
    from study.storage import check_storage

    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    monkeypatch.setenv("STUDY_TEST_STORAGE", url)  # from the environment, where params' own check never sees it
    with pytest.raises(RuntimeError) as error:
        check_storage(StudyParams.from_dict({"search": {"storage": "env:STUDY_TEST_STORAGE"}}).search)
    message = str(error.value)
    assert f"driver {module}, which is not installed" in message and package in message, message
    assert ("postgres" in message) == url.startswith("postgresql"), message
