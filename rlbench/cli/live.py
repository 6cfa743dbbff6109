"""``rlbench profile --live``: what ``py-spy top`` is to functions, in RL phases, redrawn about once a second.

rlbench's own process reads what the script's processes publish (:mod:`rlbench.profiling.live`: the script's process
writes its threads' running totals once a second, every followed process its snapshots) and draws, per role, the
phases' shares over the last second, SPS (over the last second and steady so far) and the current top bottleneck,
with the last lines of the script's output under it. It writes nothing to the records.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

REFRESH_S = 1.0
TOP_PHASES = 5
LOG_LINES = 4


class LiveView:
    """One repeat's live view; :meth:`stop` ends it (its last frame stays on the terminal)."""

    def __init__(self, title: str, live_dir: Path, follow_dir: Path | None, log: Path | None) -> None:
        from rich.console import Console
        from rich.live import Live

        from rlbench.profiling.live import Window

        self.title, self.live_dir, self.follow_dir, self.log = title, live_dir, follow_dir, log
        self.window = Window()
        self.current: dict[str, Any] = {}
        self.t0 = time.perf_counter()
        self.done = threading.Event()
        self.console = Console(stderr=True)
        self.live = Live(self.render(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()
        self.thread = threading.Thread(target=self._loop, name="rlbench-live", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.done.wait(REFRESH_S):
            try:
                self.live.update(self.render(read=True))
            except Exception:  # a torn read, a terminal gone: the next second tries again
                continue

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=5.0)
        try:
            self.live.update(self.render(read=True))
        finally:
            self.live.stop()
            if not self.console.is_terminal:  # (its last frame was printed whole: end its last line)
                self.console.line()

    def views(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        from rlbench.profiling.live import read_live, snapshot_views

        main = read_live(self.live_dir)
        views = list(main.get("views") or []) if main else []
        if self.follow_dir is not None and self.follow_dir.is_dir():
            views += snapshot_views(self.follow_dir, main.get("pid") if main else None)
        return views, main

    def render(self, read: bool = False) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        from rlbench.profiling.live import bottlenecks, phase_name, steady, waits

        if read:
            views, _main = self.views()
            interval = self.window.update(views)
            if any(fig.booked_s > 0 for fig in interval.values()):  # (nothing new: the last second's figures stay)
                self.current = {"interval": interval, "steady": steady(views)}
        elapsed = time.perf_counter() - self.t0
        head = Text(f"rlbench profile --live  {self.title}  {elapsed:,.0f} s", style="bold")
        interval, stead = self.current.get("interval") or {}, self.current.get("steady") or {}
        if not interval:
            return Group(head, Text("starting: no training iteration yet", style="dim"), *self._log_lines())
        top = bottlenecks(interval, limit=1)
        lines = [head]
        if top:
            b = top[0]
            bound = f"≤ {b.bound:.2f}×" if math.isfinite(b.bound) else "–"
            lines.append(
                Text.assemble(
                    ("top bottleneck: ", "bold"),
                    (f"{b.role} {phase_name(b.phase) if b.phase else 'Python/other'} ", "bold red"),
                    f"{100 * b.share:.0f}% of its time (bound {bound})",
                )
            )
        waited = waits(interval)
        table = Table(box=None, pad_edge=False, header_style="bold")
        table.add_column("Role")
        table.add_column("SPS (last s)", justify="right")
        table.add_column("SPS (steady)", justify="right")
        table.add_column("Waiting", justify="right")
        table.add_column("Phases over the last second")
        for role, fig in interval.items():
            shares = sorted(fig.shares().items(), key=lambda kv: kv[1], reverse=True)[:TOP_PHASES]
            cells = Text()
            for i, (p, share) in enumerate(shares):
                if i:
                    cells.append("  ")
                cells.append(f"{phase_name(p) if p else 'Python/other'} ", style="cyan")
                cells.append(f"{100 * share:.0f}%")
            st = stead.get(role)
            table.add_row(
                Text(role),
                _sps(fig.sps if fig.steps > 0 else math.nan),
                _sps(st.sps if st is not None and st.steps > 0 else math.nan),
                f"{100 * waited[role]:.0f}%" if role in waited else "–",
                cells,
            )
        return Group(*lines, table, *self._log_lines())

    def _log_lines(self) -> list[Any]:
        from rich.text import Text

        if self.log is None or not self.log.is_file():
            return []
        try:
            with self.log.open("rb") as f:
                f.seek(0, 2)
                f.seek(max(f.tell() - 4096, 0))
                tail = deque(f.read().decode("utf-8", "replace").splitlines(), maxlen=LOG_LINES)
        except OSError:
            return []
        return [Text(f"script ({self.log.name}):", style="dim"), *(Text(line, style="dim") for line in tail)]


def _sps(v: float) -> str:
    return f"{v:,.0f}" if math.isfinite(v) else "–"


def live_watcher(title: str) -> Any:
    """The launcher's ``watch`` for ``--live``: one :class:`LiveView` per repeat."""

    def watch(k: int, live_dir: Path, follow_dir: Path | None, log: Path | None) -> LiveView:
        return LiveView(f"{title} (repeat {k + 1})", live_dir, follow_dir, log)

    return watch
