"""AsyncBatchedCollector: N env workers (threads or processes), one batched policy behind an InferenceServer.

Each worker steps its own single env and asks the server for actions (see
:mod:`rlbench.components.collect.workers` for the request row). The server batches whatever requests
are ready, runs the policy once, and a recorder (the server's ``observer``, in the server thread) writes
every transition into preallocated arrays with a few vectorized NumPy assignments per batch, so the
workers do no bookkeeping.

Two ways to collect, both returning only once every worker is parked (the policy may then be changed
safely before the next call):

* :meth:`AsyncBatchedCollector.collect` (off-policy, e.g. SAC): exactly ``num_steps`` transitions as a dict
  of arrays ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``, ``truncated`` (``next_obs`` is the
  true last observation where an episode ended), in completion order;
* :meth:`AsyncBatchedCollector.rollout` (on-policy, e.g. PPO): ``steps`` steps from every worker into a
  :class:`~rlbench.components.collect.rollout.RolloutStorage` laid out ``(T, N)`` as
  :class:`~rlbench.components.collect.rollout.OnPolicyCollector` fills it, truncations bootstrapped the same way
  (``gamma * V(final_obs)`` added to the reward, the step counted as done). The policy must then return
  ``(actions, log_probs, values)`` and ``value_fn`` is required.

Workers are processes for the ``multiprocess`` transport and threads otherwise. Each collect resends the
last observation of the previous one (its earlier reply came from the old policy), so a collect of ``T``
steps per worker makes ``T + 1`` requests per worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from rlbench.components.collect.rollout import RolloutStorage
from rlbench.components.collect.workers import row_width, worker_loop
from rlbench.components.inference.factory import make_transport
from rlbench.components.inference.multiprocess import probe_outputs
from rlbench.components.inference.server import InferenceServer


class AsyncBatchedCollector:
    """Env workers feeding one batched policy through a transport (see the module docstring).

    Args:
        env_id: Gymnasium id; every worker builds ``make_vec_env(env_id, 1)``.
        num_workers: Env workers (threads, or processes with ``transport="multiprocess"``).
        policy_fn: ``policy_fn(obs_batch) -> actions`` or ``(actions, ...)`` on a float32 ``(B, obs_dim)`` batch
            (NumPy in, NumPy or tensors out); for :meth:`rollout`, ``(actions, log_probs, values)``.
        transport: ``slot``, ``lock``, ``direct`` or ``multiprocess``.
        value_fn: ``value_fn(obs_batch) -> values``, to bootstrap truncated episodes in :meth:`rollout`.
        gamma: Discount used for that bootstrap.
        max_batch_size: Most requests per policy call (default: ``num_workers``).
        max_wait_s: Server batching delay (see :class:`InferenceServer`).
        action_low: Lower bounds box actions are clipped to before the env (storage keeps the sample).
        action_high: Upper bounds, likewise.
        context: Multiprocessing start method or context (``multiprocess`` only; default ``fork`` on Linux).
        timeout_s: A collect that makes no progress for this long raises instead of hanging.
    """

    def __init__(
        self,
        env_id: str,
        num_workers: int,
        policy_fn: Callable[[np.ndarray], Any],
        transport: str = "slot",
        value_fn: Callable[[np.ndarray], Any] | None = None,
        gamma: float = 0.99,
        max_batch_size: int | None = None,
        max_wait_s: float = 0.0,
        action_low: np.ndarray | None = None,
        action_high: np.ndarray | None = None,
        context: Any = None,
        timeout_s: float = 60.0,
    ) -> None:
        from rlbench.components.envs import make_vec_env

        if num_workers < 1:
            raise ValueError(f"num_workers must be at least 1, got {num_workers}")
        probe = make_vec_env(env_id, 1)
        self.obs_shape = tuple(probe.obs_shape)
        self.action_spec = probe.action_spec
        probe.close()
        self.env_id, self.num_workers, self.transport_kind = env_id, num_workers, transport
        self.policy_fn, self.value_fn, self.gamma = policy_fn, value_fn, np.float32(gamma)
        self.timeout_s = timeout_s
        self.obs_dim = d = int(np.prod(self.obs_shape))
        self.clip = None
        if self.action_spec.kind == "box" and action_low is not None:
            self.clip = (np.asarray(action_low, dtype=np.float32), np.asarray(action_high, dtype=np.float32))
        lock = threading.Lock() if transport == "direct" else None  # direct: workers call the policy concurrently

        def model_fn(batch: np.ndarray) -> Any:
            obs = np.ascontiguousarray(batch[:, :d])
            if lock is None:
                return policy_fn(obs)
            with lock:  # copies: the policy reuses its output buffers, and the next caller may run before we read
                out = policy_fn(obs)
                return tuple(np.array(x) for x in out) if isinstance(out, tuple) else np.array(out)

        self.processes = transport == "multiprocess"
        import multiprocessing as mp

        self._ctx = (
            (mp.get_context(context or "fork") if isinstance(context, (str, type(None))) else context)
            if self.processes
            else None
        )
        outputs = probe_outputs(model_fn, (row_width(d),)) if self.processes else None
        self.transport = make_transport(transport, num_workers, (row_width(d),), outputs, self._ctx)
        self.server = InferenceServer(model_fn, self.transport, max_batch_size or num_workers, max_wait_s, self._observe)
        self._lock = threading.Lock()
        self._mode = ""
        self._t = np.zeros(num_workers, dtype=np.int64)
        self._workers: list[Any] = []
        self._storage: RolloutStorage | None = None
        self._truncations: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._out: dict[str, np.ndarray] = {}
        self._count = 0
        self._prev_obs = np.zeros((num_workers, d), dtype=np.float32)
        self._prev_action: np.ndarray | None = None
        self._running_return = np.zeros(num_workers)
        self._running_length = np.zeros(num_workers, dtype=np.int64)
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.env_steps = 0

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self, seed: int | None = None) -> AsyncBatchedCollector:
        """Start the workers (worker ``i`` resets its env with ``seed + i``) and the server; returns self."""
        if self._workers:
            raise RuntimeError("collector already started")
        n = self.num_workers
        if self.processes:
            ctx = self._ctx
            from rlbench.components.inference.multiprocess import _shared, _view

            specs = {
                "stop": _shared(ctx, (1,), np.uint8),
                "quota": _shared(ctx, (n,), np.int64),
                "failed": _shared(ctx, (n,), np.uint8),
            }
            self._control = SimpleNamespace(**{k: _view(s) for k, s in specs.items()})
            self._control_specs = specs
            self._gates = [ctx.Semaphore(0) for _ in range(n)]
            self._done = ctx.Semaphore(0)
            make = ctx.Process
            control_arg: Any = _ControlProxy(specs)
        else:
            self._control = SimpleNamespace(stop=[0], quota=np.zeros(n, dtype=np.int64), failed=np.zeros(n, dtype=np.uint8))
            self._gates = [threading.Semaphore(0) for _ in range(n)]
            self._done = threading.Semaphore(0)
            make = threading.Thread
            control_arg = self._control
        clients = [self.transport.client() for _ in range(n)]
        self._workers = [
            make(
                target=worker_loop,
                args=(i, self.env_id, seed, clients[i], self._gates[i], self._done, control_arg, self.clip),
                daemon=True,
                name=f"rlbench-env-{i}",
            )
            for i in range(n)
        ]
        for w in self._workers:  # processes fork before the server thread exists
            w.start()
        self.server.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop workers and server; join every thread and process (terminating stragglers); idempotent."""
        if not self._workers:
            self.server.close()
            return
        self._control.stop[0] = 1
        for g in self._gates:
            g.release()
        self.server.close()
        deadline = time.monotonic() + timeout
        for w in self._workers:
            w.join(max(0.0, deadline - time.monotonic()))
        for w in self._workers:
            if self.processes and w.is_alive():
                w.terminate()
                w.join(1.0)
        alive = [w.name for w in self._workers if w.is_alive()]
        self._workers = []
        if alive:
            raise RuntimeError(f"workers did not stop within {timeout} s: {alive}")

    def __enter__(self) -> AsyncBatchedCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- collection ---------------------------------------------------------------------------------
    def _run(self, quotas: np.ndarray) -> None:
        if not self._workers:
            raise RuntimeError("call start(seed) before collecting")
        self._t[:] = 0
        self._control.quota[:] = quotas
        for g in self._gates:
            g.release()
        for _ in range(self.num_workers):
            waited = 0.0
            while not self._done.acquire(True, 0.1):
                waited += 0.1
                if self.server.error is not None or not self.server.running:
                    raise RuntimeError(f"inference server stopped: {self.server.error!r}")
                if waited > self.timeout_s or any(not w.is_alive() for w in self._workers):
                    raise RuntimeError("an env worker died or stalled during collection")
        if self._control.failed.any():
            raise RuntimeError(f"env worker(s) {np.flatnonzero(self._control.failed).tolist()} failed (traceback on stderr)")

    def collect(self, num_steps: int) -> dict[str, np.ndarray]:
        """Collect exactly ``num_steps`` transitions spread over the workers (off-policy API).

        Returns:
            ``obs`` ``(n, *obs_shape)``, ``action`` ``(n, *action_shape)``, ``reward`` float32 ``(n,)``, ``next_obs``
            (the episode's true last observation where it ended), ``terminated`` and ``truncated`` bool ``(n,)``
            and ``worker`` int64 ``(n,)`` (which worker's env: transitions of one worker are in step order):
            fresh arrays, in completion order.
        """
        n = self.num_workers
        quotas = np.full(n, num_steps // n, dtype=np.int64)
        quotas[: num_steps % n] += 1
        d = self.obs_dim
        self._out = {
            "obs": np.zeros((num_steps, d), dtype=np.float32),
            "reward": np.zeros(num_steps, dtype=np.float32),
            "next_obs": np.zeros((num_steps, d), dtype=np.float32),
            "terminated": np.zeros(num_steps, dtype=bool),
            "truncated": np.zeros(num_steps, dtype=bool),
            "worker": np.zeros(num_steps, dtype=np.int64),
        }
        self._count = 0
        self._mode = "transitions"
        self._run(quotas)
        out = self._out
        if "action" not in out:
            out["action"] = np.zeros((num_steps, 0), dtype=np.float32)
        out["obs"] = out["obs"].reshape(num_steps, *self.obs_shape)
        out["next_obs"] = out["next_obs"].reshape(num_steps, *self.obs_shape)
        self.env_steps += num_steps
        return out

    def rollout(self, steps: int, bootstrap: bool = True) -> RolloutStorage:
        """``steps`` steps from every worker into a ``(T, N)`` :class:`RolloutStorage` (reused by the next call).

        Args:
            steps: Steps per worker (``T``).
            bootstrap: Add ``gamma * V(final_obs)`` at truncations now; False leaves the raw rewards for the
                caller to account first, then call :meth:`bootstrap_truncations`.
        """
        if self.value_fn is None:
            raise ValueError("rollout() needs value_fn to bootstrap truncated episodes")
        st = self._storage
        if st is None or st.obs.shape[0] != steps:
            st = RolloutStorage.allocate(steps, self.num_workers, self.obs_shape, tuple(self.action_spec.shape))
            self._storage = st
        self._truncations = []
        self._mode = "rollout"
        self._run(np.full(self.num_workers, steps, dtype=np.int64))
        self.env_steps += steps * self.num_workers
        if bootstrap:
            self.bootstrap_truncations(st)
        return st

    def bootstrap_truncations(self, st: RolloutStorage) -> None:
        """Add ``gamma * V(final_obs)`` to the rewards of truncated steps of the last :meth:`rollout` (once)."""
        if self._truncations:
            t = np.concatenate([x[0] for x in self._truncations])
            i = np.concatenate([x[1] for x in self._truncations])
            final = np.concatenate([x[2] for x in self._truncations]).reshape(-1, *self.obs_shape)
            st.rewards[t, i] += self.gamma * np.asarray(self.value_fn(final), dtype=np.float32)  # type: ignore[misc]
        self._truncations = []

    # -- recording (server thread) --------------------------------------------------------------------
    def _observe(self, ids: np.ndarray, batch: np.ndarray, outputs: tuple[np.ndarray, ...]) -> None:
        with self._lock:
            if self._mode == "rollout":
                self._record_rollout(ids, batch, outputs)
            else:
                self._record_transitions(ids, batch, outputs)

    def _record_rollout(self, ids: np.ndarray, batch: np.ndarray, outputs: tuple[np.ndarray, ...]) -> None:
        st, d = self._storage, self.obs_dim
        assert st is not None
        t = self._t[ids]
        prev = batch[:, d + 3] > 0
        if prev.any():
            i, tp, row = ids[prev], t[prev] - 1, batch[prev]
            st.rewards[tp, i] = row[:, d]
            term, trunc = row[:, d + 1] > 0, row[:, d + 2] > 0
            st.dones[tp, i] = term | trunc
            boot = trunc & ~term
            if boot.any():
                self._truncations.append((tp[boot], i[boot], row[boot, d + 4 :].copy()))
        steps = st.obs.shape[0]
        cur = t < steps
        actions, logp, values = outputs[0], outputs[1], outputs[2]
        if cur.all():
            st.obs[t, ids] = batch[:, :d].reshape(-1, *self.obs_shape)
            st.actions[t, ids] = actions
            st.logprobs[t, ids] = logp
            st.values[t, ids] = values
        else:
            tc, ic = t[cur], ids[cur]
            st.obs[tc, ic] = batch[cur, :d].reshape(-1, *self.obs_shape)
            st.actions[tc, ic] = actions[cur]
            st.logprobs[tc, ic] = logp[cur]
            st.values[tc, ic] = values[cur]
            last = ~cur
            st.last_obs[ids[last]] = batch[last, :d].reshape(-1, *self.obs_shape)
            st.last_value[ids[last]] = values[last]
        self._t[ids] = t + 1

    def _record_transitions(self, ids: np.ndarray, batch: np.ndarray, outputs: tuple[np.ndarray, ...]) -> None:
        d, out = self.obs_dim, self._out
        actions = outputs[0]
        if self._prev_action is None:
            self._prev_action = np.zeros((self.num_workers, *actions.shape[1:]), dtype=actions.dtype)
        prev = batch[:, d + 3] > 0
        if prev.any():
            if "action" not in out:
                out["action"] = np.zeros((out["reward"].size, *actions.shape[1:]), dtype=actions.dtype)
            i, row = ids[prev], batch[prev]
            pos = np.arange(self._count, self._count + i.size)
            self._count += i.size
            term, trunc = row[:, d + 1] > 0, row[:, d + 2] > 0
            ended = term | trunc
            out["obs"][pos] = self._prev_obs[i]
            out["action"][pos] = self._prev_action[i]
            out["reward"][pos] = row[:, d]
            out["terminated"][pos] = term
            out["truncated"][pos] = trunc
            out["worker"][pos] = i
            out["next_obs"][pos] = np.where(ended[:, None], row[:, d + 4 :], row[:, :d])
            self._running_return[i] += row[:, d]
            self._running_length[i] += 1
            if ended.any():
                e = i[ended]
                self.episode_returns.extend(self._running_return[e].tolist())
                self.episode_lengths.extend(self._running_length[e].tolist())
                self._running_return[e] = 0.0
                self._running_length[e] = 0
        self._prev_obs[ids] = batch[:, :d]
        self._prev_action[ids] = actions


class _ControlProxy:
    """Picklable stop/quota/failed arrays in shared memory for worker processes."""

    def __init__(self, specs: dict[str, Any]) -> None:
        self.specs = specs
        self._build()

    def _build(self) -> None:
        from rlbench.components.inference.multiprocess import _view

        for k, s in self.specs.items():
            setattr(self, k, _view(s))

    def __getstate__(self) -> dict[str, Any]:
        return {"specs": self.specs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.specs = state["specs"]
        self._build()
