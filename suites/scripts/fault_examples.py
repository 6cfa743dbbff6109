"""Run the hardening examples of rlbench's fault classes as a user would type them, and print what each one gave.

    python -m rlbench.suites.scripts.fault_examples [--json out.json] [--only SUBSTRING] [--matrix]

``--matrix`` runs the signal matrix instead: Ctrl-C, SIGTERM and ``kill -9`` of ``run``, ``profile`` (a script with a
``Pool`` and a ``Popen`` child), ``ab``, ``grpo-pipeline`` on each engine and a fan-out, once each is under way.

Each example runs the real ``python -m rlbench`` in a fresh folder, with a private ``TMPDIR`` and a unique marker in
its environment. The table says, per example, the exit code, rlbench's last line on stderr, how long it took, what
was left behind (a process carrying the marker 15 s after a ``kill -9`` or 2 s after any other end, a file in the
private ``TMPDIR``, a git worktree) and the example's own check (a file that must still exist, a record that must
be on disk). The tests in ``tests/faults/`` assert the same promises one by one; this script shows them together.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "RLBENCH_EXAMPLE_MARKER"

POOL_SCRIPT = """\
import multiprocessing as mp, subprocess, sys, time

def square(x):
    time.sleep(0.01)
    return x * x

if __name__ == "__main__":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with mp.Pool(2) as pool:
        open("started", "w").close()
        while True:
            pool.map(square, range(4))
            time.sleep(0.02)
"""
TINY_SCRIPT = "import time\nfor _ in range(20):\n    time.sleep(0.01)\nprint('ok')\n"
USER_BENCH = """\
import sys, time
import rlbench

@rlbench.benchmark
def exits3():
    sys.exit(3)

@rlbench.benchmark
def exits0():
    sys.exit(0)

@rlbench.benchmark
def hangs():
    time.sleep(600)

@rlbench.benchmark
def chatty():
    print("hello from the benchmark")
    return {"thing_s": 0.001}

@rlbench.benchmark
def own_options(device: str = "abacus", threads: int = 99):
    return {"thing_s": 0.001, "threads_seen": float(threads)}
"""
SESSION_EXIT0 = """\
import sys
import rlbench

with rlbench.session("exit0", store="s"):
    with rlbench.phase("work"):
        sum(range(10000))
    sys.exit(0)
"""
SESSION_STORE_FILE = """\
import rlbench
open("notadir", "w").close()
with rlbench.session("bad", store="notadir"):
    print("training would run here")
"""
SESSION_THREADS = """\
import threading
import rlbench

errors = []
gate = threading.Barrier(2)

def enter():
    gate.wait()
    try:
        with rlbench.session("t", store="s"):
            import time; time.sleep(0.3)
    except Exception as exc:
        errors.append(type(exc).__name__ + ": " + str(exc).splitlines()[0])

threads = [threading.Thread(target=enter) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
print("errors:", errors)
raise SystemExit(0 if len(errors) == 1 else 1)
"""
RECORD_BAD = """\
import rlbench
with rlbench.session("rec", store="s"):
    try:
        rlbench.record("loss", "12")
        print("accepted '12'")
    except Exception as exc:
        print("refused '12':", str(exc).splitlines()[0])
    import torch
    rlbench.record("loss0d", torch.tensor(1.5))
    print("0-d tensor recorded")
"""


@dataclass
class Example:
    klass: int
    what: str
    argv: list[str]
    setup: Callable[[Path], None] = lambda d: None
    env: dict[str, str] = field(default_factory=dict)
    signal_after: tuple[str, int] | None = None  # (file that appears when the run is under way, signal)
    delay_s: float = 0.0  # seconds after that file before the signal
    check: Callable[[Path, subprocess.CompletedProcess[str]], str] = lambda d, p: ""
    timeout: float = 300


def _write(name: str, text: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_text(text)


def _link_trace(d: Path) -> None:
    (d / "t.py").write_text(TINY_SCRIPT)
    (d / "precious").write_text("keep me")
    (d / "link.json").symlink_to(d / "precious")


def _fifo_trace(d: Path) -> None:
    (d / "t.py").write_text(TINY_SCRIPT)
    os.mkfifo(d / "fifo.json")


def _nested_store(d: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rlbench",
            "run",
            "gae",
            "--select",
            "numpy and T128xN8",
            "--max-time",
            "0.02",
            "--quiet",
            "--store",
            str(d / "s"),
        ],
        cwd=d,
        check=True,
        capture_output=True,
    )
    (d / "s" / "deep.jsonl").write_text("[" * 100000 + "]" * 100000 + "\n")


def _fifo_store(d: Path) -> None:
    (d / "s").mkdir()
    os.mkfifo(d / "s" / "20260101T000000Z-ffffff.jsonl")


def _dirty_repo(d: Path) -> None:
    repo = d / "repo"
    repo.mkdir()
    (repo / "suites").mkdir()
    (repo / "suites" / "bench_nap.py").write_text(
        "import time\nimport rlbench\n\n@rlbench.benchmark\ndef nap():\n    time.sleep(0.002)\n    return {'nap_s': 0.002}\n"
    )
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "nap"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    (repo / "suites" / "bench_nap.py").write_text((repo / "suites" / "bench_nap.py").read_text() + "# edited\n")


def _silent_ray(d: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    (d / "port").write_text(str(silent.getsockname()[1]))
    _SOCKETS.append(silent)


_SOCKETS: list[socket.socket] = []


def _is_char_device(path: str) -> Callable[[Path, subprocess.CompletedProcess[str]], str]:
    return lambda d, p: f"{path} still a device: {stat.S_ISCHR(os.stat(path).st_mode)}"


def _records_in(sub: str) -> Callable[[Path, subprocess.CompletedProcess[str]], str]:
    def check(d: Path, p: subprocess.CompletedProcess[str]) -> str:
        n = sum(len(f.read_text().splitlines()) for f in (d / sub).glob("*.jsonl")) if (d / sub).is_dir() else 0
        return f"{n} record line(s) on disk"

    return check


def examples() -> list[Example]:
    gae = ["run", "gae", "--select", "numpy and T128xN8", "--max-time", "0.02", "--quiet"]
    return [
        # 1. output paths
        Example(
            1,
            "profile --trace LINK (a symlink to a file)",
            ["profile", "--trace", "link.json", "--", "python", "t.py"],
            _link_trace,
            check=lambda d, p: f"link kept: {(d / 'link.json').is_symlink()}, target: {(d / 'precious').read_text()!r}",
        ),
        Example(
            1,
            "profile --trace FIFO",
            ["profile", "--trace", "fifo.json", "--", "python", "t.py"],
            _fifo_trace,
            check=lambda d, p: f"FIFO kept: {stat.S_ISFIFO(os.stat(d / 'fifo.json').st_mode)}",
        ),
        Example(
            1,
            "profile --trace /dev/null (as root)",
            ["profile", "--trace", "/dev/null", "--", "python", "t.py"],
            _write("t.py", TINY_SCRIPT),
            check=_is_char_device("/dev/null"),
        ),
        Example(
            1,
            "run --report /dev/null",
            ["run", "ppo-cartpole", "--total-steps", "2048", "--quiet", "--store", "s", "--report", "/dev/null"],
            check=lambda d, p: (
                f"/dev/null-phases.png exists: {Path('/dev/null-phases.png').exists()}; " + _records_in("s")(d, p)
            ),
        ),
        # 2. the user's processes
        Example(
            2,
            "profile --timeout 5 of a script with a Pool and a Popen child",
            ["profile", "--timeout", "5", "--store", "s", "--", "python", "pool.py"],
            _write("pool.py", POOL_SCRIPT),
        ),
        Example(
            2,
            "SIGTERM to profile of a Pool + Popen script",
            ["profile", "--store", "s", "--", "python", "pool.py"],
            _write("pool.py", POOL_SCRIPT),
            signal_after=("started", signal.SIGTERM),
            delay_s=1.0,
        ),
        Example(
            2,
            "kill -9 of profile of a Pool + Popen script",
            ["profile", "--store", "s", "--", "python", "pool.py"],
            _write("pool.py", POOL_SCRIPT),
            signal_after=("started", signal.SIGKILL),
            delay_s=1.0,
        ),
        Example(
            2,
            "kill -9 of a local grpo-pipeline run",
            ["run", "grpo-pipeline", "--engine", "local", "--updates", "100000", "--quiet", "--store", "s"],
            signal_after=("", signal.SIGKILL),
            delay_s=12.0,
        ),
        Example(
            2,
            "a local grpo-pipeline run to its end",
            ["run", "grpo-pipeline", "--engine", "local", "--updates", "5", "--quiet", "--store", "s"],
        ),
        Example(
            2,
            "a Monarch grpo-pipeline run to its end",
            ["run", "grpo-pipeline", "--engine", "monarch", "--updates", "5", "--quiet", "--store", "s"],
        ),
        # 3. the network
        Example(
            3,
            "--backend ray --address 127.0.0.1:1 (nothing listening)",
            [*gae, "--backend", "ray", "--address", "127.0.0.1:1", "--store", "s"],
        ),
        Example(
            3,
            "--backend ray --address ray://127.0.0.1:1",
            [*gae, "--backend", "ray", "--address", "ray://127.0.0.1:1", "--store", "s"],
        ),
        Example(
            3,
            "--backend ray --address of a listener that says nothing",
            [*gae, "--backend", "ray", "--address", "@port", "--store", "s"],
            _silent_ray,
        ),
        Example(
            3,
            "SIGTERM while rlbench waits on a silent address",
            [*gae, "--backend", "ray", "--address", "@port", "--store", "s"],
            _silent_ray,
            env={"RLBENCH_CONNECT_S": "60"},  # still waiting when the signal comes
            signal_after=("", signal.SIGTERM),
            delay_s=8.0,
        ),
        # 4. the user's exit
        Example(
            4,
            "sys.exit(3) in an @rlbench.benchmark",
            ["run", "bench.py:exits3", "--quiet", "--store", "s"],
            _write("bench.py", USER_BENCH),
        ),
        Example(
            4,
            "sys.exit(0) in an @rlbench.benchmark",
            ["run", "bench.py:exits0", "--quiet", "--store", "s"],
            _write("bench.py", USER_BENCH),
        ),
        Example(
            4,
            "a hanging @rlbench.benchmark with --timeout 3",
            ["run", "bench.py:hangs", "--timeout", "3", "--quiet", "--store", "s"],
            _write("bench.py", USER_BENCH),
        ),
        # 5. measurements lost at the end
        Example(
            5,
            "rlbench.session ended by sys.exit(0)",
            ["@python", "s.py"],
            _write("s.py", SESSION_EXIT0),
            check=_records_in("s"),
        ),
        Example(5, "rlbench.session whose store is a file", ["@python", "s.py"], _write("s.py", SESSION_STORE_FILE)),
        Example(
            5,
            "Ctrl-C of profile while a repeat runs",
            ["profile", "--store", "s", "--", "python", "pool.py"],
            _write("pool.py", POOL_SCRIPT),
            signal_after=("started", signal.SIGINT),
            delay_s=1.5,
            check=_records_in("s"),
        ),
        # 6. odd files in a store
        Example(6, "report of a store with a 100,000-deep JSON line", ["report", "s", "--output", "r.md"], _nested_store),
        Example(
            6,
            "report --run ID beside a FIFO named ID.jsonl",
            ["report", "s", "--run", "20260101T000000Z-ffffff"],
            _fifo_store,
            timeout=30,
        ),
        Example(6, "report /dev/zero", ["report", "/dev/zero"], timeout=30),
        # 7. threads
        Example(7, "two threads enter rlbench.session at once", ["@python", "s.py"], _write("s.py", SESSION_THREADS)),
        # 8. output
        Example(
            8,
            "run <user benchmark> --json with prints",
            ["run", "bench.py:chatty", "--json", "--store", "s"],
            _write("bench.py", USER_BENCH),
            check=lambda d, p: f"stdout is one JSON object: {_one_json(p.stdout)}",
        ),
        # 9. inputs
        Example(
            9,
            "RLBENCH_INJECT_DELAY=update:inf",
            ["run", "ppo-cartpole", "--total-steps", "2048", "--quiet"],
            env={"RLBENCH_INJECT_DELAY": "update:inf"},
        ),
        Example(
            9,
            "RLBENCH_INJECT_DELAY=update:nan",
            ["run", "ppo-cartpole", "--total-steps", "2048", "--quiet"],
            env={"RLBENCH_INJECT_DELAY": "update:nan"},
        ),
        Example(
            9,
            "RLBENCH_INJECT_DELAY=nosuchphase:0.1",
            ["run", "ppo-cartpole", "--total-steps", "2048", "--quiet"],
            env={"RLBENCH_INJECT_DELAY": "nosuchphase:0.1"},
        ),
        Example(
            9,
            "profile --seed-arg '--seed \"{seed}'",
            ["profile", "--seed-arg", '--seed "{seed}', "--", "python", "t.py"],
            _write("t.py", TINY_SCRIPT),
        ),
        Example(9, "profile -- python -m nosuchmod", ["profile", "--", "python", "-m", "nosuchmod"]),
        Example(9, "profile --seed -5", ["profile", "--seed", "-5", "--", "python", "t.py"], _write("t.py", TINY_SCRIPT)),
        Example(
            9, "profile --timeout nan", ["profile", "--timeout", "nan", "--", "python", "t.py"], _write("t.py", TINY_SCRIPT)
        ),
        Example(9, "profile -- python2 x.py", ["profile", "--", "python2", "t.py"], _write("t.py", TINY_SCRIPT)),
        Example(9, "report --run ''", ["report", "s", "--run", ""], _nested_store),
        Example(9, "rlbench.record('loss', '12') and a 0-d tensor", ["@python", "s.py"], _write("s.py", RECORD_BAD)),
        Example(
            9,
            "user parameters named device and threads",
            ["run", "bench.py:own_options", "--device", "slide-rule", "--threads", "7", "--quiet", "--store", "s"],
            _write("bench.py", USER_BENCH),
            check=_records_in("s"),
        ),
        # 10. ab in real repositories
        Example(
            10,
            "ab on a dirty tree",
            ["ab", "HEAD", "--rounds", "1", "--fail", "nap_s:50%", "--allow-busy", "--", "run", "nap"],
            _dirty_repo,
        ),
    ]


def _clean_repo(d: Path) -> None:
    _dirty_repo(d)
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=d / "repo", check=True)


SIGNALS = {"Ctrl-C": signal.SIGINT, "SIGTERM": signal.SIGTERM, "kill -9": signal.SIGKILL}


def matrix() -> list[Example]:
    """The signal matrix: Ctrl-C, SIGTERM and kill -9 at a point where each command is under way."""
    pipeline = ["run", "grpo-pipeline", "--updates", "100000", "--quiet", "--store", "s", "--engine"]
    commands: list[tuple[str, list[str], Callable[[Path], None], str, float]] = [
        ("run ppo-cartpole", ["run", "ppo-cartpole", "--repeats", "20", "--quiet", "--store", "s"], lambda d: None, "", 8.0),
        ("profile of a Pool + Popen script", ["profile", "--store", "s", "--", "python", "pool.py"],
         _write("pool.py", POOL_SCRIPT), "started", 1.0),
        ("ab", ["ab", "HEAD", "HEAD", "--rounds", "20", "--allow-busy", "--", "run", "nap"], _clean_repo, "", 10.0),
        ("grpo-pipeline, local engine", [*pipeline, "local"], lambda d: None, "", 12.0),
        ("grpo-pipeline, Ray engine", [*pipeline, "ray"], lambda d: None, "", 15.0),
        ("grpo-pipeline, Monarch engine", [*pipeline, "monarch"], lambda d: None, "", 15.0),
        ("fan-out (--backend ray)", ["run", "gae", "--backend", "ray", "--repeats", "200", "--quiet", "--store", "s"],
         lambda d: None, "", 15.0),
    ]  # fmt: skip
    return [
        Example(2, f"{how} of {what}", argv, setup, signal_after=(marker, sig), delay_s=delay, check=_records_in("s"))
        for what, argv, setup, marker, delay in commands
        for how, sig in SIGNALS.items()
    ]


def _one_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def _marked(marker: str) -> list[str]:
    needle = f"{MARKER}={marker}".encode()
    out = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env.read_bytes() and (env.parent / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append((env.parent / "cmdline").read_bytes().replace(b"\0", b" ")[:60].decode(errors="replace"))
        except (OSError, IndexError):
            continue
    return out


def _foreground() -> None:
    """In the child: Ctrl-C and SIGTERM as a foreground command has them, also when this harness runs in the
    background (a background job starts with SIGINT ignored, which its children inherit)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_example(ex: Example) -> dict[str, object]:
    marker = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="rlbench-example-") as tmp:
        d = Path(tmp) / "work"
        private_tmp = Path(tmp) / "tmp"
        d.mkdir()
        private_tmp.mkdir()
        ex.setup(d)
        argv = list(ex.argv)
        if "@port" in argv:
            argv[argv.index("@port")] = f"127.0.0.1:{(d / 'port').read_text()}"
        cwd = d / "repo" if (d / "repo").is_dir() else d
        cmd = [sys.executable, *argv[1:]] if argv[0] == "@python" else [sys.executable, "-m", "rlbench", *argv]
        env = {**os.environ, "COLUMNS": "200", "TMPDIR": str(private_tmp), MARKER: marker, **ex.env}
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_foreground
        )
        if ex.signal_after is not None:
            name, sig = ex.signal_after
            deadline = time.monotonic() + 120
            while name and not (cwd / name).exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(ex.delay_s)
            proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=ex.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\n(harness: still running after {ex.timeout:g} s, killed)"
        wall = time.monotonic() - t0
        time.sleep(15 if ex.signal_after and ex.signal_after[1] == signal.SIGKILL else 2)
        left = _marked(marker)
        tmp_left = sorted(p.name for p in private_tmp.iterdir())
        trees = ""
        if (d / "repo").is_dir():
            trees = subprocess.run(["git", "worktree", "list"], cwd=d / "repo", capture_output=True, text=True).stdout
        done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        extra = ex.check(d, done)
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        return {
            "class": ex.klass,
            "example": ex.what,
            "exit": proc.returncode,
            "last_line": lines[-1] if lines else (out.strip().splitlines() or [""])[-1],
            "stderr_lines": len(lines),
            "traceback": "Traceback" in err,
            "wall_s": round(wall, 1),
            "processes_left": left,
            "tmp_left": tmp_left,
            "worktrees": max(0, trees.count("\n") - 1),
            "check": extra,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write every result as JSON here")
    ap.add_argument("--only", help="run only the examples whose text contains this")
    ap.add_argument("--matrix", action="store_true", help="run the signal matrix instead of the examples")
    args = ap.parse_args(argv)
    rows = []
    try:
        for ex in matrix() if args.matrix else examples():
            if args.only and args.only not in ex.what:
                continue
            print(f"[{ex.klass}] {ex.what} ...", file=sys.stderr, flush=True)
            rows.append(run_example(ex))
    finally:
        for s in _SOCKETS:
            s.close()
    print("| Class | Example | Exit | Last line on stderr | Left behind | Check |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        left = (
            ", ".join(
                [*(f"process {p}" for p in r["processes_left"]), *(f"tmp {n}" for n in r["tmp_left"])]
                + ([f"{r['worktrees']} worktree(s)"] if r["worktrees"] else [])
            )
            or "nothing"
        )
        said = textwrap.shorten(str(r["last_line"]).replace("|", "\\|"), 160)
        tb = " (traceback)" if r["traceback"] else ""
        print(f"| {r['class']} | {r['example']} | {r['exit']} | {said}{tb} | {left} | {r['check']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
