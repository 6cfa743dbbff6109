"""``rlbench profile --log-to`` and ``--live``: the profile's figures in the user's own TensorBoard, W&B and MLflow run,
read back with each tracker's own reader; bad input and faults; the live view."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlbench.core.errors import UsageError
from rlbench.results.store import read_records
from tests.cli.cli_helpers import run_cli
from tests.faults.fault_helpers import foreground_signals, one_line_error

SCRIPT = """
import argparse, os, time
import gymnasium as gym
import torch

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=1.5)
p.add_argument("--tb", default=None)
p.add_argument("--tbx", default=None)
p.add_argument("--wandb", default=None)
p.add_argument("--mlflow", default=None)
p.add_argument("--close-at", type=float, default=-1.0)
p.add_argument("--delete-run-at", type=float, default=-1.0)
p.add_argument("--mark", default=None)
args = p.parse_args()
writer = run = None
if args.tb:
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(args.tb)
if args.tbx:
    from tensorboardX import SummaryWriter
    writer = SummaryWriter(args.tbx)
if args.wandb:
    import wandb
    run = wandb.init(project="tests", dir=args.wandb, mode="offline")
if args.mlflow:
    import mlflow
    mlflow.set_tracking_uri(args.mlflow)
    mlflow.set_experiment("tests")
    run = mlflow.start_run()
envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
obs, _ = envs.reset(seed=0)
global_step, t0, closed, deleted = 0, time.perf_counter(), False, False
while time.perf_counter() - t0 < args.seconds:
    for t in range(16):
        with torch.no_grad():
            a = torch.distributions.Categorical(logits=net(torch.as_tensor(obs))).sample()
        obs, *_ = envs.step(a.numpy())
        global_step += 2
    loss = net(torch.randn(64, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if args.mark and not os.path.exists(args.mark) and time.perf_counter() - t0 > 1.0:
        open(args.mark, "w").write(str(os.getpid()))
    elapsed = time.perf_counter() - t0
    if writer is not None and not closed:
        writer.add_scalar("charts/SPS", global_step / elapsed, global_step)
        if 0 <= args.close_at < elapsed:
            writer.close()
            closed = True
    if args.wandb and not closed:
        wandb.log({"charts/SPS": global_step / elapsed}, step=global_step)
        if 0 <= args.close_at < elapsed:
            run.finish()
            closed = True
    if args.mlflow and not deleted:
        mlflow.log_metric("charts/SPS", global_step / elapsed, step=global_step)
        if 0 <= args.delete_run_at < elapsed:
            mlflow.tracking.MlflowClient().delete_run(run.info.run_id)
            deleted = True
if writer is not None and not closed:
    writer.close()
if args.wandb and not closed:
    run.finish()
if args.mlflow and not deleted:
    mlflow.end_run()
print("done", global_step)
"""


def _needs(*packages: str) -> None:
    for p in packages:
        if importlib.util.find_spec(p) is None:
            pytest.skip(f"{p} not installed (pip install 'rlbench[trackers]')")


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a file store unless told (the tests use one)
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


def _profile(
    project: Path, options: list[str], script_args: list[str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    every = ["--log-every", "0.2"] if "--log-to" in options else []
    args = ["profile", "--store", "st", *every, *options, "--", "python", "train.py", *script_args]
    proc = run_cli(args, cwd=project, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard log folder, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _texts(logdir: Path) -> dict[str, list[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    acc.Reload()
    return {tag: [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(tag)] for tag in acc.Tags()["tensors"]}


def _logging_record(project: Path):
    found = [r for r in read_records(project / "st") if r.metric == "profile/logging_s"]
    assert len(found) == 1
    return found[0]


# --- into the script's own run ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tensorboard_series_go_into_the_scripts_own_writer_at_its_steps(project: Path) -> None:
    _needs("tensorboard")
    _profile(project, ["--log-to", "tensorboard"], ["--tb", "runs/mine"])
    logdir = project / "runs" / "mine"
    scalars = _scalars(logdir)
    theirs = {step for step, _ in scalars["charts/SPS"]}
    assert {"rlbench/sps", "rlbench/share/env/step", "rlbench/iter_ms/env/step", "rlbench/cost/logging_pct"} <= set(scalars)
    ours = [step for step, _ in scalars["rlbench/share/env/step"]]
    assert len(ours) >= 3 and set(ours) <= theirs  # beside the script's series, at the script's own steps
    assert ours == sorted(ours)
    middle = ours[len(ours) // 2]  # one point: every phase's share of its interval, adding up to 1
    shares = {tag: v for tag, points in scalars.items() if tag.startswith("rlbench/share/") for s, v in points if s == middle}
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-6) and all(0 <= v <= 1 for v in shares.values())
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1  # the script's own event file, nothing beside it
    assert "rlbench/bottlenecks/text_summary" in _texts(logdir)
    meta = _logging_record(project).meta
    assert meta["points"] >= 3 and meta["runs"][0]["user"] and meta["step"] == "the script's" and not meta["failures"]
    report = next((project / "st").glob("*.md")).read_text(encoding="utf-8")
    assert "Logging while the script ran" in report and "(the script's own run)" in report


@pytest.mark.slow
def test_cleanrl_dqns_own_run_gets_rlbenchs_series_beside_its_sps_at_its_steps(tmp_path: Path) -> None:
    """The repository's CleanRL-style DQN opens its own SummaryWriter (--tensorboard-dir, where CleanRL opens one)."""
    _needs("tensorboard")
    import rlbench.suites.scripts

    script = Path(rlbench.suites.scripts.__file__).parent / "cleanrl_dqn.py"
    args = ["profile", "--quiet", "--store", "st", "--log-to", "tensorboard", "--log-every", "0.3", "--", "python"]
    proc = run_cli([*args, str(script), "--total-timesteps", "1500", "--tensorboard-dir", "runs/dqn"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scalars = _scalars(tmp_path / "runs" / "dqn")
    assert {"charts/SPS", "charts/episodic_return", "losses/td_loss"} <= set(scalars)
    theirs = {s for tag, points in scalars.items() if not tag.startswith("rlbench/") for s, _ in points}
    ours = [s for s, _ in scalars["rlbench/share/env/step"]]
    assert len(ours) >= 2 and set(ours) <= theirs  # at the script's own global_step
    assert {"rlbench/share/train/backward", "rlbench/share/replay/sample", "rlbench/iter_ms/inference"} <= set(scalars)
    # the SummaryWriter's own writer thread is the tracker's machinery, not a role of the job
    assert not [t for t in scalars if t.startswith("rlbench/role/")]
    roles = {r.meta.get("role") for r in read_records(tmp_path / "st") if r.meta.get("role")}
    assert not roles, roles


@pytest.mark.slow
def test_every_role_of_a_many_process_job_gets_its_series_and_its_live_line(tmp_path: Path) -> None:
    """CleanRL-style PPO stepping its envs in AsyncVectorEnv's worker processes: the env workers' figures come from
    their snapshots while they run, into the series and onto the live view."""
    _needs("tensorboard")
    import rlbench.suites.scripts

    script = Path(rlbench.suites.scripts.__file__).parent / "cleanrl_ppo.py"
    args = ["profile", "--store", "st", "--log-to", "tensorboard:tb", "--log-every", "0.5", "--live", "--", "python"]
    proc = run_cli([*args, str(script), "--async-envs", "--total-timesteps", "6144"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scalars = _scalars(tmp_path / "tb")
    assert {"rlbench/role/env-worker/share/env/step", "rlbench/role/env-worker/sps", "rlbench/share/train/backward"} <= set(
        scalars
    )
    assert len(scalars["rlbench/role/env-worker/share/env/step"]) >= 2
    assert "env-worker" in proc.stderr and "top bottleneck:" in proc.stderr  # the live view's last frame


@pytest.mark.slow
def test_sb3_tensorboard_log_gets_rlbenchs_series_beside_its_own(tmp_path: Path) -> None:
    _needs("tensorboard", "stable_baselines3")
    (tmp_path / "sb3_train.py").write_text(
        "from stable_baselines3 import PPO\n"
        "PPO('MlpPolicy', 'CartPole-v1', n_steps=256, batch_size=64, n_epochs=2, seed=0, device='cpu',\n"
        "    tensorboard_log='tb').learn(3072)\n",
        encoding="utf-8",
    )
    args = ["profile", "--quiet", "--store", "st", "--log-to", "tensorboard", "--log-every", "0.2"]
    proc = run_cli([*args, "--", "python", "sb3_train.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (logdir,) = list((tmp_path / "tb").iterdir())  # SB3's own run folder: tb/PPO_1
    scalars = _scalars(logdir)
    assert "time/fps" in scalars and "rollout/ep_rew_mean" in scalars
    theirs = {s for s, _ in scalars["time/fps"]}
    ours = [s for s, _ in scalars["rlbench/sps"]]
    assert len(ours) >= 2 and set(ours) <= theirs  # at SB3's num_timesteps, where it logs time/fps
    assert {"rlbench/share/collect/env/step", "rlbench/share/train/backward"} <= set(scalars)


@pytest.mark.slow
def test_tensorboardx_writer_is_found_too(project: Path) -> None:
    _needs("tensorboard", "tensorboardX")
    _profile(project, ["--log-to", "tensorboard"], ["--tbx", "runs/x"])
    scalars = _scalars(project / "runs" / "x")
    assert "charts/SPS" in scalars and "rlbench/sps" in scalars
    assert {s for s, _ in scalars["rlbench/sps"]} <= {s for s, _ in scalars["charts/SPS"]}


@pytest.mark.slow
def test_without_a_writer_of_its_own_rlbench_opens_one_at_the_target_on_agent_steps(project: Path) -> None:
    _needs("tensorboard")
    _profile(project, ["--log-to", "tensorboard:tb-out"], [])
    scalars = _scalars(project / "tb-out")
    steps = [s for s, _ in scalars["rlbench/sps"]]
    assert len(steps) >= 3 and steps == sorted(steps) and steps[-1] > 0
    meta = _logging_record(project).meta
    assert meta["step"] == "agent steps" and not meta["runs"][0]["user"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["wandb", "mlflow"])
def test_without_a_run_of_its_own_rlbench_opens_one_in_wandb_and_mlflow(project: Path, backend: str, monkeypatch) -> None:
    _needs(backend)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(project / "wb"))
    (project / "wb").mkdir()
    target = "proj" if backend == "wandb" else (project / "mlruns").as_uri()
    _profile(project, ["--log-to", f"{backend}:{target}"], [])
    meta = _logging_record(project).meta
    assert meta["points"] >= 2 and not meta["failures"] and not meta["runs"][0]["user"], meta
    if backend == "wandb":
        rows = _wandb_history(project / "wb")
        # every point rlbench logged is in the run (each carries its own cost; SPS only once steps were taken in
        # its window: on a busy machine the script's first window may have none)
        steps = [r["rlbench/step"] for r in rows if "rlbench/cost/logging_pct" in r]
        assert len(steps) == meta["points"] and steps == sorted(steps)
        assert any("rlbench/sps" in r for r in rows)
        roles = {r.meta.get("role") for r in read_records(project / "st") if r.meta.get("role")}
        assert not roles, roles  # the threads W&B started for rlbench's run are rlbench's, not the job's
    else:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=target)
        (run,) = client.search_runs([client.get_experiment_by_name("rlbench").experiment_id])
        assert run.info.status == "FINISHED" and run.info.run_name.startswith("rlbench-")
        # every point rlbench logged is in the run (each carries its own cost; SPS only once steps were taken in its
        # window: beside a busy CI neighbour the script's first window had none, and one SPS point came back of 2)
        assert len(client.get_metric_history(run.info.run_id, "rlbench/cost/logging_pct")) == meta["points"]
        assert client.get_metric_history(run.info.run_id, "rlbench/sps")


@pytest.mark.slow
def test_a_writer_the_script_closes_early_is_flushed_then_rlbench_goes_on_in_the_same_folder(project: Path) -> None:
    _needs("tensorboard")
    _profile(project, ["--log-to", "tensorboard"], ["--tb", "runs/c", "--close-at", "0.5", "--seconds", "2"])
    logdir = project / "runs" / "c"
    scalars = _scalars(logdir)
    last_theirs = max(s for s, _ in scalars["charts/SPS"])
    ours = [s for s, _ in scalars["rlbench/sps"]]
    assert any(s <= last_theirs for s in ours)  # flushed into the script's writer before it closed
    assert len(list(logdir.glob("events.out.tfevents.*.rlbench"))) == 1  # then rlbench's own file, same folder
    assert len(_texts(logdir)["rlbench/bottlenecks/text_summary"]) >= 1


@pytest.mark.slow
def test_wandb_offline_series_go_into_the_scripts_run(project: Path) -> None:
    _needs("wandb")
    _profile(project, ["--log-to", "wandb"], ["--wandb", "wb"])
    rows = _wandb_history(project / "wb")
    assert any("charts/SPS" in r for r in rows)
    ours = [r for r in rows if "rlbench/sps" in r]
    assert len(ours) >= 2
    theirs = {r["_step"] for r in rows if "charts/SPS" in r}
    assert {r["rlbench/step"] for r in ours} <= theirs  # rlbench's x-axis is the script's step
    assert not [k for r in ours for k in r if k.startswith("rlbench/role/")]  # W&B's own threads are no roles
    # in the script's own rows (commit=False): rlbench logs from its own thread, so one point whose log raced the
    # script's next one may join a row W&B opened without the script's SPS (seen once, in a CI run beside load); its
    # x-axis, rlbench/step, is the script's step (checked above)
    assert sum(r["_step"] not in theirs for r in ours) <= 1, [(r["_step"], r["rlbench/step"]) for r in ours]
    meta = _logging_record(project).meta
    assert meta["runs"][0]["backend"] == "wandb" and meta["runs"][0]["user"] and not meta["failures"]


def _wandb_history(folder: Path) -> list[dict]:
    """The history rows of the offline W&B run under ``folder``, read from its run file (``run-<id>.wandb``: LevelDB's
    log format, 32 KiB blocks of records, behind a 7-byte W&B header) as W&B's own ``Record`` protos."""
    import struct

    from wandb.proto import wandb_internal_pb2

    files = list(folder.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    data = files[0].read_bytes()
    assert data[:4] == b":W&B"
    rows, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's trailer
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind not in (1, 4):  # FIRST, MIDDLE: more to come
            continue
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(pending)
        if rec.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item})
    return rows


@pytest.mark.slow
def test_mlflow_series_go_into_the_scripts_run_at_its_steps(project: Path) -> None:
    _needs("mlflow")
    uri = (project / "mlruns").as_uri()
    _profile(project, ["--log-to", "mlflow"], ["--mlflow", uri])
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("tests").experiment_id])
    theirs = {m.step for m in client.get_metric_history(run.info.run_id, "charts/SPS")}
    ours = client.get_metric_history(run.info.run_id, "rlbench/share/env/step")
    assert len(ours) >= 2 and {m.step for m in ours} <= theirs
    assert "rlbench/bottlenecks.md" in {f.path for f in client.list_artifacts(run.info.run_id, "rlbench")} | {
        f.path for f in client.list_artifacts(run.info.run_id)
    }


@pytest.mark.slow
def test_a_tracker_that_raises_mid_run_does_not_stop_the_profile_and_the_report_says_what_was_not_logged(
    project: Path,
) -> None:
    _needs("mlflow")
    uri = (project / "mlruns").as_uri()
    proc = _profile(project, ["--log-to", "mlflow"], ["--mlflow", uri, "--delete-run-at", "0.6", "--seconds", "1.8"])
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("rlbench: warning: --log-to")]
    assert len(warnings) == 1 and "the profile goes on" in warnings[0]
    record = _logging_record(project)
    assert record.meta["failed_points"] >= 1 and record.meta["failures"]
    assert {r.metric for r in read_records(project / "st")} >= {"time/env/step", "sps"}  # the profile is whole
    report = next((project / "st").glob("*.md")).read_text(encoding="utf-8")
    assert "**Not logged**" in report


@pytest.mark.slow
def test_ctrl_c_logs_what_was_measured_and_the_table_then_exits_130(project: Path) -> None:
    _needs("tensorboard")
    mark = project / "pid"
    args = ["profile", "--quiet", "--store", "st", "--log-to", "tensorboard:tb", "--log-every", "0.2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", *args, "--", "python", "train.py", "--seconds", "120", "--mark", str(mark)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )
    deadline = time.monotonic() + 120
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mark.exists(), "the script never got going"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    scalars = _scalars(project / "tb")
    assert len(scalars["rlbench/sps"]) >= 2
    assert "rlbench/bottlenecks/text_summary" in _texts(project / "tb")  # the table was logged on the way out
    records = read_records(project / "st")
    assert any(r.metric == "profile/logging_s" for r in records) and all(r.meta.get("cut") for r in records)


@pytest.mark.slow
def test_live_view_draws_roles_sps_and_the_top_bottleneck_and_writes_nothing_more(project: Path) -> None:
    proc = _profile(project, ["--live"], ["--seconds", "2.5"])
    assert "rlbench profile --live" in proc.stderr and "top bottleneck:" in proc.stderr
    assert "main" in proc.stderr and "env/step" in proc.stderr
    metrics = {r.metric for r in read_records(project / "st")}
    assert "profile/logging_s" not in metrics  # --live alone adds nothing to the records
    assert list((project / "st").glob("*-repeat0.log"))  # the script's output went to its log


@pytest.mark.slow
def test_rlbench_run_logs_its_own_loops_phases_on_agent_steps(tmp_path: Path) -> None:
    _needs("tensorboard")
    args = ["run", "ppo-cartpole", "--total-steps", "8192", "--eval-episodes", "2", "--quiet", "--store", "st"]
    proc = run_cli([*args, "--log-to", "tensorboard:tb", "--log-every", "0.05"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scalars = _scalars(tmp_path / "tb")
    steps = [s for s, _ in scalars["rlbench/sps"]]
    assert len(steps) >= 2 and steps == sorted(steps) and steps[-1] <= 8192
    assert {"rlbench/share/collect/env", "rlbench/share/update/backward", "rlbench/iter_ms/update/forward"} <= set(scalars)
    middle = steps[len(steps) // 2]  # one point: the phases' own times and the rest, the whole interval
    shares = {t: v for t, points in scalars.items() if t.startswith("rlbench/share/") for s, v in points if s == middle}
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.02), shares
    bad = run_cli(["run", "gae", "--log-to", "tensorboard"], cwd=tmp_path)
    assert "--log-to follows rlbench's own training loops" in one_line_error(bad, code=2)


# --- bad input: one line, exit 2, before the script starts ----------------------------------------------------------
def test_parse_log_to() -> None:
    from rlbench.profiling.tracking import LogTo, parse_log_to

    assert parse_log_to("tensorboard") == LogTo("tensorboard", None)
    assert parse_log_to("wandb:my-proj") == LogTo("wandb", "my-proj")
    assert parse_log_to("mlflow:file:///tmp/x") == LogTo("mlflow", "file:///tmp/x")
    for bad, says in [("comet", "choose tensorboard"), ("tensorboard:", "nothing after ':'")]:
        with pytest.raises(UsageError, match=says):
            parse_log_to(bad)


def test_a_tracker_not_installed_names_the_extra(monkeypatch) -> None:
    from rlbench.profiling import tracking

    real = importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(UsageError, match=r"needs the wandb package, not installed here: pip install 'rlbench\[trackers\]'"):
        tracking.check_log_to(tracking.LogTo("wandb"), {})


def test_wandb_without_credentials_or_network_logs_offline_and_says_so_in_one_line(tmp_path: Path, monkeypatch) -> None:
    _needs("wandb")
    from rlbench.profiling import tracking

    (tmp_path / "netrc").write_text("", encoding="utf-8")
    env = {"NETRC": str(tmp_path / "netrc"), "WANDB_DIR": str(tmp_path)}
    notes = tracking.check_log_to(tracking.LogTo("wandb"), env)
    assert env["WANDB_MODE"] == "offline" and len(notes) == 1 and "no W&B credentials" in notes[0]
    env = {"WANDB_API_KEY": "x" * 40, "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_DIR": str(tmp_path)}
    notes = tracking.check_log_to(tracking.LogTo("wandb"), env)  # nothing listens on port 9
    assert env["WANDB_MODE"] == "offline" and len(notes) == 1 and "did not answer" in notes[0]
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    assert tracking.check_log_to(tracking.LogTo("wandb"), env) == [] and env["WANDB_MODE"] == "offline"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--log-to", "comet"], "choose tensorboard"),
        (["--log-to", "tensorboard:plain-file/sub"], "cannot write plain-file/sub"),
        (["--log-to", "mlflow:plain-file/store"], "cannot write plain-file/store"),
        (["--log-every", "2"], "--log-every goes with --log-to"),
        (["--log-to", "tensorboard", "--log-every", "0"], "--log-every must be a positive number"),
        (["--live", "--json"], "--live draws on the terminal"),
    ],
)
def test_bad_log_options_are_one_line_and_exit_2_before_the_script_starts(
    project: Path, options: list[str], says: str
) -> None:
    _needs("tensorboard", "mlflow")
    (project / "plain-file").write_text("", encoding="utf-8")
    proc = run_cli(["profile", "--store", "st", *options, "--", "python", "train.py", "--mark", "ran"], cwd=project)
    assert says in one_line_error(proc, code=2)
    assert not (project / "ran").exists() and not (project / "st").exists()  # nothing ran, nothing written


def test_event_files_are_framed_as_tensorboards_own_record_writer_frames_them(tmp_path: Path) -> None:
    _needs("tensorboard")
    import io

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as theirs
    from tensorboard.summary.writer.record_writer import RecordWriter

    from rlbench.profiling.tracking import EventFile, _Records, masked_crc32c

    for data in (b"", b"a", b"rlbench/share/env/step" * 40, bytes(range(256))):
        assert masked_crc32c(data) == theirs(data)
        mine, ref = io.BytesIO(), io.BytesIO()
        _Records(mine).write(data)
        RecordWriter(ref).write(data)
        assert mine.getvalue() == ref.getvalue()
    f = EventFile(str(tmp_path / "tb"))
    f.scalars({"rlbench/sps": 12.5}, 7)
    f.text("rlbench/bottlenecks", "| a |", 7)
    f.close()
    assert _scalars(tmp_path / "tb")["rlbench/sps"] == [(7, 12.5)]
    assert _texts(tmp_path / "tb")["rlbench/bottlenecks/text_summary"] == ["| a |"]


# --- the figures ---------------------------------------------------------------------------------------------------
def _view(role: str, t: float, excl: dict[str, float], steps: int, iters: int, pid: int = 1, **kw) -> dict:
    return {
        "role": role,
        "pid": pid,
        "thread": None,
        "t": t,
        "begun": 0.0,
        "started": 1.0,
        "steps": steps,
        "start_steps": 0,
        "iterations": iters,
        "excl": excl,
        "layers": {"env/step": "environment", "train/forward": "update"},
        "steady": kw.pop("steady", None),
        "events": 0,
        "merges": 0,
        "passthrough": 0,
        "marks": 0,
        **kw,
    }


def test_window_turns_two_views_into_the_intervals_shares_times_and_sps() -> None:
    from rlbench.profiling.live import Window, series

    w = Window()
    first = w.update([_view("main", 3.0, {"env/step": 1.0, "train/forward": 1.0}, 200, 10)])
    assert first["main"].shares() == {"env/step": 0.5, "train/forward": 0.5}
    # the next second: env 0.75 s, forward 0.25 s, 100 steps, 4 iterations; two env workers appear
    later = w.update(
        [
            _view("main", 4.0, {"env/step": 1.75, "train/forward": 1.25}, 300, 14),
            _view("env-worker", 4.0, {"env/step": 2.0, "": 1.0}, 50, 5, pid=2),
            _view("env-worker", 4.0, {"env/step": 1.0, "": 2.0}, 50, 5, pid=3),
        ]
    )
    main = later["main"]
    assert main.shares() == pytest.approx({"env/step": 0.75, "train/forward": 0.25})
    assert main.sps == pytest.approx(100.0) and main.iterations == 4
    assert main.per_iteration_s() == pytest.approx({"env/step": 0.75 * 0.25, "train/forward": 0.25 * 0.25})
    workers = later["env-worker"]  # one role, summed over its processes
    assert workers.threads == 2 and workers.shares() == pytest.approx({"env/step": 0.5, "": 0.5})
    named = series(later)
    assert named["rlbench/sps"] == pytest.approx(100.0) and named["rlbench/share/env/step"] == pytest.approx(0.75)
    assert named["rlbench/iter_ms/train/forward"] == pytest.approx(62.5)
    assert named["rlbench/role/env-worker/share/other"] == pytest.approx(0.5)


def test_bottleneck_table_ranks_the_steady_state_by_share_with_its_bound() -> None:
    from rlbench.profiling.live import bottleneck_table, steady

    views = [
        _view(
            "main",
            11.0,
            {"env/step": 6.0, "train/forward": 3.0, "": 1.0},
            1100,
            102,
            steady={"t": 1.0, "steps": 100, "excl": {"env/step": 0.0, "train/forward": 0.0, "": 0.0}},
        )
    ]
    table = bottleneck_table(steady(views))
    lines = table.splitlines()
    assert lines[2].startswith("| 1 | main | `env/step` | environment | 60.0% | ≤ 2.50× |")
    assert lines[3].startswith("| 2 | main | `train/forward` | update | 30.0% |")
    assert "Steady SPS: main 100" in table
    assert "No steady state" in bottleneck_table(steady([_view("main", 2.0, {"": 1.0}, 10, 1)]))
    # a role that waits on another is not the bottleneck: its wait is said apart, never ranked
    worker = _view("env-worker", 11.0, {"wait/pipe": 9.5, "env/step": 0.5}, 0, 50, pid=2, steady={"t": 1.0, "steps": 0})
    worker["layers"] = {"wait/pipe": "wait", "env/step": "environment"}
    table = bottleneck_table(steady([*views, worker]))
    assert "wait/pipe" not in table and "Waiting on another role (not ranked): env-worker 95%." in table
    assert table.splitlines()[2].startswith("| 1 | main | `env/step` |")
