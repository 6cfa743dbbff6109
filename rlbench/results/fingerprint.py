"""Fingerprints of the machine, the software and the commit a measurement came from."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

_PACKAGES = ("rlbench", "torch", "numpy", "gymnasium", "pandas", "numba")
_PEERS = ("stable-baselines3", "torchrl", "tensordict", "rlox", "ray", "torchmonarch")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _gpus() -> list[str]:
    torch = sys.modules.get("torch")  # only ask torch if the run already imported it
    if torch is None or not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


@lru_cache(maxsize=1)
def machine_fingerprint() -> dict[str, Any]:
    """CPU model, core count, memory, OS, architecture and GPUs, plus ``id``, a hash of the hardware fields."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "arch": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "gpus": _gpus(),
    }
    hardware = {k: info[k] for k in ("cpu", "cores", "memory_gib", "arch", "gpus")}
    info["id"] = hashlib.sha256(json.dumps(hardware, sort_keys=True).encode()).hexdigest()[:12]
    return info


def software_fingerprint() -> dict[str, Any]:
    """Python and package versions and the thread settings in force."""
    versions = {}
    for name in (*_PACKAGES, *_PEERS):  # the peers (libraries measured beside rlbench) only where installed
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name in _PACKAGES:
                versions[name] = None
    torch = sys.modules.get("torch")
    return {
        "python": platform.python_version(),
        "packages": versions,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "env": {
            k: os.environ.get(k)
            for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RLBENCH_INJECT_DELAY")
        },
    }


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_fingerprint(where: Path | None = None, *, rlbench_first: bool = True) -> dict[str, Any]:
    """Commit and dirty flag of the code being measured.

    The repository holding the imported ``rlbench`` package is used when there is one (a source
    checkout or an ``rlbench ab`` worktree), else the one around ``where`` (default: the working
    directory, i.e. the user's project). With ``rlbench_first=False`` (profiles of the user's own scripts) only
    ``where`` is looked at. Outside any repository, ``commit`` is ``None``.
    """
    candidates = [Path(__file__).resolve().parent] if rlbench_first else []
    candidates.append(Path(where or os.getcwd()))
    for cwd in candidates:
        commit = _git(["rev-parse", "HEAD"], cwd)
        if commit:
            status = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
            root = _git(["rev-parse", "--show-toplevel"], cwd)
            return {"commit": commit, "dirty": bool(status), "repo": Path(root).name if root else None}
    return {"commit": None, "dirty": None, "repo": None}


def fingerprint() -> dict[str, Any]:
    """The full fingerprint stored in every record."""
    return {"machine": machine_fingerprint(), "software": software_fingerprint(), "git": git_fingerprint()}
