"""An option is declared once, on its config field: ``Literal[...]`` (or ``option(..., choices=...)``) gives the
command line's choices, ``--help``, ``validate()`` and ``--what-if`` alike; no table keyed by a bare field name."""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from rlbench.cli.parser import Parser, add_config_options, config_overrides
from rlbench.cli.run import build_run_parser
from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, choices_of, describe_choices, option, run_setting
from rlbench.core.variants import variant_configs
from rlbench.run.registry import SPEC_ATTRIBUTE, all_specs, get_spec
from rlbench.run.userbench import benchmark
from tests.cli.cli_helpers import one_line_error, run_cli


@dataclass
class _Small:
    """A benchmark's config with an ``activation`` of its own values."""

    activation: Literal["tanh", "relu"] = option("hidden activation", default="tanh")
    width: Literal[32, 64] = option("hidden width", default=64)
    precision: str = option("update precision", choices=("fp32", "bf16"), default="fp32")
    modes: tuple[Literal["a", "b"], ...] = option("modes to run (repeatable)", default=("a",))
    seed: int = option("seed", default=0)
    device: str = option("device", default="auto")
    what_if: tuple[str, ...] = option("variants", default=())

    standard_what_ifs: ClassVar[tuple[str, ...]] = ()

    def validate(self) -> None:
        check_choices(self)


@dataclass
class _Other:
    """Another benchmark's config: the same field name, other values."""

    activation: Literal["gelu", "silu"] = option("hidden activation", default="gelu")

    def validate(self) -> None:
        check_choices(self)


@dataclass
class _Free:
    """A benchmark whose ``activation`` is any word."""

    activation: str = option("hidden activation", default="mish")


def _parse(config: Any, *argv: str) -> Any:
    parser = Parser(prog="rlbench run test")
    add_config_options(parser, config)
    args = parser.parse_args(list(argv))
    out = dataclasses.replace(config, **config_overrides(args, config))
    if hasattr(out, "validate"):
        out.validate()
    return out


def test_choices_come_from_the_field_declaration() -> None:
    assert choices_of(_Small) == {
        "activation": ("tanh", "relu"),
        "width": (32, 64),
        "precision": ("fp32", "bf16"),
        "modes": ("a", "b"),
    }
    assert choices_of(_Small()) == choices_of(_Small) and choices_of(_Free) == {}


def test_the_parser_takes_its_choices_from_the_field() -> None:
    cfg = _parse(_Small(), "--activation", "relu", "--width", "32", "--precision", "bf16", "--modes", "b", "--modes", "a")
    assert (cfg.activation, cfg.width, cfg.precision, cfg.modes) == ("relu", 32, "bf16", ("b", "a"))
    for argv in (["--activation", "gelu"], ["--width", "48"], ["--precision", "fp16"], ["--modes", "c"]):
        with pytest.raises(UsageError, match="invalid choice") as err:
            _parse(_Small(), *argv)
        assert "\n" not in str(err.value)


def test_two_benchmarks_with_the_same_field_name_each_accept_their_own_values() -> None:
    """Fails if a table of choices keyed by the bare field name (``"activation": (...)``) comes back."""
    assert _parse(_Small(), "--activation", "relu").activation == "relu"
    assert _parse(_Other(), "--activation", "silu").activation == "silu"
    assert _parse(_Free(), "--activation", "anything-at-all").activation == "anything-at-all"
    with pytest.raises(UsageError, match=r"invalid choice: 'silu' \(choose from 'tanh', 'relu'\)"):
        _parse(_Small(), "--activation", "silu")
    with pytest.raises(UsageError, match=r"invalid choice: 'relu' \(choose from 'gelu', 'silu'\)"):
        _parse(_Other(), "--activation", "relu")


def test_no_choices_table_in_the_parser_module() -> None:
    import rlbench.cli.parser as parser_module

    assert not hasattr(parser_module, "CHOICES")
    keyed_by_field = [k for k, v in vars(parser_module).items() if isinstance(v, dict) and "activation" in v]
    assert keyed_by_field == [], f"a table keyed by bare field names in rlbench.cli.parser: {keyed_by_field}"


def test_help_shows_the_declared_values_and_the_default() -> None:
    parser = Parser(prog="rlbench run test")
    add_config_options(parser, _Small())
    text = " ".join(parser.format_help().split())
    assert "hidden activation (one of: tanh, relu; default: tanh)" in text
    assert "hidden width (one of: 32, 64; default: 64)" in text
    assert "update precision (one of: fp32, bf16; default: fp32)" in text
    assert "modes to run (repeatable) (one of: a, b; repeatable)" in text


def test_validate_checks_the_same_values_one_line() -> None:
    _Small().validate()
    for field, value, message in [
        ("activation", "gelu", "--activation must be tanh or relu, got 'gelu'"),
        ("width", 48, "--width must be 32 or 64, got 48"),
        ("precision", "fp16", "--precision must be fp32 or bf16, got 'fp16'"),
        ("modes", ("a", "c"), "--modes must be a or b, got 'c'"),
    ]:
        with pytest.raises(UsageError) as err:
            dataclasses.replace(_Small(), **{field: value}).validate()
        assert str(err.value) == message
    assert describe_choices(["x"]) == "x" and describe_choices(["x", "y", "z"]) == "x, y or z"


def test_a_field_declares_its_values_once() -> None:
    @dataclass
    class Twice:
        mode: Literal["a", "b"] = option("mode", choices=("a", "b"), default="a")

    with pytest.raises(TypeError, match="declares its values twice"):
        choices_of(Twice)
    with pytest.raises(TypeError, match="at least one value"):
        option("mode", choices=(), default="a")


def test_what_if_uses_the_declared_values() -> None:
    out = dict(variant_configs(_Small(what_if=("activation=relu", "width=32", "precision=bf16", "modes=a,b"))))
    assert out["activation=relu"].activation == "relu" and out["width=32"].width == 32
    assert out["precision=bf16"].precision == "bf16" and out["modes=a,b"].modes == ("a", "b")
    for entry, message in [
        ("activation=gelu", "--what-if activation=gelu: --activation must be tanh or relu, got 'gelu'"),
        ("width=48", "--what-if width=48: --width must be 32 or 64, got 48"),
        ("precision=fp16", "--what-if precision=fp16: --precision must be fp32 or bf16, got 'fp16'"),
        ("modes=a,c", "--what-if modes=a,c: --modes must be a or b, got 'c'"),
    ]:
        with pytest.raises(UsageError) as err:
            variant_configs(_Small(what_if=(entry,)))
        assert str(err.value) == message
    with pytest.raises(UsageError, match="not a valid value for width"):
        variant_configs(_Small(what_if=("width=wide",)))


def test_what_if_on_a_built_in_config() -> None:
    from rlbench.algos.offpolicy.config import SACConfig

    with pytest.raises(UsageError, match=r"^--what-if precision=fp16: --precision must be auto, fp32 or bf16, got 'fp16'$"):
        variant_configs(SACConfig(what_if=("precision=fp16",)))
    with pytest.raises(UsageError, match=r"^--what-if gradients=magic: --gradients must be auto, manual or autograd"):
        variant_configs(SACConfig(what_if=("gradients=magic",)))
    assert [label for label, _ in variant_configs(SACConfig(what_if=("critics=separate",)))][1:] == ["critics=separate"]


BUILT_IN_CHOICES = {
    "ppo-cartpole": {
        "activation": ("tanh", "relu"),
        "network": ("fused", "separate"),
        "init": ("torch", "orthogonal"),
        "inference": ("auto", "numpy", "torch"),
        "gradients": ("auto", "manual", "autograd"),
        "optimizer": ("lean", "torch"),
        "collector": ("sync", "async"),
        "transport": ("slot", "lock", "direct", "multiprocess"),
    },
    "sac-pendulum": {
        "critics": ("ensemble", "separate"),
        "polyak": ("copy", "foreach", "lerp", "loop"),
        "gradients": ("auto", "manual", "autograd"),
        "precision": ("auto", "fp32", "bf16"),
        "collector": ("sync", "async"),
        "transport": ("slot", "lock", "direct", "multiprocess"),
    },
    "grpo-pipeline": {"engine": ("local", "ray", "monarch"), "weight_sync": ("auto", "shm", "store", "gloo", "rdma")},
}


@pytest.mark.parametrize("name", sorted(BUILT_IN_CHOICES))
def test_built_in_benchmarks_keep_their_values(name: str) -> None:
    spec = get_spec(name)
    declared = choices_of(spec.config_factory())
    assert {k: set(v) for k, v in declared.items() if k in BUILT_IN_CHOICES[name]} == {
        k: set(v) for k, v in BUILT_IN_CHOICES[name].items()
    }
    parser = build_run_parser(spec, spec.config_factory())
    for field in BUILT_IN_CHOICES[name]:
        assert tuple(parser._option_string_actions["--" + field.replace("_", "-")].choices) == declared[field]


def test_every_built_in_default_is_among_its_declared_values() -> None:
    for spec in all_specs():
        config = spec.config_factory()
        check_choices(config)  # a default outside its own choices would be refused on every run
        parser = build_run_parser(spec, config)
        for name, values in choices_of(config).items():
            assert parser._option_string_actions["--" + name.replace("_", "-")].choices == values, (spec.name, name)


def test_the_roofline_takes_the_training_benchmarks_values() -> None:
    from rlbench.suites.roofline import RooflineConfig

    from rlbench.algos.offpolicy.config import SACConfig

    roofline, training = choices_of(RooflineConfig), choices_of(SACConfig)
    for name in ("critics", "gradients", "precision"):
        assert roofline[name] == training[name], name


def _spec_of(source: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(source), {"Literal": Literal, "benchmark": benchmark}, namespace)
    return getattr(next(v for v in namespace.values() if callable(v)), SPEC_ATTRIBUTE)


def _parse_user(spec: Any, *argv: str) -> Any:
    parser = build_run_parser(spec, spec.config_factory())
    config = spec.config_factory()
    args = parser.parse_args(list(argv))
    out = dataclasses.replace(config, **config_overrides(args, config))
    out.validate()
    return out


def test_a_user_benchmark_may_name_any_built_in_option() -> None:
    spec = _spec_of(
        """
        @benchmark
        def mine(activation: str = "gelu", precision: str = "fp8", threads: int = 64, device: str = "tpu",
                 init: str = "xavier", engine: str = "jax", gradients: str = "none") -> dict:
            return {}
        """
    )
    argv = ["--activation", "swish", "--precision", "int4", "--init", "he", "--engine", "x", "--gradients", "y"]
    cfg = _parse_user(spec, *argv, "--device", "npu")
    assert (cfg.activation, cfg.precision, cfg.init, cfg.engine, cfg.gradients, cfg.device) == (
        "swish",
        "int4",
        "he",
        "x",
        "y",
        "npu",
    )
    assert choices_of(cfg) == {}
    # rlbench's own device and thread settings are not read from a user's parameters that share their names
    assert run_setting(cfg, "device", "auto") == "auto" and run_setting(cfg, "threads", 1) == 1
    assert run_setting(cfg, "seed", None) == 0  # the seed still numbers the repeats
    from rlbench.algos.ppo.config import PPOConfig

    assert run_setting(PPOConfig(device="cpu", threads=3), "device", "auto") == "cpu"
    assert run_setting(PPOConfig(threads=3), "threads", 1) == 3 and run_setting(_Free(), "device", "auto") == "auto"


def test_a_user_literal_gives_the_choices() -> None:
    spec = _spec_of(
        """
        @benchmark
        def lit(activation: Literal["gelu", "silu"] = "gelu", width: Literal[8, 16] = 8) -> dict:
            return {}
        """
    )
    cfg = _parse_user(spec, "--activation", "silu", "--width", "16")
    assert (cfg.activation, cfg.width) == ("silu", 16)
    with pytest.raises(UsageError, match=r"invalid choice: 'relu' \(choose from 'gelu', 'silu'\)"):
        _parse_user(spec, "--activation", "relu")
    with pytest.raises(UsageError, match=r"invalid choice: 32 \(choose from 8, 16\)"):
        _parse_user(spec, "--width", "32")
    with pytest.raises(UsageError, match=r"^--activation must be gelu or silu, got 'relu'$"):
        dataclasses.replace(spec.config_factory(), activation="relu").validate()
    text = " ".join(build_run_parser(spec, spec.config_factory()).format_help().split())
    assert "parameter of lit (one of: gelu, silu; default: gelu)" in text


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("def f(a: Literal['x', 'y'] = 'z'): pass", "default 'z', not one of its Literal values"),
        ("def f(a: Literal[1, 2] = '1'): pass", "not one of its Literal values"),
        ("def f(a: Literal[1, 'x'] = 1): pass", "must all be str or all int"),
        ("def f(a: Literal[True, False] = True): pass", "must all be str or all int"),
        ("def f(seed: Literal[0, 1] = 0): pass", "must be an int"),
        ("def f(validate: bool = True): pass", "shadows the config's validate()"),
    ],
)
def test_user_literals_that_cannot_be_options_are_refused(source: str, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        _spec_of(f"@benchmark\n{source}")


USER_FILE = """
from typing import Literal

import rlbench


@rlbench.benchmark
def lit(activation: Literal["gelu", "silu"] = "silu") -> dict:
    return {"width": float(len(activation))}


@rlbench.benchmark
def plain(activation: str = "tanh") -> dict:
    return {"width": float(len(activation))}
"""


@pytest.mark.slow
def test_user_benchmark_activation_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(USER_FILE)
    store = ["--store", "st", "--quiet"]
    ok = run_cli(["run", "mine.py:lit", "--activation", "gelu", *store], tmp_path)
    assert ok.returncode == 0, ok.stderr
    bad = run_cli(["run", "mine.py:lit", "--activation", "bogus", *store], tmp_path)
    assert bad.returncode == 2
    err = one_line_error(bad)
    assert "--activation" in err and "invalid choice: 'bogus'" in err and "'gelu', 'silu'" in err
    for value in ("gelu", "bogus"):  # a plain str takes any value: no other benchmark's choices apply
        proc = run_cli(["run", "mine.py:plain", "--activation", value, *store], tmp_path)
        assert proc.returncode == 0, (value, proc.stderr)


@pytest.mark.slow
def test_built_in_choices_in_help_and_refused_one_line(tmp_path: Path) -> None:
    helped = run_cli(["run", "ppo-cartpole", "--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    text = " ".join(helped.stdout.split())
    assert "hidden activation (one of: tanh, relu; default: tanh)" in text
    assert "(one of: lean, torch; default: lean)" in text
    proc = run_cli(["run", "ppo-cartpole", "--activation", "gelu"], tmp_path)
    assert proc.returncode == 2
    err = one_line_error(proc)
    assert "argument --activation: invalid choice: 'gelu'" in err and "'tanh', 'relu'" in err
    proc = run_cli(["run", "sac-pendulum", "--what-if", "precision=fp16"], tmp_path)
    assert proc.returncode == 2
    assert "--precision must be auto, fp32 or bf16, got 'fp16'" in one_line_error(proc)
    assert not (tmp_path / ".rlbench").exists()  # refused before anything ran
