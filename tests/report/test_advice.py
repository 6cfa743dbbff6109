"""Every command-line switch the advice names exists on the benchmark it is named for, and only for runs that have it."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rlbench.cli.parser import config_overrides
from rlbench.cli.run import build_run_parser
from rlbench.report import advice
from rlbench.report.advice import Finding, findings, flag_tip
from rlbench.report.data import RunData
from rlbench.report.phases import breakdown
from rlbench.results.records import Record
from rlbench.run.registry import get_spec

FLAG = re.compile(r"`(--[a-z][a-z-]*)(?: ([^`]+))?`")  # `--flag` or `--flag VALUE`, as the advice quotes them
RUN = re.compile(r"`rlbench run ([a-z0-9-]+)`")

# which built-in benchmark each tip is for: the one whose default config has that field
OWNERS = {
    "--network": ("ppo-cartpole",),
    "--gradients": ("ppo-cartpole", "sac-pendulum"),
    "--optimizer": ("ppo-cartpole",),
    "--inference": ("ppo-cartpole",),
    "--critics": ("sac-pendulum",),
    "--precision": ("sac-pendulum",),
    "--polyak": ("sac-pendulum",),
    "--what-if": ("sac-pendulum",),
    "--threads": ("ppo-cartpole", "sac-pendulum"),
}

PPO_RUNS = [
    {"network": "separate", "gradients": "autograd", "optimizer": "torch", "inference": "torch", "threads": 1},
    {"network": "fused", "gradients": "autograd", "optimizer": "torch", "inference": "torch", "threads": 2},
]
SAC_RUNS = [
    {"critics": "separate", "precision": "fp32", "polyak": "loop", "gradients": "autograd", "threads": 1, "what_if": []},
    {"critics": "separate", "precision": "fp32", "polyak": "loop", "threads": 2, "what_if": ["polyak=loop"]},
]


def _records(benchmark: str, params: dict[str, Any]) -> list[Record]:
    """One repeat of 11 iterations whose steady time (2 s) puts every layer over its reporting threshold."""
    leaves = {  # seconds, layer
        "collect/env": (0.4, "environment"),
        "collect/policy": (0.3, "inference"),
        "advantage": (0.1, "advantage"),
        "update/forward": (0.3, "update"),
        "update/backward": (0.3, "update"),
        "replay/sample": (0.15, "replay"),
        "h2d": (0.15, "transfer"),
        "misc": (0.1, "other"),
    }
    steady = 2.0  # leaves sum to 1.8: 10% Python/other

    def rec(metric: str, samples: list[float], meta: dict | None = None) -> Record:
        return Record(
            run_id="run-a",
            timestamp="2026-11-22T00:00:00+00:00",
            benchmark=benchmark,
            params=params,
            definition_hash="h",
            metric=metric,
            unit="s",
            direction="lower",
            samples=samples,
            repeat=0,
            seed=0,
            meta=meta or {},
        )

    recs = [
        rec("train_s", [steady + 0.5]),
        rec("warmup_s", [0.5]),
        rec("iterations", [11.0]),
        rec("env_steps", [11264.0]),
        rec("timer/overhead_s", [0.05]),
    ]
    for phase, (s, layer) in leaves.items():
        recs.append(rec(f"time/{phase}", [s], {"events": 100, "layer": layer}))
    return recs


def _findings(benchmark: str, params: dict[str, Any]) -> list[Finding]:
    d = RunData.from_records(_records(benchmark, params))
    return findings(d, breakdown(d))


def _flags(found: list[Finding]) -> list[tuple[str, str | None, list[str]]]:
    """(flag, quoted value, benchmarks the finding sends the reader to) for every switch in the actions."""
    return [(m.group(1), m.group(2), RUN.findall(f.action)) for f in found for m in FLAG.finditer(f.action)]


def _parser(name: str):
    spec = get_spec(name)
    return spec, build_run_parser(spec, spec.config_factory())


def _check_switch(benchmark: str, flag: str, value: str | None) -> None:
    """The flag is an option of the benchmark's parser, its field is in the default config, the value is accepted."""
    spec, parser = _parser(benchmark)
    assert flag in parser._option_string_actions, f"{flag} is not an option of `rlbench run {benchmark}`"
    defaults = spec.config_factory()
    assert hasattr(defaults, flag[2:].replace("-", "_")), f"{benchmark}'s config has no field for {flag}"
    if value is None or value.isupper():  # a placeholder (`--what-if FIELD=VALUE`)
        return
    args = parser.parse_args([flag, value])  # an invalid choice or type raises UsageError
    config = replace(defaults, **config_overrides(args, defaults))
    config.validate()
    assert str(getattr(config, flag[2:].replace("-", "_"))) == value  # the switch sets what the tip says


def test_every_switch_named_by_the_advice_exists_where_it_is_suggested() -> None:
    seen: set[str] = set()
    runs = [("ppo-cartpole", p) for p in PPO_RUNS] + [("sac-pendulum", p) for p in SAC_RUNS]
    for benchmark, params in runs:
        found = _findings(benchmark, params)
        titles = {f.title for f in found}
        assert {"Training update", "Policy inference", "Environment stepping", "Advantage estimation"} <= titles, titles
        for flag, value, sent_to in _flags(found):
            seen.add(flag)
            if flag in OWNERS:
                assert benchmark in OWNERS[flag], f"{flag} suggested to a {benchmark} run"
                for owner in OWNERS[flag]:
                    _check_switch(owner, flag, value)
            else:  # a generic switch: of the benchmark the finding names (`rlbench run gae ... --impl`), else of this run's
                owners = sent_to or [benchmark]
                assert any(flag in _parser(o)[1]._option_string_actions for o in owners), (flag, owners)
    assert set(OWNERS) <= seen, f"branches never triggered: {set(OWNERS) - seen}"
    assert {"--impl", "--pyinstrument"} <= seen
    # every switch written anywhere in the advice module was exercised above
    source = Path(advice.__file__).read_text(encoding="utf-8")
    assert set(re.findall(r"`(--[a-z][a-z-]*)", source)) <= seen


def test_both_threads_branches() -> None:
    one = " ".join(f.action for f in _findings("sac-pendulum", {"threads": 1}))
    two = " ".join(f.action for f in _findings("sac-pendulum", {"threads": 2}))
    assert "`--threads 2`" in one and "`--threads 1`" not in one
    assert "`--threads 1`" in two and "`--threads 2`" not in two


def test_network_tip_replaces_the_gradients_tip() -> None:
    separate = " ".join(f.action for f in _findings("ppo-cartpole", PPO_RUNS[0]))
    fused = " ".join(f.action for f in _findings("ppo-cartpole", PPO_RUNS[1]))
    assert "`--network fused`" in separate and "`--gradients manual`" not in separate
    assert "`--gradients manual`" in fused and "`--network" not in fused


@pytest.mark.parametrize("params", [{"lr": 3e-4}, {}, {"num_envs": 8, "batch_size": 256}])
def test_a_users_run_is_never_told_about_rlbench_switches(params: dict[str, Any]) -> None:
    found = _findings("my-training-script", params)
    assert {"Training update", "Policy inference"} <= {f.title for f in found}
    flags = {flag for flag, _, _ in _flags(found)}
    assert flags <= {"--impl", "--pyinstrument"}, flags  # generic: they belong to `rlbench run gae/envs` and every run
    text = " ".join(f.action for f in found)
    for switch in OWNERS:
        assert f"`{switch}" not in text, switch


def test_flag_tip() -> None:
    assert flag_tip({"x": 1}, "x", lambda v: v == 1, "`--x 2`") == ["`--x 2`"]
    assert flag_tip({"x": 2}, "x", lambda v: v == 1, "`--x 2`") == []
    assert flag_tip({}, "x", lambda v: True, "`--x 2`") == []
    assert flag_tip({"x": 1}, "x", lambda v: True, "`--x 2`", {"x": "+12% SPS measured"}) == ["`--x 2`, +12% SPS measured"]


def _with_machine(records: list[Record], machine: str) -> list[Record]:
    return [replace(r, fingerprint={"machine": {"id": machine}}) for r in records]


def _user_env_run(machine: str) -> list[Record]:
    """A profiled user script that stepped 8 CartPole-v1 envs per call (100 calls)."""
    recs = _records("profile", {"command": "python train.py"})
    recs = [
        replace(r, meta={**r.meta, "events": 100, "layer": "environment"}) if r.metric == "time/collect/env" else r
        for r in recs
    ]
    recs = [replace(r, metric="time/env/step") if r.metric == "time/collect/env" else r for r in recs]
    recs = [replace(r, meta={"all_steps": 800, "envs": ["CartPole-v1"]}) if r.metric == "env_steps" else r for r in recs]
    return _with_machine(recs, machine)


def _envs_micro(machine: str, run_id: str = "micro-1") -> list[Record]:
    """An `rlbench run envs` run: SyncVectorEnv (reference) and a NumPy env at N=8 and N=64."""
    out = []
    for impl, size, us in (
        ("reference", "N=8", 100.0),
        ("numpy", "N=8", 20.0),
        ("reference", "N=64", 700.0),
        ("numpy", "N=64", 25.0),
    ):
        out.append(
            Record(
                run_id=run_id,
                timestamp="2026-11-22T00:00:00+00:00",
                benchmark="envs",
                params={"group": "envs", "op": "CartPole-v1", "impl": impl, "size": size},
                definition_hash="h",
                metric="time/call",
                unit="s",
                direction="lower",
                samples=[us * 1e-6] * 5,
                repeat=0,
                seed=None,
                meta={"elements": int(size[2:])},
            )
        )
    return _with_machine(out, machine)


def test_the_environment_advice_quotes_a_micro_run_of_the_same_env_on_the_same_machine() -> None:
    from rlbench.report import alternatives

    run = _user_env_run("m1")
    d = RunData.from_records(run)
    quoted = alternatives.measured(d, _envs_micro("m1"))
    text = quoted["environment"]
    assert "CartPole-v1" in text and "N=8" in text and "`numpy`" in text and "5.0× faster" in text and "micro-1" in text
    env_finding = next(f for f in findings(d, breakdown(d), alternatives=quoted) if f.title == "Environment stepping")
    assert text in env_finding.action
    # measured on another machine, or for another env: nothing is quoted, the command that measures it is named
    assert alternatives.measured(d, _envs_micro("m2")) == {}
    other_env = [replace(r, params={**r.params, "op": "Pendulum-v1"}) for r in _envs_micro("m1")]
    assert alternatives.measured(d, other_env) == {}
    plain = next(f for f in findings(d, breakdown(d)) if f.title == "Environment stepping")
    assert "`rlbench run envs` measures env-step implementations" in plain.action


def test_the_advice_reads_only_the_store_lines_that_can_hold_an_envs_micro_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After every `rlbench profile`, the report looks through its store for envs micro-benchmarks to quote: a store of
    many profiled runs is not decoded whole (a hundred took ~1 s), only the lines that can hold one, in any file."""
    import lzma

    from rlbench.report import alternatives, kinds
    from rlbench.results import store
    from rlbench.results.store import RunWriter

    for k in range(5):  # profiled runs: never decoded
        RunWriter(tmp_path, f"profile-{k}").write(_user_env_run("m1"))
    micro = _envs_micro("m1")
    RunWriter(tmp_path, "micro-1").write(micro[:2])
    # an archived run with the other half, and a corrupt file whose text cannot hold one (skipped unread, silently)
    plain = RunWriter(tmp_path, "micro-2")
    plain.write(micro[2:])
    archived = plain.path.with_name(plain.path.name + ".xz")
    archived.write_bytes(lzma.compress(plain.path.read_bytes()))
    plain.path.unlink()
    (tmp_path / "torn.jsonl").write_text('{"not json\n', encoding="utf-8")
    decoded: list[str] = []
    parse = store._parse_line
    monkeypatch.setattr(store, "_parse_line", lambda line, where: decoded.append(where) or parse(line, where))
    context = kinds._store_context(tmp_path / "profile-0.jsonl")
    assert sorted(r.params["size"] + r.params["impl"] for r in context) == sorted(
        r.params["size"] + r.params["impl"] for r in micro
    )
    assert len(decoded) == len(micro) and not any("profile-" in w for w in decoded), decoded
    d = RunData.from_records(_user_env_run("m1"))
    assert "5.0× faster" in alternatives.measured(d, context)["environment"]


def _profile_with_target_update(seconds: float, params: dict[str, Any] | None = None) -> list[Finding]:
    """A profiled script (2 s steady) whose `train/target_update` took ``seconds`` of it."""
    recs = _records("profile", {"command": "python td3.py"} if params is None else params)
    extra = replace(
        next(r for r in recs if r.metric == "time/update/forward"),
        metric="time/train/target_update",
        samples=[seconds],
        meta={"events": 900, "layer": "update"},
    )
    d = RunData.from_records([*recs, extra])
    return findings(d, breakdown(d))


def test_a_visible_polyak_loop_is_told_the_one_call_form_and_the_benchmark_that_times_it() -> None:
    update = next(f for f in _profile_with_target_update(0.1) if f.title == "Training update")
    assert "`torch._foreach_lerp_(target_params, online_params, tau)`" in update.action
    assert "`train/target_update`, 5.0%" in update.action
    assert "target-update" in RUN.findall(update.action)
    get_spec("target-update")  # the benchmark it sends the reader to exists


def test_a_negligible_target_update_and_rlbenchs_own_runs_get_no_foreach_tip() -> None:
    small = next(f for f in _profile_with_target_update(0.01) if f.title == "Training update")  # 0.5%
    assert "_foreach_lerp_" not in small.action
    own = next(f for f in _profile_with_target_update(0.1, SAC_RUNS[0]) if f.title == "Training update")
    assert "_foreach_lerp_" not in own.action and "`--polyak foreach`" in own.action
