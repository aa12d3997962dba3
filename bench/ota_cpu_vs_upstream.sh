#!/usr/bin/env bash
# YOLOv7's OTA loss against its plain loss, upstream against kestrel, same machine, same run.
# Manual benchmark: not part of the build, CI or tests. Run it on an otherwise idle machine.
#
# What it measures: ms per training step (forward, loss, backward, SGD step, EMA update) of yolov7-tiny
# (nc 80), fp32 on the CPU, batch BATCH, IMG px, one synthetic batch reused every step (images uniform
# in 0..1, TARGETS boxes per image: uniform class and centre, sides 2-40 % of the image), WARMUP untimed
# steps then STEPS timed ones, with (a) the plain YOLOv5-style loss and (b) YOLOv7's OTA loss, on each side:
#   upstream: bench/upstream_ota_step_bench.py (ours; it only imports upstream's models.yolo.Model,
#             utils.loss.ComputeLoss / ComputeLossOTA and utils.torch_utils.ModelEMA) with
#             cfg/training/yolov7-tiny.yaml and data/hyp.scratch.tiny.yaml set up as train.py does
#             (hyp box/cls/obj scaled for nl, nc and img, model.gr = 1.0, its three SGD groups);
#             it also reports the time of the loss call alone (target assignment + loss terms).
#   kestrel:  build/kestrel bench train --cfg yolov7-tiny --batch-size BATCH --img IMG --device cpu
#             --steps STEPS --warmup WARMUP [--ota] --json
# Each run is its own process (one model, one loss). The four runs alternate: upstream plain,
# upstream OTA, kestrel plain, kestrel OTA, for REPEATS rounds. Before each run the script prints
# `uptime`; if the 1-minute load is above LOAD_MAX it waits (30 s steps) until it drops, at most
# MAX_WAIT seconds over the whole run, then runs anyway and says so. It also reports the share of the
# CPUs other processes took during each run (from /proc/stat), since the load average lags.
# Each run raises the 1-minute load itself (to about the thread count), so with the default LOAD_MAX the
# script usually waits a minute or two between runs even on an idle machine.
# With another process holding a core, two OpenMP threads stall (steps varied tenfold within one run on
# the 2-core dev VM); there, THREADS=1 MAX_WAIT=0 gives repeatable figures on the free core.
# Recorded runs: docs/benchmarks.md ("OTA against the plain loss on the CPU, upstream YOLOv7 against kestrel").
#
# Upstream environment (once):
#   fetch WongKinYiu/yolov7 (the figures in docs/benchmarks.md: commit a207844, 2023-11-03) and unpack
#   its tree, e.g. from a bare mirror:
#     mkdir -p /tmp/yolov7 && git --git-dir=<mirror> archive HEAD -- . ':(exclude)paper/yolov7.pdf' | tar -x -C /tmp/yolov7
#     git --git-dir=<mirror> rev-parse HEAD > /tmp/yolov7/.upstream-commit
#   (exclude any large file the mirror lacks: paper/, tools/*.ipynb); a clone works as well.
#   Python: the venv of bench/train_cpu_vs_upstream.sh (/tmp/upstream-venv: the torch 2.11.0 wheel
#   kestrel links, numpy, opencv-python-headless, pyyaml, scipy, pandas, matplotlib, seaborn, tqdm).
#   The driver aliases np.int/np.float/np.bool if numpy lacks them; upstream files are not edited.
#
# Usage:
#   bench/ota_cpu_vs_upstream.sh
#   REPEATS=3 THREADS=1 bench/ota_cpu_vs_upstream.sh
# Environment (defaults in brackets):
#   UPSTREAM_DIR     yolov7 source tree [/tmp/yolov7]
#   UPSTREAM_PYTHON  its Python [/tmp/upstream-venv/bin/python]
#   UPSTREAM_COMMIT  shown in the report [git rev-parse in UPSTREAM_DIR, else UPSTREAM_DIR/.upstream-commit]
#   KESTREL_BIN      [build/kestrel]
#   BATCH [8]  IMG [320]  TARGETS (boxes per image) [32]  STEPS (timed) [4]  WARMUP [1]
#   REPEATS          rounds of the four runs [2]
#   THREADS          if set, OMP_NUM_THREADS/MKL_NUM_THREADS for both sides [unset: torch's default,
#                    which both sides share: the same torch 2.11.0 build]
#   LOAD_MAX         wait while the 1-minute load is above this [1.5]
#   MAX_WAIT         seconds of waiting for the load, whole run [600]
#   WORK             folder for the logs [mktemp -d /tmp/kestrel-otabench.XXXXXX]
#   SIDES            "upstream kestrel", or one of them [both]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

UPSTREAM_DIR=${UPSTREAM_DIR:-/tmp/yolov7}
UPSTREAM_PYTHON=${UPSTREAM_PYTHON:-/tmp/upstream-venv/bin/python}
KESTREL_BIN=${KESTREL_BIN:-build/kestrel}
BATCH=${BATCH:-8}
IMG=${IMG:-320}
TARGETS=${TARGETS:-32}
STEPS=${STEPS:-4}
WARMUP=${WARMUP:-1}
REPEATS=${REPEATS:-2}
LOAD_MAX=${LOAD_MAX:-1.5}
MAX_WAIT=${MAX_WAIT:-600}
SIDES=${SIDES:-upstream kestrel}
say() { printf '\033[1mbench:\033[0m %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[[ " $SIDES " == *" upstream "* ]] && DO_UP=1 || DO_UP=0
[[ " $SIDES " == *" kestrel "* ]] && DO_KS=1 || DO_KS=0
if ((DO_UP)); then
  [ -f "$UPSTREAM_DIR/utils/loss.py" ] && [ -f "$UPSTREAM_DIR/cfg/training/yolov7-tiny.yaml" ] \
    || die "UPSTREAM_DIR=$UPSTREAM_DIR is not a yolov7 tree (see the header)"
  [ -x "$UPSTREAM_PYTHON" ] || die "UPSTREAM_PYTHON=$UPSTREAM_PYTHON is not executable"
  UPSTREAM_DIR=$(cd "$UPSTREAM_DIR" && pwd)
fi
if ((DO_KS)); then
  [ -x "$KESTREL_BIN" ] || die "$KESTREL_BIN not found: build kestrel first (scripts/setup.sh)"
  KESTREL_BIN=$(cd "$(dirname "$KESTREL_BIN")" && pwd)/$(basename "$KESTREL_BIN")
fi
if [ -n "${THREADS:-}" ]; then export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS; fi

WORK=${WORK:-$(mktemp -d /tmp/kestrel-otabench.XXXXXX)}
mkdir -p "$WORK/logs"
WORK=$(cd "$WORK" && pwd)

load1() { cut -d' ' -f1 /proc/loadavg; }
busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }  # user nice system irq softirq steal
waited=0
loaded_runs=0
# wait_for_quiet: waits while the 1-minute load exceeds LOAD_MAX, within the MAX_WAIT budget.
wait_for_quiet() {
  while awk -v l="$(load1)" -v m="$LOAD_MAX" 'BEGIN { exit !(l + 0 > m + 0) }'; do
    if ((waited >= MAX_WAIT)); then
      say "load $(load1) > $LOAD_MAX, wait budget (${MAX_WAIT}s) spent: running anyway"
      loaded_runs=$((loaded_runs + 1))
      return
    fi
    say "load $(load1) > $LOAD_MAX: waiting 30 s (waited ${waited}s of ${MAX_WAIT}s)"
    sleep 30
    waited=$((waited + 30))
  done
}
run_upstream() {  # plain|ota
  "$UPSTREAM_PYTHON" "$REPO/bench/upstream_ota_step_bench.py" --upstream-dir "$UPSTREAM_DIR" \
    --cfg cfg/training/yolov7-tiny.yaml --hyp data/hyp.scratch.tiny.yaml --loss "$1" --nc 80 \
    --batch-size "$BATCH" --img "$IMG" --targets "$TARGETS" --steps "$STEPS" --warmup "$WARMUP"
}
run_kestrel() {  # plain|ota
  local ota=(); [[ $1 == ota ]] && ota=(--ota)
  "$KESTREL_BIN" bench train --cfg yolov7-tiny --batch-size "$BATCH" --img "$IMG" --device cpu \
    --targets "$TARGETS" --steps "$STEPS" --warmup "$WARMUP" "${ota[@]}" --json
}

# ---- versions ----
up_commit=${UPSTREAM_COMMIT:-}
if ((DO_UP)); then
  if [ -z "$up_commit" ]; then
    if [ -e "$UPSTREAM_DIR/.git" ]; then up_commit=$(git -C "$UPSTREAM_DIR" rev-parse --short HEAD 2>/dev/null) || true
    elif [ -f "$UPSTREAM_DIR/.upstream-commit" ]; then up_commit=$(cut -c1-7 "$UPSTREAM_DIR/.upstream-commit"); fi
    up_commit=${up_commit:-unknown}
  fi
  up_versions=$("$UPSTREAM_PYTHON" -c 'import sys, torch, numpy
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, numpy {numpy.__version__}, {torch.get_num_threads()} torch threads")')
fi
ks_commit="HEAD $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD -- src 2>/dev/null || ks_commit="$ks_commit (+ uncommitted changes in src/)"
if ((DO_KS)); then
  ks_commit="$ks_commit, binary built $(date -u -r "$KESTREL_BIN" '+%Y-%m-%d %H:%M UTC')"
  ks_env=$("$KESTREL_BIN" env 2>&1) || die "$KESTREL_BIN env failed"
  ks_versions="kestrel $(awk '/^kestrel/ {print $2}' <<<"$ks_env"), libtorch $(awk '/^libtorch/ {print $2}' <<<"$ks_env"), $(awk '/^cpu threads/ {print $3}' <<<"$ks_env") torch threads"
fi

# ---- measurement: the four runs alternate ----
declare -a rows=()
declare -A ms_all=()
for ((r = 1; r <= REPEATS; r++)); do
  for run in upstream:plain upstream:ota kestrel:plain kestrel:ota; do
    side=${run%%:*} loss=${run#*:}
    [[ $side == upstream ]] && ((!DO_UP)) && continue
    [[ $side == kestrel ]] && ((!DO_KS)) && continue
    wait_for_quiet
    t_start=$(date '+%H:%M:%S')
    l=$(awk '{print $1 " " $2 " " $3}' /proc/loadavg)
    say "$side $loss: round $r/$REPEATS at $t_start; uptime: $(uptime)"
    log="$WORK/logs/$side-$loss-r$r.log"
    busy0=$(busy_jiffies)
    TIMEFORMAT='%R %U %S'
    if ! { time "run_$side" "$loss" >"$log" 2>&1; } 2>"$log.time"; then tail -n 30 "$log" >&2; die "$side $loss round $r failed (log: $log)"; fi
    busy1=$(busy_jiffies)
    # CPU time of other processes during the run, as a share of all cores: the machine's busy time
    # (/proc/stat) minus this run's own user+system time.
    others=$(awk -v b0="$busy0" -v b1="$busy1" -v hz="$(getconf CLK_TCK)" -v n="$(getconf _NPROCESSORS_ONLN)" '{ own = $2 + $3
      printf "%.0f%%", 100 * ((b1 - b0) / hz - own) / ($1 * n) }' "$log.time")
    extra=""
    if [[ $side == upstream ]]; then
      ms=$(sed -n 's/^result: .* ms_per_step=\([0-9.]*\).*/\1/p' "$log")
      lm=$(sed -n 's/^result: .*loss_ms_per_step=\([0-9.]*\).*/\1/p' "$log")
      extra="loss call ${lm} ms/step"
    else
      ms=$(grep -o '"ms_per_step":[0-9.]*' "$log" | cut -d: -f2)
    fi
    [ -n "$ms" ] || { tail -n 30 "$log" >&2; die "no ms/step in $log"; }
    say "$side $loss: round $r: $(printf '%.0f' "$ms") ms/step; other processes used $others of the CPUs during it"
    rows+=("$side|$loss|$r|$t_start|$l|$others|$ms|$extra")
    ms_all[$side:$loss]="${ms_all[$side:$loss]:-} $ms"
  done
done
load_after=$(uptime)

# ---- report ----
mean() { awk -v v="$1" 'BEGIN { n = split(v, a, " "); t = 0; for (i = 1; i <= n; i++) t += a[i]; printf "%.1f", t / n }'; }
range() { awk -v v="$1" 'BEGIN { n = split(v, a, " "); mn = 1e18; mx = 0
  for (i = 1; i <= n; i++) { if (a[i] + 0 < mn) mn = a[i] + 0; if (a[i] + 0 > mx) mx = a[i] + 0 }; printf "%.0f-%.0f", mn, mx }'; }
echo
echo "Training step, yolov7-tiny (nc 80), fp32 CPU, batch $BATCH, ${IMG} px, $TARGETS boxes/image, $WARMUP warm-up + $STEPS timed steps per run"
echo "date        $(date '+%Y-%m-%d %H:%M:%S %Z')"
echo "cpu         $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(getconf _NPROCESSORS_ONLN); OMP/MKL threads: ${THREADS:-torch default}"
echo "load after  load average${load_after#*load average}; waited ${waited}s for the load in all; $loaded_runs run(s) started above load $LOAD_MAX after the wait budget"
((DO_UP)) && echo "upstream    WongKinYiu/yolov7 $up_commit; $up_versions"
((DO_KS)) && echo "kestrel     $ks_commit; $ks_versions"
echo
printf '%-9s %-5s %5s %9s %-16s %7s %10s  %s\n' side loss round start "load 1/5/15" others "ms/step" notes
for row in "${rows[@]}"; do
  IFS='|' read -r side loss r t l others ms extra <<<"$row"
  printf '%-9s %-5s %5s %9s %-16s %7s %10.0f  %s\n' "$side" "$loss" "$r" "$t" "$l" "$others" "$ms" "$extra"
done
echo
for side in upstream kestrel; do
  for loss in plain ota; do
    v=${ms_all[$side:$loss]:-}
    [ -n "$v" ] && printf '%-9s %-5s mean %8s ms/step (range %s)\n' "$side" "$loss" "$(mean "$v")" "$(range "$v")"
  done
done
ratio() { awk -v a="$(mean "$1")" -v b="$(mean "$2")" 'BEGIN { printf "%.2f", a / b }'; }
per_round() {  # values A, values B: the ratio A/B per round
  awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); split(b, y, " "); s = ""
    for (i = 1; i <= n; i++) s = s sprintf("%s%.2f", (i > 1 ? " " : ""), x[i] / y[i]); print s }'
}
echo
for side in upstream kestrel; do
  p=${ms_all[$side:plain]:-} o=${ms_all[$side:ota]:-}
  [ -n "$p" ] && [ -n "$o" ] && echo "$side OTA / plain: $(ratio "$o" "$p")x (means; per round: $(per_round "$o" "$p"))"
done
for loss in plain ota; do
  u=${ms_all[upstream:$loss]:-} k=${ms_all[kestrel:$loss]:-}
  [ -n "$u" ] && [ -n "$k" ] && echo "kestrel / upstream, $loss: $(ratio "$k" "$u")x time per step (means; per round: $(per_round "$k" "$u"); below 1: kestrel faster)"
done
awk -v m="$LOAD_MAX" -v rows="$(printf '%s\n' "${rows[@]}" | cut -d'|' -f5 | cut -d' ' -f1 | paste -sd' ')" \
  'BEGIN { n = split(rows, a, " "); for (i = 1; i <= n; i++) if (a[i] + 0 > m + 0) { printf "note: some runs started with a 1-minute load above %s: noisy\n", m; exit } }'
echo "others: CPU time of other processes during the run (machine busy time from /proc/stat minus the run's own), % of all cores"
echo "logs: $WORK/logs"
