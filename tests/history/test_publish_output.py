"""``rlbench publish -o DIR`` never replaces a user's files: the output folder and every path the site writes are
checked before anything is written.

Each class of refused output (a non-empty folder that is no rlbench site, a linked ``assets/``, a linked page, a
linked or dangling ``-o``, a ``--commit-url`` that is not http(s)) gets one line on stderr, exit 2, and leaves every
file as it was: the test snapshots the folders (names, kinds, bytes, link targets) before and compares after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.report.site import SITE_FILE, check_site_dir, is_site, write_site
from tests.history.site_data import Synthetic, synthetic_store

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Synthetic:
    return synthetic_store(tmp_path_factory.mktemp("history") / "store", n=6)


def snapshot(*roots: Path) -> dict[str, object]:
    """Every path under ``roots`` (links not followed): a file's bytes, a link's target, a folder as such."""
    out: dict[str, object] = {}
    for root in roots:
        if not os.path.lexists(root):
            out[str(root)] = None
            continue
        paths = [root, *root.rglob("*")] if root.is_dir() and not root.is_symlink() else [root]
        for p in paths:
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_dir():
                out[str(p)] = "dir"
            else:
                out[str(p)] = p.read_bytes()
    return out


def publish_cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["publish", *args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def refused(capsys: pytest.CaptureFixture, *args: str) -> str:
    """Run ``rlbench publish ARGS`` in this process; assert exit 2 and one ``rlbench: error:`` line; return it."""
    code, out, err = publish_cli(capsys, *args)
    assert code == 2, (args, out, err)
    assert not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlbench: error:"), err
    return lines[0]


def test_a_folder_that_is_no_site_is_refused_and_force_writes_only_the_sites_files(
    synthetic: Synthetic, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.html").write_text("<h1>my own docs</h1>")
    (docs / "guide.md").write_text("# guide")
    before = snapshot(docs)
    line = refused(capsys, str(synthetic.store.root), "-o", str(docs))
    assert "not empty" in line and "--force" in line and SITE_FILE in line
    assert snapshot(docs) == before  # nothing written: no assets/, no pages, no marker
    # --force: the site's own files replace theirs; the user's other files stay
    code, _, err = publish_cli(capsys, str(synthetic.store.root), "-o", str(docs), "--force")
    assert code == 0, err
    assert "my own docs" not in (docs / "index.html").read_text() and (docs / "guide.md").read_text() == "# guide"
    assert is_site(docs)


def test_empty_folders_gh_pages_checkouts_and_earlier_sites_are_accepted(synthetic: Synthetic, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    pages = tmp_path / "pages"  # a fresh gh-pages worktree: .git, .nojekyll and CNAME are never the site's
    pages.mkdir()
    (pages / ".git").write_text("gitdir: /elsewhere\n")
    (pages / ".nojekyll").write_text("")
    (pages / "CNAME").write_text("bench.example\n")
    for out in (empty, pages, tmp_path / "new" / "deeper"):
        assert check_site_dir(out) == out
        write_site(synthetic.store, out)
        assert is_site(out)
    assert (pages / "CNAME").read_text() == "bench.example\n" and (pages / ".git").read_text() == "gitdir: /elsewhere\n"
    # rlbench's own published site in the repository is recognised as an earlier site, so it can be published again
    copy = tmp_path / "reports-history"
    shutil.copytree(REPO / "reports" / "history", copy)
    assert is_site(copy)
    write_site(synthetic.store, copy, plotly="cdn")
    # a marker that is not rlbench's (another tool's JSON, a link to one) does not make a site
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / SITE_FILE).write_text('{"generator": "someone else"}')
    assert not is_site(fake)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / SITE_FILE).symlink_to(empty / SITE_FILE)
    assert not is_site(linked)


def earlier_site(synthetic: Synthetic, root: Path) -> Path:
    site = root / "site"
    write_site(synthetic.store, site)
    return site


def test_a_linked_assets_folder_is_refused_and_nothing_is_written(
    synthetic: Synthetic, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    site = earlier_site(synthetic, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "site.js").write_text("// the user's own script")
    shutil.rmtree(site / "assets")
    (site / "assets").symlink_to(outside)
    (site / "index.html").write_text("stale index, must stay until a publish succeeds")
    before = snapshot(site, outside)
    for extra in ((), ("--force",)):
        line = refused(capsys, str(synthetic.store.root), "-o", str(site), *extra)
        assert "assets" in line and f"a symbolic link to {str(outside)!r}" in line and "through a linked folder" in line
        assert snapshot(site, outside) == before


def test_a_linked_page_is_refused_before_assets_are_written(
    synthetic: Synthetic, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    site = earlier_site(synthetic, tmp_path)
    shutil.rmtree(site / "assets")
    target = tmp_path / "precious.html"
    target.write_text("the user's page")
    (site / "index.html").unlink()
    (site / "index.html").symlink_to(target)
    before = snapshot(site, target)
    line = refused(capsys, str(synthetic.store.root), "-o", str(site))
    assert "index.html" in line and "a symbolic link to" in line
    assert snapshot(site, target) == before
    assert not (site / "assets").exists()  # checked before anything: assets/ was not made again


def test_output_links_say_what_they_are(synthetic: Synthetic, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    folder = tmp_path / "real"
    folder.mkdir()
    linked = tmp_path / "linked"
    linked.symlink_to(folder)
    (tmp_path / "file").write_text("mine")
    before = snapshot(tmp_path)
    line = refused(capsys, str(synthetic.store.root), "-o", str(dangling))
    assert "a dangling symbolic link (to" in line and "is a file" not in line
    line = refused(capsys, str(synthetic.store.root), "-o", str(linked))
    assert f"a symbolic link to {str(folder)!r}" in line
    line = refused(capsys, str(synthetic.store.root), "-o", str(tmp_path / "file"))
    assert "is a regular file, not a folder" in line
    line = refused(capsys, str(synthetic.store.root), "-o", str(tmp_path / "file" / "sub"))
    assert "is a regular file, not a folder" in line
    assert snapshot(tmp_path) == before and not os.path.lexists(tmp_path / "nowhere")


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)//{sha}",
        " javascript:alert('{sha}')",
        "data:text/html,{sha}",
        "file:///etc/{sha}",
        "https:{sha}",
        "//example.com/{sha}",
        "https://example.com/commit/",
    ],
)
def test_commit_url_must_be_http(synthetic: Synthetic, tmp_path: Path, capsys: pytest.CaptureFixture, url: str) -> None:
    out = tmp_path / "site"
    line = refused(capsys, str(synthetic.store.root), "-o", str(out), "--commit-url", url)
    assert "--commit-url must" in line
    assert not out.exists()


def test_http_commit_urls_are_linked(synthetic: Synthetic, tmp_path: Path) -> None:
    for url in ("https://github.com/o/r/commit/{sha}", "http://git.example:8080/c/{sha}"):
        out = tmp_path / url.split(":", 1)[0]
        write_site(synthetic.store, out, commit_url=url)
        assert (
            url.replace("{sha}", synthetic.commits[-1])
            in (out / "regressions.html").read_text() + (out / "index.html").read_text()
        )


@pytest.mark.slow
def test_cli_refusal_is_one_line_in_a_real_process(synthetic: Synthetic, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.html").write_text("mine")
    proc = subprocess.run(
        [sys.executable, "-m", "rlbench", "publish", str(synthetic.store.root), "-o", str(docs)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and not proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("rlbench: error:")
    assert [p.name for p in docs.iterdir()] == ["index.html"] and (docs / "index.html").read_text() == "mine"
    help_text = subprocess.run(
        [sys.executable, "-m", "rlbench", "publish", "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    ).stdout
    assert "--force" in help_text


def test_a_publish_stopped_half_way_can_be_published_again(
    synthetic: Synthetic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk after the first pages: the folder is still recognised as rlbench's, and the next publish (no
    --force) completes it."""
    from rlbench.core.errors import UsageError
    from rlbench.report import site as site_mod

    out = tmp_path / "site"
    real = site_mod.write_output
    written: list[str] = []

    def full_disk(path: Path, data: object, flag: str = "output") -> Path:
        if Path(path).name == "regressions.html":
            raise UsageError(f"-o {str(path)!r}: cannot write (No space left on device)")
        written.append(Path(path).name)
        return real(path, data, flag)

    monkeypatch.setattr(site_mod, "write_output", full_disk)
    with pytest.raises(UsageError, match="No space left"):
        write_site(synthetic.store, out)
    assert "index.html" in written and is_site(out)
    monkeypatch.setattr(site_mod, "write_output", real)
    check_site_dir(out)  # not refused as a foreign folder
    summary = write_site(synthetic.store, out)
    assert all((out / p).is_file() for p in summary.pages) and is_site(out)
