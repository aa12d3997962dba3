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
. "$REPO/bench/lib/compare.sh"
compare_defaults /tmp/yolov7

BATCH=${BATCH:-8}
IMG=${IMG:-320}
TARGETS=${TARGETS:-32}
STEPS=${STEPS:-4}
WARMUP=${WARMUP:-1}
REPEATS=${REPEATS:-2}
LOAD_MAX=${LOAD_MAX:-1.5}
MAX_WAIT=${MAX_WAIT:-600}

compare_setup kestrel-otabench utils/loss.py cfg/training/yolov7-tiny.yaml

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
if ((DO_UP)); then
  up_commit=$(upstream_commit)
  up_versions=$("$UPSTREAM_PYTHON" -c 'import sys, torch, numpy
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, numpy {numpy.__version__}, {torch.get_num_threads()} torch threads")')
fi
((DO_KS)) && ks_versions=$(kestrel_versions)

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
    timed_run "$log" "run_$side" "$loss"
    others=$OTHERS
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
echo "cpu         $(cpu_line); OMP/MKL threads: ${THREADS:-torch default}"
echo "load after  load average${load_after#*load average}; waited ${waited}s for the load in all; $loaded_runs run(s) started above load $LOAD_MAX after the wait budget"
((DO_UP)) && echo "upstream    WongKinYiu/yolov7 $up_commit; $up_versions"
((DO_KS)) && echo "kestrel     $ks_versions"
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
note_loaded_rows "$(printf '%s\n' "${rows[@]}" | cut -d'|' -f5 | cut -d' ' -f1 | paste -sd' ')"
echo "logs: $WORK/logs"
