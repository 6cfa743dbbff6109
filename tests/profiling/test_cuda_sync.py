"""`rlbench profile --sync` on a GPU: queued kernels are booked to the phase that queued them.

A CUDA call returns before its kernels run, so without a synchronization at every phase boundary a GPU's work
lands wherever the host next waits for it (here the `.cpu()` of the next action). The script below queues a
heavy training step (three 4096-wide layers, forward and backward) and then acts on a small policy. With `--sync`
the training phases must hold most of the time and the transfer almost none; the second test profiles the same
script without `--sync` and checks that the time does move to the waiting transfer, so the first test is known to
fail if the boundary synchronization is ever removed.

Both need a CUDA GPU: they are skipped elsewhere, and `suites/scripts/device_check.sh` runs them on a lent GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.results.store import read_records
from tests.cli.cli_helpers import run_cli

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="cuda: not available on this machine"),
]

SCRIPT = """
import gymnasium as gym
import torch

dev = torch.device("cuda")
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
policy = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)).to(dev)
layers = []
for _ in range(3):
    layers += [torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
learner = torch.nn.Sequential(*layers).to(dev)
opt = torch.optim.Adam(learner.parameters(), lr=1e-5)
batch = torch.randn(4096, 4096, device=dev)
obs, _ = envs.reset(seed=0)
for it in range(12):
    for t in range(8):
        with torch.no_grad():
            action = policy(torch.as_tensor(obs, device=dev)).argmax(-1)
        obs, *_ = envs.step(action.cpu().numpy())
    loss = learner(batch).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("done")
"""

TRAIN = ("time/train/forward", "time/train/backward", "time/train/optimizer")


def _shares(tmp_path: Path, sync: bool) -> dict[str, float]:
    """Profile the script and return each leaf phase's share of the steady state's attributed time."""
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    args = ["profile", "--quiet", "--store", "st", *(["--sync"] if sync else []), "--", "python", "train.py"]
    proc = run_cli(args, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    totals: dict[str, float] = {}
    for r in read_records(tmp_path / "st"):
        if r.metric.startswith("time/") and r.metric != "time/warmup" and r.unit == "s":
            totals[r.metric] = totals.get(r.metric, 0.0) + sum(r.samples)
    leaves = {m: v for m, v in totals.items() if not any(o.startswith(m + "/") for o in totals)}
    whole = sum(leaves.values())
    assert whole > 0, totals
    return {m: v / whole for m, v in leaves.items()}


def test_sync_books_queued_gpu_work_to_the_training_phases(tmp_path: Path) -> None:
    shares = _shares(tmp_path, sync=True)
    train = sum(shares.get(m, 0.0) for m in TRAIN)
    assert train >= 0.6, shares
    assert shares.get("time/transfer", 0.0) <= 0.15, shares


def test_without_sync_the_gpu_work_lands_where_the_host_waits(tmp_path: Path) -> None:
    """The control: the same script unsynchronized books the training step's kernels to the next `.cpu()`."""
    shares = _shares(tmp_path, sync=False)
    waiting = shares.get("time/transfer", 0.0) + shares.get("time/inference", 0.0)
    assert waiting >= 0.4, shares
    assert sum(shares.get(m, 0.0) for m in TRAIN) <= 0.5, shares
