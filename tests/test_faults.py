"""Faults: kill -9 of the search at random moments (some mid-write), of the runs stage, and of one of two workers
sharing a database. Nothing finished is lost, no trial is trained twice, the budget is met exactly, nothing hangs."""

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest

import study.workers as workers
from study.config import load_params
from study.presets import write_params
from study.results import JOURNAL, prepared_dir, runs_dir, search_dir
from study.search import open_study, run_search, study_name, trials_table
from study.sources import load_dataset
from study.splits import load_splits, save_splits, split_dataset
from study.storage import MAX_RETRIES, journal_storage, open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Every test here kills workers or stages mid-run and waits for the retries: minutes on 2 cores.
pytestmark = pytest.mark.slow

REPOSITORY = Path(__file__).resolve().parents[1]
# The repository first; a PYTHONPATH of the caller after it (e.g. a database driver installed aside).
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))}


def study_folder(root: Path, train: dict | None = None, runs_seeds: tuple[int, ...] = (0, 1, 2, 3), **search) -> Path:
    """A tiny study's folder: params.yaml (digits, a small MLP, one epoch, one thread, unless `train` says otherwise)
    and the prepared splits."""
    params = {"data": {"dataset": "digits", "protocol": "closed", "fractions": [0.6, 0.2, 0.2], "seeds": None},
              "model": {"name": "mlp", "embedding_size": 16},
              "train": {"epochs": 1, "batch_size": 128, "eval_every": 4, "device": "cpu", "lr": 0.01,
                        "objective": "accuracy", **(train or {})},
              "search": {"n_trials": 8, **search}, "runs": {"seeds": list(runs_seeds), "plateau_cap": 1}}
    write_params(load_params_from(params), root / "params.yaml", "fault test")
    sets = split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)
    save_splits(sets, root / prepared_dir(0), source="digits", protocol="closed", seed=0, fractions=(0.6, 0.2, 0.2))
    return root


def load_params_from(values):
    from study.config import StudyParams

    return StudyParams.from_dict(values)


def stage(root: Path, *arguments: str, harness: Path | None = None) -> subprocess.Popen:
    """A stage (or the `study` command) as its own process in `root`; with `harness`, journal writes go slowly."""
    command = [sys.executable, *( [str(REPOSITORY / "tests" / "faults" / "slow_journal.py"), str(harness)]
                                  if harness else ["-m"]), *arguments]
    return subprocess.Popen(command, cwd=root, env=ENVIRONMENT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.communicate()


def finish(process: subprocess.Popen, timeout: float = 240) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output
    return output


def started_training(process: subprocess.Popen) -> None:
    """Wait until the search process says where its study stands: it then starts (or resumes) its trials."""
    for line in process.stdout:
        if "trials finished" in line:
            return


def test_ten_kills_of_the_search_lose_nothing_and_leave_no_running_trial(tmp_path):
    root = study_folder(tmp_path, n_trials=24)
    rng = random.Random(0)
    marker = tmp_path / "writing"
    mid_write = 0
    for attempt in range(10):
        slow = attempt % 3 == 0  # then the kill lands while a journal append is half written, its lock held
        process = stage(root, "stages.search", "--loss", "arcface", harness=marker if slow else None)
        started_training(process)
        if slow:
            deadline = time.monotonic() + 60
            while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.2))
            mid_write += marker.exists()
        else:
            time.sleep(rng.uniform(0.0, 1.5))
        assert process.poll() is None, "the search finished before the kill; give it more trials"
        kill(process)
        marker.unlink(missing_ok=True)
    assert mid_write >= 2
    output = finish(stage(root, "stages.search", "--loss", "arcface"))

    trials = pd.read_csv(root / search_dir("arcface", 0) / "trials.csv")
    assert (trials["state"] == "COMPLETE").sum() == 24, output
    assert "RUNNING" not in set(trials["state"])
    complete = trials[trials["state"] == "COMPLETE"]
    assert complete["seed"].is_unique and not complete.duplicated(["s", "m"]).any()
    # Every interrupted trial was failed with its reason and retried at its own seed and values, up to
    # MAX_RETRIES times (a point whose trials keep dying is given up: its parameters may be what kills them).
    interrupted = trials[trials["status"] == "interrupted"]
    assert len(interrupted) >= 5 and interrupted["reason"].str.contains("worker died").all()
    for seed, attempts in interrupted.dropna(subset=["seed"]).groupby("seed"):
        assert len(attempts) <= MAX_RETRIES + 1 and len(attempts[["s", "m"]].drop_duplicates()) == 1
        finished = complete[complete["seed"] == seed]
        if len(attempts) <= MAX_RETRIES:
            assert len(finished) == 1 and (finished[["s", "m"]].to_numpy() == attempts[["s", "m"]].to_numpy()[:1]).all()
    assert not list((root / "results" / "trials").glob("*.lock"))
    # No torn line is left in the journal: every line is a whole record.
    assert (root / JOURNAL).read_bytes().endswith(b"\n")


def completed_seeds(storage) -> set[int]:
    """The seeds of the Fixed AdaCos runs the storage holds as done, read independently of the stage's bookkeeping."""
    names = [summary.study_name for summary in optuna.get_all_study_summaries(storage)
             if summary.study_name.startswith("final/fixed_adacos/")]
    return {trial.user_attrs["seed"] for name in names
            for trial in optuna.load_study(study_name=name, storage=storage).trials
            if trial.state == optuna.trial.TrialState.COMPLETE}


def test_a_killed_runs_stage_keeps_its_finished_seeds(tmp_path):
    # Seeds long enough (seconds each) that the kill lands before the last one ends, however loaded the machine.
    root = study_folder(tmp_path, train={"epochs": 40})
    process = stage(root, "stages.runs", "--method", "fixed_adacos")
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("fixed_adacos seed"):  # a seed trained; it is stored as done right after this line
            break
    storage = journal_storage(root / JOURNAL)
    while not completed_seeds(storage):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)  # the next seeds take seconds each, so some are still missing
    lines += process.communicate()[0].splitlines(keepends=True)  # everything printed up to the kill
    # What the storage holds as done at the kill, read independently of the stage's own bookkeeping.
    stored = completed_seeds(journal_storage(root / JOURNAL))
    missing = sorted({0, 1, 2, 3} - stored)
    assert stored and missing, "the kill landed before any seed was stored or after every one; give it longer runs"
    output = finish(stage(root, "stages.runs", "--method", "fixed_adacos"))
    trained_again = [line.split(":")[0] for line in output.splitlines() if line.startswith("fixed_adacos seed")]
    # Only the missing seeds; one a packed worker was training when the stage was killed is retried last.
    assert sorted(trained_again) == [f"fixed_adacos seed {seed}" for seed in missing], output
    runs = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "runs.csv")
    assert runs["seed"].tolist() == [0, 1, 2, 3] and (runs["status"] == "completed").all()
    assert all(Path(root / path).is_file() for path in runs["checkpoint"])
    # The seeds kept are the scores printed before the kill.
    before = {line.split(":")[0]: line for line in lines if line.startswith("fixed_adacos seed")}
    for seed in stored:
        printed = float(before[f"fixed_adacos seed {seed}"].split("val accuracy ")[1].split()[0])
        assert runs.loc[runs["seed"] == seed, "val_score"].item() == pytest.approx(printed, abs=5e-5)


@contextlib.contextmanager
def postgres_server():
    """A PostgreSQL server of Debian's package started for a test, as (its URL, a way to stop it), when it and psycopg
    are installed; else None."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    try:
        import psycopg  # noqa: F401
    except ImportError:
        versions = []
    as_root = os.geteuid() == 0
    if not versions or as_root and shutil.which("runuser") is None:
        yield None
        return
    # Its own folder outside pytest's (which only root may enter): PostgreSQL refuses to run as root.
    bin_dir, folder = versions[-1].parent, Path(tempfile.mkdtemp(prefix="study-postgres-"))
    as_postgres = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        shutil.chown(folder, "postgres")
    port = str(50000 + os.getpid() % 10000)
    run = lambda *command: subprocess.run([*as_postgres, *command], check=True, capture_output=True)  # noqa: E731
    run(str(bin_dir / "initdb"), "-D", str(folder / "data"), "-A", "trust", "-U", "study")
    run(str(bin_dir / "pg_ctl"), "-D", str(folder / "data"), "-o", f"-k {folder} -p {port} -c listen_addresses=''",
        "-l", str(folder / "log"), "-w", "start")
    stop = lambda: subprocess.run([*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(folder / "data"),  # noqa: E731
                                   "-m", "immediate", "stop"], capture_output=True)
    try:
        run(str(bin_dir / "createdb"), "-h", str(folder), "-p", port, "-U", "study", "studies")
        yield f"postgresql+psycopg://study@/studies?host={folder}&port={port}", stop
    finally:
        stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def database(tmp_path):
    """A PostgreSQL server started for the test (see `postgres_server`) when one is installed; else SQLite."""
    with postgres_server() as server:
        yield server[0] if server else f"sqlite:///{tmp_path / 'studies.db'}"


def test_a_killed_worker_sharing_a_database_has_its_trial_failed_and_retried(tmp_path, database, monkeypatch):
    root = study_folder(tmp_path, storage=database, heartbeat_seconds=1)
    params = load_params(str(root / "params.yaml"))
    sets = load_splits(root / prepared_dir(0))
    storage = open_storage(params.search, root / JOURNAL)
    study = open_study("arcface", params, storage, len(sets["train"]), seed=0)
    run_search(study, "arcface", params, sets, max_trials=1)
    # A second worker joins; it is killed while its trial trains.
    other = stage(root, "study.cli", "worker", "--serve", "search")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
                   if t.user_attrs.get("worker", "").endswith(f":{other.pid}") and "seed" in t.user_attrs]
        if running:
            break
        time.sleep(0.05)
    assert running, "the second worker never started a trial"
    kill(other)
    # Seen from here the dead worker is on another machine: only its stopped heartbeats can tell.
    monkeypatch.setattr(workers, "machine_id", lambda: "another machine")
    run_search(study, "arcface", params, sets)

    table = trials_table("arcface", [study], "accuracy")
    dead = table[table["optuna_trial"] == running[0].number].iloc[0]
    shown = table[["trial", "seed", "state", "status", "reason", "worker"]].to_string()
    assert dead["state"] == "FAIL" and dead["status"] == "interrupted" and "heartbeat" in dead["reason"], shown
    assert (table["state"] == "COMPLETE").sum() == 8 and "RUNNING" not in set(table["state"]), shown
    # The retry keeps the dead trial's place in the search (its `trial` slot) under a new Optuna number.
    retry = table[(table["seed"] == dead["seed"]) & (table["optuna_trial"] != dead["optuna_trial"])]
    assert (retry["trial"] == dead["trial"]).all()
    assert len(retry) == 1 and retry["state"].item() == "COMPLETE"
    assert retry["s"].item() == dead["s"] and retry["m"].item() == dead["m"]
    complete = table[table["state"] == "COMPLETE"]
    assert complete["seed"].is_unique
    assert study_name("arcface", params) == study.study_name


def test_a_budget_shared_by_racing_workers_is_met_exactly(tmp_path):
    """Trials reserve their place before they train: a trial that finds every place held trains nothing."""
    study = optuna.create_study(storage=journal_storage(tmp_path / "journal.log"))

    class RacedBudget(workers.TrialCount):
        checks = 0

        def may_start(self, trials):
            allowed = super().may_start(trials)
            self.checks += 1
            if self.checks == 3:  # another worker starts a trial between this check and this worker's next trial
                study.ask()
            return allowed

    trained = []
    workers.serve(study, lambda trial: trained.append(trial.number) or 0.0,
                  RacedBudget(3, (optuna.trial.TrialState.COMPLETE,)), max_trials=3)
    states = {t.number: (t.state.name, t.user_attrs.get("status")) for t in study.get_trials()}
    # Trial 3 found places held by trials 0 and 1 (finished) and 2 (the other worker's, running): the budget of 3.
    assert trained == [0, 1]
    assert states[2] == ("RUNNING", None) and states[3] == ("FAIL", workers.NOT_RUN)


def test_a_worker_that_finds_the_last_queued_seed_taken_trains_nothing_and_says_so(tmp_path, capsys):
    """Final runs: a worker sees a queued seed, another takes it before this worker's next trial begins; Optuna then
    makes a fresh trial with no seed, which must train nothing (seen once: a packed worker's KeyError('seed'))."""
    from study.runs import SeedQueue

    study = optuna.create_study(storage=journal_storage(tmp_path / "journal.log"))
    for seed in (0, 1):
        study.enqueue_trial({}, user_attrs={"seed": seed})

    class RacedQueue(SeedQueue):
        checks = 0

        def may_start(self, trials):
            allowed = super().may_start(trials)
            self.checks += 1
            if self.checks == 2:  # another worker takes seed 1, the last queued one, and is still training it
                study.ask()
            return allowed

    trained = []
    count = workers.serve(study, lambda trial: trained.append(trial.user_attrs["seed"]) or 0.0, RacedQueue([0, 1]),
                          max_trials=2, poll_seconds=0.01, label="fixed_adacos, split 0")
    assert count == 1  # what this worker trained: the trial that found no seed trained nothing
    states = {t.number: (t.state.name, t.user_attrs.get("seed"), t.user_attrs.get("status")) for t in study.get_trials()}
    assert trained == [0]
    assert states[1] == ("RUNNING", 1, None)  # the other worker's
    assert states[2] == ("FAIL", None, workers.NOT_RUN)
    said = capsys.readouterr()
    assert "fixed_adacos, split 0: trial 2 trains nothing: no queued seed was left" in said.out
    assert "Traceback" not in said.out + said.err


def test_a_trial_whose_worker_was_killed_while_naming_itself_is_retired_after_the_orphan_wait(tmp_path, monkeypatch):
    """The identity is written one attribute at a time: a kill between them leaves a half-named trial."""
    study = optuna.create_study(storage=journal_storage(tmp_path / "journal.log"))
    trial = study.ask()
    trial.set_user_attr("worker", "host:1")
    trial.set_user_attr("worker_machine", workers.machine_id())  # killed before worker_process was written
    half_named = study.get_trials(deepcopy=False)[0]
    assert not workers.has_died(half_named)  # it may be a live worker, still naming itself
    started = half_named.datetime_start.timestamp()
    monkeypatch.setattr(workers.time, "time", lambda: started + workers.ORPHAN_SECONDS + 1)
    assert workers.has_died(half_named)
    # A whole name of a live process (this one) is not taken for a dead worker, however old its trial.
    for key, value in workers.this_process().items():
        trial.set_user_attr(key, value)
    assert not workers.has_died(study.get_trials(deepcopy=False)[0])
