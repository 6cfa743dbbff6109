"""Resolving ``--device`` strings to torch devices, with a clear error when a device is absent."""

from __future__ import annotations

import glob
import os
import re
import sys

from rlbench.core.errors import UsageError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
SKIP_SUFFIX = "not available on this machine"  # ends the skip reason of a device-matrix case whose device is absent
_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def available_devices() -> list[str]:
    """Devices torch can use on this machine, e.g. ``["cpu", "cuda:0"]``."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def cuda_may_be_present() -> bool:
    """Whether this machine may have an NVIDIA GPU that torch could see, asked without importing torch: the driver's
    device nodes or ``/proc`` entry on Linux (WSL's ``/dev/dxg`` too); ``True`` where there is no such cheap check
    (Windows), ``False`` on macOS (no CUDA)."""
    if sys.platform == "darwin":
        return False
    if not sys.platform.startswith("linux"):
        return True
    return os.path.isdir("/proc/driver/nvidia/gpus") or os.path.exists("/dev/dxg") or bool(glob.glob("/dev/nvidia[0-9]*"))


def validate_device_string(spec: str) -> str:
    """Check the syntax of a device string without importing torch.

    Raises:
        UsageError: If ``spec`` is not one of ``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``.
    """
    if not _PATTERN.match(spec):
        raise UsageError(f"unknown device {spec!r}: use one of {', '.join(DEVICE_CHOICES)}")
    return spec


def resolve_device(spec: str, torch_device: bool = True):  # -> torch.device (torch imported lazily), or "cpu"
    """Turn a device string into a ``torch.device`` that exists on this machine.

    ``auto`` picks CPU: for the small networks of the built-in benchmarks, CPU beats a GPU's launch
    latency; ask for ``cuda`` or ``mps`` explicitly to measure them. With ``torch_device`` false (a benchmark that
    takes no device: ``BenchmarkSpec.torch_device``) the CPU is the string ``"cpu"`` and torch is not imported for it
    (2-3 s of CPU a run, for a benchmark whose code never imports torch, or runs it in a child process), except on a
    machine that may have an NVIDIA GPU (:func:`cuda_may_be_present`), where the records must name the GPUs as
    every other run's records on that machine do (the machine id hashes them).

    Raises:
        UsageError: If the device is malformed or absent on this machine.
    """
    validate_device_string(spec)
    if spec in ("auto", "cpu") and not torch_device:
        if cuda_may_be_present():  # the records' machine fingerprint then names the GPUs, as every other run's does
            import torch
        return "cpu"
    import torch

    if spec in ("auto", "cpu"):
        return torch.device("cpu")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(
                f"device {spec!r} is not available on this machine (torch {torch.__version__} sees no CUDA GPU); "
                f"available: {', '.join(available_devices())}"
            )
        dev = torch.device(spec)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(f"device {spec!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return dev
    if not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise UsageError(
            f"device 'mps' is not available on this machine (needs Apple silicon); available: {', '.join(available_devices())}"
        )
    return torch.device("mps")
