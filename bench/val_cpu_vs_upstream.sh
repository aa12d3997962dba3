#!/usr/bin/env bash
# CPU validation speed, same machine, same run: upstream YOLOv5 v7.0's val.py (ultralytics/yolov5, run as
# an external program, for measurement only) against `kestrel val`, the same weights and the same images.
# Manual benchmark: not part of the build, CI or tests. Run it on an otherwise idle machine.
#
# What it runs:
#   1. weights: WEIGHTS (a kestrel .safetensors), or, if unset, a short kestrel training of CFG on the
#      coco128 train split with augmentation off (the overfitting recipe of bench/val_vs_upstream.sh), in
#      two stages, because a model trained at 320 px without scale augmentation finds almost nothing at
#      640 (mAP50 0.85 at 320, 0.002 at 640) and a whole training at 640 costs 4x:
#        kestrel train --cfg $CFG --hyp <hyp.scratch-low, augmentation 0, lr0 0.002 constant> --optimizer Adam
#          --data <coco128 copy> --img $TRAIN_IMG --batch-size 16 --epochs $EPOCHS --cache ram --noval --noplots
#        kestrel train --weights <that last.safetensors> (the same flags) --img $IMG --epochs $FINETUNE_EPOCHS
#      (≈ 13 min on an idle 2-core VM, estimated from the epoch speeds; pass WEIGHTS to reuse them). Why trained weights: with the initial
#      head biases almost nothing passes conf 0.001 (objectness ~1e-3 x class ~8e-3); with weights trained
#      too little (yolov5n, 30 epochs at 320: mAP50 0.002 at 640) NMS gets up to its 30,000 candidates per
#      image and takes more time than the model, and val.py stops at its NMS time limit (0.5 s + 0.05 s an
#      image, each batch), which caps its NMS figure and drops detections from its mAPs. Trained weights give
#      a realistic candidate count and mAPs that can be compared. The train split is also the validated
#      split (the model has seen it: the mAP is no generalisation figure).
#   2. the same weights for upstream: tools/export_state_dict.py -> state dict + model YAML, then
#      bench/upstream_checkpoint_from_state_dict.py -> a checkpoint as train.py lays them out (float32).
#   3. untimed warm-up (WARMUP=1): one run of each side (label caches, page cache, upstream's .pyc files).
#   4. REPEATS pairs, alternating (upstream, kestrel, upstream, kestrel, ...), each with
#        upstream: python bench/upstream_run.py val.py --weights <ckpt> --data <coco128 copy> --img 640
#                  --batch-size 32 --conf-thres 0.001 --iou-thres 0.6 --task val --device cpu --workers $WORKERS
#        kestrel:  build/kestrel val --weights <safetensors> --data <coco128 copy> (the same flags)
#      Both write their default plots (val.py v7.0 has no --noplots): 3 val_batch image pairs, confusion
#      matrix, PR/F1/P/R curves. Both get the same OMP_NUM_THREADS/MKL_NUM_THREADS (THREADS, else unset:
#      torch's default, one thread a core; upstream's utils/general.py sets OMP_NUM_THREADS after torch is
#      imported, which leaves torch's count unchanged).
# Reported per run: wall time of the whole command; its CPU time (user + system, children included);
# the loop: seconds from the line printed when the split is indexed (val.py's "val: Scanning ..."
# line, kestrel's "val: N images ..." line) to the line that ends the batch loop (val.py's progress bar
# closing, kestrel's "Class Images ..." header, printed after its metrics), every output line time-stamped
# as it arrives (PYTHONUNBUFFERED=1, stdbuf -oL), and images/s = images / loop. The loop holds the
# loader's start, the batches (loading, letterbox, pre-process, inference, NMS, matching) and the
# val_batch plots; not the start-up (imports, model load and fuse, label cache) nor val.py's final
# ap_per_class and curve plots (kestrel's ap_per_class, milliseconds, is inside). Also each side's own
# "Speed: pre-process, inference, NMS per image" line (the timed phases only; not the wait for the
# loader, nor the metrics) and its "all" row (P, R, mAP50, mAP50-95), which should agree.
# Before each run the script waits while the 1-minute load is above LOAD_MAX (30 s steps, at most
# MAX_WAIT seconds over the whole run, then runs anyway); "others" is the CPU time other processes took
# during the run (/proc/stat), as bench/data_cpu_vs_upstream.sh.
#
# Upstream environment: as in bench/train_cpu_vs_upstream.sh (yolov5 v7.0 at /tmp/yolov5, a venv with
# the torch 2.11.0 wheel kestrel links at /tmp/upstream-venv).
#
# Usage:
#   bench/val_cpu_vs_upstream.sh
#   WEIGHTS=runs/train/exp/weights/best.safetensors REPEATS=3 bench/val_cpu_vs_upstream.sh
# Environment (defaults in brackets):
#   UPSTREAM_DIR, UPSTREAM_PYTHON, UPSTREAM_COMMIT, KESTREL_BIN   as in train_cpu_vs_upstream.sh
#   KESTREL_PYTHON   Python with torch and safetensors for tools/export_state_dict.py [~/.cache/kestrel/venv/bin/python]
#   DATASET          coco128 folder to copy [../shared/datasets/coco128, else /work/shared/datasets/coco128]
#   WEIGHTS          kestrel weights [unset: train CFG, EPOCHS at TRAIN_IMG then FINETUNE_EPOCHS at IMG]
#   CFG, TRAIN_IMG, EPOCHS, FINETUNE_EPOCHS   the training when WEIGHTS is unset [yolov5n, 320, 180, 20]
#   UPSTREAM_ENV     extra environment for the upstream runs only, e.g. kestrel's allocator settings:
#                    "MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824" (kestrel's loader
#                    sets glibc's mmap threshold to 256 MiB and trim threshold to 1 GiB, process-wide, with
#                    mallopt; under glibc's defaults each activation tensor over 32 MiB is a fresh mmap, page
#                    faults and kernel zeroing on every allocation) [unset]
#   IMG, BATCH       validation size and batch [640, 32]
#   WORKERS          loader workers, both sides [2] (val.py on a CPU takes min(cores, batch, --workers))
#   REPEATS          pairs of timed runs [2]
#   WARMUP           1: one untimed run of each side first [1]
#   THREADS          if set, OMP_NUM_THREADS/MKL_NUM_THREADS for both sides [unset: torch's default]
#   LOAD_MAX         wait while the 1-minute load is above this [1.5]
#   MAX_WAIT         seconds of waiting for the load, whole run [1200]
#   WORK             work folder [mktemp -d /tmp/kestrel-valbench.XXXXXX]
#   SIDES            "upstream kestrel", or one of them [both]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
. "$REPO/bench/lib/compare.sh"
compare_defaults /tmp/yolov5

KESTREL_PYTHON=${KESTREL_PYTHON:-$HOME/.cache/kestrel/venv/bin/python}
CFG=${CFG:-yolov5n}
EPOCHS=${EPOCHS:-180}
FINETUNE_EPOCHS=${FINETUNE_EPOCHS:-20}
TRAIN_IMG=${TRAIN_IMG:-320}
read -r -a up_extra <<<"${UPSTREAM_ENV:-}"
IMG=${IMG:-640}
BATCH=${BATCH:-32}
WORKERS=${WORKERS:-2}
REPEATS=${REPEATS:-2}
WARMUP=${WARMUP:-1}
LOAD_MAX=${LOAD_MAX:-1.5}
MAX_WAIT=${MAX_WAIT:-1200}
CONF=0.001 IOU=0.6

[ -f "$DATASET/coco128.yaml" ] && [ -d "$DATASET/images/train2017" ] || die "DATASET=$DATASET is not a coco128 folder"
[ -x "$KESTREL_BIN" ] || die "$KESTREL_BIN not found: build kestrel first (scripts/setup.sh)"
compare_setup kestrel-valbench val.py models/yolo.py
command -v stdbuf >/dev/null || die "stdbuf (coreutils) not found"
perl -MTime::HiRes -e 1 2>/dev/null || die "perl with Time::HiRes not found (time-stamps the output lines)"

# ---- dataset: one copy of coco128, train = val = images/train2017 (both sides write label caches there) ----
rm -rf "$WORK/coco128"
cp -r "$DATASET" "$WORK/coco128"
rm -f "$WORK"/coco128/labels/*.cache
NIMG=$(find "$WORK/coco128/images/train2017" -maxdepth 1 -type f | wc -l)
# upstream resolves a relative `path:` against its own folder, so both sides get an absolute one.
{ printf 'path: %s\ntrain: images/train2017\nval: images/train2017\n' "$WORK/coco128"; sed -n '/^nc:/,$p' "$DATASET/coco128.yaml"; } >"$WORK/coco128.yaml"

# ---- upstream quirks, handled without touching its code (bench/lib/compare.sh make_up_env) ----
make_up_env
stamp() { perl -MTime::HiRes=time -ne 'BEGIN { $| = 1 } printf "%.3f %s", time, $_'; }  # each line: arrival time, line

# ---- 1. weights ----
if [ -z "${WEIGHTS:-}" ]; then
  sed -e 's/^lr0:.*/lr0: 0.002/' -e 's/^lrf:.*/lrf: 1.0/' -e 's/^weight_decay:.*/weight_decay: 0.0/' \
      -e 's/^warmup_epochs:.*/warmup_epochs: 1.0/' -e 's/^warmup_bias_lr:.*/warmup_bias_lr: 0.01/' \
      -e 's/^\(hsv_[hsv]\|translate\|scale\|fliplr\|mosaic\|mixup\|paste_in\):.*/\1: 0.0/' \
      configs/hyps/hyp.scratch-low.yaml >"$WORK/hyp.overfit.yaml"
  train_ks() {  # NAME IMG EPOCHS [args...]
    local name=$1 img=$2 epochs=$3
    shift 3
    say "kestrel: training $CFG ($name) for $epochs epochs at $img px on coco128 train (augmentation off; the weights to validate)"
    "$KESTREL_BIN" train "$@" --hyp "$WORK/hyp.overfit.yaml" --optimizer Adam --data "$WORK/coco128.yaml" --img "$img" \
      --batch-size 16 --epochs "$epochs" --device cpu --cache ram --noval --noplots --workers 2 --quiet \
      --min-warmup-iters 8 --project "$WORK/runs" --name "$name" --exist-ok >"$WORK/logs/$name.log" 2>&1 \
      || { tail -n 30 "$WORK/logs/$name.log" >&2; die "kestrel train failed (log: $WORK/logs/$name.log)"; }
  }
  train_ks train "$TRAIN_IMG" "$EPOCHS" --cfg "$CFG"
  WEIGHTS=$WORK/runs/train/weights/last.safetensors
  if ((FINETUNE_EPOCHS > 0)); then
    train_ks finetune "$IMG" "$FINETUNE_EPOCHS" --weights "$WEIGHTS"
    WEIGHTS=$WORK/runs/finetune/weights/last.safetensors
  fi
fi
[ -f "$WEIGHTS" ] || die "WEIGHTS=$WEIGHTS not found"
WEIGHTS=$(cd "$(dirname "$WEIGHTS")" && pwd)/$(basename "$WEIGHTS")
STEM=$(basename "$WEIGHTS" .safetensors)

# ---- 2. the same weights as an upstream checkpoint ----
if ((DO_UP)); then
  say "converting $WEIGHTS for upstream"
  "$KESTREL_PYTHON" tools/export_state_dict.py "$WEIGHTS" "$WORK/sd.pt" --yaml "$WORK/model.yaml" >"$WORK/logs/export.log" 2>&1 \
    || { cat "$WORK/logs/export.log" >&2; die "export_state_dict.py failed"; }
  (cd "$UPSTREAM_DIR" && "${up_env[@]}" "$UPSTREAM_PYTHON" "$REPO/bench/upstream_checkpoint_from_state_dict.py" \
     --upstream-dir "$UPSTREAM_DIR" --yaml "$WORK/model.yaml" --state-dict "$WORK/sd.pt" --data "$WORK/coco128.yaml" \
     --out "$WORK/$STEM.pt") >"$WORK/logs/checkpoint.log" 2>&1 \
    || { tail -n 30 "$WORK/logs/checkpoint.log" >&2; die "upstream_checkpoint_from_state_dict.py failed"; }
  up_commit=$(upstream_commit)
  up_versions=$("$UPSTREAM_PYTHON" -c 'import sys, torch, torchvision, cv2, numpy
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"opencv {cv2.__version__}, numpy {numpy.__version__}, {torch.get_num_threads()} torch threads")')
fi
((DO_KS)) && ks_versions=$(kestrel_versions)

common=(--img "$IMG" --batch-size "$BATCH" --conf-thres "$CONF" --iou-thres "$IOU" --task val --device cpu --workers "$WORKERS" --exist-ok)
run_upstream() {  # NAME
  (cd "$UPSTREAM_DIR" && "${up_env[@]}" "${up_extra[@]}" PYTHONUNBUFFERED=1 "$UPSTREAM_PYTHON" "$REPO/bench/upstream_run.py" val.py \
     --weights "$WORK/$STEM.pt" --data "$WORK/coco128.yaml" "${common[@]}" --project "$WORK/runs/upstream" --name "$1" 2>&1) | stamp
}
run_kestrel() {  # NAME
  (cd "$REPO" && stdbuf -oL -eL "$KESTREL_BIN" val --weights "$WEIGHTS" --data "$WORK/coco128.yaml" "${common[@]}" \
     --project "$WORK/runs/kestrel" --name "$1" 2>&1) | stamp
}
# parse LOG: "loop_s P R mAP50 mAP50-95 pre inf nms limits end_s" ('?' where a line is missing). The loop starts
# at the line before the first one holding the "Class ... Images" header (that line: the split indexed) and
# ends at the last one holding it (val.py: its progress bar closing; each "NMS time limit" warning ends a
# line inside the bar; kestrel: the table). limits: val.py's "NMS time limit ... exceeded" warnings (one a
# batch at most: that batch's later images keep only what NMS had finished; kestrel has no time limit).
# end_s: from the loop's end to the last line (metrics, curve plots, "Results saved to").
parse() {
  awk '
    / Class +Images +Instances/ { if (!s) s = prev; e = $1 }
    { prev = $1; last = $1 }
    /NMS time limit/ { lim++ }
    / all +[0-9]+ +[0-9]+ / { n = split($0, a, " "); m = a[n - 3] " " a[n - 2] " " a[n - 1] " " a[n] }
    /Speed: / { sp = $0; sub(/.*Speed: /, "", sp); gsub(/ms [a-zA-Z-]+,?/, "", sp); sub(/ per image.*/, "", sp) }
    END { printf "%s %s %s %d %s\n", (e && s ? sprintf("%.2f", e - s) : "?"), (m ? m : "? ? ? ?"), (sp ? sp : "? ? ?"), lim,
                (e ? sprintf("%.2f", last - e) : "?") }' "$1"
}

# ---- 3. warm-up, untimed ----
if ((WARMUP)); then
  for side in upstream kestrel; do
    [[ $side == upstream ]] && ((!DO_UP)) && continue
    [[ $side == kestrel ]] && ((!DO_KS)) && continue
    say "$side: warm-up run (untimed)"
    "run_$side" warmup >"$WORK/logs/$side-warmup.log" 2>&1 \
      || { tail -n 30 "$WORK/logs/$side-warmup.log" >&2; die "$side warm-up failed (log: $WORK/logs/$side-warmup.log)"; }
  done
fi

# ---- 4. measurement: the sides alternate ----
declare -a rows=()
for ((r = 1; r <= REPEATS; r++)); do
  for side in upstream kestrel; do
    [[ $side == upstream ]] && ((!DO_UP)) && continue
    [[ $side == kestrel ]] && ((!DO_KS)) && continue
    wait_for_quiet
    t_start=$(date -u '+%H:%M:%S')
    l=$(awk '{print $1 " " $2 " " $3}' /proc/loadavg)
    say "$side: run $r/$REPEATS at $t_start UTC; load $l"
    log="$WORK/logs/$side-r$r.log"
    timed_run "$log" "run_$side" "r$r"
    read -r wall user sys <"$log.time"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
    read -r loop p rr m50 m5095 pre inf nms lim end < <(parse "$log")
    # start-up: everything before the loop (imports, model load, the split indexed)
    startup=$(awk -v w="$wall" -v l="$loop" -v e="$end" 'BEGIN { if (l + 0 > 0) printf "%.2f", w - l - e; else print "?" }')
    ips=$(awk -v n="$NIMG" -v t="$loop" 'BEGIN { if (t + 0 > 0) printf "%.2f", n / t; else print "?" }')
    say "$side: run $r: wall ${wall}s (start-up ${startup}s, end ${end}s), loop ${loop}s ($ips images/s), speed ${pre}/${inf}/${nms} ms, NMS time limit hit $lim times, mAP50 $m50 mAP50-95 $m5095, others $OTHERS"
    rows+=("$side|$r|$t_start|$l|$OTHERS|$wall|$cpu|$startup|$end|$loop|$ips|$pre|$inf|$nms|$lim|$p|$rr|$m50|$m5095")
  done
done
load_after=$(uptime)

# ---- report ----
echo
echo "CPU validation speed: $STEM ($WEIGHTS), coco128 train2017 ($NIMG images) as the val split, ${IMG} px, batch $BATCH,"
echo "conf $CONF, IoU $IOU, $WORKERS loader workers, plots on (both sides' defaults)"
echo "date        $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "cpu         $(cpu_line)"
echo "threads     OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} MKL_NUM_THREADS=${MKL_NUM_THREADS:-unset}"
echo "load after  load average${load_after#*load average}; waited ${waited}s for the load in all"
((DO_UP)) && echo "upstream    yolov5 $up_commit; $up_versions${UPSTREAM_ENV:+; with $UPSTREAM_ENV}"
((DO_KS)) && echo "kestrel     $ks_versions"
echo
printf '%-9s %3s %9s %-15s %6s %7s %6s %7s %6s %6s %7s %-17s %6s %-8s %-8s %-8s %-8s\n' side run start "load 1/5/15" others \
  "wall s" "cpu s" "start s" "end s" "loop s" "img/s" "pre/inf/NMS ms" limits P R mAP50 mAP50-95
declare -A sum_wall sum_ips sum_ms cnt last_map
limit_hits=0
for row in "${rows[@]}"; do
  IFS='|' read -r side r t l others wall cpu startup end loop ips pre inf nms lim p rr m50 m5095 <<<"$row"
  printf '%-9s %3s %9s %-15s %6s %7s %6s %7s %6s %6s %7s %-17s %6s %-8s %-8s %-8s %-8s\n' "$side" "$r" "$t" "$l" "$others" \
    "$wall" "$cpu" "$startup" "$end" "$loop" "$ips" "$pre/$inf/$nms" "$lim" "$p" "$rr" "$m50" "$m5095"
  ((lim > 0)) && limit_hits=$((limit_hits + lim))
  cnt[$side]=$((${cnt[$side]:-0} + 1))
  sum_wall[$side]=$(awk -v a="${sum_wall[$side]:-0}" -v b="$wall" 'BEGIN { print a + b }')
  sum_ips[$side]=$(awk -v a="${sum_ips[$side]:-0}" -v b="$ips" 'BEGIN { print a + b }')
  sum_ms[$side]=$(awk -v a="${sum_ms[$side]:-0}" -v x="$pre" -v y="$inf" -v z="$nms" 'BEGIN { print a + x + y + z }')
  last_map[$side]="$m50 $m5095"
done
echo
for side in upstream kestrel; do
  [ -n "${cnt[$side]:-}" ] || continue
  awk -v s="$side" -v n="${cnt[$side]}" -v w="${sum_wall[$side]}" -v i="${sum_ips[$side]}" -v m="${sum_ms[$side]}" 'BEGIN {
    printf "%-9s means of %d: wall %.1f s, loop %.1f images/s, timed phases %.1f ms/image (%.1f images/s)\n",
           s, n, w / n, i / n, m / n, 1000 * n / m }'
done
if [ -n "${cnt[upstream]:-}" ] && [ -n "${cnt[kestrel]:-}" ]; then
  awk -v wu="${sum_wall[upstream]}" -v wk="${sum_wall[kestrel]}" -v iu="${sum_ips[upstream]}" -v ik="${sum_ips[kestrel]}" \
      -v mu="${sum_ms[upstream]}" -v mk="${sum_ms[kestrel]}" -v nu="${cnt[upstream]}" -v nk="${cnt[kestrel]}" 'BEGIN {
    printf "kestrel / upstream: wall %.2fx faster, loop images/s %.2fx, timed phases %.2fx\n",
           (wu / nu) / (wk / nk), (ik / nk) / (iu / nu), (mu / nu) / (mk / nk) }'
  read -r u50 u5095 <<<"${last_map[upstream]}"
  read -r k50 k5095 <<<"${last_map[kestrel]}"
  awk -v a="$u50" -v b="$k50" -v c="$u5095" -v d="$k5095" 'BEGIN {
    d50 = a - b; d95 = c - d; if (d50 < 0) d50 = -d50; if (d95 < 0) d95 = -d95
    printf "mAP50 upstream %s kestrel %s; mAP50-95 upstream %s kestrel %s", a, b, c, d
    if (d50 > 0.005 || d95 > 0.005) print "  <- differ by more than 0.005 (see docs/parity.md: kestrel rounds the first resize up and sorts the rect batches stably; bench/upstream_run.py KESTREL_PREPROCESS=1 gives upstream the same choices)"
    else print "  (agree within 0.005)" }'
fi
((limit_hits)) && echo "note: val.py's NMS stopped at its time limit (0.5 s + 0.05 s an image, a batch) $limit_hits times: its NMS figure is capped and its mAPs miss detections; the weights give too many candidates (train them longer) or the machine is loaded"
note_loaded_rows "$(printf '%s\n' "${rows[@]}" | cut -d'|' -f4 | cut -d' ' -f1 | paste -sd' ')"
echo "wall = start s (to the split indexed) + loop s (the batches; img/s = images / loop s) + end s (metrics, plots, to the last line)"
echo "pre/inf/NMS: each side's Speed line; timed phases: their sum; limits: val.py's NMS time-limit warnings"
echo "logs (each line time-stamped) and runs: $WORK"
