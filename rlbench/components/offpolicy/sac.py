"""Soft actor-critic update (Haarnoja et al. 2018): twin Q, target critic, automatic entropy tuning.

One :meth:`SACUpdate.update` = ``update/target`` (``y = r + gamma (1 - d) (min_e Q'_e(s', a') - alpha log pi(a'|s'))``),
``update/critic``, ``update/actor`` (``alpha log pi(a|s) - min_e Q_e(s, a)`` with the critic just updated; gradients
of the actor's parameters only, so no critic weight gradient is computed), ``update/alpha`` (gradient of
``-log_alpha * mean(log pi + target_entropy)`` written by hand: it is ``-mean(log pi + target_entropy)``) and
``update/polyak`` on the critic target. Noise comes from a seeded ``torch.Generator``: target noise, then actor noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from rlbench.components.nets.actors import SquashedGaussianActor
from rlbench.components.offpolicy import manual as offpolicy_manual
from rlbench.components.offpolicy.update import OffPolicyHyperparams, OffPolicyUpdate
from rlbench.components.optim.adam import LeanAdam
from rlbench.instrument.timers import PhaseTimer


@dataclass
class SACHyperparams(OffPolicyHyperparams):
    """SAC settings on top of :class:`OffPolicyHyperparams`.

    Attributes:
        alpha_lr: Adam learning rate of ``log_alpha``.
        init_alpha: Initial entropy temperature.
        autotune: Tune alpha towards ``target_entropy``; fixed at ``init_alpha`` otherwise.
        target_entropy: Target policy entropy; ``None`` is ``-act_dim``.
    """

    alpha_lr: float = 3e-4
    init_alpha: float = 1.0
    autotune: bool = True
    target_entropy: float | None = None


class SACUpdate(OffPolicyUpdate):
    """SAC's gradient update over a :class:`SquashedGaussianActor` and a multi-member critic.

    Args:
        actor: The policy.
        critic: Critic returning ``(members, B)`` Q values (ensemble or separate layout).
        hp: Hyperparameters.
        timer: Phase timer.
        generator: Source of the reparameterization noise (seeded by the caller).
        compile: ``torch.compile`` the networks' forward passes.
    """

    def __init__(
        self,
        actor: SquashedGaussianActor,
        critic: nn.Module,
        hp: SACHyperparams,
        timer: PhaseTimer | None = None,
        generator: torch.Generator | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(actor, critic, hp, timer, compile)
        self.sac_hp = hp
        device = next(actor.parameters()).device
        self.generator = generator if generator is not None else torch.Generator(device)
        self.act_dim = actor.act_dim
        self.target_entropy = float(-self.act_dim if hp.target_entropy is None else hp.target_entropy)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(hp.init_alpha), device=device))
        self.alpha_opt = LeanAdam([self.log_alpha], lr=hp.alpha_lr)
        self._alpha = self.log_alpha.detach().exp()
        self._actor_pass: offpolicy_manual.ActorPass | None = None  # made by the target pass, used by the actor step
        # the hand-written target pass's view of the target critic (its weights are the target's, Polyak shows)
        self.manual_target_critic = (
            offpolicy_manual.ManualCritic(self.target_critic, self.compute_dtype) if self.manual else None
        )

    @property
    def alpha(self) -> float:
        """Current entropy temperature."""
        return float(self._alpha)

    def _noise(self, rows: int, like: torch.Tensor) -> torch.Tensor:
        return torch.randn((rows, self.act_dim), generator=self.generator, device=like.device, dtype=like.dtype)

    def _targets(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        next_obs = batch["next_obs"]
        if next_obs.dim() > 2:
            next_obs = next_obs.flatten(0, 1)
        noise = self._noise(next_obs.shape[0], next_obs)
        if self.manual:  # the actor step's forward runs here too (same actor weights): see offpolicy_manual.ActorPass
            obs = batch["obs"] if batch["obs"].dim() == 2 else batch["obs"].flatten(0, 1)
            v, self._actor_pass = offpolicy_manual.sac_target_values(
                self.manual_actor, self.manual_target_critic, next_obs, noise, self._alpha, obs, self._noise(obs.shape[0], obs)
            )
        else:
            a, logp = self.actor_fn(next_obs, noise)
            v = self.target_critic_fn(next_obs, a).amin(0) - self._alpha * logp
        return self.bootstrap(batch, v)

    def _actor_step(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        phase = self.timer.phase
        with phase("update/actor"):
            if self.manual:
                actor_pass, self._actor_pass = self._actor_pass, None
                assert actor_pass is not None, "the manual actor step follows the target pass of the same batch"
                loss, logp = offpolicy_manual.sac_actor_step(
                    self.manual_actor, self.manual_critic, self.actor_opt, obs, actor_pass, self._alpha
                )
            else:
                a, logp = self.actor_fn(obs, self._noise(obs.shape[0], obs))
                q = self.critic_fn(obs, a).amin(0)
                loss = (self._alpha * logp - q).mean()
                grads = torch.autograd.grad(loss, self.actor_params)
                for p, g in zip(self.actor_params, grads):
                    p.grad = g
                self.actor_opt.step()
        with phase("update/alpha"):
            logp_mean = logp.detach().mean()
            if self.sac_hp.autotune:
                self.log_alpha.grad = -(logp_mean + self.target_entropy)
                self.alpha_opt.step()
                self._alpha = self.log_alpha.detach().exp()
        return {"actor_loss": loss.detach(), "entropy": -logp_mean, "alpha": self._alpha}
