"""The environment a study runs in, compared with the lock that pins it (constraints.txt at the repository root)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

LOCK = Path("constraints.txt")
# The packages that compute a study's scores: the first named when the environment is not the lock's.
SCORING_PACKAGES = ("torch", "torchvision", "numpy", "scipy", "scikit-learn", "optuna", "pandas", "timm")


def installed_version(package: str) -> str:
    """The installed version of `package`, or 'not installed'."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def locked_versions(lock: Path = LOCK) -> dict[str, str]:
    """The lock's pins, by package name as written there."""
    pins = (line.split("#")[0].strip() for line in lock.read_text().splitlines())
    return dict(pin.split("==", 1) for pin in pins if "==" in pin)


def lock_differences(lock: Path = LOCK) -> list[str]:
    """'name installed (lock pinned)' for each installed package whose version is not the lock's, scoring ones first.

    Pinned packages that are not installed are left out: they are optional or of another platform (psycopg, the
    CUDA wheels), not part of this environment.
    """
    pins = sorted(locked_versions(lock).items(), key=lambda pin: pin[0].lower() not in SCORING_PACKAGES)
    return [f"{name} {installed} (lock {pinned})" for name, pinned in pins
            if (installed := installed_version(name)) not in (pinned, "not installed")]


def listing(differences: list[str], shown: int) -> str:
    """The first `shown` differences, and how many more."""
    more = f" and {len(differences) - shown} more" if len(differences) > shown else ""
    return ", ".join(differences[:shown]) + more


def lock_status(lock: Path = LOCK, shown: int = 10) -> str:
    """What the report's footer says of the lock: whether the installed packages are its versions, else which are not."""
    if not lock.is_file():
        return f"no {lock.name} to compare with"
    differences = lock_differences(lock)
    return f"differs from {lock.name} in: {listing(differences, shown)}" if differences else f"matches {lock.name}"
