"""``rlbench run peers``: ABBA order, one row per implementation, errors kept apart, and the report's figures."""

from __future__ import annotations

import math
import types

import pytest
from rlbench.suites.peers import benchmark
from rlbench.suites.peers.common import PeerRun, PeerSetting

from rlbench.core.errors import UsageError
from rlbench.report import peers as peers_report
from rlbench.results.records import Record
from rlbench.run.registry import RunContext


def _fake(name: str, sps: float, ret: float, calls: list[str], fail: bool = False) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.version = lambda: "9.9"  # type: ignore[attr-defined]

    def run_ppo(setting: PeerSetting) -> PeerRun:
        calls.append(name)
        if fail:
            raise RuntimeError("library broke")
        steps = setting.total_steps - 7  # a library that takes fewer steps than asked
        returns = [ret] * 12
        return PeerRun(
            f"{name} 9.9", steps, 0.5, steps / sps, 0.1, [ret] * setting.eval_episodes, returns, list(range(100, 1300, 100))
        )

    mod.run_ppo = run_ppo  # type: ignore[attr-defined]
    return mod


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, types.ModuleType]]:
    calls: list[str] = []
    mods = {
        "rlbench": _fake("rlbench", 4000.0, 500.0, calls),
        "sb3": _fake("sb3", 1000.0, 480.0, calls),
        "rlox": _fake("rlox", 8000.0, 30.0, calls),
        "torchrl": _fake("torchrl", 500.0, 0.0, calls, fail=True),
    }
    monkeypatch.setattr(benchmark, "peer_module", lambda impl: mods[impl])
    return calls, mods


def _records(metrics_per_seed: dict[int, list]) -> list[Record]:
    out = []
    for seed, metrics in metrics_per_seed.items():
        for m in metrics:
            params = {"algo": "ppo", **m.params}
            out.append(
                Record(
                    "run-1",
                    "2026-11-23T00:00:00",
                    "peers",
                    params,
                    "h",
                    m.name,
                    m.unit,
                    m.direction,
                    m.samples,
                    repeat=seed,
                    seed=seed,
                    x=m.x,
                    meta=m.meta,
                )
            )
    return out


def test_each_seed_runs_every_impl_in_abba_order_and_keeps_a_failing_peer_apart(fakes) -> None:
    calls, _ = fakes
    config = benchmark.PeersConfig(total_steps=1000, impls=("rlbench", "sb3", "rlox", "torchrl"), profile_seeds=())
    by_seed = {}
    for seed in (0, 1):
        calls.clear()
        by_seed[seed] = benchmark.run_peers(benchmark.PeersConfig(**{**config.__dict__, "seed": seed}), RunContext(None))
        assert calls == (["rlbench", "sb3", "rlox", "torchrl"] if seed == 0 else ["torchrl", "rlox", "sb3", "rlbench"])
    metrics = by_seed[0]
    sps = {m.params["impl"]: m for m in metrics if m.name == "sps"}
    assert set(sps) == {"rlbench", "sb3", "rlox"}  # torchrl raised: no SPS, an error record instead
    assert sps["sb3"].samples[0] == pytest.approx(1000.0) and sps["sb3"].meta["position"] == 1
    steps = {m.params["impl"]: m.samples[0] for m in metrics if m.name == "env_steps"}
    assert steps["rlox"] == 993  # the steps actually taken, not the budget
    errors = [m for m in metrics if m.name == "peers/error"]
    assert [m.params["impl"] for m in errors] == ["torchrl"] and "library broke" in errors[0].meta["error"]
    # returns of 500 from the 10th episode on: the threshold (475) is reached at that episode's step
    reached = {m.params["impl"]: m for m in metrics if m.name == "steps_to_threshold"}
    assert reached["rlbench"].samples == [1000.0] and "sb3" in reached and "rlox" not in reached


def test_the_report_gives_ratios_with_intervals_and_flags_a_fast_peer_that_does_not_learn(fakes) -> None:
    config = benchmark.PeersConfig(total_steps=1000, impls=("rlbench", "sb3", "rlox", "torchrl"), profile_seeds=())
    runs = {
        s: benchmark.run_peers(benchmark.PeersConfig(**{**config.__dict__, "seed": s}), RunContext(None)) for s in range(5)
    }
    records = _records(runs)
    rows = {r["impl"]: r for r in peers_report.rows(records)}
    assert rows["sb3"]["ratio"] == pytest.approx(4.0) and rows["rlox"]["ratio"] == pytest.approx(0.5)
    assert rows["sb3"]["ratio_low"] <= 4.0 <= rows["sb3"]["ratio_high"]
    flags = peers_report.flags(list(rows.values()), 450.0)
    assert any("rlox is faster than rlbench but does not learn" in f for f in flags)
    assert any("torchrl raised" in f for f in flags)
    assert not any(f.startswith("**sb3") for f in flags)  # 480 >= 450: learns
    text, _ = peers_report.render(records)
    assert "**4.00×**" in text and "rlox is faster than rlbench but does not learn" in text and "rlbench → sb3" in text


def test_layer_shares_are_self_times_of_the_training_wall() -> None:
    phases = {"collect": 6.0, "collect/env": 4.0, "collect/policy": 1.0, "update": 3.0}
    layers = {"collect": "other", "collect/env": "environment", "collect/policy": "inference", "update": "update"}
    metrics = benchmark.phase_metrics(phases, layers, 10.0, "timers")
    records = _records({0: metrics})
    shares = peers_report.layer_shares(records)
    assert shares["environment"] == pytest.approx(0.4) and shares["inference"] == pytest.approx(0.1)
    assert shares["update"] == pytest.approx(0.3)
    assert shares["other"] == pytest.approx(0.2)  # collect's own 1 s + 1 s outside every phase


def test_unknown_or_missing_implementations_are_usage_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="unknown implementation 'cleanrl'"):
        benchmark.PeersConfig(impls=("cleanrl",)).validate()
    with pytest.raises(UsageError, match="--algo must be ppo or sac"):
        benchmark.PeersConfig(algo="dqn").validate()
    real = benchmark.peer_module

    def missing(impl: str) -> types.ModuleType:
        return types.SimpleNamespace(version=lambda: None) if impl == "rlox" else real(impl)  # type: ignore[return-value]

    monkeypatch.setattr(benchmark, "peer_module", missing)
    with pytest.raises(UsageError, match="pip install rlox"):
        benchmark.check(benchmark.PeersConfig(impls=("rlbench", "rlox")))
    assert "rlox" not in benchmark.chosen_impls(benchmark.PeersConfig())  # the default skips what is not installed


def test_reached_uses_the_mean_of_the_last_ten_episodes() -> None:
    run = PeerRun("x", 0, 0, 1, 0, [], [0.0] * 5 + [500.0] * 10, list(range(15)), [float(i) for i in range(15)])
    assert benchmark.reached(run, 475.0) == (14, 14.0)
    assert benchmark.reached(run, 501.0) is None
    assert math.isfinite(benchmark.threshold_of(benchmark.PeersConfig(algo="sac")))


@pytest.mark.slow
def test_the_sb3_peer_leaves_no_temporary_directory(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import tempfile

    from rlbench.suites.peers import sb3_peer

    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    setting = benchmark.setting_for(benchmark.PeersConfig(algo="ppo", total_steps=1024, eval_episodes=1))
    run = sb3_peer.run_ppo(setting)
    assert run.env_steps == 1024
    assert not list(tmp_path.glob("SB3-*"))
