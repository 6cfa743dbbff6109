"""`rlbench history run` under faults: a suite that does not load, a `--commits` that is no file, a store file that
cannot be written, a full disk, an unreadable records file, a `kill -9` between two commits. Each is one clear line
and the right exit code, and nothing measured is lost or left in TMPDIR.

The repository (built once): after ``init``, ``add tiny`` (a 10 ms benchmark), ``break the suite`` (a syntax error in
the suite file: the benchmark cannot even be found) and ``fix the suite``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rlbench.analysis.ab import Worktrees
from rlbench.analysis.history_run import run_history
from rlbench.cli import main
from rlbench.core.errors import StoreError
from rlbench.results.fingerprint import machine_fingerprint
from rlbench.results.history import HistoryStore
from tests.history.conftest import RUN_TINY, bench_source, git, rlbench

pytestmark = pytest.mark.slow  # rlbench runs per commit, in worktrees (a benchmark of 10 ms, no torch)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("faults") / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text(".rlbench/\n__pycache__/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    (repo / "suites").mkdir()
    shas = {"root": git(repo, "rev-parse", "HEAD")}
    for name, source in (("good", bench_source(0.01)), ("broken", "def tiny(:\n"), ("fixed", bench_source(0.01))):
        (repo / "suites" / "tiny_bench.py").write_text(source)
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"{name} suite")
        shas[name] = git(repo, "rev-parse", "HEAD")
    return repo, shas


def one_line(proc: subprocess.CompletedProcess[str] | tuple[int, str], code: int) -> str:
    """The exit code, and one error line: the last one on stderr (the progress of the commits before it aside)."""
    returncode, stderr = proc if isinstance(proc, tuple) else (proc.returncode, proc.stderr)
    lines = stderr.strip().splitlines()
    assert returncode == code, (returncode, stderr[-3000:])
    assert [line for line in lines if "rlbench: error:" in line] == lines[-1:], stderr[-3000:]
    assert lines[-1].startswith("rlbench: error:") and "Traceback" not in stderr, stderr[-3000:]
    return lines[-1]


def leftovers() -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"rlbench-history-{os.getpid()}-*"))


def test_a_suite_that_does_not_load_is_a_failed_gap_and_a_range_broken_throughout_exits_1(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, shas = repo
    store = tmp_path / "h"
    proc = rlbench(
        ["history", "run", f"{shas['root']}..HEAD", "--repeats", "1", "--store", str(store), "--json", *RUN_TINY], root
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["measured"] == [shas["good"], shas["fixed"]]
    (gap,) = out["gaps"]
    assert gap["commit"] == shas["broken"] and gap["status"] == "failed", gap  # red on the site, not "absent" grey
    assert "failed to load" in gap["message"]
    # every commit of the range broken: the measured code failed, exit 1 (not 2, bad input)
    alone = tmp_path / "alone"
    err = one_line(rlbench(["history", "run", shas["broken"], "--store", str(alone), *RUN_TINY], root), 1)
    assert "the measured code failed at every commit" in err and "failed to load" in err
    assert [g.status for g in HistoryStore(alone).gaps(HistoryStore(alone).machines()[0])] == ["failed"]


@pytest.mark.parametrize("what", ["fifo", "/dev/zero", "folder"])
def test_commits_that_is_no_regular_file_is_refused_at_once(
    repo: tuple[Path, dict[str, str]], tmp_path: Path, what: str
) -> None:
    root, _ = repo
    path = {"fifo": tmp_path / "fifo", "/dev/zero": Path("/dev/zero"), "folder": tmp_path}[what]
    if what == "fifo":
        os.mkfifo(path)
    proc = rlbench(["history", "run", "--commits", str(path), "--store", str(tmp_path / "h"), *RUN_TINY], root, timeout=60)
    err = one_line(proc, 2)  # no hang on the FIFO, no memory blow-up on /dev/zero
    assert f"--commits {str(path)!r} cannot be read" in err and "one revision per line" in err
    assert not (tmp_path / "h").exists()


def test_outside_a_repository_is_one_plain_line(tmp_path: Path) -> None:
    err = one_line(rlbench(["history", "run", "HEAD", "--store", str(tmp_path / "h"), *RUN_TINY], tmp_path), 2)
    assert "is not inside a git repository" in err and "['" not in err  # no Python list in the message


@pytest.mark.parametrize("where", ["commits.jsonl", "MACHINE/gaps.jsonl", "MACHINE/records/SHA.jsonl"])
def test_a_link_or_fifo_in_the_store_stops_the_run_before_measuring(
    repo: tuple[Path, dict[str, str]], tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    root, shas = repo
    store = tmp_path / "h"
    path = store / where.replace("MACHINE", str(machine_fingerprint()["id"])).replace("SHA", shas["root"])
    path.parent.mkdir(parents=True)
    if where.startswith("commits"):
        (tmp_path / "elsewhere.jsonl").write_text("")
        path.symlink_to(tmp_path / "elsewhere.jsonl")
    else:
        os.mkfifo(path)
    monkeypatch.chdir(root)
    code = main(["history", "run", shas["good"], "--store", str(store), *RUN_TINY])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and err.startswith("rlbench: error:"), err  # before any commit
    assert str(path) in err and ("symbolic link" in err or "FIFO" in err) and "move it away" in err
    assert sorted(store.rglob("*.jsonl")) == [path]  # nothing measured, nothing written
    assert not path.is_symlink() or (tmp_path / "elsewhere.jsonl").read_text() == ""  # nor through the link
    assert not leftovers()


def test_a_full_disk_names_the_commits_saved_and_keeps_the_one_in_flight(
    repo: tuple[Path, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    root, shas = repo
    real = HistoryStore.add_records
    calls = []

    def add_records(self, records):  # the disk fills up on the second commit
        calls.append(1)
        if len(calls) == 2:
            raise StoreError(f"cannot write to history store file {str(self.root)!r} (No space left on device)")
        return real(self, records)

    monkeypatch.setattr(HistoryStore, "add_records", add_records)
    monkeypatch.chdir(root)  # the repository; the unsaved commit's records are kept in its .rlbench/
    code = main(["history", "run", f"{shas['root']}..HEAD", "--repeats", "1", "--store", str(tmp_path / "h"), *RUN_TINY])
    err = one_line((code, capsys.readouterr().err), 2)
    assert "No space left on device" in err and f"1 commit(s) measured ({shas['good'][:12]})" in err, err
    assert "the same command resumes after them" in err
    assert f"1 gap(s) ({shas['broken'][:12]})" in err
    kept = root / ".rlbench" / f"history-unsaved-{shas['fixed'][:12]}"
    assert f"kept in {kept}" in err and list(kept.glob("*.jsonl"))  # the commit in flight: kept, named
    shutil.rmtree(kept)
    monkeypatch.setattr(HistoryStore, "add_records", real)
    history = HistoryStore(tmp_path / "h")
    assert {r.fingerprint["git"]["commit"] for r in history.records(history.machines()[0])} == {shas["good"]}
    assert not leftovers()


def test_an_unreadable_records_file_is_measured_once_and_moved_aside(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, shas = repo
    store = tmp_path / "h"
    path = store / str(machine_fingerprint()["id"]) / "records" / f"{shas['good']}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00\xff not a records file\n")
    cmd = ["history", "run", shas["good"], "--repeats", "1", "--store", str(store), *RUN_TINY]
    first = rlbench(cmd, root)
    assert first.returncode == 0, first.stderr[-3000:]
    moved = store / "unreadable" / path.relative_to(store)
    assert f"moved it to {moved}" in first.stderr and "1 measured" in first.stdout, first.stdout + first.stderr
    assert moved.read_bytes() == b"\x00\xff not a records file\n"  # kept, not deleted
    again = rlbench(cmd, root)
    assert again.returncode == 0 and "0 measured, 1 already in the store" in again.stdout, again.stdout + again.stderr
    assert "warning" not in again.stderr  # read clean: the commit is not measured again, ever


def test_no_commit_store_waits_in_tmpdir_and_a_killed_run_leaves_nothing(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, shas = repo
    seen: list[list[Path]] = []

    def on_commit(index: int, info: object, event: str) -> None:
        if event != "measuring":  # after each commit: its store is in the history, not in TMPDIR
            seen.append([p for d in leftovers() for p in d.glob("store-*")])

    store = HistoryStore(tmp_path / "h")
    run_history([shas["good"], shas["fixed"]], ["run", "tiny"], store, root, repeats=1, on_commit=on_commit)
    assert seen == [[], []] and not leftovers()
    # a `kill -9` between two commits left a work directory with no worktree in it: the next run removes it
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = Path(tempfile.mkdtemp(prefix=f"rlbench-history-{dead.pid}-"))
    (orphan / f"store-{shas['good'][:12]}").mkdir()
    with Worktrees(root, "history"):
        assert not orphan.exists()
