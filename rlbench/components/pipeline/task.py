"""A contextual bandit with a known best action: learning on it can be checked, unlike a random reward network.

Each state is a Gaussian vector; the best action is the argmax of a fixed random linear map of it, and the reward is 1
for the best action and 0 otherwise. A uniform policy scores ``1 / n_actions`` on average; a policy that has learned
the map scores close to 1 when it acts greedily.
"""

from __future__ import annotations

import numpy as np


class BanditTask:
    """States, best actions and rewards of the bandit.

    Args:
        state_dim: Size of a state vector.
        n_actions: Number of actions (chance level is ``1 / n_actions``).
        seed: Seed of the hidden map (every process building the task with the same seed gets the same task).
    """

    def __init__(self, state_dim: int = 8, n_actions: int = 8, seed: int = 0) -> None:
        if state_dim < 1 or n_actions < 2:
            raise ValueError(f"need state_dim >= 1 and n_actions >= 2, got {state_dim}, {n_actions}")
        self.state_dim, self.n_actions = state_dim, n_actions
        self.weights = np.random.default_rng(seed).standard_normal((n_actions, state_dim)).astype(np.float32)

    def states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` fresh states, float32 ``(n, state_dim)``."""
        return rng.standard_normal((n, self.state_dim), dtype=np.float32)

    def best_actions(self, states: np.ndarray) -> np.ndarray:
        """The rewarded action of each state, int64 ``(n,)``."""
        return np.argmax(states @ self.weights.T, axis=1)

    def rewards(self, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """1.0 where the action is the state's best, else 0.0; ``actions`` is ``(n,)`` or ``(n, G)``."""
        best = self.best_actions(states)
        return (np.asarray(actions) == (best[:, None] if np.ndim(actions) == 2 else best)).astype(np.float32)

    @property
    def chance(self) -> float:
        """Expected reward of a uniformly random policy."""
        return 1.0 / self.n_actions
