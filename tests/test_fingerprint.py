"""Fingerprints: the hardware id hashes the hardware, versions and thread settings are read, the commit is found."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest

from rlbench.results import fingerprint as fpmod


def test_machine_fingerprint_fields_and_id() -> None:
    info = fpmod.machine_fingerprint()
    assert set(info) == {"cpu", "cpu_id", "isa", "cores", "memory_gib", "arch", "os", "gpus", "gpu_capability", "id"}
    assert info["cores"] == os.cpu_count() and isinstance(info["cpu"], str) and info["cpu"]
    fields = ("cpu", "cpu_id", "isa", "cores", "memory_gib", "arch", "gpus", "gpu_capability")
    hardware = {k: info[k] for k in fields}
    assert info["id"] == hashlib.sha256(json.dumps(hardware, sort_keys=True).encode()).hexdigest()[:12]
    if Path("/proc/meminfo").exists():
        assert info["memory_gib"] > 0
    assert fpmod.machine_fingerprint() is info  # computed once per process


# /proc/cpuinfo of the machine kinds this project has been lent (each reads "AMD EPYC" or "Intel(R) Xeon(R) Processor"
# under KVM): the first processor's block, cut to the fields read
_ZEN3 = (
    "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 1\n"
    "flags\t\t: fpu avx2 fma\n"
)
_ZEN4 = _ZEN3.replace(": 1\nmodel name", ": 17\nmodel name").replace("avx2 fma", "avx2 avx512f avx512_bf16 avx512_vnni")
_ZEN5 = _ZEN4.replace("25", "26").replace(": 17\n", ": 2\n")
_EMR = (
    "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "stepping\t: 2\nflags\t\t: avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8\n"
)


@pytest.mark.parametrize(
    ("cpuinfo", "name", "label"),
    [
        (_ZEN3, "AMD EPYC", "AMD EPYC (Zen 3, family 25 model 1; AVX2, no AVX-512)"),
        (_ZEN4, "AMD EPYC", "AMD EPYC (Zen 4, family 25 model 17; AVX-512, AVX512-BF16)"),
        (_ZEN5, "AMD EPYC", "AMD EPYC (Zen 5, family 26 model 2; AVX-512, AVX512-BF16)"),
        (
            _EMR,
            "Intel(R) Xeon(R) Processor",
            "Intel(R) Xeon(R) Processor (Emerald Rapids, family 6 model 207; AVX-512, AVX512-BF16, AMX)",
        ),
    ],
)
def test_a_report_names_what_tells_cpus_of_one_model_name_apart(cpuinfo: str, name: str, label: str) -> None:
    """Zen 3, Zen 4 and Zen 5 all read "AMD EPYC" here, and a bf16 figure from one does not hold on another: the
    label a report prints carries the microarchitecture, family and model, and the vector extensions."""
    ident, isa = fpmod.cpu_identity(cpuinfo)
    assert (
        fpmod.cpu_label(
            {"cpu": "AMD EPYC" if "AMD" in ident["vendor"] else "Intel(R) Xeon(R) Processor", "cpu_id": ident, "isa": isa}
        )
        == label
    )


def test_cpu_label_of_records_without_an_identity_and_of_unknown_cpus() -> None:
    assert fpmod.cpu_label({"cpu": "AMD EPYC"}) == "AMD EPYC"  # written before the identity was taken
    assert fpmod.cpu_label({}) == "unknown CPU"
    arm = {"cpu": "aarch64", "cpu_id": {"vendor": "0x41", "family": "8", "model": "0xd0c"}, "isa": ["sve", "sve2"]}
    assert fpmod.cpu_label(arm) == "aarch64 (family 8 model 0xd0c; SVE2)"  # no name known: the numbers still tell
    assert fpmod.microarchitecture({"vendor": "AuthenticAMD", "family": "26", "model": "x"}) is None
    assert fpmod.cpu_label({**arm, "isa": []}) == "aarch64 (family 8 model 0xd0c)"


def test_gpus_asks_torch_only_when_it_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert fpmod.gpu_fields(sys.modules.get("torch")) == {"gpus": [], "gpu_capability": []}
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 2,
        get_device_name=lambda i: f"GPU {i}",
        get_device_capability=lambda i: (9, 0),
    )
    assert fpmod.gpu_fields(types.SimpleNamespace(cuda=cuda)) == {"gpus": ["GPU 0", "GPU 1"], "gpu_capability": ["9.0", "9.0"]}


def test_a_process_without_torch_takes_the_gpus_its_child_saw() -> None:
    """`rlbench profile`'s own process never imports torch: the child's GPU fields make its records name the machine
    `rlbench run` names (an H200 profile without --sync was stored as a machine with no GPU, under another id)."""
    bare = {"machine": {"cpu": "Xeon", "cores": 16, "gpus": [], "gpu_capability": []}, "software": {"python": "3.12"}}
    bare["machine"]["id"] = fpmod.machine_id(bare["machine"])
    seen = {"gpus": ["NVIDIA H200"], "gpu_capability": ["9.0"]}
    merged = fpmod.with_gpus(bare, seen)
    assert merged["machine"]["gpus"] == ["NVIDIA H200"] and merged["machine"]["gpu_capability"] == ["9.0"]
    assert merged["machine"]["id"] == fpmod.machine_id({**bare["machine"], **seen}) != bare["machine"]["id"]
    assert bare["machine"]["gpus"] == [] and merged["software"] is bare["software"]  # the original is left as it is
    assert fpmod.with_gpus(bare, None) is bare  # the child could not tell: the parent's stands
    assert fpmod.with_gpus(merged, {"gpus": ["other"], "gpu_capability": ["8.0"]}) is merged  # a parent that saw GPUs


def test_software_fingerprint_versions_threads_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLBENCH_INJECT_DELAY", "update:0.05")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(get_num_threads=lambda: 3))
    sw = fpmod.software_fingerprint()
    assert sw["packages"]["rlbench"] == metadata.version("rlbench")
    assert set(fpmod._PACKAGES) <= set(sw["packages"])
    peers = set(sw["packages"]) - set(fpmod._PACKAGES)  # libraries measured beside rlbench, where installed
    assert peers <= set(fpmod._PEERS) and {"stable-baselines3", "torchrl", "ray"} <= peers  # the test extra has them
    assert all(sw["packages"][p] == metadata.version(p) for p in peers)
    assert sw["torch_threads"] == 3
    assert sw["env"]["RLBENCH_INJECT_DELAY"] == "update:0.05" and sw["env"]["OMP_NUM_THREADS"] is None
    assert sw["python"].count(".") == 2
    monkeypatch.delitem(sys.modules, "torch")
    assert fpmod.software_fingerprint()["torch_threads"] is None  # never imports torch itself


def test_missing_package_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fpmod, "_PACKAGES", ("rlbench", "surely-not-an-installed-package-xyz"))
    assert fpmod.software_fingerprint()["packages"]["surely-not-an-installed-package-xyz"] is None


def test_git_prefers_the_package_checkout_then_the_working_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    package_dir = Path(fpmod.__file__).resolve().parent
    asked: list[Path] = []

    def fake_git(args: list[str], cwd: Path) -> str | None:
        asked.append(Path(cwd))
        if Path(cwd) != tmp_path:
            return None  # the package is not in a repository (an installed wheel)
        return {
            "rev-parse HEAD --show-toplevel": f"c0ffee\n{tmp_path / 'proj'}",
            "status --porcelain --untracked-files=no": " M x.py",
            "log -1 --format=%ct %s c0ffee": "1700000000 add the thing",
        }[" ".join(args)]

    monkeypatch.setattr(fpmod, "_git", fake_git)
    assert fpmod.git_fingerprint(tmp_path) == {
        "commit": "c0ffee",
        "dirty": True,
        "repo": "proj",
        "time": 1700000000,
        "subject": "add the thing",
    }
    assert asked[0] == package_dir
    monkeypatch.setattr(fpmod, "_git", lambda args, cwd: None)
    assert fpmod.git_fingerprint(tmp_path) == {"commit": None, "dirty": None, "repo": None, "time": None, "subject": None}


def test_a_repository_read_twice_asks_git_once_more(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a profiled script inside rlbench's own checkout: the user's code and rlbench's are one repository
    asked: list[str] = []

    def fake_git(args: list[str], cwd: Path) -> str | None:
        asked.append(" ".join(args))
        return {"rev-parse HEAD --show-toplevel": f"c0ffee\n{tmp_path}", "log -1 --format=%ct %s c0ffee": "1 s"}.get(
            " ".join(args), ""
        )

    monkeypatch.setattr(fpmod, "_git", fake_git)
    known: dict = {}
    first = fpmod.repo_state(tmp_path / "scripts", known)
    assert first is not None and first[1]["commit"] == "c0ffee" and first[1]["dirty"] is False and len(asked) == 3
    assert fpmod.repo_state(tmp_path, known) == first and len(asked) == 4  # its top level and commit only
    monkeypatch.setattr(fpmod, "_git", lambda args, cwd: None)
    assert fpmod.repo_state(tmp_path, known) is None  # outside a repository


def test_git_of_a_real_repository(tmp_path: Path) -> None:
    commit = fpmod._git(["rev-parse", "HEAD"], Path(fpmod.__file__).resolve().parent)
    if commit is None:
        pytest.skip("rlbench is not imported from a git checkout")
    g = fpmod.git_fingerprint(tmp_path)
    assert g["commit"] == commit and len(commit) == 40 and isinstance(g["dirty"], bool) and g["repo"]
    assert isinstance(g["time"], int) and g["time"] > 1_500_000_000 and isinstance(g["subject"], str)
    assert fpmod._git(["rev-parse", "HEAD"], tmp_path / "does-not-exist") is None  # a failing git is None, not an error


def test_fingerprint_has_all_three_parts() -> None:
    fp = fpmod.fingerprint()
    assert set(fp) == {"machine", "software", "git"}
    json.dumps(fp)  # stored in every record: must be JSON


def test_the_profile_fingerprint_thread_runs_the_callers_preparation_after_it_and_survives_its_failure(
    tmp_path: Path,
) -> None:
    """`rlbench profile` imports what renders its report in the fingerprint's thread while the script runs: after the
    fingerprint is taken, once; a preparation that raises costs nothing but itself."""
    import threading

    from rlbench.profiling.launcher import _Fingerprint

    seen: list[tuple[str, bool]] = []
    fp: _Fingerprint

    def prepare() -> None:
        seen.append((threading.current_thread().name, fp.value is not None))

    fp = _Fingerprint(tmp_path, prepare)
    fp.start()
    value = fp.result()
    assert seen == [("rlbench-fingerprint", True)] and {"machine", "software", "git", "rlbench_git"} <= set(value)

    def fails() -> None:
        raise ImportError("no such module")

    failing = _Fingerprint(tmp_path, fails)
    failing.start()
    assert failing.result()["machine"] == value["machine"]
