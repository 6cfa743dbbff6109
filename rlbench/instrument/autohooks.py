"""The hooks that feed an :class:`~rlbench.instrument.attribution.Attributor` from unmodified training code.

:func:`install` wraps, for the time of a profile (and :func:`uninstall` restores exactly what it replaced):

* gymnasium ``Env``/``VectorEnv`` ``step`` and ``reset`` of every class, those defined later included
  (``env/step``, ``env/reset``; agent steps from a vector env's ``num_envs``);
* ``torch.nn.Module.__call__`` and the ``torch.distributions`` methods (``__init__``, ``sample``, ``rsample``,
  ``log_prob``, ``entropy``): with grad disabled they are ``inference``; with grad enabled they open the sticky
  ``train/forward``;
* ``torch.autograd.backward`` / ``grad`` (``train/backward``), and ``train/optimizer`` for every optimizer's whole
  ``step``, ``zero_grad`` and ``clip_grad_norm_``;
* ``Tensor.item``, ``.tolist``, ``.cpu``, ``.cuda``, ``.numpy``, ``.to`` with a device, and host data becoming a
  tensor: ``torch.tensor``, ``torch.as_tensor``, ``torch.from_numpy`` and the legacy ``torch.Tensor(data)``
  (``transfer``).

Every wrapper starts with one test: when an automatic phase is already open (``depth``) or the call comes from
another thread, it calls straight through (counted in ``passthrough``, for the overhead estimate).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from functools import wraps
from typing import Any

from rlbench.instrument.attribution import ENV, FORWARD, INFER, NEST, UPDATE, Attributor

_get_ident = threading.get_ident
_Restore = list[tuple[Any, str, Any, bool]]  # (owner, attribute, original, was in owner.__dict__)


def replace_attr(restore: _Restore, owner: Any, name: str, value: Any) -> None:
    """Set ``owner.name = value``, remembering in ``restore`` what :func:`uninstall` must put back."""
    if isinstance(owner, type):  # keep the raw attribute: a staticmethod or classmethod must come back as one
        had = name in vars(owner)
        original = vars(owner).get(name)
    else:
        had = hasattr(owner, name)
        original = getattr(owner, name, None)
    restore.append((owner, name, original, had))
    setattr(owner, name, value)


def auto_wrapper(a: Attributor, fn: Callable[..., Any], name: str, layer: str, role: int) -> Callable[..., Any]:
    """``fn`` timed as automatic phase ``name`` (no agent steps counted)."""

    @wraps(fn)
    def auto(*args: Any, **kwargs: Any) -> Any:
        if a.depth or _get_ident() != a.thread:
            a.passthrough += 1
            return fn(*args, **kwargs)
        a.enter(name, layer, role)
        try:
            return fn(*args, **kwargs)
        finally:
            a.exit()

    auto.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    return auto


def env_wrapper(a: Attributor, fn: Callable[..., Any], name: str, batch: Callable[[Any], int] | None) -> Callable[..., Any]:
    """An env method timed as ``name``; ``batch(self)`` gives the agent steps one call takes (``None``: a reset)."""

    @wraps(fn)
    def env_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if a.depth or _get_ident() != a.thread:
            a.passthrough += 1
            return fn(self, *args, **kwargs)
        a.enter(name, "environment", ENV, batch(self) if batch is not None else 0)
        try:
            return fn(self, *args, **kwargs)
        finally:
            a.exit()

    env_call.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    return env_call


def model_wrapper(a: Attributor, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A module or distribution call: inference with grad disabled, the sticky training forward with grad enabled."""
    import torch

    grad_enabled = torch.is_grad_enabled

    @wraps(fn)
    def model_call(*args: Any, **kwargs: Any) -> Any:
        if a.depth or _get_ident() != a.thread:
            a.passthrough += 1
            return fn(*args, **kwargs)
        if grad_enabled():
            a.enter_forward(a.forward_names.get(type(args[0]), FORWARD) if a.forward_names else FORWARD)
            try:
                return fn(*args, **kwargs)
            finally:
                a.exit_forward()
        a.enter("inference", "inference", INFER)
        try:
            return fn(*args, **kwargs)
        finally:
            a.exit()

    model_call.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    return model_call


def _vector_batch(env: Any) -> int:
    return int(env.num_envs)


def _one(env: Any) -> int:
    return 1


class Hooks:
    """What :func:`install` changed, to undo it."""

    def __init__(self, a: Attributor) -> None:
        self.a = a
        self.restore: _Restore = []
        self.import_hook: Any = None

    def wrap_env_class(self, cls: type, batch: Callable[[Any], int]) -> None:
        """Wrap ``step``/``reset`` defined in ``cls`` itself (inherited ones are wrapped where they are defined)."""
        for method, name in (("step", "env/step"), ("reset", "env/reset")):
            fn = vars(cls).get(method)
            if fn is None or not callable(fn) or hasattr(fn, "__rlbench_wrapped__"):
                continue
            replace_attr(self.restore, cls, method, env_wrapper(self.a, fn, name, batch if method == "step" else None))


def all_subclasses(root: type) -> list[type]:
    """``root`` and every class derived from it, at any depth."""
    out, todo = [], [root]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def _install_gymnasium(h: Hooks) -> None:
    try:
        import gymnasium
        from gymnasium.vector import VectorEnv
    except ImportError:
        return
    for root, batch in ((gymnasium.Env, _one), (VectorEnv, _vector_batch)):
        for cls in all_subclasses(root):
            h.wrap_env_class(cls, batch)

        def init_subclass(cls: type, _root: type = root, _batch: Callable[[Any], int] = batch, **kwargs: Any) -> None:
            super(_root, cls).__init_subclass__(**kwargs)  # typing.Generic's bookkeeping
            h.wrap_env_class(cls, _batch)

        replace_attr(h.restore, root, "__init_subclass__", classmethod(init_subclass))


def _install_torch(h: Hooks) -> None:
    import torch

    a = h.a
    a.profiler_enabled = torch._C._autograd._profiler_enabled
    a.rf_on = a.profiler_enabled()
    replace_attr(h.restore, torch.nn.Module, "__call__", model_wrapper(a, torch.nn.Module.__call__))
    for cls in all_subclasses(torch.distributions.Distribution):
        for method in ("__init__", "sample", "rsample", "log_prob", "entropy"):
            fn = vars(cls).get(method)
            if fn is not None and callable(fn) and not hasattr(fn, "__rlbench_wrapped__"):
                replace_attr(h.restore, cls, method, model_wrapper(a, fn))
    for name in ("backward", "grad"):
        backward = auto_wrapper(a, getattr(torch.autograd, name), "train/backward", "update", UPDATE)
        replace_attr(h.restore, torch.autograd, name, backward)
    _install_optimizer_steps(h)
    for owner in (torch.optim.Optimizer, torch.nn.Module):
        replace_attr(h.restore, owner, "zero_grad", auto_wrapper(a, owner.zero_grad, "train/optimizer", "update", UPDATE))
    clip = auto_wrapper(a, torch.nn.utils.clip_grad_norm_, "train/optimizer", "update", UPDATE)
    replace_attr(h.restore, torch.nn.utils, "clip_grad_norm_", clip)
    replace_attr(h.restore, torch.nn.utils.clip_grad, "clip_grad_norm_", clip)
    replace_attr(h.restore, torch.Tensor, "__new__", staticmethod(_tensor_new_wrapper(a)))
    for name in ("tensor", "as_tensor", "from_numpy"):  # host data becoming a tensor (on a device, a copy to it)
        replace_attr(h.restore, torch, name, auto_wrapper(a, getattr(torch, name), "transfer", "transfer", NEST))
    for method in ("item", "tolist", "cpu", "cuda", "numpy"):
        replace_attr(
            h.restore, torch.Tensor, method, auto_wrapper(a, getattr(torch.Tensor, method), "transfer", "transfer", NEST)
        )
    replace_attr(h.restore, torch.Tensor, "to", _to_wrapper(a, torch.Tensor.to))


def _install_optimizer_steps(h: Hooks) -> None:
    """Time every optimizer's whole ``step`` (torch's own step wrapper, hooks and profiler range included).

    torch wraps a class's ``step`` once, at its first instance (``Optimizer.profile_hook_step``): classes already
    wrapped get ours around theirs now; the rest get it when torch wraps them. :func:`uninstall` unwraps both.
    """
    from torch.optim.optimizer import Optimizer

    a = h.a
    original = Optimizer.__dict__["profile_hook_step"].__func__

    def profile_hook_step(func: Callable[..., Any]) -> Callable[..., Any]:
        return auto_wrapper(a, original(func), "train/optimizer", "update", UPDATE)

    replace_attr(h.restore, Optimizer, "profile_hook_step", staticmethod(profile_hook_step))
    for cls in all_subclasses(Optimizer):
        step = vars(cls).get("step")
        if step is not None and getattr(step, "hooked", False) and not hasattr(step, "__rlbench_wrapped__"):
            replace_attr(h.restore, cls, "step", auto_wrapper(a, step, "train/optimizer", "update", UPDATE))


def _unwrap_optimizer_steps() -> None:
    """Put back torch's own step wrapper on classes torch wrapped while profiling (ours was inside its assignment)."""
    from torch.optim.optimizer import Optimizer

    for cls in all_subclasses(Optimizer):
        step = vars(cls).get("step")
        if step is not None and hasattr(step, "__rlbench_wrapped__"):
            cls.step = step.__rlbench_wrapped__


def _tensor_new_wrapper(a: Attributor) -> Callable[..., Any]:
    """``torch.Tensor(data)``, the legacy constructor scripts use on env output: a transfer when given data.

    The signature stays ``(*args, **kwargs)``: torch.compile's polyfill registry accepts a wildcard in place of
    ``Tensor.__new__``'s own.
    """
    import torch

    base_new = torch._C.TensorBase.__new__
    tensor_cls = torch.Tensor

    def tensor_new(*args: Any, **kwargs: Any) -> Any:
        if (
            len(args) < 2
            or args[0] is not tensor_cls
            or a.depth
            or _get_ident() != a.thread
            or isinstance(args[1], (int, torch.Size))
        ):
            return base_new(*args, **kwargs)
        a.enter("transfer", "transfer", NEST)
        try:
            return base_new(*args, **kwargs)
        finally:
            a.exit()

    tensor_new.__rlbench_wrapped__ = base_new  # type: ignore[attr-defined]
    return tensor_new


def _to_wrapper(a: Attributor, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``Tensor.to``: a transfer when it names a device or another tensor; a dtype cast is not."""
    import torch

    dtype = torch.dtype

    @wraps(fn)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if a.depth or _get_ident() != a.thread or (args and isinstance(args[0], dtype) and "device" not in kwargs):
            a.passthrough += 1
            return fn(self, *args, **kwargs)
        a.enter("transfer", "transfer", NEST)
        try:
            return fn(self, *args, **kwargs)
        finally:
            a.exit()

    to.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    return to


def install(a: Attributor, libraries: bool = True) -> Hooks:
    """Install every automatic hook for ``a`` (and, with ``libraries``, the labels of SB3 and TorchRL when imported).

    Returns:
        The installed hooks; pass them to :func:`uninstall`.
    """
    h = Hooks(a)
    try:
        _install_gymnasium(h)
        _install_torch(h)
        if libraries:
            from rlbench.instrument.libraries import install_labels

            h.import_hook = install_labels(h)
    except BaseException:
        uninstall(h)
        raise
    return h


def uninstall(h: Hooks) -> None:
    """Restore everything :func:`install` replaced, in reverse order."""
    if h.import_hook is not None:
        h.import_hook.remove()
        h.import_hook = None
    for owner, name, original, had in reversed(h.restore):
        if had:
            setattr(owner, name, original)
        else:
            try:
                delattr(owner, name)
            except AttributeError:
                pass
    if h.restore and "torch.optim" in sys.modules:
        _unwrap_optimizer_steps()
    h.restore = []
