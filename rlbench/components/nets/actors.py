"""Off-policy actors: squashed-Gaussian (SAC) and deterministic (DDPG), and acting on NumPy weight views."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG2 = math.log(2.0)


def relu_mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> nn.Sequential:
    """``Linear -> ReLU`` per hidden size, then a linear output layer (PyTorch default init)."""
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers += [nn.Linear(d, h), nn.ReLU()]
        d = h
    layers.append(nn.Linear(d, out_dim))
    return nn.Sequential(*layers)


class _Squash(nn.Module):
    """Maps ``tanh`` outputs in ``[-1, 1]`` onto the action box ``[low, high]``."""

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        low_t, high_t = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("scale", (high_t - low_t) / 2.0)
        self.register_buffer("bias", (high_t + low_t) / 2.0)
        self.register_buffer("log_scale_sum", torch.log(self.scale).sum())


class SquashedGaussianActor(_Squash):
    """SAC's policy: ``a = low + (tanh(mu + sigma * eps) + 1) * (high - low) / 2`` with exact log-probabilities.

    ``log_std`` is squashed into ``[LOG_STD_MIN, LOG_STD_MAX]`` with a tanh (as CleanRL); the tanh-change-of-variable
    term uses ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``, which stays finite where ``tanh(u)`` rounds to 1.

    Args:
        obs_dim: Observation size.
        act_dim: Action size.
        hidden: Hidden layer sizes.
        low: Lower action bounds, shape ``(act_dim,)``.
        high: Upper action bounds, shape ``(act_dim,)``.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], low: np.ndarray, high: np.ndarray) -> None:
        super().__init__(low, high)
        self.act_dim = act_dim
        self.net = relu_mlp(obs_dim, hidden, 2 * act_dim)

    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw = self.net(obs).float().split(self.act_dim, dim=-1)  # .float(): fp32 heads under bf16 autocast
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)
        return mean, log_std

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized sample and its log-probability.

        Args:
            obs: Observations, ``(B, obs_dim)``.
            noise: Standard normal draws, ``(B, act_dim)``.

        Returns:
            ``(action (B, act_dim), log_prob (B,))``.
        """
        mean, log_std = self._heads(obs)
        u = mean + log_std.exp() * noise
        logp = (-0.5 * noise.square() - log_std).sum(-1) - self.act_dim * _HALF_LOG_2PI
        logp = logp - (2.0 * (_LOG2 - u - nn.functional.softplus(-2.0 * u))).sum(-1) - self.log_scale_sum
        return torch.tanh(u) * self.scale + self.bias, logp

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The mode of the squashed distribution, ``tanh(mu)`` mapped onto the box."""
        return torch.tanh(self._heads(obs)[0]) * self.scale + self.bias


class DeterministicActor(_Squash):
    """DDPG's policy: ``a = tanh(MLP(obs))`` mapped onto the action box.

    Args:
        obs_dim: Observation size.
        act_dim: Action size.
        hidden: Hidden layer sizes.
        low: Lower action bounds.
        high: Upper action bounds.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], low: np.ndarray, high: np.ndarray) -> None:
        super().__init__(low, high)
        self.act_dim = act_dim
        self.net = relu_mlp(obs_dim, hidden, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions, ``(B, act_dim)``."""
        return torch.tanh(self.net(obs).float()) * self.scale + self.bias

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """Same as :meth:`forward` (for a common acting interface)."""
        return self(obs)


class NumpyActor:
    """Acting on the CPU with NumPy views of an actor's live weights: no torch dispatch, no weight copies.

    The arrays are views of the parameters' storage, so optimizer steps (in place) are seen at once. For one or a
    few observations a NumPy forward costs a fraction of a torch one. Outputs equal the module's within float32
    rounding; sampled actions use the same reparameterization with NumPy's normal draws.

    Args:
        actor: A CPU :class:`SquashedGaussianActor` or :class:`DeterministicActor`.
        seed: Seed of the sampling noise.
    """

    def __init__(self, actor: SquashedGaussianActor | DeterministicActor, seed: int | None = None) -> None:
        linears = [m for m in actor.net if isinstance(m, nn.Linear)]
        if any(lin.weight.device.type != "cpu" for lin in linears):
            raise ValueError("NumpyActor needs the actor on the CPU")
        self.layers = [(lin.weight.detach().numpy(), lin.bias.detach().numpy()) for lin in linears]  # shared memory
        self.stochastic = isinstance(actor, SquashedGaussianActor)
        self.act_dim = actor.act_dim
        self.scale, self.bias = actor.scale.numpy(), actor.bias.numpy()
        self.rng = np.random.default_rng(seed)

    def _net(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, np.float32)
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(self.layers):
            x = x @ w.T
            x += b
            if i < last:
                np.maximum(x, 0.0, out=x)
        return x

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Exploration actions: a reparameterized sample (SAC) or the deterministic action (DDPG), float32."""
        out = self._net(obs)
        if not self.stochastic:
            return np.tanh(out) * self.scale + self.bias
        mean, raw = out[:, : self.act_dim], out[:, self.act_dim :]
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (np.tanh(raw) + 1.0)
        u = mean + np.exp(log_std) * self.rng.standard_normal(mean.shape, dtype=np.float32)
        return np.tanh(u) * self.scale + self.bias

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The mode of the policy (evaluation)."""
        out = self._net(obs)[:, : self.act_dim]
        return np.tanh(out) * self.scale + self.bias


class ActorPolicy:
    """Acting with an actor network from NumPy observations (one row per env), under ``torch.inference_mode``.

    Used off the CPU; on the CPU, :class:`~rlbench.components.nets.actors.NumpyActor` acts on weight views.

    Args:
        actor: A :class:`SquashedGaussianActor` (sampled actions) or :class:`DeterministicActor`.
        device: Device the actor lives on.
        seed: Seed of the sampling noise (SAC).
    """

    def __init__(self, actor: torch.nn.Module, device: torch.device, seed: int) -> None:
        self.actor, self.device = actor, device
        self.stochastic = isinstance(actor, SquashedGaussianActor)
        self.generator = torch.Generator(device).manual_seed(seed + 7_919)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Actions to explore with: a sample (SAC) or the deterministic action (DDPG adds noise itself)."""
        with torch.inference_mode():
            x = torch.from_numpy(obs).to(self.device)
            if self.stochastic:
                noise = torch.randn((x.shape[0], self.actor.act_dim), generator=self.generator, device=self.device)
                a = self.actor(x, noise)[0]
            else:
                a = self.actor(x)
            return a.cpu().numpy()

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The policy's deterministic action (evaluation)."""
        with torch.inference_mode():
            return self.actor.deterministic(torch.from_numpy(np.asarray(obs, np.float32)).to(self.device)).cpu().numpy()
