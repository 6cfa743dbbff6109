"""A lean Adam and gradient-norm clipping for small networks, equal to torch's.

Why not ``torch.optim.Adam``: constructing any ``torch.optim`` optimizer imports ``torch._dynamo``
(about 1.5 s on the 2-core reference machine, a third of a short benchmark's wall), and its ``step`` spends
~0.2 ms per call in Python bookkeeping (param groups, hooks, profiler records) before the fused kernel
runs — several percent of a PPO minibatch step on a 64-unit MLP. :class:`LeanAdam` keeps the math
(``torch._fused_adam_`` where the build has it, else the same update through public ``torch._foreach``
ops) and drops the rest. ``tests/components/optim/test_adam.py`` checks it against ``torch.optim.Adam``
step by step.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class LeanAdam:
    """Adam (no weight decay, no AMSGrad) over a fixed list of parameters.

    Args:
        params: Parameters to optimize.
        lr: Learning rate (may be changed between steps through the attribute).
        betas: Coefficients of the running averages of the gradient and its square.
        eps: Term added to the denominator.
        fused: Use torch's fused kernel (``None``: when the device supports it).
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        fused: bool | None = None,
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("LeanAdam got no parameters that require gradients")
        self.lr, (self.beta1, self.beta2), self.eps = float(lr), betas, float(eps)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        device = self.params[0].device
        self.fused = (hasattr(torch, "_fused_adam_") and device.type in ("cpu", "cuda")) if fused is None else fused
        # the fused kernel reads one step counter per parameter, on the parameter's device: views of one tensor, so a
        # step of all parameters counts with a single add_ (a foreach add_ of a Python scalar costs ~3 µs per parameter
        # on CPU)
        self._all_steps = torch.zeros(len(self.params), dtype=torch.float32, device=device)
        self.state_steps = list(self._all_steps.unbind(0))
        self.steps = 0

    def zero_grad(self) -> None:
        """Drop the gradients (``set_to_none`` semantics)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """Apply one Adam update to every parameter that has a gradient."""
        grads = [p.grad for p in self.params]
        if any(g is None for g in grads):  # rare: some parameters took no part in the loss
            live = [i for i, g in enumerate(grads) if g is not None]
            if not live:
                return
            params, grads = [self.params[i] for i in live], [grads[i] for i in live]
            m, v = [self.exp_avg[i] for i in live], [self.exp_avg_sq[i] for i in live]
            steps = [self.state_steps[i] for i in live]
            torch._foreach_add_(steps, 1.0)
        else:
            params, m, v, steps = self.params, self.exp_avg, self.exp_avg_sq, self.state_steps
            self._all_steps.add_(1.0)
        self.steps += 1
        if self.fused:
            # torch's fused kernel walks a parameter and its gradient as flat memory: a gradient laid out differently
            # (e.g. a transposed view) silently updates the wrong elements, so such a one is copied into p's layout
            grads = [g if g.stride() == p.stride() else torch.empty_like(p).copy_(g) for p, g in zip(params, grads)]
            torch._fused_adam_(
                params,
                grads,
                m,
                v,
                [],
                steps,
                lr=self.lr,
                beta1=self.beta1,
                beta2=self.beta2,
                weight_decay=0.0,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )
            return
        b1, b2 = self.beta1, self.beta2
        torch._foreach_lerp_(m, grads, 1.0 - b1)
        torch._foreach_mul_(v, b2)
        torch._foreach_addcmul_(v, grads, grads, 1.0 - b2)
        for i, p in enumerate(params):  # bias corrections differ only if parameters joined late
            t = float(steps[i])
            c1, c2 = 1.0 - b1**t, 1.0 - b2**t
            denom = (v[i].sqrt() / c2**0.5).add_(self.eps)
            p.addcdiv_(m[i], denom, value=-self.lr / c1)


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale gradients in place so their global L2 norm is at most ``max_norm``; returns the norm before.

    Same result as ``torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)`` (scale
    ``max_norm / (norm + 1e-6)`` clamped at 1), without reading the norm back to the host.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if len(grads) == 1:  # one (flattened) tensor: a single norm
        total = torch.linalg.vector_norm(grads[0])
        grads[0].mul_((max_norm / (total + 1e-6)).clamp_(max=1.0))
        return total
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp_(max=1.0))
    return total


def flatten_parameters(params: list[torch.nn.Parameter]) -> torch.nn.Parameter:
    """Move ``params`` into one contiguous buffer, and their gradients into another; return the whole.

    Afterwards each parameter's data is a view of the returned flat parameter and its ``.grad`` a view of
    the flat parameter's ``.grad``: gradients written *in place* into ``p.grad`` (as
    :func:`rlbench.components.ppo.manual.backward` does) land in one tensor, so gradient clipping is
    one norm and Adam one fused call on one tensor instead of a loop over every parameter.
    Anything that replaces ``p.grad`` (``zero_grad(set_to_none=True)``, autograd on a fresh graph
    without existing grads) breaks the link; use it only with in-place gradient writers.
    """
    flat = torch.nn.Parameter(torch.cat([p.detach().reshape(-1) for p in params]))
    flat.grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat.data[offset : offset + n].view_as(p)
        p.grad = flat.grad[offset : offset + n].view_as(p)
        offset += n
    return flat
