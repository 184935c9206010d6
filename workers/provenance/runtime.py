"""The machine and libraries a trial ran on, for its record: banditsweep's version and commit, the
versions of Python, torch, numpy and scipy, the CPU model, the device, torch's threads and float
settings. What can move a float's last bits (and so, rarely, an argmax) without any change of code."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGE = "banditsweep"


LIBRARIES = ("torch", "numpy", "scipy")


def runtime_info(device: str | None = None, threads: int | None = None) -> dict[str, str | int]:
    """Where a trial ran, for its record: banditsweep's version and commit, the libraries' versions,
    Python, the CPU model (from the OS) and the machine's CPU count (``machine_cpus``, what
    provenance.load's load average is relative to), the device (``cpu`` or the GPU's name), torch's thread count
    and float settings (where torch is loaded)."""
    info = dict(_process_runtime())
    machine_cpus = info.pop("machine_cpus")
    info["device"] = device or "cpu"
    info["machine_cpus"] = machine_cpus
    torch = sys.modules.get("torch")
    if torch is not None:
        info["threads"] = int(torch.get_num_threads())
        info["float32_matmul"] = str(torch.get_float32_matmul_precision())
        info["default_dtype"] = str(torch.get_default_dtype()).replace("torch.", "")
    elif threads is not None:
        info["threads"] = int(threads)
    return info


@functools.lru_cache(maxsize=1)
def _process_runtime() -> dict[str, str | int]:
    """What cannot change while this process lives, read once: each read of a distribution's version
    scans the import path (~1 ms), and an actor stamps every batch it runs."""
    info: dict[str, str | int] = {"banditsweep": _version(PACKAGE) or "unknown", "commit": source_commit(),
                                  "python": platform.python_version()}
    for library in LIBRARIES:
        info[library] = _version(library) or "not installed"
    info["cpu"] = cpu_model()
    info["machine_cpus"] = os.cpu_count() or 1   # what the load average is relative to (provenance.load)
    return info


def _version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name as the OS gives it (``/proc/cpuinfo``), else what Python knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as file:
            for line in file:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def source_commit(package: str | os.PathLike | None = None) -> str:
    """The git commit of the code that runs (with ``+dirty`` when it has changes), where it is a
    git checkout; else (a Ray job's uploaded tree, an installed package) the SHA-256 of the package's
    source files with the installed version: every result still names the code that made it."""
    import subprocess

    import banditsweep

    root = Path(package or Path(banditsweep.__file__).resolve().parent)
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=False, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=False, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    if commit:
        return commit + ("+dirty" if dirty else "")
    installed = _version(PACKAGE)
    label = f"banditsweep {installed}" if installed else "banditsweep"
    return f"{label}, source sha256:{source_digest(root)[:16]} (no git)"


def source_digest(package: Path) -> str:
    """SHA-256 over the package's Python files and sweep specs, by relative path: the same tree gives
    the same digest wherever it was copied (what a Ray job uploads has no ``.git``)."""
    digest = hashlib.sha256()
    files = sorted(path for pattern in ("*.py", "*.yaml") for path in package.rglob(pattern)
                   if ".venv" not in path.parts and "__pycache__" not in path.parts)
    for path in files:
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
