"""Run a stage (`python tests/faults/slow_journal.py MARKER stages.search --loss arcface`) with every journal append
written in two halves, half a second apart, with MARKER created in between: a kill then lands mid-write,
holding the journal's lock and leaving a torn line, as a kill at the worst moment would."""

import os
import runpy
import sys
import time
from pathlib import Path

from optuna.storages.journal._file import get_lock_file

from study.storage import JournalFile

marker, module, *arguments = sys.argv[1:]


def append_in_two_halves(self, logs):
    data = ("\n".join(__import__("json").dumps(log, separators=(",", ":")) for log in logs) + "\n").encode()
    with get_lock_file(self._lock):
        with open(self._file_path, "ab") as handle:
            handle.write(data[: len(data) // 2])
            handle.flush()
            os.fsync(handle.fileno())
            Path(marker).touch()
            time.sleep(0.5)
            handle.write(data[len(data) // 2:])
            handle.flush()
        Path(marker).unlink(missing_ok=True)


JournalFile.append_logs = append_in_two_halves
sys.argv = [module, *arguments]
runpy.run_module(module, run_name="__main__")
