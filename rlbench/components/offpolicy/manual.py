"""Hand-written gradients for the off-policy critic and actor steps (ensemble critic, ReLU MLPs), equal to autograd's.

Why: profiling the SAC update (256x256 MLPs, batch 256, one CPU thread) showed autograd's backward of the stacked
``baddbmm`` critic spending ~1.5 ms per update in transposing copies (``bmm`` backward makes its transposed operands
contiguous) and ~0.7 ms in rank-1 ``bmm`` outer products, on top of the engine's per-node cost. Here the critic's
members run together, one batched product per layer, with the transposes passed to BLAS as strides (no copies);
gradients are written with ``out=`` straight into preallocated ``.grad`` buffers; the actor's backward through the
critic computes input gradients only; and the intermediates live in :class:`Scratch` tensors reused every update.
``tests/components/offpolicy/test_offpolicy_updates.py`` checks the losses and parameters after one and after several
steps against the autograd path and a plain reference step.

Supported: :class:`~rlbench.components.nets.critics.EnsembleCritic`, and a
:class:`~rlbench.components.nets.actors.SquashedGaussianActor` (SAC) or
:class:`~rlbench.components.nets.actors.DeterministicActor` (DDPG), no compile.

Precision: float32 by default. With ``dtype=torch.bfloat16`` the wide products (and the ReLU activations and
gradients that feed them) are bfloat16, with float32 accumulation inside each product; thin layers (see
:func:`layer_dtype`), the parameters and their ``.grad`` buffers, the losses, the squashing and log-prob terms and
Adam stay float32 (mixed precision with float32 master weights). The bf16 weight copies are refreshed before each
use, one ``copy_`` per tensor. On this project's AVX512-BF16 EPYC, 2 threads: a 256x256x256 ``addmm`` took 170 µs in
float32 and 56 µs in bf16; the twin critic's layer as one ``baddbmm`` 90 µs in bf16 against 117 µs as two ``addmm``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


class Scratch:
    """The intermediate tensors of one network's hand-written passes, kept from update to update.

    Why: the wide activations and gradients (``(2, 256, 256)`` float32 is 512 KiB) sit at glibc's mmap threshold.
    Allocated fresh per op, they were returned to the system and faulted back in on the next update: 75 to 480 minor
    page faults per SAC update (``getrusage``), and 0.25 to 0.7 ms of a 2.4 to 4 ms update, varying with the heap's
    state. Kept here, each is allocated once and overwritten in place (``out=``, ``copy_``).

    A tensor is named by its role and layer; one whose shape changes (another batch size) is resized in place, so its
    memory only ever grows to the largest use. A caller must be done with a tensor before the pass that made it runs
    again.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, int, torch.dtype], torch.Tensor] = {}

    def __call__(
        self, role: str, layer: int, shape: torch.Size | tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """The tensor for ``role`` at ``layer``, shaped ``shape``, of ``dtype`` on ``device`` (contents stale)."""
        key = (role, layer, dtype)
        t = self._held.get(key)
        if t is None or t.device != device:
            t = self._held[key] = torch.empty(shape, dtype=dtype, device=device)
        elif t.shape != shape:
            t.resize_(shape)
        return t

    def cast(self, role: str, layer: int, h: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``h`` in ``dtype``: ``h`` itself when it has it, else the held tensor for ``role`` at ``layer``."""
        if h.dtype == dtype:
            return h
        return self(role, layer, h.shape, dtype, h.device).copy_(h)


def _mlp_forward(
    x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor], scratch: Scratch
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """ReLU MLP forward; ``weights[k]`` ``(in, out)`` and ``biases[k]`` already in layer ``k``'s compute dtype.

    Stacked weights ``(E, in, out)`` with biases ``(E, 1, out)`` run every member in one batched product per layer (a
    2-D input is shared by the members through a stride-0 expansion, no copy); 2-D weights run one network. The hidden
    activations live in ``scratch``.

    Returns:
        Each layer's input, in that layer's compute dtype (``inputs[0]`` is ``x``), and the output in float32
        (``(E, B, out)`` for stacked weights).
    """
    inputs = []
    h = x
    last = len(weights) - 1
    for k, (w, b) in enumerate(zip(weights, biases)):
        h = scratch.cast("input", k, h, w.dtype) if k > 0 else h.to(w.dtype)
        inputs.append(h)
        if k == last:  # the head: a narrow output, small
            if w.dim() == 2:
                return inputs, torch.addmm(b, h, w).float()
            return inputs, kernels.baddbmm(b, h if h.dim() == 3 else h.expand(w.shape[0], *h.shape), w).float()
        shape = (*h.shape[:-1], w.shape[-1]) if w.dim() == 2 else (w.shape[0], h.shape[-2], w.shape[-1])
        z = scratch("act", k, shape, w.dtype, w.device)
        if w.dim() == 2:
            torch.addmm(b, h, w, out=z)
        else:
            torch.baddbmm(b, h if h.dim() == 3 else h.expand(w.shape[0], *h.shape), w, out=z)
        h = z.relu_()
    raise ValueError("an MLP needs at least one layer")


def _weight_grad(h: torch.Tensor, g: torch.Tensor, out: torch.Tensor, scratch: Scratch, layer: int) -> None:
    """``hᵀ g`` written into the float32 ``.grad`` view ``out`` (``(in, out)``, or ``(E, in, out)`` per member)."""
    if out.dtype != g.dtype:  # a bf16 product, then into its float32 .grad buffer
        out.copy_(torch.matmul(h.mT, g, out=scratch("wgrad", layer, out.shape, g.dtype, g.device)))
    elif out.is_contiguous() and g.shape[-1] >= kernels.NARROW:
        torch.matmul(h.mT, g, out=out)
    else:  # a narrow output, or a transposed view of an (out, in) .grad (nn.Linear): write the contiguous transpose
        torch.matmul(g.mT, h, out=out.mT)


def _mlp_backward(
    inputs: list[torch.Tensor],
    weights: list[torch.Tensor],
    g: torch.Tensor,
    grad_w: list[torch.Tensor] | None,
    grad_b: list[torch.Tensor] | None,
    input_grad: bool,
    scratch: Scratch,
    first: int = 0,
) -> torch.Tensor | None:
    """Backpropagate ``g = dL/d output`` through :func:`_mlp_forward`'s layers (2-D or stacked alike).

    Args:
        inputs: The layer inputs from the forward pass.
        weights: The weights it used, ``(in, out)`` or ``(E, in, out)``, each in its layer's compute dtype.
        g: Gradient at the output (any float dtype), ``(B, out)`` or ``(E, B, out)``.
        grad_w: Float32 buffers shaped like ``weights`` (views are fine) that receive the weight gradients, or
            ``None``.
        grad_b: Float32 buffers ``(out,)`` or ``(E, 1, out)`` that receive the bias gradients (with ``grad_w``).
        input_grad: Also return ``dL/dx``.
        scratch: Where the hidden gradients live.
        first: Return ``dL/dx[..., first:]`` only (the input columns from ``first`` on, e.g. a critic's action).

    Returns:
        ``dL/dx[..., first:]`` in float32 when ``input_grad`` (per member for stacked weights; a fresh tensor), else
        ``None``.
    """
    for k in range(len(weights) - 1, -1, -1):
        w, h = weights[k], inputs[k]
        g = scratch.cast("grad_cast", k, g, w.dtype) if g.shape[-1] >= kernels.NARROW else g.to(w.dtype)
        if grad_w is not None and grad_b is not None:
            gb = grad_b[k]
            _weight_grad(h, g, grad_w[k], scratch, k)
            torch.sum(g, -2, keepdim=gb.dim() == g.dim(), dtype=gb.dtype, out=gb)
        if k == 0:
            return torch.matmul(g, w[..., first:, :].mT).float() if input_grad else None
        out = scratch("grad", k, h.shape, w.dtype, w.device)
        # a 1-wide output layer (a Q head): the outer product as a broadcast multiply, about half the time of mm's
        g = torch.mul(g, w.mT, out=out) if g.shape[-1] == 1 else torch.matmul(g, w.mT, out=out)
        _relu_grad_(g, h, 0, grad_input=g)  # in place
    raise ValueError("an MLP needs at least one layer")


class _CastLayers:
    """Layers' weights ``(in, out)`` and biases in each layer's compute dtype, and per-step refreshing of the cast ones.

    A float32 layer uses views of the parameters themselves (Adam updates them in place, so they never go stale); a
    bf16 layer keeps a copy that :meth:`refresh` overwrites from the parameters, one ``copy_`` per tensor. Views of the
    parameters' ``.grad`` buffers are made once too (:meth:`_grad_views`).
    """

    def __init__(self) -> None:
        self._copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._views: tuple[list[torch.Tensor], Any] | None = None
        self.scratch = Scratch()

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
    """Forward and backward of an :class:`EnsembleCritic`, every member in one batched product per layer.

    Built once per update object and reused: the scratch tensors are made once, and :meth:`refresh` (called by the
    steps before each use) re-casts bf16 weights.

    Args:
        critic: The critic.
        dtype: Compute dtype of the wide products (float32, or bfloat16 with float32 parameters and gradients; see
            :func:`layer_dtype`).
    """

    def __init__(self, critic: EnsembleCritic, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.critic = critic
        self.params = [(getattr(critic, f"w{k}"), getattr(critic, f"b{k}")) for k in range(critic.depth)]
        self._flat_params = [p for pair in self.params for p in pair]
        dtypes = [layer_dtype(w, dtype) for w, _ in self.params]
        self.weights = self._cast([w for w, _ in self.params], dtypes)  # stacked (E, in, out)
        self.biases = self._cast([b for _, b in self.params], dtypes)  # stacked (E, 1, out)

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Every member on the rows of ``x`` ``(B, in)``: the layer inputs (``(E, B, h)`` after the shared ``x``) and
        the float32 Q values ``(E, B, 1)``."""
        return _mlp_forward(x, self.weights, self.biases, self.scratch)

    def backward(
        self, inputs: list[torch.Tensor], g: torch.Tensor, with_param_grads: bool, input_grad: bool, first: int = 0
    ) -> torch.Tensor | None:
        """Backpropagate ``g = dL/dQ`` ``(E, B, 1)`` through every member.

        Args:
            inputs: The layer inputs from :meth:`forward`.
            g: Gradient of the loss with respect to each member's output.
            with_param_grads: Write the weight and bias gradients into the critic's ``.grad`` buffers.
            input_grad: Also return each member's gradient with respect to the input ``x`` (float32, ``(E, B, .)``).
            first: With ``input_grad``, return the gradient of the input columns from ``first`` on only.
        """
        grad_w = grad_b = None
        if with_param_grads:
            grad_w, grad_b = self._grad_views(self._flat_params, lambda grads: (grads[0::2], grads[1::2]))
        return _mlp_backward(inputs, self.weights, g, grad_w, grad_b, input_grad, self.scratch, first)


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
    mc.refresh()
    inputs, out = mc.forward(torch.cat((obs, action), dim=-1))
    q = out.squeeze(-1)  # (E, B)
    td = q - y
    sq = td.square()
    w = batch.get("weights")
    loss = 0.5 * (sq.mean(-1) if w is None else (sq * w).mean(-1)).sum()
    g = (td.mul(1.0 / obs.shape[0]) if w is None else (td * w).mul_(1.0 / obs.shape[0])).unsqueeze(-1)
    mc.backward(inputs, g, with_param_grads=True, input_grad=False)
    opt.step()
    return {"critic_loss": loss, "q_mean": q.mean()}, td.abs_().mean(0)


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
        return _mlp_forward(obs, self.weights, self.biases, self.scratch)

    def backward(self, inputs: list[torch.Tensor], g: torch.Tensor) -> None:
        grad_w, grad_b = self._grad_views(
            [p for lin in self.linears for p in (lin.weight, lin.bias)],
            lambda grads: ([gw.t() for gw in grads[0::2]], grads[1::2]),  # weight gradients viewed (in, out)
        )
        _mlp_backward(inputs, self.weights, g, grad_w, grad_b, False, self.scratch)


def _min_member_grad(mc: ManualCritic, x: torch.Tensor, coef: float, first: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``q_min`` over members and ``d(coef * sum q_min)/dx[:, first:]`` (the action columns of the critic's input).

    Each row's gradient flows through its minimal member only (``min``'s first index on ties, as ``Tensor.min``'s
    backward): every member runs backward on every row, in one batched product per layer, with the gradient zero on
    the rows where it is not the minimum. Running each member on its own rows only (gathered) does half the
    arithmetic, but measured slower on the CPU: 6% per bf16 SAC update and 2.5% in fp32 (interleaved in one
    process), since the gathered row counts change every update and oneDNN builds a bf16 kernel for each new shape (1
    to 5 ms each), and finding the rows synchronizes with the host.
    """
    inputs, out = mc.forward(x)
    q = out.squeeze(-1)  # (E, B)
    if q.shape[0] == 1:
        g = torch.full_like(out, coef)
        q_min = q[0]
    else:
        q_min, idx = q.min(dim=0)
        members = torch.arange(q.shape[0], device=x.device).unsqueeze(1)
        g = (idx == members).to(q.dtype).mul_(coef).unsqueeze(-1)  # (E, B, 1): coef on each row's minimal member
    g_x = mc.backward(inputs, g, with_param_grads=False, input_grad=True, first=first)
    assert g_x is not None
    return q_min, g_x.sum(0)


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


@dataclass
class ActorPass:
    """The actor's forward pass on the batch's observations and what SAC's actor step needs of it.

    The target pass runs it (:func:`sac_target_values` with ``obs``): the actor's weights do not change between the
    target pass and the actor step (only the critic's do), so one forward over the next observations and the
    observations together (one 512-row product instead of two 256-row ones, and half the small ops) serves both.
    """

    inputs: list[torch.Tensor]
    action: torch.Tensor
    logp: torch.Tensor
    t_raw: torch.Tensor
    std: torch.Tensor
    a_t: torch.Tensor
    noise: torch.Tensor


@torch.no_grad()
def sac_target_values(
    ma: ManualActor,
    mtc: ManualCritic,
    next_obs: torch.Tensor,
    noise: torch.Tensor,
    alpha: torch.Tensor,
    obs: torch.Tensor | None = None,
    obs_noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ActorPass | None]:
    """``min_e Q'_e(s', a') - alpha log pi(a'|s')`` with ``a' ~ pi(.|s')``, per row, on the hand-written forward passes.

    ``mtc`` wraps the target critic (its weights are views of the target's, so Polyak's in-place updates show); its
    members run together, one batched product per layer. With ``obs`` (and its ``obs_noise``), the same actor
    forward also samples ``a ~ pi(.|s)`` for the actor step and returns it as an :class:`ActorPass`.
    """
    ma.refresh()
    mtc.refresh()
    n = next_obs.shape[0]
    both = obs is not None and obs_noise is not None
    x = torch.cat((next_obs, obs)) if both else next_obs
    inputs, out = ma.forward(x)
    action, logp, (t_raw, std, a_t) = _squashed_sample(ma.actor, out, torch.cat((noise, obs_noise)) if both else noise)
    _, q = mtc.forward(torch.cat((next_obs, action[:n]), dim=-1))
    values = q.squeeze(-1).amin(0) - alpha * logp[:n]
    if not both:
        return values, None
    assert obs_noise is not None
    rest = [h[n:] for h in inputs]
    return values, ActorPass(rest, action[n:], logp[n:], t_raw[n:], std[n:], a_t[n:], obs_noise)


@torch.no_grad()
def sac_actor_step(
    ma: ManualActor, mc: ManualCritic, opt: Any, obs: torch.Tensor, p: ActorPass, alpha: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAC's actor loss ``mean(alpha log pi(a|s) - min_e Q_e(s, a))``, its gradient by hand, one Adam step.

    ``ma`` and ``mc`` wrap a :class:`SquashedGaussianActor` and the critic in their compute dtype (see the module
    docstring); ``p`` is the actor's forward on ``obs`` from the target pass. The squashing and log-prob terms are
    float32.

    Returns:
        ``(loss, log_prob per row)`` (detached).
    """
    actor = ma.actor
    b = obs.shape[0]
    mc.refresh()
    q_min, g_action = _min_member_grad(mc, torch.cat((obs, p.action), dim=-1), -1.0 / b, obs.shape[1])
    loss = (alpha * p.logp - q_min).mean()
    k = alpha / b  # dL/dlogp per row
    g_u = g_action * actor.scale * (1.0 - p.a_t.square()) + 2.0 * k * p.a_t  # d log pi / du = 2 tanh(u)
    g_log_std = g_u * p.noise * p.std - k  # d log pi / d log_std = -1
    g_raw = g_log_std * _C1 * (1.0 - p.t_raw.square())
    ma.backward(p.inputs, torch.cat((g_u, g_raw), dim=1))
    opt.step()
    return loss.detach(), p.logp


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
