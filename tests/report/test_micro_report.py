"""The micro report: speed-ups against the reference and the fastest marked, per size."""

from __future__ import annotations

from rlbench.report.micro import render
from rlbench.results.records import Record


def _rec(impl: str, size: str, elements: int, samples: list[float]) -> Record:
    return Record(
        run_id="r",
        timestamp="t",
        benchmark="gae",
        params={"group": "gae", "impl": impl, "size": size},
        definition_hash="h",
        metric="time/call",
        unit="s",
        direction="lower",
        samples=samples,
        meta={"elements": elements},
    )


def test_table_speedups_and_stars() -> None:
    recs = [
        _rec("reference", "8", 8, [100e-6] * 5),
        _rec("fast", "8", 8, [10e-6] * 5),
        _rec("reference", "64", 64, [800e-6] * 5),
        _rec("fast", "64", 64, [900e-6] * 5),
    ]
    text, charts = render(recs, "out")
    row_ref = next(line for line in text.splitlines() if line.startswith("| `reference`"))
    row_fast = next(line for line in text.splitlines() if line.startswith("| `fast`"))
    assert "10 µs (IQR 0, 10.0×) ★" in row_fast and "900 µs (IQR 0, 0.9×) |" in row_fast
    assert "800 µs (IQR 0) ★" in row_ref
    assert charts[0].lines[0].label == "fast" and charts[0].lines[0].x == [8.0, 64.0]
    assert "![gae scaling](out-gae-call.png)" in text


def test_device_skip_notes_are_listed() -> None:
    rec = _rec("torch", "8", 8, [1e-6] * 3)
    rec.meta["notes"] = ["cuda: not available on this machine (3 cases skipped)"]
    text, _ = render([rec, _rec("torch@cuda:0", "8", 8, [2e-6] * 3)])
    assert "Not measured here: cuda: not available on this machine (3 cases skipped)." in text
    assert "| `torch@cuda:0` |" in text


def test_skip_notes_are_parsed_from_pytest_output() -> None:
    from rlbench.run.pytest_bench import skip_notes

    out = "x\nSKIPPED [2] a.py:3: cuda: not available on this machine\n"
    out += "SKIPPED [1] b.py:9: cuda: not available on this machine\n"
    out += "SKIPPED [4] a.py:5: pure-Python reference is too slow\n"
    assert skip_notes(out) == ["cuda: not available on this machine (3 cases skipped)"]


def test_the_provenance_names_torch_threads_only_where_the_run_set_them() -> None:
    """A micro run's own process imports no torch (the benchmarks run in a child, with their own --threads): its
    records carry no torch threads, and its report says nothing of them rather than "torch threads None"."""
    from types import SimpleNamespace

    from rlbench.report.format import provenance

    def software_row(threads: int | None) -> str:
        packages = {"torch": "2.13.0", "numpy": "2.4.6", "rlbench": "0.1.0"}
        software = {"python": "3.11.7", "packages": packages, "torch_threads": threads}
        first = SimpleNamespace(fingerprint={"software": software}, meta={}, run_id="r", timestamp="t")
        lines = "\n".join(provenance(first, "t")).splitlines()
        return next(line for line in lines if line.startswith("| Software |"))

    assert "torch threads" not in software_row(None) and "None" not in software_row(None)
    assert software_row(2).endswith("; torch threads 2 |")
