"""The pipeline's parts alone: the bandit, flat weights, the generator, the scorer, the replay, and GRPO learning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlbench.components.pipeline.policy import FlatPolicy, hidden_for_mb, param_count
from rlbench.components.pipeline.replay import VersionWeightedReplay
from rlbench.components.pipeline.roles import Generator, Learner, Scorer
from rlbench.components.pipeline.slices import TrajectorySlice
from rlbench.components.pipeline.task import BanditTask
from rlbench.components.pipeline.timeline import Timeline


def test_the_bandit_rewards_exactly_the_best_action():
    task = BanditTask(4, 5, seed=3)
    states = task.states(100, np.random.default_rng(0))
    best = np.argmax(states @ task.weights.T, axis=1)
    assert task.rewards(states, best).tolist() == [1.0] * 100
    assert task.rewards(states, (best + 1) % 5).tolist() == [0.0] * 100
    grouped = np.stack([best, (best + 1) % 5], axis=1)
    assert task.rewards(states, grouped).tolist() == [[1.0, 0.0]] * 100
    assert task.chance == pytest.approx(0.2)


def test_flat_weights_are_the_parameters_and_travel_as_one_array():
    a, b = FlatPolicy(8, 4, hidden=16, seed=1), FlatPolicy(8, 4, hidden=16, seed=2)
    assert a.flat.numel() == param_count(8, 4, 16, 2) and a.nbytes == 4 * a.flat.numel()
    x = torch.randn(5, 8)
    assert not torch.allclose(a.net(x), b.net(x))
    b.load(a.weights())
    assert torch.equal(a.net(x), b.net(x))  # the copy is the whole policy
    with torch.no_grad():
        a.net[0].weight.add_(1.0)  # parameters are views into the flat buffer
    assert a.weights()[0] == pytest.approx(b.weights()[0] + 1.0)
    with pytest.raises(ValueError, match="do not fit"):
        b.load(np.zeros(3, np.float32))


@pytest.mark.parametrize("mb", [1, 10, 100])
def test_policy_size_for_a_payload(mb):
    h = hidden_for_mb(mb, 8, 8)
    assert abs(param_count(8, 8, h, 2) * 4 / 2**20 - mb) / mb < 0.01


def test_generator_samples_groups_with_their_log_probs():
    task = BanditTask(8, 8)
    policy = FlatPolicy(8, 8, hidden=32)
    s = Generator(task, policy, group_size=6, batch_states=10, index=3, seed=0).generate()
    assert s.actions.shape == (10, 6) and s.logps.shape == (10, 6) and s.generator == 3 and s.samples == 60
    expected = policy.log_probs(torch.from_numpy(s.states)).gather(1, torch.from_numpy(s.actions))
    assert np.allclose(s.logps, expected.detach().numpy())
    scored = Scorer(task).score(s)
    assert np.array_equal(scored.rewards, task.rewards(s.states, s.actions))


def test_replay_favours_newer_versions_in_proportion():
    replay = VersionWeightedReplay(capacity=3, seed=0)
    for v in range(5):  # only the last three stay
        replay.add(TrajectorySlice(v, *(np.zeros((1, 1)),) * 4))
    assert [s.version for s in replay.items] == [2, 3, 4]
    assert replay.weights() == pytest.approx([3 / 12, 4 / 12, 5 / 12])
    drawn = [s.version for s in replay.sample(12_000)]
    assert [drawn.count(v) / 12_000 for v in (2, 3, 4)] == pytest.approx([3 / 12, 4 / 12, 5 / 12], abs=0.02)
    with pytest.raises(ValueError, match="empty"):
        VersionWeightedReplay().sample(1)


@pytest.mark.slow
def test_grpo_learns_the_bandit_from_chance_to_090_greedy():
    """The learner, fed by a generator with fresh weights every update, learns the best action (fixed seeds)."""
    task = BanditTask(8, 8, seed=0)
    policy, gen_policy = FlatPolicy(8, 8, seed=0), FlatPolicy(8, 8, seed=0)
    gen = Generator(task, gen_policy, group_size=8, batch_states=64, seed=1)
    scorer, replay = Scorer(task), VersionWeightedReplay(64, seed=0)
    learner = Learner(task, policy, seed=0)
    before = learner.greedy_reward()
    for _ in range(300):
        gen.load(policy.weights(), learner.version)
        for _ in range(4):
            replay.add(scorer.score(gen.generate()))
        stats = learner.update(replay.sample(4))
    after = learner.greedy_reward()
    assert before < 0.35  # near chance (1/8) for an untrained policy
    assert after >= 0.9, after
    assert learner.version == 300 and stats["samples"] == 4 * 64 * 8 and all(lag >= 0 for lag in stats["lags"])


def test_timeline_splits_busy_wait_sync_measure_and_idle():
    tl = Timeline("x", started=100.0)
    tl.spans += [("busy/generate", 100.0, 103.0), ("wait/queue", 103.0, 104.0), ("sync/weights", 104.0, 104.5)]
    tl.ended = 110.0
    tl.spans.append(("measure/eval", 105.0, 105.5))
    assert tl.split() == {"busy": 3.0, "wait": 1.0, "sync": 0.5, "measure": 0.5, "idle": 5.0}
    assert tl.totals()["busy/generate"] == 3.0
