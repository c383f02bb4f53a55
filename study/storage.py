"""Where trials live: a journal file on one machine, or a database that workers on many machines share.

Both the searches and the final runs keep their trials here, outside DVC's outputs: DVC deletes a
stage's outputs before it runs, and workers write to the storage while and after a stage runs.
Credentials never come from params.yaml (which lands in git, dvc.lock and the experiment history):
a database URL there carries no password — PGPASSWORD or ~/.pgpass supply it — or params names an
environment variable that holds the whole URL (`search.storage: env:STUDY_STORAGE`).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from study.config import SearchConfig
from study.workers import retry_callback

# Optuna forcibly releases a journal lock older than this: the lock is held only while a few lines are
# appended, so a lock this old belongs to a killed process.
LOCK_GRACE_SECONDS = 10
# A database worker that has not beaten for GRACE_FACTOR heartbeats is dead: its trial is failed and retried.
GRACE_FACTOR = 3


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


def shown(url: str) -> str:
    """A database URL as logs and messages may show it: the password masked."""
    import sqlalchemy

    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return "<not a database URL>"


def open_storage(search: SearchConfig, journal: str | Path, heartbeat_seconds: int | None = None):
    """The storage params name: the database (workers heartbeat there), or else the journal file `journal`."""
    url = storage_url(search)
    if url is None:
        return journal_storage(journal)
    return database_storage(url, heartbeat_seconds or search.heartbeat_seconds)


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
    return JournalStorage(JournalFileBackend(str(path), lock_obj=lock))


def repair_journal(path: Path) -> None:
    """Cut a torn last line (a process killed mid-write) into a side file, or name a corrupt line with the fix.

    A torn last line holds no finished operation: every line before it is whole, so the trials they
    record survive. A corrupt line inside the file is not a torn write, and is not guessed at.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    whole, _, torn = data.rpartition(b"\n")
    if torn:
        whole += b"\n"
        if not whole.strip():
            whole = b""
        side = path.with_name(f"{path.name}.torn-{int(time.time())}")
        side.write_bytes(torn)
        with open(path, "r+b") as handle:
            handle.truncate(len(whole))
            os.fsync(handle.fileno())
        warnings.warn(f"{path}: its last line was cut off mid-write (a process was killed while writing); "
                      f"the {len(torn)} bytes were moved to {side.name}, every whole line is kept", stacklevel=2)
    for number, line in enumerate(whole.splitlines(), start=1):
        try:
            json.loads(line)
        except ValueError:
            raise RuntimeError(f"{path} line {number} is corrupt (not a journal record); the trials before it are "
                               f"intact. Restore the file from a backup, or cut it after line {number - 1} "
                               f"(head -n {number - 1} {path.name} > fixed && mv fixed {path.name}) to keep "
                               "those trials, or delete it to start the searches afresh") from None


def database_storage(url: str, heartbeat_seconds: int) -> RDBStorage:
    """Optuna's database storage with worker heartbeats: a dead worker's trial is failed and retried."""
    import sqlalchemy

    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna, and in use since v2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(url, heartbeat_interval=heartbeat_seconds, grace_period=GRACE_FACTOR * heartbeat_seconds,
                              heartbeat_stale_trial_callback=retry_callback(),
                              engine_kwargs=_engine_options(url))
    except ImportError as error:
        raise RuntimeError(f"search.storage {shown(url)} needs a database driver that is not installed ({error}); "
                           "for PostgreSQL install it with: pip install -c constraints.txt -e \".[postgres]\"") from None
    except sqlalchemy.exc.NoSuchModuleError:
        raise ValueError(f"search.storage {shown(url)}: SQLAlchemy knows no such database; use postgresql://, "
                         "mysql:// or sqlite:///") from None
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.ArgumentError) as error:
        reason = getattr(error, "orig", None) or error
        raise RuntimeError(f"cannot open the study database {shown(url)}: {reason}; check the URL, that the server "
                           "runs and accepts connections from this machine, and for sqlite that the folder "
                           "exists") from None


def _engine_options(url: str) -> dict:
    # SQLite allows one writer at a time: wait for the lock instead of failing when workers write at once.
    return {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}


def check_storage(search: SearchConfig) -> None:
    """Fail now, with the fix named, when the database params name cannot be opened (the journal always can)."""
    url = storage_url(search)
    if url is not None:
        database_storage(url, search.heartbeat_seconds)
