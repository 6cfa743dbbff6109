"""Hand-written gradients for the off-policy critic and actor steps (ensemble critic, ReLU MLPs), equal to autograd's.

Why: profiling the SAC update (256x256 MLPs, batch 256, one CPU thread) showed autograd's backward of the stacked
``baddbmm`` critic spending ~1.5 ms per update in transposing copies (``bmm`` backward makes its transposed operands
contiguous) and ~0.7 ms in rank-1 ``bmm`` outer products, on top of the engine's per-node cost. Here every member is
computed with 2-D ``addmm``/``mm`` on views of the stacked weights (BLAS takes the transposes as flags, no copies),
gradients are written with ``out=`` straight into preallocated ``.grad`` buffers, and the actor's backward through
the critic computes input gradients only. ``tests/components/offpolicy/test_offpolicy_updates.py`` checks the losses
and parameters after one and after several steps against the autograd path and a plain reference step.

Supported: :class:`~rlbench.components.nets.critics.EnsembleCritic`, and a
:class:`~rlbench.components.nets.actors.SquashedGaussianActor` (SAC) or
:class:`~rlbench.components.nets.actors.DeterministicActor` (DDPG), no compile.

Precision: float32 by default. With ``dtype=torch.bfloat16`` the wide products (and the ReLU activations and
gradients that feed them) are bfloat16, with float32 accumulation inside each product; thin layers (see
:func:`layer_dtype`), the parameters and their ``.grad`` buffers, the losses, the squashing and log-prob terms and
Adam stay float32 (mixed precision with float32 master weights). The bf16 weight copies are refreshed before each
use, one ``copy_`` per tensor. On this project's
AVX512-BF16 EPYC a 256x256x256 product took 175 µs in float32 and 112 µs in bf16 on 2 threads (336 and 175 µs on
one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from rlbench.components.nets import kernels
from rlbench.components.nets.actors import (
    _HALF_LOG_2PI,
    _LOG2,
    LOG_STD_MAX,
    LOG_STD_MIN,
    DeterministicActor,
    SquashedGaussianActor,
)
from rlbench.components.nets.critics import EnsembleCritic

_relu_grad_ = torch.ops.aten.threshold_backward.grad_input  # ReLU's backward, out= (used in place)


def supports(actor: nn.Module, critic: nn.Module) -> bool:
    """Whether hand-written gradients cover this actor and critic."""
    return isinstance(critic, EnsembleCritic) and isinstance(actor, (SquashedGaussianActor, DeterministicActor))


def _grads(params: list[nn.Parameter]) -> list[torch.Tensor]:
    """Preallocated ``.grad`` buffers (kept across steps; every step overwrites them entirely)."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    return [p.grad for p in params]


def layer_dtype(w: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    """The compute dtype of a layer with weight ``w`` (``(..., in, out)``): ``dtype`` for a wide product, float32 for a
    thin one (an input or output narrower than :data:`~rlbench.components.nets.kernels.NARROW`, e.g. Pendulum's 4
    inputs or the 1-wide Q head): bf16 products of those shapes measured slower than float32 ones (25 vs 7 µs for
    ``(256, 256) @ (256, 1)``), and they carry a negligible share of the arithmetic."""
    return dtype if min(w.shape[-2], w.shape[-1]) >= kernels.NARROW else torch.float32


def _store(result: torch.Tensor, buffer: torch.Tensor) -> None:
    buffer.copy_(result)  # a bf16 product into its float32 .grad buffer


def _mlp_forward(
    x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """ReLU MLP forward; ``weights[k]`` ``(in, out)`` and ``biases[k]`` already in layer ``k``'s compute dtype.

    Returns:
        Each layer's input, in that layer's compute dtype (``inputs[0]`` is ``x``), and the output in float32.
    """
    inputs = []
    h = x
    last = len(weights) - 1
    for k, (w, b) in enumerate(zip(weights, biases)):
        h = h.to(w.dtype)
        inputs.append(h)
        z = torch.addmm(b, h, w)
        h = z.relu_() if k < last else z
    return inputs, h.float()


def _mlp_backward(
    inputs: list[torch.Tensor],
    weights: list[torch.Tensor],
    g: torch.Tensor,
    grad_w: list[torch.Tensor] | None,
    grad_b: list[torch.Tensor] | None,
    input_grad: bool,
    first: int = 0,
) -> torch.Tensor | None:
    """Backpropagate ``g = dL/d output`` through :func:`_mlp_forward`'s layers.

    Args:
        inputs: The layer inputs from the forward pass.
        weights: The weights it used, ``(in, out)``, each in its layer's compute dtype.
        g: Gradient at the output (any float dtype).
        grad_w: Float32 buffers ``(in, out)`` (views are fine) that receive the weight gradients, or ``None``.
        grad_b: Float32 buffers ``(out,)`` that receive the bias gradients (with ``grad_w``).
        input_grad: Also return ``dL/dx``.
        first: Return ``dL/dx[:, first:]`` only (the input columns from ``first`` on, e.g. a critic's action).

    Returns:
        ``dL/dx[:, first:]`` in float32 when ``input_grad``, else ``None``.
    """
    for k in range(len(weights) - 1, -1, -1):
        w, h = weights[k], inputs[k]
        g = g.to(w.dtype)
        if grad_w is not None and grad_b is not None:
            gw = grad_w[k]
            if gw.dtype != w.dtype:
                _store(torch.mm(h.t(), g), gw)
            elif gw.is_contiguous():
                torch.mm(h.t(), g, out=gw)
            else:  # a transposed view of an (out, in) .grad (nn.Linear): its transpose is contiguous, write that
                torch.mm(g.t(), h, out=gw.t())
            torch.sum(g, 0, dtype=grad_b[k].dtype, out=grad_b[k])
        if k == 0:
            if not input_grad:
                return None
            w = w[first:]
        # a 1-wide output layer (a Q head): the outer product as a broadcast multiply, about half the time of mm's
        g = g * w.t() if g.shape[1] == 1 else torch.mm(g, w.t())
        if k > 0:
            _relu_grad_(g, h, 0, grad_input=g)  # in place: g is this step's fresh product, and no new buffer to fault in
    return g.float()


class _CastLayers:
    """Layers' weights ``(in, out)`` and biases in each layer's compute dtype, and per-step refreshing of the cast ones.

    A float32 layer uses views of the parameters themselves (Adam updates them in place, so they never go stale); a
    bf16 layer keeps a copy that :meth:`refresh` overwrites from the parameters, one ``copy_`` per tensor. Views of the
    parameters' ``.grad`` buffers are made once too (:meth:`_grad_views`).
    """

    def __init__(self) -> None:
        self._copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._views: tuple[list[torch.Tensor], Any] | None = None

    @torch.no_grad()
    def _cast(self, tensors: list[torch.Tensor], dtypes: list[torch.dtype]) -> list[torch.Tensor]:
        out = [t.detach().to(dt) for t, dt in zip(tensors, dtypes)]
        self._copies += [(t, c) for t, c in zip(tensors, out) if c.dtype != t.dtype]
        return out

    def _grad_views(self, params: list[torch.Tensor], make: Callable[[list[torch.Tensor]], Any]) -> Any:
        """``make(grads)`` over the parameters' ``.grad`` buffers, remade only when a buffer was replaced."""
        grads = _grads(params)
        if self._views is None or any(a is not b for a, b in zip(grads, self._views[0])):
            self._views = (grads, make(grads))
        return self._views[1]

    @torch.no_grad()
    def refresh(self) -> None:
        """Bring the cast copies up to the parameters' current values (nothing to do in float32)."""
        for src, dst in self._copies:
            dst.copy_(src)


class ManualCritic(_CastLayers):
    """Forward and backward of an :class:`EnsembleCritic`, member by member, in 2-D BLAS calls.

    Built once per update object and reused: per-member views and gradient buffers are made once, and
    :meth:`refresh` (called by the steps before each use) re-casts bf16 weights.

    Args:
        critic: The critic.
        dtype: Compute dtype of the wide products (float32, or bfloat16 with float32 parameters and gradients; see
            :func:`layer_dtype`).
    """

    def __init__(self, critic: EnsembleCritic, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.critic = critic
        self.params = [(getattr(critic, f"w{k}"), getattr(critic, f"b{k}")) for k in range(critic.depth)]
        dtypes = [layer_dtype(w, dtype) for w, _ in self.params]
        self.weights = self._cast([w for w, _ in self.params], dtypes)
        self.biases = self._cast([b for _, b in self.params], dtypes)
        members = range(critic.members)
        self.member_weights = [[w[e] for w in self.weights] for e in members]
        self.member_biases = [[b[e, 0] for b in self.biases] for e in members]

    def forward(self, x: torch.Tensor) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
        """Per member, its layer inputs and its float32 output ``(B, 1)``."""
        return [_mlp_forward(x, w, b) for w, b in zip(self.member_weights, self.member_biases)]

    def _member_grads(self) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]]:
        members = range(self.critic.members)
        return self._grad_views(
            [p for pair in self.params for p in pair],
            lambda grads: (
                [[gw[e] for gw in grads[0::2]] for e in members],
                [[gb[e, 0] for gb in grads[1::2]] for e in members],
            ),
        )

    def backward(
        self,
        inputs: list[torch.Tensor],
        e: int,
        g: torch.Tensor,
        with_param_grads: bool,
        input_grad: bool,
        first: int = 0,
    ) -> torch.Tensor | None:
        """Backpropagate ``g = dL/dq_e`` ``(B, 1)`` through member ``e``.

        Args:
            inputs: That member's layer inputs from :meth:`forward` (or the same rows of each).
            e: Member index.
            g: Gradient of the loss with respect to the member's output.
            with_param_grads: Write the member's weight and bias gradients into the critic's ``.grad`` buffers.
            input_grad: Also return the gradient with respect to the input ``x`` (float32).
            first: With ``input_grad``, return the gradient of the input columns from ``first`` on only.
        """
        grad_w = grad_b = None
        if with_param_grads:
            gw, gb = self._member_grads()
            grad_w, grad_b = gw[e], gb[e]
        return _mlp_backward(inputs, self.member_weights[e], g, grad_w, grad_b, input_grad, first)


@torch.no_grad()
def critic_step(mc: ManualCritic, opt: Any, batch: dict, y: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """Half the summed (importance-weighted) mean squared TD error of every member, its gradient, one Adam step.

    ``mc`` wraps the critic in its compute dtype (see the module docstring); the loss and TD errors are float32.

    Returns:
        ``({"critic_loss", "q_mean"}, |TD| averaged over members per row)``, like the autograd path.
    """
    obs, action = batch["obs"], batch["action"]
    if obs.dim() > 2:
        obs, action, y = obs.flatten(0, 1), action.flatten(0, 1), y.reshape(-1)
    critic = mc.critic
    mc.refresh()
    x = torch.cat((obs, action), dim=-1)
    acts = mc.forward(x)
    w = batch.get("weights")
    scale = 1.0 / x.shape[0]
    loss = torch.zeros((), device=x.device)
    td_abs = torch.zeros_like(y)
    q_sum = torch.zeros((), device=x.device)
    for e, (inputs, out) in enumerate(acts):
        q = out.squeeze(-1)
        td = q - y
        sq = td.square()
        loss = loss + 0.5 * (sq.mean() if w is None else (sq * w).mean())
        g = (td.mul(scale) if w is None else (td * w).mul_(scale)).unsqueeze(-1)  # td itself stays |Q - y|
        mc.backward(inputs, e, g, with_param_grads=True, input_grad=False)
        td_abs = td_abs + td.abs()
        q_sum = q_sum + q.mean()
    opt.step()
    m = critic.members
    return {"critic_loss": loss.detach(), "q_mean": q_sum / m}, td_abs / m


class ManualActor(_CastLayers):
    """An actor's ReLU MLP (``actor.net``) with each layer's weights ``(in, out)`` in its compute dtype; built once per
    update object, like :class:`ManualCritic`."""

    def __init__(self, actor: nn.Module, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.actor = actor
        self.linears = [m for m in actor.net if isinstance(m, nn.Linear)]
        dtypes = [layer_dtype(lin.weight, dtype) for lin in self.linears]
        self.weights = self._cast([lin.weight.t() for lin in self.linears], dtypes)
        self.biases = self._cast([lin.bias for lin in self.linears], dtypes)

    def forward(self, obs: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _mlp_forward(obs, self.weights, self.biases)

    def backward(self, inputs: list[torch.Tensor], g: torch.Tensor) -> None:
        grad_w, grad_b = self._grad_views(
            [p for lin in self.linears for p in (lin.weight, lin.bias)],
            lambda grads: ([gw.t() for gw in grads[0::2]], grads[1::2]),  # weight gradients viewed (in, out)
        )
        _mlp_backward(inputs, self.weights, g, grad_w, grad_b, input_grad=False)


def _min_member_grad(mc: ManualCritic, x: torch.Tensor, coef: float, first: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``q_min`` over members and ``d(coef * sum q_min)/dx[:, first:]`` (the action columns of the critic's input).

    Each row's gradient flows through its minimal member only (``min``'s first index on ties, as ``Tensor.min``'s
    backward). On the CPU the backward of member ``e`` therefore runs on the rows it is minimal for, gathered: the
    members' backward passes together cost one member's over the whole batch instead of one per member (for SAC's twin
    256x256 critics, one 256x256x256 product fewer per update). Elsewhere (finding the rows would synchronize with
    the host) every member runs on every row with the other rows' gradient zero.
    """
    acts = mc.forward(x)
    if len(acts) == 1:
        inputs, out = acts[0]
        return out.squeeze(-1), mc.backward(inputs, 0, torch.full_like(out, coef), False, True, first)
    q = torch.cat([out for _, out in acts], dim=1)  # (B, E)
    q_min, idx = q.min(dim=1)
    if x.device.type != "cpu":
        g_x = None
        for e, (inputs, _) in enumerate(acts):
            g = (idx == e).to(q.dtype).mul_(coef).unsqueeze(-1)
            ge = mc.backward(inputs, e, g, with_param_grads=False, input_grad=True, first=first)
            g_x = ge if g_x is None else g_x + ge
        return q_min, g_x
    g_x = x.new_empty((x.shape[0], x.shape[1] - first))
    for e, (inputs, _) in enumerate(acts):
        rows = (idx == e).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        picked = [inputs[0], *(h.index_select(0, rows) for h in inputs[1:])]  # inputs[0] only feeds weight gradients
        g = q.new_full((rows.numel(), 1), coef)
        g_x.index_copy_(0, rows, mc.backward(picked, e, g, with_param_grads=False, input_grad=True, first=first))
    return q_min, g_x


_C1 = 0.5 * (LOG_STD_MAX - LOG_STD_MIN)  # log_std = LOG_STD_MIN + _C1 (tanh(raw) + 1)


def _squashed_sample(
    actor: SquashedGaussianActor, out: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """:meth:`SquashedGaussianActor.forward` after its MLP: ``(action, log_prob, (tanh(raw), std, tanh(u)))`` from
    the MLP's float32 output ``out`` (mean and raw log-std heads) and the standard normal ``noise``."""
    a_dim = actor.act_dim
    mean, raw = out[:, :a_dim], out[:, a_dim:]
    t_raw = torch.tanh(raw)
    log_std = t_raw.add(1.0).mul_(_C1).add_(LOG_STD_MIN)
    std = log_std.exp()
    u = torch.addcmul(mean, std, noise)
    a_t = torch.tanh(u)
    action = torch.addcmul(actor.bias, a_t, actor.scale)
    logp = (noise.square().mul_(-0.5) - log_std).sum(-1) - a_dim * _HALF_LOG_2PI
    logp = logp - (2.0 * (_LOG2 - u - nn.functional.softplus(-2.0 * u))).sum(-1) - actor.log_scale_sum
    return action, logp, (t_raw, std, a_t)


@torch.no_grad()
def sac_target_values(
    ma: ManualActor, mtc: ManualCritic, next_obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
) -> torch.Tensor:
    """``min_e Q'_e(s', a') - alpha log pi(a'|s')`` with ``a' ~ pi(.|s')``, per row, on the hand-written forward passes.

    ``mtc`` wraps the target critic (its weights are views of the target's, so Polyak's in-place updates show). Each
    member is a chain of 2-D ``addmm`` calls: the stacked critic's ``baddbmm`` broadcast-copies its bias into a fresh
    ``(E, B, h)`` output and runs its 1-wide head as a batched product, which measured slower inside the update.
    """
    ma.refresh()
    mtc.refresh()
    _, out = ma.forward(next_obs)
    action, logp, _ = _squashed_sample(ma.actor, out, noise)
    q = torch.cat([o for _, o in mtc.forward(torch.cat((next_obs, action), dim=-1))], dim=1)  # (B, E)
    return q.amin(1) - alpha * logp


@torch.no_grad()
def sac_actor_step(
    ma: ManualActor, mc: ManualCritic, opt: Any, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAC's actor loss ``mean(alpha log pi(a|s) - min_e Q_e(s, a))``, its gradient by hand, one Adam step.

    ``ma`` and ``mc`` wrap a :class:`SquashedGaussianActor` and the critic in their compute dtype (see the module
    docstring); the squashing and log-prob terms are float32.

    Returns:
        ``(loss, log_prob per row)`` (detached).
    """
    actor = ma.actor
    b = obs.shape[0]
    ma.refresh()
    mc.refresh()
    inputs, out = ma.forward(obs)
    action, logp, (t_raw, std, a_t) = _squashed_sample(actor, out, noise)
    q_min, g_action = _min_member_grad(mc, torch.cat((obs, action), dim=-1), -1.0 / b, obs.shape[1])
    loss = (alpha * logp - q_min).mean()
    k = alpha / b  # dL/dlogp per row
    g_u = g_action * actor.scale * (1.0 - a_t.square()) + 2.0 * k * a_t  # d log pi / du = 2 tanh(u)
    g_log_std = g_u * noise * std - k  # d log pi / d log_std = -1
    g_raw = g_log_std * _C1 * (1.0 - t_raw.square())
    ma.backward(inputs, torch.cat((g_u, g_raw), dim=1))
    opt.step()
    return loss.detach(), logp.detach()


@torch.no_grad()
def ddpg_actor_step(ma: ManualActor, mc: ManualCritic, opt: Any, obs: torch.Tensor) -> torch.Tensor:
    """DDPG's actor loss ``-mean min_e Q_e(s, mu(s))``, its gradient by hand, one Adam step; returns the loss.

    ``ma`` and ``mc`` wrap a :class:`DeterministicActor` and the critic in their compute dtype."""
    actor = ma.actor
    ma.refresh()
    mc.refresh()
    inputs, out = ma.forward(obs)
    t = torch.tanh(out)
    action = torch.addcmul(actor.bias, t, actor.scale)
    q_min, g_action = _min_member_grad(mc, torch.cat((obs, action), dim=-1), -1.0 / obs.shape[0], obs.shape[1])
    g_out = g_action * actor.scale * (1.0 - t.square())
    ma.backward(inputs, g_out)
    opt.step()
    return -q_min.mean().detach()
