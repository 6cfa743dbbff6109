"""The roles section's verdict: who waits on whom, in a sentence (built from role figures, no profiled run)."""

from __future__ import annotations

from rlbench.report.roles import Role, verdict


def _role(name: str, *, pids: list[int], thread: bool, work: float, wait: float, blocked: float) -> Role:
    """A role over 10 s: ``work`` seconds in a phase, ``wait`` in ``wait/queue``, ``blocked`` off the CPU elsewhere."""
    phases = {"train": work, "train/forward": work, "wait": wait, "wait/queue": wait}
    r = Role(name, pids=pids, threads=1, run_s=10.0, whole_s=10.0, phases=dict(phases), whole_phases=dict(phases))
    r.layers = {"train/forward": "update", "wait/queue": "wait"}  # (parents: no layer of their own)
    r.thread_role = thread
    r.cpu_s, r.queued_s = 10.0 - wait - blocked, 0.0
    return r


def test_a_busy_role_the_others_wait_on_is_named_the_bottleneck():
    table = {
        "main": _role("main", pids=[], thread=False, work=9.5, wait=0.2, blocked=0.0),
        "actor": _role("actor", pids=[7], thread=False, work=3.0, wait=7.0, blocked=0.0),
    }
    table["actor"].waits = [{"phase": "wait/queue", "s": 7.0, "other": ["main"]}]
    text = verdict(table)
    assert text.startswith("**actor** waited **70.0%**") and "**main is the bottleneck**" in text, text
    assert "GIL" not in text  # processes: no GIL between them


def test_threads_of_one_process_blocked_elsewhere_are_pointed_at_the_gil():
    table = {
        "main": _role("main", pids=[], thread=False, work=7.0, wait=0.3, blocked=2.5),
        "actor": _role("actor", pids=[7], thread=True, work=4.5, wait=5.0, blocked=0.5),
    }
    table["actor"].waits = [{"phase": "wait/queue", "s": 5.0, "other": ["main"]}]
    text = verdict(table)
    assert "Blocked outside any hooked wait: main 25.0%; a Python thread sharing a process" in text, text
    assert "GIL" in text and "actor 5.0%" not in text  # under a tenth of its time: not named
