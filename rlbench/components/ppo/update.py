"""The PPO update: clipped surrogate, value loss, entropy bonus, minibatch epochs, gradient clipping.

:class:`PPOUpdate` runs epochs of shuffled minibatches over a rollout and times its nested phases
(``update/prepare``, ``update/forward``, ``update/backward``, ``update/optimizer``) with the boundary
clock. Gradients come from autograd over :func:`~rlbench.components.ppo.loss.ppo_loss`, or, for the fused
network with discrete actions, from :mod:`~rlbench.components.ppo.manual` (same gradients, no autograd
bookkeeping). Diagnostics (approx-KL, clip fraction) are accumulated as tensors and read back once per
update, so the loop adds no host-device synchronizations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlbench.components.collect.rollout import RolloutStorage
from rlbench.components.nets.actor_critic import ActorCritic, FusedActorCritic
from rlbench.components.optim.adam import clip_grad_norm
from rlbench.components.ppo import manual as ppo_manual
from rlbench.components.ppo.loss import ppo_loss
from rlbench.components.returns.gae import gae_numpy
from rlbench.instrument.timers import NullTimer, PhaseTimer


@dataclass
class PPOHyperparams:
    """Hyperparameters of the update (see :class:`rlbench.algos.ppo.config.PPOConfig` for their docs)."""

    gamma: float = 0.99
    gae_lambda: float = 0.95
    epochs: int = 4
    minibatches: int = 2
    clip_coef: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    recompute_advantages: bool = False
    gradients: str = "auto"


class PPOUpdate:
    """Epochs of shuffled minibatch PPO steps over one rollout.

    Args:
        model: The actor-critic being trained.
        optimizer: Its optimizer (``zero_grad()`` and ``step()``: a :class:`~rlbench.components.optim.adam.LeanAdam` or
            any ``torch.optim`` optimizer).
        hp: Update hyperparameters.
        rng: Generator for minibatch shuffling.
        timer: Phase timer (a :class:`NullTimer` when omitted).
    """

    def __init__(
        self,
        model: ActorCritic | FusedActorCritic,
        optimizer: Any,
        hp: PPOHyperparams,
        rng: np.random.Generator,
        timer: PhaseTimer | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.hp = hp
        self.rng = rng
        self.timer = timer if timer is not None else NullTimer()
        self.device = next(model.parameters()).device
        self.params = [p for p in model.parameters() if p.requires_grad]
        # clip what the optimizer steps: one flat tensor when the parameters were flattened
        self.clip_params = list(getattr(optimizer, "params", self.params))
        self._advantages: np.ndarray | None = None
        if hp.gradients not in ("auto", "manual", "autograd"):
            raise ValueError(f"gradients must be auto, manual or autograd, got {hp.gradients!r}")
        if hp.gradients == "manual" and not ppo_manual.supports(model):
            raise ValueError("manual gradients need the fused network with discrete actions (tanh or relu)")
        self.manual = hp.gradients == "manual" or (hp.gradients == "auto" and ppo_manual.supports(model))

    def advantages(
        self, st: RolloutStorage, values: np.ndarray | None = None, last_value: np.ndarray | None = None
    ) -> np.ndarray:
        """GAE over the rollout (with fresh ``values``/``last_value`` when given); returns ``(T, N)``."""
        values = st.values if values is None else values
        last_value = st.last_value if last_value is None else last_value
        self._advantages = gae_numpy(st.rewards, values, st.dones, last_value, self.hp.gamma, self.hp.gae_lambda)
        return self._advantages

    def _fresh_values(
        self, obs: torch.Tensor, last_obs: torch.Tensor, shape: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            both = self.model.value(torch.cat([obs, last_obs]))
        both = both.cpu().numpy()
        n_rows = shape[0] * shape[1]
        return both[:n_rows].reshape(shape), both[n_rows:]

    def _minibatches(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        old_logp: torch.Tensor,
        values: np.ndarray,
        epochs: int,
        n_mb: int,
        mb_size: int,
    ) -> tuple[torch.Tensor, ...]:
        """Shuffled minibatches of ``epochs`` epochs: obs, actions, old log-probs, returns, advantages."""
        assert self._advantages is not None, "call advantages() before update()"
        dev = self.device
        batch = obs.shape[0]
        used = n_mb * mb_size
        adv = torch.from_numpy(self._advantages.reshape(batch)).to(dev)
        ret = adv + torch.from_numpy(np.ascontiguousarray(values).reshape(batch)).to(dev)
        perm = np.concatenate([self.rng.permutation(batch)[:used] for _ in range(epochs)])
        idx = torch.from_numpy(perm).to(dev)
        rows = epochs * n_mb
        mb_adv = adv[idx].view(rows, mb_size)
        if self.hp.normalize_advantages and mb_size > 1:
            std, mean = torch.std_mean(mb_adv, dim=1, keepdim=True)
            mb_adv = (mb_adv - mean) / (std + 1e-8)
        return (
            obs[idx].view(rows, mb_size, *obs.shape[1:]),
            actions[idx].view(rows, mb_size, *actions.shape[1:]),
            old_logp[idx].view(rows, mb_size),
            ret[idx].view(rows, mb_size),
            mb_adv,
        )

    def update(self, st: RolloutStorage) -> dict[str, float]:
        """Run the epochs over ``st`` (call :meth:`advantages` first); returns diagnostics of the last epoch.

        The shuffled minibatches of all epochs are gathered at once into ``(epochs * minibatches, size,
        ...)`` tensors with advantages standardized per minibatch in one vectorized op (per epoch when
        advantages are recomputed every epoch), so a minibatch step is only the network forward, the
        loss, backward and the optimizer. Diagnostics (losses, entropy,
        approx-KL, clip fraction) are computed in the last epoch only, without gradients, and read
        back once.
        """
        hp, timer, model, opt = self.hp, self.timer, self.model, self.optimizer
        now = timer.now
        t_prepare = t_forward = t_backward = t_optim = 0.0
        t_start = now()
        shape = st.rewards.shape
        batch = shape[0] * shape[1]
        dev = self.device
        obs = torch.from_numpy(st.obs.reshape(batch, *st.obs.shape[2:])).to(dev)
        actions = torch.from_numpy(st.actions.reshape(batch, *st.actions.shape[2:])).to(dev)
        old_logp = torch.from_numpy(st.logprobs.reshape(batch)).to(dev)
        values = st.values
        n_mb = hp.minibatches
        mb_size = batch // n_mb
        want_entropy = hp.ent_coef != 0.0
        stats: list[torch.Tensor] = []
        t_prepare += now() - t_start
        batches = None
        for epoch in range(hp.epochs):
            t0 = now()
            if epoch > 0 and hp.recompute_advantages:
                last_obs = torch.from_numpy(st.last_obs).to(dev)
                values, last_value = self._fresh_values(obs, last_obs, shape)
                self.advantages(st, values, last_value)
                batches = None
            if batches is None:  # all remaining epochs at once, unless advantages change every epoch
                epochs_now = 1 if hp.recompute_advantages else hp.epochs
                batches = self._minibatches(obs, actions, old_logp, values, epochs_now, n_mb, mb_size)
                first = epoch * n_mb
            mb_obs, mb_act, mb_logp, mb_ret, mb_adv = batches
            last_epoch = epoch == hp.epochs - 1
            t_prepare += now() - t0
            for k in range(epoch * n_mb - first, (epoch + 1) * n_mb - first):
                t0 = now()
                if self.manual:
                    cache = ppo_manual.forward(
                        model,
                        mb_obs[k],
                        mb_act[k],
                        mb_logp[k],
                        mb_adv[k],
                        mb_ret[k],
                        hp.clip_coef,
                        hp.vf_coef,
                        hp.ent_coef,
                        diagnostics=last_epoch,
                    )
                    terms = cache.terms
                    t1 = now()
                    ppo_manual.backward(model, cache)  # assigns every .grad: nothing to zero first
                else:
                    with_entropy = want_entropy or last_epoch
                    new_logp, entropy, new_value = model.evaluate(mb_obs[k], mb_act[k], with_entropy=with_entropy)
                    terms = ppo_loss(
                        new_logp,
                        mb_logp[k],
                        mb_adv[k],
                        new_value,
                        mb_ret[k],
                        entropy,
                        hp.clip_coef,
                        hp.vf_coef,
                        hp.ent_coef,
                        normalize_advantages=False,
                        diagnostics=last_epoch,
                    )
                    t1 = now()
                    opt.zero_grad()
                    terms.loss.backward()
                t2 = now()
                clip_grad_norm(self.clip_params, hp.max_grad_norm)
                opt.step()
                t3 = now()
                t_forward += t1 - t0
                t_backward += t2 - t1
                t_optim += t3 - t2
                if last_epoch:
                    stats.append(
                        torch.stack(
                            [
                                terms.policy_loss.detach(),
                                terms.value_loss.detach(),
                                terms.entropy.detach(),
                                terms.approx_kl,
                                terms.clip_fraction,
                            ]
                        )
                    )  # type: ignore[union-attr]
        t0 = now()
        means = torch.stack(stats).mean(0).tolist()
        t_end = now()
        t_prepare += t_end - t0
        steps = hp.epochs * n_mb
        timer.add("update/prepare", t_prepare, hp.epochs + 2)  # one interval per epoch plus the two ends
        timer.add("update/forward", t_forward, steps)
        timer.add("update/backward", t_backward, steps)
        timer.add("update/optimizer", t_optim, steps)
        timer.add("update", t_end - t_start, 1)
        keys = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
        return dict(zip(keys, means))
