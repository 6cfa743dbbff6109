"""A Stable-Baselines3 callback that profiles ``model.learn(...)`` and stores the records.

``rlbench profile -- python train.py`` already labels SB3's rollout collection and training; this callback is for
users who keep running their script as it is::

    from rlbench.profiling.sb3 import RlbenchCallback

    cb = RlbenchCallback("ppo-cartpole-sb3", params={"n_envs": 4})
    model.learn(50_000, callback=cb)
    print(cb.records_path)            # .rlbench/<run-id>.jsonl; `rlbench report .rlbench` renders it

Inside ``learn`` the same automatic attribution runs as under ``rlbench profile`` (``collect/env/step``,
``collect/inference``, ``train/forward``, ``train/backward``, ``train/optimizer``, ...), so every report, compare
and gate applies. ``rlbench.record("eval_return", ...)`` from another callback joins the same records.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from rlbench.profiling.session import RecordingSession, Settings


class RlbenchCallback(BaseCallback):
    """Profile one ``learn()`` call; its records are written when training ends.

    Args:
        name: Benchmark name of the records (default: the script's file name).
        store: Results store (default: ``$RLBENCH_STORE`` or ``.rlbench``).
        params: Parameters that identify the setting (compare and gate match runs on them).
        seed: The run's seed (default: the model's ``seed``).
        count_ops: Count torch ops, syncs and copies per phase during one iteration (left out of the timings).
        verbose: SB3's verbosity (1 prints where the records went).
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        store: str | os.PathLike[str] | None = None,
        params: dict[str, Any] | None = None,
        seed: int | None = None,
        count_ops: bool = False,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        self._args = (name, store, params, seed, count_ops)
        self.session: RecordingSession | None = None
        self.records_path: Path | None = None

    def _on_training_start(self) -> None:
        name, store, params, seed, count_ops = self._args
        seed = seed if seed is not None else getattr(self.model, "seed", None)
        self.session = RecordingSession(
            name, store=store, params=params, seed=seed, settings=Settings(count_iteration=1 if count_ops else None)
        )
        self.session.start()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        if self.session is None:
            return
        self.session.__exit__(None, None, None)
        self.records_path = self.session.records_path
        if self.verbose:
            print(f"rlbench: records in {self.records_path}; `rlbench report {self.records_path}` renders them")
