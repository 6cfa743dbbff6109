"""The --log-to / --live cost harness and the TensorBoard reader's report: what they write from what they measured."""

from __future__ import annotations

import pytest


def _rows(walls: list[float], cpu: float | None = None) -> list[dict]:
    return [
        {"wall_s": w, **({"logging_cpu_s": cpu, "script_wall_s": 3.0, "points": 2, "series": 20} if cpu is not None else {})}
        for w in walls
    ]


def test_cost_report_gives_each_variant_against_its_own_baseline_and_a_verdict_per_target() -> None:
    from rlbench.suites.scripts.tracker_cost import render

    n = 12
    results = {
        "runs": {
            "profile": _rows([4.0] * n),
            "--log-to tensorboard:DIR": _rows([4.0 * 1.002] * n, cpu=0.003),
            "--live": _rows([4.0 * 1.05] * n),
            "profile, script's writer": _rows([5.0] * n),
            "--log-to tensorboard, script's writer": _rows([5.0 * 0.999] * n, cpu=0.006),
        },
        "_meta": {"rounds": n, "steps": 3000, "seconds": 600, "environment": {}},
    }
    text = render(results)
    assert "| `profile` | 4.00 s | baseline |" in text
    assert "| `--log-to tensorboard:DIR` | 4.01 s | **+0.20%** (+0.20% … +0.20%) | 0.100% | 2 × 20 |" in text
    assert "- `--log-to tensorboard:DIR`: within 1%: the interval's upper end is below it." in text
    assert "- `--live`: over 1%: the whole interval is above it." in text
    # the script's own writer on both sides: compared with its own baseline, not plain profiling
    assert "| `--log-to tensorboard, script's writer` | 5.00 s | **-0.10%**" in text
    assert "12 rounds" in text and "cleanrl_dqn.py --total-timesteps 3000" in text


def test_cost_report_says_when_the_interval_spans_the_target() -> None:
    from rlbench.suites.scripts.tracker_cost import render

    base = [4.0, 4.2, 3.9, 4.1, 4.0, 4.3, 3.8, 4.0, 4.1, 4.2]
    noisy = [b * f for b, f in zip(base, [1.03, 0.98, 1.04, 0.97, 1.02, 1.0, 1.05, 0.96, 1.01, 0.99])]
    text = render({"runs": {"profile": _rows(base), "--live": _rows(noisy)}, "_meta": {"rounds": 10, "steps": 3000}})
    assert "- `--live`: not decided at this noise: the interval spans 1%" in text


@pytest.mark.parametrize("png", [None, "shot.png"])
def test_screenshot_report_shows_the_readers_tags_and_rlbenchs_points_at_the_scripts_steps(png: str | None) -> None:
    from rlbench.suites.scripts.tracker_screenshot import render

    scalars = {
        "charts/SPS": [(100, 900.0), (200, 950.0), (300, 1000.0)],
        "charts/episodic_return": [(50, 12.0), (250, 30.0)],
        "rlbench/sps": [(200, 940.0), (300, 990.0)],
        "rlbench/share/env/step": [(200, 0.4), (300, 0.42)],
        "rlbench/share/train/backward": [(200, 0.2), (300, 0.21)],
    }
    cmd = ["python", "-m", "rlbench", "profile", "--quiet", "--log-to", "tensorboard", "--", "python", "dqn.py"]
    text = render(cmd, scalars, {"rlbench/bottlenecks/text_summary": "| # | Role |"}, png)
    assert "Command: `rlbench profile --quiet --log-to tensorboard -- python dqn.py`" in text
    assert "| `charts/SPS` | 3 | 100 … 300 | 1000 |" in text
    assert "rlbench logged 2 points; 2 of them at a step where the script logged `charts/SPS` itself" in text
    assert "| 300 | 1000 | 30 | 990 | 0.42 | 0.21 |" in text
    assert "| # | Role |" in text
    assert ("![TensorBoard's scalars page of the run](shot.png)" in text) == (png is not None)
