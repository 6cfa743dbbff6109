"""Every thread attributed on its own (rlbench.profiling.threads), and the waits between them (rlbench.profiling.waits):
an actor thread and a learner thread each book their own phases and rhythm, through the compiled hooks and the Python
ones alike."""

from __future__ import annotations

import concurrent.futures
import math
import os
import queue
import threading

import gymnasium as gym
import pytest
import torch

import rlbench
from rlbench.profiling.autohooks import PURE_PYTHON_ENV
from rlbench.profiling.session import Session, Settings
from rlbench.profiling.waits import PARTICIPANTS
from tests.profiling.loops import SlowEnv, SlowNet, spin

MS = 1e-3


@pytest.fixture(autouse=True, params=["compiled", "python"])
def hooks(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    else:
        monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield request.param
    torch.set_num_threads(n)


def _session() -> Session:
    return Session(Settings(count_iteration=None, memory=False))


def _actor_learner(steps: int = 40, batch: int = 8):
    """An actor thread steps an env and acts, putting each transition in a bounded queue; the learner (the calling
    thread) takes them, and every ``batch`` items computes a no-grad target and updates."""
    items: queue.Queue = queue.Queue(maxsize=4)
    policy, net, target = SlowNet(forward_s=0.5 * MS), SlowNet(forward_s=0.5 * MS), SlowNet(forward_s=0.5 * MS)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def actor() -> None:
        env = SlowEnv(1 * MS)
        obs, _ = env.reset(seed=0)
        for _ in range(steps):
            with torch.no_grad():
                action = policy(torch.as_tensor(obs).unsqueeze(0)).argmax(1).item()
            obs, *_ = env.step(action)
            items.put(obs)
        items.put(None)

    t = threading.Thread(target=actor, name="actor")
    t.start()
    got = []
    while (item := items.get()) is not None:
        got.append(item)
        if len(got) % batch:
            continue
        x = torch.zeros(batch, 4)
        with torch.no_grad():
            y = target(x).max(1)[0]
        loss = (net(x).max(1)[0] - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    t.join()
    return t


def test_an_actor_thread_and_a_learner_each_book_their_own_phases_and_rhythm():
    with _session() as s:
        _actor_learner()
    learner = s.outcome.attribution
    (actor,) = s.outcome.threads
    assert actor.role == "actor" and actor.name == "actor"
    a = actor.attribution
    # the actor: its env steps, its acting, and waiting on the full queue; one iteration per item (its rhythm)
    assert a.enters["env/step"] == 40 and a.steps == 40, a.enters
    assert a.excl["env/step"] >= 40 * 1 * MS * 0.9 and a.excl["inference"] >= 40 * 0.5 * MS * 0.9, a.excl
    assert a.layers["wait/queue"] == "wait" and "train/forward" not in a.enters
    assert len(a.iterations) >= 39, len(a.iterations)
    # the learner: no env, so its no-grad target is a target (not acting), and its iterations are its update cycles
    assert "env/step" not in learner.enters and "inference" not in learner.enters, learner.enters
    assert learner.enters["train/target"] >= 4 and learner.enters["train/backward"] == 5, learner.enters
    assert learner.excl["wait/queue"] > 0 and learner.layers["wait/queue"] == "wait"
    assert len(learner.iterations) >= 4, len(learner.iterations)
    assert learner.excl.get("wait/join", 0.0) >= 0.0


def test_each_wait_names_its_channel_and_the_sides_that_used_it():
    with _session() as s:
        _actor_learner(steps=16)
    learner = s.outcome.attribution
    (actor,) = s.outcome.threads
    [(key, side)] = [k for k in learner.channels if k[1] == "get"]
    assert key.startswith("queue:") and learner.channels[(key, side)][1] >= 16
    assert (key, "put") in actor.attribution.channels
    assert PARTICIPANTS[key]["put"] == {actor.ident} and PARTICIPANTS[key]["get"] == {learner.thread}


def test_a_future_waited_on_names_the_thread_that_set_its_result():
    go = threading.Event()

    def work() -> None:
        go.wait()  # (the worker starts spinning as result() is called, not before, however busy the machine)
        spin(20 * MS)

    with _session() as s, concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(work)
        go.set()
        future.result()
    r = s.outcome.attribution
    assert r.excl["wait/future"] >= 5 * MS, r.excl
    [(key, side)] = [k for k in r.channels if k[1] == "result"]
    assert key.startswith(f"thread:{os.getpid()}:") and side == "result"
    assert PARTICIPANTS[key]["set"] == {int(key.rsplit(":", 1)[1])}


def test_a_phase_and_a_role_named_in_another_thread_are_that_threads():
    def work() -> None:
        rlbench.role("learner")
        with rlbench.phase("gae"):
            spin(5 * MS)

    with _session() as s:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    (thread,) = s.outcome.threads
    assert thread.role == "learner" and thread.attribution.enters == {"gae": 1}
    assert thread.attribution.excl["gae"] >= 5 * MS * 0.9
    assert "gae" not in s.outcome.attribution.enters


def test_threads_that_reuse_an_ident_are_reported_apart():
    def work(n: int) -> None:
        with rlbench.phase(f"step{n}"):
            pass

    with _session() as s:
        for n in range(3):  # each starts after the last ended: the OS hands out the same ident again
            t = threading.Thread(target=work, args=(n,), name=f"worker-{n}")
            t.start()
            t.join()
    names = sorted(tuple(t.attribution.enters) for t in s.outcome.threads)
    assert names == [("step0",), ("step1",), ("step2",)], names
    assert {t.role for t in s.outcome.threads} == {"worker"}  # numbered threads of one kind: one role


def test_a_thread_stepping_an_env_in_a_vector_env_counts_its_agent_steps():
    def collect() -> None:
        envs = gym.vector.SyncVectorEnv([lambda: SlowEnv(0.0) for _ in range(3)])
        envs.reset(seed=0)
        for _ in range(5):
            envs.step(envs.action_space.sample())

    with _session() as s:
        t = threading.Thread(target=collect, name="collector")
        t.start()
        t.join()
    (thread,) = s.outcome.threads
    assert thread.attribution.steps == 15 and thread.attribution.enters["env/step"] == 5, thread.attribution.enters


def test_role_refuses_a_name_it_could_not_key_records_by():
    for bad in ("", "learner:1", "a b", "-x", "x" * 65, 3):
        with pytest.raises(ValueError, match=r"rlbench\.role"):
            rlbench.role(bad)  # type: ignore[arg-type]


def test_a_session_opened_in_another_thread_reports_that_thread(tmp_path):
    from rlbench.results.store import read_records

    def actor() -> None:
        with rlbench.session("actor", store=tmp_path):
            env = SlowEnv(1 * MS)
            env.reset(seed=0)
            for _ in range(5):
                env.step(0)

    with _session():
        t = threading.Thread(target=actor)
        t.start()
        t.join()
    records = read_records(tmp_path)
    steps = {r.metric: r.samples[0] for r in records}
    assert {r.benchmark for r in records} == {"actor"} and steps["env_steps"] == 5
    assert "time/env/step" in steps and "time/wait/join" not in steps  # the actor thread's, not the main thread's


def test_a_job_whose_main_thread_takes_no_steps_counts_its_roles_steps():
    """A learner fed by actors (or torchrun's launcher, a Ray driver): the job's agent steps and SPS are the sums over
    the roles that stepped, each over its own time; env workers' steps are their vector env's, counted already."""
    from rlbench.profiling.roles import job_steps
    from rlbench.results.metrics import ENV_STEPS, SPS, SPS_STEADY, Metric

    def role(name: str, pid: int, steps: float, sps: float, thread: str | None = None) -> list[Metric]:
        meta = {"role": name, "pid": pid, **({"thread": thread} if thread else {})}
        return [
            Metric(ENV_STEPS, "steps", "none", [steps], meta=dict(meta)),
            Metric(SPS, "steps/s", "higher", [sps], meta=dict(meta)),
            Metric(SPS_STEADY, "steps/s", "higher", [sps * 1.1], meta=dict(meta)),
        ]

    roles = role("actor", 1, 100, 50.0, "actor") + role("actor", 2, 60, 30.0) + role("env-worker", 3, 100, 50.0)
    main = [
        Metric(ENV_STEPS, "steps", "none", [0.0]),
        Metric(SPS, "steps/s", "higher", [math.nan]),
        Metric(SPS_STEADY, "steps/s", "higher", [math.nan]),
    ]
    job_steps(main, roles)
    got = {m.name: m.samples[0] for m in main}
    assert got == {ENV_STEPS: 160.0, SPS: 80.0, SPS_STEADY: pytest.approx(88.0)}
    assert main[0].meta["from_roles"] == ["actor"]
    stepping = [Metric(ENV_STEPS, "steps", "none", [5.0]), Metric(SPS, "steps/s", "higher", [9.0])]
    job_steps(stepping, roles)  # a main thread that stepped keeps its own
    assert [m.samples[0] for m in stepping] == [5.0, 9.0] and "from_roles" not in stepping[0].meta
