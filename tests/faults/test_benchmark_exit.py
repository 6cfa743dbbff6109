"""An ``@rlbench.benchmark`` function that exits, raises a ``BaseException`` or hangs is the measured code failing.

Its exit status is never rlbench's: ``sys.exit(3)`` is exit 1 with one line, ``sys.exit(0)`` is no pass with nothing
measured, and ``--timeout`` stops a hang with the finished repeats kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.fault_helpers import one_line_error, rlbench

BENCH = """
import sys, time
import rlbench

class Custom(BaseException):
    pass

@rlbench.benchmark
def exits(code: int = 3, seed: int = 0) -> dict:
    sys.exit(code)

@rlbench.benchmark
def exits_zero(n: int = 1) -> dict:
    sys.exit(0)

@rlbench.benchmark
def base_exception(n: int = 1) -> dict:
    raise Custom("mine")

@rlbench.benchmark
def hangs_later(seed: int = 0) -> dict:
    # the first repeat returns; the second hangs in a loop that swallows ordinary exceptions
    while seed > 0:
        try:
            time.sleep(0.05)
        except Exception:
            pass
    return {"work": 1.0}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "b.py").write_text(BENCH)
    return tmp_path


def _records(store: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(store.glob("*.jsonl")) for line in f.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize(
    "target, args, said",
    [
        ("exits", [], "exited with sys.exit(3) instead of returning"),
        ("exits", ["--code", "0"], "exited with sys.exit(0) instead of returning"),
        ("exits_zero", [], "exited with sys.exit(0) instead of returning"),
        ("base_exception", [], "raised Custom: mine"),
    ],
)
def test_an_exit_in_the_benchmark_is_the_measured_code_failing(project: Path, target: str, args: list[str], said: str) -> None:
    proc = rlbench(["run", f"b.py:{target}", "--quiet", "--store", "s", *args], project, timeout=120)
    err = one_line_error(proc, code=1)  # never the function's own status, never 0 with nothing measured
    assert said in err and "no repeat finished" in err, err
    assert not _records(project / "s")
    log = next((project / "s").glob("*.error.txt"))
    assert str(log.name) in err and "Traceback" in log.read_text()


@pytest.mark.slow
def test_timeout_stops_a_hang_and_keeps_the_finished_repeats(project: Path) -> None:
    args = ["run", "b.py:hangs_later", "--repeats", "2", "--timeout", "1.5", "--quiet", "--store", "s"]
    proc = rlbench(args, project, timeout=120)
    err = one_line_error(proc, code=1)
    assert "repeat 1 (seed 1) did not finish within 1.5 s (--timeout)" in err, err
    assert "1 finished repeats saved" in err, err
    recs = _records(project / "s")
    assert {r["repeat"] for r in recs} == {0} and any(r["metric"] == "work" for r in recs)
    assert all("timeout" not in r["params"] for r in recs)  # how it ran is no parameter of what it measured
    assert "hangs_later" in (project / "s" / next((project / "s").glob("*.error.txt")).name).read_text()


@pytest.mark.parametrize("value", ["nan", "-1", "inf"])
def test_timeout_must_be_a_number_of_seconds(project: Path, value: str) -> None:
    err = one_line_error(rlbench(["run", "b.py:exits_zero", f"--timeout={value}", "--quiet", "--store", "s"], project))
    assert "--timeout" in err


def test_a_parameter_named_timeout_is_refused_at_decoration() -> None:
    import rlbench

    def f(timeout: float = 1.0) -> None: ...

    with pytest.raises(TypeError, match="shadows the `rlbench run` option --timeout"):
        rlbench.benchmark(f)
