"""The history store under faults: a last line without its newline, a file nothing can be read from, a link or FIFO
where a store file belongs, a missing or corrupt commits.jsonl. Nothing stored is ever lost or hidden."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from rlbench.core.errors import StoreError
from rlbench.results.history import CommitInfo, Gap, HistoryStore
from rlbench.results.store import RecordsWarning
from tests.history.test_store import SHA_A, SHA_B, SHA_C, rec

GAP = Gap("m1", SHA_B, "bench", {}, "failed", "it broke")


def quietly(fn, *args):
    """Call ``fn`` and fail on any warning (the store must read back clean)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


def _records_file(root: Path, sha: str = SHA_A) -> Path:
    return root / "m1" / "records" / f"{sha}.jsonl"


# every kind of history store file goes through the same append: (path, add one more, read back)
KINDS = {
    "records": (
        lambda root: _records_file(root),
        lambda h: h.add_records([rec(repeat=1)]),
        lambda h: sorted(r.repeat for r in h.records("m1")),
        [0, 1],
    ),
    "gaps": (
        lambda root: root / "m1" / "gaps.jsonl",
        lambda h: h.add_gap(Gap("m1", SHA_C, "bench", {}, "absent", "not yet")),
        lambda h: sorted(g.commit for g in h.gaps("m1")),
        [SHA_B, SHA_C],
    ),
    "commits": (
        lambda root: root / "commits.jsonl",
        lambda h: h.add_commits([CommitInfo(SHA_C, 5, "third")]),
        lambda h: sorted(h.commits()),
        [SHA_A, SHA_C],
    ),
}


def _one_line_store(root: Path, kind: str) -> Path:
    """A store whose ``kind`` file holds exactly one complete line."""
    h = HistoryStore(root)
    h.add_records([rec(repeat=0)])
    if kind == "gaps":
        h.add_gap(GAP)
    path = KINDS[kind][0](root)
    lines = [line for line in path.read_text().splitlines() if line]
    path.write_text("\n".join(lines[-1:]))  # one complete line, its newline missing (an editor, a hand-made file)
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_an_append_keeps_a_complete_last_line_that_lacks_its_newline(tmp_path: Path, kind: str) -> None:
    path = _one_line_store(tmp_path / "h", kind)
    before = path.read_bytes()
    assert before and not before.endswith(b"\n")
    _, add, read, want = KINDS[kind]
    quietly(add, HistoryStore(tmp_path / "h"))
    after = path.read_bytes()
    assert after.startswith(before + b"\n") and after.endswith(b"\n")  # the line is kept, its newline added
    assert quietly(read, HistoryStore(tmp_path / "h")) == want


@pytest.mark.parametrize("kind", KINDS)
def test_an_append_still_cuts_a_torn_last_line(tmp_path: Path, kind: str) -> None:
    path = _one_line_store(tmp_path / "h", kind)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # a single line, cut off mid-write: all the reader would reject
    _, add, read, want = KINDS[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the torn line is warned about while reading before the append
        add(HistoryStore(tmp_path / "h"))
    assert all(json.loads(line) for line in path.read_text().splitlines())  # no partial line left in the file
    got = quietly(read, HistoryStore(tmp_path / "h"))
    assert set(got) <= set(want) and got  # the new line reads back; the torn one is gone


@pytest.mark.parametrize(
    "content",
    [b"\x00\xff\xfe not text at all\n", b"garbage, not JSON\nmore garbage\n", b'{"json": "but not a record"}\n'],
    ids=["not-utf8", "not-json", "not-records"],
)
def test_an_unreadable_records_file_is_moved_aside_and_new_records_are_seen(tmp_path: Path, content: bytes) -> None:
    root = tmp_path / "h"
    h = HistoryStore(root)
    h.add_records([rec(SHA_B, run_id="r0")])
    path = _records_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    with pytest.warns(RecordsWarning) as caught:
        res = HistoryStore(root).add_records([rec(repeat=0), rec(repeat=1)])
    moved = root / "unreadable" / "m1" / "records" / f"{SHA_A}.jsonl"
    said = " | ".join(str(w.message) for w in caught)
    assert f"moved it to {moved}" in said and str(path) in said, said
    assert moved.read_bytes() == content  # nothing lost: the file is kept whole, where the warning says
    assert res.added == 2
    fresh = HistoryStore(root)
    assert quietly(lambda: sorted(r.repeat for r in fresh.records("m1") if r.fingerprint["git"]["commit"] == SHA_A)) == [0, 1]
    assert quietly(fresh.has, "m1", SHA_A, "ppo-cartpole", {})  # a history run skips the commit from now on
    assert quietly(fresh.machines) == ["m1"]  # the folder of moved files is part of the store, not a stray
    # a second unreadable file of the same commit is kept beside the first
    path.write_bytes(content)
    with pytest.warns(RecordsWarning, match="moved it to"):
        HistoryStore(root).add_records([rec(repeat=2)])
    assert (moved.parent / f"{SHA_A}.1.jsonl").read_bytes() == content


@pytest.mark.parametrize("kind", ["gaps", "commits"])
def test_an_unreadable_gaps_or_commits_file_is_moved_aside(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "h"
    path = _one_line_store(root, kind)
    path.write_bytes(b"\x00\xff binary junk\n")
    _, add, read, _ = KINDS[kind]
    with pytest.warns(RecordsWarning, match="moved it to"):
        add(HistoryStore(root))
    assert (root / "unreadable" / path.relative_to(root)).read_bytes() == b"\x00\xff binary junk\n"
    got = quietly(read, HistoryStore(root))
    assert (SHA_C in got) if kind == "gaps" else ({SHA_A, SHA_C} <= set(got))  # what was added is seen


@pytest.mark.parametrize("where", ["commits.jsonl", "m1/gaps.jsonl", f"m1/records/{SHA_B}.jsonl", "m1/machine.json"])
@pytest.mark.parametrize("what", ["symlink", "fifo"])
def test_a_link_or_fifo_where_a_store_file_belongs_is_refused_by_name(tmp_path: Path, where: str, what: str) -> None:
    root = tmp_path / "h"
    h = HistoryStore(root)
    h.add_records([rec(repeat=0)])
    path = root / where
    path.unlink(missing_ok=True)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    if what == "symlink":
        path.symlink_to(outside)
    else:
        os.mkfifo(path)
    with pytest.raises(StoreError) as caught:
        HistoryStore(root).check_writable("m1")
    said = str(caught.value)
    assert str(path) in said and ("symbolic link" if what == "symlink" else "FIFO") in said and "\n" not in said
    assert "move it away" in said
    # an append never writes through it either, and says why in the same words
    if where != "m1/machine.json":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(StoreError, match=r"symbolic link|FIFO"):
                store = HistoryStore(root)
                if "gaps" in where:
                    store.add_gap(GAP)
                elif "commits" in where:
                    store.add_commits([CommitInfo(SHA_C, 1, "x")])
                else:
                    store.add_records([rec(SHA_B, run_id="r9")])
    assert outside.read_text() == ""  # nothing written through the link
    assert path.is_symlink() if what == "symlink" else path.is_fifo()  # and it is left as it was
    assert sorted(r.repeat for r in HistoryStore(root).records("m1") if r.fingerprint["git"]["commit"] == SHA_A) == [0]


@pytest.mark.parametrize("damage", ["missing", "cut", "corrupt"])
def test_a_missing_or_corrupt_commits_file_keeps_the_order_and_is_rewritten(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "h"
    h = HistoryStore(root)
    # committer times run against the shas' order, so an order by sha (what a lost commits.jsonl gave) is wrong
    h.add_records([rec(SHA_A, time=300, subject="third"), rec(SHA_B, run_id="r2", time=100, subject="first")])
    h.add_records([rec(SHA_C, run_id="r3", time=200, subject="second")])
    assert h.order() == [SHA_B, SHA_C, SHA_A]
    commits = root / "commits.jsonl"
    if damage == "missing":
        commits.unlink()
    elif damage == "cut":
        commits.write_text(commits.read_text().splitlines()[0] + "\n")  # only SHA_A's line left
    else:
        commits.write_bytes(b"\x00\xff\xfe")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh = HistoryStore(root)
        assert fresh.order() == [SHA_B, SHA_C, SHA_A]  # every record carries its commit's time
        assert fresh.commits()[SHA_C] == CommitInfo(SHA_C, 200, "second", False)
        fresh.add_commits([CommitInfo("d" * 40, 400, "fourth")])  # the next write rewrites it, whole
    lines = [json.loads(line) for line in commits.read_text().splitlines()]
    assert {d["sha"]: d["time"] for d in lines} == {SHA_A: 300, SHA_B: 100, SHA_C: 200, "d" * 40: 400}
    assert quietly(HistoryStore(root).order) == [SHA_B, SHA_C, SHA_A, "d" * 40]
    kept = root / "unreadable" / "commits.jsonl"
    assert kept.read_bytes() == b"\x00\xff\xfe" if damage == "corrupt" else not kept.exists()  # kept aside, not deleted
