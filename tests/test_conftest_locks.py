"""The test suite's own scheduling under pytest-xdist (tests/conftest.py): an `alone` test, and the building of a
fixture that measures time, run with no other test running, and no two tests marked `one_at_a_time` with the same
name overlap. Timing tests trust this."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlbench.run.pytest_bench import child_pytest_env

pytest.importorskip("xdist")

TESTS = """
import os, time
from pathlib import Path

import pytest

OUT = Path(os.environ["INTERVALS"])


def spend(name):
    start = time.monotonic()
    time.sleep(0.4)
    (OUT / f"{name}-{os.getpid()}").write_text(f"{start} {time.monotonic()}")


@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    spend(f"plain{i}")


@pytest.mark.alone
def test_alone():
    spend("alone")


@pytest.mark.one_at_a_time("ray")
@pytest.mark.parametrize("i", range(3))
def test_ray(i):
    spend(f"ray{i}")


@pytest.fixture(scope="session")
def history_repo():  # one of MEASURING_FIXTURES: built with nothing else running, once in each worker that needs it
    spend(f"build{os.getpid()}")


@pytest.mark.parametrize("i", range(2))
def test_history(history_repo, i):
    spend(f"history{i}")
"""


def test_alone_and_one_at_a_time_hold_under_xdist(tmp_path: Path) -> None:
    project, out = tmp_path / "p", tmp_path / "intervals"
    (project / "tests").mkdir(parents=True)
    out.mkdir()
    shutil.copy(Path(__file__).parent / "conftest.py", project / "tests" / "conftest.py")
    (project / "tests" / "test_sched.py").write_text(textwrap.dedent(TESTS))
    (project / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: x\n    one_at_a_time(name): x\n")
    env = child_pytest_env({"INTERVALS": str(out)})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "-p", "no:cacheprovider", "-q", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    spans = {}
    for f in out.iterdir():
        name, pid = f.name.rsplit("-", 1)
        start, end = map(float, f.read_text().split())
        spans[name] = (start, end, pid)
    builds = [n for n in spans if n.startswith("build")]
    assert len(spans) == 12 + len(builds) and len({pid for *_, pid in spans.values()}) > 1  # in several workers

    def overlap(a: str, b: str) -> bool:
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    for lone in ["alone", *builds]:
        assert not [n for n in spans if n != lone and overlap(lone, n)], lone
    rays = ["ray0", "ray1", "ray2"]
    assert not [(a, b) for a in rays for b in rays if a < b and overlap(a, b)]
    assert any(overlap(a, b) for a in spans for b in spans if a < b)  # others do run side by side
