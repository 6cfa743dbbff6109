"""Fingerprints of the machine, the software and the commit a measurement came from."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from functools import lru_cache
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


ISA_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "amx_bf16",
    "amx_tile",
    "amx_int8",
    "sve",
    "sve2",
)
"""CPU features that change which kernels run (and in which precision: ``--precision auto`` picks bf16 on AVX512-BF16 or
AMX); two CPUs that differ in them are two machines even when their model names agree (KVM often reports "AMD EPYC")."""

_CPU_ID_FIELDS = {  # /proc/cpuinfo key -> fingerprint key; x86 first, then Arm
    "vendor_id": "vendor",
    "cpu family": "family",
    "model": "model",
    "stepping": "stepping",
    "CPU implementer": "vendor",
    "CPU architecture": "family",
    "CPU part": "model",
    "CPU variant": "stepping",
}


def cpu_identity(cpuinfo: str) -> tuple[dict[str, str], list[str]]:
    """Vendor, family, model and stepping of the first CPU in ``/proc/cpuinfo`` text, and its :data:`ISA_FLAGS`.

    x86 lists ``vendor_id``, ``cpu family``, ``model``, ``stepping`` and ``flags``; Arm lists ``CPU implementer``,
    ``CPU architecture``, ``CPU part``, ``CPU variant`` and ``Features``.
    """
    ident: dict[str, str] = {}
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if not line.strip():
            if ident or flags:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in _CPU_ID_FIELDS and _CPU_ID_FIELDS[key] not in ident:
            ident[_CPU_ID_FIELDS[key]] = value
        elif key in ("flags", "Features"):
            flags.update(value.split())
    return ident, [f for f in ISA_FLAGS if f in flags]


def _cpu_identity() -> tuple[dict[str, str], list[str]]:
    try:
        return cpu_identity(Path("/proc/cpuinfo").read_text())
    except OSError:
        return {"vendor": platform.processor() or ""}, []


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def gpu_fields(torch: Any) -> dict[str, list[str]]:
    """``gpus`` (names) and ``gpu_capability`` (``9.0``, in the same order) of the CUDA GPUs ``torch`` sees."""
    if torch is None or not torch.cuda.is_available():
        return {"gpus": [], "gpu_capability": []}
    n = torch.cuda.device_count()
    return {
        "gpus": [torch.cuda.get_device_name(i) for i in range(n)],
        "gpu_capability": ["{}.{}".format(*torch.cuda.get_device_capability(i)) for i in range(n)],
    }


def with_gpus(fp: dict[str, Any], gpus: dict[str, list[str]] | None) -> dict[str, Any]:
    """``fp`` (a :func:`fingerprint`) with the GPU fields a process that imported torch found, and the machine id
    hashed again; ``fp`` itself is left as it is. A process that never imports torch (``rlbench profile``'s own)
    takes them from its child, so that a profile's records name the same machine as ``rlbench run``'s."""
    if not gpus or fp.get("machine", {}).get("gpus"):
        return fp
    machine = {**fp["machine"], "gpus": list(gpus.get("gpus", [])), "gpu_capability": list(gpus.get("gpu_capability", []))}
    machine["id"] = machine_id(machine)
    return {**fp, "machine": machine}


HARDWARE_FIELDS = ("cpu", "cpu_id", "isa", "cores", "memory_gib", "arch", "gpus", "gpu_capability")
"""The fields :func:`machine_id` hashes. Records written before ``cpu_id``, ``isa`` and ``gpu_capability`` were added
hashed fewer fields, so they carry another id: they stay readable and count as another machine."""


_INTEL_FAMILY_6 = {  # server parts this project's machine kinds have shown, and their neighbours
    63: "Haswell",
    79: "Broadwell",
    85: "Skylake / Cascade Lake",
    106: "Ice Lake",
    108: "Ice Lake",
    143: "Sapphire Rapids",
    173: "Granite Rapids",
    175: "Sierra Forest",
    207: "Emerald Rapids",
}


def microarchitecture(cpu_id: dict[str, Any] | None) -> str | None:
    """The core's microarchitecture from the CPU identity of a fingerprint (``cpu_id``: vendor, family, model), where
    it is known: "Zen 3", "Zen 4", "Zen 5", "Emerald Rapids", ... ``None`` otherwise.

    A virtual machine often names every AMD host "AMD EPYC", so the family and model are what tell a Zen 3 (no
    AVX-512) from a Zen 4 or Zen 5 (AVX512-BF16). AMD: family 23 is Zen to Zen 2, 25 is Zen 3 (models 0x00-0x0F and
    0x20-0x5F) or Zen 4 (0x10-0x1F, 0x60-0xAF), 26 is Zen 5 (models up to 0x4F).
    """
    if not cpu_id:
        return None
    try:
        family, model = int(str(cpu_id.get("family")), 0), int(str(cpu_id.get("model")), 0)
    except ValueError:
        return None
    vendor = cpu_id.get("vendor")
    if vendor == "AuthenticAMD":
        if family == 23:
            return "Zen 2" if model >= 0x30 else "Zen / Zen+"
        if family == 25:
            return "Zen 4" if 0x10 <= model <= 0x1F or 0x60 <= model <= 0xAF else "Zen 3"
        if family == 26 and model <= 0x4F:
            return "Zen 5"
    if vendor == "GenuineIntel" and family == 6:
        return _INTEL_FAMILY_6.get(model)
    return None


def cpu_label(machine: dict[str, Any]) -> str:
    """The CPU as a report names it: the model name, then what tells apart CPUs that share it: the microarchitecture,
    family and model, and the vector extensions that change which kernels run. E.g. "AMD EPYC (Zen 5, family 26
    model 2; AVX-512, AVX512-BF16)", "AMD EPYC (Zen 3, family 25 model 1; AVX2, no AVX-512)". Records written before
    the CPU identity was taken give the model name alone."""
    name = str(machine.get("cpu") or "unknown CPU")
    ident, isa = machine.get("cpu_id") or {}, machine.get("isa")
    parts = []
    if ident.get("family") is not None and ident.get("model") is not None:
        arch = microarchitecture(ident)
        parts.append(f"{arch + ', ' if arch else ''}family {ident['family']} model {ident['model']}")
    if isa is not None:
        vector = []
        if "avx512f" in isa:
            vector.append("AVX-512")
            vector += ["AVX512-BF16"] if "avx512_bf16" in isa else ["no AVX512-BF16"]
        elif "avx2" in isa:
            vector += ["AVX2", "no AVX-512"]
        if "amx_tile" in isa:
            vector.append("AMX")
        if "sve" in isa:
            vector.append("SVE2" if "sve2" in isa else "SVE")
        if vector:
            parts.append(", ".join(vector))
    return f"{name} ({'; '.join(parts)})" if parts else name


def machine_id(info: dict[str, Any]) -> str:
    """The machine id: a hash of the :data:`HARDWARE_FIELDS` of a machine fingerprint."""
    hardware = {k: info.get(k) for k in HARDWARE_FIELDS}
    return hashlib.sha256(json.dumps(hardware, sort_keys=True).encode()).hexdigest()[:12]


@lru_cache(maxsize=1)
def machine_fingerprint() -> dict[str, Any]:
    """CPU model, identity (vendor, family, model, stepping) and ISA flags, core count, memory, OS, architecture, GPUs
    and their compute capabilities, plus ``id``, a hash of the hardware fields (:func:`machine_id`)."""
    ident, isa = _cpu_identity()
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cpu_id": ident,
        "isa": isa,
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "arch": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        **gpu_fields(sys.modules.get("torch")),  # only ask torch if this process already imported it
    }
    info["id"] = machine_id(info)
    return info


def software_fingerprint() -> dict[str, Any]:
    """Python and package versions and the thread settings in force."""
    from importlib import metadata  # (~13 ms to import: `rlbench profile` reads versions while the script runs)

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
    """Commit, dirty flag, commit time and subject of the code being measured.

    The repository holding the imported ``rlbench`` package is used when there is one (a source
    checkout or an ``rlbench ab`` worktree), else the one around ``where`` (default: the working
    directory, i.e. the user's project). With ``rlbench_first=False`` (profiles of the user's own scripts) only
    ``where`` is looked at. Outside any repository, ``commit`` is ``None``.

    ``time`` is the commit's committer time (unix seconds) and ``subject`` its first message line, so a history
    orders and labels commits from the records alone; either is ``None`` when git cannot tell. Records written
    before these keys existed lack them; readers use ``.get``.
    """
    candidates = [Path(__file__).resolve().parent] if rlbench_first else []
    candidates.append(Path(where or os.getcwd()))
    for cwd in candidates:
        state = repo_state(cwd)
        if state is not None:
            return state[1]
    return no_git()


def no_git() -> dict[str, Any]:
    """:func:`git_fingerprint` outside any repository."""
    return {"commit": None, "dirty": None, "repo": None, "time": None, "subject": None}


def repo_state(cwd: Path, known: dict[str, dict[str, Any]] | None = None) -> tuple[str, dict[str, Any]] | None:
    """The repository around ``cwd``: its top-level directory and :func:`git_fingerprint`'s dict, or None outside
    one (or in one with no commit). ``known`` maps top-level directories already read to their dicts: a second read
    of the same repository costs one ``git`` call, not three."""
    out = _git(["rev-parse", "HEAD", "--show-toplevel"], cwd)
    commit, _, root = (out or "").partition("\n")
    if not commit:
        return None
    if known is not None and root in known:
        return root, known[root]
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
    when, subject = _commit_time_subject(_git(["log", "-1", "--format=%ct %s", commit], cwd))
    state = {"commit": commit, "dirty": bool(status), "repo": Path(root).name if root else None, "time": when,
             "subject": subject}  # fmt: skip
    if known is not None:
        known[root] = state
    return root, state


def _commit_time_subject(line: str | None) -> tuple[int | None, str | None]:
    """``"<unix time> <subject>"`` (``git log --format='%ct %s'``) as ``(time, subject)``; ``(None, None)`` if unreadable."""
    if not line:
        return None, None
    head, _, subject = line.partition(" ")
    try:
        return int(head), subject
    except ValueError:
        return None, None


def fingerprint() -> dict[str, Any]:
    """The full fingerprint stored in every record."""
    return {"machine": machine_fingerprint(), "software": software_fingerprint(), "git": git_fingerprint()}
