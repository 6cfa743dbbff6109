"""The micro suites fanned out over a 2-node local Ray cluster, a worker killed mid-case: nothing lost, nothing doubled.

``python -m rlbench.suites.scripts.fanout --report reports/micro-fanout-ray-2node-cpu.md``:

1. starts a 2-node cluster with ``ray.cluster_utils.Cluster`` (one CPU a node, both on this host);
2. runs ``rlbench run micro`` serially (``--backend local``) into one store;
3. runs ``rlbench run micro --backend ray --address <cluster>`` into another, and ``kill -9``s the Ray worker of the
   first case it sees, ``--kill-after`` seconds into that case;
4. compares the two runs' records: every (group, op, size, impl, device, repeat) case of the serial run must be in the
   fanned-out run exactly once, and nothing else;
5. checks that no case worker is left once the command returned, and no Ray process once the cluster is shut down.

The report is generated from what this run measured, on the machine it names. Per-case medians are shown side by side
(fanned out, two groups share this machine's cores at once).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep 127.0.0.1: the cluster binds to it

from rlbench.results.fingerprint import cpu_label, machine_fingerprint, software_fingerprint
from rlbench.results.store import read_records

# the process title rlbench.run.fanout gives a Ray worker while it runs a case (suites sit below fanout: not imported);
# main() fails if no worker with it was seen, and tests/pipeline/test_fanout.py checks it is rlbench.run.fanout's
TASK_NAME = "rlbench-case"


def case_workers() -> dict[int, str]:
    """Ray workers running an rlbench case now: pid -> the case's label (from the process title)."""
    out = {}
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmd.read_text().replace("\0", " ").strip()
        except OSError:
            continue
        if text.startswith(f"ray::{TASK_NAME} "):
            out[int(cmd.parent.name)] = text.removeprefix(f"ray::{TASK_NAME} ")
    return out


def _ray_processes() -> list[str]:
    names = ("raylet", "gcs_server", "ray::", "plasma_store", "dashboard", "runtime_env")
    out = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmd.read_text().replace("\0", " ").strip()
        except OSError:
            continue
        if any(n in text for n in names) and str(os.getpid()) != cmd.parent.name:
            out.append(text[:80])
    return out


def _run(args: list[str], cwd: Path, kill_after: float | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rlbench", "run", "micro", *args, "--quiet", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed: dict[str, Any] = {}
    if kill_after is not None:
        deadline = time.monotonic() + 600
        first: tuple[int, str, float] | None = None
        while proc.poll() is None and time.monotonic() < deadline:
            workers = case_workers()
            if first is None and workers:
                pid, label = next(iter(workers.items()))
                first = (pid, label, time.monotonic())
            if first is not None and time.monotonic() - first[2] >= kill_after:
                if first[0] in case_workers():
                    os.kill(first[0], signal.SIGKILL)
                    killed = {"pid": first[0], "case": first[1], "after_s": time.monotonic() - first[2]}
                break
            time.sleep(0.05)
    out, err = proc.communicate(timeout=3600)
    wall = time.perf_counter() - t0
    if kill_after is not None and not killed:
        raise SystemExit(f"no case worker (process title ray::{TASK_NAME} ...) was seen running long enough to kill")
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd[2:])}` exited {proc.returncode}: {err.strip()[-500:]}")
    summary = json.loads(out)
    return {"summary": summary, "wall_s": wall, "killed": killed, "leftover": list(case_workers().values())}


def _key(r: Any) -> tuple[str, ...]:
    p = r.params
    return (str(p.get("group")), str(p.get("op", "call")), str(p.get("size")), str(p.get("impl")), r.device, str(r.repeat))


def _records(summary: dict[str, Any]) -> list[Any]:
    return [r for r in read_records(Path(summary["records"])) if r.metric == "time/call"]


def _us(v: float) -> str:
    return f"{v * 1e6:,.1f} µs" if v < 1e-3 else f"{v * 1e3:,.2f} ms"


def render(serial: dict[str, Any], fanned: dict[str, Any], shut_down_left: list[str], command: list[str]) -> str:
    """The markdown report of one check."""
    s_recs, f_recs = _records(serial["summary"]), _records(fanned["summary"])
    s_keys, f_count = Counter(_key(r) for r in s_recs), Counter(_key(r) for r in f_recs)
    lost = sorted(set(s_keys) - set(f_count))
    extra = sorted(set(f_count) - set(s_keys))
    doubled = sorted(k for k, n in f_count.items() if n > 1)
    m, sw = machine_fingerprint(), software_fingerprint()
    killed = fanned["killed"]
    by_case: dict[str, list[Any]] = {}
    for r in f_recs:
        by_case.setdefault(r.meta["case"], []).append(r)
    lines = [
        "# Micro suites fanned out over a 2-node Ray cluster, a worker killed mid-case",
        "",
        f"Generated by `python -m rlbench.suites.scripts.fanout {' '.join(command)}` on {cpu_label(m)}, "
        f"{m.get('cores')} cores, {m.get('memory_gib')} GiB (machine id `{m.get('id')}`), Python {sw.get('python')}, "
        f"torch {sw['packages'].get('torch')}, Ray {_version('ray')}. Both nodes are `ray.cluster_utils` nodes on this "
        "host, one CPU each; every micro group is one case (a Ray task declaring 1 CPU).",
        "",
        "## Nothing lost, nothing doubled",
        "",
        f"- serial run `{serial['summary']['run_id']}`: {len(s_recs)} `time/call` records in {serial['wall_s']:.0f} s;",
        f"- fanned-out run `{fanned['summary']['run_id']}`: {len(f_recs)} records in {fanned['wall_s']:.0f} s, "
        f"from {len(by_case)} cases on {len({r.fingerprint['node']['ray_node_id'] for r in f_recs})} nodes;",
        f"- killed: the worker of case `{killed.get('case', '-')}` (pid {killed.get('pid', '-')}), "
        f"{killed.get('after_s', float('nan')):.1f} s into the case, with `kill -9`;",
        f"- **lost: {len(lost)}**, **duplicated: {len(doubled)}**, records the serial run does not have: {len(extra)};",
        f"- case workers left when the command returned: {len(fanned['leftover'])}; Ray processes left after the cluster "
        f"shut down: {len(shut_down_left)}.",
        "",
    ]
    if lost or doubled or extra:
        lines += ["Differences:", "", *[f"- lost {k}" for k in lost[:20]], *[f"- doubled {k}" for k in doubled[:20]], ""]
    lines += [
        "## Cases",
        "",
        "| case | node | worker pid | records | case wall | |",
        "|---|---|---|---|---|---|",
    ]
    for case, recs in sorted(by_case.items()):
        r = recs[0]
        node = r.fingerprint["node"]
        note = f"retried after pid {killed['pid']} was killed" if case == killed.get("case") else ""
        lines.append(
            f"| {case} | `{node['ray_node_id'][:8]}` ({node['hostname']}) | {r.meta['worker_pid']} | {len(recs)} | "
            f"{r.meta['case_wall_s']:.1f} s | {note} |"
        )
    s_med = {_key(r): statistics.median(r.samples) for r in s_recs}
    ratios: dict[str, list[float]] = {}
    for r in f_recs:
        k = _key(r)
        if k in s_med and s_med[k] > 0:
            ratios.setdefault(k[0], []).append(statistics.median(r.samples) / s_med[k])
    lines += [
        "",
        "## Timings beside the serial run",
        "",
        "Median time per call, fanned-out over serial, per group: the median over the group's benchmarks, with min…max. "
        "Fanned out, two groups run at once on this 2-core machine, each in its own pytest process; serially, one "
        "pytest process runs every group. The ratios say what that change did to the timings in this run; the spread "
        "is this shared VM's.",
        "",
        "| group | benchmarks | fanned-out / serial |",
        "|---|---|---|",
    ]
    for g, rs in sorted(ratios.items()):
        lines.append(f"| {g} | {len(rs)} | {statistics.median(rs):.2f}× ({min(rs):.2f}…{max(rs):.2f}) |")
    fastest = {}
    for r in s_recs:
        k = (r.params["group"], str(r.params.get("size")))
        med = statistics.median(r.samples)
        if k not in fastest or med < fastest[k][1]:
            fastest[k] = (r.params["impl"], med)
    lines += ["", "Fastest implementation per group and size in the serial run, for scale:", ""]
    lines += ["| group | size | fastest | median |", "|---|---|---|---|"]
    lines += [f"| {g} | {s} | {impl} | {_us(v)} |" for (g, s), (impl, v) in sorted(fastest.items())]
    return "\n".join(lines) + "\n"


def _version(pkg: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    """Run the check and write the report (the raw summaries as JSON beside it)."""
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.fanout", description=__doc__.split("\n")[0])
    p.add_argument("--max-time", default="0.05", help="seconds pytest-benchmark spends per benchmark (default: 0.05)")
    p.add_argument("--kill-after", type=float, default=3.0, help="seconds into the first case to kill its worker (default: 3)")
    p.add_argument("--store", default=".rlbench-fanout", help="results store of both runs (default: .rlbench-fanout)")
    p.add_argument("--report", default="micro-fanout.md", help="markdown report to write")
    args = p.parse_args(argv)
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        cwd = Path.cwd()
        common = ["--max-time", args.max_time, "--store", args.store]
        serial = _run(common, cwd)
        fanned = _run([*common, "--backend", "ray", "--address", cluster.address], cwd, kill_after=args.kill_after)
    finally:
        ray.shutdown()
        cluster.shutdown()
    time.sleep(2)
    left = _ray_processes()
    report = Path(args.report)
    report.write_text(render(serial, fanned, left, argv if argv is not None else sys.argv[1:]), encoding="utf-8")
    report.with_suffix(".json").write_text(json.dumps({"serial": serial, "fanned": fanned, "left": left}, indent=1))
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
