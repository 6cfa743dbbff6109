"""Chrome / Perfetto trace of a profiled run's phases (``rlbench profile --trace PATH``).

The Trace Event Format's complete events (``"ph": "X"``), one per closed phase, nested by time; open the file in
https://ui.perfetto.dev or ``chrome://tracing``. Iteration boundaries are instant events. Phases also appear in
torch.profiler / TensorBoard traces on their own: each is a ``record_function`` range named ``rlbench/<phase>``
while torch's profiler runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlbench.profiling.attribution import Attribution
from rlbench.results.outputs import write_output


def chrome_trace(r: Attribution, pid: int = 0) -> dict[str, object]:
    """The trace as a JSON-ready dict (microseconds since the first iteration began)."""
    t0 = r.started
    events: list[dict[str, object]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "rlbench profile"}},
    ]
    for i, mark in enumerate(r.iterations):
        events.append({"name": f"iteration {i}", "ph": "i", "s": "p", "ts": (mark.t - t0) * 1e6, "pid": pid, "tid": 0})
    for e in r.trace:
        events.append(
            {
                "name": e.path.rsplit("/", 1)[-1],
                "cat": r.layers.get(e.path) or "other",
                "ph": "X",
                "ts": (e.start - t0) * 1e6,
                "dur": (e.end - e.start) * 1e6,
                "pid": pid,
                "tid": 0,
                "args": {"phase": e.path},
            }
        )
    meta = {"dropped_events": r.trace_dropped, "clock": "perf_counter, µs since the first iteration"}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": meta}


def write_chrome_trace(r: Attribution, path: Path, pid: int = 0) -> Path:
    """Write :func:`chrome_trace` to ``path`` whole or not at all; a link, FIFO or device file is never replaced
    (:mod:`rlbench.results.outputs`).

    Raises:
        UsageError: If ``path`` is refused or cannot be written.
    """
    return write_output(path, json.dumps(chrome_trace(r, pid)), "--trace")
