"""Records round-trip through the store; unreadable inputs give a clear DataError."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from rlbench.core.errors import DataError, StoreError
from rlbench.results.records import SCHEMA_VERSION, Record, definition_hash, from_dict
from rlbench.results.store import RunWriter, load, read_records


def _record(run_id: str = "r1", metric: str = "sps", repeat: int = 0, samples: list[float] | None = None) -> Record:
    return Record(
        run_id=run_id,
        timestamp="2026-11-22T00:00:00+00:00",
        benchmark="ppo-cartpole",
        params={"num_envs": 8, "hidden": [64, 64]},
        definition_hash="abc",
        metric=metric,
        unit="steps/s",
        direction="higher",
        samples=samples or [1.0, 2.5],
        repeat=repeat,
        seed=repeat,
        device="cpu",
        fingerprint={"machine": {"id": "m1", "cpu": "x"}, "git": {"commit": "c0"}},
        x=None,
        meta={"command": "rlbench run ppo-cartpole"},
    )


def test_round_trip(tmp_path: Path) -> None:
    w = RunWriter(tmp_path / "store", run_id="r1")
    recs = [_record(), _record(metric="eval_return", samples=[500.0, float("nan")])]
    w.write(recs[:1])
    w.write(recs[1:])
    back = read_records(w.path)
    assert back[0] == recs[0]
    assert back[1].samples[0] == 500.0 and math.isnan(back[1].samples[1])  # NaN stored as null, read back as NaN
    assert w.count == 2
    assert read_records(tmp_path / "store") == back  # directory = every run file


def test_load_gives_tidy_frame(tmp_path: Path) -> None:
    w = RunWriter(tmp_path, run_id="r1")
    w.write([_record(repeat=0), _record(repeat=1, samples=[3.0])])
    df = load(tmp_path)
    assert len(df) == 3  # one row per sample
    assert list(df["value"]) == [1.0, 2.5, 3.0]
    assert set(df["repeat"]) == {0, 1}
    assert (df["param.num_envs"] == 8).all() and (df["machine_id"] == "m1").all() and (df["commit"] == "c0").all()
    assert json.loads(df["params"][0]) == {"hidden": [64, 64], "num_envs": 8}


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty"),
        ('{"schema": 1, "run_id": "r"', "truncated"),
        ("hello\n", "not JSON"),
        ('{"name": "something else"}\n', "not an rlbench record"),
        ("[1, 2]\n", "not an rlbench record"),
    ],
)
def test_bad_files_raise_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(DataError, match=message):
        read_records(f)


def test_future_schema_is_refused(tmp_path: Path) -> None:
    data = json.loads(_record().to_json())
    data["schema"] = SCHEMA_VERSION + 1
    f = tmp_path / "future.jsonl"
    f.write_text(json.dumps(data) + "\n")
    with pytest.raises(DataError, match="newer rlbench"):
        read_records(f)


def test_missing_path_and_empty_store(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such"):
        read_records(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="holds no rlbench records"):
        read_records(tmp_path)


def test_from_dict_validates_direction() -> None:
    data = json.loads(_record().to_json())
    data["direction"] = "sideways"
    with pytest.raises(DataError, match="direction"):
        from_dict(data)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_store(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(StoreError, match="--store"):
        RunWriter(ro / "sub")


def test_store_under_a_file_is_unwritable(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="cannot write"):
        RunWriter(f / "store")


def test_definition_hash_is_stable_and_sensitive() -> None:
    a = definition_hash("ppo-cartpole", 1, {"num_envs": 8})
    assert a == definition_hash("ppo-cartpole", 1, {"num_envs": 8})
    assert a != definition_hash("ppo-cartpole", 2, {"num_envs": 8})
    assert a != definition_hash("ppo-cartpole", 1, {"num_envs": 16})


def test_an_archived_run_reads_like_the_plain_one(tmp_path: Path) -> None:
    """A run file compressed with xz (``.jsonl.xz``, how reports/ keeps its records) is read by file, by store and by
    run id; a corrupt archive is a one-line DataError naming the file."""
    import lzma

    from rlbench.results.store import read_run

    w = RunWriter(tmp_path / "plain", "20260101T000000Z-aaaaaa")
    w.write([_record(run_id=w.run_id), _record(run_id=w.run_id, metric="time/update")])
    archive = tmp_path / "st" / "20260101T000000Z-aaaaaa.jsonl.xz"
    archive.parent.mkdir()
    archive.write_bytes(lzma.compress(w.path.read_bytes()))
    assert read_records(archive) == read_records(w.path)
    assert read_run(tmp_path / "st") == read_run(w.path)
    assert read_run(tmp_path / "st", "20260101T000000Z-aa") == read_run(w.path)
    bad = tmp_path / "bad" / "20260101T000000Z-bbbbbb.jsonl.xz"
    bad.parent.mkdir()
    bad.write_bytes(b"not xz at all")
    with pytest.raises(DataError, match=r"cannot read .*bbbbbb\.jsonl\.xz"):
        read_records(bad)
