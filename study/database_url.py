"""search.storage's database URL: its form, the secrets it may carry, and how messages show it.

Both the params (study/config.py, which refuses a URL with a secret before anything is written) and the storage
(study/storage.py, which opens it and masks its secrets in a driver's error) read a URL through this module, which
imports neither of them.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

_URL = re.compile(r"[A-Za-z]\w*(\+\w+)?://.*", re.DOTALL)  # dialect[+driver]://...
_ENVIRONMENT_VARIABLE = re.compile(r"[A-Za-z_]\w*")
# Query keys (lower case, letters and digits only) that hold a secret in some dialect's URL: PostgreSQL's
# password and sslpassword, MySQL's passwd, Oracle's, MSSQL's PWD (inside odbc_connect), tokens and keys.
_SECRET_KEY_PARTS = ("password", "passwd", "passphrase", "pwd", "secret", "token", "apikey", "accesskey",
                     "privatekey", "credential")
_SECRET_KEYS = ("pass", "pw")
_INNER_PAIR = re.compile(r"([^;=&]+)=([^;&]*)")  # key=value pairs inside a value, e.g. ODBC's "UID=a;PWD=b"
MASK = "***"
# The start of the refusal of a URL with a secret, which the validate stage extends with how to purge .git.
SECRET_REFUSED = "the URL carries a password or other secret"
# DVC sets this in the environment of the stages `dvc exp run` runs, after it has stashed the workspace in git.
DVC_EXPERIMENT = "DVC_EXP_BASELINE_REV"


def storage_location(location: str) -> str:
    """search.storage's form: `env:VARNAME`, or a database URL of a known dialect without a password.

    The URL is never quoted in an error: it may hold a password.
    """
    if location.startswith("env:"):
        if not _ENVIRONMENT_VARIABLE.fullmatch(location[4:]):
            raise ValueError("env: must be followed by an environment variable's name (letters, digits and _), e.g. "
                             "env:STUDY_STORAGE")
        return location
    if not _URL.fullmatch(location):
        raise ValueError("neither a database URL (dialect[+driver]://..., e.g. postgresql://user@host/study or "
                         "sqlite:///results/study.db) nor env:VARNAME (the URL read from that environment variable "
                         "when the stage runs); give one of those, or null for a journal file in results/")
    import sqlalchemy  # deferred: only a database URL needs it

    secrets = secrets_in_url(location)  # first: a password with an unencoded '@' is a secret SQLAlchemy cannot read
    if secrets:  # params.yaml lands in git and dvc.lock
        raise ValueError(f"{SECRET_REFUSED} ({', '.join(secrets)}), and params.yaml is stored in git, dvc.lock and "
                         "the experiment history; remove it from the URL and supply it through PGPASSWORD or "
                         "~/.pgpass, or set search.storage: env:VARNAME with the whole URL in that environment "
                         "variable")
    url = readable_url(location)
    try:
        url.get_dialect()
    except sqlalchemy.exc.NoSuchModuleError:
        raise ValueError(f"SQLAlchemy knows no database {url.drivername!r}; use one of "
                         f"{', '.join(sqlalchemy.dialects.__all__)}, e.g. postgresql://user@host/study or "
                         "sqlite:///results/study.db") from None
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise ValueError("an in-memory SQLite database is gone when the stage ends; give a file, e.g. "
                             "sqlite:///results/study.db")
        folder = Path(url.database).expanduser().parent
        if not folder.is_dir():
            raise ValueError(f"the SQLite file's folder {folder} does not exist; create it (mkdir -p {folder}) or "
                             "put the file in an existing folder")
    return location


def purge_advice() -> str:
    """How to get a secret that params.yaml held out of .git, where `dvc exp run` stashed params.yaml before any
    stage ran (measured with DVC 3.67: an unreachable commit for a run, refs/exps/celery/stash for a queued one)."""
    if os.environ.get(DVC_EXPERIMENT):
        where = "`dvc exp run` has already stashed params.yaml, secret included, in .git (before any stage ran)"
    else:
        where = "if it was ever given through `dvc exp run -S`, DVC stashed params.yaml, secret included, in .git"
    return (f"{where}: purge it with `dvc queue remove --all` (queued runs), then `git reflog expire "
            "--expire-unreachable=now --all && git gc --prune=now`, and take it out of params.yaml (git checkout "
            "params.yaml)")


# --- secrets -------------------------------------------------------------------------------------------------------


def _is_secret_key(key: str) -> bool:
    name = re.sub(r"[^a-z0-9]", "", key.lower())
    return name in _SECRET_KEYS or any(part in name for part in _SECRET_KEY_PARTS)


def _query_values(value) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _parsed(location: str):
    """SQLAlchemy's reading of a database URL, or None where it cannot read it (e.g. a port that is not a number)."""
    import sqlalchemy

    try:
        return sqlalchemy.engine.make_url(location)
    except (sqlalchemy.exc.ArgumentError, ValueError):  # make_url's int() of the port raises a bare ValueError
        return None


def _authority(location: str) -> tuple[str, str] | None:
    """(user-info, host[:port]) with the authority split at its last '@', as urllib.parse reads a URL: where a
    password holds an unencoded '@' or ':', this is the password its writer meant; None without user-info."""
    try:
        netloc = urllib.parse.urlsplit(location).netloc
    except ValueError:
        return None
    user_info, at, host = netloc.rpartition("@")
    return (user_info, host) if at else None


def _passwords(location: str, url) -> list[str]:
    """Every string a database client may take as the URL's password: SQLAlchemy's reading (user-info up to the
    first '@', unquoted) and urllib.parse's (up to the last '@', plain and unquoted), which differ when it holds '@'."""
    found = [url.password] if url is not None and url.password else []
    authority = _authority(location)
    if authority and ":" in authority[0]:
        password = authority[0].split(":", 1)[1]
        found += [password, urllib.parse.unquote(password)] if password else []
    return list(dict.fromkeys(found))


def _ambiguous(location: str, url) -> bool:
    """Whether database clients may read the URL's user-info and host differently: SQLAlchemy cannot read it, or
    an unencoded '@' is left in its host or in its user-info (urllib.parse takes the last '@', SQLAlchemy the
    first)."""
    authority = _authority(location)
    return url is None or "@" in (url.host or "") or authority is not None and "@" in authority[0]


def readable_url(location: str):
    """SQLAlchemy's reading of a database URL that every client reads alike; a ValueError of one line, quoting
    nothing but its host (its secrets masked), where a client would read its password, host or port otherwise."""
    url = _parsed(location)
    if _ambiguous(location, url):
        raise ValueError(f"{shown(location)} is not a database URL that every client reads alike: an unencoded '@' "
                         "in its user name or password, or a port that is not a number; percent-encode '@' as %40 "
                         "and ':' as %3A in the user name and password (urllib.parse.quote(password, safe='')), "
                         "and write it as dialect[+driver]://user@host[:port]/database, e.g. "
                         "postgresql://user@host/study")
    return url


def _url_secrets(location: str) -> list[tuple[str, str]]:
    """(where, value) of every secret of a database URL: each reading of its user-info's password, and query
    values that hold one."""
    url = _parsed(location)
    found = [("its password", password) for password in _passwords(location, url)]
    for key, values in (url.query if url is not None else {}).items():
        for value in _query_values(values):
            if _is_secret_key(key) and value:
                found.append((f"its query's {key}", value))
            found += [(f"its query's {key} ({inner.strip()})", secret) for inner, secret in _INNER_PAIR.findall(value)
                      if _is_secret_key(inner) and secret]
    return found


def secrets_in_url(location: str) -> list[str]:
    """Where a database URL carries a secret (e.g. "its password", "its query's sslpassword"), never the secret."""
    return list(dict.fromkeys(where for where, _ in _url_secrets(location)))


def masked(text: str, url: str | None) -> str:
    """`text` with every secret of `url` (plain or URL-quoted) replaced by ***, e.g. a driver's error message."""
    if not url:
        return text
    text = text.replace(url, shown(url))
    for secret in sorted((value for _, value in _url_secrets(url)), key=len, reverse=True):
        for form in {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}:
            text = text.replace(form, MASK)
    return text


def shown(url: str) -> str:
    """A database URL as messages may show it: its dialect and host alone (a SQLite file's path, a socket's folder),
    any user-info as ***, never its password, database name or query (any of which may hold a secret)."""
    scheme = url.partition("://")[0] if "://" in url else "<not a database URL>"
    parsed, authority = _parsed(url), _authority(url)
    if _ambiguous(url, parsed):  # SQLAlchemy's host may hold the password's tail: the host after the last '@'
        return f"{scheme}://{MASK + '@' if authority else ''}{authority[1] if authority else '<unreadable>'}"
    if parsed.get_backend_name() == "sqlite":  # a file: its path is where it lives (a passphrase is user-info)
        return f"{scheme}://{MASK + '@' if parsed.username or parsed.password else ''}/{parsed.database or ''}"
    socket = {key: _query_values(parsed.query.get(key) or "")[0] for key in ("host", "port")}  # libpq's ?host=
    host, port = parsed.host or socket["host"], parsed.port or socket["port"]
    user_info = f"{MASK}@" if parsed.username or parsed.password else ""
    return f"{scheme}://{user_info}{host}{f':{port}' if port else ''}"


# The package each DBAPI module SQLAlchemy imports comes in (PostgreSQL's through the project's extra).
_DRIVER_PACKAGES = {"psycopg": "-c constraints.txt -e \".[postgres]\"", "psycopg2": "psycopg2-binary",
                    "MySQLdb": "mysqlclient", "pymysql": "pymysql", "mysql": "mysql-connector-python",
                    "mariadb": "mariadb", "oracledb": "oracledb", "cx_Oracle": "cx_Oracle", "pyodbc": "pyodbc",
                    "pymssql": "pymssql", "asyncpg": "asyncpg", "pg8000": "pg8000"}


def missing_driver(url: str, error: ImportError) -> str:
    """One line for a database URL whose driver is not installed: the dialect, the module and its package."""
    cause = error if error.name else error.__cause__ or error.__context__  # Optuna re-raises the driver's own
    module = (getattr(cause, "name", None) or "").split(".")[0]
    parsed = _parsed(url)
    dialect = parsed.get_backend_name() if parsed is not None else "the"
    package = _DRIVER_PACKAGES.get(module, module or "the driver its dialect names")
    return (f"search.storage {shown(url)} needs {dialect}'s database driver {module or '?'}, which is not installed; "
            f"install it with: pip install {package} (or name another driver in the URL, e.g. {dialect}+<driver>://)")
