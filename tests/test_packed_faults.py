"""A packed worker (one of the train.parallel processes a stage starts beside itself) killed by SIGKILL or SIGTERM
mid-trial, in a search and in final runs: it costs its own trial only, which is retried at once. The stage ends with
the exact budget, no RUNNING trial, and within one trial's time plus a few seconds of the kill, never waiting on the
dead worker (a zombie until its stage reaps it, whose start time in /proc still reads as alive)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from optuna.trial import TrialState

from study.results import JOURNAL, runs_dir, search_dir
from study.storage import journal_storage
from tests.test_faults import ENVIRONMENT, study_folder

# Long enough that a kill lands mid-training, short enough for CI: about a second per trial on one thread.
# Every test here stops packed workers mid-trial: about 20 s each on 2 cores.
pytestmark = pytest.mark.slow

TRAIN = {"epochs": 6, "parallel": 2, "threads": 1}
# What the stage may take beyond a trial's time to see the dead worker, retire its trial and retry it.
SLACK_SECONDS = 12
# Budget enough that the stage cannot finish alone before its packed worker starts a trial to stop: a worker joins
# once the stage has trained for WORKERS_JOIN_AFTER_SECONDS (3 s), then spawns and imports torch (about 5 s on a
# loaded 2-core machine); 20 trainings are about 20 s of the stage's own work (10 once finished before a worker).
BUDGET = 20
STAGES = {"search": ("stages.search", "--loss", "arcface"), "runs": ("stages.runs", "--method", "fixed_adacos")}


def start(root: Path, which: str) -> tuple[subprocess.Popen, Path]:
    log = root / f"{which}.log"
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, "-m", *STAGES[which]], cwd=root, env=ENVIRONMENT, stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    return process, log


def trials(root: Path):
    """Every trial of every study in the checkout's journal."""
    storage = journal_storage(root / JOURNAL)
    return [trial for study in storage.get_all_studies()
            for trial in storage.get_all_trials(study._study_id, deepcopy=False)]


def a_packed_workers_training_trial(root: Path, stage: subprocess.Popen, timeout: float = 120):
    """A trial a packed worker (a process other than the stage) is training, and that worker's pid. Its parameters
    are recorded too: a worker marks the trial running just before its objective suggests them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and stage.poll() is None:
        if (root / JOURNAL).exists():
            for trial in trials(root):
                worker = trial.user_attrs.get("worker", "")
                if (trial.state == TrialState.RUNNING and trial.user_attrs.get("status") == "running"
                        and "seed" in trial.user_attrs and trial.params and not worker.endswith(f":{stage.pid}")):
                    return trial, int(worker.rsplit(":", 1)[1])
        time.sleep(0.05)
    raise AssertionError("no packed worker started a trial")


@pytest.mark.parametrize("which", ["search", "runs"])
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_packed_worker_stopped_mid_trial_costs_only_its_trial(tmp_path, which, stop):
    root = study_folder(tmp_path, train=TRAIN, n_trials=BUDGET, runs_seeds=tuple(range(BUDGET)))
    stage, log = start(root, which)
    try:
        victim, pid = a_packed_workers_training_trial(root, stage)
        time.sleep(0.3)  # well inside its training
        os.kill(pid, stop)
        killed_at = time.time()
        stage.wait(timeout=120)
    finally:
        if stage.poll() is None:  # it hung on the dead worker: end it and its own workers
            os.killpg(stage.pid, signal.SIGKILL)
            stage.wait()
    ended_at = time.time()
    output = log.read_text()
    assert stage.returncode == 0, output
    assert f"packed worker 1 was stopped by {stop.name}" in output, output

    everything = trials(root)
    assert not any(trial.state == TrialState.RUNNING for trial in everything)
    dead = next(trial for trial in everything if trial.number == victim.number
                and trial.user_attrs.get("seed") == victim.user_attrs["seed"])
    # SIGKILL: found dead; SIGTERM: the worker winds down as interrupted and says so itself.
    reason = "worker died" if stop == signal.SIGKILL else "stopped by SIGTERM"
    assert dead.state == TrialState.FAIL and reason in dead.user_attrs["reason"], dead.user_attrs["reason"]
    retry = [trial for trial in everything if trial.system_attrs.get("failed_trial") == victim.number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE
    assert retry[0].user_attrs["seed"] == victim.user_attrs["seed"] and retry[0].params == victim.params
    # Seen at once: the retry starts once the stage's own trial in hand ends, and the stage ends with the last trial.
    longest = max((t.datetime_complete - t.datetime_start).total_seconds() for t in everything
                  if t.state == TrialState.COMPLETE)
    assert retry[0].datetime_start.timestamp() - killed_at < longest + SLACK_SECONDS, output
    assert ended_at - max(t.datetime_complete.timestamp() for t in everything if t.datetime_complete) < SLACK_SECONDS

    if which == "search":
        table = pd.read_csv(root / search_dir("arcface", 0) / "trials.csv")
        assert (table["state"] == "COMPLETE").sum() == BUDGET and "RUNNING" not in set(table["state"])
        assert table.loc[table["state"] == "COMPLETE", "seed"].is_unique
    else:
        runs = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "runs.csv")
        assert runs["seed"].tolist() == list(range(BUDGET)) and (runs["status"] == "completed").all()
        assert all((root / path).is_file() for path in runs["checkpoint"])


def test_a_stage_whose_dvc_is_killed_ends_within_seconds_keeping_its_finished_trials(tmp_path):
    """`kill -9` of dvc: the stage and its packed worker do not train on unseen (a rerun would race them)."""
    root = study_folder(tmp_path, train=TRAIN, n_trials=40)
    # A stand-in for dvc: a parent that starts the stage as DVC does (DVC_STAGE set) and is then killed outright.
    parent = subprocess.Popen(["bash", "-c", f"{sys.executable} -m {' '.join(STAGES['search'])} > search.log 2>&1 & "
                               "echo $!; wait"], cwd=root, env={**ENVIRONMENT, "DVC_STAGE": "search@arcface"},
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    stage = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 120
        # A trial finished by the packed worker: it has trained, and made what training makes (tqdm's semaphore).
        while time.monotonic() < deadline and not any(
                trial.state == TrialState.COMPLETE and trial.user_attrs.get("worker_role") == "packed worker 1"
                for trial in (trials(root) if (root / JOURNAL).exists() else [])):
            time.sleep(0.1)
        a_packed_workers_training_trial(root, parent)
        parent.kill()
        parent.wait()
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < 60 and Path(f"/proc/{stage}").exists() and not _zombie(stage):
            time.sleep(0.1)
        took = time.monotonic() - killed_at
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # whatever is left of the group
    output = (root / "search.log").read_text()
    assert took < 15, f"the stage trained on {took:.0f} s after its dvc was killed:\n{output}"
    assert "dvc (pid" in output and "is gone" in output and "kept" in output, output
    assert "leaked semaphore" not in output, output  # the packed worker, ended by SIGTERM, released its semaphore
    everything = trials(root)
    finished = [trial for trial in everything if trial.state == TrialState.COMPLETE]
    assert 1 <= len(finished) < 40 and not any(trial.state == TrialState.RUNNING for trial in everything)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False
