"""DDPG update (Lillicrap et al. 2016): deterministic actor, Q critic, target actor and critic, soft updates.

One :meth:`DDPGUpdate.update` = ``update/target`` (``y = r + gamma (1 - d) Q'(s', mu'(s'))``, or TD(lambda) over
crops), ``update/critic``, ``update/actor`` (``-mean Q(s, mu(s))``, gradients of the actor's parameters only) and
``update/polyak`` on both targets. Exploration noise belongs to the collector (:mod:`rlbench.components.collect.exploration`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from rlbench.components.nets.actors import DeterministicActor
from rlbench.components.offpolicy import manual as offpolicy_manual
from rlbench.components.offpolicy.update import OffPolicyHyperparams, OffPolicyUpdate, frozen_copy
from rlbench.instrument.timers import PhaseTimer


class DDPGUpdate(OffPolicyUpdate):
    """DDPG's gradient update.

    Args:
        actor: The deterministic policy.
        critic: Critic returning ``(members, B)`` Q values (one member for DDPG; the minimum is taken over more).
        hp: Hyperparameters.
        timer: Phase timer.
        compile: ``torch.compile`` the networks' forward passes.
    """

    def __init__(
        self,
        actor: DeterministicActor,
        critic: nn.Module,
        hp: OffPolicyHyperparams,
        timer: PhaseTimer | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(actor, critic, hp, timer, compile)
        self.target_actor = frozen_copy(actor)
        self.target_actor_fn = torch.compile(self.target_actor) if compile else self.target_actor

    def _targets(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        next_obs = batch["next_obs"]
        if next_obs.dim() > 2:
            next_obs = next_obs.flatten(0, 1)
        v = self.target_critic_fn(next_obs, self.target_actor_fn(next_obs)).amin(0)
        return self.bootstrap(batch, v)

    def _actor_step(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        with self.timer.phase("update/actor"):
            if self.manual:
                loss = offpolicy_manual.ddpg_actor_step(self.manual_actor, self.manual_critic, self.actor_opt, obs)
                return {"actor_loss": loss}
            loss = -self.critic_fn(obs, self.actor_fn(obs)).amin(0).mean()
            grads = torch.autograd.grad(loss, self.actor_params)
            for p, g in zip(self.actor_params, grads):
                p.grad = g
            self.actor_opt.step()
        return {"actor_loss": loss.detach()}
