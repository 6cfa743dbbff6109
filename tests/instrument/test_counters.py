"""Op counters are exact and identical run to run."""

from __future__ import annotations

import pytest
import torch

from rlbench.algos.ppo.config import PPOConfig
from rlbench.algos.ppo.train import count_iteration_ops
from rlbench.instrument.counters import OpCounter


def test_counts_ops_and_syncs_per_phase() -> None:
    a, b = torch.ones(3), torch.ones(3)
    with OpCounter() as c:
        c.phase = "x"
        d = a + b
        d.mul_(2)
        c.phase = "y"
        float(d.sum())  # sum, then a device-to-host read
    assert c.ops["x"] == 2
    assert c.syncs["y"] == 1 and c.ops["y"] == 2
    assert sum(c.copies.values()) == 0


def test_iteration_counts_identical_across_runs_and_sensitive_to_code() -> None:
    cpu = torch.device("cpu")
    runs = [count_iteration_ops(PPOConfig(seed=s), cpu) for s in (0, 0, 1)]
    assert runs[0] == runs[1] == runs[2]
    assert runs[0]["ops"]["update"] > 0 and runs[0]["ops"]["collect"] == 0  # NumPy inference dispatches no torch op
    autograd = count_iteration_ops(PPOConfig(gradients="autograd"), cpu)
    assert autograd["ops"]["update"] != runs[0]["ops"]["update"]
    torch_inference = count_iteration_ops(PPOConfig(inference="torch"), cpu)
    assert torch_inference["ops"]["collect"] > 128  # at least one op per env step


@pytest.mark.slow
def test_counting_does_not_import_dynamo() -> None:
    """torch._dynamo costs ~2 s to import: counting must not pull it in (it would break the 4 s budget of a run)."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from rlbench.algos.ppo.config import PPOConfig\n"
        "from rlbench.algos.ppo.train import count_iteration_ops\n"
        "count_iteration_ops(PPOConfig(total_steps=1024), torch.device('cpu'))\n"
        "assert 'torch._dynamo' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
