"""The child side of ``rlbench profile``: run the user's script unmodified under a session, write what it measured.

``python -m rlbench.profiling.bootstrap SPEC.json`` reads the request the parent wrote, installs the hooks, runs the
script (``runpy``, as ``python script.py`` / ``python -m module`` would: same ``sys.argv``, ``sys.path[0]`` and
``__main__``), and writes ``{"status", "exit_code", "error", "metrics", ...}`` atomically to the spec's ``out``.
A script that raises or exits non-zero still reports what it measured up to then (status ``error`` / ``exit``); one
killed from outside writes nothing, which the parent reports. The exit code is the script's.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()
_T0_WALL = time.time()

import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints the message and exits 1
    return 1


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _pyinstrument_metrics(profiler: Any, html: Path) -> list[Any]:
    from rlbench.instrument.sampling import top_frames
    from rlbench.results.metrics import PROFILE_SELF_S, Metric
    from rlbench.results.outputs import write_output

    write_output(html, profiler.output_html(), "--pyinstrument")
    names, secs, total = top_frames(profiler)
    return [Metric(PROFILE_SELF_S, "s", "none", secs, meta={"frames": names, "total_s": total, "html": html.name})]


def _missing_module(name: str) -> str | None:
    """Why ``python -m NAME`` cannot start (no such module or package), or ``None`` when it can.

    Only the module itself (or a package on its dotted path) missing is the user's input to fix: anything its import
    raises beyond that is the user's code failing, and runs (and fails) as the script would.
    """
    import importlib.util

    def find(mod: str) -> Any:
        try:
            return importlib.util.find_spec(mod)
        except ModuleNotFoundError as exc:
            if exc.name and (mod == exc.name or mod.startswith(exc.name + ".")):
                return None
            return True  # its package imports something missing: the user's code fails when it runs
        except (ImportError, ValueError):
            return None

    found = find(name)
    if found is None:
        return f"no module named {name!r} (relative to {os.getcwd()} and the path): check `-m {name}`"
    if found is not True and found.submodule_search_locations is not None and find(f"{name}.__main__") is None:
        return f"{name!r} is a package without a __main__ module: name the module to run, `-m {name}.train`"
    return None


def _gpus(torch: Any) -> dict[str, list[str]] | None:
    """The GPUs torch sees and their compute capabilities, as the machine fingerprint names them; ``None`` if asking
    failed (the parent's fingerprint then stands as it is)."""
    try:
        from rlbench.results.fingerprint import gpu_fields

        return gpu_fields(torch)
    except Exception:  # a driver that errors must not lose what was measured
        return None


def _done_signal(fd: int | None) -> Any:
    """What tells the parent the results are written: one byte on the pipe it passed (``fd``). The pipe stays out of
    the script's processes (forked or started), so that its closing means this process has exited."""
    if fd is None:
        return lambda: None
    os.set_inheritable(fd, False)
    held = [fd]  # emptied once signalled: a later fork must not close whatever file reuses the number
    os.register_at_fork(after_in_child=lambda: [_close(f) for f in held])

    def done() -> None:
        try:
            os.write(fd, b"1")
        except OSError:  # the parent is gone: nothing waits for it
            pass
        held.clear()
        _close(fd)

    return done


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (rlbench ends the repeat: its timeout, its own SIGTERM, or its death) ends the script like Ctrl-C, so
    what it measured up to then is written."""
    raise KeyboardInterrupt


def main(spec_path: str) -> int:
    """Run the request in ``spec_path``; return the script's exit code."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    out = Path(spec["out"])
    done = _done_signal(spec.get("done_fd"))
    # torch is not imported here: its hooks go on when the script imports it (a script without torch never pays it)
    from rlbench.profiling.results import metric_to_dict
    from rlbench.profiling.session import Session, Settings, sync_function

    settings = Settings(**spec["settings"])
    session = Session(settings)
    profiler = None
    if spec.get("pyinstrument"):
        from rlbench.instrument.sampling import make_profiler

        profiler = make_profiler()
    target, args = spec["target"], spec["args"]
    if spec["module"]:
        sys.argv = [target, *args]
        sys.path.insert(0, os.getcwd())
    else:
        sys.argv = [target, *args]
        sys.path.insert(0, str(Path(target).resolve().parent))
    if spec["module"]:
        missing = _missing_module(target)
        if missing:
            _write_json(out, {"status": "usage", "exit_code": 2, "error": missing, "metrics": []})
            return 2
    # --sync with no GPU torch can see: checked here, where torch is imported anyway (not in rlbench's own process:
    # importing torch there cost 4 s before the script started on a GPU machine)
    if settings.sync and sync_function(settings) is None:
        error = "--sync synchronizes a GPU, and this machine has none visible to torch (CUDA or MPS): leave it out"
        _write_json(out, {"status": "usage", "exit_code": 2, "error": error, "metrics": []})
        return 2
    status, code, error, tb = "ok", 0, None, None
    session.start()
    follow = spec.get("follow")
    if follow:  # the script's processes follow the profile (rlbench.profiling.follow); this one stays the main one
        from rlbench.profiling.follow import join_as_main

        join_as_main(Path(follow["folder"]), session)
        os.environ.update(follow["env"])
    tracking = None
    if spec.get("tracking"):  # --log-to, --live: a thread of rlbench's reads the figures as they come
        from rlbench.profiling.tracking import Tracking

        tracking = Tracking(spec["tracking"], session).start()
    if profiler is not None:
        profiler.start()
    own_pid = os.getpid()
    t_script = t_done = time.perf_counter()
    try:
        if spec["module"]:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        if os.getpid() != own_pid:  # a fork of the script (os.fork) ran to the script's end: it leaves as a child
            os._exit(_exit_code(exc.code))
        code = _exit_code(exc.code)
        status = "ok" if code == 0 else "exit"
        error = None if code == 0 else f"exited with status {code}"
    except KeyboardInterrupt:
        if os.getpid() != own_pid:
            os._exit(130)
        status, code, error = "interrupted", 130, "interrupted"
    except BaseException as exc:  # the user's code raised: keep what was measured, say what happened
        if os.getpid() != own_pid:
            traceback.print_exc()
            os._exit(1)
        status, code = "error", 1
        error = f"{type(exc).__name__}: {exc}"
        tb = traceback.format_exc()
        traceback.print_exc()
    finally:
        if os.getpid() != own_pid:  # (the fork's own result is written by the follower at os._exit)
            os._exit(code)
        t_done = time.perf_counter()
        for sig in (signal.SIGINT, signal.SIGTERM):  # what was measured is written whole; SIGKILL still ends it
            signal.signal(sig, signal.SIG_IGN)
        tracked = None
        if tracking is not None:  # the last points and the table; whatever it meets, what was measured is written
            try:
                tracked = tracking.finish(status)
            except Exception as exc:
                tracked = {"failures": [f"finishing: {type(exc).__name__}: {exc}"], "failures_n": 1}
        if profiler is not None:
            profiler.stop()
        outcome = session.stop()
    r = outcome.attribution
    torch = sys.modules.get("torch")  # imported by the script, or not at all
    startup = (r.started - _T0) + (_T0_WALL - float(spec["launched"]))
    metrics = outcome.metrics(startup_s=startup)
    if profiler is not None:
        metrics += _pyinstrument_metrics(profiler, Path(spec["pyinstrument"]))
    from rlbench.profiling.follow import participants, thread_results
    from rlbench.profiling.waits import PARTICIPANTS

    # every thread's attribution (the main thread's metrics are `metrics`), what their waits used, their trace events
    threads = thread_results(outcome, "main", r.begun, main_metrics=False)
    for t in threads:
        t["metrics"] = [metric_to_dict(m) for m in t["metrics"]]
    # rlbench's own seconds in this process: importing rlbench and installing the hooks before the script, patching
    # torch, gymnasium and the RL libraries as the script imported them, timing the hooks and turning the attribution
    # into metrics after it (the file write below is left out)
    own_s = (t_script - _T0) + session.hooks.patch_s + (time.perf_counter() - t_done)
    _write_json(
        out,
        {
            "rlbench_s": own_s,
            "status": status,
            "exit_code": code,
            "error": error,
            "traceback": tb,
            "metrics": [metric_to_dict(m) for m in metrics],
            "iterations": len(r.iterations),
            "steps": r.steps,
            "device": "cuda" if torch is not None and torch.cuda.is_initialized() else "cpu",  # what the script used
            # the machine's, for the records' fingerprint (rlbench's own process has no torch); a script that never
            # imported torch is not made to pay its import for them: the parent's fingerprint stands
            "gpus": _gpus(torch) if torch is not None else None,
            "pid": own_pid,
            "threads": threads,
            "participants": participants(PARTICIPANTS, outcome, "main"),
            "trace": bool(spec.get("trace")),
            "tracking": tracked,
            "iteration_t": [m.t for m in r.iterations][: settings.trace_limit] if spec.get("trace") else [],
        },
    )
    done()  # rlbench writes the records and the report while this process exits (the script's atexit work included)
    return code


if __name__ == "__main__":
    from rlbench.core.children import watch_parent

    _parent = os.getppid()
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
        # the script's forked processes (a Pool's workers) keep the default: SIGTERM ends them, as without rlbench
        os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    if os.getpgrp() == os.getpid():  # it leads its group (rlbench's launcher): the group dies with rlbench
        watch_parent()
    _code = main(sys.argv[1])
    if os.getppid() != _parent and os.getpgrp() == os.getpid():  # rlbench died: nothing of the script stays
        sys.stdout.flush()
        os.killpg(os.getpgrp(), signal.SIGKILL)
    sys.exit(_code)
