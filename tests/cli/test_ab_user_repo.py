"""`rlbench ab` in a user's own repository: the installed rlbench profiles each revision's script and gates it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli.cli_helpers import run_cli_together

SCRIPT = """
import argparse
import gymnasium as gym
import torch

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()
torch.manual_seed(args.seed)
envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
net = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
obs, _ = envs.reset(seed=args.seed)
for it in range(4):
    for t in range(8):
        with torch.no_grad():
            logits = net(torch.as_tensor(obs))
        CHECK
        obs, *_ = envs.step(logits.argmax(-1).numpy())
    loss = net(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _commit(repo: Path, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", message], cwd=repo, check=True)


@pytest.mark.slow
def test_ab_gates_an_extra_host_sync_in_a_users_script(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "train.py").write_text(SCRIPT.replace("CHECK", "pass"), encoding="utf-8")
    _commit(tmp_path, "train")
    (tmp_path / "train.py").write_text(SCRIPT.replace("CHECK", "assert float(logits.abs().max()) < 1e6"), encoding="utf-8")
    _commit(tmp_path, "check every step")
    gate = ["--rounds", "1", "--fail", "syncs/iteration:0%", "--json", "--"]
    profile = ["profile", "--count-ops", "--seed-arg", "--seed {seed}", "--", "python", "train.py"]
    # both comparisons at once (each in worktrees of its own): a counter is exact, whatever else the machine runs
    slow, same = run_cli_together(
        [["ab", "HEAD~1", "HEAD", *gate, *profile], ["ab", "HEAD", "HEAD", *gate, *profile]], cwd=tmp_path, timeout=300
    )
    assert slow.returncode == 1, slow.stderr[-2000:]
    assert '"failed": true' in slow.stdout and "syncs/iteration" in slow.stdout
    assert same.returncode == 0, same.stderr[-2000:]
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert worktrees.stdout.count("\n") == 1
