"""Issue 31 item 6: two different CPUs are two machines, even when both call themselves "AMD EPYC"."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.results import fingerprint as fpmod
from rlbench.results.records import Record
from rlbench.results.store import RunWriter

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse2 avx avx2 fma

processor\t: 1
vendor_id\t: AuthenticAMD
"""
ZEN4 = ZEN3.replace("cpu family\t: 25\nmodel\t\t: 1", "cpu family\t: 25\nmodel\t\t: 17").replace(
    "avx2 fma", "avx2 fma avx512f avx512_bf16 avx512_vnni"
)
GRAVITON = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes sve sve2 bf16
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 1
"""


def hardware(cpuinfo: str, **kw: object) -> dict:
    ident, isa = fpmod.cpu_identity(cpuinfo)
    info = {"cpu": "AMD EPYC", "cpu_id": ident, "isa": isa, "cores": 2, "memory_gib": 8.0, "arch": "x86_64"}
    return {**info, "gpus": [], "gpu_capability": [], **kw}


def test_cpu_identity_reads_vendor_family_model_stepping_and_the_isa_flags_that_matter() -> None:
    ident, isa = fpmod.cpu_identity(ZEN4)
    assert ident == {"vendor": "AuthenticAMD", "family": "25", "model": "17", "stepping": "1"}
    assert isa == ["avx2", "avx512f", "avx512_bf16", "avx512_vnni"]  # fpu, sse2, avx, fma change no kernel choice
    ident, isa = fpmod.cpu_identity(GRAVITON)
    assert ident == {"vendor": "0x41", "family": "8", "model": "0xd4f", "stepping": "0x0"} and isa == ["sve", "sve2"]


@pytest.mark.parametrize(
    "other",
    [
        hardware(ZEN3.replace("model\t\t: 1", "model\t\t: 17")),  # family/model only
        hardware(ZEN3.replace("avx2 fma", "avx2 fma avx512f avx512_bf16")),  # flags only
        hardware(ZEN3, gpus=["NVIDIA H100"], gpu_capability=["9.0"]),
    ],
    ids=["model", "flags", "gpu"],
)
def test_fingerprints_that_differ_only_in_cpu_identity_or_flags_get_different_ids(other: dict) -> None:
    zen3 = hardware(ZEN3)
    assert zen3["cpu"] == other["cpu"] == "AMD EPYC"
    assert fpmod.machine_id(zen3) != fpmod.machine_id(other)
    assert fpmod.machine_id(zen3) == fpmod.machine_id(hardware(ZEN3))  # stable


def test_gpu_capability_asks_torch_only_when_it_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    fpmod.machine_fingerprint.cache_clear()
    try:
        assert fpmod.machine_fingerprint()["gpu_capability"] == []
        cuda = types.SimpleNamespace(
            is_available=lambda: True,
            device_count=lambda: 1,
            get_device_name=lambda i: "H",
            get_device_capability=lambda i: (9, 0),
        )
        monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
        fpmod.machine_fingerprint.cache_clear()
        assert fpmod.machine_fingerprint()["gpu_capability"] == ["9.0"]
    finally:
        fpmod.machine_fingerprint.cache_clear()


def _side(store: Path, run: str, machine: dict) -> str:
    machine = {"id": fpmod.machine_id(machine), **machine}
    fp = {"machine": machine, "software": {"python": "3.11", "packages": {"torch": "2.13"}, "torch_threads": 1}}
    w = RunWriter(store, run)
    w.write(
        Record(run, "t", "sac", {}, "h", "sps", "steps/s", "higher", [1000.0 + k], repeat=k, seed=k, fingerprint=fp)
        for k in range(6)
    )
    return str(w.path)


def test_gate_refuses_two_epycs_that_differ_in_avx512_bf16(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue example: a Zen 3 and a Zen 4 under KVM, both "AMD EPYC", both id 328858eeb41b; bf16 on one only."""
    a = _side(tmp_path, "a", hardware(ZEN3))
    b = _side(tmp_path, "b", hardware(ZEN4))
    assert main(["gate", a, b, "--fail", "sps:50%"]) == 2
    err = capsys.readouterr().err
    assert "refusing to compare records that differ in machine" in err and "avx512_bf16" in err and "--allow-mismatch" in err
    assert main(["gate", a, b, "--fail", "sps:50%", "--allow-mismatch"]) == 0
    assert "MISMATCH (compared anyway, --allow-mismatch): machine" in capsys.readouterr().out


def test_records_from_before_stay_readable_and_count_as_another_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = fpmod.machine_fingerprint()
    old = {k: now[k] for k in ("cpu", "cores", "memory_gib", "arch", "os", "gpus")}  # the fields rlbench hashed before
    import hashlib
    import json

    hashed = {k: old[k] for k in ("cpu", "cores", "memory_gib", "arch", "gpus")}
    old["id"] = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:12]  # as rlbench wrote it
    assert old["id"] != now["id"]
    a = _side(tmp_path, "a", old)
    b = _side(tmp_path, "b", {k: v for k, v in now.items() if k != "id"})
    assert main(["compare", a, b, "--json"]) == 2  # readable, but another machine
    assert "differ in machine" in capsys.readouterr().err
