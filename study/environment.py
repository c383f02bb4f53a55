"""The environment a study runs in: its packages, compared with the lock that pins them (constraints.txt at the
repository root), and the machine (CPU, C library, memory)."""

from __future__ import annotations

import functools
import math
import os
import platform
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


# torch's CPU kernels by capability, best first, with the CPU flags each needs (aten's DispatchStub rule on x86-64).
KERNEL_FLAGS = {"AVX512": {"avx512vl", "avx512bw", "avx512dq", "fma"}, "AVX2": {"avx2", "fma"}, "DEFAULT": set()}


@functools.cache
def _cpuinfo_lines() -> tuple[str, ...]:
    """/proc/cpuinfo, read once a process: the CPU does not change under it."""
    info = Path("/proc/cpuinfo")
    return tuple(info.read_text().splitlines()) if info.is_file() else ()


def cpu_info(field: str) -> str | None:
    """The first value of `field` ('model name', 'vendor_id', 'flags') in /proc/cpuinfo, or None where there is none."""
    return next((line.split(":", 1)[1].strip() for line in _cpuinfo_lines()
                 if line.split(":", 1)[0].strip() == field), None)


def cpu_model() -> str:
    """This machine's CPU model, as the scores' records name it."""
    return cpu_info("model name") or platform.processor() or platform.machine() or "an unnamed CPU"


def cpu_vendor() -> str:
    """The CPU's vendor (GenuineIntel, AuthenticAMD), or the architecture where the system names no vendor."""
    return cpu_info("vendor_id") or platform.machine() or "unknown"


def c_library() -> str:
    """The C library and its version, e.g. 'glibc 2.36': torch's DEFAULT kernels take expf and logf from it."""
    name, version = platform.libc_ver()
    return f"{name} {version}" if name else "an unnamed C library"


def kernel_capability() -> str:
    """The CPU kernels torch runs in this process's environment (DEFAULT, AVX2, AVX512), found without importing torch.

    torch takes ATEN_CPU_CAPABILITY as asked where it names kernels its x86-64 build has (lower case), without
    checking the CPU's flags (asked for AVX512 on a CPU without it, torch reports AVX512); otherwise the best kernels
    the flags allow. tests/test_reproducibility.py checks this against torch.backends.cpu.get_cpu_capability(). Off
    x86-64 the rule is torch's own for that architecture, which the CPU's flags do not tell here.
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"torch's own for {platform.machine() or 'this architecture'}"
    flags = set((cpu_info("flags") or "").split())
    supported = [name for name, needed in KERNEL_FLAGS.items() if needed <= flags]
    asked = os.environ.get("ATEN_CPU_CAPABILITY", "")
    return asked.upper() if asked.islower() and asked.upper() in KERNEL_FLAGS else supported[0]


def machine_summary() -> str:
    """The CPU, torch's kernels and the C library: what moves a CPU study's last digits between machines."""
    return f"{cpu_model()} ({cpu_vendor()}), torch kernels {kernel_capability()}, {c_library()}"


def machine_memory() -> int | None:
    """Bytes of this machine's memory, within a container's limit; None where unknown."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return memory
    return min(memory, int(limit)) if limit.isdigit() else memory


def readable_bytes(count: float) -> str:
    """A byte count as people say it: 3.2 GB, 640.0 TB."""
    units = ("bytes", "KB", "MB", "GB", "TB")
    power = min(int(math.log10(max(count, 1)) // 3), len(units) - 1)
    return f"{count / 1000 ** power:,.1f} {units[power]}"
