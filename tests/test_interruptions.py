"""Interruptions. A child that must not outlive the process that started it (`ends_with_this_process`): `study sweep`
and `study benchmark` start `dvc repro` with it, so that killing the driver, by any signal, stops the training it
started. And a signal that arrives inside an import interrupts once the import is whole."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

DRIVER = textwrap.dedent("""
    import subprocess, sys, time
    from study.interruptions import ends_with_this_process
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             preexec_fn={preexec})
    print(child.pid, flush=True)
    time.sleep(120)
""")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended and waiting to be reaped by whoever adopted it, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def child_after_killing_its_driver(preexec: str) -> int:
    """Start a driver whose child sleeps, kill the driver with SIGKILL, and return the child's pid."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(preexec=preexec)], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).parents[1])
    pid = int(driver.stdout.readline())
    assert alive(pid)
    driver.kill()
    driver.wait()
    return pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_child_started_with_it_ends_when_its_driver_is_killed_with_sigkill():
    pid = child_after_killing_its_driver("ends_with_this_process()")
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_without_it_the_child_trains_on():
    """The control: a plain child outlives its killed driver (what `dvc repro` did before)."""
    pid = child_after_killing_its_driver("None")
    try:
        time.sleep(1)
        assert alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


SLOW_IMPORT = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from study.interruptions import Interrupted, interruptible
    with interruptible():
        try:
            import slow_module  # SIGTERM arrives while its body runs
            for _ in range(200):
                time.sleep(0.01)
            print("not interrupted")
        except Interrupted as interrupted:
            module = sys.modules.get("slow_module")
            print(interrupted.cause, "after the import" if module and module.WHOLE else "inside the import")
""")


def test_a_signal_during_an_import_interrupts_once_the_import_is_whole(tmp_path):
    """Raised inside an import, the interruption would leave the module half-built, or abort the process where the
    import runs under C++ frames (torch's first optimiser imports torch._dynamo through triton's bindings)."""
    (tmp_path / "slow_module.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(0.3)\nWHOLE = True\n")
    done = subprocess.run([sys.executable, "-c", SLOW_IMPORT, str(tmp_path)], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], timeout=60)
    assert done.stdout.strip() == "stopped by SIGTERM after the import", done.stdout + done.stderr
