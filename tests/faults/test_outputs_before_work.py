"""Every output of a command is checked before any measuring (issue 57, serious 5).

`ab --keep DIR` was checked after the last round (a `--keep` that is a file, under a file or a link lost every round
to an "internal error"), `calibrate --out X.md` checked X.md but not the X.json beside it, and `--out x.json`
overwrote the report with its own JSON. The class: :func:`rlbench.results.outputs.check_outputs` checks every output
file and folder of a command, and that no two are the same file nor one of its inputs, before the work starts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import pytest

from rlbench.analysis import calibration
from rlbench.analysis.ab import keep_stores
from rlbench.cli import main
from rlbench.cli.calibrate import outputs, save_results
from rlbench.core.errors import UsageError
from rlbench.results.outputs import check_output_dir, check_outputs
from tests.faults.fault_helpers import one_line_error, rlbench

GIT = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
TINY = "import rlbench\n\n\n@rlbench.benchmark\ndef tiny(n: int = 3) -> dict:\n    return {'value': float(n)}\n"


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("rlbench: error:"), err
    assert "internal error" not in err, err
    return err


# --- the shared checker -------------------------------------------------------------------------------------------


def test_two_outputs_that_are_one_file_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")  # the same folder under another name
    with pytest.raises(UsageError, match="is the same file as --report") as err:
        check_outputs([(tmp_path / "real" / "r.md", "--report"), (tmp_path / "alias" / "r.md", "--summary")])
    assert "give different paths" in str(err.value)
    assert list((tmp_path / "real").iterdir()) == []
    # a device is written through: naming it twice replaces nothing
    assert check_outputs([("/dev/null", "--report"), ("/dev/null", "--summary"), (None, "--x"), ("-", "--y")]) == [
        Path("/dev/null"),
        Path("/dev/null"),
        None,
        None,
    ]


def test_an_output_that_is_an_input_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "cal.json"
    data.write_text("{}")
    with pytest.raises(UsageError, match="is the --render input"):
        check_outputs([(tmp_path / "cal.json", "--out")], inputs=[(data, "the --render input")])
    assert data.read_text() == "{}"


def test_an_output_folder_is_a_writable_folder_with_nothing_odd_where_files_go(tmp_path: Path) -> None:
    file = tmp_path / "FILE"
    file.write_text("precious")
    (tmp_path / "link").symlink_to(tmp_path)
    for path, words in (
        (file, "is a file, not a folder"),
        (file / "sub", "cannot create the folder"),
        (tmp_path / "link", "is a symbolic link, not a folder"),
    ):
        with pytest.raises(UsageError, match=words):
            check_output_dir(path, "--keep")
    keep = tmp_path / "keep"
    (keep / "store-head").mkdir(parents=True)
    (keep / "store-base").write_text("")
    with pytest.raises(UsageError, match=r"store-base' is a file, where rlbench puts a folder"):
        check_output_dir(keep, "--keep", ("store-base/", "store-head/"))
    (keep / "store-base").unlink()
    (keep / "base-output.log").symlink_to(file)
    with pytest.raises(UsageError, match=r"base-output.log' is a symbolic link"):
        check_output_dir(keep, "--keep", ("store-base/", "base-output.log"))
    assert file.read_text() == "precious"
    assert check_output_dir(tmp_path / "new" / "deep", "--keep", ("store-base/",)).is_dir()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_output_folder_is_refused(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    with pytest.raises(UsageError, match="not writable"):
        check_output_dir(ro, "--keep")


# --- ab -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    (path / "suites").mkdir(parents=True)
    (path / "suites" / "tiny.py").write_text(TINY)
    (path / ".gitignore").write_text(".rlbench/\n")
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=path, check=True)
    subprocess.run([*GIT, "commit", "-qm", "tiny"], cwd=path, check=True)
    (path / "FILE").write_text("precious")
    (path / "link").symlink_to(path / "suites")
    return path


@pytest.mark.parametrize(
    ("keep", "words"),
    [
        ("FILE", "--keep 'FILE' is a file, not a folder"),
        ("FILE/sub", "--keep 'FILE/sub': cannot create the folder"),
        ("link", "--keep 'link' is a symbolic link"),
    ],
)
def test_ab_keep_that_cannot_hold_the_stores_is_refused_before_the_first_round(repo: Path, keep: str, words: str) -> None:
    err = one_line_error(rlbench(["ab", "HEAD", "--keep", keep, "--", "run", "tiny"], repo, timeout=60))
    assert words in err
    assert (repo / "FILE").read_text() == "precious" and (repo / "link").is_symlink()
    assert not (repo / ".rlbench").exists()  # no round ran: nothing was measured, so nothing could be lost
    listing = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True, check=True).stdout
    assert listing.count("\n") == 1


def test_ab_report_and_summary_on_one_file_are_refused(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    code = main(["ab", "HEAD", "--fail", "value:5%", "--report", "r.md", "--summary", str(repo / "r.md"), "--", "run", "tiny"])
    assert code == 2 and f"--summary '{repo / 'r.md'}' is the same file as --report 'r.md'" in _err(capsys)
    assert not (repo / "r.md").exists()


def test_keep_falls_back_to_a_folder_of_its_own_when_copying_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last safety net: the folder checked before the rounds became a file meanwhile (or the disk filled)."""
    monkeypatch.chdir(tmp_path)
    stores = {side: tmp_path / "work" / f"store-{side}" for side in ("base", "head")}
    for side, store in stores.items():
        store.mkdir(parents=True)
        (store / "run.jsonl").write_text(f'{{"side": "{side}"}}\n')
    keep = tmp_path / "keep"
    keep.write_text("a file now")
    with pytest.raises(UsageError, match="records are kept in ") as err:
        keep_stores(stores, keep)
    spare = Path(str(err.value).rsplit("kept in ", 1)[1].split(" ")[0])
    assert spare.parent == tmp_path / ".rlbench"
    for side in stores:
        assert (spare / f"store-{side}" / "run.jsonl").read_text() == f'{{"side": "{side}"}}\n'
    assert keep.read_text() == "a file now"


# --- calibrate ----------------------------------------------------------------------------------------------------


@pytest.fixture
def no_measuring(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Any calibration that starts is recorded here (the checks must refuse before it)."""
    started: list[str] = []

    def calibrate(*args: object, **kwargs: object) -> dict:
        started.append("measured")
        return {}

    monkeypatch.setattr(calibration, "calibrate", calibrate)
    return started


def test_calibrate_out_json_would_overwrite_the_report_with_its_json(
    tmp_path: Path, no_measuring: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["calibrate", "--out", str(tmp_path / "x.json")]) == 2
    err = _err(capsys)
    assert "its JSON goes beside it as" in err and "give a .md path" in err
    assert no_measuring == [] and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("kind", ["folder", "link", "under a file"])
def test_calibrate_json_beside_the_report_is_checked_before_measuring(
    tmp_path: Path, no_measuring: list[str], capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    out = tmp_path / "cal.md"
    if kind == "folder":
        (tmp_path / "cal.json").mkdir()
    elif kind == "link":
        (tmp_path / "cal.json").symlink_to(precious)
    else:
        out = precious / "cal.md"
    assert main(["calibrate", "--comparisons", "1", "--out", str(out)]) == 2
    err = _err(capsys)
    assert "--out" in err and ("cal.json" in err or "cannot create directory" in err), err
    assert no_measuring == []
    assert precious.read_text() == "keep me" and not out.exists()


def test_calibrate_to_a_device_puts_no_json_beside_it() -> None:
    args = argparse.Namespace(out="/dev/null", render=None)
    assert outputs(args) == (Path("/dev/null"), None)  # never /dev/null.json


def test_calibrate_results_that_cannot_be_written_at_the_end_are_saved_elsewhere(tmp_path: Path) -> None:
    """After the measuring, a write can still fail (a full disk): the results go to a temporary file, named."""
    blocker = tmp_path / "gone"
    blocker.write_text("")
    payload = json.dumps({"benchmarks": {}}) + "\n"
    with pytest.raises(UsageError, match="the results are saved in ") as err:
        save_results(blocker / "cal.json", payload)
    spare = Path(str(err.value).split("the results are saved in ")[1].split(" ")[0])
    try:
        assert spare.read_text() == payload and f"--render {spare}" in str(err.value)
    finally:
        spare.unlink()
