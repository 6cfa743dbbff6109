#!/usr/bin/env bash
# The device matrix in one call: what a session lent a GPU runs, and what CI runs on the CPU as a dry run.
#
#   suites/scripts/device_check.sh --fetch-wheels            # here, with network: wheels the GPU machine lacks -> .whl/
#   suites/scripts/device_check.sh                           # on the GPU machine (device tool, carry .whl): the CUDA matrix
#   suites/scripts/device_check.sh --device cpu --quick      # the CPU dry run (CI): same steps, small budgets
#
# PYTHON names the interpreter (default python3). With carried wheels in .whl/ (and no --no-install), the wheels and
# rlbench itself (editable, so the C hooks are built in place where a compiler and headers exist) are installed into
# that interpreter's environment first: the GPU machine's is thrown away after the call.
#
# Steps, each under its own time limit and all under one deadline (--deadline S, default 540 s), so a slow step
# costs only itself: the install above, the test that must fail when phase synchronization is removed (tests/profiling/test_cuda_sync.py),
# `rlbench run ppo-cartpole` and `sac-pendulum` on the device (and on the same host's CPU, for a same-machine ratio),
# `rlbench profile` with and without --sync on the CleanRL-style script, --sync on the CleanRL-style DQN, TD3 and SAC
# (acting with grad, TD targets, target updates, replay copied to the device), and the micro suites' device matrix.
# Everything lands in OUT (default $OUT, else ./device-check-out): device-check-DEVICE.md (what ran, how long, what it
# measured, on which machine), its log, and device-check-DEVICE.tar.gz holding reports/*-DEVICE.md, their charts
# and records. Exit 0 when every step that ran passed, 1 when one failed, 2 on bad arguments.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
device=cuda
quick=0
fetch=0
install=1
py=${PYTHON:-python3}
deadline=540
out=${OUT:-$PWD/device-check-out}

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
    --device) device=${2:-}; shift 2 || { echo "device_check: --device needs cpu or cuda" >&2; exit 2; } ;;
    --quick) quick=1; shift ;;
    --fetch-wheels) fetch=1; shift ;;
    --no-install) install=0; shift ;;
    --deadline) deadline=${2:-}; shift 2 || { echo "device_check: --deadline needs seconds" >&2; exit 2; } ;;
    --out) out=${2:-}; shift 2 || { echo "device_check: --out needs a folder" >&2; exit 2; } ;;
    -h | --help) usage; exit 0 ;;
    *) echo "device_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$device" in cpu | cuda) ;; *) echo "device_check: --device must be cpu or cuda, got '$device'" >&2; exit 2 ;; esac
case "$deadline" in '' | *[!0-9]*) echo "device_check: --deadline must be whole seconds, got '$deadline'" >&2; exit 2 ;; esac

if [ "$fetch" = 1 ]; then
    # The GPU machine has Python 3.12 and torch, numpy, pandas, rich, matplotlib, numba, pytest-benchmark; not these.
    mkdir -p "$repo/.whl"
    platforms=()
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
        platforms+=(--platform "$p")
    done
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
        -d "$repo/.whl" gymnasium==1.4.0 farama-notifications==0.0.6 pyinstrument==5.1.3 "setuptools>=77" || exit 1
    ls "$repo/.whl"
    exit 0
fi

start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/rlbench-device-check.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'echo "device_check: interrupted" >&2; exit 130' INT TERM
mkdir -p "$out" "$work/reports" "$work/run"
log=$out/device-check-$device.log
steps=$work/steps.tsv
: >"$log"
: >"$steps"
failed=0

# step NAME LIMIT_S CMD...: run CMD from a scratch folder (so a checkout's rlbench/ never shadows the installed one),
# under min(LIMIT_S, what is left of the deadline); its output goes to the log; status and seconds to steps.tsv.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((deadline - ($(date +%s) - start) - 20))
    if [ "$left" -lt 15 ]; then
        printf '%s\tskipped (deadline)\t0\t%s\n' "$name" "$*" >>"$steps"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (limit ${limit}s): $*" | tee -a "$log"
    local t0 rc
    t0=$(date +%s.%N)
    (cd "$work/run" && timeout --kill-after=10 "$limit" "$@") >>"$log" 2>&1
    rc=$?
    local secs
    secs=$("$py" -c "import time; print(f'{time.time() - $t0:.1f}')")
    local status=ok
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        status="timed out after ${limit}s"
        failed=1
    elif [ "$rc" != 0 ]; then
        status="failed (exit $rc)"
        failed=1
    fi
    echo "=== $name: $status in ${secs}s" | tee -a "$log"
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$secs" "$*" >>"$steps"
}

# --- install: the carried wheels, then rlbench itself, editable (the C hooks are built in place) ---
if [ "$install" = 1 ] && compgen -G "$repo/.whl/*.whl" >/dev/null; then
    step install-wheels 120 "$py" -m pip install -q --no-index --find-links "$repo/.whl" --no-deps \
        gymnasium farama-notifications pyinstrument
    # build isolation takes setuptools from .whl; the C hooks are optional (no compiler or headers: Python hooks)
    step install-rlbench 180 "$py" -m pip install -v --no-index --find-links "$repo/.whl" --no-deps -e "$repo"
fi
hooks=$(cd "$work/run" && "$py" -c "import rlbench.profiling._fastevent" 2>/dev/null && echo compiled || echo python)

if [ "$quick" = 1 ]; then
    ppo=(--total-steps 2048 --repeats 1)
    sac=(--total-steps 300 --learning-starts 256 --eval-episodes 2 --repeats 1)
    cleanrl=(--total-timesteps 2048)
    offpolicy=(dqn:600 td3:600 sac:600)
    # not the peer libraries' GAE (SB3, rlox, TorchRL): the GPU machine has none of them (skipped there), and here
    # they would only add their imports to the dry run
    micro=(--group gae --max-time 0.01 --select "not peer")
else
    ppo=(--repeats 3)
    sac=(--repeats 3)
    cleanrl=(--total-timesteps 50000)
    offpolicy=(dqn:12000 td3:4000 sac:2500)
    micro=(--max-time 0.1)
fi
cuda_flag=()
[ "$device" = cuda ] && cuda_flag=(--cuda)
r=$work/reports

# --- the matrix, the most telling first ---
[ "$device" = cuda ] && step gpu-info 30 nvidia-smi
# (not hypothesis's pytest plugin where it is installed: unused here, it imports all of hypothesis at the end, ~1 s)
step sync-test 200 "$py" -m pytest -p no:cacheprovider -p no:hypothesispytest -q -rfEsp "$repo/tests/profiling/test_cuda_sync.py"
step ppo-cartpole 150 "$py" -m rlbench run ppo-cartpole --device "$device" "${ppo[@]}" --store "$r/records-ppo-cartpole-$device" \
    --report "$r/ppo-cartpole-$device.md" --quiet --json
step sac-pendulum 200 "$py" -m rlbench run sac-pendulum --device "$device" "${sac[@]}" --store "$r/records-sac-pendulum-$device" \
    --report "$r/sac-pendulum-$device.md" --quiet --json
if [ "$device" = cuda ]; then
    step profile-sync 120 "$py" -m rlbench profile --sync --store "$r/records-profile-cleanrl-$device" \
        --report "$r/profile-cleanrl-ppo-$device.md" --json -- "$py" "$repo/suites/scripts/cleanrl_ppo.py" \
        "${cuda_flag[@]}" "${cleanrl[@]}"
fi
step profile-nosync 120 "$py" -m rlbench profile --store "$r/records-profile-cleanrl-nosync-$device" \
    --report "$r/profile-cleanrl-ppo-nosync-$device.md" --json -- "$py" "$repo/suites/scripts/cleanrl_ppo.py" \
    "${cuda_flag[@]}" "${cleanrl[@]}"
# the off-policy scripts: CleanRL-style DQN, TD3 and SAC, timing synchronized on a GPU
sync_flag=()
[ "$device" = cuda ] && sync_flag=(--sync)
for spec in "${offpolicy[@]}"; do
    algo=${spec%%:*}
    step "profile-$algo" 100 "$py" -m rlbench profile "${sync_flag[@]}" --store "$r/records-profile-cleanrl-$algo-$device" \
        --report "$r/profile-cleanrl-$algo-$device.md" --json -- "$py" "$repo/suites/scripts/cleanrl_$algo.py" \
        "${cuda_flag[@]}" --total-timesteps "${spec##*:}"
done
if [ "$device" = cuda ]; then
    # the same benchmarks on this host's CPU: a GPU-against-CPU ratio measured on one machine
    step ppo-cartpole-host-cpu 100 "$py" -m rlbench run ppo-cartpole --device cpu "${ppo[@]}" --store "$r/records-host-cpu" --quiet --json
    step sac-pendulum-host-cpu 150 "$py" -m rlbench run sac-pendulum --device cpu "${sac[@]}" --store "$r/records-host-cpu" --quiet --json
fi
step micro 240 "$py" -m rlbench run micro "${micro[@]}" --store "$work/records-micro" --report "$r/micro-$device.md" --quiet

# --- the summary: what ran, where, how long, what it measured ---
commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo "unknown (no git here)")
[ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit (dirty)"
"$py" - "$steps" "$log" "$out/device-check-$device.md" "$device" "$hooks" "$quick" "$commit" <<'PY'
import json, platform, re, subprocess, sys
from pathlib import Path

steps_path, log_path, dest, device, hooks, quick, commit = sys.argv[1:]
log = Path(log_path).read_text(errors="replace")
rows = [line.split("\t", 3) for line in Path(steps_path).read_text().splitlines() if line]


def first_json(name):
    """The JSON object a step printed (its --json summary), or None."""
    part = log.split(f"=== {name} (limit", 1)
    if len(part) < 2:
        return None
    body = part[1].split("\n=== ", 1)[0]
    for line in body.splitlines():
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def cpu_line():
    """The machine as every record names it (rlbench's own fingerprint), or what Python knows if rlbench is broken."""
    try:
        from rlbench.results.fingerprint import cpu_label, machine_fingerprint

        m = machine_fingerprint()
        return f"{cpu_label(m)}, {m['cores']} cores; machine id `{m['id']}`"
    except Exception as exc:  # noqa: BLE001 - the summary must be written whatever broke
        return f"{platform.processor() or platform.machine()} (rlbench not importable: {exc})"


try:
    import torch

    soft = f"Python {platform.python_version()}, torch {torch.__version__}"
    gpu = (
        f"{torch.cuda.get_device_name(0)} (compute capability {'.'.join(map(str, torch.cuda.get_device_capability(0)))}, "
        f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
        if torch.cuda.is_available()
        else "none visible to torch"
    )
except Exception as exc:  # noqa: BLE001 - the summary must be written whatever broke
    soft, gpu = f"Python {platform.python_version()}, torch not importable ({exc})", "unknown"
try:
    driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
    ).stdout.strip()
except (OSError, subprocess.SubprocessError):
    driver = ""
lines = [
    f"# Device check: `{device}`" + (" (quick dry run)" if quick == "1" else ""),
    "",
    "Written by `suites/scripts/device_check.sh`; every figure below was measured in this run, on this machine.",
    "",
    "|  |  |",
    "|---|---|",
    f"| CPU | {cpu_line()} |",
    f"| GPU | {gpu}{', driver ' + driver if driver else ''} |",
    f"| Software | {soft} |",
    f"| Profiler hooks | {hooks} |",
    f"| Commit | {commit} |",
    "",
    "| Step | Status | Seconds | Command |",
    "|---|---|---|---|",
]
for name, status, secs, cmd in rows:
    cmd = re.sub(r"/\S*/rlbench-device-check\.\w+/", "", cmd)
    lines.append(f"| {name} | {status} | {secs} | `{cmd}` |")

sps = []
for name, _, _, _ in rows:
    out = first_json(name)
    if out and "sps" in out:
        ev = out.get("eval_return")
        sps.append(
            f"| {name} | {out.get('device', '')} | {out['sps']:,.0f} | {out.get('repeats', '')} | "
            f"{'' if ev is None else f'{ev:.1f}'} |"
        )
if sps:
    lines += ["", "| Run | Device | SPS (median over repeats) | Repeats | Eval return |", "|---|---|---|---|---|", *sps]
section = log.split("=== sync-test (limit", 1)[-1].split("\n=== ", 1)[0] if "=== sync-test (limit" in log else ""
tests = re.findall(r"^(?:PASSED|FAILED|SKIPPED|ERROR).*$|^=* ?\d+ (?:passed|failed|skipped|error).*$", section, re.M)
if tests:
    lines += ["", "Sync test (`tests/profiling/test_cuda_sync.py`):", "", *[f"    {t}" for t in tests]]
Path(dest).write_text("\n".join(lines) + "\n", encoding="utf-8")
print("\n".join(lines))
PY

cp "$out/device-check-$device.md" "$work/reports/" 2>/dev/null
tar czf "$out/device-check-$device.tar.gz" -C "$work" reports
echo "device_check: $(($(date +%s) - start))s; results in $out"
exit "$failed"
