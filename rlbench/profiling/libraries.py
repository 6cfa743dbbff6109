"""Labels on Stable-Baselines3's and TorchRL's own methods, put on when (and if) the script imports them.

Generic hooks see env steps, module calls and backward passes; these labels add the structure a library knows:

* **Stable-Baselines3**: ``collect_rollouts`` is ``collect`` (it starts an iteration) and every algorithm's ``train``
  is ``train``; ``VecEnv.step``/``reset`` are env events that count ``num_envs`` agent steps; the rollout buffer's
  ``compute_returns_and_advantage`` is ``advantage``; replay buffers' ``add``/``sample`` are ``replay/add`` and
  ``replay/sample``. The rollout buffer's per-step ``add`` is left unlabelled: a label there cost two phase
  transitions per vector step (about 5,600 of the 23,600 instructions per agent step that the hooks added to the
  SB3 PPO script, in cachegrind), and its two ``.cpu().numpy()`` calls show as ``collect/transfer`` without it.
  ``BasePolicy.predict`` is acting (``inference``) as a whole, its eval-mode switch and conversions included; the
  ``polyak_update`` the algorithms import is ``train/target_update``.
* **TorchRL**: a collector's batches (each step of its ``iterator``, or a direct ``rollout()``) are ``collect``;
  ``EnvBase.step``/``reset``/``step_and_maybe_reset`` are env events counting the env's batch size; value
  estimators (GAE, TD(λ), V-trace) are ``advantage``; replay buffers' ``extend``/``add``/``sample`` are
  ``replay/...``; a loss module called with grad enabled is the training forward ``train/loss``; a target-network
  updater's ``step`` (``SoftUpdate``, ``HardUpdate``) is ``train/target_update``.
* **Any replay buffer by shape**: a class the script (or any library) defines while profiling, named like one, with a
  ``sample`` and an ``add``/``push``/``store``/``extend``/``insert`` (:func:`replay_methods`): CleanRL's copy of
  SB3's buffer, a script's own ``ReplayMemory``.

The labels go on through a ``sys.meta_path`` finder that patches a module right after it is executed, so a script
that never imports the library pays nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import wraps
from threading import get_ident
from typing import Any

from rlbench.profiling.attribution import MERGE_GAP_S, TARGET_UPDATE, Attributor
from rlbench.profiling.autohooks import (
    _MONOTONIC,
    PostImport,
    _dressed,
    _fastevent,
    _perf_counter,
    all_subclasses,
    native_available,
    path_cache,
    replace_attr,
    vector_batch,
)

Patcher = Callable[[Any, Any], None]  # (hooks, module) -> None


def label_wrapper(
    a: Attributor,
    fn: Callable[..., Any],
    name: str,
    layer: str,
    starts_iteration: bool = False,
    foreign: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """``fn`` as an explicit phase (library label): it always opens, and automatic phases inside become children.
    A call from another thread than ``a``'s runs ``foreign`` (its router), else ``fn``."""

    suffix = "/" + name
    thread = a.thread
    other_thread = fn if foreign is None else foreign

    @wraps(fn)
    def labelled(*args: Any, **kwargs: Any) -> Any:
        if thread != get_ident():
            return other_thread(*args, **kwargs)
        if a.stack and (a.stack[-1] == name or a.stack[-1].endswith(suffix)):
            return fn(*args, **kwargs)  # already inside this label (a collector's iterator calling its rollout)
        a.open_explicit(name, layer, starts_iteration)
        try:
            return fn(*args, **kwargs)
        finally:
            a.close_explicit()

    labelled.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    if not native_available():
        return labelled
    # the compiled hook (_fastevent.c's label_call): open_explicit and close_explicit's common cases without a frame
    hook = _fastevent.Event(
        a, fn, labelled, name, layer, 0, a.clock, a.thread, *path_cache(a, name, layer), MERGE_GAP_S,
        mark=LABEL_ITERATION if starts_iteration else LABEL, direct_clock=a.clock is _perf_counter and _MONOTONIC,
        foreign=foreign,
    )  # fmt: skip
    return _dressed(hook, labelled, fn)


LABEL, LABEL_ITERATION = 3, 4  # _fastevent.c: an Event that is a library's label


def label_generator(h: Any, fn: Callable[..., Any], name: str, layer: str) -> Callable[..., Any]:
    """A generator function whose every ``next()`` is the explicit phase ``name`` (a collector's iterator), in the
    attribution of the thread that runs it."""
    main = h.a
    threads = h.threads

    @wraps(fn)
    def labelled(*args: Any, **kwargs: Any) -> Any:
        inner = fn(*args, **kwargs)
        while True:
            ident = get_ident()
            a = main if ident == main.thread else threads.attributor(ident) if threads is not None else None
            if a is not None:
                a.open_explicit(name, layer, True)
            try:
                item = next(inner)
            except StopIteration as stop:
                return stop.value
            finally:
                if a is not None:
                    a.close_explicit()
            yield item

    labelled.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    return labelled


def _label(h: Any, cls: type, method: str, name: str, layer: str, starts_iteration: bool = False) -> None:
    fn = vars(cls).get(method)
    if fn is not None and callable(fn) and not hasattr(fn, "__rlbench_wrapped__"):
        replace_attr(h.restore, cls, method, labelled(h, fn, name, layer, starts_iteration))


def labelled(h: Any, fn: Callable[..., Any], name: str, layer: str, starts_iteration: bool = False) -> Callable[..., Any]:
    """:func:`label_wrapper` around ``fn``, for every thread (``Hooks.routed``)."""
    return h.routed(fn, lambda b, f: label_wrapper(b, fn, name, layer, starts_iteration, f))


def _env(h: Any, cls: type, batch: Callable[[Any], int]) -> None:
    for method, name in (("step", "env/step"), ("reset", "env/reset"), ("step_and_maybe_reset", "env/step")):
        fn = vars(cls).get(method)
        if fn is not None and callable(fn) and not hasattr(fn, "__rlbench_wrapped__"):
            replace_attr(h.restore, cls, method, h.env(fn, name, batch if method != "reset" else None))


# --- Stable-Baselines3 --------------------------------------------------------------------------------------------
def _sb3_vec_env(h: Any, module: Any) -> None:
    _env(h, module.VecEnv, vector_batch)  # num_envs, as gymnasium's vector envs (the compiled hook reads it itself)


def _sb3_buffers(h: Any, module: Any) -> None:
    _label(h, module.RolloutBuffer, "compute_returns_and_advantage", "advantage", "advantage")
    for cls in (module.ReplayBuffer, *module.ReplayBuffer.__subclasses__()):
        _label(h, cls, "add", "replay/add", "replay")
        _label(h, cls, "sample", "replay/sample", "replay")


def _sb3_algorithms(h: Any, module: Any) -> None:
    for cls in all_subclasses(module.BaseAlgorithm):
        _label(h, cls, "collect_rollouts", "collect", "other", starts_iteration=True)
        _label(h, cls, "train", "train", "update")


def _sb3_algorithm_module(h: Any, module: Any) -> None:
    """A module defining an algorithm class (PPO, SAC, ...): label the classes it defines, and the ``polyak_update``
    it imported by name (DQN, SAC, TD3: the target-network update, ``train/target_update``)."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, BaseAlgorithm):
            _label(h, value, "collect_rollouts", "collect", "other", starts_iteration=True)
            _label(h, value, "train", "train", "update")
    _label_function(h, module, "polyak_update", TARGET_UPDATE, "update")


def _sb3_policies(h: Any, module: Any) -> None:
    """``BasePolicy.predict`` is acting as a whole: switching to eval mode, the observation's conversion, the call
    under ``no_grad``, the action's conversion and clipping (off-policy algorithms act through it)."""
    _label(h, module.BasePolicy, "predict", "inference", "inference")


def _sb3_utils(h: Any, module: Any) -> None:
    _label_function(h, module, "polyak_update", TARGET_UPDATE, "update")


def _label_function(h: Any, module: Any, name: str, label: str, layer: str) -> None:
    """Label ``module.name``. A module that imported it by name from a module labelled before it in this session
    (``from stable_baselines3.common.utils import polyak_update``, run while profiling) holds that label already:
    it gets the original back when profiling ends too, or the next session in this process would find it labelled
    for an attributor that is gone, and leave it so."""
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        return
    original = getattr(fn, "__rlbench_wrapped__", None)
    if original is None:
        replace_attr(h.restore, module, name, labelled(h, fn, label, layer))
    elif not any(owner is module and attr == name for owner, attr, *_ in h.restore):
        h.restore.append((module, name, original, True))


# --- TorchRL ------------------------------------------------------------------------------------------------------
def _torchrl_batch(env: Any) -> int:
    n = 1
    for d in tuple(getattr(env, "batch_size", ()) or ()):
        n *= int(d)
    return n


def _torchrl_envs(h: Any, module: Any) -> None:
    for cls in all_subclasses(module.EnvBase):  # TransformedEnv, GymEnv, ... override step_and_maybe_reset / reset
        _env(h, cls, _torchrl_batch)


def _torchrl_collectors(h: Any, module: Any) -> None:
    for cls in all_subclasses(module.BaseCollector):
        fn = vars(cls).get("iterator")
        if fn is not None and callable(fn) and not hasattr(fn, "__rlbench_wrapped__"):
            replace_attr(h.restore, cls, "iterator", label_generator(h, fn, "collect", "other"))
        _label(h, cls, "rollout", "collect", "other", starts_iteration=True)


def _torchrl_values(h: Any, module: Any) -> None:
    for cls in all_subclasses(module.ValueEstimatorBase):
        _label(h, cls, "forward", "advantage", "advantage")


def _torchrl_buffers(h: Any, module: Any) -> None:
    for cls in all_subclasses(module.ReplayBuffer):
        for method in ("extend", "add", "sample"):
            _label(h, cls, method, f"replay/{method}", "replay")


def _torchrl_updaters(h: Any, module: Any) -> None:
    for cls in all_subclasses(module.TargetNetUpdater):  # SoftUpdate, HardUpdate
        _label(h, cls, "step", TARGET_UPDATE, "update")


def _torchrl_losses(h: Any, module: Any) -> None:
    for cls in all_subclasses(module.LossModule):
        h.a.forward_names[cls] = "train/loss"


PATCHES: dict[str, tuple[str, Patcher]] = {
    # module executed -> (attribute it must have, patcher)
    "stable_baselines3.common.vec_env.base_vec_env": ("VecEnv", _sb3_vec_env),
    "stable_baselines3.common.buffers": ("RolloutBuffer", _sb3_buffers),
    "stable_baselines3.common.policies": ("BasePolicy", _sb3_policies),
    "stable_baselines3.common.utils": ("polyak_update", _sb3_utils),
    "stable_baselines3.common.base_class": ("BaseAlgorithm", _sb3_algorithms),
    "stable_baselines3.common.on_policy_algorithm": ("OnPolicyAlgorithm", _sb3_algorithm_module),
    "stable_baselines3.common.off_policy_algorithm": ("OffPolicyAlgorithm", _sb3_algorithm_module),
    "stable_baselines3.ppo.ppo": ("PPO", _sb3_algorithm_module),
    "stable_baselines3.a2c.a2c": ("A2C", _sb3_algorithm_module),
    "stable_baselines3.sac.sac": ("SAC", _sb3_algorithm_module),
    "stable_baselines3.td3.td3": ("TD3", _sb3_algorithm_module),
    "stable_baselines3.dqn.dqn": ("DQN", _sb3_algorithm_module),
    "stable_baselines3.ddpg.ddpg": ("DDPG", _sb3_algorithm_module),
    "torchrl.envs.common": ("EnvBase", _torchrl_envs),
    "torchrl.envs": ("EnvBase", _torchrl_envs),
    "torchrl.collectors._base": ("BaseCollector", _torchrl_collectors),
    "torchrl.collectors": ("BaseCollector", _torchrl_collectors),
    "torchrl.objectives.value.advantages": ("ValueEstimatorBase", _torchrl_values),
    "torchrl.data.replay_buffers.replay_buffers": ("ReplayBuffer", _torchrl_buffers),
    "torchrl.objectives.common": ("LossModule", _torchrl_losses),
    "torchrl.objectives.utils": ("TargetNetUpdater", _torchrl_updaters),
    "torchrl.objectives": ("LossModule", _torchrl_losses),
}


# --- replay buffers by shape --------------------------------------------------------------------------------------
REPLAY_NAME = re.compile(r"replay|buffer|memory", re.IGNORECASE)
REPLAY_WRITES = ("add", "push", "store", "extend", "insert")


def replay_methods(cls: type) -> list[str]:
    """The methods of ``cls`` to label, if it is a replay buffer by shape: a class named like one (``replay``,
    ``buffer``, ``memory``) with a ``sample`` method and a method that writes (``add``, ``push``, ``store``,
    ``extend``, ``insert``). SB3's ``ReplayBuffer`` and every copy of it (CleanRL's ``cleanrl_utils.buffers``, a
    script's own), TorchRL's, a hand-written ``ReplayMemory``. A rollout buffer (``add`` and ``get``, no ``sample``)
    is not one."""
    name = cls.__name__
    if not REPLAY_NAME.search(name) or "rollout" in name.lower() or not callable(getattr(cls, "sample", None)):
        return []
    writes = [m for m in REPLAY_WRITES if callable(getattr(cls, m, None))]
    return [*writes, "sample"] if writes else []


def label_replay(h: Any, cls: type) -> None:
    """Label a replay buffer's methods ``replay/<method>`` (``replay/add``, ``replay/sample``; inherited ones too)."""
    for method in replay_methods(cls):
        fn = getattr(cls, method)
        if hasattr(fn, "__rlbench_wrapped__") or isinstance(vars(cls).get(method), (staticmethod, classmethod)):
            continue
        replace_attr(h.restore, cls, method, labelled(h, fn, f"replay/{method}", "replay"))


def _install_class_watch(h: Any) -> None:
    """Watch every class the script defines (``builtins.__build_class__``) for a replay buffer by shape."""
    import builtins

    build = builtins.__build_class__

    @wraps(build)
    def build_class(func: Any, name: str, *bases: Any, **kwargs: Any) -> Any:
        cls = build(func, name, *bases, **kwargs)
        if isinstance(cls, type) and REPLAY_NAME.search(name):
            try:
                label_replay(h, cls)
            except Exception:
                pass
        return cls

    build_class.__rlbench_wrapped__ = build  # type: ignore[attr-defined]
    replace_attr(h.restore, builtins, "__build_class__", build_class)


def install_labels(h: Any) -> PostImport:
    """Label the libraries already imported, and the others when they are; watch new classes for replay buffers."""
    _install_class_watch(h)
    return PostImport(h, PATCHES, "no labels for").watch()
