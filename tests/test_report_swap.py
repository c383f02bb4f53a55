"""The report's final swap killed at every step: each output (figures/, tables/, report.md, ...) is found whole, all
old or all new, never missing; the next run finishes the killed swap, so the report is then all new."""

import os
import signal
from pathlib import Path

import study.report.writer as writer

PARTS = writer.REPORT_PARTS


def write_parts(folder: Path, tag: str) -> None:
    """Every part of a report, each file saying `tag` (folders hold two files)."""
    for part in PARTS:
        path = folder / part
        if "." in part:
            path.write_text(tag)
        else:
            path.mkdir(parents=True)
            for name in ("a.csv", "b.csv"):
                (path / name).write_text(tag)


def tags(folder: Path) -> dict[str, set[str]]:
    """The tags each part holds: {'old'} or {'new'} when whole, empty when missing."""
    found = {}
    for part in PARTS:
        path = folder / part
        files = [path] if path.is_file() else sorted(path.glob("*")) if path.is_dir() else []
        found[part] = {file.read_text() for file in files} if path.is_file() or len(files) == 2 else set()
    return found


def report_run(out_dir: Path, monkeypatch, kill_at: int | None = None, fail: bool = False) -> int:
    """The report writer's run in a child process with a new report to write (or failing to write one), killed with
    SIGKILL right after its `kill_at`-th rename, as a kill at the worst moment would; returns the renames made."""
    steps = []

    def write_all(analysis, params, manifest, environment, staging, benchmark_numbers=None):
        if fail:
            raise RuntimeError("this run fails before its own swap")
        write_parts(staging, "new")
        return {}

    def counted(function):
        def step(*args, **kwargs):
            result = function(*args, **kwargs)
            steps.append(args)
            if len(steps) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return result
        return step

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: never returns into pytest
        try:
            monkeypatch.setattr(writer, "_write_all", write_all)
            for name in ("replace", "rename"):
                monkeypatch.setattr(os, name, counted(getattr(os, name)))
            monkeypatch.setattr(writer, "_exchange", counted(writer._exchange))
            try:
                writer.write_report(None, None, {}, {}, out_dir)
            except RuntimeError:
                pass
            os.write(write, str(len(steps)).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    made = os.read(read, 100).decode()
    os.close(read)
    return int(made) if made else -1


def test_a_report_killed_at_any_step_of_its_swap_leaves_every_output_whole(tmp_path, monkeypatch):
    whole_swap = tmp_path / "whole"
    whole_swap.mkdir()
    write_parts(whole_swap, "old")
    steps = report_run(whole_swap, monkeypatch)
    assert steps >= len(PARTS) and set().union(*tags(whole_swap).values()) == {"new"}

    for kill_at in range(1, steps + 1):
        out_dir = tmp_path / f"killed{kill_at}"
        out_dir.mkdir()
        write_parts(out_dir, "old")
        assert report_run(out_dir, monkeypatch, kill_at=kill_at) == -1  # it was killed
        found = tags(out_dir)
        assert all(tag in ({"old"}, {"new"}) for tag in found.values()), (kill_at, found)
        # The next run (here one whose own report fails) finishes the killed swap: the whole new report is in place.
        report_run(out_dir, monkeypatch, fail=True)
        assert all(tag == {"new"} for tag in tags(out_dir).values()), (kill_at, tags(out_dir))
        assert not (out_dir / writer.STAGING).exists()

