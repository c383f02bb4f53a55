"""The study's DVC stages, each run in a process of its own: `python -m stages.<name>`."""

import gc


def begin() -> None:
    """What each stage's main() does first: the objects its imports made (millions: torch's modules, pandas',
    optuna's) are frozen out of the reach of Python's cyclic garbage collector, which would walk them all again on each
    of its full passes and once more as the process ends (1-2 s of a short stage's process on a 2-core CPU, a fifth of
    it). They live as long as the process in any case; what the stage makes from here on is collected as before.

    Once a process: where a test runs several stages in one, the next stage's objects stay collectable (and the
    modules an earlier stage's training imported, torch._dynamo's triton among them, are not frozen, so that their
    bindings are freed at exit without a leak warning)."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
