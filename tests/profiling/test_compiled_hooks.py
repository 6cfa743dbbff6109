"""The compiled hooks (rlbench/profiling/_fastevent.c) against the Python wrappers they stand for."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rlbench.profiling import autohooks
from rlbench.profiling.session import Session, Settings
from tests.profiling.loops import SlowEnv, SlowNet, known_loop


def _use_python_hooks(monkeypatch, python: bool) -> None:
    if python:
        monkeypatch.setenv(autohooks.PURE_PYTHON_ENV, "1")
    else:
        monkeypatch.delenv(autohooks.PURE_PYTHON_ENV, raising=False)


def test_the_extension_is_built_and_used():
    # pip builds it wherever a C compiler is found (CI has one); without it the Python wrappers run, slower
    from rlbench.profiling import _fastevent  # noqa: F401

    assert autohooks.native_available()
    with Session(Settings(count_iteration=None, memory=False)) as s:
        assert type(torch.nn.Module.__call__).__name__ == "Event"
        assert type(torch.Tensor.numpy).__name__ == "Event"
        assert type(vars(SlowEnv)["step"]).__name__ == "Event"
        torch.zeros(2).numpy()
    assert torch.nn.Module.__call__ is torch.nn.Module._wrapped_call_impl  # put back
    events = {m.name: m for m in s.outcome.metrics()}["profile/events"]
    assert events.meta["hooks"] == "compiled"  # the records say which hooks measured them


def _attributor_calls(monkeypatch, python: bool, names: tuple[str, ...], loop) -> int:
    """How many times ``loop``, run under a session with the compiled or the Python hooks, called these methods of the
    attributor (each such call is a hooked call that left C)."""
    from rlbench.profiling.attribution import Attributor

    _use_python_hooks(monkeypatch, python)
    calls = []
    for name in names:
        original = getattr(Attributor, name)
        monkeypatch.setattr(Attributor, name, lambda self, *a, _f=original, **k: calls.append(1) or _f(self, *a, **k))
    with Session(Settings(count_iteration=None, memory=False)):
        loop()
    monkeypatch.undo()
    return len(calls)


def _extra_calls(monkeypatch, python: bool, names: tuple[str, ...], loop, few: int, more: int) -> int:
    """The attributor calls ``loop(more)`` makes beyond ``loop(few)`` (:func:`_attributor_calls`): what the extra
    iterations cost, the first iterations' calls (modules seen for the first time, memory marks) left out."""
    return _attributor_calls(monkeypatch, python, names, lambda: loop(more)) - _attributor_calls(
        monkeypatch, python, names, lambda: loop(few)
    )


def _structure(monkeypatch, python: bool, loop) -> tuple:
    _use_python_hooks(monkeypatch, python)
    # calls of one kind merge when the next comes within the merge gap: at the real 20 µs, whether two do depends on
    # the machine's load, and one run's merges can differ from the other's. A gap no call misses makes it exact.
    from rlbench.profiling import attribution, libraries

    for module in (attribution, autohooks, libraries):
        monkeypatch.setattr(module, "MERGE_GAP_S", 1e9)
    with Session(Settings(count_iteration=1, memory=True)) as s:  # memory marks: the compiled hooks skip them inline
        loop()
    r = s.outcome.attribution
    # each iteration's start: the agent steps before it and the phases its snapshot holds (every one is positive)
    marks = [(m.steps, list(m.excl), all(v >= 0 for v in m.excl.values())) for m in r.iterations]
    return (
        r.enters,
        r.merges,
        r.passthrough,
        r.steps,
        len(r.iterations),
        sorted(r.excl),
        r.counts,
        r.layers,
        r.mem_marks,
        marks,
    )


def _wrapped_envs_loop() -> None:
    env = gym.wrappers.TimeLimit(gym.wrappers.RecordEpisodeStatistics(SlowEnv()), 100)
    net = SlowNet()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    obs, _ = env.reset(seed=0)
    for _ in range(6):
        for _ in range(4):
            with torch.no_grad():
                logits = net(torch.as_tensor(obs).unsqueeze(0))
            obs, *_ = env.step(int(logits.argmax().item()))
        loss = net(torch.zeros(3, 4)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _minibatch_loop(minibatches: int = 6) -> None:
    """SB3's PPO update, shaped: several module calls per loss, ``.item()`` for logging inside the loss computation,
    then zero_grad, backward, clipping and the step (the cases the compiled hooks take inline while the training
    forward is open)."""
    env = SlowEnv()
    actor, critic = SlowNet(), SlowNet()
    opt = torch.optim.SGD([*actor.parameters(), *critic.parameters()], lr=0.1)
    obs, _ = env.reset(seed=0)
    for _ in range(6):
        for _ in range(4):
            with torch.no_grad():
                actor(torch.as_tensor(obs).unsqueeze(0))
            obs, *_ = env.step(0)
        for _ in range(minibatches):
            x = torch.zeros(3, 4)
            logits, values = actor(x), critic(x)
            clipped = (logits > 0).float().mean().item()
            loss = logits.sum() + values.sum() + clipped
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(actor.parameters(), 0.5)
            opt.step()


def _off_policy_loop(iterations: int = 8, target_calls: int = 1) -> None:
    """CleanRL's DQN, shaped: acting with grad on one env, a replay buffer found by shape (its sample converts to a
    tensor inside the label), a TD target under no_grad from an empty stack, the training forward, a polyak loop
    (its first copy right after the optimizer step). With ``target_calls`` > 1, CleanRL's SAC: several target calls
    in one no_grad block, and alpha's log-pi under no_grad right after the optimizer step."""
    import numpy as np

    class ReplayBuffer:  # defined while profiling: labelled when its class is built
        def __init__(self) -> None:
            self.data: list = []

        def add(self, x) -> None:
            self.data.append(x)

        def sample(self, n: int) -> torch.Tensor:
            return torch.as_tensor(np.zeros((n, 4), np.float32))

    envs = gym.vector.SyncVectorEnv([lambda: SlowEnv()])
    q, tq = SlowNet(), SlowNet()
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    rb = ReplayBuffer()
    obs, _ = envs.reset(seed=0)
    for i in range(iterations):
        action = q(torch.Tensor(obs)).argmax(1).numpy()
        next_obs, *_ = envs.step(action)
        rb.add(obs)
        obs = next_obs
        data = rb.sample(16)
        with torch.no_grad():  # SAC's: the next action's log-pi and two target critics in one block
            target = 1.0 + 0.99 * sum(tq(data).max(1)[0] for _ in range(target_calls))
        loss = (q(data).max(1)[0] - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if target_calls > 1:
            with torch.no_grad():  # SAC's alpha loss: the log-pi of the batch, a target after the optimizer step
                tq(data).mean()
        if i % 3 == 0:
            for tp, p in zip(tq.parameters(), q.parameters()):
                tp.data.copy_(0.5 * p.data + 0.5 * tp.data)
    envs.close()


def _sampling_policy_loop() -> None:
    """CleanRL's PPO rollout, shaped: an actor and a critic on the env's batch inside no_grad, a sampled action
    (Categorical.sample opens its own no_grad), its conversion while acting, then one update."""
    envs = gym.vector.SyncVectorEnv([lambda: SlowEnv() for _ in range(2)])
    actor, critic = SlowNet(), SlowNet()
    opt = torch.optim.SGD([*actor.parameters(), *critic.parameters()], lr=0.1)
    obs, _ = envs.reset(seed=0)
    for _ in range(6):
        for _ in range(4):
            x = torch.Tensor(obs)
            with torch.no_grad():
                action = torch.distributions.Categorical(logits=actor(x)).sample()
                critic(x)
            obs, *_ = envs.step(action.cpu().numpy())
        loss = actor(torch.zeros(3, 4)).sum() + critic(torch.zeros(3, 4)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.slow
@pytest.mark.parametrize(
    "loop",
    [known_loop, _wrapped_envs_loop, _minibatch_loop, _off_policy_loop, lambda: _off_policy_loop(8, 3), _sampling_policy_loop],
    ids=["vector-env-ppo-shape", "wrapped-env", "minibatches", "off-policy", "sac-shaped-target", "sampling-policy"],
)
def test_compiled_and_python_hooks_book_the_same_phases_merges_and_counts(monkeypatch, loop):
    compiled = _structure(monkeypatch, False, loop)
    python = _structure(monkeypatch, True, loop)
    assert compiled == python
    enters, _, _, steps, iterations, *_ = compiled
    assert steps > 0 and iterations in (6, 8) and "env/step" in enters


def _learner_loop() -> None:
    """A learner that steps no env (fed by a queue, a replay sample or a DDP rank): a no-grad target, the forward,
    backward and step, then the next batch's transfer; its iterations are its update cycles (Attributor.cycle_due),
    started in C and in Python alike."""
    import queue

    items: queue.Queue = queue.Queue()
    items.queue.extend(torch.zeros(3, 4) for _ in range(7))  # (filled as an actor would have, unhooked)
    net, target = SlowNet(), SlowNet()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(7):
        x = items.get()
        with torch.no_grad():
            y = target(x).max(1)[0]
        loss = (net(x).max(1)[0] - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()


@pytest.mark.slow
def test_a_learners_update_cycles_are_its_iterations_in_c_as_in_python(monkeypatch):
    compiled = _structure(monkeypatch, False, _learner_loop)
    python = _structure(monkeypatch, True, _learner_loop)
    assert compiled == python
    enters, _, _, steps, iterations, *_ = compiled
    # the first iteration starts at the first get (a consumer's loop), a cycle at the first event after an update
    # (the first target, after that get; then each update's loss.item()); 7 targets, none of them acting
    assert steps == 0 and iterations == 9 and "inference" not in enters and enters["train/target"] == 7, compiled


@pytest.mark.slow
def test_iterations_started_in_c_match_python_across_memory_marked_iterations(monkeypatch):
    # an off-policy loop that updates every step starts an iteration per env step: the compiled hooks start it inline
    # except where memory marks are due (the first MEMORY_FIRST iterations, then every MEMORY_EVERY-th), which
    # Python starts; 40 iterations cross the 32nd. Snapshots, steps and marks must be the Python hooks' own.
    from rlbench.profiling import _fastevent, attribution

    assert (_fastevent.MEMORY_FIRST, _fastevent.MEMORY_EVERY, _fastevent.MEMORY_SPARSE, _fastevent.MEMORY_ONLY) == (
        attribution.MEMORY_FIRST,
        attribution.MEMORY_EVERY,
        attribution.MEMORY_SPARSE,
        attribution.MEMORY_ONLY,
    )
    compiled = _structure(monkeypatch, False, lambda: _off_policy_loop(40))
    python = _structure(monkeypatch, True, lambda: _off_policy_loop(40))
    assert compiled == python
    marks = compiled[-1]
    assert len(marks) == 40 and [m[0] for m in marks] == list(range(40)) and all(m[2] for m in marks)
    assert compiled[8] > 0  # memory marks were taken (in the iterations Python starts)


@pytest.mark.slow
def test_memory_marks_thin_out_after_the_1024th_iteration_in_c_as_in_python(monkeypatch):
    # a long off-policy run takes marks in every 32nd iteration up to the 1,024th, then in every 1,024th: the
    # iterations Python starts for them thin out, and the compiled hooks start the others inline, as before
    from rlbench.profiling import attribution

    marked = [i for i in range(2100) if attribution.memory_marked(i)]
    assert marked[:3] == [0, 1, 32] and marked[-3:] == [992, 1024, 2048] and len(marked) == 2 + 31 + 2
    # the iterations Python starts, with marks on: none between the 1,030th and the 1,090th (two in 32 were before;
    # that C and Python start the same iterations with the same snapshots: the test above)
    from rlbench.profiling.attribution import Attributor

    def python_started(iterations: int) -> int:
        _use_python_hooks(monkeypatch, False)
        started = []
        original = Attributor._new_iteration
        monkeypatch.setattr(Attributor, "_new_iteration", lambda self, now: started.append(1) or original(self, now))
        with Session(Settings(count_iteration=None, memory=True)):
            _off_policy_loop(iterations)
        monkeypatch.undo()
        return len(started)

    assert python_started(1090) - python_started(1030) == 0


def _sb3_dqn_loop(steps: int) -> None:
    """SB3's DQN through ``learn()``: its collector label starts an iteration per env step, its ``predict`` label holds
    acting, its ``train`` label holds the replay sample, the TD target under no_grad and the update."""
    from stable_baselines3 import DQN

    model = DQN("MlpPolicy", "CartPole-v1", learning_starts=50, train_freq=1, batch_size=16, seed=0, device="cpu")
    model.learn(total_timesteps=steps)
    model.get_env().close()


@pytest.mark.slow
def test_sb3_dqn_rollout_labels_and_targets_stay_in_c_and_book_what_python_books(monkeypatch):
    # the collector's label that starts an iteration, and the TD target under SB3's `train` label, run in C past the
    # first iterations (they went to Python once per step); what they book is the Python hooks' own
    compiled = _structure(monkeypatch, False, lambda: _sb3_dqn_loop(240))
    python = _structure(monkeypatch, True, lambda: _sb3_dqn_loop(240))
    assert compiled == python
    enters, iterations = compiled[0], compiled[4]
    assert iterations >= 180 and enters["train/target"] >= 150 and enters["collect"] >= 200  # learning starts at 50

    names = ("enter", "enter_forward", "open_explicit", "close_explicit", "exit")
    extra_python = _extra_calls(monkeypatch, True, names, _sb3_dqn_loop, 100, 200)
    extra_compiled = _extra_calls(monkeypatch, False, names, _sb3_dqn_loop, 100, 200)
    assert extra_python >= 100 * 3  # per step: the collector's label, the target, and more
    # was 2 per step (the rollout label, the target), then about 1 (predict's label closing with acting inside it)
    assert extra_compiled <= 2, (extra_python, extra_compiled)


def _sb3_sac_loop(steps: int) -> None:
    """SB3's SAC through ``learn()``: its ``train`` label holds the replay sample, the actor's forward (the first thing
    in the label once the sample's label has closed), the target block, the critics' and the actor's updates, and
    the polyak update."""
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=30, batch_size=16, seed=0, device="cpu",
                policy_kwargs={"net_arch": [16]})  # fmt: skip
    model.learn(total_timesteps=steps)
    model.get_env().close()


@pytest.mark.slow
def test_sb3_sac_forward_inside_its_train_label_stays_in_c_and_books_what_python_books(monkeypatch):
    compiled = _structure(monkeypatch, False, lambda: _sb3_sac_loop(90))
    python = _structure(monkeypatch, True, lambda: _sb3_sac_loop(90))
    assert compiled == python
    enters = compiled[0]
    assert enters["train/forward"] >= 60 and enters["train/target"] >= 60 and enters["train/target_update"] >= 60

    names = ("enter", "enter_forward", "enter_acting", "open_explicit", "close_explicit", "exit")
    extra_python = _extra_calls(monkeypatch, True, names, _sb3_sac_loop, 70, 120)
    extra_compiled = _extra_calls(monkeypatch, False, names, _sb3_sac_loop, 70, 120)
    assert extra_python >= 50 * 3
    assert extra_compiled <= 2, (extra_python, extra_compiled)  # was about 1 per step: the forward's push


def test_acting_targets_labels_and_grad_blocks_run_in_c(monkeypatch):
    # past a loop's first iterations (memory marks, modules seen for the first time), acting, the env step after it,
    # a no_grad target from an empty stack, a replay label (and the transfer inside it), the grad-mode blocks and the
    # env step that starts an iteration stay in C: past the first iterations, only the target updates reach Python
    names = ("enter", "enter_forward", "enter_acting", "open_explicit", "close_explicit", "block_enter", "exit")

    extra_python = _extra_calls(monkeypatch, True, names, _off_policy_loop, 6, 12)
    extra_compiled = _extra_calls(monkeypatch, False, names, _off_policy_loop, 6, 12)
    assert extra_python >= 6 * 8  # acting, env step, 2 labels opened and closed, the transfer, the target, forward
    # a SAC-shaped loop: the target block's second and third calls continue the first in C (were 2 x 6 more), and
    # alpha's log-pi right after the optimizer step opens its target in C (was 6 more)
    sac_shaped = _extra_calls(monkeypatch, False, names, lambda n: _off_policy_loop(n, 3), 6, 12)
    assert sac_shaped == 0, sac_shaped
    # the polyak loop's copies (their first one opens the target update) were 2 more: each env step that starts an
    # iteration went to Python before that (8)
    assert extra_compiled == 0, extra_compiled


def test_a_raising_call_ends_its_phase_and_the_exception_goes_through(monkeypatch):
    _use_python_hooks(monkeypatch, False)

    class Boom(SlowEnv):
        def step(self, action):
            raise RuntimeError("env broke")

    env = Boom()
    with Session(Settings(count_iteration=None, memory=False)) as s:
        env.reset()
        for _ in range(3):
            with pytest.raises(RuntimeError, match="env broke"):
                env.step(0)
        torch.zeros(2).numpy()
    r = s.outcome.attribution
    assert r.enters["env/step"] + r.enters.get("env/reset", 0) >= 2
    assert r.enters["transfer"] == 1
    assert s.outcome.attribution.steps == 0  # a step that raised took none


def test_an_optimizer_class_first_used_while_profiling_is_wrapped_by_torch_once():
    class FreshSGD(torch.optim.Optimizer):  # torch wraps a class's step at its first instance: here, in the profile
        def __init__(self, params, lr):
            super().__init__(params, {"lr": lr})

        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    p.data.add_(1.0)

    net = torch.nn.Linear(2, 1)
    for _ in range(3):
        with Session(Settings(count_iteration=None, memory=False)):
            FreshSGD(net.parameters(), lr=0.1).step()
        step = vars(FreshSGD)["step"]
        assert not hasattr(step, "__rlbench_wrapped__") and step.hooked
        FreshSGD(net.parameters(), lr=0.1)
        assert vars(FreshSGD)["step"] is step  # torch saw its mark: no second wrapper


def test_the_compiled_clock_is_the_one_python_reads():
    import time

    assert autohooks.native_available()
    with Session(Settings(count_iteration=None, memory=False)) as s:
        before = time.perf_counter()
        torch.zeros(2).numpy()  # the hook reads the clock in C (CLOCK_MONOTONIC directly, on Linux)
        after = time.perf_counter()
        assert before <= s.attributor.t_exit <= after


@pytest.mark.slow
def test_torch_dynamo_first_imported_inside_a_profile_accepts_the_tensor_constructor_hook(tmp_path):
    # torch.compile's polyfill registry checks that Tensor.__new__ is a function when torch._dynamo is first imported,
    # which an optimizer's first step does: inside the profile, where the compiled hook stands in (as a builtin)
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from rlbench.profiling.session import Session, Settings\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "with Session(Settings(count_iteration=None, memory=False)) as s:\n"
        "    import torch._dynamo\n"
        "    x = torch.Tensor([1.0, 2.0])\n"
        "    print(type(torch.Tensor.__new__).__name__, float(x.sum()))\n"
        "print(s.outcome.attribution.enters['transfer'])\n"
    )
    # run outside the checkout: `python -c` puts the working directory first on sys.path, and a checkout's rlbench/
    # has no built extension where the package was installed (not editable) from it
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["builtin_function_or_method", "3.0", "1"]


def test_memory_marks_send_only_their_own_transitions_to_python(monkeypatch):
    # marks act on each top-level phase's first occurrences of an iteration; past those, the compiled hooks keep
    # their inline transition (the first iteration marks memory all through)
    import numpy as np

    from rlbench.profiling.attribution import MEMORY_MARKS, Attributor

    def marks_and_enters(python: bool) -> tuple[int, int, dict]:
        _use_python_hooks(monkeypatch, python)
        calls = []
        original = Attributor.enter
        monkeypatch.setattr(Attributor, "enter", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
        env, t = SlowEnv(), torch.zeros(2)
        with Session(Settings(count_iteration=None, memory=True)) as s:
            env.reset()
            for _ in range(60):
                env.step(0)
                np.zeros(2).sum()
                t.numpy()
                np.zeros(2).sum()
        monkeypatch.setattr(Attributor, "enter", original)
        r = s.outcome.attribution
        return r.mem_marks, len(calls), r.enters

    marks, enters_compiled, booked = marks_and_enters(False)
    marks_python, enters_python, booked_python = marks_and_enters(True)
    assert (marks, booked) == (marks_python, booked_python)
    assert marks >= 2 * 2 * MEMORY_MARKS  # a mark each side of the first occurrences of both phases
    assert enters_python >= 100 and enters_compiled <= 4 * MEMORY_MARKS


def test_the_minibatch_cases_run_in_c_while_the_training_forward_is_open(monkeypatch):
    # past the first module call of a loss, its other module calls, a transfer inside it and the optimizer call that
    # ends it stay in C: Attributor.enter and enter_forward run once per minibatch at most, not once per call
    names = ("enter", "enter_forward")
    extra_python = _extra_calls(monkeypatch, True, names, _minibatch_loop, 2, 7)  # 30 more minibatches (6 iterations)
    extra_compiled = _extra_calls(monkeypatch, False, names, _minibatch_loop, 2, 7)
    assert extra_python >= 30 * 4  # two forwards, the .item(), zero_grad: each a call into the attributor
    assert extra_compiled <= 30 * 1  # the first forward of each loss only


@pytest.mark.parametrize("python", [False, True], ids=["compiled", "python"])
def test_iteration_snapshots_are_kept_packed_and_unpack_to_each_boundarys_totals(monkeypatch, python):
    # an off-policy loop starts an iteration per env step: each snapshot of the running totals is kept as packed C
    # doubles in the totals' key order (8 bytes a phase), not as a dict of shared floats (about 600 bytes an iteration
    # with nine phases, measured), in the compiled hooks' inline iterations and in Python's alike
    _use_python_hooks(monkeypatch, python)
    with Session(Settings(count_iteration=None, memory=False)) as s:
        _off_policy_loop(40)
        a = s.attributor
        snaps, keys = list(a.iteration_excl), list(a.excl)
    assert len(snaps) == 40 and all(type(b) is bytes for b in snaps)
    assert all(len(b) % 8 == 0 and len(b) // 8 <= len(keys) for b in snaps) and len(snaps[-1]) // 8 == len(keys)
    marks = s.outcome.attribution.iterations
    assert [len(m.excl) for m in marks] == [len(b) // 8 for b in snaps]
    # each snapshot's keys are the totals' first keys; its totals grow from one boundary to the next
    assert all(list(m.excl) == keys[: len(m.excl)] for m in marks)
    assert all(all(m.excl.get(k, 0.0) <= n.excl[k] for k in n.excl) for m, n in zip(marks, marks[1:]))
    assert all(v >= 0 for m in marks for v in m.excl.values()) and sum(marks[-1].excl.values()) > 0
