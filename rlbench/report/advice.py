"""Bottlenecks and what to try, from any run's records: one finding per layer that takes a measured share.

Each finding quotes the figure that triggered it and is ranked by its Amdahl bound. Advice is generic first (what
the layer's cost is made of, which rlbench micro-benchmark measures the alternatives on this machine); a command-
line switch is named only when the run's own parameters contain that option (:func:`flag_tip`), so a report about
code that is not rlbench's never cites rlbench-internal flags. ``tests/report/test_advice.py`` checks that every
switch named here exists on the benchmark it is suggested for.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlbench.analysis.stats import amdahl_bound
from rlbench.report.data import RunData
from rlbench.report.format import fmt, fmt_s, md_code, md_table, md_text, pct
from rlbench.report.phases import Breakdown, layer_of, per_event_us, steady_steps
from rlbench.results.metrics import LAYERS, TIMER_OVERHEAD_S, TRAIN_S, WARMUP, WARMUP_S, time_metric

MIN_SHARE = {"advantage": 0.02}  # a layer needs this share of steady time to be reported (default 5%)


@dataclass
class Finding:
    """One bottleneck with the measurement behind it and its Amdahl bound."""

    title: str
    share: float
    evidence: str
    action: str
    ranked: bool = True
    """``False``: a one-time cost outside the steady state, listed after the ranked bottlenecks, not against them."""

    @property
    def bound(self) -> float:
        """Speed-up of steady-state training if this part took no time at all."""
        return amdahl_bound(min(max(self.share, 0.0), 1.0))


def flag_tip(
    params: dict[str, Any], name: str, when: Callable[[Any], bool], text: str, measured: dict[str, str] | None = None
) -> list[str]:
    """``[text]`` if the run has option ``name`` and its value satisfies ``when``; else nothing.

    ``text`` names the switch (``--network fused``); it is offered only to runs whose parameters show that the
    switch exists for them. ``measured`` maps option names to what this run measured of that switch (a what-if's
    SPS effect), appended to the tip.
    """
    if name not in params or not when(params[name]):
        return []
    return [f"{text}, {measured[name]}" if measured and name in measured else text]


def _phase_list(d: RunData, phases: list[str]) -> str:
    parts = []
    for p in phases:
        call = per_event_us(d, p)
        parts.append(f"{md_code(p)} {fmt(call, 1)} µs per call" if math.isfinite(call) else f"{md_code(p)}")
    return ", ".join(parts)


def _environment(d: RunData, b: Breakdown, phases: list[str], s: float, measured: dict[str, str]) -> Finding:
    p = d.first.params
    n_envs = p.get("num_envs")
    evidence = f"{pct(b.share(s))} of steady time: {_phase_list(d, phases)}"
    if n_envs and len(phases) == 1 and math.isfinite(per_event_us(d, phases[0])):
        call = per_event_us(d, phases[0])
        evidence += f" for {n_envs} envs ({fmt(call / n_envs, 2)} µs per env transition)"
    tips = [
        "more envs per batched step amortize the per-call cost (a hyperparameter change: compare learning too)",
        "a vectorized NumPy or compiled env removes the Python part: "
        + measured.get(
            "layer:environment", "`rlbench run envs` measures env-step implementations on this machine (yours with `--impl`)"
        ),
    ]
    return Finding("Environment stepping", b.share(s), evidence + ".", "; ".join(tips) + ".")


def _inference(d: RunData, b: Breakdown, phases: list[str], s: float, measured: dict[str, str]) -> Finding:
    p = d.first.params
    tips = flag_tip(
        p,
        "inference",
        lambda v: v == "torch",
        "`--inference numpy` evaluates the same weights without torch's per-op dispatch",
        measured,
    )
    tips.append(
        "batching more observations per call (more envs) amortizes the per-call cost; `rlbench run forward` "
        "measures policy-forward variants (fused layers, a NumPy weight snapshot, inference_mode) here"
    )
    evidence = f"{pct(b.share(s))} of steady time in policy inference: {_phase_list(d, phases)}."
    return Finding("Policy inference", b.share(s), evidence, "; ".join(tips) + ".")


def _update(d: RunData, b: Breakdown, phases: list[str], s: float, measured: dict[str, str]) -> Finding:
    p = d.first.params
    worst = max(phases, key=lambda x: b.leaf_s.get(x, 0.0))
    evidence = (
        f"The training update is {pct(b.share(s))} of steady time: {_phase_list(d, phases)}; the largest part "
        f"is {md_code(worst)} ({pct(b.share(b.leaf_s.get(worst, 0.0)))})."
    )
    tips = flag_tip(
        p,
        "network",
        lambda v: v != "fused",
        "`--network fused` runs actor and critic as one batched matmul per layer (half the ops)",
        measured,
    )
    if not tips:
        tips = flag_tip(
            p,
            "gradients",
            lambda v: v == "autograd",
            "`--gradients manual` computes the same gradients without autograd's per-op bookkeeping",
            measured,
        )
    tips += flag_tip(
        p, "optimizer", lambda v: v != "lean", "`--optimizer lean` skips torch.optim's per-step Python overhead", measured
    )
    tips += flag_tip(
        p,
        "critics",
        lambda v: v == "separate",
        "`--critics ensemble` (one batched matmul per layer for every Q network)",
        measured,
    )
    tips += flag_tip(
        p,
        "precision",
        lambda v: v == "fp32",
        "`--precision bf16` (bf16 matmuls: fast on CPUs with AVX512-BF16 or AMX, where `auto` picks it; check learning)",
        measured,
    )
    tips += flag_tip(
        p,
        "threads",
        lambda v: v == 1,
        "`--threads 2` can speed up the larger matmuls when the second core is idle, and slows them badly "
        "when it is not: measure both",
        measured,
    )
    tips += flag_tip(p, "threads", lambda v: v > 1, "`--threads 1` when other work shares the cores (measure both)", measured)
    tips += flag_tip(
        p, "polyak", lambda v: v == "loop", "`--polyak foreach` (one fused lerp over every target tensor)", measured
    )
    tips += _target_update_tip(b, phases, s, p)
    tips.append("fewer, larger batches amortize per-op cost (a hyperparameter change: compare learning too)")
    if "what_if" in p:
        tips.append("measure each switch on this machine with `--what-if FIELD=VALUE`")
    return Finding("Training update", b.share(s), evidence, "; ".join(tips) + ".")


TARGET_UPDATE_TIP_SHARE = 0.01  # a target update this share of steady time or more gets its own tip


def _target_update_tip(b: Breakdown, phases: list[str], s: float, params: dict[str, Any]) -> list[str]:
    """The one-call form of a Polyak update, for a profiled script whose target update takes a visible share.

    rlbench's own off-policy benchmarks name their switch instead (``--polyak``, from :func:`flag_tip`).
    """
    if "polyak" in params:
        return []
    shown = [
        x
        for x in phases
        if x.rsplit("/", 1)[-1] == "target_update" and b.share(b.leaf_s.get(x, 0.0)) >= TARGET_UPDATE_TIP_SHARE
    ]
    if not shown:
        return []
    share = b.share(sum(b.leaf_s.get(x, 0.0) for x in shown))
    return [
        f"the target-network update ({md_code(shown[0])}, {pct(share)}) as one "
        "`torch._foreach_lerp_(target_params, online_params, tau)` under `torch.no_grad()` instead of a loop over "
        "tensors (one call for all of them; a per-tensor `copy_`, `mul_`/`add_` or `lerp_` pays the per-op cost, "
        "on a GPU a kernel launch, for each): `rlbench run target-update` times those forms on this machine"
    ]


def _advantage(d: RunData, b: Breakdown, phases: list[str], s: float, measured: dict[str, str]) -> Finding:
    return Finding(
        "Advantage estimation",
        b.share(s),
        f"{pct(b.share(s))} of steady time: {_phase_list(d, phases)}.",
        "`rlbench run gae` measures GAE implementations (NumPy, torch, numba) at your sizes on this machine; "
        "add yours with `--impl`.",
    )


def _replay(d: RunData, b: Breakdown, phases: list[str], s: float, measured: dict[str, str]) -> Finding:
    return Finding(
        "Replay buffer",
        b.share(s),
        f"{pct(b.share(s))} of steady time: {_phase_list(d, phases)}.",
        "`rlbench run buffers` measures replay add and sample variants (NumPy, torch, numba kernels, "
        "prioritized) here; a larger batch amortizes the gather.",
    )


def _transfer(d: RunData, b: Breakdown, phases: list[str], s: float, measured: dict[str, str]) -> Finding:
    if _cpu_only(d):  # no device to wait for: these are conversions between NumPy arrays and tensors
        return Finding(
            "NumPy ↔ tensor conversion",
            b.share(s),
            f"{pct(b.share(s))} of steady time: {_phase_list(d, phases)}. The run used no GPU (CPU only), so this "
            "is converting between NumPy arrays / Python numbers and tensors, not waiting for a device.",
            "Convert once per batch rather than per element (`torch.from_numpy` shares memory; `torch.tensor` and "
            "`as_tensor` of a list copy), keep observations as one preallocated array, and avoid `.item()` / "
            "`.tolist()` / `.numpy()` inside per-step loops.",
        )
    return Finding(
        "Host-device transfer",
        b.share(s),
        f"{pct(b.share(s))} of steady time: {_phase_list(d, phases)}.",
        "Keep tensors on the device across steps, copy in larger batches (pinned memory, non_blocking), "
        "and avoid `.item()` / `.cpu()` inside loops: each one waits for the device.",
    )


def _other_named(d: RunData, b: Breakdown, phases: list[str], s: float, measured: dict[str, str]) -> Finding:
    return Finding(
        "Other named phases",
        b.share(s),
        f"{pct(b.share(s))} of steady time: {_phase_list(d, phases)}.",
        "Split these phases further (`rlbench.phase(...)` names sub-phases) to see what they hold.",
    )


def _waiting(d: RunData, b: Breakdown, phases: list[str], s: float, measured: dict[str, str]) -> Finding:
    others = sorted({o for p in phases for c in d.meta(time_metric(p), "channels") or [] for o in c.get("other", [])})
    on = f" on {', '.join(md_text(o) for o in others)}" if others else ""
    return Finding(
        "Waiting on another role",
        b.share(s),
        f"{pct(b.share(s))} of steady time blocked{on}: {_phase_list(d, phases)}.",
        "Waiting is not work: removing it takes the other side (the section on roles says how busy each one was) "
        "working faster, more of it in parallel, or more room between them (a larger queue, a prefetched batch).",
    )


def _cpu_only(d: RunData) -> bool:
    """Whether the run used no accelerator: every record's device is the CPU (``rlbench profile`` records the
    device the script used: ``cuda`` once CUDA was initialized)."""
    devices = {str(r.device or "").lower() for r in d.records}
    return bool(devices) and all(dev == "cpu" or dev.startswith("cpu") for dev in devices)


def warmup_finding(d: RunData, b: Breakdown) -> Finding | None:
    """The first iteration when it took more than twice a steady one, never ranked against the steady-state
    bottlenecks. A replay prefill (many more agent steps than a steady iteration) is named as such; when the first
    update inside it also took a large part (a GPU's lazy kernel and library init), both are named with their
    seconds; anything else is one-time costs."""
    warm, per_iter = d.med(WARMUP_S), b.steady_s / b.iterations
    if not (math.isfinite(warm) and per_iter > 0 and warm > 2 * per_iter):
        return None
    train = d.med(TRAIN_S)
    share = (warm - per_iter) / train if train > 0 else 0.0
    warm_steps = d.meta(time_metric(WARMUP), "steps")
    update_s = d.meta(time_metric(WARMUP), "update_s")
    steps = steady_steps(d, b)
    steps_per_iter = steps / b.iterations if steps and math.isfinite(steps) else math.nan
    one_time = "lazy kernel init, allocator growth, compilation"
    if (
        warm_steps is not None
        and update_s is not None
        and math.isfinite(steps_per_iter)
        and warm_steps >= 4 * max(steps_per_iter, 1.0)
    ):
        if update_s <= 0.1 * warm:
            return Finding(
                "Replay prefill (first iteration)",
                share,
                f"replay prefill (learning_starts): {int(warm_steps):,} agent steps of random acting before the first "
                f"update, {fmt_s(warm)} ({fmt(warm_steps / steps_per_iter, 0)}× a steady iteration's "
                f"{fmt(steps_per_iter, 0)} steps; {fmt_s(update_s)} of it in updates).",
                "A one-time cost set by `learning_starts`, left out of the steady state and not ranked against it; "
                "it is acting and env stepping without updates, so its speed is the environment's and inference's.",
                ranked=False,
            )
        steady_update = sum(s for p, s in b.leaf_s.items() if layer_of(d, p) == "update") / b.iterations
        versus = (
            f", {fmt(update_s / steady_update, 0)}× a steady iteration's update ({fmt_s(steady_update)})"
            if steady_update > 0
            else ""
        )
        return Finding(
            "Replay prefill and first update (first iteration)",
            share,
            f"The first iteration took {fmt_s(warm)}: a replay prefill (learning_starts) of {int(warm_steps):,} agent "
            f"steps of random acting before the first update ({fmt_s(warm - update_s)} outside updates), "
            f"then the first update, {fmt_s(update_s)}{versus}.",
            f"Both are one-time costs, left out of the steady state and not ranked against it: the prefill's length "
            f"is set by `learning_starts` and its speed is the environment's and inference's; the first update's "
            f"extra time is one-time set-up ({one_time}), amortized over longer runs.",
            ranked=False,
        )
    return Finding(
        "Warm-up (first iteration)",
        share,
        f"The first iteration took {fmt_s(warm)}, {fmt(warm / per_iter, 1)}× a steady iteration ({fmt_s(per_iter)}).",
        f"One-time costs ({one_time}) — amortized over longer runs; left out of the steady state and not ranked against it.",
        ranked=False,
    )


_BY_LAYER = {
    "environment": _environment,
    "inference": _inference,
    "update": _update,
    "advantage": _advantage,
    "replay": _replay,
    "transfer": _transfer,
    "wait": _waiting,
    "other": _other_named,
}


def findings(
    d: RunData, b: Breakdown, measured: dict[str, str] | None = None, alternatives: dict[str, str] | None = None
) -> list[Finding]:
    """Bottlenecks triggered by measured figures, ranked by their Amdahl bound (largest first).

    Args:
        d: The run.
        b: Its steady-state breakdown.
        measured: What the run measured of a switch, by option name (e.g. a what-if's SPS effect).
        alternatives: By layer, what a micro-benchmark measured of an alternative on the run's machine
            (:func:`rlbench.report.alternatives.measured`).
    """
    measured = {**(measured or {}), **{f"layer:{k}": v for k, v in (alternatives or {}).items()}}
    by_layer: dict[str, list[str]] = {}
    for phase in b.leaf_s:
        by_layer.setdefault(layer_of(d, phase), []).append(phase)
    out = []
    for layer in LAYERS:
        phases = by_layer.get(layer, [])
        s = sum(b.leaf_s[p] for p in phases)
        if phases and b.share(s) >= MIN_SHARE.get(layer, 0.05):
            out.append(_BY_LAYER[layer](d, b, phases, s, measured))
    if b.share(b.other_s) >= 0.05:
        out.append(
            Finding(
                "Python/other (outside the leaf phases)",
                b.share(b.other_s),
                f"{fmt(b.other_s, 3)} s ({pct(b.share(b.other_s))}) of steady time is in no leaf phase: "
                "loop overhead, bookkeeping and whatever the timers do not name.",
                (
                    "See which Python frames hold it with `rlbench profile --pyinstrument`; name parts of it with "
                    "`rlbench.phase(...)`."
                    if d.first.meta.get("kind") == "profile"
                    else "Profile with `--pyinstrument` to see which Python frames hold it."
                ),
            )
        )
    warm = warmup_finding(d, b)
    ov = d.med(TIMER_OVERHEAD_S)
    if math.isfinite(ov) and b.share(ov) > 0.005:
        profiled = d.first.meta.get("kind") == "profile"
        out.append(
            Finding(
                "Profiler overhead" if profiled else "Timer overhead",
                b.share(ov),
                f"The {'profiler hooks' if profiled else 'phase timers'} cost an estimated {fmt_s(ov)} ({pct(b.share(ov))})"
                + (
                    ", from per-event costs timed in a tight loop: a lower bound, since inside a training script "
                    "each hooked call runs several times slower than in that loop. The overhead measured with and "
                    "without the hooks, alternating, is what `python -m rlbench.suites.scripts.accuracy` reports."
                    if profiled
                    else "."
                ),
                "Part of the measured time is the measurement: compare shares, not absolute times, with an unprofiled run."
                if profiled
                else "Time fewer, coarser phases in per-step loops.",
            )
        )
    return sorted(out, key=lambda f: f.bound, reverse=True) + ([warm] if warm is not None else [])


def bottlenecks_section(found: list[Finding]) -> list[str]:
    """Section: the findings as a ranked table."""
    lines = [
        "## Bottlenecks and recommendations",
        "",
        "Ranked by the Amdahl bound: the steady-state speed-up if that part took no time at all "
        "(`1 / (1 - share)`); no optimization of a part can beat its bound.",
        "",
    ]
    ranked = [f for f in found if f.ranked]
    rows = [[str(i), f.title, pct(f.share), f"≤ {fmt(f.bound, 2)}×", f.evidence, f.action] for i, f in enumerate(ranked, 1)]
    rows += [["–", f.title, f"{pct(f.share)} of training", "–", f.evidence, f.action] for f in found if not f.ranked]
    if not ranked:
        lines.append("No layer reaches 5% of steady-state time: nothing stands out.")
        if not rows:
            return lines
        lines.append("")
    return [*lines, md_table(["#", "Bottleneck", "Share", "Bound", "Measured", "What to try"], rows)]
