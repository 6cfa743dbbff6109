"""What else the machine was doing during a measurement: other processes' CPU time, load, frequency, throttling.

Timings on shared machines are only as good as the quiet they were taken in. :class:`LoadProbe` reads the
kernel's counters before and after a repeat and reports, for that window:

* ``other_cpu``: the share of the machine's CPU capacity used by *other* processes (every core's busy time from
  ``/proc/stat``, minus this process's own and its children's CPU time), 0 for a quiet machine, 1 for a machine
  whose every core was busy with something else;
* ``steal``: the share of time the hypervisor gave this VM's cores to someone else;
* ``loadavg``: the 1-minute load average at the end;
* ``cpu_mhz``: the mean current frequency of the cores, where readable;
* ``throttle``: thermal throttling events counted by the kernel during the window, where visible.

Reading costs a few file reads per repeat (never inside a timed loop). On systems without ``/proc`` (macOS,
Windows) the values are absent and nothing is refused for their lack.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

_CPU_DIR = Path("/sys/devices/system/cpu")
try:
    _TICKS = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _TICKS = 100


def _proc_stat() -> tuple[float, float] | None:
    """(busy seconds, steal seconds) summed over every core since boot, from ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    v = [int(x) for x in fields[1:]] + [0] * 10
    user, nice, system, _idle, _iowait, irq, softirq, steal = v[:8]
    busy = user + nice + system + irq + softirq  # guest time is already inside user
    return busy / _TICKS, steal / _TICKS


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _mean_mhz() -> float | None:
    values = []
    for f in _CPU_DIR.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            values.append(int(f.read_text()) / 1000.0)
        except (OSError, ValueError):
            pass
    return sum(values) / len(values) if values else None


def _throttle_count() -> int | None:
    total, seen = 0, False
    for f in _CPU_DIR.glob("cpu[0-9]*/thermal_throttle/*_throttle_count"):
        try:
            total += int(f.read_text())
            seen = True
        except (OSError, ValueError):
            pass
    return total if seen else None


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


@dataclass
class MachineLoad:
    """The machine's load over one measured window (``None``: not readable on this system)."""

    other_cpu: float | None
    steal: float | None
    loadavg: float | None
    cpu_mhz: float | None
    throttle: int | None
    wall_s: float


class LoadProbe:
    """Counters at the start of a window; :meth:`stop` returns the :class:`MachineLoad` over it."""

    def __init__(self) -> None:
        self.cores = os.cpu_count() or 1
        self._t0 = time.perf_counter()
        self._stat0 = _proc_stat()
        self._own0 = _own_cpu_s()
        self._throttle0 = _throttle_count()

    def stop(self) -> MachineLoad:
        """The load since construction."""
        wall = time.perf_counter() - self._t0
        stat, own = _proc_stat(), _own_cpu_s() - self._own0
        other = steal = None
        if stat is not None and self._stat0 is not None and wall > 0:
            capacity = wall * self.cores
            other = min(max((stat[0] - self._stat0[0] - own) / capacity, 0.0), 1.0)
            steal = min(max((stat[1] - self._stat0[1]) / capacity, 0.0), 1.0)
        throttle = _throttle_count()
        delta = throttle - self._throttle0 if throttle is not None and self._throttle0 is not None else None
        return MachineLoad(other, steal, _loadavg(), _mean_mhz(), delta, wall)
