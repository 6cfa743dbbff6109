"""Other libraries' GAE rows time a correct computation: each agrees with rlbench's reference."""

from __future__ import annotations

import numpy as np
import pytest
from rlbench.suites.micro.peer_gae import PEERS, installed

from rlbench.components.returns.gae import gae_reference


def test_every_peer_library_is_installed_for_ci() -> None:
    assert set(installed()) == set(PEERS)  # the test extra installs rlox, torchrl and stable-baselines3


@pytest.mark.parametrize("peer", sorted(PEERS))
@pytest.mark.parametrize("T, N, p_done", [(128, 8, 0.01), (33, 3, 0.2), (5, 1, 0.5)])
def test_peer_gae_matches_the_reference(peer: str, T: int, N: int, p_done: float) -> None:
    rng = np.random.default_rng(T * N)
    r, v = (rng.standard_normal((T, N)).astype(np.float32) for _ in range(2))
    d = rng.random((T, N)) < p_done
    lv = rng.standard_normal(N).astype(np.float32)
    p = PEERS[peer]
    args = p.prepare(r, v, d, lv, 0.99, 0.95)
    got = p.to_tn(p.call(*args), args, T, N)
    np.testing.assert_allclose(got, gae_reference(r, v, d, lv, 0.99, 0.95), rtol=1e-4, atol=1e-4)
