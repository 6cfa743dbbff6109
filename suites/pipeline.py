"""``grpo-pipeline``: the reference material's generator / scorer / learner pipeline as an instrumented benchmark.

Generators sample G actions per state of a contextual bandit with their copy of the policy, a scorer rewards them
(the task knows the best action), and a learner trains group-relative PPO with a KL penalty to a frozen reference
on a replay that favours newer versions, pushing its weights back to the generators after every update. The engine
(``--engine local|ray|monarch``) decides where the roles run and ``--weight-sync`` how weights travel.

Per repeat it records throughput (slices generated, learner updates and samples per second), each stage's capacity
(what it processed per busy second) and the stage that bounds the pipeline, weight-sync latency and transfer time
(every sync a sample, so p50/p99 come from the records), policy lag, queue depth over time, each actor's busy /
wait / sync / idle split and its spans (the timeline), and the greedy reward before and after training.
"""

from __future__ import annotations

from rlbench.core.variants import variant_configs
from rlbench.engines.base import PipelineConfig, PipelineRun
from rlbench.results.metrics import EVAL_RETURN, VARIANT, Metric
from rlbench.run.registry import BenchmarkSpec, RunContext

SPANS_KEPT = 4000  # per actor, for the timeline figure


WORK = {"generators": "busy/generate", "scorer": "busy/score", "learner": "busy/update"}
TRANSPORT_BOUND = 0.5  # below this share of the slowest stage's capacity, the stages mostly wait on the transport


def stage_capacity(out: PipelineRun) -> dict[str, float]:
    """Samples per second of each stage's own work: what it could sustain if it never waited (generators summed)."""
    busy: dict[str, float] = {"generators": 0.0, "scorer": 0.0, "learner": 0.0}
    for t in out.timelines:
        stage = "generators" if t.actor.startswith("generator") else t.actor
        busy[stage] = busy.get(stage, 0.0) + t.totals().get(WORK.get(stage, ""), 0.0)
    per_slice = float(out.engine.get("samples_per_slice", 0))
    done = {
        "generators": out.slices_generated * per_slice,
        "scorer": out.slices_scored * per_slice,
        "learner": float(out.samples),
    }
    return {stage: done[stage] / busy[stage] if busy.get(stage) else float("nan") for stage in done}


def pipeline_metrics(out: PipelineRun) -> list[Metric]:
    """One run's measurements as metrics (one record each)."""
    wall = max(out.ended - out.started, 1e-9)
    capacity = stage_capacity(out)
    finite = {k: v for k, v in capacity.items() if v == v}
    bottleneck = min(finite, key=lambda k: finite[k]) if finite else ""
    if finite and out.samples / wall < TRANSPORT_BOUND * min(finite.values()):
        bottleneck = "transport"  # every stage could go faster: they wait on the queues and calls between them
    strategy = {"strategy": out.engine.get("weight_sync"), "engine": out.engine.get("engine"), "bytes": out.weight_bytes}
    m = [
        Metric("pipeline/samples_per_s", "samples/s", "higher", [out.samples / wall], meta={"bottleneck": bottleneck}),
        Metric("pipeline/updates_per_s", "updates/s", "higher", [out.updates / wall]),
        Metric("pipeline/trajectories_per_s", "slices/s", "higher", [out.slices_generated / wall]),
        Metric("pipeline/wall_s", "s", "lower", [wall], meta={"startup_s": out.startup_s, "nodes": out.nodes}),
        Metric("pipeline/startup_s", "s", "lower", [out.startup_s]),
        Metric("pipeline/weight_sync_s", "s", "lower", [s.latency_s for s in out.syncs], meta=strategy),
        Metric("pipeline/weight_transfer_s", "s", "lower", list(out.transfer_s), meta=strategy),
        Metric("pipeline/policy_lag", "versions", "lower", [float(v) for v in out.lags]),
        Metric(
            "pipeline/queue_depth",
            "slices",
            "none",
            [float(q) for _, q, _ in out.queue_depth],
            x=[t - out.started for t, _, _ in out.queue_depth],
            meta={"scored": [float(s) for _, _, s in out.queue_depth]},
        ),
        Metric("pipeline/greedy_reward", "reward", "higher", [out.greedy_reward[1]], meta={"start": out.greedy_reward[0]}),
        Metric(
            EVAL_RETURN,
            "reward",
            "higher",
            [out.greedy_reward[1]],
            meta={"history": [[u, r] for u, r in out.reward_history], "what": "greedy reward on fresh states"},
        ),
    ]
    for stage, value in capacity.items():
        m.append(Metric(f"pipeline/capacity/{stage}", "samples/s", "higher", [value]))
    for t in out.timelines:
        split = t.split()
        spans = [[p, a - out.started, b - out.started] for p, a, b in t.spans[:SPANS_KEPT]]
        meta = {"node": out.nodes.get(t.actor, ""), "spans": spans, "spans_dropped": max(len(t.spans) - SPANS_KEPT, 0)}
        for kind, seconds in split.items():
            m.append(Metric(f"actor/{t.actor}/{kind}_s", "s", "none", [seconds], meta=meta if kind == "busy" else {}))
    return m


def run_pipeline(config: PipelineConfig, ctx: RunContext) -> list[Metric]:
    """One repeat: the baseline and every what-if variant, interleaved (order reversed on odd seeds)."""
    from rlbench.engines import get_engine
    from rlbench.engines.base import PipelineError

    variants = variant_configs(config)
    if config.seed % 2 == 1:
        variants = variants[::-1]
    out: list[Metric] = []
    for label, cfg in variants:
        try:
            run = get_engine(cfg.engine)(cfg)
        except PipelineError as exc:
            raise RuntimeError(str(exc)) from exc
        run.engine["samples_per_slice"] = cfg.batch_states * cfg.group_size
        for metric in pipeline_metrics(run):
            metric.params = {**metric.params, VARIANT: label}
            out.append(metric)
    return out


def check_pipeline(config: PipelineConfig) -> None:
    """Reject a setting the pipeline cannot run, and an engine whose library is missing, before anything starts."""
    from rlbench.engines import get_engine

    config.validate()
    for _, cfg in variant_configs(config):
        get_engine(cfg.engine)


BENCHMARKS = [
    BenchmarkSpec(
        name="grpo-pipeline",
        summary="generator / scorer / learner pipeline (group-relative PPO on a contextual bandit): throughput, "
        "stage capacity, weight sync, policy lag, per-actor timeline; --engine local|ray|monarch",
        config_factory=PipelineConfig,
        run=run_pipeline,
        version=1,
        report="pipeline",
        check=check_pipeline,
    ),
]
