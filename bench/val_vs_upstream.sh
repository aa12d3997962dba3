#!/usr/bin/env bash
# Accuracy parity, same weights, same data: upstream YOLOv5 v7.0's val.py and detect.py, or with
# FAMILY=yolov7 YOLOv7's test.py and detect.py (run as external programs, for comparison only), against
# `kestrel val` and `kestrel detect`. See docs/parity.md.
# Manual check: not part of the build, CI or tests.
#
# What it does:
#   1. weights: WEIGHTS (a kestrel .safetensors), or, if unset, trains yolov5n on the demo train split
#      with augmentation off (an overfitting recipe, so that the train split has detections):
#        kestrel train --cfg yolov5n --hyp <hyp.scratch-low, augmentation 0, lr0 0.002 constant>
#          --optimizer Adam --data <demo copy> --img 320 --batch-size 8 --epochs $EPOCHS --noval
#   2. the same weights for upstream: tools/export_state_dict.py -> state dict + model YAML, then
#      bench/upstream_checkpoint_from_state_dict.py (imports upstream's models.yolo.Model) -> a checkpoint
#      as train.py lays them out, float32, 'ema' None.
#      With RAW_BIN (a build of bench/kestrel_raw_predictions.cpp: kestrel's decoded predictions for a
#      tensor) also the model alone: the max abs difference of the predictions for one image tensor.
#   3. for each split in TASKS (train val): upstream val.py --img 320 --batch-size 16 --device cpu
#      --save-json --verbose (conf 0.001, IoU 0.6, max_det 300), the same again with KESTREL_PREPROCESS=1
#      (bench/upstream_run.py: upstream's loader with kestrel's two preprocessing choices, to explain the
#      differences), and kestrel val with the same flags; the "all" rows side by side and the predictions
#      compared per image (bench/compare_detections.py json).
#   4. detect on the train images: upstream detect.py --img 320 --conf-thres $DETECT_CONF --save-txt
#      --save-conf --nosave vs kestrel detect with the same flags; label files compared per image, as they
#      are and with kestrel's boxes rounded to whole pixels as detect.py v7.0 rounds them.
# FAMILY=yolov7: yolov7-tiny trained with hyp.scratch.tiny (its OTA loss) under the same overrides (mixup and
# paste_in 0 as well); test.py with --iou-thres 0.65 (its CLI default; kestrel val gets the same) and
# --no-trace, once as it is and once with --v5-metric (kestrel val --v5-metric beside it).
# Upstream v7.0 runs through bench/upstream_run.py, which aliases numpy.trapz and PIL's getsize (removed
# by numpy 2 and Pillow 10) and changes nothing else. Every upstream and kestrel run gets OMP_NUM_THREADS=1.
#
# Upstream environment: as in bench/train_cpu_vs_upstream.sh (yolov5 v7.0 at /tmp/yolov5, a venv with
# the torch 2.11.0 wheel kestrel links at /tmp/upstream-venv).
#
# Usage:
#   bench/val_vs_upstream.sh
#   WEIGHTS=runs/train/exp/weights/best.safetensors bench/val_vs_upstream.sh
# Environment (defaults in brackets):
#   FAMILY          yolov5 or yolov7 [yolov5]
#   UPSTREAM_DIR, UPSTREAM_PYTHON, UPSTREAM_COMMIT, KESTREL_BIN   as in train_cpu_vs_upstream.sh
#                   (UPSTREAM_DIR defaults to /tmp/yolov7 with FAMILY=yolov7)
#   KESTREL_PYTHON  Python with torch and safetensors for tools/export_state_dict.py [~/.cache/kestrel/venv/bin/python]
#   WEIGHTS         kestrel weights to compare [unset: train them, EPOCHS epochs]
#   EPOCHS          [500]
#   TASKS           splits to validate ["train val"]
#   DETECT_CONF     detect's --conf-thres [0.25]
#   RAW_BIN         optional: bench/kestrel_raw_predictions.cpp built, for the model-only comparison
#   WORK            work folder [mktemp -d /tmp/kestrel-parity.XXXXXX]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

FAMILY=${FAMILY:-yolov5}
case $FAMILY in
  yolov5) CFG=yolov5n HYP=configs/hyps/hyp.scratch-low.yaml VAL_PY=val.py IOU=0.6 METRICS=default
          UPSTREAM_DIR=${UPSTREAM_DIR:-/tmp/yolov5} ;;
  yolov7) CFG=yolov7-tiny HYP=configs/hyps/hyp.scratch.tiny.yaml VAL_PY=test.py IOU=0.65 METRICS="default v5"
          UPSTREAM_DIR=${UPSTREAM_DIR:-/tmp/yolov7} ;;
  *) echo "FAMILY=$FAMILY: expected yolov5 or yolov7" >&2; exit 2 ;;
esac
UPSTREAM_PYTHON=${UPSTREAM_PYTHON:-/tmp/upstream-venv/bin/python}
KESTREL_BIN=${KESTREL_BIN:-build/kestrel}
KESTREL_PYTHON=${KESTREL_PYTHON:-$HOME/.cache/kestrel/venv/bin/python}
EPOCHS=${EPOCHS:-500}
TASKS=${TASKS:-train val}
DETECT_CONF=${DETECT_CONF:-0.25}
SIDES="upstream kestrel"
. "$REPO/bench/lib/compare.sh"
compare_setup kestrel-parity $VAL_PY detect.py models/yolo.py
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
IMG=320 BATCH=16

# ---- dataset: one copy of data/demo (upstream writes labels/*.cache next to it), absolute path ----
rm -rf "$WORK/demo"
cp -r data/demo "$WORK/demo"
rm -f "$WORK"/demo/labels/*.cache
# (absolute split paths: YOLOv7 has no `path:` key and reads them relative to its working directory)
{ printf 'path: %s\ntrain: %s/images/train\nval: %s/images/val\n' "$WORK/demo" "$WORK/demo" "$WORK/demo"
  sed -n '/^nc:/,$p' data/demo/demo.yaml; } >"$WORK/demo-abs.yaml"

# ---- upstream quirks (bench/lib/compare.sh make_up_env): no auto-install, a local font, whole-model pickles ----
make_up_env
run_up() {  # LOG [env...] -- script args...
  local log=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  (cd "$UPSTREAM_DIR" && "${up_env[@]}" "${envs[@]}" "$UPSTREAM_PYTHON" "$REPO/bench/upstream_run.py" "$@") >"$log" 2>&1 \
    || { tail -n 30 "$log" >&2; die "upstream $1 failed (log: $log)"; }
}
run_ks() {  # LOG args...
  local log=$1; shift
  "$KESTREL_BIN" "$@" >"$log" 2>&1 || { tail -n 30 "$log" >&2; die "kestrel $1 failed (log: $log)"; }
}

# ---- 1. weights ----
if [ -z "${WEIGHTS:-}" ]; then
  sed -e 's/^lr0:.*/lr0: 0.002/' -e 's/^lrf:.*/lrf: 1.0/' -e 's/^weight_decay:.*/weight_decay: 0.0/' \
      -e 's/^warmup_epochs:.*/warmup_epochs: 1.0/' -e 's/^warmup_bias_lr:.*/warmup_bias_lr: 0.01/' \
      -e 's/^\(hsv_[hsv]\|translate\|scale\|fliplr\|mosaic\|mixup\|paste_in\):.*/\1: 0.0/' \
      "$HYP" >"$WORK/hyp.overfit.yaml"
  say "kestrel: training $CFG for $EPOCHS epochs on the demo train split (augmentation off)"
  (unset OMP_NUM_THREADS MKL_NUM_THREADS; run_ks "$WORK/logs/train.log" train --cfg $CFG --hyp "$WORK/hyp.overfit.yaml" \
     --optimizer Adam --data "$WORK/demo/demo.yaml" --img $IMG --batch-size 8 --epochs "$EPOCHS" --device cpu \
     --noval --workers 2 --quiet --min-warmup-iters 8 --project "$WORK/runs" --name train --exist-ok)
  WEIGHTS=$WORK/runs/train/weights/best.safetensors
fi
[ -f "$WEIGHTS" ] || die "WEIGHTS=$WEIGHTS not found"
WEIGHTS=$(cd "$(dirname "$WEIGHTS")" && pwd)/$(basename "$WEIGHTS")

# ---- 2. the same weights as an upstream checkpoint ----
"$KESTREL_PYTHON" tools/export_state_dict.py "$WEIGHTS" "$WORK/sd.pt" --yaml "$WORK/model.yaml" >"$WORK/logs/export.log" 2>&1 \
  || { cat "$WORK/logs/export.log" >&2; die "export_state_dict.py failed"; }
check=()
if [ -n "${RAW_BIN:-}" ]; then
  "$UPSTREAM_PYTHON" -c "
import cv2, numpy as np
im = cv2.imread('$WORK/demo/images/train/000000000009.jpg')
im = cv2.resize(im, ($IMG, $IMG), interpolation=cv2.INTER_LINEAR)[:, :, ::-1].transpose(2, 0, 1)
(np.ascontiguousarray(im).astype(np.float32) / 255).tofile('$WORK/x.f32')"
  "$RAW_BIN" "$WEIGHTS" "$WORK/x.f32" $IMG $IMG "$WORK/k_unfused.f32" "$WORK/k_fused.f32" >/dev/null
  check=(--check-input "$WORK/x.f32" --check-size $IMG $IMG --check-kestrel "$WORK/k_unfused.f32" "$WORK/k_fused.f32")
fi
(cd "$UPSTREAM_DIR" && "${up_env[@]}" "$UPSTREAM_PYTHON" "$REPO/bench/upstream_checkpoint_from_state_dict.py" \
   --upstream-dir "$UPSTREAM_DIR" --yaml "$WORK/model.yaml" --state-dict "$WORK/sd.pt" --data "$WORK/demo-abs.yaml" \
   --out "$WORK/best.pt" "${check[@]}") >"$WORK/logs/checkpoint.log" 2>&1 \
  || { tail -n 30 "$WORK/logs/checkpoint.log" >&2; die "upstream_checkpoint_from_state_dict.py failed"; }

# ---- 3. val ----
cmp_line() { "$UPSTREAM_PYTHON" bench/compare_detections.py "$@" 2>&1 | tail -n 1 || true; }
allrow() { { grep -a -E '^ +all +[0-9]+' "$1" || echo '? ? ? ? ? ? ?'; } | tail -n 1 | awk '{ printf "%-8s %-8s %-8s %-8s", $4, $5, $6, $7 }'; }
report=()
up_only=(--workers 2)
[ "$FAMILY" = yolov7 ] && up_only=(--no-trace)  # test.py has no --workers; no TorchScript trace file in its tree
for task in $TASKS; do
  for metric in $METRICS; do
    flag=() tag=$task label="$FAMILY"
    [ "$metric" = v5 ] && flag=(--v5-metric) tag=$task-v5 label="$FAMILY --v5-metric"
    say "$VAL_PY / val --task $task ${flag[*]}: upstream, upstream with kestrel's preprocessing, kestrel"
    common=(--img $IMG --batch-size $BATCH --device cpu --task "$task" --iou-thres $IOU --save-json --verbose --exist-ok "${flag[@]}")
    run_up "$WORK/logs/up-val-$tag.log" -- $VAL_PY --weights "$WORK/best.pt" --data "$WORK/demo-abs.yaml" "${common[@]}" \
      "${up_only[@]}" --project "$WORK/up" --name "val-$tag"
    run_up "$WORK/logs/upk-val-$tag.log" KESTREL_PREPROCESS=1 -- $VAL_PY --weights "$WORK/best.pt" --data "$WORK/demo-abs.yaml" \
      "${common[@]}" "${up_only[@]}" --project "$WORK/upk" --name "val-$tag"
    run_ks "$WORK/logs/ks-val-$tag.log" val --weights "$WEIGHTS" --data "$WORK/demo/demo.yaml" "${common[@]}" --workers 2 \
      --project "$WORK/ks" --name "val-$tag"
    stem=$(basename "$WEIGHTS" .safetensors)
    report+=("val --task $task, $label metric   P        R        mAP50    mAP50-95"
             "  upstream               $(allrow "$WORK/logs/up-val-$tag.log")"
             "  upstream, kestrel prep $(allrow "$WORK/logs/upk-val-$tag.log")"
             "  kestrel                $(allrow "$WORK/logs/ks-val-$tag.log")"
             "  predictions, upstream vs kestrel:              $(cmp_line json \
                "$WORK/up/val-$tag/best_predictions.json" "$WORK/ks/val-$tag/${stem}_predictions.json")"
             "  predictions, upstream kestrel-prep vs kestrel: $(cmp_line json \
                "$WORK/upk/val-$tag/best_predictions.json" "$WORK/ks/val-$tag/${stem}_predictions.json")")
  done
done

# ---- 4. detect ----
say "detect on the train images, conf $DETECT_CONF"
dcommon=(--source "$WORK/demo/images/train" --img $IMG --conf-thres "$DETECT_CONF" --save-txt --save-conf --nosave --device cpu --exist-ok)
dup_only=()
[ "$FAMILY" = yolov7 ] && dup_only=(--no-trace)
run_up "$WORK/logs/up-detect.log" -- detect.py --weights "$WORK/best.pt" "${dcommon[@]}" "${dup_only[@]}" --project "$WORK/up" --name detect
run_ks "$WORK/logs/ks-detect.log" detect --weights "$WEIGHTS" "${dcommon[@]}" --project "$WORK/ks" --name detect
mkdir -p "$WORK/up/detect/labels" "$WORK/ks/detect/labels"
report+=("detect --conf-thres $DETECT_CONF (train images), label files:"
         "  as written:                        $(cmp_line txt "$WORK/up/detect/labels" "$WORK/ks/detect/labels")"
         "  kestrel boxes rounded to pixels:   $(cmp_line txt "$WORK/up/detect/labels" "$WORK/ks/detect/labels" \
            --round-kestrel "$WORK/demo/images/train")"
         "  input shapes printed per image:    $(if diff <(grep -ao '[0-9]*x[0-9]* ' "$WORK/logs/up-detect.log") \
            <(grep -ao '[0-9]*x[0-9]* ' "$WORK/logs/ks-detect.log") >/dev/null; then echo same; else echo differ; fi)")

# ---- report ----
echo
echo "val/detect parity: $CFG, demo dataset, ${IMG} px, CPU"
echo "date      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "cpu       $(cpu_line)"
echo "upstream  $FAMILY $(upstream_commit)"
echo "kestrel   $(kestrel_versions)"
echo "weights   $WEIGHTS"
[ -n "${RAW_BIN:-}" ] && grep -E 'max abs diff' "$WORK/logs/checkpoint.log" | sed 's/^/model     /'
printf '%s\n' "${report[@]}"
echo "logs and runs: $WORK"
