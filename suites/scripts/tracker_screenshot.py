"""rlbench's series in a CleanRL-style script's own TensorBoard run: profile it, read the run back, show it.

    python -m rlbench.suites.scripts.tracker_screenshot --report reports/profile-tensorboard-cpu.md \\
        --png reports/profile-tensorboard-cpu.png

runs ``rlbench profile --log-to tensorboard --log-every 1`` on ``cleanrl_dqn.py --tensorboard-dir DIR`` (the script
opens its own ``SummaryWriter`` there, as CleanRL does, and logs ``charts/SPS`` and ``charts/episodic_return``), then:

* reads the run back with TensorBoard's own reader (``EventAccumulator``) and writes the reader's output as markdown:
  every tag with its points and steps, and the rows at rlbench's steps, rlbench's shares beside the script's own SPS
  and return;
* with ``--png``, starts TensorBoard on the run and saves a screenshot of its scalars page in headless Chromium (Debian's
  ``chromium`` and ``chromium-driver``, as ``site_screenshot``): rlbench's share series beside ``charts/SPS`` and the
  return. Without Chromium it says so and writes the markdown only.

The report names the machine and the command. ``--steps 2000`` is a quick look.
"""

from __future__ import annotations

import argparse
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlbench.suites.scripts.accuracy import environment, script_env
from rlbench.suites.scripts.checkpoint import package_version
from rlbench.suites.scripts.site_screenshot import CHROMEDRIVER, CHROMIUM, headless_chromium

from rlbench.report.plots import save_png_bytes
from rlbench.results.fingerprint import cpu_label

HERE = Path(__file__).resolve().parent
SHOWN = ("charts/SPS", "charts/episodic_return")


def profile(run_dir: Path, store: Path, steps: int, every: float) -> list[str]:
    cmd = [sys.executable, "-m", "rlbench", "profile", "--quiet", "--store", str(store)]
    cmd += ["--log-to", "tensorboard", "--log-every", f"{every:g}", "--", "python", str(HERE / "cleanrl_dqn.py")]
    cmd += ["--total-timesteps", str(steps), "--seed", "1", "--tensorboard-dir", str(run_dir)]
    subprocess.run(cmd, check=True, env=script_env())
    return cmd


def read_back(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str]]:
    """Every scalar (tag -> [(step, value)]) and the last text of every text tag, with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    texts = {tag: acc.Tensors(tag)[-1].tensor_proto.string_val[0].decode() for tag in acc.Tags()["tensors"]}
    return scalars, texts


def _at(points: list[tuple[int, float]], step: int) -> str:
    """The value at ``step``, else the last one before it."""
    before = [v for s, v in points if s <= step]
    return f"{before[-1]:.4g}" if before else "–"


def render(cmd: list[str], scalars: dict[str, list[tuple[int, float]]], texts: dict[str, str], png: str | None) -> str:
    env = environment()
    machine, soft = env.get("machine", {}), env.get("software", {})
    shown = " ".join(shlex.quote(c) for c in ["rlbench", *cmd[3:]])
    lines = [
        "# rlbench's series in a CleanRL-style script's own TensorBoard run",
        "",
        f"Machine: {cpu_label(machine)}, {machine.get('cores', '?')} cores; Python {soft.get('python', '?')}, torch "
        f"{soft.get('packages', {}).get('torch', '?')}, tensorboard {package_version('tensorboard') or '?'}.",
        "",
        f"Command: `{shown}` (the script's own `SummaryWriter` logs `charts/SPS` every 100 steps and each episode's "
        "return). Read back with TensorBoard's own reader (`EventAccumulator`) from the script's log folder.",
        "",
    ]
    if png:
        lines += [f"![TensorBoard's scalars page of the run]({png})", ""]
    lines += ["## Every tag, as the reader returns it", "", "| Tag | Points | Steps | Last value |", "|---|---|---|---|"]
    for tag in sorted(scalars, key=lambda t: (not t.startswith("charts/"), t)):
        pts = scalars[tag]
        lines.append(f"| `{tag}` | {len(pts)} | {pts[0][0]:,} … {pts[-1][0]:,} | {pts[-1][1]:.4g} |")
    shares = sorted(t for t in scalars if t.startswith("rlbench/share/"))
    ours = [s for s, _ in scalars.get("rlbench/sps", [])]
    theirs = {s for s, _ in scalars.get("charts/SPS", [])}
    lines += [
        "",
        "## At rlbench's steps",
        "",
        f"rlbench logged {len(ours)} points; {sum(1 for s in ours if s in theirs)} of them at a step where the script "
        "logged `charts/SPS` itself (rlbench's x-axis is the script's own `global_step`).",
        "",
        "| Step | " + " | ".join(f"`{t}`" for t in (*SHOWN, "rlbench/sps", *shares)) + " |",
        "|" + "---|" * (2 + len(SHOWN) + len(shares)),
    ]
    for step in ours:
        cells = [_at(scalars.get(t, []), step) for t in (*SHOWN, "rlbench/sps", *shares)]
        lines.append(f"| {step:,} | " + " | ".join(cells) + " |")
    table = texts.get("rlbench/bottlenecks/text_summary")
    if table:
        lines += ["", "## `rlbench/bottlenecks` (the text rlbench logged at the end)", "", table]
    return "\n".join(lines) + "\n"


def screenshot(logdir: Path, png: Path, width: int = 1400, height: int = 1400) -> str | None:
    """TensorBoard's scalars page of ``logdir``, saved as ``png``; the reason when it cannot be."""
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        return "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    board = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        driver = headless_chromium(width, height)
        try:
            from urllib.parse import quote

            tags = quote("charts/SPS|charts/episodic_return|rlbench/share/", safe="")
            driver.get(
                f"http://127.0.0.1:{port}/?darkMode=false#scalars&tagFilter={tags}&_smoothingWeight=0&_ignoreYOutliers=false"
            )
            time.sleep(8)  # the page loads its runs and draws its charts
            png.parent.mkdir(parents=True, exist_ok=True)
            save_png_bytes(driver.get_screenshot_as_png(), png)  # a palette PNG: the reports have a size budget
        finally:
            driver.quit()
    finally:
        board.terminate()
        board.wait(timeout=30)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.tracker_screenshot", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20_000, help="the DQN's --total-timesteps (default 20000)")
    p.add_argument("--log-every", type=float, default=1.0, help="rlbench profile --log-every (default 1)")
    p.add_argument("--report", default="profile-tensorboard.md", help="the reader's output, as markdown")
    p.add_argument("--png", default=None, help="also a screenshot of TensorBoard's scalars page here (needs Chromium)")
    args = p.parse_args(argv)
    report = Path(args.report)
    with tempfile.TemporaryDirectory(prefix="rlbench-tracker-screenshot-") as tmp:
        run_dir = Path(tmp) / "runs" / "cleanrl_dqn"
        cmd = profile(run_dir, Path(tmp) / "store", args.steps, args.log_every)
        scalars, texts = read_back(run_dir)
        png_name = None
        if args.png:
            why = screenshot(run_dir.parent, Path(args.png))
            if why:
                print(f"tracker_screenshot: no screenshot: {why}; the reader's output only", file=sys.stderr)
            else:
                png_name = Path(args.png).name if Path(args.png).parent == report.parent else str(args.png)
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(render(cmd, scalars, texts, png_name), encoding="utf-8")
    print(f"report: {report}" + (f", screenshot: {args.png}" if png_name else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
