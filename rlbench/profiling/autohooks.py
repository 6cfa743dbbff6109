"""The hooks that feed an :class:`~rlbench.profiling.attribution.Attributor` from unmodified training code.

:func:`install` wraps, for the time of a profile (and :func:`uninstall` restores exactly what it replaced):

* gymnasium ``Env``/``VectorEnv`` ``step`` and ``reset`` of every class, those defined later included
  (``env/step``, ``env/reset``; agent steps from a vector env's ``num_envs``), except the pure forwarding ones of
  ``Wrapper`` and ``VectorWrapper`` (the env they forward to is timed);
* ``torch.nn.Module.__call__`` at top level, by what the loop is doing (:func:`_model_event`): a call on the env's
  batch is acting (``inference``, with or without grad, sticky up to the env step); with grad on another batch it
  opens the sticky ``train/forward``; under ``no_grad`` on another batch it is ``train/target``;
* ``torch.no_grad`` and ``torch.inference_mode`` (``__enter__``, ``__exit__``): not events, but marks that make the
  outermost block count whole for the acting or target phase opened inside it;
* ``Tensor.copy_``/``lerp_`` (and their ``torch._foreach_`` forms) into a called module's parameters, and
  ``Module.load_state_dict`` once training has started: ``train/target_update``;
* ``torch.autograd.backward`` / ``grad`` (``train/backward``), and ``train/optimizer`` for every optimizer's whole
  ``step``, ``zero_grad`` and ``clip_grad_norm_``;
* ``Tensor.item``, ``.tolist``, ``.numpy``, and host data becoming a tensor: ``torch.tensor``,
  ``torch.as_tensor``, ``torch.from_numpy`` and the legacy ``torch.Tensor(data)``; where an accelerator is
  available, also ``.cpu``, ``.cuda`` and ``.to`` with a device (``transfer``). On a CPU-only machine those three
  are casts or no-ops, not transfers.

Every wrapper starts with one test: when an automatic phase is already open (``depth``) or the call comes from
another thread, it calls straight through (counted in ``passthrough``, for the overhead estimate, except nested
module calls, which cost what torch's own ``__call__`` costs).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from functools import wraps
from typing import Any

from rlbench.profiling.attribution import (
    ACT,
    ENV,
    EXPLICIT,
    FORWARD,
    INFER,
    MEMORY_MARKS,
    MERGE_GAP_S,
    NEST,
    OWN_THREAD_PREFIX,
    TARGET,
    TARGET_UPDATE,
    UPDATE,
    Attributor,
)
from rlbench.profiling.threads import ThreadSet

try:  # the hot path in C, where the extension was built (pip builds it wherever a C compiler is found)
    from rlbench.profiling import _fastevent
except ImportError:  # pragma: no cover - a pure-Python install: the Python wrappers, the same results, slower
    _fastevent = None  # type: ignore[assignment]

_get_ident = threading.get_ident
_perf_counter = time.perf_counter
# the compiled hooks read CLOCK_MONOTONIC themselves where time.perf_counter is that clock (Linux), as CPython does
_MONOTONIC = sys.platform.startswith("linux") and time.get_clock_info("perf_counter").implementation.startswith(
    "clock_gettime(CLOCK_MONOTONIC)"
)
# batches of an env hook (how many agent steps one call takes), as the compiled hook knows them
NOT_ENV, BATCH_NONE, BATCH_ONE, BATCH_VECTOR, BATCH_CALL = -1, 0, 1, 2, 3  # (BATCH_CALL: ask the env hook's batch())
PURE_PYTHON_ENV = "RLBENCH_PURE_PYTHON_HOOKS"  # set (non-empty): install the Python wrappers, not the compiled hooks
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


def event_wrapper(
    a: Attributor,
    fn: Callable[..., Any],
    name: str,
    layer: str,
    role: int,
    *,
    skip: int = 0,
    copy_metadata: bool = True,
    foreign: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """``fn`` timed as automatic phase ``name`` (no agent steps counted; module calls are :func:`_model_event`'s).

    Args:
        skip: Calls that are not events, tested inline (a callback would cost a frame on every call):
            :data:`SKIP_CAST` a ``Tensor.to`` with only a dtype; :data:`SKIP_NO_DATA` a ``Tensor.__new__`` given a
            shape or nothing; 0 none.
        copy_metadata: Copy ``fn``'s name and docstring (``functools.wraps``). Without, the hook is a function:
            the compiled hook as a builtin function, or the Python wrapper.
        foreign: What a call from another thread than ``a``'s runs (its :class:`~rlbench.profiling.threads.Router`);
            ``None``: ``fn`` itself.

    Returns:
        The compiled hook (:func:`native`) standing for the Python wrapper of :func:`python_event`, or that wrapper
        itself where the extension is not built or ``RLBENCH_PURE_PYTHON_HOOKS`` is set.
    """
    event, paths, path_under = python_event(a, fn, name, layer, role, skip=skip, foreign=foreign)
    event.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    hook = native(a, fn, event, name, layer, role, paths, path_under, skip=skip, foreign=foreign)
    if not copy_metadata:  # a function, as torch.compile's polyfill registry requires of Tensor.__new__
        return event if hook is event else hook.as_function()  # type: ignore[attr-defined]
    wraps(fn)(event)
    return _dressed(hook, event, fn)


def _dressed(hook: Callable[..., Any], python: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """A compiled ``hook`` given ``fn``'s name and docstring, and the mark :func:`uninstall` unwraps by."""
    if hook is not python:
        wraps(fn)(hook)
        hook.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    return hook


def path_cache(a: Attributor, name: str, layer: str) -> tuple[dict[str, str], Callable[[str], str]]:
    """Phase ``name``'s path under each parent path, cached, and what fills that cache (the attributor's own paths);
    a compiled hook and the Python wrapper it stands for share both."""
    paths: dict[str, str] = {}

    def path_under(parent: str) -> str:
        path = paths[parent] = a._paths.get((parent, name)) or a._new_path(parent, name, layer)
        return path

    return paths, path_under


def python_event(
    a: Attributor,
    fn: Callable[..., Any],
    name: str,
    layer: str,
    role: int,
    *,
    skip: int = 0,
    foreign: Callable[..., Any] | None = None,
) -> tuple[Callable[..., Any], dict[str, str], Callable[[str], str]]:
    """The Python wrapper of :func:`event_wrapper` (the reference the compiled hook follows line for line).

    The clock is read first thing after the pass-through test and last thing after ``fn`` returns, so the
    wrapper's own work falls inside the phase it opens, as it does inside a hand timer around the call.

    The common cases run inline, without a call into the attributor: a call of the same kind within
    :data:`MERGE_GAP_S` of the last one continues it, a call of another kind replaces the pending phase on the stack,
    and the end of a call only marks the time (the phase closes lazily, at the next event). Everything else (the
    first phase under a parent, op counting, traces, memory marks) goes through :meth:`Attributor.enter` and
    :meth:`Attributor.exit`. Where the extension is not built this is the profiler's hot path, so it is written for
    the fewest bytecodes: measured with cachegrind in ``python -m rlbench.suites.scripts.accuracy``.

    Returns:
        The wrapper, its path cache (parent path -> this phase's path under it) and what fills that cache.
    """
    clock = a.clock
    thread = a.thread
    gap = MERGE_GAP_S
    update, env = role == UPDATE, role == ENV
    paths, path_under = path_cache(a, name, layer)
    other_thread = fn if foreign is None else foreign

    if skip:
        import torch

        dtype, tensor_cls, shape_like = torch.dtype, torch.Tensor, (int, torch.Size)

    def event(*args: Any, **kwargs: Any) -> Any:
        if _get_ident() != thread:
            return other_thread(*args, **kwargs)
        if a.depth or (
            skip
            and (
                ("device" not in kwargs and (len(args) < 2 or isinstance(args[1], dtype)))  # .to(dtype): a cast
                if skip == SKIP_CAST
                else (len(args) < 2 or args[0] is not tensor_cls or isinstance(args[1], shape_like))  # no data
            )
        ):
            a.passthrough += 1
            return fn(*args, **kwargs) if kwargs else fn(*args)
        now = clock()
        if a.pending and name == a.auto_name and now - a.t_exit < gap and not a.slow:
            a.pending = False  # the same kind again: one phase (the common case of Attributor.enter, inline)
            a.merged += 1
            a.depth = 1
        elif (
            a.pending
            and not a.extras
            and (not env or not (a.updated or a.started is None))
            and (update or env or not a.updated or a.env_width)
        ):
            # the common transition: the pending phase closes at its t_exit and this one takes its place on the
            # stack (what Attributor.enter does with a pop and a push, without their calls and list resizing); an
            # env event that starts an iteration, and an event that starts a cycle (Attributor.cycle_due), go
            # through enter()
            a.pending = False
            a.depth = 1
            stack = a.stack
            old = stack[-1]
            excl = a.excl
            t_exit = a.t_exit
            excl[old] += t_exit - a.t
            merged = a.merged
            if merged:
                a.merges += merged
                a.merged = 0
            a.enters[old] += merged + 1
            parent = a.parent
            excl[parent] += now - t_exit
            a.t = now
            stack[-1] = paths.get(parent) or path_under(parent)
            if update:
                a.updated = True
            a.auto_name = name
        elif not a.enter(name, layer, role, now):  # a transfer inside the training forward: part of it
            try:
                return fn(*args, **kwargs)
            finally:
                a.depth = 0
        try:
            return fn(*args, **kwargs) if kwargs else fn(*args)
        finally:
            if a.slow:  # counting ops, or the attribution has finished: the careful way
                a.exit()
            else:  # Attributor.exit, inline: the phase on top is the one this call opened or continued
                a.depth = 0
                a.t_exit = clock()
                a.pending = True

    return event, paths, path_under


def native(
    a: Attributor,
    fn: Callable[..., Any],
    fallback: Callable[..., Any],
    name: str,
    layer: str,
    role: int,
    paths: dict[str, str],
    path_under: Callable[[str], str],
    *,
    model: int = 0,
    skip: int = 0,
    batch: int = NOT_ENV,
    batch_fn: Callable[[Any], int] | None = None,
    target: Callable[..., Any] | None = None,
    forward_event: Callable[..., Any] | None = None,
    foreign: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """The compiled hook (``rlbench.profiling._fastevent.Event``) standing for the Python wrapper ``fallback``.

    It runs the wrapper's common cases in C, without a Python frame (pass-through, merge, transition, lazy exit),
    and calls ``fallback`` or the attributor for everything else. It shares the attributor's state (its slots) and
    the wrapper's path cache, so the two can serve calls in any mix. Returns ``fallback`` itself where the extension
    is not built (a pure-Python install) or ``RLBENCH_PURE_PYTHON_HOOKS`` is set.
    """
    if not native_available():
        return fallback
    types: dict[str, Any] = {}
    if model:  # the training forward it opens, or continues while open (enter_forward's pass-through, in C)
        types.update(grad_enabled=_grad_enabled(), forward=FORWARD)
    if skip:
        import torch

        types.update(dtype=torch.dtype, tensor_cls=torch.Tensor, shape_like=(int, torch.Size))
    if batch == BATCH_CALL:
        types["batch_fn"] = batch_fn
    if target is not None:  # a module call: the compiled hook of train/target, which its no_grad calls may open
        types["target"] = target
    if forward_event is not None:  # and of train/forward, which its grad-enabled calls open
        types["forward_event"] = forward_event
    return _fastevent.Event(
        a, fn, fallback, name, layer, role, a.clock, a.thread, paths, path_under, MERGE_GAP_S,
        skip=skip, model=model, batch=batch, direct_clock=a.clock is _perf_counter and _MONOTONIC,
        memory_marks=MEMORY_MARKS, foreign=foreign, **types,
    )  # fmt: skip


def native_available() -> bool:
    """Whether hooks installed now are the compiled ones (the extension is built and not switched off)."""
    return _fastevent is not None and not os.environ.get(PURE_PYTHON_ENV)


SKIP_CAST, SKIP_NO_DATA = 1, 2


def _grad_enabled() -> Callable[[], bool]:
    import torch

    return torch.is_grad_enabled


def env_wrapper(
    a: Attributor,
    fn: Callable[..., Any],
    name: str,
    batch: Callable[[Any], int] | None,
    foreign: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """An env method timed as ``name``; ``batch(self)`` gives the agent steps one call takes (``None``: a reset).

    An env called *inside another env's* phase (a wrapper's inner env, a vector env's sub-envs) is part of that env:
    its instance gets the original method back as an instance attribute (:func:`shadow`), so the calls that follow
    skip this wrapper altogether instead of passing through it on every step.
    """
    method = fn.__name__
    timed, paths, path_under = python_event(a, fn, name, "environment", ENV)
    thread = a.thread
    other_thread = fn if foreign is None else foreign

    @wraps(fn)
    def env_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _get_ident() != thread:
            return other_thread(self, *args, **kwargs)
        if a.depth:
            a.passthrough += 1
            outer = a.env_self
            if a.depth and outer is not None and outer is not self and getattr(type(self), method, None) is hook:
                shadow(a, self, method, fn)  # (not a subclass's super().step(), which would shadow its own step)
            return fn(self, *args, **kwargs)
        a.env_self = self
        if type(self) not in a.env_ids:
            a.env_ids[type(self)] = env_id(self)
        try:
            out = timed(self, *args, **kwargs)
        finally:
            a.env_self = None
        if batch is not None:  # after the call: an iteration boundary it made snapshots the steps before it
            n = batch(self)
            a.steps += n
            a.env_width = n
        return out

    env_call.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    code = {None: BATCH_NONE, _one: BATCH_ONE, vector_batch: BATCH_VECTOR}.get(batch, BATCH_CALL)
    hook = native(a, fn, env_call, name, "environment", ENV, paths, path_under, batch=code, batch_fn=batch, foreign=foreign)
    return _dressed(hook, env_call, fn)


def env_id(env: Any) -> str:
    """The registered id of a gymnasium env, a vector env or a Stable-Baselines3 VecEnv of them (``""``: unknown)."""
    for candidate in (env, getattr(env, "unwrapped", None), *(getattr(env, "envs", None) or ())[:1]):
        spec = getattr(candidate, "spec", None)
        if spec is None:
            spec = getattr(getattr(candidate, "unwrapped", None), "spec", None)
        if isinstance(getattr(spec, "id", None), str):
            return str(spec.id)
    return ""


def shadow(a: Attributor, env: Any, method: str, fn: Callable[..., Any]) -> None:
    """Give ``env`` its unwrapped ``method`` as an instance attribute (undone by :func:`uninstall`).

    Set and removed with ``object.__setattr__``/``__delattr__``, never through ``vars(env)``: reading an instance's
    ``__dict__`` turns CPython's inline attribute values into a real dict, and every attribute access of that object
    (a wrapper reads ``self.env`` and its counters on each step) then misses the interpreter's specialised paths:
    cachegrind counted a small method call at 2,291 instructions after ``vars(obj)`` against 1,097 before and 1,282
    with ``object.__setattr__``. An object that takes no attribute (``__slots__``) keeps passing through.
    """
    if type(env) in a.unshadowable:
        return
    try:
        object.__setattr__(env, method, fn.__get__(env, type(env)))
    except (AttributeError, TypeError):
        a.unshadowable.add(type(env))
        return
    a.shadowed.append((weakref.ref(env), method))


def _module_call_wrapper(
    a: Attributor, foreign: Callable[..., Any] | None = None, original: Callable[..., Any] | None = None
) -> Callable[..., Any]:
    """``nn.Module.__call__``, whose nested calls (a model's sub-modules) are by far the most frequent hooked calls.

    A nested call (or one from another thread) does what torch's own ``_wrapped_call_impl`` does, in the same one
    frame, after a single attribute test: it costs what an unprofiled call costs, so it is not counted among the
    pass-throughs. A top-level call goes on to the event (:func:`event_wrapper`).
    """
    import torch

    if original is None:  # (another thread's hook is made later, around the same original)
        original = torch.nn.Module.__call__
    fallback = _model_event(a, original, foreign)
    fallback.__rlbench_wrapped__ = original  # type: ignore[attr-defined]
    wraps(original)(fallback)
    # the phases a module call opens in C (_fastevent.c's acting_call, target_call, forward_call), each with its paths
    target = native(a, original, fallback, TARGET, "update", INFER, *path_cache(a, TARGET, "update"))
    forward = native(a, original, fallback, FORWARD, "update", INFER, *path_cache(a, FORWARD, "update"))
    torch_own = original is getattr(torch.nn.Module, "_wrapped_call_impl", None) and hasattr(torch.nn.Module, "_call_impl")
    hook = native(
        a, original, fallback, ACT, "inference", INFER, *path_cache(a, ACT, "inference"), model=2 if torch_own else 1,
        target=target if target is not fallback else None, forward_event=forward if forward is not fallback else None,
        foreign=foreign,
    )  # fmt: skip
    event = _dressed(hook, fallback, original)
    if not torch_own:
        return event  # another torch: the generic wrapper, whose pass-through calls __call__ as it was
    if native_available():
        return event  # the compiled hook: a nested call runs torch's _call_impl (or its compiled call) from C
    thread = a.thread
    other_thread = original if foreign is None else foreign

    @wraps(original)
    def module_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _get_ident() != thread:
            return other_thread(self, *args, **kwargs)
        if a.depth:
            if self._compiled_call_impl is not None:  # torch's own _wrapped_call_impl, line for line
                return self._compiled_call_impl(*args, **kwargs)
            return self._call_impl(*args, **kwargs)
        return event(self, *args, **kwargs)

    module_call.__rlbench_wrapped__ = original  # type: ignore[attr-defined]
    return module_call


def batch_width(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Rows of a module call's first input: a tensor's or array's first dimension (1 for an unbatched vector), a
    TensorDict's first batch dimension (1 for an unbatched one); 0 when it has none of these (unknown)."""
    x = args[1] if len(args) > 1 else next(iter(kwargs.values()), None) if kwargs else None
    shape = getattr(x, "batch_size", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    shape = getattr(x, "shape", None)
    if shape is None:
        return 0
    try:
        return int(shape[0]) if len(shape) > 1 else 1
    except (TypeError, IndexError):
        return 0


def _model_event(a: Attributor, fn: Callable[..., Any], foreign: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """A module called at top level, decided by what the loop is doing, not only by grad mode.

    * On the env's batch (as many rows as the last env step took agent steps, :attr:`Attributor.env_width`), with
      or without grad: **acting**, ``inference`` (:meth:`Attributor.enter_acting`): CleanRL's DQN and SAC call the
      policy to act with grad enabled.
    * With grad enabled on another batch: the sticky training forward ``train/forward``.
    * Under ``no_grad`` on another batch, once the env's width is known: ``train/target``, in the update layer (the
      TD target's target network, SAC's next action and alpha's log-pi); the whole grad-mode block counts.
    * Before any env step (width unknown): ``inference`` without grad, as a person would call it; in a thread that
      never steps an env, once its training iterations have begun (a learner's), ``train/target``: a no-grad call
      there computes targets or evaluates, it does not act.

    Every module's parameters are noted the first time it is called (:meth:`Attributor.watch_module`): a copy into
    them is a target-network update. Nested calls (a model's sub-modules) call straight through.
    """
    clock, thread = a.clock, a.thread
    grad_enabled = _grad_enabled()
    seen = a.seen_modules
    other_thread = fn if foreign is None else foreign

    def model_call(*args: Any, **kwargs: Any) -> Any:
        if _get_ident() != thread:
            return other_thread(*args, **kwargs)
        if a.depth:
            return fn(*args, **kwargs)
        now = clock()
        if id(args[0]) not in seen:
            a.watch_module(args[0])
        width = a.env_width
        acting = width and batch_width(args, kwargs) == width
        if acting:
            kinds = a.kinds
            if kinds and kinds[-1] == EXPLICIT and (a.stack[-1] == ACT or a.stack[-1].endswith("/" + ACT)):
                a.passthrough += 1  # a library's labelled acting (SB3's predict): its inference already
                a.depth = 1
            else:
                a.enter_acting(now)
            try:
                return fn(*args, **kwargs)
            finally:
                a.depth = 0
                a.act_return = clock()
        if grad_enabled():
            a.enter_forward(a.forward_names.get(type(args[0]), FORWARD) if a.forward_names else FORWARD, now)
            try:
                return fn(*args, **kwargs)
            finally:
                a.depth = 0  # the forward stays open (sticky) for the loss computation
        if (width or ((a.started is not None or a.cycle_due()) and not a.env_ids)) and not (
            a.kinds and a.kinds[-1] == EXPLICIT and a.layers.get(a.stack[-1]) == "advantage"
        ):
            opened = a.enter(TARGET, "update", INFER, now)
        else:  # before any env step, or inside a labelled advantage (TorchRL's GAE calls the value network)
            opened = a.enter(ACT, "inference", INFER, now)
        try:
            return fn(*args, **kwargs)
        finally:
            if opened:
                a.exit()
            else:
                a.depth = 0

    return model_call


def vector_batch(env: Any) -> int:
    return int(env.num_envs)


def _one(env: Any) -> int:
    return 1


class PostImport:
    """Patches watched modules as soon as they finish executing (and those already imported, at once, by
    :meth:`watch`). ``patches`` maps a module's name to (an attribute it must have, ``patch(hooks, module)``); a patch
    that raises is skipped with a one-line warning that starts with ``failing``. ``h`` None: patches for the process's
    whole life (:mod:`rlbench.profiling.follow`'s), which no session removes. (A meta-path finder is any object with
    ``find_spec``; subclassing ``importlib.abc`` would cost every followed process's start-up 8 ms.)"""

    def __init__(self, h: Hooks | None, patches: dict[str, tuple[str, Callable[[Any, Any], None]]], failing: str) -> None:
        self.h, self.patches, self.failing = h, patches, failing
        self.done: set[str] = set()
        self.asking: set[tuple[str, int]] = set()  # (module, thread) whose spec this watcher is asking the others for

    def watch(self) -> PostImport:
        """Patch the watched modules already imported; watch for the others (first on ``sys.meta_path``)."""
        if any(name not in sys.modules for name in self.patches):
            sys.meta_path.insert(0, self)
            if self.h is not None:
                self.h.import_hooks.append(self)
        for name in self.patches:
            module = sys.modules.get(name)
            if module is not None:
                self.apply(name, module)
        return self

    def apply(self, name: str, module: Any) -> None:
        attr, patch = self.patches[name]
        if name in self.done or not hasattr(module, attr):
            return
        self.done.add(name)
        if len(self.done) == len(self.patches):  # nothing left to watch for
            self.remove()
        t0 = time.perf_counter()
        try:
            patch(self.h, module)
        except Exception as exc:  # a library version we do not know: profile without it, and say so
            print(f"rlbench: warning: {self.failing} {name} ({type(exc).__name__}: {exc})", file=sys.stderr)
        finally:
            if self.h is not None:
                self.h.patch_s += time.perf_counter() - t0

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.patches or fullname in self.done:
            return None
        asking = (fullname, threading.get_ident())
        if asking in self.asking:  # another watcher of the same module asked every finder, this one too
            return None
        self.asking.add(asking)
        try:
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self.asking.discard(asking)
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            self.apply(fullname, module)

        spec.loader = _Loader(loader, exec_and_patch)
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class _Loader:
    def __init__(self, inner: Any, exec_module: Callable[[Any], None]) -> None:
        self.inner = inner
        self._exec = exec_module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._exec(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Hooks:
    """What :func:`install` changed, to undo it; and how each hook is made for every thread
    (:meth:`routed`: built for ``a``'s thread, routed to its own for any other thread of ``threads``)."""

    def __init__(self, a: Attributor, threads: ThreadSet | None = None) -> None:
        self.a = a
        self.threads = threads
        self.restore: _Restore = []
        self.import_hooks: list[PostImport] = []
        self.patch_s = 0.0  # seconds spent patching modules as they were imported (inside the script's run)

    def routed(self, fn: Callable[..., Any], make: Callable[[Attributor, Any], Callable[..., Any]]) -> Callable[..., Any]:
        """The hook ``make(attributor, foreign)`` builds around ``fn`` for the session's thread; a call from another
        thread goes to ``foreign`` (a :class:`~rlbench.profiling.threads.Router`), which builds the same hook for that
        thread's attributor on its first call. Without threads followed, calls from other threads run ``fn``."""
        if self.threads is None:
            return make(self.a, None)
        router = self.threads.router(fn)
        router.make = lambda b: make(b, router)
        return make(self.a, router)

    def event(self, fn: Callable[..., Any], name: str, layer: str, role: int, **kwargs: Any) -> Callable[..., Any]:
        """:func:`event_wrapper` around ``fn``, for every thread (:meth:`routed`)."""
        return self.routed(fn, lambda b, f: event_wrapper(b, fn, name, layer, role, foreign=f, **kwargs))

    def wrap_env_class(self, cls: type, batch: Callable[[Any], int], delegates: tuple[type, ...] = ()) -> None:
        """Wrap ``step``/``reset`` defined in ``cls`` itself (inherited ones are wrapped where they are defined).

        Classes in ``delegates`` keep theirs: gymnasium's ``Wrapper`` and ``VectorWrapper`` only forward the call to
        ``self.env``, whose own method is hooked, so wrapping them times nothing more. They are reached through
        ``super().step()`` from most wrappers (``RecordEpisodeStatistics``, ``OrderEnforcing``), a class lookup no
        instance attribute can shadow: wrapped, they were about 8 pass-throughs per step of a 4-env CleanRL loop.
        """
        if cls in delegates:
            return
        for method, name in (("step", "env/step"), ("reset", "env/reset")):
            fn = vars(cls).get(method)
            if fn is None or not callable(fn) or hasattr(fn, "__rlbench_wrapped__"):
                continue
            replace_attr(self.restore, cls, method, self.env(fn, name, batch if method == "step" else None))

    def env(self, fn: Callable[..., Any], name: str, batch: Callable[[Any], int] | None) -> Callable[..., Any]:
        """:func:`env_wrapper` around ``fn``, for every thread (:meth:`routed`)."""
        return self.routed(fn, lambda b, f: env_wrapper(b, fn, name, batch, f))


def all_subclasses(root: type) -> list[type]:
    """``root`` and every class derived from it, at any depth."""
    out, todo = [], [root]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def _install_gymnasium(h: Hooks, gymnasium: Any) -> None:
    """Hook every env class of gymnasium's, and each one defined later. Called when the script has imported
    gymnasium (:func:`install`), not before: its import (20-30 ms after torch's) is the script's, and a script
    without gymnasium does not pay it."""
    from gymnasium.vector import VectorEnv, VectorWrapper

    delegates = (gymnasium.Wrapper, VectorWrapper)
    for root, batch in ((gymnasium.Env, _one), (VectorEnv, vector_batch)):
        for cls in all_subclasses(root):
            h.wrap_env_class(cls, batch, delegates)

        def init_subclass(cls: type, _root: type = root, _batch: Callable[[Any], int] = batch, **kwargs: Any) -> None:
            super(_root, cls).__init_subclass__(**kwargs)  # typing.Generic's bookkeeping
            h.wrap_env_class(cls, _batch)

        replace_attr(h.restore, root, "__init_subclass__", classmethod(init_subclass))


def _install_torch(h: Hooks, torch: Any) -> None:
    """Hook torch's module calls, grad modes, target updates, backward, optimizers and transfers. Called when the
    script has imported torch (:func:`install`), not before: a script without torch does not pay its import (2-3 s
    of CPU on rlbench's 2-vCPU test machines), and one with torch pays it where it imports it."""
    a = h.a
    a.profiler_enabled = torch._C._autograd._profiler_enabled
    a.rf_on = a.profiler_enabled()
    a.refresh_extras()
    call = torch.nn.Module.__call__
    replace_attr(h.restore, torch.nn.Module, "__call__", h.routed(call, lambda b, f: _module_call_wrapper(b, f, call)))
    _install_grad_modes(h)
    _install_target_updates(h)
    for name in ("backward", "grad"):
        replace_attr(
            h.restore, torch.autograd, name, h.event(getattr(torch.autograd, name), "train/backward", "update", UPDATE)
        )
    _install_optimizer_steps(h)
    for owner in (torch.optim.Optimizer, torch.nn.Module):
        replace_attr(h.restore, owner, "zero_grad", h.event(owner.zero_grad, "train/optimizer", "update", UPDATE))
    clip = h.event(torch.nn.utils.clip_grad_norm_, "train/optimizer", "update", UPDATE)
    replace_attr(h.restore, torch.nn.utils, "clip_grad_norm_", clip)
    replace_attr(h.restore, torch.nn.utils.clip_grad, "clip_grad_norm_", clip)
    replace_attr(h.restore, torch.Tensor, "__new__", staticmethod(_tensor_new_wrapper(h)))
    for name in ("tensor", "as_tensor", "from_numpy"):  # host data becoming a tensor (on a device, a copy to it)
        replace_attr(h.restore, torch, name, h.event(getattr(torch, name), "transfer", "transfer", NEST))
    moves = _moves_data()
    for method in ("item", "tolist", "numpy", *(("cpu", "cuda") if moves else ())):
        replace_attr(h.restore, torch.Tensor, method, h.event(getattr(torch.Tensor, method), "transfer", "transfer", NEST))
    if moves:  # a transfer when it names a device or another tensor; a dtype cast is not
        replace_attr(h.restore, torch.Tensor, "to", h.event(torch.Tensor.to, "transfer", "transfer", NEST, skip=SKIP_CAST))


def _install_grad_modes(h: Hooks) -> None:
    """``torch.no_grad`` and ``torch.inference_mode``: a block counts whole, however it nests.

    The blocks are not events (an event costs a phase transition or a merge): the outermost ``__enter__`` at depth 0
    marks the time (:meth:`Attributor.block_enter`): acting that opens inside the block starts there, and inference
    or ``train/target`` calls inside it continue each other however far apart they are (the distribution's work
    between the actor and the critic, the TD target's maths). The outermost ``__exit__``
    (:meth:`Attributor.block_exit`) extends a pending inference or target phase that opened inside the block to the
    block's end. Blocks nested inside (``Normal.sample`` opens its own) change nothing.
    """
    from torch.autograd import grad_mode

    def marked_enter(a: Attributor, enter: Callable[..., Any], foreign: Callable[..., Any] | None) -> Callable[..., Any]:
        clock, thread = a.clock, a.thread
        other_thread = enter if foreign is None else foreign

        @wraps(enter)
        def begin(self: Any) -> Any:
            if _get_ident() != thread:
                return other_thread(self)
            if not a.depth:
                a.block_enter(clock())
            return enter(self)

        begin.__rlbench_wrapped__ = enter  # type: ignore[attr-defined]
        return _native_mark(a, enter, begin, MARK_ENTER, foreign)

    def extending_exit(a: Attributor, leave: Callable[..., Any], foreign: Callable[..., Any] | None) -> Callable[..., Any]:
        clock, thread = a.clock, a.thread
        other_thread = leave if foreign is None else foreign

        @wraps(leave)
        def end(self: Any, *args: Any) -> Any:
            if _get_ident() != thread:
                return other_thread(self, *args)
            out = leave(self, *args)
            if not a.depth and a.blocks:
                a.block_exit(clock())
            return out

        end.__rlbench_wrapped__ = leave  # type: ignore[attr-defined]
        return _native_mark(a, leave, end, MARK_EXIT, foreign)

    for cls in (grad_mode.no_grad, grad_mode.inference_mode):
        enter, leave = vars(cls)["__enter__"], vars(cls)["__exit__"]
        replace_attr(h.restore, cls, "__enter__", h.routed(enter, lambda b, f, enter=enter: marked_enter(b, enter, f)))
        replace_attr(h.restore, cls, "__exit__", h.routed(leave, lambda b, f, leave=leave: extending_exit(b, leave, f)))


MARK_ENTER, MARK_EXIT = 1, 2  # _fastevent.c: an Event that is a grad-mode block's __enter__ or __exit__
MARK_INTO = 5  # or a copy or lerp into tensors (a target update's), passing through in C when nested


def _native_mark(
    a: Attributor, fn: Callable[..., Any], fallback: Callable[..., Any], mark: int, foreign: Callable[..., Any] | None = None
) -> Callable[..., Any]:
    """The compiled form of a grad-mode mark (``fallback``, :func:`_install_grad_modes`'s ``begin`` or ``end``) or of
    a copy into tensors (``MARK_INTO``: :func:`_install_target_updates`'s ``op``: nested calls, copies into tensors
    that are no watched module's parameters, and a polyak loop's copies, the first opening the target update and the
    next continuing it, run in C), or ``fallback`` itself where the extension is not built or switched off. The
    phases a block's end extends (acting and the target) are given as a mark's name and layer; a copy's name is the
    target update it opens."""
    if not native_available():
        return fallback
    name, layer, role = (TARGET_UPDATE, "update", UPDATE) if mark == MARK_INTO else (ACT, TARGET, INFER)
    paths, path_under = path_cache(a, name, layer) if mark == MARK_INTO else ({}, str)  # (a mark opens no phase)
    hook = _fastevent.Event(
        a, fn, fallback, name, layer, role, a.clock, a.thread, paths, path_under, MERGE_GAP_S, mark=mark,
        direct_clock=a.clock is _perf_counter and _MONOTONIC, foreign=foreign,
    )  # fmt: skip
    return _dressed(hook, fallback, fn)


WEIGHTS = "weights/load"
"""``Module.load_state_dict`` in a thread that has never run an update (an actor taking the learner's weights)."""


def _install_target_updates(h: Hooks) -> None:
    """Target-network updates: ``train/target_update`` (and an actor's weight sync: :data:`WEIGHTS`).

    ``Tensor.copy_`` and ``Tensor.lerp_`` (and their ``torch._foreach_`` forms) into the parameters of a module the
    script has called (a hand-written polyak loop: ``tp.data.copy_(tau * p.data + (1 - tau) * tp.data)``), and
    ``Module.load_state_dict`` once training has started (DQN's hard update). Consecutive copies with nothing
    hooked between them are one phase, the loop's arithmetic included; it starts where the loop listed the
    modules' ``parameters()`` (:attr:`Attributor.param_hint`), so the first parameter's arithmetic is in it too.
    Libraries' own helpers (SB3's ``polyak_update``, TorchRL's ``SoftUpdate``) are labelled in
    :mod:`rlbench.profiling.libraries`.
    """
    import torch

    def timed(a: Attributor, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        opened = a.enter(TARGET_UPDATE, "update", UPDATE, a.clock())
        try:
            return fn(*args, **kwargs)
        finally:
            if opened:
                a.exit()
            else:
                a.depth = 0

    def synced(a: Attributor, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        opened = a.enter(WEIGHTS, "other", INFER, a.clock())
        try:
            return fn(*args, **kwargs)
        finally:
            if opened:
                a.exit()
            else:
                a.depth = 0

    def into_params(a: Attributor, fn: Callable[..., Any], many: bool, foreign: Any) -> Callable[..., Any]:
        clock, thread, ptrs = a.clock, a.thread, a.param_ptrs
        other_thread = fn if foreign is None else foreign

        @wraps(fn)
        def op(dest: Any, *args: Any, **kwargs: Any) -> Any:
            if _get_ident() != thread:
                return other_thread(dest, *args, **kwargs)
            if a.depth or not ptrs:
                return fn(dest, *args, **kwargs)
            try:
                ptr = (dest[0] if many else dest).data_ptr()
            except Exception:
                return fn(dest, *args, **kwargs)
            if ptr not in ptrs:
                return fn(dest, *args, **kwargs)
            if a.pending and a.auto_name == TARGET_UPDATE and not a.slow:
                # the loop's next copy (the common case of Attributor.enter's merge, inline: one per parameter)
                a.pending = False
                a.merged += 1
                a.depth = 1
                try:
                    return fn(dest, *args, **kwargs)
                finally:
                    a.depth = 0
                    a.t_exit = clock()
                    a.pending = True
            return timed(a, fn, dest, *args, **kwargs)

        op.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
        return _native_mark(a, fn, op, MARK_INTO, foreign)  # an optimizer's own lerp_ (nested in its step) passes in
        # C, and a polyak loop's copies run there (the cases above, where a phase is pending)

    for owner, names, many in ((torch.Tensor, ("copy_", "lerp_"), False), (torch, ("_foreach_copy_", "_foreach_lerp_"), True)):
        for name in names:
            fn = getattr(owner, name, None)
            if fn is not None:
                hook = h.routed(fn, lambda b, f, fn=fn, many=many: into_params(b, fn, many, f))
                replace_attr(h.restore, owner, name, hook)

    listed = torch.nn.Module.parameters

    def parameters_hint(a: Attributor, foreign: Any) -> Callable[..., Any]:
        clock, thread = a.clock, a.thread
        other_thread = listed if foreign is None else foreign

        @wraps(listed)
        def parameters(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _get_ident() != thread:
                return other_thread(self, *args, **kwargs)
            if not a.depth:  # a polyak loop starts here: `for tp, p in zip(t.parameters(), ...)`
                a.param_hint = clock()
            return listed(self, *args, **kwargs)

        parameters.__rlbench_wrapped__ = listed  # type: ignore[attr-defined]
        return parameters

    replace_attr(h.restore, torch.nn.Module, "parameters", h.routed(listed, parameters_hint))

    load = torch.nn.Module.load_state_dict

    def loading(a: Attributor, foreign: Any) -> Callable[..., Any]:
        thread = a.thread
        other_thread = load if foreign is None else foreign

        @wraps(load)
        def load_state_dict(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _get_ident() != thread:
                return other_thread(self, *args, **kwargs)
            if a.depth or a.started is None:
                return load(self, *args, **kwargs)
            if not a.learns and not any(a.layers.get(p) == "update" for p in a.enters):
                return synced(a, load, self, *args, **kwargs)  # a thread that never updates: an actor taking weights
            return timed(a, load, self, *args, **kwargs)

        load_state_dict.__rlbench_wrapped__ = load  # type: ignore[attr-defined]
        return load_state_dict

    replace_attr(h.restore, torch.nn.Module, "load_state_dict", h.routed(load, loading))


def _install_threads(h: Hooks) -> None:
    """Python threads started while profiling: their start is noted (a followed thread's time counts from it), and at
    their end their attribution is finished in the thread (:class:`~rlbench.profiling.threads.ThreadSet`) and their
    CPU seconds added (``Attributor.thread_cpu``: what the report says of threads it did not attribute)."""
    inner = getattr(threading.Thread, "_bootstrap_inner", None)
    if inner is None:  # another Python: live threads are still read when attribution ends
        return
    cpu = h.a.thread_cpu
    threads = h.threads

    @wraps(inner)
    def bootstrap_inner(self: Any) -> None:
        own = self.name.startswith(OWN_THREAD_PREFIX)
        if threads is not None and not own:
            threads.thread_started(_get_ident())
        try:
            inner(self)
        finally:
            if not own:
                cpu[_get_ident()] = time.thread_time()
                if threads is not None:
                    threads.thread_ended(_get_ident(), self)

    bootstrap_inner.__rlbench_wrapped__ = inner  # type: ignore[attr-defined]
    replace_attr(h.restore, threading.Thread, "_bootstrap_inner", bootstrap_inner)


def _install_optimizer_steps(h: Hooks) -> None:
    """Time every optimizer's whole ``step`` (torch's own step wrapper, hooks and profiler range included).

    torch wraps a class's ``step`` once, at its first instance (``Optimizer.profile_hook_step``): classes already
    wrapped get ours around theirs now; the rest get it when torch wraps them. :func:`uninstall` unwraps both.
    """
    from torch.optim.optimizer import Optimizer

    original = Optimizer.__dict__["profile_hook_step"].__func__

    def profile_hook_step(func: Callable[..., Any]) -> Callable[..., Any]:
        return h.event(original(func), "train/optimizer", "update", UPDATE)

    replace_attr(h.restore, Optimizer, "profile_hook_step", staticmethod(profile_hook_step))
    for cls in all_subclasses(Optimizer):
        step = vars(cls).get("step")
        if step is not None and getattr(step, "hooked", False) and not hasattr(step, "__rlbench_wrapped__"):
            replace_attr(h.restore, cls, "step", h.event(step, "train/optimizer", "update", UPDATE))


def _unwrap_optimizer_steps() -> None:
    """Put back torch's own step wrapper on classes torch wrapped while profiling (ours was inside its assignment)."""
    from torch.optim.optimizer import Optimizer

    for cls in all_subclasses(Optimizer):
        step = vars(cls).get("step")
        if step is not None and hasattr(step, "__rlbench_wrapped__"):
            inner = step.__rlbench_wrapped__
            if getattr(step, "hooked", False):  # torch marked ours: without the mark it wraps the class again at the
                inner.hooked = True  # next instance, and every profile in the process would nest one more wrapper
            cls.step = inner


def _tensor_new_wrapper(h: Hooks) -> Callable[..., Any]:
    """``torch.Tensor(data)``, the legacy constructor scripts use on env output: a transfer when given data.

    The wrapper keeps no metadata of ``Tensor.__new__`` and its signature stays ``(*args, **kwargs)`` (or none, for
    the compiled hook): torch.compile's polyfill registry, which checks ``Tensor.__new__`` when ``torch._dynamo`` is
    first imported (an optimizer's first step does it), accepts a wildcard in place of its own signature, but only
    in a function, a builtin one included (``Event.as_function``).
    """
    import torch

    return h.event(torch._C.TensorBase.__new__, "transfer", "transfer", NEST, skip=SKIP_NO_DATA, copy_metadata=False)


def _moves_data() -> bool:
    """Whether ``Tensor.to``/``.cpu``/``.cuda`` can move data here: an accelerator (CUDA, MPS) is available.

    Without one they are dtype casts or no-ops, not transfers, and are left unhooked: the CleanRL-style script calls
    ``.to(device)`` and ``.cpu()`` about six times per step, each an event the profiler would pay for and book as
    nothing. (``.numpy()``, ``.item()`` and tensors made from host data stay hooked: on a CPU they convert data.)
    """
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(torch.cuda.is_available() or (mps is not None and mps.is_available()))


def install(a: Attributor, threads: ThreadSet | None = None) -> Hooks:
    """Install every automatic hook of torch and gymnasium for ``a``, each when the script imports it or at once if
    it has (the labels of SB3 and TorchRL are
    :func:`rlbench.profiling.libraries.install_labels`'s; :func:`rlbench.profiling.session.install_hooks` installs both).

    Returns:
        The installed hooks; pass them to :func:`uninstall`.
    """
    h = Hooks(a, threads)
    try:
        PostImport(h, {"torch": ("nn", _install_torch), "gymnasium": ("Env", _install_gymnasium)}, "no hooks for").watch()
        _install_threads(h)
    except BaseException:
        uninstall(h)
        raise
    return h


def uninstall(h: Hooks) -> None:
    """Restore everything :func:`install` replaced, in reverse order."""
    for hook in h.import_hooks:
        hook.remove()
    h.import_hooks.clear()
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
    for ref, method in h.a.shadowed:
        env = ref()
        if env is not None:
            try:
                object.__delattr__(env, method)
            except AttributeError:  # the script replaced or removed it itself
                pass
    h.a.shadowed.clear()
    h.a.unshadowable.clear()
