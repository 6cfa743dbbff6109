"""Replay buffers, one file per variant: uniform ring storage (NumPy or torch), prioritized (sum tree), trajectory
crops for TD(lambda), disk-backed memmap; :data:`BUFFERS` maps short names to the classes for the micro-benchmarks.

:class:`UniformReplayBuffer` is the ring storage the others extend: same ``add``, ``sample`` and ``sample_torch``
contract.
"""

from __future__ import annotations

from rlbench.components.replay.memmap import MemmapReplayBuffer
from rlbench.components.replay.prioritized import PrioritizedReplayBuffer
from rlbench.components.replay.trajectory import TrajectoryReplayBuffer
from rlbench.components.replay.uniform import FIELDS, UniformReplayBuffer

__all__ = [
    "BUFFERS",
    "FIELDS",
    "MemmapReplayBuffer",
    "PrioritizedReplayBuffer",
    "TrajectoryReplayBuffer",
    "UniformReplayBuffer",
]

BUFFERS: dict[str, type] = {
    "uniform": UniformReplayBuffer,
    "prioritized": PrioritizedReplayBuffer,
    "trajectory": TrajectoryReplayBuffer,
    "memmap": MemmapReplayBuffer,
}
