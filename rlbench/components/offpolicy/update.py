"""What SAC and DDPG updates share: TD targets (one-step or TD(lambda) over crops), the critic step, the phases.

Update phases, nested under ``update`` and booked with the run's :class:`~rlbench.instrument.timers.PhaseTimer`:
``update/sample`` (replay draw and tensor conversion), ``update/target`` (target networks, no grad),
``update/critic`` (Q loss, backward, Adam), ``update/actor``, ``update/alpha`` (SAC), ``update/polyak``, and
``update/priorities`` with prioritized replay.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlbench.components.offpolicy import manual as offpolicy_manual
from rlbench.components.offpolicy.polyak import POLYAK
from rlbench.components.optim.adam import LeanAdam
from rlbench.instrument.timers import NullTimer, PhaseTimer

PRECISIONS = ("auto", "fp32", "bf16")


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` is a CPU with bf16 dot-product instructions (AVX512-BF16 or AMX), where a bf16 matrix
    product runs at several times the float32 rate (a 256x256x256 product on this project's 2-core EPYC: 690 against
    200 GFLOP/s)."""
    if device.type != "cpu":
        return False
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's own checks (private, so guarded)
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``"fp32"`` or ``"bf16"`` for a ``precision`` setting: ``"auto"`` is bf16 where :func:`native_bf16` holds and
    float32 elsewhere (bf16 without those instructions is emulated and slower; on GPUs it has not been measured here).

    Raises:
        ValueError: For an unknown setting.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return precision


def frozen_copy(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` whose parameters require no gradient (a target network)."""
    target = copy.deepcopy(module)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


def lambda_returns(
    rewards: torch.Tensor, dones: torch.Tensor, next_values: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """TD(lambda) targets along the last axis of crops of consecutive steps of one episode each.

    ``G_t = r_t + gamma (1 - d_t) [(1 - lam) V(s_{t+1}) + lam G_{t+1}]``, bootstrapped with ``G_L = V(s_L)`` after
    the crop's last step (``lam = 0`` gives one-step targets).

    Args:
        rewards: ``(S, L)``.
        dones: ``(S, L)``, true where the episode terminated at that step (no bootstrap past it).
        next_values: ``V(s_{t+1})``, ``(S, L)``.
        gamma: Discount factor.
        lam: Lambda in ``[0, 1]``.

    Returns:
        Targets, ``(S, L)``.
    """
    disc = gamma * (1.0 - dones.to(rewards.dtype))
    out = torch.empty_like(rewards)
    g = next_values[:, -1]
    for t in range(rewards.shape[1] - 1, -1, -1):
        g = rewards[:, t] + disc[:, t] * ((1.0 - lam) * next_values[:, t] + lam * g)
        out[:, t] = g
    return out


@dataclass
class OffPolicyHyperparams:
    """Settings shared by the SAC and DDPG updates.

    Attributes:
        gamma: Discount factor.
        tau: Polyak coefficient of the target networks.
        actor_lr: Adam learning rate of the actor.
        critic_lr: Adam learning rate of the critic(s).
        polyak: a key of :data:`~rlbench.components.offpolicy.polyak.POLYAK`: ``"foreach"``, ``"lerp"``, ``"loop"``
            or ``"copy"``.
        td_lambda: Lambda of TD(lambda) targets when batches are crops ``(S, L)``; one-step targets for flat batches.
        precision: ``"fp32"``, ``"bf16"`` or ``"auto"`` (see :func:`resolve_precision`). bf16: matrix products in
            bfloat16 with fp32 accumulation; parameters, losses and Adam stay float32. With autograd every pass runs
            under ``torch.autocast``; the hand-written steps cast their operands themselves.
        gradients: ``"manual"`` (hand-written, :mod:`rlbench.components.offpolicy.manual`), ``"autograd"``, or
            ``"auto"``: manual where supported (ensemble critic, not compiled).
    """

    gamma: float = 0.99
    tau: float = 0.005
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    polyak: str = "foreach"
    td_lambda: float = 0.0
    precision: str = "fp32"
    gradients: str = "auto"


class OffPolicyUpdate:
    """The skeleton of an actor-critic update with target networks; subclasses add the targets and the actor step.

    Args:
        actor: The policy network.
        critic: A critic returning ``(members, B)`` Q values.
        hp: Hyperparameters.
        timer: Phase timer the update books its phases to.
        compile: Wrap the networks' forward passes in ``torch.compile`` (first calls compile: book them as warm-up).
    """

    target_actor: nn.Module | None = None

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        hp: OffPolicyHyperparams,
        timer: PhaseTimer | None = None,
        compile: bool = False,
    ) -> None:
        if hp.polyak not in POLYAK:
            raise ValueError(f"unknown Polyak variant {hp.polyak!r}; expected one of {sorted(POLYAK)}")
        fits = offpolicy_manual.supports(actor, critic) and not compile
        if hp.gradients == "manual" and not fits:
            raise ValueError("hand-written gradients need the ensemble critic and no compile; use gradients='auto'")
        if hp.gradients not in ("auto", "manual", "autograd"):
            raise ValueError(f"unknown gradients {hp.gradients!r}; expected auto, manual or autograd")
        self.manual = hp.gradients == "manual" or (hp.gradients == "auto" and fits)
        self.precision = resolve_precision(hp.precision, next(critic.parameters()).device)  # "fp32" or "bf16"
        self.actor, self.critic, self.hp = actor, critic, hp
        self.timer = timer if timer is not None else NullTimer()
        self.target_critic = frozen_copy(critic)
        self.actor_params = [p for p in actor.parameters() if p.requires_grad]
        self.critic_params = [p for p in critic.parameters() if p.requires_grad]
        self.actor_opt = LeanAdam(self.actor_params, lr=hp.actor_lr)
        self.critic_opt = LeanAdam(self.critic_params, lr=hp.critic_lr)
        self._polyak = POLYAK[hp.polyak]
        self.compiled = compile
        self.actor_fn: Callable[..., Any] = torch.compile(actor) if compile else actor
        self.critic_fn: Callable[..., Any] = torch.compile(critic) if compile else critic
        self.target_critic_fn: Callable[..., Any] = torch.compile(self.target_critic) if compile else self.target_critic
        self.updates = 0
        device_type = next(critic.parameters()).device.type
        bf16 = self.precision == "bf16"
        self.compute_dtype = torch.bfloat16 if bf16 else torch.float32  # the hand-written steps' products
        # autograd's passes run bf16 under autocast; the hand-written ones cast their own operands (under autocast
        # their fp32 thin products, e.g. 1-wide Q heads, would run as bf16 ones, which measured slower)
        autocast = bf16 and not self.manual
        self._autocast = lambda: torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast)
        # the hand-written steps' views of the networks, built once (bf16 copies are refreshed before each use)
        self.manual_critic = offpolicy_manual.ManualCritic(critic, self.compute_dtype) if self.manual else None
        self.manual_actor = offpolicy_manual.ManualActor(actor, self.compute_dtype) if self.manual else None
        self._pairs: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def _targets(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """TD targets ``y`` for the batch's rows (same shape as ``batch["reward"]``); runs under ``no_grad``."""
        raise NotImplementedError

    def _actor_step(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Actor loss, gradient and Adam step (and any temperature step); returns diagnostics."""
        raise NotImplementedError

    def _polyak_pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        targets = [*self.target_critic.parameters()]
        sources = [*self.critic.parameters()]
        if self.target_actor is not None:
            targets += [*self.target_actor.parameters()]
            sources += [*self.actor.parameters()]
        return targets, sources

    def bootstrap(self, batch: Mapping[str, torch.Tensor], next_values: torch.Tensor) -> torch.Tensor:
        """One-step targets for flat batches, TD(lambda) targets for crops ``(S, L)``."""
        reward, done = batch["reward"], batch["done"]
        if reward.dim() == 2:
            return lambda_returns(reward, done, next_values.view_as(reward), self.hp.gamma, self.hp.td_lambda)
        return reward + self.hp.gamma * (~done).to(reward.dtype) * next_values

    def critic_step(self, batch: Mapping[str, torch.Tensor], y: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Half the summed (importance-weighted) MSE of every member, its gradient and one Adam step.

        Returns:
            Diagnostics, and the mean absolute TD error per row (new priorities).
        """
        if self.manual:
            return offpolicy_manual.critic_step(self.manual_critic, self.critic_opt, batch, y)
        obs, action = batch["obs"], batch["action"]
        if obs.dim() > 2:  # crops: flatten (S, L, ...) to rows
            obs, action, y = obs.flatten(0, 1), action.flatten(0, 1), y.reshape(-1)
        q = self.critic_fn(obs, action).float()
        td = q - y
        sq = td.square()
        w = batch.get("weights")
        loss = 0.5 * (sq.mean(-1) if w is None else (sq * w).mean(-1)).sum()
        grads = torch.autograd.grad(loss, self.critic_params)
        for p, g in zip(self.critic_params, grads):
            p.grad = g
        self.critic_opt.step()
        return {"critic_loss": loss.detach(), "q_mean": q.detach().mean()}, td.detach().abs().mean(0)

    def update(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient update from a sampled batch (the ``update/sample`` phase is the caller's).

        Args:
            batch: ``obs``, ``action``, ``reward``, ``next_obs``, ``done`` (terminated), optionally importance ``weights``;
                flat rows ``(B, ...)``, or crops ``(S, L, ...)`` of consecutive steps for TD(lambda) targets.

        Returns:
            Diagnostics as 0-d tensors (no host synchronization), plus ``"td_abs"``: per-row absolute TD errors.
        """
        phase = self.timer.phase
        with self._autocast(), phase("update/target"), torch.no_grad():
            y = self._targets(batch).float()
        with self._autocast():
            with phase("update/critic"):
                diag, td_abs = self.critic_step(batch, y)
            obs = batch["obs"] if batch["obs"].dim() == 2 else batch["obs"].flatten(0, 1)
            diag.update(self._actor_step(obs))
        with phase("update/polyak"):
            if self._pairs is None:
                self._pairs = self._polyak_pairs()
            self._polyak(*self._pairs, self.hp.tau)
        self.updates += 1
        diag["td_abs"] = td_abs
        return diag
