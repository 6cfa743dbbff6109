"""The raw numbers of a long measuring harness, kept on disk as they are measured, so an interruption loses none.

The accuracy and command-cost harnesses run for one to three hours. Each keeps its raw numbers in a
:class:`Checkpoint`: every finished measurement is written at once (atomically: a torn file is never left) to
``REPORT.partial.json``, beside the report. Run the same command again and it goes on from there, measuring only what
is missing; the report's header then says over how many invocations the numbers were measured. A checkpoint is only
continued by the same code on the same machine with the same settings: a clean checkout whose ``rlbench/``,
``suites/`` and ``pyproject.toml`` are those it was started with (a commit of docs or reports between keeps it), the
same machine id, the same Python and package versions, the same harness options. Anything else is refused with one
line that says what to do (``--restart`` starts again). When the report is written, the partial file is removed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlbench.results.fingerprint import machine_fingerprint, software_fingerprint

HERE = Path(__file__).resolve().parent


class CheckpointMismatch(Exception):
    """A partial file that this invocation cannot continue (other code, machine or settings)."""


CODE_PATHS = ("rlbench", "suites", "pyproject.toml")
"""What the measured code is: a commit that changes none of these (docs, reports) leaves a checkpoint continuable."""


def code_state(root: Path = HERE.parent.parent) -> dict[str, Any]:
    """The checkout's commit and the git object ids of :data:`CODE_PATHS` at it; ``dirty`` when any of them has
    uncommitted changes. Outside a git checkout every field is ``None``."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    ids = git("rev-parse", "HEAD", *(f"HEAD:{p}" for p in CODE_PATHS))
    if not ids:
        return {"commit": None, "code": None, "dirty": None}
    commit, *trees = ids.splitlines()
    status = git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    return {"commit": commit, "code": dict(zip(CODE_PATHS, trees)), "dirty": status is None or bool(status)}


def identity(settings: dict[str, Any]) -> dict[str, Any]:
    """What must match for a partial run to be continued: the code (of a clean checkout), the machine, the software
    (Python and the measured packages' versions), the settings."""
    soft = software_fingerprint()
    software = {"python": soft.get("python"), **soft.get("packages", {})}
    for name in PEER_PACKAGES:
        software[name] = package_version(name)
    return {**code_state(), "machine": machine_fingerprint().get("id"), "software": software, "settings": settings}


PEER_PACKAGES = ("stable-baselines3", "torchrl", "tensordict")
"""Packages the suite's scripts import that the software fingerprint does not list."""


def package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def partial_path(report: Path) -> Path:
    return report.with_name(report.stem + ".partial.json")


class Checkpoint:
    """A harness's results dict, saved after every measurement (:meth:`save`) and continued by a later invocation."""

    def __init__(self, path: Path, ident: dict[str, Any], *, restart: bool = False) -> None:
        self.path, self.ident = path, ident
        self.data: dict[str, Any] = {}
        self.kept = 0  # measurements found on disk at the start
        self.invocations = 1
        self.seconds_before = 0.0
        self.commits: list[str] = []  # every commit an invocation measured at (the same code: see CODE_PATHS)
        if path.exists() and not restart:
            try:
                saved = json.loads(path.read_text(encoding="utf-8"))
                meta = saved["_checkpoint"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CheckpointMismatch(
                    f"{path} is not a harness checkpoint ({exc.__class__.__name__}); move it away or pass --restart"
                ) from exc
            why = _mismatch(meta.get("identity", {}), ident)
            if why:
                raise CheckpointMismatch(f"cannot go on from {path}: {why}; pass --restart to measure again from the start")
            self.data = saved["results"]
            self.kept = int(meta.get("measurements", 0))
            self.invocations = int(meta.get("invocations", 1)) + 1
            self.seconds_before = float(meta.get("seconds", 0.0))
            self.commits = list(meta.get("commits", []))
        if ident.get("commit") and ident["commit"] not in self.commits:
            self.commits.append(ident["commit"])
        self.measurements = self.kept

    def save(self, seconds: float) -> None:
        """Write everything measured so far (``seconds``: this invocation's measuring time so far); counts one more."""
        self.measurements += 1
        meta = {
            "identity": self.ident,
            "measurements": self.measurements,
            "invocations": self.invocations,
            "seconds": self.seconds_before + seconds,
            "commits": self.commits,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"_checkpoint": meta, "results": self.data}), encoding="utf-8")
        os.replace(tmp, self.path)

    def meta(self, seconds: float) -> dict[str, Any]:
        """What a report says about how its numbers were measured: in how many invocations, over how long, where."""
        return {"invocations": self.invocations, "seconds": self.seconds_before + seconds, "commits": self.commits}

    def finish(self) -> None:
        """The report is written: the partial file has served."""
        self.path.unlink(missing_ok=True)


def _mismatch(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    if now.get("dirty") or now.get("code") is None:
        return "this checkout's code has uncommitted changes (or is no git checkout), so it cannot be known to be the same"
    if saved.get("dirty") or saved.get("code") is None:
        return "it was measured from a checkout with uncommitted changes"
    if saved.get("code") != now["code"]:
        changed = ", ".join(p for p in CODE_PATHS if (saved.get("code") or {}).get(p) != now["code"].get(p))
        return f"it was measured at commit {str(saved.get('commit'))[:10]}, and {changed} changed since"
    if saved.get("machine") != now.get("machine"):
        return f"it was measured on machine {saved.get('machine')}, this is {now.get('machine')}"
    if saved.get("software") != now.get("software"):
        before, after = saved.get("software") or {}, now.get("software") or {}
        changed = [
            f"{k} {before.get(k)} -> {after.get(k)}" for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)
        ]
        return f"it was measured with other software ({', '.join(changed)})"
    if saved.get("settings") != now.get("settings"):
        return f"it was measured with other options ({json.dumps(saved.get('settings'), sort_keys=True)})"
    return None


def start(report: Path, settings: dict[str, Any], restart: bool) -> Checkpoint | None:
    """A harness's checkpoint beside ``report``, going on from a partial run where it may (and saying so); ``None``
    after printing the one-line reason where it may not (the harness then exits 2). Which hooks run, compiled or
    Python, is part of the settings: they are other code."""
    from rlbench.profiling.autohooks import native_available

    try:
        cp = Checkpoint(partial_path(report), identity({**settings, "compiled_hooks": native_available()}), restart=restart)
    except CheckpointMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if cp.kept:
        print(f"going on from {cp.path}: {cp.kept} measurements kept", file=sys.stderr)
    return cp


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the harness like Ctrl-C: temp dirs and busy processes are cleaned, the checkpoint stays."""

    def raise_interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def invocations(meta: dict[str, Any], seconds: float) -> str:
    """The end of a report's first sentence ("every figure below was measured ..."): in one invocation or over several
    of a continued checkpoint, how long it measured, at which commits."""
    n = int(meta.get("invocations", 1))
    commits = [c[:7] for c in meta.get("commits", [])]
    at = ""
    if len(commits) == 1:
        at = f", at commit `{commits[0]}`"
    elif commits:
        at = ", at commits " + ", ".join(f"`{c}`" for c in commits) + " (the same code: they differ outside it)"
    if n <= 1:
        return f"in that one invocation ({seconds / 60:.1f} min in all{at})"
    return (
        f"over {n} invocations on this machine, each going on from the last one's saved numbers "
        f"({seconds / 60:.1f} min of measuring in all{at})"
    )


def interrupted(cp: Checkpoint, command: str) -> int:
    """The one line an interrupted harness prints; its exit status."""
    print(f"interrupted: {cp.measurements} measurements kept in {cp.path}; run `{command}` again to go on", file=sys.stderr)
    return 130
