"""Sampling profiles with pyinstrument: start/stop around a run, HTML output, top frames by self time."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def make_profiler(interval: float = 0.001) -> Any:
    """A pyinstrument ``Profiler`` sampling every ``interval`` seconds (start/stop it around the code)."""
    from pyinstrument import Profiler

    return Profiler(interval=interval)


def top_frames(profiler: Any, limit: int = 12) -> tuple[list[str], list[float], float]:
    """Functions with the most self time in the profiler's last session.

    Self time of a frame is time spent in the function itself, not in what it calls; frames of the same
    function (at any call path) are summed.

    Returns:
        ``(names, self_seconds, total_seconds)`` with names like ``function (file:line)``.
    """
    session = profiler.last_session
    if session is None:
        return [], [], 0.0
    root = session.root_frame()
    if root is None:
        return [], [], 0.0
    totals: dict[str, float] = defaultdict(float)
    stack = [root]
    while stack:
        frame = stack.pop()
        stack.extend(frame.children)
        own = frame.total_self_time
        if own > 0 and not frame.is_synthetic:
            totals[f"{frame.function} ({frame.file_path_short}:{frame.line_no})"] += own
    ranked = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)[:limit]
    return [k for k, _ in ranked], [v for _, v in ranked], float(root.time)
