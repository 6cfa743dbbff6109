"""The history store: idempotent adds, resume, machines kept apart, bad files skipped, commit order, dirty trees."""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from pathlib import Path

import pytest

from rlbench.results.history import DEFAULT_HISTORY, AddResult, CommitInfo, Gap, HistoryStore, Series
from rlbench.results.records import Record
from rlbench.results.store import RecordsWarning, RunWriter

SHA_A = "a" * 40
SHA_B = "b" * 40
SHA_C = "c" * 40


def rec(
    sha: str | None = SHA_A,
    *,
    run_id: str = "r1",
    metric: str = "sps",
    repeat: int = 0,
    samples: list[float] | None = None,
    machine: str = "m1",
    params: dict | None = None,
    benchmark: str = "ppo-cartpole",
    unit: str = "steps/s",
    direction: str = "higher",
    time: int | None = 1_700_000_000,
    subject: str | None = "a commit",
    dirty: bool = False,
) -> Record:
    git: dict = {"commit": sha, "dirty": dirty, "repo": "proj"}
    if time is not None:
        git["time"] = time
    if subject is not None:
        git["subject"] = subject
    return Record(
        run_id=run_id,
        timestamp="2026-11-22T00:00:00+00:00",
        benchmark=benchmark,
        params=params if params is not None else {"num_envs": 8},
        definition_hash="abc",
        metric=metric,
        unit=unit,
        direction=direction,
        samples=samples if samples is not None else [1000.0 + repeat],
        repeat=repeat,
        seed=repeat,
        fingerprint={"machine": {"id": machine, "cpu": "x"}, "git": git},
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_and_default(tmp_path: Path) -> None:
    assert DEFAULT_HISTORY == ".rlbench/history"
    h = HistoryStore(tmp_path / "h")
    assert h.machines() == [] and h.commits() == {} and h.series() == []  # nothing there yet: empty, not an error
    res = h.add_records([rec(repeat=0), rec(repeat=1)])
    assert isinstance(res, AddResult) and (res.added, res.duplicates, res.skipped) == (2, 0, 0)
    assert res.machines == ["m1"] and res.commits == [SHA_A]
    assert (tmp_path / "h" / "m1" / "records" / f"{SHA_A}.jsonl").is_file()
    assert json.loads((tmp_path / "h" / "m1" / "machine.json").read_text()) == {"id": "m1", "cpu": "x"}
    assert h.machine_fingerprint("m1")["cpu"] == "x"
    assert h.commits() == {SHA_A: CommitInfo(SHA_A, 1_700_000_000, "a commit", False)}


def test_adding_the_same_store_twice_changes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "results"
    w = RunWriter(store, run_id="run1")
    w.write([rec(repeat=i, metric=m) for i in range(3) for m in ("sps", "time/update")])
    w2 = RunWriter(store, run_id="run2")
    w2.write([rec(SHA_B, run_id="run2", repeat=i) for i in range(3)])
    h = HistoryStore(tmp_path / "h")
    first = h.add_store(store)
    assert (first.added, first.duplicates, first.skipped) == (9, 0, 0)
    before = snapshot(tmp_path / "h")
    again = HistoryStore(tmp_path / "h").add_store(store)  # a fresh instance: the dedupe comes from disk
    assert (again.added, again.duplicates) == (0, 9) and again.commits == []
    assert snapshot(tmp_path / "h") == before
    assert len(h.records("m1")) == 9


def test_records_without_a_commit_are_counted_and_never_stored(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    res = h.add_records([rec(None), rec("not-a-sha"), rec(SHA_A)])
    assert (res.added, res.skipped) == (1, 2)
    assert [r.fingerprint["git"]["commit"] for r in h.records("m1")] == [SHA_A]


def test_has_resumes_by_commit_benchmark_and_params(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    h.add_records([rec(params={"num_envs": 8, "group": "gae"})])
    assert h.has("m1", SHA_A, "ppo-cartpole", {"num_envs": 8})
    assert h.has("m1", SHA_A, "ppo-cartpole", {})  # records may carry more parameters than were asked for
    assert not h.has("m1", SHA_A, "ppo-cartpole", {"num_envs": 4})
    assert not h.has("m1", SHA_B, "ppo-cartpole", {"num_envs": 8})
    assert not h.has("m2", SHA_A, "ppo-cartpole", {"num_envs": 8})
    assert not h.has("m1", SHA_A, "sac-pendulum", {})
    gap = Gap("m1", SHA_B, "sac-pendulum", {}, "failed", "ImportError:\n no module")
    h.add_gap(gap)
    h.add_gap(gap)  # the same gap again is not written twice
    assert h.gaps("m1") == [Gap("m1", SHA_B, "sac-pendulum", {}, "failed", "ImportError: no module")]
    assert not h.has("m1", SHA_B, "sac-pendulum", {})
    assert h.has("m1", SHA_B, "sac-pendulum", {}, gaps=True)
    assert SHA_B in h.order()  # a commit known only from a gap is still a commit of the history


def test_machines_are_kept_apart(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    h.add_records([rec(machine="m1", samples=[100.0]), rec(machine="m2", run_id="r2", samples=[900.0])])
    assert h.machines() == ["m1", "m2"]
    series = h.series()
    assert [(s.machine, s.samples) for s in series] == [("m1", [[100.0]]), ("m2", [[900.0]])]
    assert [s.machine for s in h.series("m2")] == ["m2"]
    # an old record without a machine id goes under the hash of its machine fields, never into another machine's
    old = rec(run_id="r3")
    old.fingerprint["machine"] = {"cpu": "y"}
    h.add_records([old])
    assert len(h.machines()) == 3


def test_corrupt_and_foreign_files_are_skipped_with_a_warning_naming_them(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    h.add_records([rec(SHA_A), rec(SHA_B, run_id="r2")])
    records = tmp_path / "h" / "m1" / "records"
    (records / f"{SHA_B}.jsonl").write_bytes(b"\x00\xffgarbage\n")
    (records / "notes.txt").write_text("hello\n")
    (tmp_path / "h" / "m1" / "machine.json").write_text("{not json")
    with pytest.warns(RecordsWarning) as caught:
        got = h.records("m1")
        fp = h.machine_fingerprint("m1")
    messages = " | ".join(str(w.message) for w in caught)
    assert f"{SHA_B}.jsonl" in messages and "notes.txt" in messages and "machine.json" in messages
    assert [r.fingerprint["git"]["commit"] for r in got] == [SHA_A] and fp == {}
    (tmp_path / "h" / "commits.jsonl").open("a").write("[1, 2]\n")
    (tmp_path / "h" / "stray").mkdir()
    with pytest.warns(RecordsWarning, match="commits.jsonl:3"):
        assert set(h.commits()) == {SHA_A, SHA_B}
    with pytest.warns(RecordsWarning, match="stray"):
        assert h.machines() == ["m1"]


def test_torn_last_line_is_skipped_then_cut_before_the_next_append(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    h.add_records([rec(repeat=0), rec(repeat=1)])
    path = tmp_path / "h" / "m1" / "records" / f"{SHA_A}.jsonl"
    whole = rec(repeat=2).to_json()
    with path.open("a") as f:
        f.write(whole[: len(whole) // 2])  # a writer killed mid-line
    with pytest.warns(RecordsWarning, match="torn"):
        assert len(HistoryStore(tmp_path / "h").records("m1")) == 2
    with pytest.warns(RecordsWarning):
        HistoryStore(tmp_path / "h").add_records([rec(repeat=2)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(r.repeat for r in h.records("m1")) == [0, 1, 2]


def test_order_by_time_without_a_repository(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    h.add_records([rec(SHA_A, time=300), rec(SHA_B, run_id="r2", time=100), rec(SHA_C, run_id="r3", time=None)])
    assert h.order() == [SHA_B, SHA_A, SHA_C]  # unknown time last
    h.add_commits([CommitInfo(SHA_C, 200, "later found")])
    assert h.order() == [SHA_B, SHA_C, SHA_A]
    assert h.commits()[SHA_C] == CommitInfo(SHA_C, 200, "later found", False)
    h.add_commits([CommitInfo(SHA_C, None, None)])  # an unknown time keeps the known one
    assert h.commits()[SHA_C].time == 200


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    if date:
        env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_order_by_topology_in_a_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    shas = []
    # committer times run backwards (a rebase, a wrong clock): time order is the reverse of the history
    for i, date in enumerate(["2030-01-03T00:00:00", "2030-01-02T00:00:00", "2030-01-01T00:00:00"]):
        (repo / "f").write_text(str(i))
        _git(repo, "add", "f")
        _git(repo, "commit", "-q", "-m", f"c{i}", date=date)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    h = HistoryStore(tmp_path / "h")
    times = [int(_git(repo, "log", "-1", "--format=%ct", s)) for s in shas]
    outside = "d" * 40  # a commit the repository does not have (another branch, gone): after the topology, by time
    h.add_records([rec(s, run_id=f"r{i}", time=t) for i, (s, t) in enumerate(zip(shas, times))])
    h.add_records([rec(outside, run_id="rx", time=1)])
    assert h.order() == [outside, *reversed(shas)]
    assert h.order(repo) == [*shas, outside]
    assert [s.commits for s in h.series(repo=repo)] == [[*shas, outside]]
    with pytest.raises(Exception, match="not a git repository"):
        h.order(tmp_path / "h")


def test_dirty_records_are_kept_and_the_commit_marked(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    h.add_records([rec(dirty=True)])
    h.add_records([rec(run_id="r2")])  # a clean measurement later: the commit was still measured dirty once
    assert h.commits()[SHA_A].dirty is True
    assert len(h.records("m1")) == 2


def test_old_records_without_time_or_subject_stay_readable(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    h.add_records([rec(time=None, subject=None)])
    assert h.commits()[SHA_A] == CommitInfo(SHA_A, None, None, False)
    assert h.series()[0].commits == [SHA_A]


def test_series_pool_repeats_mark_counters_and_leave_out_context(tmp_path: Path) -> None:
    h = HistoryStore(tmp_path / "h")
    h.add_records(
        [
            rec(SHA_A, repeat=0, samples=[1.0, 2.0], time=1),
            rec(SHA_A, repeat=1, samples=[3.0, float("nan")], time=1),
            rec(SHA_B, run_id="r2", samples=[4.0], time=2),
            rec(SHA_A, metric="syncs/update", unit="count", direction="lower", samples=[5.0], time=1),
            rec(SHA_A, metric="machine/other_cpu", unit="share", direction="none", samples=[0.1], time=1),
        ]
    )
    by_metric = {s.metric: s for s in h.series()}
    assert set(by_metric) == {"sps", "syncs/update"}
    sps = by_metric["sps"]
    assert isinstance(sps, Series) and sps.commits == [SHA_A, SHA_B] and sps.samples == [[1.0, 2.0, 3.0], [4.0]]
    assert not sps.exact and by_metric["syncs/update"].exact
    assert sps.key() == "m1|ppo-cartpole|{}|sps"  # num_envs is the benchmark's default, not a case or an option set


def test_a_new_parameter_or_default_does_not_split_a_series_but_cases_and_options_do(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h")
    old = rec(SHA_A, run_id="r1", params={"num_envs": 8, "impl": "numpy"})
    old_b = rec(SHA_A, run_id="r1", params={"num_envs": 8, "impl": "torch"})
    # the next commit added a parameter and changed a default: the same two cases, continued
    new = rec(SHA_B, run_id="r2", params={"num_envs": 16, "threads": 1, "impl": "numpy"}, time=1_700_000_100)
    new_b = rec(SHA_B, run_id="r2", params={"num_envs": 16, "threads": 1, "impl": "torch"}, time=1_700_000_100)
    # the same commit measured with an option set on the command line: a series of its own
    opt = rec(SHA_B, run_id="r3", params={"num_envs": 4, "threads": 1, "impl": "numpy"}, time=1_700_000_100)
    opt.meta = {"command": "rlbench run ppo-cartpole --num-envs 4 --repeats 3 --store s"}
    store.add_records([old, old_b, new, new_b, opt])
    series = {(json.dumps(s.params, sort_keys=True), tuple(s.commits)) for s in store.series() if s.metric == "sps"}
    assert series == {
        ('{"impl": "numpy"}', (SHA_A, SHA_B)),
        ('{"impl": "torch"}', (SHA_A, SHA_B)),
        ('{"impl": "numpy", "num_envs": 4}', (SHA_B,)),
    }
