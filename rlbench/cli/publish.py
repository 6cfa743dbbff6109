"""``rlbench publish [STORE] -o DIR [options]``: the history as a static site (options: see ``--help``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlbench.cli.parser import Parser
from rlbench.core.errors import UsageError


def build_publish_parser() -> Parser:
    """Options of ``rlbench publish``."""
    from rlbench.results.history import DEFAULT_HISTORY

    p = Parser(
        prog="rlbench publish",
        description="Write a history store as a static HTML site (an index, a page per benchmark with a chart per "
        "metric over commits, and the detected regressions), viewable from file:// or any static host (gh-pages); "
        "every script ships inside the site.",
    )
    p.add_argument("store", nargs="?", default=DEFAULT_HISTORY, help=f"history store (default: {DEFAULT_HISTORY})")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="DIR",
        help="folder to write the site into: a new or empty one (created if missing), or one rlbench published into "
        "before (it holds rlbench-site.json); any other folder is refused unless --force is given",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty folder that holds no earlier rlbench site: its files named as the site's own "
        "(index.html, regressions.html, bench-*.html, assets/...) are replaced, nothing else is touched; a link is "
        "never written through, even so",
    )
    p.add_argument(
        "--commit-url",
        metavar="URL",
        help="link commits through this http(s) template, {sha} standing for the full hash, e.g. "
        "https://github.com/OWNER/REPO/commit/{sha}",
    )
    p.add_argument(
        "--last",
        type=int,
        default=20,
        metavar="N",
        help="the index's change column: latest vs N measured commits earlier (20)",
    )
    p.add_argument(
        "--repo",
        metavar="PATH",
        help="git repository whose topology orders the commits (default: commit time, as the store has it)",
    )
    p.add_argument(
        "--plotly",
        choices=("bundle", "cdn"),
        default="bundle",
        help="bundle: copy plotly.js (its basic bundle, 1.2 MB) into the site's assets/, so it opens offline (default); "
        "cdn: link the same bundle and version on cdn.plot.ly instead, for a site kept in a repository (viewing needs "
        "the network)",
    )
    p.add_argument(
        "--all-metrics",
        action="store_true",
        help="also list and chart rlbench's own metrics (profile/..., timer/..., iterations, env_steps), hidden by default",
    )
    p.add_argument("--json", action="store_true", help="print what was written as one JSON object")
    return p


def publish_command(argv: list[str]) -> int:
    """Parse, check the store and the output folder, write the site, say where it is."""
    args = build_publish_parser().parse_args(argv)
    from rlbench.report.site import check_commit_url, check_site_dir, write_site
    from rlbench.results.history import HistoryStore

    store = Path(args.store)
    if not store.exists():
        raise UsageError(f"no history store at {str(store)!r} (make one with `rlbench history run` or `rlbench history add`)")
    if not store.is_dir():
        raise UsageError(f"{str(store)!r} is a file, not a history store (a folder made by `rlbench history run`)")
    if args.commit_url is not None:
        check_commit_url(args.commit_url)
    if args.last < 1:
        raise UsageError(f"--last must be at least 1, got {args.last}")
    repo = None
    if args.repo is not None:
        repo = Path(args.repo)
        if not repo.is_dir():
            raise UsageError(f"--repo {args.repo!r} is not a folder")
    out = check_site_dir(args.output, force=args.force)
    if out.resolve() == store.resolve() or store.resolve() in out.resolve().parents:
        raise UsageError(f"-o {args.output!r} lies inside the history store; write the site elsewhere")
    summary = write_site(
        HistoryStore(store),
        out,
        commit_url=args.commit_url,
        last_n=args.last,
        repo=repo,
        plotly=args.plotly,
        force=args.force,
        all_metrics=args.all_metrics,
    )
    if args.json:
        sys.stdout.write(json.dumps(summary.to_dict(), indent=2) + "\n")
    else:
        print(
            f"rlbench: site written to {out / 'index.html'}: {len(summary.benchmarks)} benchmark page(s), "
            f"{summary.series} series over {summary.commits} commit(s) on {len(summary.machines)} machine(s), "
            f"{summary.steps} step(s), {summary.open_regressions} open regression(s): {summary.confirmed} confirmed, "
            f"{summary.unconfirmed} candidate(s) not confirmed yet, {summary.dismissed} dismissed "
            f"({summary.bytes / 1e6:.1f} MB)",
            file=sys.stderr,
        )
    return 0
