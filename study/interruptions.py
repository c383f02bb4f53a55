"""Interruptions: Ctrl-C, SIGTERM, SIGHUP, or the process that started this one gone (DVC killed, or a packed worker's
stage). Not a crash: the process fails its running trial as interrupted, winds down once, and ends with one line
saying what it kept and how to resume, and the exit status of the signal (`interruptible`, `ends_as_interrupted`)."""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import multiprocessing.util
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import optuna


# How often a process looks for the process that started it; how long a process whose parent is gone may take to
# wind down before it is ended outright.
PARENT_POLL_SECONDS, WIND_DOWN_SECONDS = 0.5, 30
INTERRUPTING_SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM",
           signal.SIGHUP: "stopped by SIGHUP (its terminal closed)"}


class Interrupted(KeyboardInterrupt):
    """The process was interrupted: Ctrl-C, SIGTERM or SIGHUP, or the process that started it is gone. `cause` says
    which in words, `signum` gives the exit status (128 + signum: 130 for Ctrl-C), `kept` what the work kept."""

    def __init__(self, cause: str, signum: int):
        super().__init__(cause)
        self.cause, self.signum, self.kept = cause, signum, ""


@contextlib.contextmanager
def interruptible(parent: int | None = None, parent_name: str = "the process that started it") -> Iterator[None]:
    """Within the block, SIGINT (Ctrl-C), SIGTERM and SIGHUP raise `Interrupted` in the main thread, once it has left
    any storage write or import (see _UNINTERRUPTIBLE_CODE), and only once: later ones are ignored while the process
    winds down (its trial failed, its packed workers stopped, its tables written), which a second Ctrl-C must not cut
    short. A SIGINT or SIGHUP ignored when the block starts (a background job's, nohup's)
    stays ignored. With `parent`, the end of that process (DVC killed by kill -9 or SIGTERM, a packed worker's stage
    gone) interrupts this one as SIGTERM would, and ends it outright if it has not wound down WIND_DOWN_SECONDS later.
    The previous handlers are back after the block (a no-op outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"signum": None, "cause": None, "deferred": False}

    def interrupt(signum, frame):
        if state["signum"] is not None:
            return  # winding down already
        if _must_finish(frame):  # raised there, it would tear a journal line, or abort the process in an import
            if not state["deferred"]:
                state["deferred"] = True
                threading.Thread(target=_interrupt_again, args=(signum, state), daemon=True).start()
            return
        state["signum"] = signum
        raise Interrupted(state["cause"] or INTERRUPTING_SIGNALS[signum], signum)

    previous = {signum: signal.getsignal(signum) for signum in INTERRUPTING_SIGNALS}
    handled = [signum for signum in INTERRUPTING_SIGNALS if signum == signal.SIGTERM or previous[signum] != signal.SIG_IGN]
    for signum in handled:
        signal.signal(signum, interrupt)
    stop = threading.Event()
    if parent is not None:
        threading.Thread(target=_interrupt_when_gone, args=(parent, parent_name, state, stop), daemon=True).start()
    try:
        yield
    finally:
        stop.set()
        for signum in handled:
            signal.signal(signum, signal.SIG_DFL if previous[signum] is None else previous[signum])


# Code that an interruption must not cut short: Optuna's storages (a journal line and its lock, a database session),
# this project's own storage and result files, each written whole; and imports. Torch imports torch._dynamo when the
# first optimiser is built, through triton's C++ bindings: an exception raised in that import cannot pass those
# frames, and the process aborts with a C++ traceback instead of winding down.
_UNINTERRUPTIBLE_CODE = (str(Path(optuna.storages.__file__).parent), str(Path(__file__).with_name("storage.py")),
                         str(Path(__file__).with_name("results.py")), "<frozen importlib._bootstrap")
DEFER_SECONDS = 0.05


def _must_finish(frame) -> bool:
    """Whether the main thread, at `frame`, is inside code an interruption must not cut (see _UNINTERRUPTIBLE_CODE)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_UNINTERRUPTIBLE_CODE):
            return True
        frame = frame.f_back
    return False


def _interrupt_again(signum: int, state: dict) -> None:
    """Deliver a deferred interruption to the main thread again in a moment, once it may have left that code."""
    time.sleep(DEFER_SECONDS)
    state["deferred"] = False
    _thread.interrupt_main(signum)


def _interrupt_when_gone(parent: int, parent_name: str, state: dict, stop: threading.Event) -> None:
    """Interrupt the main thread, as SIGTERM, once `parent` is no longer this process's parent (it died: this process
    was handed to init or a subreaper); end the process if it has not wound down WIND_DOWN_SECONDS later."""
    while os.getppid() == parent:
        if stop.wait(PARENT_POLL_SECONDS):
            return
    state["cause"] = f"{parent_name} (pid {parent}) is gone"
    _thread.interrupt_main(signal.SIGTERM)
    if not stop.wait(WIND_DOWN_SECONDS):
        os._exit(128 + signal.SIGTERM)


# Linux's prctl option that signals a process when the one that started it dies.
PR_SET_PDEATHSIG = 1


def ends_with_this_process() -> Callable[[], None]:
    """A `preexec_fn` for a child process (e.g. `dvc repro`) that must not outlive this one: Linux sends the child
    SIGTERM when this process dies, by any signal, kill -9 included, so that a killed driver never leaves DVC and the
    stage it runs (which ends with DVC) training on unseen. Elsewhere, without prctl, a no-op."""
    parent = os.getpid()

    def end_with_parent() -> None:  # runs in the child, between fork and exec
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return end_with_parent


def _say(line: str) -> None:
    """Print `line` to stderr, if stderr still leads anywhere (a killed DVC may have taken its pipe along)."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def how_to_resume() -> str:
    """What a user runs to resume this process's work: `dvc repro` for a stage DVC started, else its own command."""
    if "DVC_STAGE" in os.environ:  # DVC sets it for every stage's command
        return "run dvc repro again to resume"
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    command = ["python", "-m", spec.name] if spec is not None else [Path(sys.argv[0]).name]
    return f"run `{shlex.join(command + sys.argv[1:])}` again to resume"


@contextlib.contextmanager
def ends_as_interrupted() -> Iterator[None]:
    """A stage (or worker) interrupted (see `interruptible`) ends with one line, what it kept (`Interrupted.kept`, set
    on the way out by the code that knows) and how to resume, and the exit status of the signal, 130 for Ctrl-C, not a
    traceback. A stage that DVC started ends the same way when DVC itself is killed, instead of training on unseen."""
    parent = os.getppid() if "DVC_STAGE" in os.environ else None
    with interruptible(parent, "dvc"):
        try:
            yield
        except Interrupted as interruption:
            _say(f"{interruption.cause}: {interruption.kept or 'every finished trial is kept'}; {how_to_resume()}")
            raise SystemExit(128 + interruption.signum) from None


def end_by(signum: int) -> None:
    """End this process by `signum` at its default action, as an uninterrupted signal would have: its exit status
    says which signal stopped it (a packed worker's stage names it). What multiprocessing made here is released first,
    as an exit would: tqdm's lock is a named semaphore, and one left behind has multiprocessing's resource tracker
    warn of leaked semaphores once the stage ends, after the stage's own last line."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    multiprocessing.util._run_finalizers(0)  # what an exit runs first: each semaphore unlinked and unregistered
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached: the signal's default action ends the process
