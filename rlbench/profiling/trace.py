"""Chrome / Perfetto trace of a profiled run's phases (``rlbench profile --trace PATH``).

The Trace Event Format's complete events (``"ph": "X"``), one per closed phase, nested by time; open the file in
https://ui.perfetto.dev or ``chrome://tracing``. Every followed process is a process track named by its role and pid,
every thread a track of its own; all share one clock (``time.perf_counter``, ``CLOCK_MONOTONIC`` on Linux, the same
in every process of the machine), shown as microseconds since the main process's first iteration. A queue's items
are linked from the put that added each one to the get that took it (flow arrows, matched in order per channel,
which is right for a FIFO queue), and every wait names the roles on the other side in its arguments. The main
process's iteration boundaries are instant events. Phases also appear in torch.profiler / TensorBoard traces on their
own: each is a ``record_function`` range named ``rlbench/<phase>`` while torch's profiler runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from rlbench.profiling.attribution import Attribution
from rlbench.results.outputs import write_output


def chrome_trace(r: Attribution, pid: int = 0) -> dict[str, object]:
    """One attribution's trace as a JSON-ready dict (microseconds since its first iteration began)."""
    main = {
        "pid": pid,
        "role": "main",
        "threads": [
            {
                "role": "main",
                "thread": None,
                "trace": [[e.path, e.start, e.end, r.layers.get(e.path) or ""] for e in r.trace],
            }
        ],
        "iteration_t": [mark.t for mark in r.iterations],
    }
    return merged_trace(main, [], r.started, dropped=r.trace_dropped)


def merged_trace(
    main: dict[str, Any], processes: list[dict[str, Any]], t0: float, *, dropped: int = 0, waits: dict[str, Any] | None = None
) -> dict[str, object]:
    """Every process's and thread's phases on one timeline (see the module docstring).

    Args:
        main: The main process: ``pid``, ``threads`` (each with ``role``, ``thread``, ``trace``, ``wait_log``) and
            ``iteration_t``.
        processes: The followed processes' results, in the same shape.
        t0: The time shown as 0.
        dropped: Phases left out at ``--trace-limit``.
        waits: Per channel, the roles on each side (for a wait's arguments).
    """
    events: list[dict[str, object]] = []
    flows: dict[str, dict[str, list[tuple[float, int, int]]]] = defaultdict(lambda: defaultdict(list))
    for proc in [main, *processes]:
        pid = int(proc.get("pid") or 0)
        role = "main" if proc is main else str(proc.get("role") or "process")
        name = "rlbench profile" if proc is main and not processes else f"{role} (pid {pid})"
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
        for tid, thread in enumerate(proc.get("threads") or []):
            label = "main thread" if thread.get("thread") is None else f"{thread.get('role')} ({thread.get('thread')})"
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}})
            for path, start, end, layer in thread.get("trace") or []:
                args: dict[str, object] = {"phase": path}
                events.append(
                    {
                        "name": str(path).rsplit("/", 1)[-1],
                        "cat": layer or "other",
                        "ph": "X",
                        "ts": (start - t0) * 1e6,
                        "dur": (end - start) * 1e6,
                        "pid": pid,
                        "tid": tid,
                        "args": args,
                    }
                )
            for _start, end, channel, side in thread.get("wait_log") or []:
                flows[channel][side].append((end, pid, tid))
                other = (waits or {}).get(channel, {})
                if other:
                    events.append(
                        {
                            "name": f"waited on {', '.join(other.get(side, [])) or channel}",
                            "ph": "i",
                            "s": "t",
                            "ts": (end - t0) * 1e6,
                            "pid": pid,
                            "tid": tid,
                            "args": {"channel": channel, "side": side, "other": other.get(side, [])},
                        }
                    )
    for i, t in enumerate(main.get("iteration_t") or []):
        events.append(
            {"name": f"iteration {i}", "ph": "i", "s": "p", "ts": (t - t0) * 1e6, "pid": main.get("pid", 0), "tid": 0}
        )
    n = 0
    for channel, sides in flows.items():  # the k-th item put is the k-th taken (a FIFO queue)
        puts, gets = sorted(sides.get("put", [])), sorted(sides.get("get", []))
        for (t_put, p_pid, p_tid), (t_get, g_pid, g_tid) in zip(puts, gets):
            if t_get < t_put:
                continue
            n += 1
            common = {"name": "item", "cat": "queue", "id": n, "args": {"channel": channel}}
            events.append({**common, "ph": "s", "ts": (t_put - t0) * 1e6, "pid": p_pid, "tid": p_tid})
            events.append({**common, "ph": "f", "bp": "e", "ts": (t_get - t0) * 1e6, "pid": g_pid, "tid": g_tid})
    meta = {
        "dropped_events": dropped,
        "clock": "perf_counter (CLOCK_MONOTONIC), µs since the main process's first iteration",
        "processes": 1 + len(processes),
    }
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": meta}


def write_chrome_trace(r: Attribution, path: Path, pid: int = 0) -> Path:
    """Write :func:`chrome_trace` to ``path`` whole or not at all; a link, FIFO or device file is never replaced
    (:mod:`rlbench.results.outputs`).

    Raises:
        UsageError: If ``path`` is refused or cannot be written.
    """
    return write_output(path, json.dumps(chrome_trace(r, pid)), "--trace")


def write_merged_trace(path: Path, trace: dict[str, object]) -> Path:
    """Write a :func:`merged_trace` as :func:`write_chrome_trace` writes one attribution's."""
    return write_output(path, json.dumps(trace), "--trace")
