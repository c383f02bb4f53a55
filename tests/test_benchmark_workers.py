"""`study worker --cells`: workers on one database serve every unfinished cell of a benchmark, not one study's, under
the same-study check; one of two workers killed mid-trial costs its trial only, and the benchmark's own stages then
find the searches done."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from study.benchmark.pipelines import write_benchmark
from study.benchmark.plan import load_plan
from study.search import trial_status
from test_benchmark import COPIED, declaration, dvc_study
from test_faults import postgres_server

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")]

# Two cells of different sources, each a whole tiny study whose search trials take about a second on one thread.
TWO_CELLS = """
title: Two cells served by workers
preset: default
set: {{data.seeds: null, model.name: mlp, model.embedding_size: 16, train.epochs: 8, train.eval_every: 20,
      train.device: cpu, train.threads: 1, search.n_trials: 6, search.storage: "{storage}",
      search.heartbeat_seconds: 1, runs.seeds: [0, 1], runs.methods: [fixed_adacos], analysis.n_bootstrap: 100}}
tuners:
  random: {{search.sampler: random}}
configurations:
  - name: digits-closed
    dataset: digits
    train_classes: 10
    set: {{data.protocol: closed, data.fractions: [0.6, 0.2, 0.2], search.losses: [arcface]}}
  - name: glyphs-open
    dataset: "glyphs:{{total}}:8"
    train_classes: 6
    set: {{train.batch_size: 16, search.losses: [arcface]}}
"""


def worker(root: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "study.cli", "worker", "--cells", "bench", "--serve", "search",
                             "--threads", "1"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def searches(storage: str) -> dict[str, list]:
    """Every search study in the database with its trials."""
    return {summary.study_name: optuna.load_study(study_name=summary.study_name, storage=storage).get_trials()
            for summary in optuna.get_all_study_summaries(storage) if summary.user_attrs.get("kind") == "search"}


def test_two_workers_serve_every_cell_on_one_database_and_a_killed_one_costs_its_trial_only(tmp_path, monkeypatch):
    with postgres_server() as server:
        if server is None:
            pytest.skip("needs Debian's postgresql and psycopg: the shared database of workers on many machines")
        storage = server[0]
        root = dvc_study(tmp_path / "repo", COPIED)
        monkeypatch.chdir(root)
        plan = load_plan(declaration(tmp_path, TWO_CELLS.format(storage=storage)))
        write_benchmark(plan, "bench", "reports/bench", log=lambda message: None)
        env = {**os.environ, "PYTHONPATH": str(root)}
        for cell in ("digits-closed", "glyphs-open"):  # a worker needs each cell's prepared data, as on any machine
            subprocess.run([sys.executable, "-m", "dvc", "repro", f"{cell}/dvc.yaml:prepare"], cwd=root / "bench",
                           env=env, check=True, capture_output=True)

        first, second = worker(root), worker(root)
        deadline = time.monotonic() + 300
        victim = None
        while victim is None and time.monotonic() < deadline:  # the second worker's first trial, mid-training
            for trials in searches(storage).values():
                victim = next((t for t in trials if t.state == TrialState.RUNNING and "seed" in t.user_attrs
                               and t.user_attrs.get("worker", "").endswith(f":{second.pid}")), victim)
            time.sleep(0.1)
        assert victim is not None, "the second worker never started a trial"
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
        output, _ = first.communicate(timeout=600)
        assert first.returncode == 0, output
        assert "cell digits-closed: serving" in output and "cell glyphs-open: serving" in output, output

        studies = searches(storage)
        assert len(studies) == 2  # one search per cell, each cell's own (its identity: data and params)
        for name, trials in studies.items():
            assert sum(t.state == TrialState.COMPLETE for t in trials) == 6, name
            assert not any(t.state == TrialState.RUNNING for t in trials), name
        killed = next(t for trials in studies.values() for t in trials if t.number == victim.number
                      and t.user_attrs.get("seed") == victim.user_attrs["seed"] and t.state == TrialState.FAIL)
        assert trial_status(killed)[0] == "interrupted"  # found dead by its pid or by its silent heartbeat
        retried = [t for trials in studies.values() for t in trials
                   if t.system_attrs.get("failed_trial") == victim.number and t.params == victim.params]
        assert [t.state for t in retried] == [TrialState.COMPLETE]

        # The benchmark's own search stages find every search done: no trial is added.
        before = {name: len(trials) for name, trials in studies.items()}
        for cell in ("digits-closed", "glyphs-open"):
            subprocess.run([sys.executable, "-m", "dvc", "repro", f"{cell}/dvc.yaml:search@arcface"],
                           cwd=root / "bench", env=env, check=True, capture_output=True)
        assert {name: len(trials) for name, trials in searches(storage).items()} == before
