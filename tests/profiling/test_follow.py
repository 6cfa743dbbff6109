"""`rlbench profile` follows every Python process a script starts (rlbench.profiling.follow): spawned and forked
multiprocessing workers, subprocesses of Python, vector-env workers; each with its role and its own phases, merged into
role records and the report's section on who waits on whom. And the faults: children that crash, exit, hang, are
killed, daemonize, run another program or lose their environment; 64 of them; SIGTERM. The scripts step gymnasium
envs and time `rlbench.phase` blocks, without torch: what is followed does not depend on it, and CI runs them fast."""

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

ACTORS = """
import multiprocessing as mp
import time
import gymnasium as gym
import rlbench

def actor(q, seed):
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    for t in range(200):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
        q.put(t)
    q.put(None)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue(maxsize=8)
    procs = [ctx.Process(target=actor, args=(q, i)) for i in range(2)]
    for p in procs:
        p.start()
    done = 0
    while done < len(procs):
        item = q.get()
        if item is None:
            done += 1
            continue
        with rlbench.phase("update"):  # the learner's work: 2 ms per item, far slower than an actor's env step
            end = time.perf_counter() + 0.002
            while time.perf_counter() < end:
                pass
    for p in procs:
        p.join()
"""


def _profile(tmp_path: Path, script: str, *options: str, timeout: float = 240) -> tuple[dict, list, str]:
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    proc = run_cli(["profile", "--json", *options, "--store", "st", "--", "python", "train.py"], cwd=tmp_path, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    records = read_records(tmp_path / "st")
    report = Path(out["report"]) if Path(out["report"]).is_absolute() else tmp_path / out["report"]
    return out, records, report.read_text(encoding="utf-8")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_spawned_actors_are_followed_with_their_role_and_the_report_names_the_bottleneck(tmp_path):
    out, records, report = _profile(tmp_path, ACTORS)
    roles = out["roles"]
    assert set(roles) == {"main", "actor"}, roles
    actor = roles["actor"]
    assert len(actor["pids"]) == 2 and actor["startup_s"] > 0  # a spawned worker re-imports the script first
    assert actor["phases"]["env/step"] > 0 and actor["phases"]["wait/queue"] > 0, actor
    assert roles["main"]["phases"]["update"] > 0 and roles["main"]["phases"]["wait/queue"] >= 0
    # records: a role's every record carries its role and pid; the main process's main thread keeps none
    role_records = [r for r in records if r.meta.get("role") == "actor"]
    assert role_records and all(isinstance(r.meta.get("pid"), int) for r in role_records)
    assert [r for r in records if r.metric == "wall_s" and "role" not in r.meta]  # the main thread's, as before
    waits = next(r for r in role_records if r.metric == "time/wait/queue")
    assert any(c["side"] == "put" and c["other"] == ["main"] for c in waits.meta["channels"]), waits.meta
    # the actors wait on the full queue the learner drains slowly: the verdict starts from them, waiting on main
    assert "## " in report and "Roles: who waits on whom" in report
    verdict = report[report.find("Roles: who waits on whom") :].split("\n")[2]
    assert verdict.startswith("**actor** waited") and ", on main;" in verdict, verdict
    assert roles["actor"]["wait_s"] / roles["actor"]["steady_s"] > 0.5, roles["actor"]
    assert not list(tmp_path.glob("st/*follow*"))  # the collection folder lived in the repeat's temporary folder


@pytest.mark.slow
def test_forked_pool_workers_and_a_python_subprocess_are_followed(tmp_path):
    script = """
import multiprocessing as mp
import subprocess
import sys
import gymnasium as gym

def work(seed):
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    for _ in range(300):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    return seed

if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as pool:
        print(pool.map(work, range(4)))
    subprocess.run([sys.executable, "child.py"], check=True)
"""
    (tmp_path / "child.py").write_text(
        "import gymnasium as gym\nenv = gym.make('CartPole-v1')\nenv.reset(seed=0)\n"
        "for _ in range(100):\n    env.step(0)[2] and env.reset()\n",
        encoding="utf-8",
    )
    out, records, _ = _profile(tmp_path, script)
    roles = out["roles"]
    assert "pool-worker" in roles and "child" in roles, roles
    assert roles["pool-worker"]["phases"]["env/step"] > 0 and len(roles["pool-worker"]["pids"]) == 2
    assert roles["child"]["phases"]["env/step"] > 0
    steps = {r.meta.get("role"): r.samples[0] for r in records if r.metric == "env_steps" and r.meta.get("role")}
    assert steps["child"] == 100  # its agent steps, every one
    processes = next(r for r in records if r.metric == "profile/processes")
    assert processes.meta["unreported"] == [], processes.meta


@pytest.mark.slow
def test_a_vector_envs_step_splits_into_its_workers_env_time_the_straggler_and_the_rest(tmp_path):
    script = """
import gymnasium as gym
envs = gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
envs.reset(seed=0)
for _ in range(300):
    envs.step(envs.action_space.sample())
envs.close()
"""
    out, records, report = _profile(tmp_path, script)
    assert len(out["roles"]["env-worker"]["pids"]) == 2
    split = next(r for r in records if r.metric == "profile/env_workers").meta
    assert split["workers"] == 2 and split["commands"] >= 300, split
    assert split["own_s"] > 0 and split["straggler_s"] >= 0 and split["rest_s"] >= 0
    assert split["own_s"] + split["straggler_s"] <= split["main_env_s"] * 1.05, split  # inside the main loop's step
    assert "The vector env's step, split." in report
    worker = next(r for r in records if r.meta.get("role") == "env-worker" and r.metric == "time/wait/pipe")
    assert worker.meta["channels"][0]["other"] == ["main"]  # a worker's pipe: its parent's commands


def test_no_follow_profiles_the_scripts_own_process_only(tmp_path):
    script = """
import multiprocessing as mp
def f(x):
    return x
if __name__ == "__main__":
    with mp.get_context("fork").Pool(1) as pool:
        pool.map(f, range(3))
"""
    out, records, _ = _profile(tmp_path, script, "--no-follow")
    assert "roles" not in out and not any(r.meta.get("role") for r in records)


FAULTS = """
import os, signal, subprocess, sys, time
py = sys.executable
procs = []
procs.append(subprocess.Popen([py, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]))
procs.append(subprocess.Popen([py, "-c", "import os; os._exit(3)"]))
victim = subprocess.Popen([py, "-c", "import time; time.sleep(60)"])
procs.append(subprocess.Popen([py, "-c", "import time; time.sleep(3)"], env={}))  # no environment: not followed
procs.append(subprocess.Popen([py, "-c", "import time; time.sleep(0.5)"], cwd="/"))  # another working directory
hung = subprocess.Popen(["sleep", "60"])  # another program, left running
if os.fork() == 0:  # a daemon: double fork, its own session, then it sleeps on
    os.setsid()
    if os.fork() == 0:
        open("daemon.pid", "w").write(str(os.getpid()))
        time.sleep(60)
        os._exit(0)
    os._exit(0)
for n in range(64):  # 64 children at once
    if os.fork() == 0:
        os._exit(0)
for _ in range(64):
    os.wait()
time.sleep(1.5)
victim.kill()
for p in procs:
    p.wait()
open("pids.txt", "w").write(" ".join(str(p.pid) for p in [*procs, victim, hung]))
"""


@pytest.mark.slow
def test_children_that_crash_exit_are_killed_daemonize_or_run_elsewhere_are_named_and_none_is_left(tmp_path):
    _, records, report = _profile(tmp_path, FAULTS, "--quiet", timeout=300)
    segv, exited, stripped, elsewhere, victim, hung = (int(p) for p in (tmp_path / "pids.txt").read_text().split())
    meta = next(r for r in records if r.metric == "profile/processes").meta
    unreported = {p["pid"] for p in meta["unreported"]}
    not_followed = {p["pid"] for p in meta["not_followed"]}
    assert {segv, victim} <= unreported, meta["unreported"]  # joined, then died before writing anything
    assert stripped in not_followed and hung in not_followed, meta["not_followed"]  # seen, never joined
    followed = {r.meta.get("pid") for r in records if r.meta.get("role")}
    assert exited in followed and elsewhere in followed  # os._exit writes first; another cwd changes nothing
    assert meta["followed"] >= 64 + 2, meta["followed"]  # the 64 forks too
    assert "joined and never reported" in report and "seen but not followed" in report
    daemon = int((tmp_path / "daemon.pid").read_text())
    time.sleep(0.5)
    assert not _alive(daemon) and not _alive(hung), "a process outlived the profile"


@pytest.mark.slow
def test_sigterm_keeps_the_childrens_finished_work_and_leaves_no_process(tmp_path):
    script = """
import multiprocessing as mp, os, time
import rlbench

def worker(i):
    with rlbench.phase("work"):
        time.sleep(0.2)
    open(f"ready{i}", "w").close()
    while True:
        with rlbench.phase("work"):
            time.sleep(0.05)

if __name__ == "__main__":
    ps = [mp.get_context("spawn").Process(target=worker, args=(i,)) for i in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
"""
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    cmd = [sys.executable, "-m", "rlbench", "profile", "--quiet", "--store", "st", "--", "python", "train.py"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "as far as it ran" in err, err
    records = read_records(tmp_path / "st")
    workers = [r for r in records if r.meta.get("role") == "worker" and r.metric == "time/work"]
    assert len(workers) == 2 and all(r.meta["run_s"] > 0.2 for r in workers), workers  # their finished work is kept
    pids = {r.meta["pid"] for r in workers}
    time.sleep(0.5)
    assert not any(_alive(p) for p in pids)
    assert not [d for d in Path("/tmp").glob(f"rlbench-profile-{proc.pid}-*")]  # no temporary folder left


def test_a_child_that_joins_costs_little_start_up(tmp_path):
    """What joining adds to a child's start-up, against the same child started without the profile's environment:
    the start-up hook imports rlbench's hooks and installs them before the script (not a timed benchmark; a bound
    that catches a hook importing something heavy, measured in the report of suites/scripts/follow_cost.py)."""
    from rlbench.profiling.follow import prepare
    from rlbench.profiling.session import Settings

    env = {**os.environ, **prepare(tmp_path / "follow", vars(Settings()), os.environ.get("PYTHONPATH", ""))}
    probe = (
        "import sys; print(*(m in sys.modules for m in ('rlbench.profiling.follow', 'torch', 'numpy', "
        "'multiprocessing', 'concurrent.futures', 'importlib.abc')))"
    )
    joined = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    # joined, without importing torch, numpy or what it hooks only once the script imports it
    assert joined.stdout.split() == ["True", "False", "False", "False", "False", "False"], joined
    assert list((tmp_path / "follow").glob("start-*.json"))
    # nor at its end: a process that never imported numpy writes its raw totals, which the parent makes metrics of
    from rlbench.profiling.roles import collect

    [written] = [json.loads(p.read_text()) for p in (tmp_path / "follow").glob("proc-*.json")]
    assert written["threads"][0]["metrics"] == [] and written["threads"][0]["raw"]["sched"][0] > 0, written
    [process] = collect(tmp_path / "follow").processes
    metrics = {m["name"]: m for m in process["threads"][0]["metrics"]}
    assert metrics["wall_s"]["samples"][0] > 0 and "profile/cpu_s" in metrics, sorted(metrics)


def test_a_module_two_hooks_wait_for_is_patched_by_both(tmp_path, monkeypatch):
    """Two watchers of one module not imported yet (the follower's and the session's) each patch it, once."""
    from rlbench.profiling.autohooks import PostImport

    (tmp_path / "rlb_watched.py").write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[str] = []
    first = PostImport(None, {"rlb_watched": ("VALUE", lambda _, m: seen.append("first"))}, "x").watch()
    second = PostImport(None, {"rlb_watched": ("VALUE", lambda _, m: seen.append("second"))}, "x").watch()
    try:
        import rlb_watched  # noqa: F401

        assert sorted(seen) == ["first", "second"]
        assert first not in sys.meta_path and second not in sys.meta_path  # nothing left to watch: gone
    finally:
        first.remove()
        second.remove()
        sys.modules.pop("rlb_watched", None)


DDP = """
import gymnasium as gym
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
torch.set_num_threads(1)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
obs, _ = envs.reset(seed=dist.get_rank())
for it in range(4):
    for t in range(8):
        with torch.no_grad():
            logits = model.module(torch.as_tensor(obs))
        CHECK
        obs, *_ = envs.step(logits.argmax(-1).numpy())
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_ab_gates_a_ranks_own_counter_under_torchrun(tmp_path):
    """`rlbench ab ... -- profile -- torchrun --nproc-per-node 2 train.py` gating one rank's metric: a host sync added
    to rank 0's acting is a FAIL of ``syncs/iteration@rank-0`` (a counter: exact, one round decides)."""
    from tests.cli.cli_helpers import run_cli_together

    def commit(message: str) -> None:
        subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
        subprocess.run(
            ["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", message], cwd=tmp_path, check=True
        )

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "train.py").write_text(DDP.replace("CHECK", "pass"), encoding="utf-8")
    commit("ddp")
    check = "if dist.get_rank() == 0: assert float(logits.abs().max()) < 1e6"
    (tmp_path / "train.py").write_text(DDP.replace("CHECK", check), encoding="utf-8")
    commit("rank 0 checks every step")
    gate = ["--rounds", "1", "--fail", "syncs/iteration@rank-0:0%", "--fail", "syncs/iteration@rank-1:0%", "--json", "--"]
    profile = ["profile", "--count-ops", "--", "torchrun", "--nproc-per-node", "2", "train.py"]
    slow, same = run_cli_together(
        [["ab", "HEAD~1", "HEAD", *gate, *profile], ["ab", "HEAD", "HEAD", *gate, *profile]], cwd=tmp_path, timeout=600
    )
    assert slow.returncode == 1, slow.stderr[-3000:]
    verdicts = {c["metric"]: c["verdict"] for c in json.loads(slow.stdout)["checks"]}
    assert verdicts == {"syncs/iteration@rank-0": "FAIL", "syncs/iteration@rank-1": "PASS"}, slow.stdout[-2000:]
    assert same.returncode == 0, same.stderr[-3000:]


def test_sigterm_during_a_flush_that_holds_its_lock_is_delivered_after_the_write_not_a_deadlock(tmp_path):
    """A pool's terminate() reaches a worker as the worker flushes at its normal end: the handler runs in the thread
    that holds the flush's lock. It must not wait for that lock (the worker would hang, and the pool's join with it,
    and the profiled script never ends): the signal is kept and delivered once the result is written."""
    code = f"""
import os, signal, sys, threading
from pathlib import Path
from rlbench.profiling import follow

class Session:
    attributor = None
    threads = None

folder = Path({str(tmp_path)!r})
f = follow.Follower(folder, Session())
follow.Follower.current = f
follow.process_result = lambda *a, **k: {{"pid": os.getpid()}}
follow._sigterm_flushes()
with f.lock:  # the flush has taken its lock and not yet said it is writing: SIGTERM arrives now
    alarm = threading.Timer(5.0, lambda: os._exit(3))  # a deadlock exits 3
    alarm.start()
    os.kill(os.getpid(), signal.SIGTERM)
    assert f.signalled == signal.SIGTERM, f.signalled
    alarm.cancel()
f.flush("ok", 0)  # ... the flush goes on, writes, then dies by the signal kept
os._exit(4)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert list(tmp_path.glob("proc-*.json")), proc.stderr  # the result was written before it died
