"""What-if variants: FIELD=VALUE parsed by the field's type, every bad entry refused, ``all`` expanded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from rlbench.core.errors import UsageError
from rlbench.core.variants import BASELINE, variant_configs


@dataclass(frozen=True)
class _Cfg:
    flag: bool = False
    num_envs: int = 4
    lr: float = 1e-3
    hidden: tuple[int, ...] = (64, 64)
    mode: str = "a"
    seed: int = 0
    device: str = "auto"
    what_if: tuple[str, ...] = ()

    standard_what_ifs: ClassVar[tuple[str, ...]] = ("flag=true", "num_envs=8")

    def validate(self) -> None:
        if self.num_envs < 1:
            raise UsageError(f"--num-envs must be at least 1, got {self.num_envs}")


def _variants(*entries: str) -> dict[str, _Cfg]:
    out = variant_configs(_Cfg(what_if=entries))
    assert out[0] == (BASELINE, _Cfg())  # the baseline first, without its what-ifs
    return dict(out[1:])


def test_no_what_if_is_the_baseline_alone() -> None:
    assert variant_configs(_Cfg()) == [(BASELINE, _Cfg())]


@pytest.mark.parametrize(
    ("entry", "field", "value"),
    [
        ("flag=yes", "flag", True),
        ("flag=TRUE", "flag", True),
        ("flag=on", "flag", True),
        ("num_envs=1_6", "num_envs", 16),
        ("lr=3e-4", "lr", 3e-4),
        ("hidden=32x32", "hidden", (32, 32)),
        ("hidden=128,128,64", "hidden", (128, 128, 64)),
        ("mode=b", "mode", "b"),
    ],
)
def test_values_parsed_by_field_type(entry: str, field: str, value: object) -> None:
    ((label, cfg),) = _variants(entry).items()
    assert label == entry and getattr(cfg, field) == value and type(getattr(cfg, field)) is type(value)
    assert cfg.what_if == () and cfg.seed == 0
    others = {f: getattr(cfg, f) for f in ("flag", "num_envs", "lr", "hidden", "mode") if f != field}
    assert others == {f: getattr(_Cfg(), f) for f in others}  # nothing else changes


def test_dashes_and_spaces_in_the_field_name() -> None:
    ((label, cfg),) = _variants(" num-envs = 2").items()
    assert cfg.num_envs == 2 and label == "num_envs=2"


def test_several_variants_in_order_duplicates_once() -> None:
    assert list(_variants("lr=0.1", "mode=c", "lr=0.1")) == ["lr=0.1", "mode=c"]


@pytest.mark.parametrize("field", ["nope", "seed", "device", "what_if"])
def test_unknown_and_forbidden_fields(field: str) -> None:
    with pytest.raises(UsageError, match=f"unknown field '{field}'; choose from flag, num_envs, lr, hidden, mode$"):
        _variants(f"{field}=1")


@pytest.mark.parametrize("entry", ["flag", "flag=", "lr:0.1"])
def test_malformed_entries(entry: str) -> None:
    with pytest.raises(UsageError, match="expects FIELD=VALUE"):
        _variants(entry)


def test_missing_field_name() -> None:
    with pytest.raises(UsageError, match="unknown field ''"):
        _variants("=1")


@pytest.mark.parametrize("entry", ["flag=maybe", "num_envs=four", "num_envs=1.5", "lr=fast", "hidden=a,b"])
def test_bad_values(entry: str) -> None:
    with pytest.raises(UsageError, match="is not a valid value for"):
        _variants(entry)


@pytest.mark.parametrize("entry", ["flag=false", "num_envs=4", "lr=0.001", "hidden=64,64", "mode=a"])
def test_variant_equal_to_the_baseline(entry: str) -> None:
    with pytest.raises(UsageError, match="is the baseline setting already"):
        _variants(entry)


def test_each_variant_is_validated() -> None:
    with pytest.raises(UsageError, match="--num-envs must be at least 1"):
        _variants("num_envs=0")


def test_all_expands_to_the_standard_what_ifs() -> None:
    assert list(_variants("all")) == ["flag=true", "num_envs=8"]
    assert list(_variants("mode=b", "all", "flag=true")) == ["mode=b", "flag=true", "num_envs=8"]


def test_all_on_a_real_config() -> None:
    from rlbench.algos.offpolicy.config import SACConfig

    out = variant_configs(SACConfig(what_if=("all",)))
    assert [label for label, _ in out] == [BASELINE, *SACConfig.standard_what_ifs]
    assert all(cfg.what_if == () for _, cfg in out)
    assert len({repr(cfg) for _, cfg in out}) == len(out)  # every variant differs from the baseline and the others
