"""What a newcomer is promised about the repository itself: a README that fits on a few screens, committed reports
that stay small enough to clone, and no file that points outside the repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150
REPORTS_MAX_BYTES = 5_000_000


def tracked_files() -> list[Path]:
    """The files git tracks (a clean clone's content), or every file when this is not a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.split("\0") if p and (ROOT / p).is_file()]


def test_readme_is_at_most_150_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move reference text to docs/"


def test_committed_reports_stay_under_5_mb() -> None:
    """What reports/ adds to a clone: its distinct contents, less those the repository holds elsewhere anyway (git
    stores one copy of identical files: the history site's copy of plotly.js is the package's own)."""
    try:
        out = subprocess.run(["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    blobs: dict[str, set[str]] = {}  # content hash -> paths holding it
    for entry in out.decode().split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            blobs.setdefault(meta.split()[1], set()).add(path)
    sizes = {
        min(paths): (ROOT / min(paths)).stat().st_size
        for paths in blobs.values()
        if all(p.split("/", 1)[0] == "reports" for p in paths) and (ROOT / min(paths)).is_file()
    }
    total = sum(sizes.values())
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert sizes and total <= REPORTS_MAX_BYTES, f"reports/ holds {total / 1e6:.2f} MB; the largest: " + ", ".join(
        f"{p} {n / 1e6:.2f} MB" for p, n in biggest
    )


def test_no_file_refers_to_a_path_outside_the_repository() -> None:
    outside = "../" + "shared"  # spelled in two parts so this file does not match itself
    hits = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if outside in text:
            hits.append(str(path.relative_to(ROOT)))
    assert not hits, f"files that refer to {outside}: {hits}"
