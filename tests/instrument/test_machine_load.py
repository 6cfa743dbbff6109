"""The load probe sees other processes' CPU use and not our own."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rlbench.instrument.machine_load import LoadProbe

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")

SPIN = "import time\nt = time.perf_counter() + {s}\nwhile time.perf_counter() < t: pass\n"


def _window(own_work: bool, hogs: int, seconds: float = 0.6) -> float:
    procs = [subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds + 0.3)]) for _ in range(hogs)]
    try:
        time.sleep(0.15)  # let the hogs start spinning
        probe = LoadProbe()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            if not own_work:
                time.sleep(0.01)
        load = probe.stop()
    finally:
        for p in procs:
            p.wait(10)
    assert load.other_cpu is not None and 0.0 <= load.other_cpu <= 1.0
    assert load.steal is not None and load.wall_s >= seconds
    return load.other_cpu


@pytest.mark.alone
@pytest.mark.slow
def test_other_processes_are_seen_and_our_own_work_is_not() -> None:
    cores = LoadProbe().cores
    busy_others = _window(own_work=False, hogs=cores)
    busy_self = _window(own_work=True, hogs=0)
    assert busy_others > busy_self + 0.3, (busy_others, busy_self)
    assert busy_others > 0.5
