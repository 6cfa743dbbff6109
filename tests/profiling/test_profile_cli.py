"""`rlbench profile` end to end: records and report of an unmodified script, and every way a script can fail."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlbench.results.store import read_records
from tests.cli.cli_helpers import run_cli
from tests.faults.fault_helpers import foreground_signals, one_line_error

pytestmark = pytest.mark.slow  # every test runs `rlbench profile` or python in a subprocess

SCRIPT = """
import argparse, os, signal, sys, time
import gymnasium as gym
import numpy as np
import torch

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
p.add_argument("--iterations", type=int, default=4)
p.add_argument("--fail-at-seed", type=int, default=-1)
p.add_argument("--how", default="raise")
args = p.parse_args()
if args.seed == args.fail_at_seed:
    if args.how == "raise":
        raise RuntimeError("diverged")
    if args.how == "exit":
        sys.exit(3)
    if args.how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if args.how == "hang":
        open(os.environ["HANG_MARK"], "w").write(str(os.getpid()))
        time.sleep(600)
torch.manual_seed(args.seed)
envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
obs, _ = envs.reset(seed=args.seed)
for it in range(args.iterations):
    for t in range(16):
        with torch.no_grad():
            a = torch.distributions.Categorical(logits=net(torch.as_tensor(obs))).sample()
        obs, *_ = envs.step(a.numpy())
    loss = net(torch.randn(32, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done", loss.item())
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    return tmp_path


def _records(store: Path):
    return read_records(store)


def test_profiles_an_unmodified_script_into_records_and_a_report(project: Path) -> None:
    options = ["profile", "--json", "--count-ops", "--store", "st", "--seed-arg", "--seed {seed}", "--"]
    proc = run_cli([*options, "python", "train.py", "--iterations", "5"], cwd=project)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)  # the script's own output went to stderr
    assert "done" in proc.stderr
    assert summary["benchmark"] == "train.py" and summary["repeats"] == 1 and summary["sps"] > 0
    records = _records(project / "st")
    names = {r.metric for r in records}
    assert {"time/env/step", "time/inference", "time/train/forward", "time/train/backward", "time/train/optimizer"} <= names
    assert {"ops/iteration", "syncs/iteration", "profile/overhead_s", "env_steps", "iter_time/inference"} <= names
    steps = next(r for r in records if r.metric == "env_steps")
    assert steps.samples == [4 * 16 * 2]  # 5 iterations: the op-counted one is left out (the warm-up stays in SPS)
    assert steps.meta["all_steps"] == 5 * 16 * 2
    assert all(r.meta["kind"] == "profile" and r.params["command"] == "train.py --iterations 5" for r in records)
    layers = {r.metric: r.meta.get("layer") for r in records if r.metric.startswith("time/")}
    assert layers["time/env/step"] == "environment" and layers["time/train/backward"] == "update"
    report = (project / summary["report"]).read_text(encoding="utf-8")
    assert "`env/step`" in report and "What profiling cost" in report and "Operation counters" in report
    # the hooks' costs say how they were calibrated, as the run measured them (the text once said 3 x 4,000 while the
    # code ran 5 x 1,000)
    events = next(r for r in records if r.metric == "profile/events")
    assert events.meta["calls"] == 1000 and events.meta["repeats"] == 5
    assert "a bare one, minimum of 5 × 1,000 calls)" in report
    # matrix-product FLOPs of the counted iteration, exactly: addmm (32x4 @ 4x16) + (32x16 @ 16x2) forward, the
    # three weight/input gradients backward, and 16 steps of the same two products on 2 envs for inference
    flops = {r.metric: r.samples[0] for r in records if r.metric.startswith("flops/")}
    assert flops["flops/train/forward"] == 2 * 32 * (4 * 16 + 16 * 2)
    assert flops["flops/train/backward"] == 2 * 32 * (2 * 16 + 2 * 16 + 16 * 4)
    assert flops["flops/inference"] == 16 * 2 * 2 * (4 * 16 + 16 * 2)
    achievable = {r.metric: r.samples[0] for r in records if r.metric.startswith("limits/")}
    assert achievable["limits/achievable_s/train/forward"] > 0 and achievable["limits/dispatch_us"] > 0
    assert "Against this machine's limits" in report and "Achieved GFLOP/s" in report
    assert "--network" not in report and "--inference" not in report  # no rlbench-internal switch about user code


def test_trace_and_module_form(project: Path) -> None:
    pkg = project / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "train.py").write_text(SCRIPT, encoding="utf-8")
    proc = run_cli(
        ["profile", "--quiet", "--store", "st", "--trace", "t.json", "--", "python", "-m", "mypkg.train"], cwd=project
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    trace = json.loads((project / "t.json").read_text(encoding="utf-8"))
    phases = {e["args"]["phase"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert {"env/step", "inference", "train/backward"} <= phases
    assert {r.benchmark for r in _records(project / "st")} == {"-m mypkg.train"}


@pytest.mark.parametrize(
    ("how", "says"),
    [("raise", "RuntimeError: diverged"), ("exit", "exited with status 3"), ("kill", "killed by signal 9")],
)
def test_a_failing_repeat_keeps_the_finished_ones(project: Path, how: str, says: str) -> None:
    proc = run_cli(
        [
            "profile",
            "--quiet",
            "--repeats",
            "3",
            "--store",
            "st",
            "--seed-arg",
            "--seed {seed}",
            "--",
            "python",
            "train.py",
            "--iterations",
            "3",
            "--fail-at-seed",
            "1",
            "--how",
            how,
        ],
        cwd=project,
    )
    err = one_line_error(proc, code=1)
    assert "repeat 1 (seed 1)" in err and says in err and "1 finished repeats saved" in err
    records = _records(project / "st")
    assert {r.repeat for r in records} == {0}
    assert list((project / "st").glob("*-repeat1.log"))  # the script's output is kept


def test_a_hung_script_is_ended_at_the_timeout(project: Path) -> None:
    mark = project / "pid"
    env = {**os.environ, "HANG_MARK": str(mark)}
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlbench",
            "profile",
            "--quiet",
            "--timeout",
            "8",
            "--store",
            "st",
            "--",
            "python",
            "train.py",
            "--fail-at-seed",
            "0",
            "--how",
            "hang",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    err = one_line_error(proc, code=1)
    assert "ran past --timeout 8 s" in err and time.monotonic() - t0 < 60
    pid = int(mark.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _signal_once_marked(
    args: list[str], cwd: Path, env: dict[str, str], mark: Path, sig: int, never: str
) -> tuple[subprocess.Popen[str], str]:
    """`rlbench profile --quiet --store st ARGS` from ``cwd``, sent ``sig`` once the script writes its pid to ``mark``;
    the finished process and its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", "profile", "--quiet", "--store", "st", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        preexec_fn=foreground_signals,
    )
    deadline = time.monotonic() + 90
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mark.exists(), never
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc, err


def test_ctrl_c_keeps_finished_repeats_and_ends_the_script(project: Path) -> None:
    mark = project / "pid"
    args = ["--repeats", "3", "--seed-arg", "--seed {seed}", "--", "python", "train.py", "--iterations", "3"]
    proc, err = _signal_once_marked(
        [*args, "--fail-at-seed", "1", "--how", "hang"],
        project,
        {"HANG_MARK": str(mark)},
        mark,
        signal.SIGINT,
        "the second repeat never started",
    )
    assert proc.returncode == 130, err
    assert "1 of 3 repeats saved, and repeat 1 as far as it ran, in" in err
    records = _records(project / "st")
    assert {r.repeat for r in records} == {0, 1}  # the repeat in flight keeps what it measured, marked as cut
    assert all(bool(r.meta.get("cut")) == (r.repeat == 1) for r in records)
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(int(mark.read_text()), 0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "nothing to profile"),
        (["--", "python", "missing.py"], "no such script"),
        (["--", "bash", "run.sh"], "not a Python script"),
        (["--seed-arg=--seed", "--", "python", "train.py"], "has no {seed}"),
        (["--repeats", "0", "--", "python", "train.py"], "--repeats must be at least 1"),
        (["--sync", "--", "python", "train.py"], "--sync"),
        (["--bogus", "--", "python", "train.py"], "unrecognized arguments"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(project: Path, args: list[str], says: str) -> None:
    (project / "run.sh").write_text("echo hi\n", encoding="utf-8")
    proc = run_cli(["profile", *args], cwd=project)
    if "--sync" in args and "cuda" in proc.stderr.lower() and proc.returncode == 0:
        pytest.skip("a GPU is visible here")
    assert says in one_line_error(proc, code=2)


def test_the_command_itself_never_imports_torch(project: Path) -> None:
    """The script's process imports torch; rlbench's own must not, also with --sync (whose device check ran there and
    cost 4 s before the script started on a GPU machine), and its records still name the machine's GPUs."""
    code = (
        "import json, sys; from rlbench.cli import main; "
        "rc = main(['profile', '--quiet', *sys.argv[1:], '--store', 'st', '--', 'python', 'train.py', '--iterations', '3']); "
        "print(json.dumps([rc, 'torch' in sys.modules]))"
    )
    for extra in ([], ["--sync"]):
        out = subprocess.run([sys.executable, "-c", code, *extra], cwd=project, capture_output=True, text=True, timeout=300)
        rc, imported = json.loads(out.stdout.strip().splitlines()[-1])
        assert not imported, (extra, out.stderr[-1000:])
        if extra and rc == 2:  # no GPU driver here: rlbench said so in one line, before the script started
            assert "--sync synchronizes a GPU" in out.stderr and out.stderr.count("\n") == 1, out.stderr
        else:
            assert rc == 0, out.stderr[-2000:]
    import torch  # noqa: F401 - this process's fingerprint then names the GPUs, as `rlbench run`'s does

    from rlbench.results.fingerprint import machine_fingerprint

    machines = {r.fingerprint["machine"]["id"] for r in read_records(project / "st")}
    assert machines == {machine_fingerprint()["id"]}


NO_TORCH = """
import sys
import rlbench
with rlbench.phase("work"):
    sum(i * i for i in range(200_000))
print("torch" in sys.modules)
"""

TORCH_LATE = """
import gymnasium as gym
env = gym.make("CartPole-v1")
obs, _ = env.reset(seed=0)
import torch  # after the env's first calls
net = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for it in range(6):
    for t in range(8):
        with torch.no_grad():
            a = int(net(torch.as_tensor(obs)).argmax())
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            obs, _ = env.reset()
    loss = net(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_script_without_torch_is_profiled_without_importing_it(tmp_path: Path) -> None:
    """torch's hooks go on when the script imports torch: a script that never does (NumPy, JAX, a plain loop) is not
    made to pay torch's import (2-3 s of CPU here), and one that imports it midway is hooked from there on."""
    (tmp_path / "no_torch.py").write_text(NO_TORCH, encoding="utf-8")
    (tmp_path / "torch_late.py").write_text(TORCH_LATE, encoding="utf-8")
    runs = {}
    for script in ("no_torch.py", "torch_late.py"):
        cmd = [sys.executable, "-m", "rlbench", "profile", "--store", "st", "--json", "--", "python", script]
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[script] = (json.loads(proc.stdout), proc.stderr)
    out, err = runs["no_torch.py"]
    assert err.strip().splitlines()[0] == "False", err[-2000:]  # the script's own print: torch never imported
    assert out["time/work"] > 0, out
    out, err = runs["torch_late.py"]
    booked = ("inference", "env/step", "train/forward", "train/backward", "train/optimizer")
    assert all(out.get(f"time/{phase}", 0) > 0 for phase in booked), out


def test_the_scripts_process_checks_the_sync_device_and_names_the_gpus(project: Path) -> None:
    """Where rlbench's own look finds a GPU driver but torch sees no GPU (a CPU-only torch), the script's process says
    so before the script runs (exit 2); a normal run reports the GPUs torch sees, for the records' fingerprint."""
    import torch

    from rlbench.profiling.launcher import Target, child_env, write_child_spec
    from rlbench.profiling.session import Settings
    from rlbench.results.fingerprint import gpu_fields

    script = project / "train.py"
    target = Target(sys.executable, False, str(script), ["--iterations", "2"])
    for sync in (True, False):
        out = project / f"out-{sync}.json"
        spec = write_child_spec(project / f"spec-{sync}.json", target, target.args, out, Settings(sync=sync))
        cmd = [sys.executable, "-m", "rlbench.profiling.bootstrap", str(spec)]
        proc = subprocess.run(cmd, cwd=project, env=child_env(), capture_output=True, text=True, timeout=120)
        data = json.loads(out.read_text())
        if sync and not gpu_fields(torch)["gpus"]:
            assert proc.returncode == 2 and data["status"] == "usage" and "--sync" in data["error"], proc.stderr
            assert not data["metrics"]  # the script never ran
        else:
            assert proc.returncode == 0 and data["status"] == "ok", proc.stderr[-2000:]
            assert data["gpus"] == gpu_fields(torch)


def test_import_rlbench_and_phase_stay_free_of_torch() -> None:
    code = (
        "import sys, rlbench; rlbench.phase('x'); rlbench.benchmark; "
        "print(sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_session_and_record_write_fingerprinted_records(tmp_path: Path) -> None:
    code = f"""
import rlbench, torch
with rlbench.session("my-run", store={str(tmp_path / "st")!r}, params={{"lr": 0.1}}, seed=3):
    with rlbench.phase("gae"):
        torch.ones(3).sum()
    rlbench.record("eval_return", [10.0, 12.0], unit="return", direction="higher")
rlbench.record("loss", 0.5)
"""
    env = {**os.environ, "RLBENCH_STORE": str(tmp_path / "loose")}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=env)
    records = read_records(tmp_path / "st")
    by = {r.metric: r for r in records}
    assert by["eval_return"].samples == [10.0, 12.0] and by["eval_return"].direction == "higher"
    assert by["time/gae"].meta["layer"] == "advantage" and by["time/gae"].params == {"lr": 0.1}
    assert all(r.seed == 3 and r.benchmark == "my-run" and r.fingerprint["machine"]["cores"] for r in records)
    loose = read_records(tmp_path / "loose")
    assert [r.metric for r in loose] == ["loss"] and loose[0].fingerprint["software"]


AT_EXIT = """
import atexit, os, sys, time

import torch

def slow_exit():
    time.sleep(float(os.environ["EXIT_S"]))
    print("atexit done", flush=True)
    open("exited", "w").write(str(time.time()))

atexit.register(slow_exit)
net = torch.nn.Linear(4, 2)
with torch.no_grad():
    net(torch.zeros(1, 4))
"""


def test_the_report_is_written_while_the_script_exits_and_the_command_waits_for_it(tmp_path: Path, monkeypatch) -> None:
    # the records and the report need only the results the child wrote: they are made while the script's atexit work
    # and the interpreter's teardown run, and the command returns (and prints) only once the child has exited
    (tmp_path / "slow_exit.py").write_text(AT_EXIT, encoding="utf-8")
    monkeypatch.setenv("EXIT_S", "1.5")
    proc = run_cli(["profile", "--json", "--store", "st", "--", "python", "slow_exit.py"], cwd=tmp_path)
    returned = time.time()
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    exited = float((tmp_path / "exited").read_text())
    report = tmp_path / summary["report"]
    assert report.stat().st_mtime < exited - 1.0 < returned  # written during the 1.5 s exit, returned after it
    assert "atexit done" in proc.stderr  # the script's output at exit is whole, before the command's


def test_a_script_that_never_exits_after_its_run_is_ended_at_the_timeout_and_its_report_kept(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "slow_exit.py").write_text(AT_EXIT, encoding="utf-8")
    monkeypatch.setenv("EXIT_S", "600")
    t0 = time.monotonic()
    proc = run_cli(["profile", "--quiet", "--timeout", "6", "--store", "st", "--", "python", "slow_exit.py"], cwd=tmp_path)
    err = one_line_error(proc, code=1)
    assert "did not exit within --timeout after its run ended and was ended" in err, err
    assert time.monotonic() - t0 < 60 and not (tmp_path / "exited").exists()
    assert {r.metric for r in _records(tmp_path / "st")} >= {"wall_s", "profile/command_s"}
    assert list((tmp_path / "st").glob("*.md"))  # the report was written before the wait


# no torch: pairing runs and timing them needs none, and these tests start up to 8 runs of it (a second of sleep each,
# so a run's own time is far from the command's, at no CPU)
PAIRED = """
import os, sys, time
time.sleep(1.0)
mode = "profiled" if "rlbench" in sys.modules else "plain"
with open(os.environ["ORDER_FILE"], "a") as f:
    f.write(mode + "\\n")
if mode == "plain" and os.environ.get("FAIL_PLAIN"):
    sys.exit(3)
if mode == "plain" and os.environ.get("HANG_MARK"):
    open(os.environ["HANG_MARK"], "w").write(str(os.getpid()))
    import time
    time.sleep(600)
"""


def test_against_plain_pairs_each_repeat_with_a_plain_run_abba_and_reports_the_measured_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "paired.py").write_text(PAIRED, encoding="utf-8")
    order = tmp_path / "order.txt"
    monkeypatch.setenv("ORDER_FILE", str(order))
    options = ["profile", "--json", "--repeats", "4", "--against-plain", "--store", "st", "--report", "r.md", "--"]
    proc = run_cli([*options, "python", "paired.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # ABBA: profiled first in pairs 0 and 3, plain first in pairs 1 and 2
    pairs = ["profiled", "plain", "plain", "profiled", "plain", "profiled", "profiled", "plain"]
    assert order.read_text(encoding="utf-8").split() == pairs
    records = _records(tmp_path / "st")
    plain = {r.repeat: r for r in records if r.metric == "profile/plain_wall_s"}
    child = {r.repeat: r for r in records if r.metric == "profile/child_wall_s"}
    assert set(plain) == set(child) == {0, 1, 2, 3}
    assert [plain[k].meta["order"] for k in range(4)] == ["profiled first", "plain first", "plain first", "profiled first"]
    assert all(plain[k].samples[0] > 0 and child[k].samples[0] > 0 for k in range(4))
    summary = json.loads(proc.stdout)
    ratios = sorted(child[k].samples[0] / plain[k].samples[0] - 1 for k in range(4))
    assert summary["against_plain"] == pytest.approx((ratios[1] + ratios[2]) / 2)
    report = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "### Measured against the plain script (`--against-plain`)" in report
    assert "Median over 4 pairs" in report and "Fewer than four pairs" not in report
    assert "and the plain runs," in report
    own_s = next(r for r in records if r.metric == "profile/command_s").samples[0]
    whole = (sum(c.samples[0] for c in child.values()) + own_s) / sum(p.samples[0] for p in plain.values()) - 1
    said = f"(its 4 profiled runs and its own work) took **{100 * whole:+.1f}%** against the plain runs' time"
    assert said in report
    # the command's own work leaves the plain runs out: were they in it, it would be at least their sum (4 s of sleep)
    own = next(r for r in records if r.metric == "profile/command_s")
    assert 0 < own.samples[0] < sum(p.samples[0] for p in plain.values())


def test_a_failing_plain_run_is_one_line_and_the_profiled_repeat_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "paired.py").write_text(PAIRED, encoding="utf-8")
    monkeypatch.setenv("ORDER_FILE", str(tmp_path / "order.txt"))
    monkeypatch.setenv("FAIL_PLAIN", "1")
    options = ["profile", "--quiet", "--against-plain", "--store", "st", "--"]
    proc = run_cli([*options, "python", "paired.py"], cwd=tmp_path)
    err = one_line_error(proc, code=1)
    assert "the plain run beside repeat 0" in err and "exited 3 when run without rlbench" in err
    assert "1 finished repeats saved" in err
    records = _records(tmp_path / "st")
    assert {r.repeat for r in records} == {0} and not any(r.metric == "profile/plain_wall_s" for r in records)
    assert list((tmp_path / "st").glob("*-plain0.log"))  # the plain run's output is kept beside the repeat's


def test_sigterm_during_a_plain_run_ends_it_and_keeps_the_profiled_repeat(tmp_path: Path) -> None:
    (tmp_path / "paired.py").write_text(PAIRED, encoding="utf-8")
    mark = tmp_path / "pid"
    proc, err = _signal_once_marked(
        ["--against-plain", "--", "python", "paired.py"],
        tmp_path,
        {"ORDER_FILE": str(tmp_path / "order.txt"), "HANG_MARK": str(mark)},
        mark,
        signal.SIGTERM,
        "the plain run never started",
    )
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "1 of 1 repeats saved" in err
    records = _records(tmp_path / "st")
    assert {r.repeat for r in records} == {0} and not any(r.metric == "profile/plain_wall_s" for r in records)
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(int(mark.read_text()), 0)  # the plain run ended with the command
