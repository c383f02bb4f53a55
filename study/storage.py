"""Where trials live: a journal file on one machine, or a database that workers on many machines share.

Both the searches and the final runs keep their trials here, outside DVC's outputs: DVC deletes a
stage's outputs before it runs, and workers write to the storage while and after a stage runs.
Credentials never come from params.yaml (which lands in git, dvc.lock and the experiment history):
a database URL there carries no password or other secret (study/database_url.py refuses one) — PGPASSWORD
or ~/.pgpass supply it — or params names an environment variable that holds the whole URL
(`search.storage: env:STUDY_STORAGE`); a driver's error is shown with every secret of the URL masked.

A storage that fails (read-only, full, a database gone) ends the stage with one message naming the
path or URL and the fix (`storage_faults`); a journal append that fails is cut back, never left torn, and a
file written whole (study/results.py's `write_bytes`) leaves no partial file. The validate stage reads the
journal's lines as the storage will (`journal_problem`): a corrupt line stops it before DVC deletes an output.
The retry of a dead worker's trial lives here too: Optuna's callback, used for the journal and the database; and the
move of a whole study to another name (`move_study`), by which a stage keeps the trials of changed settings aside
(study/study_names.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
import warnings
from pathlib import Path
from typing import Iterator

import optuna
from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.storages.journal._file import get_lock_file

from study.config import SearchConfig
from study.database_url import masked, missing_driver, readable_url, shown
from study.results import JOURNAL, write_bytes

# Optuna forcibly releases a journal lock older than this: the lock is held only while a few lines are
# appended, so a lock this old belongs to a killed process.
LOCK_GRACE_SECONDS = 10
# A database worker that has not beaten for GRACE_FACTOR heartbeats is dead: its trial is failed and retried.
GRACE_FACTOR = 3
# A trial whose worker died this often is not queued again (its parameters may be what kills the workers).
MAX_RETRIES = 3
_FAULT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


class StorageFault(RuntimeError):
    """The storage cannot be written or reached; the message names the path or URL and the fix."""


def storage_url(search: SearchConfig) -> str | None:
    """The database URL of `search.storage`, read from the environment for `env:NAME`; None for the journal."""
    location = search.storage
    if location is None or not location.startswith("env:"):
        return location
    name = location.removeprefix("env:")
    url = os.environ.get(name)
    if not url:
        raise RuntimeError(f"search.storage is {location}, but the environment variable {name} is not set; "
                           f"export {name}=postgresql://user@host/database (the password in PGPASSWORD or "
                           "~/.pgpass), or set search.storage: null for the journal file")
    return url


# --- opening -------------------------------------------------------------------------------------------------------


def retry_callback() -> RetryHeartbeatStaleTrialCallback:
    """Optuna's retry of a dead worker's trial (same parameters, queued again), for the journal and the database."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)


def first_attempt(study: optuna.Study, number: int) -> int:
    """The number of the trial that trial `number` retries (its own when it is no retry): it fixes the training seed."""
    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retried = RetryHeartbeatStaleTrialCallback.retried_trial_number(trial)
    return number if retried is None else retried


@contextlib.contextmanager
def quiet_optuna():
    """Optuna's INFO lines left out while inside (its warnings kept): where the caller prints its own, plainer line."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def create_or_load(study_name: str, storage, objective: str, **options) -> optuna.Study:
    """The study `study_name` in `storage`, created when absent, with its objective named (the dashboard and
    `optuna trials` show it). Optuna's own lines ("A new study created", "Using an existing study") are left out:
    the caller says in one line where the study stands."""
    with quiet_optuna():
        study = optuna.create_study(study_name=study_name, storage=storage, direction="maximize", load_if_exists=True,
                                    **options)
    if study.metric_names != [objective]:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([objective])
    return study


# The user attribute that records what a study's trials mean (its settings); a copy that lacks it is unfinished.
MEANING = "meaning"


def move_study(storage, source: str, target: str, stores=()) -> None:
    """Give the study `source` the name `target`, whole: its trials (numbers, parameters, states and attributes kept,
    so that it resumes where it stopped), its attributes, and its folder in each of `stores` (the runs' checkpoints;
    the histories beside a journal). Killed at any point, it loses nothing and is done again: a target already there
    is a copy a killed move left (replaced), the MEANING attribute is copied last (a copy without it is unfinished),
    and the source is deleted last."""
    with contextlib.suppress(KeyError):
        optuna.delete_study(study_name=target, storage=storage)
    old = optuna.load_study(study_name=source, storage=storage)
    with quiet_optuna():
        new = optuna.create_study(study_name=target, storage=storage, directions=old.directions)
    for key, value in storage.get_study_system_attrs(old._study_id).items():
        storage.set_study_system_attr(new._study_id, key, value)
    for trial in old.get_trials(deepcopy=False):  # in number order: each copy gets its original's number
        storage.create_new_trial(new._study_id, template_trial=trial)
    history = _history_store(storage)
    for store in (*stores, *([history] if history else [])):
        _move_folder(Path(store) / source, Path(store) / target)
    for key, value in sorted(old.user_attrs.items(), key=lambda item: item[0] == MEANING):
        new.set_user_attr(key, value)
    optuna.delete_study(study_name=source, storage=storage)


def _move_folder(source: Path, target: Path) -> None:
    """Move `source`'s files into `target`, one atomic rename each (a killed move is finished by the next)."""
    if not source.is_dir():
        return  # none, or moved already
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        source.rename(target)
        return
    for path in source.iterdir():
        path.replace(target / path.name)
    source.rmdir()


def set_missing_user_attrs(study: optuna.Study, attrs: dict) -> None:
    """Set the study's user attributes that it lacks or holds with another value (each write is a journal line)."""
    held = study.user_attrs
    for key, value in attrs.items():
        if held.get(key) != value:
            study.set_user_attr(key, value)


HISTORY = "history"


def _history_store(storage) -> Path | None:
    """The folder of the training histories, a sub-folder per study and a file per trial, next to the journal (and so
    next to the runs' checkpoints); None for a database, where workers on other machines write them."""
    backend = getattr(storage, "_backend", None)
    if not isinstance(backend, JournalFileBackend):
        return None
    return Path(backend._file_path).parent / "histories"


def _histories(study: optuna.Study) -> Path | None:
    """The folder of the study's training histories; None for a database."""
    store = _history_store(study._storage)
    return None if store is None else store / study.study_name


def save_history(study: optuna.Study, trial: optuna.Trial, history: list[dict]) -> None:
    """Keep a trial's training history where `optuna trials` does not list it: a file per trial beside the journal, or
    in a database a system attribute of the trial."""
    folder = _histories(study)
    if folder is None:
        study._storage.set_trial_system_attr(trial._trial_id, HISTORY, history)
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_bytes(json.dumps(history).encode(), folder / f"trial{trial.number}.json")


def load_history(study: optuna.Study, trial) -> list[dict]:
    """A trial's training history as `save_history` kept it (a user attribute in studies from before it)."""
    folder = _histories(study)
    path = folder / f"trial{trial.number}.json" if folder is not None else None
    if path is not None and path.is_file():
        return json.loads(path.read_text())
    return trial.system_attrs.get(HISTORY) or trial.user_attrs.get(HISTORY) or []


def open_storage(search: SearchConfig, journal: str | Path, heartbeat_seconds: int | None = None):
    """The storage params name: the database (workers heartbeat there), or else the journal file `journal`."""
    url = storage_url(search)
    if url is None:
        return journal_storage(journal)
    return database_storage(url, heartbeat_seconds or search.heartbeat_seconds)


class JournalFile(JournalFileBackend):
    """Optuna's journal file, whose lines are never appended after a torn one: an append that fails (a full disk) is
    cut back to the last whole line under the lock, and one that a killed writer tore is cut off first."""

    def append_logs(self, logs: list[dict]) -> None:
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
        with get_lock_file(self._lock):
            size = cut_torn_tail(Path(self._file_path))  # a packed worker killed mid-write, its lock released since
            try:
                with open(self._file_path, "ab") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
            except OSError:
                with open(self._file_path, "r+b") as handle:  # truncating needs no free space
                    handle.truncate(size)
                raise


def journal_storage(path: str | Path) -> JournalStorage:
    """The journal file at `path`, its torn last line (a killed write) recovered first."""
    path = Path(path).resolve()  # an absolute lock target, so Optuna can tell a stale lock's age
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = JournalFileSymlinkLock(str(path), grace_period=LOCK_GRACE_SECONDS)
    lock.acquire()  # under the writers' lock: the line another worker is appending right now is not torn
    try:
        repair_journal(path)
    finally:
        lock.release()
    return JournalStorage(JournalFile(str(path), lock_obj=lock))


def repair_journal(path: Path) -> None:
    """Cut a torn last line (a process killed mid-write) into a side file, or name a corrupt line with the fix.

    A torn last line holds no finished operation: every line before it is whole, so the trials they
    record survive. The side file is written whole before the journal is cut (on a full disk the journal
    is left as it was). A corrupt line inside the file is not a torn write, and is not guessed at.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return
    cut_torn_tail(path)
    problem = journal_problem(path)
    if problem:
        raise RuntimeError(problem)


def journal_problem(path: Path) -> str:
    """What stops the journal at `path` from being read, with the fix ('' when nothing does), read as
    `journal_storage` reads it but changing nothing: a torn last line (no line break) is cut off then, and every
    whole line must be a journal record (a JSON object with an op_code)."""
    try:
        data = path.read_bytes() if path.is_file() else b""
    except OSError as error:
        return fault_message(error, path)
    whole = data[:data.rfind(b"\n") + 1]  # the bytes after the last line break are a torn write, moved aside
    for number, line in enumerate(whole.splitlines(), start=1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "op_code" not in record:
            return (f"{path} line {number} is corrupt (not a journal record); the trials before it are intact. "
                    f"Restore the file from a backup, or cut it after line {number - 1} (head -n {number - 1} "
                    f"{path} > fixed && mv fixed {path}) to keep those trials, or delete it to start the searches "
                    "afresh")
    return ""


def cut_torn_tail(path: Path) -> int:
    """Move the bytes after the journal's last line break (a torn write) into a side file, written whole before the
    journal is cut: on a full disk the journal is left as it was. Returns the journal's size once cut."""
    size = path.stat().st_size if path.is_file() else 0
    if size == 0:
        return 0
    with open(path, "rb") as handle:
        keep = _end_of_last_line(handle, size)
        if keep == size:
            return size
        handle.seek(keep)
        torn = handle.read()
    side = path.with_name(f"{path.name}.torn-{int(time.time())}")
    write_bytes(torn, side)
    with open(path, "r+b") as handle:
        handle.truncate(keep)
        os.fsync(handle.fileno())
    warnings.warn(f"{path}: its last line was cut off mid-write (a process was killed while writing); "
                  f"the {len(torn)} bytes were moved to {side.name}, every whole line is kept", stacklevel=2)
    return keep


def _end_of_last_line(handle, size: int, block: int = 1 << 16) -> int:
    """The offset just after the file's last line break (0 if none), reading back from its end a block at a time."""
    end = size
    while end > 0:
        start = max(0, end - block)
        handle.seek(start)
        data = handle.read(end - start)
        if b"\n" in data:
            return start + data.rindex(b"\n") + 1
        end = start
    return 0


def database_storage(url: str, heartbeat_seconds: int) -> RDBStorage:
    """Optuna's database storage with worker heartbeats: a dead worker's trial is failed and retried."""
    import sqlalchemy

    try:  # a URL from the environment, which params' check never saw: SQLAlchemy's own error would quote it
        readable_url(url)
    except ValueError as error:
        raise ValueError(f"search.storage {error}") from None
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna, and in use since v2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(url, heartbeat_interval=heartbeat_seconds, grace_period=GRACE_FACTOR * heartbeat_seconds,
                              heartbeat_stale_trial_callback=retry_callback(),
                              engine_kwargs=_engine_options(url))
    except ImportError as error:  # the driver of the URL's own dialect, which may come from the environment
        raise RuntimeError(missing_driver(url, error)) from None
    except sqlalchemy.exc.NoSuchModuleError:
        raise ValueError(f"search.storage {shown(url)}: SQLAlchemy knows no such database; use postgresql://, "
                         "mysql:// or sqlite:///") from None
    except (sqlalchemy.exc.DBAPIError, sqlalchemy.exc.ArgumentError) as error:
        reason = masked(str(getattr(error, "orig", None) or error), url).strip()
        # A storage fault (a RuntimeError): a packed worker that starts after the database is gone says so in one line.
        raise StorageFault(f"cannot open the study database {shown(url)}: {reason}; check the URL, that the server "
                           "runs and accepts connections from this machine, and for sqlite that the folder "
                           "exists") from None


def _engine_options(url: str) -> dict:
    # SQLite allows one writer at a time: wait for the lock instead of failing when workers write at once.
    return {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}


# --- checks and faults ---------------------------------------------------------------------------------------------


def check_storage(search: SearchConfig, journal: str | Path | None = None) -> None:
    """Fail now, with the fix named, when the database params name cannot be opened, the journal's folder (the
    checkpoints' too) cannot be written, or the journal holds a corrupt line: the validate stage asks before DVC
    deletes an output of a stage that writes there."""
    url = storage_url(search)
    if url is not None:
        database_storage(url, search.heartbeat_seconds)
    journal = JOURNAL if journal is None else journal
    check_writable(Path(journal).parent)  # the journal's folder, which holds the runs' checkpoints either way
    problem = journal_problem(Path(journal)) if url is None else ""
    if problem:  # found now, not by the search once DVC has deleted its outputs
        raise StorageFault(problem)


def check_writable(folder: Path) -> None:
    """Raise a StorageFault naming `folder` and the fix when a file cannot be created and written there."""
    existing = next((parent for parent in (folder, *folder.parents) if parent.exists()), Path("/"))
    probe = existing / f".study-write-check-{os.getpid()}"
    try:
        with open(probe, "wb") as handle:
            handle.write(b"x")
            os.fsync(handle.fileno())
    except OSError as error:
        raise StorageFault(fault_message(error, folder)) from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def fault_message(error: OSError, fallback: str | Path) -> str:
    """One line for a failed write: the path (else the folder of `fallback`), what is wrong and the fix."""
    path = _within_checkout(Path(error.filename) if error.filename else Path(fallback).parent)
    folder = next((parent for parent in (path, *path.parents) if parent.is_dir()), Path("."))  # df needs one there
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"no space left on the disk of {path}: free space there (df -h {folder}), then run the stage again; "
                "every finished trial is kept")
    if error.errno == errno.EROFS:
        return (f"{path} is on a read-only file system: remount it writable, or set search.storage to a database "
                "(the runs' checkpoints need results/trials writable too), then run the stage again")
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write {path}: make it writable (chmod -R u+w {folder}) or run as its owner"
    return f"cannot write {path}: {error.strerror or error}; fix that, then run the stage again"


def _within_checkout(path: Path) -> Path:
    """`path` relative to the working directory (the study's checkout) when it lies inside it, as the docs name it."""
    try:
        return path.relative_to(Path.cwd()) if path.is_absolute() else path
    except ValueError:
        return path


def is_storage_fault(error: BaseException) -> bool:
    """Whether `error` is the storage failing (a write refused, a full disk, a database gone), not the trial."""
    import sqlalchemy

    if isinstance(error, OSError):
        return error.errno in _FAULT_ERRNOS
    return isinstance(error, (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError))


def _storage_fault_in(error: BaseException) -> BaseException | None:
    """The storage fault `error` is, or that it was raised while handling: Optuna's own "Should not reach" assertion
    replaces the full disk that failed a trial's last write."""
    seen = set()
    while error is not None and id(error) not in seen:
        if is_storage_fault(error):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


@contextlib.contextmanager
def storage_faults(search: SearchConfig, journal: str | Path) -> Iterator[None]:
    """Turn a storage's failure into a StorageFault of one line: a write refused (read-only, full disk, no
    permission) names the path, a lost database its URL (secrets masked); both name the fix."""
    import sqlalchemy

    url = storage_url(search)
    try:
        yield
    except Exception as raised:
        error = _storage_fault_in(raised)
        if error is None:
            raise
        if isinstance(error, OSError):
            raise StorageFault(masked(fault_message(error, journal), url)) from None
        cause = error if isinstance(error, sqlalchemy.exc.DBAPIError) else error.__cause__
        reason = masked(str(getattr(cause, "orig", None) or cause or error), url).strip().splitlines() or ["?"]
        raise StorageFault(f"lost the study database {shown(url) if url else journal} ({reason[0]}): its finished "
                           "trials are kept there; once it accepts connections again, run the stage again") from None
