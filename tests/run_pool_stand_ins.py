"""Stand-ins for a training, for tests/test_run_pool.py. In a module of their own that imports nothing of the study:
each process of the pool imports the module its function comes from, and the test module's imports (the study's
benchmark package, torch) would cost each of them seconds."""

import os
from pathlib import Path


def write_marker(folder: str, name: str) -> str:
    """Writes its file (as a run's summary) and says which process it ran in."""
    (Path(folder) / f"{name}.done").write_text(str(os.getpid()))
    return f"{name} in {os.getpid()}"


def fail_on_b(folder: str, name: str) -> str:
    """Fails for run "b" as a run whose data is missing would."""
    if name == "b":
        raise FileNotFoundError("the emoji font is missing: install fonts-noto-color-emoji")
    return write_marker(folder, name)
