"""The roofline probes: FLOPs and ops counted per phase, rates measured, bounds named."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlbench.instrument.roofline import OpRecorder, dispatch_us, matmul_gflops, memory_gbps, memory_seconds
from rlbench.report.roofline import spread_line, verdict


def test_the_recorder_counts_matmul_flops_shapes_and_ops_per_phase():
    lin = torch.nn.Linear(8, 16)
    x = torch.randn(32, 8, requires_grad=True)
    rec = OpRecorder()
    with rec:
        with rec.phase("forward"):
            y = lin(x)  # addmm: 2 * 32 * 8 * 16 FLOPs
        with rec.phase("backward"):
            y.sum().backward()  # grad of x (32x16 @ 16x8) and of the weight (16x32 @ 32x8)
        torch.mm(torch.ones(2, 3), torch.ones(3, 4))  # outside any named phase
        with rec.phase("bf16"):
            torch.mm(torch.ones(2, 3, dtype=torch.bfloat16), torch.ones(3, 4, dtype=torch.bfloat16))
        bias, lhs, rhs, dst = torch.ones(2, 1, 4), torch.ones(2, 5, 3), torch.ones(2, 3, 4), torch.empty(2, 5, 4)
        with rec.phase("out"):  # products written into a given tensor are the .out overloads
            torch.baddbmm(bias, lhs, rhs, out=dst)
    fwd, bwd = rec.phases["forward"], rec.phases["backward"]
    assert fwd.flops == 2 * 32 * 8 * 16 and fwd.matmuls == {("addmm", (0, 32, 8, 16), "fp32"): 1}
    assert bwd.flops == 2 * (32 * 16 * 8 + 16 * 32 * 8) and sum(bwd.matmuls.values()) == 2
    assert rec.phases["other"].flops == 2 * 2 * 3 * 4 and fwd.ops >= 1 and bwd.ops > 2
    assert rec.phases["bf16"].matmuls == {("mm", (0, 2, 3, 4), "bf16"): 1}  # priced at the bf16 rate
    out = rec.phases["out"]
    assert out.matmuls == {("baddbmm", (2, 5, 3, 4), "fp32"): 1} and out.flops == 2 * 2 * 5 * 3 * 4 and out.ops == 1
    assert out.bytes == (2 * 4 + 2 * 5 * 3 + 2 * 3 * 4 + 2 * 5 * 4) * 4  # the out= tensor counted once
    assert out.cached_bytes == out.bytes  # small tensors: priced at the cache bandwidth
    assert fwd.bytes >= (32 * 8 + 16 * 8 + 16 + 32 * 16) * 4  # input, weight, bias, output


def test_large_ops_are_priced_at_the_dram_rate_and_small_ones_at_the_cache_rate():
    big = torch.ones(2**20)  # 4 MiB: an add reads two and writes one, 12 MiB > CACHED_BYTES
    small = torch.ones(1024)
    rec = OpRecorder()
    with rec:
        torch.add(big, big)
        torch.add(small, small)
    ops = rec.phases["other"]
    assert ops.bytes == 3 * 4 * (2**20 + 1024) and ops.cached_bytes == 3 * 4 * 1024
    assert memory_seconds(ops, dram_gbps=1.0, cache_gbps=2.0) == pytest.approx(12 * 2**20 / 1e9 + 12 * 1024 / 2e9)


def test_the_machine_probes_return_finite_positive_rates():
    assert matmul_gflops(64, 64, 64, rounds=3) > 0
    assert matmul_gflops(8, 16, 8, batch=2, rounds=3) > 0
    assert memory_gbps(8, rounds=2) > 0
    assert 0 < dispatch_us(rounds=3) < 1_000


def test_the_largest_lower_bound_names_the_phase():
    assert verdict(1.0, achievable_s=0.4, dispatch_s=0.1, memory_s=0.2) == "compute-bound"
    assert verdict(1.0, achievable_s=0.0, dispatch_s=0.3, memory_s=0.2) == "dispatch-bound"
    assert verdict(1.0, achievable_s=0.1, dispatch_s=0.0, memory_s=0.5) == "memory-bound"
    assert verdict(1.0, achievable_s=0.01, dispatch_s=0.02, memory_s=0.0).startswith("none")


def _update_records(medians_ms: list[float]) -> list[SimpleNamespace]:
    """Stand-ins for the ``roofline/update_s`` records of one run: five equal samples per repeat."""
    return [SimpleNamespace(metric="roofline/update_s", repeat=i, samples=[m / 1e3] * 5) for i, m in enumerate(medians_ms)]


def test_the_spread_line_gives_each_repeat_and_flags_an_unsteady_machine():
    steady = spread_line(_update_records([5.0, 5.2, 5.1]))
    assert "median 5.000, 5.200, 5.100 ms" in steady and "15 timed updates" in steady
    assert "Unsteady" not in steady
    noisy = spread_line(_update_records([5.5, 8.9, 6.3]))
    assert "**Unsteady machine:**" in noisy and "differ by 62%" in noisy
    assert spread_line([]) == ""
