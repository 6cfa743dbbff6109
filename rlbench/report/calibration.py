"""Markdown of a gate calibration (``rlbench calibrate``): verdicts, rounds used and loads per condition.

Every number comes from the saved results (``data``, the JSON ``rlbench calibrate`` writes beside the report), so
``rlbench calibrate --render JSON`` writes the same report again without measuring.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlbench.report.format import md_code, md_table, md_text
from rlbench.results.fingerprint import cpu_label

TARGET_FALSE_FAIL = 1 / 20
"""At most 1 false FAIL in 20 A/A comparisons (issue 31)."""
TARGET_DETECT = 19 / 20
"""A +5% slowdown FAILs in at least 19 of 20 comparisons."""
TARGET_STEADY_PASS = 18 / 20
"""A/A beside one steady CPU-bound neighbour PASSes in at least 18 of 20 comparisons (issue 58)."""


def _count(k: int, n: int) -> str:
    return f"{k} ({100 * k / n:.0f}%)" if n else "–"


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.median(values)) if values else None


def tally(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and medians of one condition's comparisons."""
    n = len(results)
    verdicts = [r["verdict"] for r in results]
    busy = sum(r["verdict"] == "INCONCLUSIVE" and r.get("busy", False) for r in results)
    rounds = [r["rounds"] for r in results]
    pass_rounds = [r["rounds"] for r in results if r["verdict"] == "PASS"]
    fail_rounds = [r["rounds"] for r in results if r["verdict"] == "FAIL"]
    loads = [r.get("load") or [None, None] for r in results]
    return {
        "n": n,
        "fail": verdicts.count("FAIL"),
        "pass": verdicts.count("PASS"),
        "inconclusive": verdicts.count("INCONCLUSIVE") - busy,
        "busy": busy,
        "fail_unchecked": sum(r.get("fail_without_load_check", r["verdict"] == "FAIL") for r in results),
        "rounds_median": _median(rounds),
        "rounds_max": max(rounds) if rounds else None,
        "pass_rounds_max": max(pass_rounds) if pass_rounds else None,
        "fail_rounds_max": max(fail_rounds) if fail_rounds else None,
        "ratio": _median([r["ratio"] for r in results if r["ratio"] is not None]),
        "load_a": _median([x[0] for x in loads if x[0] is not None]),
        "load_b": _median([x[1] for x in loads if x[1] is not None]),
        "wall": _median([r["wall_s"] for r in results]),
    }


def _load(t: dict[str, Any]) -> str:
    if t["load_a"] is None or t["load_b"] is None:
        return "–"
    return f"{100 * t['load_a']:.0f}% / {100 * t['load_b']:.0f}%"


def _rounds(t: dict[str, Any]) -> str:
    return "–" if t["rounds_median"] is None else f"{t['rounds_median']:g} ({t['rounds_max']})"


def _wall(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f} s"


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def meaning(name: str, rows: dict[str, Any], data: dict[str, Any]) -> list[str]:
    """Sentences on what the numbers of one benchmark mean, each computed from them (nothing written by hand)."""
    t = {key: tally(row["results"]) for key, row in rows.items() if row["results"]}
    out = []
    auto = f"`--rounds auto` within {data['max_rounds']} rounds"
    if "aa" in t:
        a = t["aa"]
        pass_at = f", none needing more than {a['pass_rounds_max']} rounds" if a["pass"] else ""
        out.append(
            f"Identical code (A/A) on a quiet machine: FAIL in {a['fail']} of {a['n']} comparisons (target: at most 1 in "
            f"20, {_met(a['fail'] <= a['n'] * TARGET_FALSE_FAIL)}); PASS in {a['pass']} of {a['n']} with {auto}"
            f"{pass_at}; INCONCLUSIVE in {a['inconclusive'] + a['busy']} ({a['busy']} of them because the machine was busy)."
        )
    for key, words in (
        ("hog-interleaved", "a CPU hog started halfway, interleaved"),
        ("steady-aa", "one steady CPU-bound neighbour"),
        ("steady2-aa", "two steady CPU-bound neighbours"),
    ):
        if key in t:
            h = t[key]
            target = (
                f" (target: at most 1 in 20, {_met(h['fail'] <= h['n'] * TARGET_FALSE_FAIL)})"
                if key in ("hog-interleaved", "steady-aa")
                else ""
            )
            passed = (
                f" (target: at least 18 in 20, {_met(h['pass'] >= h['n'] * TARGET_STEADY_PASS)})" if key == "steady-aa" else ""
            )
            out.append(
                f"A/A with {words}: FAIL in {h['fail']} of {h['n']}{target}, PASS in {h['pass']}{passed}, INCONCLUSIVE "
                f"because the machine was busy in {h['busy']} and too noisy in {h['inconclusive']}."
            )
    for key, words in (
        ("plus5", "A 5% slowdown"),
        ("steady-plus5", "A 5% slowdown beside one steady neighbour"),
        ("steady2-plus5", "A 5% slowdown beside two steady neighbours"),
    ):
        if key in t:
            s = t[key]
            target = (
                f" (target: at least 19 in 20, {_met(s['fail'] >= s['n'] * TARGET_DETECT)}; never PASS, "
                f"{_met(s['pass'] == 0)})"
                if key in ("plus5", "steady-plus5")
                else ""
            )
            by = f", each by round {s['fail_rounds_max']}" if s["fail"] else ""
            out.append(
                f"{words}: FAIL in {s['fail']} of {s['n']}{by}{target}; PASS in {s['pass']}; "
                f"INCONCLUSIVE in {s['inconclusive'] + s['busy']}."
            )
    if "plus10" in t:
        s = t["plus10"]
        out.append(f"A 10% slowdown: FAIL in {s['fail']} of {s['n']}, PASS in {s['pass']}.")
    for key, words in (
        ("hog-a-then-b", "A then B with a CPU hog from halfway (separate runs gated afterwards)"),
        ("candidate-interleaved", "Interleaved rounds with a CPU-bound process during B's runs only"),
        ("candidate-hogs", "A then B with 2 CPU-bound processes during B only"),
    ):
        if key in t:
            s = t[key]
            never = f" (target: never PASS, {_met(s['pass'] == 0)})" if key.startswith("candidate") else ""
            out.append(
                f"{words}: PASS in {s['pass']} of {s['n']}{never}, FAIL in {s['fail']}, refused or INCONCLUSIVE because "
                f"the machine was busy in {s['busy']}; without the load check, {s['fail_unchecked']} would have FAILed."
            )
    return out


def render(data: dict[str, Any]) -> str:
    """Markdown report of a calibration (``data`` as :func:`rlbench.analysis.calibration.calibrate` returns it, with
    ``command``, ``machine`` and ``wall_s`` added by the command)."""
    machine = data.get("machine") or {}
    looks = ", ".join(map(str, data["looks"]))
    threshold = f"{data['threshold_pct']:g}%"
    total = data.get("wall_s")
    lines = [
        "# Gate calibration",
        "",
        f"Measured by {md_code(data.get('command', 'rlbench calibrate'))} on {md_text(cpu_label(machine))}, "
        f"{machine.get('cores')} cores (machine id {md_code(machine.get('id'))})"
        + (f", in {total / 60:.0f} minutes." if total is not None else "."),
        "",
        f"Each comparison gates side B against side A with `--fail METRIC:{threshold}`. FAIL: B is worse by more than "
        f"{threshold} and the interval of the paired median ratio lies entirely above 1; PASS: the interval rules out a "
        f"regression above {threshold}; INCONCLUSIVE: neither (too noisy), or a PASS or a result the load could explain "
        "('machine busy'). Interleaved rounds are judged per pair: a steady neighbour loads both halves of a pair alike "
        "and is judged on the interval; a few pairs whose halves' loads differ by more than 15 points are dropped; the "
        "load explains a result when the pairs' loads lean one way beyond chance (a neighbour during one side's runs "
        "only), or when the 90% interval of the mean load difference over every pair reaches past 10 points (too few "
        "pairs for runs whose load the kernel reads in 10 ms ticks). 'A then B' runs are judged per side: loads 10 "
        "points apart, or either side above half the machine.",
        "",
        f"Interleaved conditions run as `rlbench ab --rounds auto --max-rounds {data['max_rounds']}`: rounds A B, B A, "
        f"..., round k with seed k on both sides; the gate looks after rounds {looks}, each look's interval at "
        f"{100 * data['look_confidence']:.2f}% (Bonferroni alpha spending), and stops at the first look where the "
        "threshold is PASS or FAIL, with the same decision function as `ab`. 'A then B' conditions run every A "
        f"round, then every B round ({data['separate_rounds']} each, as two separate `rlbench run --repeats "
        f"{data['separate_rounds']}`), and gate once at {100 * data['separate_confidence']:g}%, as `rlbench gate` would.",
        "",
        f"Slowdowns are injected with the test-only knob `RLBENCH_INJECT_DELAY` into the timed phase. Busy neighbours "
        f"are processes spinning on the CPU: 'CPU hog' is one per core ({data.get('cores')} here), started halfway "
        "(interleaved: halfway through the first look's runs, between A and B of its middle round; A then B: as B's "
        "runs begin) and kept to the end; 'steady' is one (or two) processes for the whole comparison; 'during B's "
        "runs only', interleaved, is one process started before each B run and ended after it. Loads are the median share "
        "of the machine's CPU capacity that other processes used during each side's runs (from `/proc/stat`).",
        "",
    ]
    header = [
        "Condition",
        "FAIL",
        "PASS",
        "INCONCLUSIVE: noisy",
        "INCONCLUSIVE: machine busy",
        "Rounds used, median (max)",
        "Median ratio B/A",
        "Load A / B",
        "FAIL without the load check",
        "Wall per comparison (median)",
    ]
    for name, b in data["benchmarks"].items():
        lines += [f"## {md_text(name)}: {md_code(b['metric'])}, {md_text(b['setup'])}", ""]
        rows = []
        for row in b["conditions"].values():
            t = tally(row["results"])
            n = t["n"]
            rows.append(
                [
                    f"{row['label']} ({n} comparison{'' if n == 1 else 's'})",
                    _count(t["fail"], n),
                    _count(t["pass"], n),
                    _count(t["inconclusive"], n),
                    _count(t["busy"], n),
                    _rounds(t),
                    "–" if t["ratio"] is None else f"{t['ratio']:.3f}",
                    _load(t),
                    _count(t["fail_unchecked"], n),
                    _wall(t["wall"]),
                ]
            )
        lines += [md_table(header, rows).rstrip("\n"), ""]
        said = meaning(name, b["conditions"], data)
        if said:
            lines += ["What this means: " + " ".join(said), ""]
    return "\n".join(lines).rstrip("\n") + "\n"
