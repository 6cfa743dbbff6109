"""Users' own implementations in the micro-benchmarks: import, check against the reference, then time.

Contract per group (``rlbench run GROUP --impl package.module:function``):

* ``gae``: ``f(rewards, values, dones, last_value, gamma, lam) -> advantages``; NumPy float32 arrays,
  ``rewards``, ``values`` and ``dones`` shaped ``(T, N)``, ``last_value`` shaped ``(N,)``, ``dones[t, i]``
  true when env ``i``'s episode ended at step ``t`` (no bootstrap past it). It must match
  :func:`rlbench.components.returns.gae.gae_reference` within 1e-4 on a random rollout with episode ends.
* ``buffers``: a class ``C(capacity, obs_shape, action_shape)`` (a FIFO replay buffer) with ``add(batch)``
  and ``sample(batch_size)``. ``batch`` is a dict of NumPy arrays with N rows: ``obs`` and ``next_obs``
  float32 ``(N, *obs_shape)``, ``action`` float32 ``(N, *action_shape)``, ``reward`` float32 ``(N,)``,
  ``done`` bool ``(N,)``. ``sample`` returns a mapping with (at least) those five fields, ``batch_size``
  rows each, as arrays or tensors, drawn uniformly with replacement from the newest ``capacity`` rows
  added. Checked (see :mod:`rlbench.suites.micro.user_checks`): every sampled row is a stored transition
  (its fields belong together), after overflow only the newest ``capacity`` are sampled, and the counts
  of 25,600 draws from 200 rows pass a chi-square uniformity test (p > 1e-4).
* ``envs``: a factory ``f(env_id, num_envs)`` (a gymnasium ``VectorEnv`` class works) returning a
  gymnasium vector env for ``CartPole-v1`` and ``Pendulum-v1`` (raise ``ValueError`` or
  ``NotImplementedError`` for an id it does not provide: that env id is then skipped). Checked against
  gymnasium's own vector env: ``reset(seed=0)`` returns ``(obs, info)`` equal to the reference's within
  1e-5 (sub-env ``i`` seeded with ``seed + i``, as gymnasium does); ``step(actions)`` returns
  ``(obs, reward, terminated, truncated, info)`` with the reference's shapes, and the same values within
  1e-4 for every step until the first episode ends (after that, autoreset conventions may differ); then
  50 more steps must keep the shapes.

An implementation that cannot be imported, or that fails its check, is rejected before anything is
timed, with a one-line error naming what failed (for GAE the largest difference). The import and the check run
in a child process under ``--timeout``: user code that hangs, exits or crashes the interpreter is reported as
such, and cannot take rlbench down. Modules in the working directory are importable, as under pytest.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from rlbench.core.errors import UsageError

SUPPORTED = ("gae", "buffers", "envs")


def load_callable(spec: str) -> Callable[..., Any]:
    """Import ``package.module:function``.

    Raises:
        UsageError: On a malformed path, a failed import or a missing attribute.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--impl {spec!r}: expected package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UsageError(f"--impl {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"--impl {spec!r}: {module_name!r} has no callable {attr!r}")
    return fn


def check_gae(spec: str, fn: Callable[..., Any]) -> None:
    """Compare ``fn`` with the reference GAE on a random rollout; raise naming the largest difference."""
    from rlbench.components.returns.gae import gae_reference

    rng = np.random.default_rng(0)
    T, N = 64, 5
    rewards = rng.standard_normal((T, N)).astype(np.float32)
    values = rng.standard_normal((T, N)).astype(np.float32)
    dones = rng.random((T, N)) < 0.1
    last = rng.standard_normal(N).astype(np.float32)
    want = gae_reference(rewards, values, dones, last, 0.99, 0.95)
    try:
        got = np.asarray(fn(rewards.copy(), values.copy(), dones.copy(), last.copy(), 0.99, 0.95))
    except Exception as exc:
        raise UsageError(f"--impl {spec}: raised {type(exc).__name__}: {exc} on a (64, 5) rollout; not timed") from None
    if got.shape != want.shape:
        raise UsageError(f"--impl {spec}: returned shape {got.shape}, expected {want.shape}; not timed")
    diff = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(diff), diff, np.inf))), diff.shape)
    if not np.all(np.isfinite(got)) or diff[worst] > 1e-4:
        raise UsageError(
            f"--impl {spec}: differs from the reference by up to {diff[worst]:.3g} at [t={worst[0]}, i={worst[1]}] "
            f"(got {got[worst]:.6g}, want {want[worst]:.6g}); not timed"
        )


def check_user_impls(specs: tuple[str, ...], groups: list[str], timeout: float = 60.0) -> dict[str, str]:
    """Validate every ``--impl`` for the groups being run, each in a child process; return ``{display name: spec}``.

    Raises:
        UsageError: For a group without a user-implementation contract, or an import / correctness failure, a
            check that does not finish within ``timeout`` seconds, or one that exits or crashes.
    """
    if not specs:
        return {}
    unsupported = [g for g in groups if g not in SUPPORTED]
    if unsupported:
        raise UsageError(f"--impl is supported for {', '.join(SUPPORTED)}; not for {', '.join(unsupported)} (run one group)")
    if len(groups) > 1:
        raise UsageError(f"--impl needs a single group (its contract depends on the group), got {', '.join(groups)}")
    out = {}
    for spec in specs:
        check_in_child(groups[0], spec, timeout)
        out[f"user:{spec.rpartition(':')[2]}"] = spec
    return out


def check_in_child(group: str, spec: str, timeout: float) -> None:
    """Import and check one implementation in a child process (see :func:`main`).

    Raises:
        UsageError: Saying what went wrong: the check's own message, a timeout, an exit code or a crash.
    """
    import os
    import subprocess
    import sys

    from rlbench.core.children import child_pythonpath, run_child

    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    cmd = [sys.executable, "-m", "rlbench.suites.micro.user_impls", group, spec]
    try:
        proc = run_child(cmd, env=env, timeout=timeout, grace_s=2.0)
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"--impl {spec}: its import and correctness check did not finish within {timeout:g} s (--timeout); not timed"
        ) from None
    if proc.returncode == 0:
        return
    lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
    if proc.returncode == 2 and lines and lines[-1].startswith("--impl "):
        raise UsageError(lines[-1])
    how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with code {proc.returncode}"
    last = f" ({lines[-1][:200]})" if lines else ""
    raise UsageError(f"--impl {spec}: {how} during its import or correctness check{last}; not timed")


def main(argv: list[str]) -> int:
    """Child side of :func:`check_in_child`: ``GROUP SPEC``; exit 0 when the implementation passes its check."""
    import sys

    from rlbench.suites.micro.user_checks import check_buffer, check_env

    group, spec = argv
    check = {"gae": check_gae, "buffers": check_buffer, "envs": check_env}[group]
    try:
        check(spec, load_callable(spec))
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


def user_cases(env_value: str | None) -> dict[str, Callable[..., Any]]:
    """In the benchmark subprocess: the checked user implementations passed through the environment."""
    import json

    if not env_value:
        return {}
    return {name: load_callable(spec) for name, spec in json.loads(env_value).items()}


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
