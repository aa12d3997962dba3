#!/usr/bin/env bash
# Data loader throughput, same machine, same run: upstream YOLOv5's training loader (ultralytics/yolov5
# v7.0, run as an external program, for measurement only) against `kestrel bench data`.
# Manual benchmark: not part of the build, CI or tests. Run it on an otherwise idle machine.
#
# What it measures: images/s of the training loader alone (no model, no step), hyp.scratch-low
# augmentations (mosaic 1.0, random perspective with translate 0.1 and scale 0.5, HSV, left-right
# flips), 640 px, batch 16, 2 workers, RAM cache, the train split of coco128 (128 images) used REPEAT
# times per epoch (512 images), EPOCHS epochs; the first epoch separate (kestrel fills its RAM cache
# during it; upstream fills its cache while building the dataset, timed apart as "build").
#   upstream: bench/upstream_loader_bench.py (ours; it only imports upstream's
#             utils.dataloaders.create_dataloader) builds the loader with train.py's arguments:
#             create_dataloader(<train dir>, 640, 16, 32, hyp=hyp.scratch-low, augment=True,
#             cache='ram', rect=False, rank=-1, workers=2, shuffle=True). Upstream's label cache is
#             keyed by file name, so a list naming each image 4 times collapses to 128 images: one
#             epoch there is REPEAT passes of its InfiniteDataLoader back to back (same worker
#             processes, prefetching across passes), i.e. the same 512 samples of work.
#             Workers are processes (torch DataLoader, fork), each with torch.set_num_threads(1) and
#             cv2.setNumThreads(0) (upstream's utils/general.py); batches come back through shared
#             memory; pin_memory is off without CUDA.
#   kestrel:  build/kestrel bench data --data <copy>/coco128.yaml --hyp <upstream's hyp.scratch-low.yaml>
#             --img 640 --batch-size 16 --workers 2 --epochs 3 --repeat 4 --cache ram
#             (workers are threads in one process; --hyp is the same file, equal to kestrel's defaults).
# The two sides alternate (upstream, kestrel, upstream, kestrel, ...: REPEATS pairs). Before each run the
# script prints `uptime`; if the 1-minute load is above LOAD_MAX it waits (30 s steps) until it drops,
# at most MAX_WAIT seconds over the whole run, then runs anyway and marks the row as loaded.
# It also reports how much CPU other processes took during each run (from /proc/stat), since the
# load average lags.
# Both sides read one copy of coco128 under the work folder (each writes its label cache next to it:
# upstream labels/train2017.cache, kestrel labels/train2017.kestrel.cache).
#
# Upstream environment: the same as bench/train_cpu_vs_upstream.sh (see its header: yolov5 v7.0 915bbf2
# unpacked in /tmp/yolov5, venv /tmp/upstream-venv with the torch 2.11.0 wheel kestrel links,
# opencv-python-headless and upstream's minimal requirements).
#
# Usage:
#   bench/data_cpu_vs_upstream.sh
# Environment (defaults in brackets):
#   UPSTREAM_DIR     yolov5 v7.0 source tree [/tmp/yolov5]
#   UPSTREAM_PYTHON  its Python [/tmp/upstream-venv/bin/python]
#   UPSTREAM_COMMIT  shown in the report [git describe in UPSTREAM_DIR, else UPSTREAM_DIR/.upstream-commit]
#   KESTREL_BIN      [build/kestrel]
#   DATASET          coco128 folder to copy (images/, labels/, coco128.yaml) [../shared/datasets/coco128,
#                    else /work/shared/datasets/coco128]
#   EPOCHS           timed epochs per run [3]
#   REPEAT           passes of the split per epoch [4]
#   REPEATS          pairs of runs (upstream then kestrel) [2]
#   THREADS          if set, OMP_NUM_THREADS/MKL_NUM_THREADS for both sides [unset: torch's default]
#   LOAD_MAX         wait while the 1-minute load is above this [1.5]
#   MAX_WAIT         seconds of waiting for the load, whole run [1200]
#   WORK             work folder (dataset copy, logs) [mktemp -d /tmp/kestrel-databench.XXXXXX]
#   SIDES            "upstream kestrel", or one of them [both]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
. "$REPO/bench/lib/compare.sh"
compare_defaults /tmp/yolov5

EPOCHS=${EPOCHS:-3}
REPEAT=${REPEAT:-4}
REPEATS=${REPEATS:-2}
LOAD_MAX=${LOAD_MAX:-1.5}
MAX_WAIT=${MAX_WAIT:-1200}
BATCH=16 IMG=640 WORKERS=2 CACHE=ram

((EPOCHS >= 2)) || die "EPOCHS ($EPOCHS) must be at least 2 (the first epoch is reported apart)"
[ -f "$DATASET/coco128.yaml" ] && [ -d "$DATASET/images/train2017" ] || die "DATASET=$DATASET is not a coco128 folder"
compare_setup kestrel-databench utils/dataloaders.py

# ---- dataset: one copy of coco128 (both sides write label caches next to the labels) ----
rm -rf "$WORK/coco128"
cp -r "$DATASET" "$WORK/coco128"
rm -f "$WORK"/coco128/labels/*.cache
NIMG=$(find "$WORK/coco128/images/train2017" -maxdepth 1 -type f | wc -l)
# upstream resolves a relative `path:` against its own folder, so both sides get an absolute one.
{ printf 'path: %s\ntrain: images/train2017\nval: images/val2017\n' "$WORK/coco128"; sed -n '/^nc:/,$p' "$DATASET/coco128.yaml"; } >"$WORK/coco128.yaml"
HYP=$UPSTREAM_DIR/data/hyps/hyp.scratch-low.yaml
ks_hyp=(); [ -f "$HYP" ] && ks_hyp=(--hyp "$HYP")  # kestrel's defaults are hyp.scratch-low's values

# ---- upstream quirks, handled without touching its code (bench/lib/compare.sh make_up_env) ----
make_up_env

run_upstream() {  # R
  (cd "$UPSTREAM_DIR" && "${up_env[@]}" "$UPSTREAM_PYTHON" "$REPO/bench/upstream_loader_bench.py" \
     --upstream-dir "$UPSTREAM_DIR" --data "$WORK/coco128.yaml" --hyp "$HYP" --img $IMG --batch-size $BATCH \
     --workers $WORKERS --epochs "$EPOCHS" --repeat "$REPEAT" --cache $CACHE)
}
run_kestrel() {  # R
  (cd "$REPO" && "$KESTREL_BIN" bench data --data "$WORK/coco128.yaml" "${ks_hyp[@]}" --img $IMG \
     --batch-size $BATCH --workers $WORKERS --epochs "$EPOCHS" --repeat "$REPEAT" --cache $CACHE)
}

# ---- versions and machine ----
((DO_UP)) && up_commit=$(upstream_commit)
# ---- warm-up, untimed: page cache for the libraries, upstream's .pyc files; the label caches ----
if ((DO_UP)); then
  say "upstream: checking the environment"
  (cd "$UPSTREAM_DIR" && "${up_env[@]}" "$UPSTREAM_PYTHON" -c 'import utils.dataloaders' >"$WORK/logs/upstream-import.log" 2>&1) \
    || { cat "$WORK/logs/upstream-import.log" >&2; die "cannot import upstream utils.dataloaders with $UPSTREAM_PYTHON"; }
  up_versions=$("$UPSTREAM_PYTHON" -c 'import sys, torch, cv2, numpy
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, opencv-python {cv2.__version__}, numpy {numpy.__version__}")')
fi
if ((DO_KS)); then
  ks_versions=$(kestrel_versions)
  # OpenCV's version from the file the binary loads (libopencv_core.so.406 -> libopencv_core.so.4.6.0)
  ocv=$(ldd "$KESTREL_BIN" 2>/dev/null | awk '/libopencv_core/ {print $3; exit}') || true
  [ -n "$ocv" ] && ocv=$(readlink -f "$ocv" | sed -n 's/.*libopencv_core\.so\.\([0-9][0-9.]*\)$/OpenCV \1/p')
  [ -n "$ocv" ] && ks_versions="$ks_versions, $ocv"
fi

# ---- measurement: the sides alternate ----
declare -a rows=()
for ((r = 1; r <= REPEATS; r++)); do
  for side in upstream kestrel; do
    [[ $side == upstream ]] && ((!DO_UP)) && continue
    [[ $side == kestrel ]] && ((!DO_KS)) && continue
    wait_for_quiet
    t_start=$(date '+%H:%M:%S')
    up=$(uptime)
    l=$(awk '{print $1 " " $2 " " $3}' /proc/loadavg)
    say "$side: run $r/$REPEATS at $t_start; uptime: $up"
    log="$WORK/logs/$side-r$r.log"
    timed_run "$log" "run_$side" "$r"
    others=$OTHERS
    say "$side: run $r: other processes used $others of the CPUs during it"
    rates=$(sed -n 's/^epoch [0-9]*: .* = \([0-9.]*\) images\/s.*/\1/p' "$log" | paste -sd' ')
    [ -n "$rates" ] || { tail -n 30 "$log" >&2; die "no epoch lines in $log"; }
    extra=""
    if [[ $side == upstream ]]; then
      b=$(grep -o 'build_seconds=[0-9.]*' "$log" | cut -d= -f2)
      w=$(sed -n 's/.*with the [0-9.]* s build: \([0-9.]*\) images\/s.*/\1/p' "$log")
      c=$(grep -o 'ram_cached_images=[0-9]*' "$log" | cut -d= -f2)
      extra="build ${b}s (label cache + RAM cache of $c images), epoch 1 with build $w images/s"
    fi
    grep '^epoch' "$log" | sed "s/^/  $side r$r: /" >&2
    rows+=("$side|$r|$t_start|$l|$others|$rates|$extra")
  done
done
load_after=$(uptime)

# ---- report ----
echo
echo "Loader throughput: coco128 train ($NIMG images) x $REPEAT per epoch, ${IMG} px, batch $BATCH, $WORKERS workers, cache $CACHE, hyp.scratch-low"
echo "date        $(date '+%Y-%m-%d %H:%M:%S %Z')"
echo "cpu         $(cpu_line)"
echo "load after  load average${load_after#*load average}; waited ${waited}s for the load in all"
((DO_UP)) && echo "upstream    yolov5 $up_commit; $up_versions; 2 worker processes (1 torch thread, OpenCV threads off, each)"
((DO_KS)) && echo "kestrel     $ks_versions; 2 worker threads"
echo
printf '%-9s %3s %9s %-16s %7s %9s %-24s %s\n' side run start "load 1/5/15" others "epoch 1" "epochs 2+ (images/s)" notes
declare -A steady_all
for row in "${rows[@]}"; do
  IFS='|' read -r side r t l others rates extra <<<"$row"
  read -r first rest <<<"$rates"
  printf '%-9s %3s %9s %-16s %7s %9s %-24s %s\n' "$side" "$r" "$t" "$l" "$others" "$first" "$rest" "$extra"
  steady_all[$side]="${steady_all[$side]:-} $rest"
done
echo
for side in upstream kestrel; do
  [ -n "${steady_all[$side]:-}" ] || continue
  awk -v s="$side" -v v="${steady_all[$side]}" 'BEGIN { n = split(v, a, " "); mn = 1e9; mx = 0; t = 0
    for (i = 1; i <= n; i++) { t += a[i]; if (a[i] < mn) mn = a[i]; if (a[i] > mx) mx = a[i] }
    printf "%-9s epochs 2+: %d epochs, %.1f-%.1f images/s, mean %.1f\n", s, n, mn, mx, t / n }'
done
if [ -n "${steady_all[upstream]:-}" ] && [ -n "${steady_all[kestrel]:-}" ]; then
  awk -v u="${steady_all[upstream]}" -v k="${steady_all[kestrel]}" 'BEGIN {
    nu = split(u, a, " "); nk = split(k, b, " "); su = 0; sk = 0
    for (i = 1; i <= nu; i++) su += a[i]; for (i = 1; i <= nk; i++) sk += b[i]
    printf "kestrel / upstream (means of epochs 2+): %.2fx\n", (sk / nk) / (su / nu) }'
fi
note_loaded_rows "$(printf '%s\n' "${rows[@]}" | cut -d'|' -f4 | cut -d' ' -f1 | paste -sd' ')"
echo "logs: $WORK/logs"
