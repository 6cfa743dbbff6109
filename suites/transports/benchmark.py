"""``rlbench run transports``: many actors, one batched policy: which transport wins, and when batching pays.

Grid: actors x model x transport x simulated env-step time (busy work, holding the GIL in a thread like a
Python env). Per case, actors loop "env step, request" against one :class:`InferenceServer` for
``--duration`` seconds after ``--warmup``; metrics are requests/s, round-trip p50/p99 latency (client-side,
per request), the server's mean batch size and its forward/queue latency. Thread actors for ``direct``,
``lock`` and ``slot``; process actors for ``multiprocess``. Where torchrl is installed, TorchRL's own
``InferenceServer`` (``torchrl-slot``, ``torchrl-threading``) runs every case too, in the same run, with the same
model and actors (``--no-peers`` leaves it out). A stress run (``--stress-requests``, 10^6 by
default) then pushes requests through 64 threads with random delays and injected model faults and
records lost / duplicated / mismatched counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option
from rlbench.results.metrics import Metric
from rlbench.run.registry import BenchmarkSpec, RunContext

MODELS = {
    "tiny": ((64,), "MLP 4-64-2 (tanh), torch"),
    "mlp256": ((256, 256), "MLP 4-256-256-2 (tanh), torch"),
    "tiny-numpy": ((64,), "MLP 4-64-2 (tanh) on a NumPy weight snapshot (labelled variant)"),
}
TRANSPORT_NAMES = ("direct", "lock", "slot", "multiprocess")
PEERS = ("torchrl-slot", "torchrl-threading")  # TorchRL's InferenceServer (suites/transports/loadgen.py)
OBS_DIM = 4


@dataclass
class TransportsConfig:
    """Transport benchmark grid and stress run."""

    actors: tuple[int, ...] = option("numbers of actors (threads, or processes for multiprocess)", default=(4, 16, 64))
    models: tuple[str, ...] = option(f"models: {', '.join(MODELS)}", default=("tiny", "mlp256"))
    transports: tuple[str, ...] = option(f"transports: {', '.join(TRANSPORT_NAMES)}", default=TRANSPORT_NAMES)
    env_us: tuple[int, ...] = option(
        "simulated env step times in µs (busy work before each request; 0 is added by --env-zero)", default=(50, 500)
    )
    env_zero: bool = option("also run with no env work (0 µs)", default=True)
    peers: bool = option(
        "also run every case on TorchRL's InferenceServer (SlotTransport, ThreadingTransport) when torchrl is installed",
        default=True,
    )
    duration: float = option("seconds measured per case (after the warm-up)", default=0.6)
    warmup: float = option("seconds of warm-up per case", default=0.2)
    max_batch_size: int = option("server batch limit", default=256)
    max_wait_us: int = option("server wait for a batch to fill, µs (0: batch what is ready)", default=0)
    threads: int = option("torch intra-op threads", default=1)
    stress_requests: int = option("requests of the stress run (0: skip it)", default=1_000_000)
    stress_threads: int = option("client threads of the stress run", default=64)
    stress_transport: Literal["slot", "lock", "direct"] = option("transport of the stress run", default="slot")
    quick: bool = option("a small grid for a smoke test: 4 and 16 actors, tiny model, 0 µs, 0.3 s per case", default=False)
    seed: int = option("seed of the models' weights and of the stress run", default=0)

    def validate(self) -> None:
        """Check values.

        Raises:
            UsageError: Naming the offending option.
        """
        check_choices(self)  # --stress-transport among its declared values
        for m in self.models:
            if m not in MODELS:
                raise UsageError(f"--models: unknown model {m!r}; choose from {', '.join(MODELS)}")
        for t in self.transports:
            if t not in TRANSPORT_NAMES:
                raise UsageError(f"--transports: unknown transport {t!r}; choose from {', '.join(TRANSPORT_NAMES)}")
        if not self.duration > 0 or self.warmup < 0:
            raise UsageError("--duration must be positive and --warmup 0 or more")
        for name in ("max_batch_size", "threads", "stress_threads"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.stress_requests < 0 or self.max_wait_us < 0 or any(v < 0 for v in self.env_us):
            raise UsageError("--stress-requests, --max-wait-us and --env-us must not be negative")

    def grid(self) -> tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...], float]:
        """(actors, models, env times, duration) after ``--quick``."""
        if self.quick:
            return (4, 16), ("tiny",), (0,), min(self.duration, 0.3)
        env = ((0,) if self.env_zero else ()) + tuple(v for v in self.env_us if not (v == 0 and self.env_zero))
        return self.actors, self.models, env, self.duration


def make_model(name: str, seed: int) -> Any:
    """``model_fn(batch) -> outputs`` for a model name (torch module, or its NumPy snapshot for ``tiny-numpy``)."""
    import numpy as np
    import torch

    hidden = MODELS[name][0]
    gen = torch.Generator().manual_seed(seed)
    layers: list[Any] = []
    sizes = (OBS_DIM, *hidden)
    for a, b in zip(sizes[:-1], sizes[1:]):
        lin = torch.nn.Linear(a, b)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=gen) / a**0.5)
        layers += [lin, torch.nn.Tanh()]
    layers.append(torch.nn.Linear(sizes[-1], 2))
    net = torch.nn.Sequential(*layers).eval()
    if name.endswith("-numpy"):
        ws = [
            (m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in net if isinstance(m, torch.nn.Linear)
        ]

        def numpy_fn(batch: np.ndarray) -> np.ndarray:
            h = batch
            for i, (w, b) in enumerate(ws):
                h = h @ w + b
                if i < len(ws) - 1:
                    np.tanh(h, out=h)
            return h

        return numpy_fn

    def torch_fn(batch: np.ndarray) -> Any:
        return net(torch.from_numpy(batch))

    return torch_fn


def run_transports(config: TransportsConfig, ctx: RunContext) -> list[Metric]:
    """One repeat: the whole grid, then the stress run."""
    import torch
    from rlbench.suites.transports.loadgen import run_load

    from rlbench.components.inference.multiprocess import probe_outputs

    torch.set_num_threads(config.threads)
    actors, models, env_times, duration = config.grid()
    metrics: list[Metric] = []
    transports = list(config.transports)
    peer_version = _torchrl_version() if config.peers else None
    if peer_version is not None:
        transports += PEERS
    for model in models:
        model_fn = make_model(model, config.seed)
        with torch.inference_mode():
            outputs = probe_outputs(model_fn, (OBS_DIM,))
        for env_us in env_times:
            for n in actors:
                for tr in transports:
                    r = run_load(
                        model_fn,
                        tr,
                        n,
                        (OBS_DIM,),
                        env_us=env_us,
                        duration_s=duration,
                        warmup_s=config.warmup,
                        max_batch_size=config.max_batch_size,
                        max_wait_s=config.max_wait_us / 1e6,
                        outputs=outputs,
                    )
                    params = {"transport": tr, "actors": n, "model": model, "env_us": env_us, "case": "load"}
                    s = r.server
                    meta = {
                        "requests": r.requests,
                        "model_desc": MODELS[model][1],
                        "actor_kind": "process" if tr == "multiprocess" else "thread",
                    }
                    if tr in PEERS:
                        meta["peer"] = {"torchrl": peer_version}
                    metrics += [
                        Metric("requests_per_s", "req/s", "higher", [r.requests_per_s], meta=meta, params=params),
                        Metric("latency/p50_ms", "ms", "lower", [r.pct(50)], params=params),
                        Metric("latency/p99_ms", "ms", "lower", [r.pct(99)], params=params),
                        Metric("batch/mean_size", "requests", "none", [s["mean_batch_size"]], params=params),
                        Metric("server/forward_p50_ms", "ms", "lower", [s["forward_p50_ms"]], params=params),
                        Metric("server/queue_p99_ms", "ms", "lower", [s["queue_p99_ms"]], params=params),
                    ]
    if config.stress_requests > 0:
        metrics += stress_metrics(config)
    return metrics


def _torchrl_version() -> str | None:
    """TorchRL's version where it (and its InferenceServer) is installed, else ``None``."""
    import importlib.util
    from importlib.metadata import version

    if importlib.util.find_spec("torchrl") is None:
        return None
    try:
        import torchrl.modules.inference_server  # noqa: F401
    except ImportError:
        return None
    return version("torchrl")


def stress_metrics(config: TransportsConfig) -> list[Metric]:
    """The stress run's counts as metrics (case ``stress``)."""
    from rlbench.suites.transports.stress import run_stress, stress_metrics_dict

    r = run_stress(
        config.stress_transport,
        config.stress_threads,
        config.stress_requests,
        seed=config.seed,
        timeout_s=max(120.0, config.stress_requests / 2_000),
    )
    d = stress_metrics_dict(r)
    params = {"transport": config.stress_transport, "actors": config.stress_threads, "case": "stress"}
    units = {
        "wall_s": ("s", "lower"),
        "requests_per_s": ("req/s", "higher"),
        "faults": ("count", "none"),
        "requests": ("count", "none"),
        "answered": ("count", "none"),
    }
    return [Metric(f"stress/{k}", *units.get(k, ("count", "lower")), [float(v)], params=params) for k, v in d.items()]


BENCHMARKS = [
    BenchmarkSpec(
        name="transports",
        summary="inference server: req/s and p50/p99 of direct/lock/slot/multiprocess transports x actors x model x env time",
        config_factory=TransportsConfig,
        run=run_transports,
        version=1,
        report="transports",
    )
]
