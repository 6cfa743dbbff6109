"""The memmap buffer reopens intact and refuses foreign or mismatching directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rlbench.components.replay import (
    FIELDS,
    MemmapReplayBuffer,
)
from tests.components.replay.replay_helpers import (
    ReferenceRing,
    chronological,
    make_batch,
)


def test_memmap_reopens_intact(tmp_path: Path) -> None:
    path, ref = tmp_path / "buf", ReferenceRing(9)
    with MemmapReplayBuffer(path, 9, (2,), obs_dtype=np.float64, seed=0) as buf:
        for s, n in [(0, 4), (4, 8)]:
            buf.add(make_batch(s, n))
            ref.add(make_batch(s, n))
        cursor = buf.cursor
    again = MemmapReplayBuffer.open(path, seed=1)
    assert (again.cursor, len(again), again.capacity, again.specs["obs"][1]) == (cursor, 9, 9, np.float64)
    for name in FIELDS:
        np.testing.assert_array_equal(chronological(again, name), ref.field(name))
    again.add(make_batch(12, 5))
    ref.add(make_batch(12, 5))
    again.flush()  # also done by close(), as below
    again.close()
    reopened = MemmapReplayBuffer.open(path)
    np.testing.assert_array_equal(chronological(reopened, "reward"), ref.field("reward"))
    assert reopened.sample_torch(4)["obs"].dtype == torch.float64
    with pytest.raises(ValueError, match="already holds a replay buffer"):
        MemmapReplayBuffer(path, 9, (2,))
    reopened.close()
    with pytest.raises(ValueError, match="closed"):
        reopened.sample(2)


def test_memmap_rejects_foreign_or_mismatching_directories(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a MemmapReplayBuffer directory"):
        MemmapReplayBuffer.open(tmp_path)
    (tmp_path / "header.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="is not a rlbench-memmap-replay-buffer header"):
        MemmapReplayBuffer.open(tmp_path)
    path = tmp_path / "buf"
    MemmapReplayBuffer(path, 5, (3,)).close()
    header = json.loads((path / "header.json").read_text())
    (path / "header.json").write_text(json.dumps({**header, "capacity": 6}))
    with pytest.raises(ValueError, match="bytes, the header implies"):
        MemmapReplayBuffer.open(path)
    (path / "header.json").write_text(json.dumps({**header, "cursor": 3, "size": 1}))
    with pytest.raises(ValueError, match="inconsistent"):
        MemmapReplayBuffer.open(path)
    (path / "header.json").write_text(json.dumps({**header, "fields": {}}))
    with pytest.raises(ValueError, match="does not describe"):
        MemmapReplayBuffer.open(path)
