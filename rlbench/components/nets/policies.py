"""Rollout-time policy inference: one call per env step yields actions, log-probs and values.

Two variants behind one interface (``act``, ``value``, ``act_deterministic``, ``load``):

* :class:`NumpyPolicy` evaluates a *snapshot* of an :class:`~rlbench.components.nets.actor_critic.ActorCritic`'s
  weights with NumPy, refreshed by :meth:`load` after every update. The actor's and critic's layers
  are fused into one block-diagonal layer each (one matmul per layer for both networks). On tiny MLPs
  and small batches, the cost of a torch op is dispatch, not arithmetic; NumPy dispatches several times
  faster, so this is the CPU default. Outputs equal the torch module's within float32 rounding, and
  the sampling distribution is the same (inverse-CDF categorical, Gaussian with the same std).
* :class:`TorchPolicy` runs the module itself under ``torch.inference_mode`` on its device (the GPU
  path, and the baseline the NumPy variant is tested and benchmarked against).

Returned arrays are buffers reused by the next call: copy what you keep.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch

from rlbench.components.nets.actor_critic import ActorCritic, FusedActorCritic

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _sample_categorical(
    out: np.ndarray, n_out: int, u: np.ndarray, actions: np.ndarray, logp: np.ndarray, value: np.ndarray
) -> None:
    """Per row of ``out`` (logits in columns ``:n_out``, the value after them): the action whose cumulative
    unnormalized probability first reaches ``u * total`` (inverse CDF, as :meth:`NumpyPolicy.act`'s NumPy path), its
    log-probability and the value, written into ``actions``, ``logp`` and ``value``. Jitted by :func:`_sampler`."""
    for i in range(out.shape[0]):
        m = out[i, 0]
        for j in range(1, n_out):
            m = max(m, out[i, j])
        total = np.float32(0.0)
        for j in range(n_out):
            total += np.exp(out[i, j] - m)
        target = u[i] * total
        a = n_out - 1
        acc = np.float32(0.0)
        for j in range(n_out - 1):
            acc += np.exp(out[i, j] - m)
            if not acc < target:
                a = j
                break
        actions[i] = a
        logp[i] = out[i, a] - m - np.log(total)
        value[i] = out[i, n_out]


@functools.cache
def _sampler() -> Callable[..., None] | None:
    """The jitted :func:`_sample_categorical` (explicit signature, cached on disk); None without numba.

    At CartPole's batch of 8 the NumPy sampling path is a dozen ufunc calls, about 11 µs per env step, as long as the
    network's forward; the compiled loop replaces them with one call.
    """
    from rlbench.core.jit import njit

    sig = "void(float32[:, ::1], int64, float32[::1], int64[::1], float32[::1], float32[::1])"
    try:
        return njit(_sample_categorical, sig, nogil=True, boundscheck=False)
    except ImportError:
        return None


class NumpyPolicy:
    """NumPy inference on a weight snapshot of an :class:`ActorCritic` (actor and critic fused).

    Args:
        module: The network to mirror; call :meth:`load` again after each optimizer step.
        seed: Seed of the sampling generator (``numpy.random.default_rng``).
        jit: Sample discrete actions in one numba-compiled loop (when numba imports) instead of NumPy ufuncs; same
            uniform draws, same inverse-CDF rule.
    """

    def __init__(self, module: ActorCritic | FusedActorCritic, seed: int | None = None, jit: bool = True) -> None:
        self.discrete = module.discrete
        self._jit = _sampler() if jit and module.discrete else None
        self.activation = np.tanh if module.activation == "tanh" else (lambda x, out: np.maximum(x, 0.0, out=out))
        self.rng = np.random.default_rng(seed)
        self.n_out = module.layer_weights()[-1][0][0].shape[1]
        self._buffers: dict[int, list[np.ndarray]] = {}
        self._rows: dict[int, np.ndarray] = {}
        self.load(module)

    def load(self, module: ActorCritic | FusedActorCritic) -> None:
        """Copy the current weights of ``module`` (one host copy per parameter; works from any device)."""
        weights, biases = [], []
        for i, ((wa, ba), (wc, bc)) in enumerate(module.layer_weights()):
            wa, wc = wa.detach().cpu().numpy(), wc.detach().cpu().numpy()
            if i == 0:  # same input for both: concatenate outputs
                w = np.concatenate([wa, wc], axis=1)
            else:  # block-diagonal: actor units feed the actor, critic units the critic
                w = np.zeros((wa.shape[0] + wc.shape[0], wa.shape[1] + wc.shape[1]), dtype=np.float32)
                w[: wa.shape[0], : wa.shape[1]] = wa
                w[wa.shape[0] :, wa.shape[1] :] = wc
            weights.append(np.ascontiguousarray(w, dtype=np.float32))
            biases.append(np.concatenate([ba.detach().cpu().numpy(), bc.detach().cpu().numpy()]).astype(np.float32))
        self.weights, self.biases = weights, biases
        if not self.discrete:
            self.log_std = module.log_std.detach().cpu().numpy().astype(np.float32)
            self.std = np.exp(self.log_std)
            self.logp_const = float(-(self.log_std.sum() + _HALF_LOG_2PI * self.log_std.size))

    def _bufs(self, batch: int) -> list[np.ndarray]:
        bufs = self._buffers.get(batch)
        if bufs is None:
            bufs = [np.empty((batch, w.shape[1]), dtype=np.float32) for w in self.weights]
            bufs += [np.empty((batch, self.n_out), dtype=np.float32) for _ in range(2)]  # shifted logits, exp
            bufs += [np.empty(batch, dtype=np.int64), np.empty(batch, dtype=np.float32), np.empty(batch, dtype=np.float32)]
            self._buffers[batch] = bufs
            self._rows[batch] = np.arange(batch)
        return bufs

    def _forward(self, obs: np.ndarray) -> np.ndarray:
        bufs = self._bufs(obs.shape[0])
        h = obs
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            out = bufs[i]
            np.matmul(h, w, out=out)
            np.add(out, b, out=out)
            if i < last:
                self.activation(out, out=out)
            h = out
        return h  # columns: [actor outputs..., value]

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values, float32, shape ``(B,)``."""
        return self._forward(obs)[:, self.n_out].copy()

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample actions; returns ``(actions, log_probs, values)`` (reused buffers)."""
        out = self._forward(obs)
        if self._jit is not None:
            bufs = self._buffers[out.shape[0]]
            actions, logp, value = bufs[-3], bufs[-2], bufs[-1]
            self._jit(out, self.n_out, self.rng.random(out.shape[0], dtype=np.float32), actions, logp, value)
            return actions, logp, value
        head = out[:, : self.n_out]
        value = out[:, self.n_out]
        if self.discrete:
            # inverse-CDF sampling on unnormalized probabilities: u ~ U(0, sum exp(l - max l))
            bufs = self._buffers[out.shape[0]]
            shifted, expd = bufs[-5], bufs[-4]
            np.subtract(head, np.maximum.reduce(head, axis=1, keepdims=True), out=shifted)
            np.exp(shifted, out=expd)
            total = np.add.reduce(expd, axis=1)
            np.add.accumulate(expd, axis=1, out=expd)
            u = self.rng.random(out.shape[0], dtype=np.float32)
            u *= total
            actions = np.add.reduce(expd[:, :-1] < u[:, None], axis=1)
            logp = shifted[self._rows[out.shape[0]], actions]
            logp -= np.log(total)
            return actions, logp, value
        noise = self.rng.standard_normal(head.shape, dtype=np.float32)
        actions = head + self.std * noise
        logp = np.add.reduce(np.square(noise), axis=1)
        logp *= -0.5
        logp += self.logp_const
        return actions, logp, value

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The policy's mode: argmax logits (discrete) or the Gaussian mean (box)."""
        head = self._forward(obs)[:, : self.n_out]
        return head.argmax(axis=1) if self.discrete else head.copy()


class TorchPolicy:
    """Inference through the torch module itself on its device.

    Args:
        module: The network (its parameters stay live: no snapshot to refresh).
        seed: Unused; sampling draws from torch's global generator, which the run seeds. Accepted
            so both backends are built the same way.
    """

    def __init__(self, module: ActorCritic, seed: int | None = None) -> None:
        self.module = module
        self.device = next(module.parameters()).device
        self.discrete = module.discrete

    def load(self, module: ActorCritic) -> None:
        """Point at ``module`` (no copy needed: inference reads the live parameters)."""
        self.module = module

    def _tensor(self, obs: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(obs).to(self.device, non_blocking=True)

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values, float32, shape ``(B,)``."""
        with torch.inference_mode():
            return self.module.value(self._tensor(obs)).cpu().numpy()

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample actions; returns ``(actions, log_probs, values)`` as NumPy arrays."""
        with torch.inference_mode():
            a, logp, v = self.module.act(self._tensor(obs))
            return a.cpu().numpy(), logp.cpu().numpy(), v.cpu().numpy()

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The policy's mode."""
        with torch.inference_mode():
            return self.module.act(self._tensor(obs), deterministic=True)[0].cpu().numpy()


POLICY_BACKENDS = {"numpy": NumpyPolicy, "torch": TorchPolicy}
