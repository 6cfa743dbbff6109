"""A picture of a ``rlbench profile --trace`` file: a track per process and thread, phases coloured by layer.

``python -m rlbench.suites.scripts.trace_png TRACE.json OUT.png [--from S] [--seconds S]`` draws the trace's complete
events (``"ph": "X"``) on one time axis, the way Perfetto's UI lays them out (which needs a browser with the network
to reach ui.perfetto.dev), nested phases stacked below their parents, with the queue items' flow arrows from put to
get. It draws only what the file holds.
"""

from __future__ import annotations

import argparse
import io
import json
from collections import defaultdict
from pathlib import Path

from rlbench.report.plots import save_png_bytes

LAYER_COLOURS = {
    "environment": "#4C78A8",
    "inference": "#F58518",
    "update": "#54A24B",
    "replay": "#B279A2",
    "advantage": "#EECA3B",
    "transfer": "#9D755D",
    "wait": "#BAB0AC",
    "other": "#72B7B2",
}


def draw(trace: dict, out: Path, start: float | None = None, seconds: float | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = trace["traceEvents"]
    names = {(e["pid"], 0): e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        raise SystemExit("the trace holds no phases")
    t_first = min(e["ts"] for e in spans) / 1e6
    lo = t_first if start is None else start
    hi = max(e["ts"] + e["dur"] for e in spans) / 1e6 if seconds is None else lo + seconds
    tracks = sorted({(e["pid"], e["tid"]) for e in spans}, key=lambda k: (k[0] != spans[0]["pid"], k))
    depth: dict[tuple[int, int], int] = {}
    rows: dict[tuple[int, int], list] = defaultdict(list)
    for key in tracks:
        open_ends: list[float] = []
        for e in sorted((e for e in spans if (e["pid"], e["tid"]) == key), key=lambda e: (e["ts"], -e["dur"])):
            s, f = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            level = len(open_ends)
            open_ends.append(f)
            if f >= lo and s <= hi:
                rows[key].append((s, f, level, e.get("cat", "other"), e.get("name", "")))
        depth[key] = 1 + max((r[2] for r in rows[key]), default=0)
    height = sum(depth.values()) * 0.28 + 1.2
    fig, ax = plt.subplots(figsize=(12, max(2.5, height)))
    y, ticks, labels, where = 0.0, [], [], {}
    for key in tracks:
        for s, f, level, cat, _ in rows[key]:
            ax.broken_barh([(s - lo, f - s)], (y + level * 0.9, 0.8), facecolors=LAYER_COLOURS.get(cat, "#999999"))
        where[key] = y
        ticks.append(y + 0.4)
        process = names.get((key[0], 0), f"pid {key[0]}")
        labels.append(f"{process}: {threads.get(key, f'thread {key[1]}')}")
        y += depth[key] * 0.9 + 0.4
    for e in events:  # queue items: from the put to the get
        if e.get("ph") != "s":
            continue
        end = next((f for f in events if f.get("ph") == "f" and f.get("id") == e.get("id")), None)
        if end is None or (e["pid"], e["tid"]) not in where or (end["pid"], end["tid"]) not in where:
            continue
        x0, x1 = e["ts"] / 1e6 - lo, end["ts"] / 1e6 - lo
        if 0 <= x0 <= hi - lo and 0 <= x1 <= hi - lo:
            ax.annotate(
                "",
                xy=(x1, where[(end["pid"], end["tid"])] + 0.4),
                xytext=(x0, where[(e["pid"], e["tid"])] + 0.4),
                arrowprops={"arrowstyle": "->", "color": "#444444", "lw": 0.4, "alpha": 0.5},
            )
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, hi - lo)
    ax.set_xlabel(f"seconds (from {lo - t_first:.3f} s after the first phase)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in LAYER_COLOURS.values()]
    ax.legend(handles, list(LAYER_COLOURS), loc="upper center", bbox_to_anchor=(0.5, 1.12), ncol=8, fontsize=7, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130, metadata={"Software": None})
    save_png_bytes(buf.getvalue(), out)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.trace_png", description=__doc__.split("\n")[0])
    p.add_argument("trace", help="a trace written by rlbench profile --trace")
    p.add_argument("out", help="the PNG to write")
    p.add_argument("--from", dest="start", type=float, default=None, help="seconds after the first phase to start at")
    p.add_argument("--seconds", type=float, default=None, help="seconds to draw (default: all)")
    args = p.parse_args(argv)
    trace = json.loads(Path(args.trace).read_text(encoding="utf-8"))
    first = min(e["ts"] for e in trace["traceEvents"] if e.get("ph") == "X") / 1e6
    start = None if args.start is None else first + args.start
    print(draw(trace, Path(args.out), start, args.seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
