"""Hand-placed timers for the hand-instrumented copies of many-process scripts (one per role and process).

Each thread or process of a copy keeps a :class:`Timers`: ``t = clock()`` before a part and ``timers.add("env", t)``
after it (two ``perf_counter`` reads and a dict update, no context manager: an actor's CartPole step is ~20 µs).
``timers.write()`` writes its totals, with its role and its own loop time, to ``$RLBENCH_HAND_OUT.<role>.<pid>.<n>.json``
(nothing without the variable), where the accuracy harness (``rlbench.suites.scripts.accuracy_roles``) reads them.
"""

from __future__ import annotations

import itertools
import json
import os
from time import perf_counter as clock

_n = itertools.count()


class Timers:
    """One role's hand timers in one thread or process: seconds per part, and its loop from :meth:`start`."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.phases: dict[str, float] = {}
        self.t0 = clock()

    def start(self) -> None:
        """The role's loop starts now (its set-up before is left out)."""
        self.t0 = clock()

    def add(self, part: str, t: float) -> float:
        """Book ``clock() - t`` to ``part``; returns the clock read (the next part's start)."""
        now = clock()
        self.phases[part] = self.phases.get(part, 0.0) + (now - t)
        return now

    def totals(self, loop_s: float | None = None) -> dict:
        return {"role": self.role, "pid": os.getpid(), "loop_s": clock() - self.t0 if loop_s is None else loop_s,
                "phases": dict(self.phases)}  # fmt: skip

    def write(self, totals: dict | None = None) -> None:
        """Write the totals (or ``totals`` another process handed over) where the harness reads them."""
        out = os.environ.get("RLBENCH_HAND_OUT")
        if not out:
            return
        data = totals or self.totals()
        with open(f"{out}.{data['role']}.{data['pid']}.{next(_n)}.json", "w") as f:
            json.dump(data, f)


__all__ = ["Timers", "clock"]


def timed_env(env, role: str = "env-worker"):
    """``env`` wrapped so that its own ``step`` and ``reset`` are hand-timed where it runs (a vector env's worker
    process): the totals are written when it is closed, its loop running from its first call to its close.

    The timer goes around the env inside this wrapper: under ``rlbench profile`` the wrapper is the outermost env, whose
    call rlbench times (its hook's own clock reads and this wrapper's frame around the hand timer are rlbench's side
    of the difference), as the other hand copies' timers sit inside the calls rlbench hooks."""
    import gymnasium as gym

    class HandTimedEnv(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.timers = Timers(role)
            self.started = False

        def step(self, action):
            t = clock()
            try:
                return self.env.step(action)
            finally:
                self.timers.add("env", t)

        def reset(self, **kwargs):
            t = clock()
            if not self.started:
                self.timers.t0, self.started = t, True
            try:
                return self.env.reset(**kwargs)
            finally:
                self.timers.add("env", t)

        def close(self):
            if self.started:  # (a vector env also makes one in the main process, for its spaces, and closes it unused)
                self.timers.write()
            return self.env.close()

    return HandTimedEnv(env)
