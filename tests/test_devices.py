"""``--device`` strings: syntax checked without torch, absent devices refused with a clear message."""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys

import pytest

from rlbench.core import devices
from rlbench.core.devices import available_devices, resolve_device, validate_device_string
from rlbench.core.errors import UsageError


@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:0", "cuda:1", "cuda:12", "mps"])
def test_valid_device_strings(spec: str) -> None:
    assert validate_device_string(spec) == spec


@pytest.mark.parametrize("spec", ["gpu", "tpu", "CPU", "cuda:", "cuda:x", "cuda1", "cuda:-1", " cpu", "cpu ", "", "mps:0"])
def test_invalid_device_strings(spec: str) -> None:
    with pytest.raises(UsageError, match="unknown device") as info:
        validate_device_string(spec)
    assert "auto, cpu, cuda, cuda:N, mps" in str(info.value)


def test_auto_and_cpu_resolve_to_cpu() -> None:
    torch = pytest.importorskip("torch")
    assert resolve_device("auto") == torch.device("cpu") == resolve_device("cpu")
    assert available_devices()[0] == "cpu"


def test_malformed_device_is_refused_before_anything() -> None:
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        resolve_device("tpu")


def test_absent_cuda_is_a_clear_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for spec in ("cuda", "cuda:1"):
        pattern = rf"device '{spec}' is not available on this machine .*no CUDA GPU.*available: cpu"
        with pytest.raises(UsageError, match=pattern):
            resolve_device(spec)


def test_cuda_index_beyond_the_device_count(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UsageError, match=r"'cuda:3' does not exist: this machine has 1 CUDA device"):
        resolve_device("cuda:3")
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    assert resolve_device("cuda") == torch.device("cuda")


def test_absent_mps_is_a_clear_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(UsageError, match="'mps' is not available on this machine"):
        resolve_device("mps")


@pytest.mark.parametrize(
    ("platform", "nodes", "present"),
    [
        ("linux", set(), False),
        ("linux", {"/dev/nvidia0"}, True),
        ("linux", {"/proc/driver/nvidia/gpus"}, True),
        ("linux", {"/dev/dxg"}, True),  # WSL 2
        ("linux", {"/dev/nvidiactl"}, False),  # the control node alone names no GPU
        ("darwin", {"/dev/nvidia0"}, False),  # no CUDA on macOS
        ("win32", set(), True),  # no cheap check: torch is asked
    ],
)
def test_whether_a_cuda_gpu_may_be_present_is_read_from_the_drivers_nodes(
    monkeypatch: pytest.MonkeyPatch, platform: str, nodes: set[str], present: bool
) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(devices.os.path, "isdir", lambda p: p in nodes)
    monkeypatch.setattr(devices.os.path, "exists", lambda p: p in nodes)
    monkeypatch.setattr(devices.glob, "glob", lambda pattern: [n for n in nodes if fnmatch.fnmatch(n, pattern)])
    assert devices.cuda_may_be_present() is present


@pytest.mark.parametrize("gpu", [False, True])
def test_a_benchmark_without_a_device_imports_torch_only_where_a_gpu_may_be(gpu: bool) -> None:
    """``torch_device=False`` (an ``@rlbench.benchmark`` function, a micro suite run in a child): the CPU is the
    string ``cpu`` and torch stays out of this process, unless the machine may have an NVIDIA GPU, whose name its
    records' machine fingerprint must then carry (in a fresh process: this one imported torch long ago)."""
    code = (
        "import json, sys; from rlbench.core import devices; "
        f"devices.cuda_may_be_present = lambda: {gpu}; "
        "print(json.dumps([devices.resolve_device('auto', torch_device=False), 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == ["cpu", gpu]
