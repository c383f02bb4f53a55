"""study.benchmark.run_pool: a check's runs trained in fresh processes, only the missing ones, each line printed."""

import os
from pathlib import Path

import pytest

from run_pool_stand_ins import fail_on_b, write_marker
from study.benchmark.run_pool import train_missing_runs


def test_only_the_missing_runs_train_each_in_another_process(tmp_path, capsys):
    (tmp_path / "a.done").write_text("from an earlier call")
    runs = [(str(tmp_path), name) for name in ("a", "b", "c")]
    train_missing_runs(write_marker, runs, lambda run: (Path(run[0]) / f"{run[1]}.done").exists(), workers=2)
    assert (tmp_path / "a.done").read_text() == "from an earlier call"  # done before: not trained again
    pids = {int((tmp_path / f"{name}.done").read_text()) for name in ("b", "c")}
    assert os.getpid() not in pids
    out = capsys.readouterr().out
    assert out.startswith("1 of 3 runs done; training 2 with 2 process(es)")
    assert sorted(line.split("] ")[1].split(" in ")[0] for line in out.splitlines()[1:]) == ["b", "c"]


def test_a_failing_run_is_named_and_stops_no_other_run(tmp_path, capsys):
    runs = [(str(tmp_path), name) for name in ("a", "b", "c")]
    with pytest.raises(RuntimeError, match="1 of 3 runs failed") as error:
        train_missing_runs(fail_on_b, runs, lambda run: (Path(run[0]) / f"{run[1]}.done").exists(), workers=1)
    assert "run the same command again" in str(error.value)
    assert (tmp_path / "a.done").exists() and (tmp_path / "c.done").exists() and not (tmp_path / "b.done").exists()
    out = capsys.readouterr().out
    assert "FAILED" in out and "FileNotFoundError: the emoji font is missing" in out
