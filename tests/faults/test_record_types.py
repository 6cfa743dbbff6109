"""Records are never trusted by type: any wrong-typed field is refused with file:line, by every reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlbench.core.errors import DataError
from rlbench.results.records import from_dict
from rlbench.results.store import load, read_records
from tests.faults.fault_helpers import one_line_error, record, rlbench

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
# what each field must be: a value that is NOT of that kind makes the record invalid
WRONG = {
    "run_id": lambda v: not isinstance(v, str),
    "benchmark": lambda v: not isinstance(v, str),
    "metric": lambda v: not isinstance(v, str),
    "unit": lambda v: not isinstance(v, str),
    "params": lambda v: not isinstance(v, dict),
    "fingerprint": lambda v: not isinstance(v, dict),
    "meta": lambda v: not isinstance(v, dict),
    "repeat": lambda v: isinstance(v, bool) or not isinstance(v, int) or v < 0,
    "seed": lambda v: v is not None and (isinstance(v, bool) or not isinstance(v, int)),
    "samples": lambda v: (
        not isinstance(v, list) or any(x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))) for x in v)
    ),
    "direction": lambda v: v not in ("higher", "lower", "none"),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(field=st.sampled_from(sorted(WRONG)), value=JSON)
def test_any_wrong_typed_field_is_a_data_error_naming_the_place(field: str, value: object) -> None:
    data = json.loads(record().to_json())
    data[field] = value
    if WRONG[field](value):
        with pytest.raises(DataError, match=r"^f\.jsonl:7: "):
            from_dict(data, "f.jsonl:7")
    else:
        from_dict(data, "f.jsonl:7")  # a valid value of the right type is accepted


@settings(max_examples=100, deadline=None)
@given(line=st.text(max_size=60) | JSON.map(json.dumps))
def test_any_garbage_line_reads_as_data_error_never_a_crash(tmp_path_factory: pytest.TempPathFactory, line: str) -> None:
    path = tmp_path_factory.mktemp("r") / "run.jsonl"
    path.write_text(record().to_json() + "\n" + line.replace("\n", " ") + "\n")
    try:
        recs = read_records(path)
    except DataError:
        return
    assert len(recs) in (1, 2)  # the garbage was blank, or happened to be a valid record


EXAMPLES = {
    "samples of strings": {"samples": ["fast"]},
    "nested samples": {"samples": [[1.0]]},
    "string repeat": {"repeat": "0"},
    "params list": {"params": [1, 2]},
    "string fingerprint": {"fingerprint": "x"},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_reader_refuses_with_exit_2_and_the_line(tmp_path: Path, name: str) -> None:
    good = record()
    bad = {**json.loads(good.to_json()), **EXAMPLES[name]}
    (tmp_path / "a.jsonl").write_text(good.to_json() + "\n" + json.dumps(bad) + "\n")
    (tmp_path / "b.jsonl").write_text(good.to_json() + "\n")
    with pytest.raises(DataError, match=r"a\.jsonl:2: "):
        load(tmp_path / "a.jsonl")
    for args in (
        ["report", "a.jsonl", "-o", "-"],
        ["compare", "a.jsonl", "b.jsonl"],
        ["gate", "b.jsonl", "a.jsonl", "--fail", "sps:5%"],
        ["export", "a.jsonl", "--format", "pytest-benchmark"],
    ):
        assert "a.jsonl:2: " in one_line_error(rlbench(args, tmp_path)), args
