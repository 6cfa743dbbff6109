"""What the pipeline tests share (a plain module: its directory is on sys.path while they run)."""

from __future__ import annotations

LEARNED = 0.85
"""Greedy reward an asynchronous pipeline must reach in 300 updates (chance: 1/8; untrained: below 0.35).

The synchronous loop (test_components.py) reaches 0.9 every time. The engines' runs are not deterministic: which
slices the learner gets, and how stale they are, depends on scheduling, and the final figure is one evaluation on
2,048 fresh states. Six idle Monarch runs ended at 0.931 to 0.944; one under the loaded CI suite ended at 0.896."""


def assert_learned(greedy_reward: tuple[float, float]) -> None:
    """Near chance before training, well above it after."""
    before, after = greedy_reward
    assert before < 0.35 and after >= LEARNED, greedy_reward
