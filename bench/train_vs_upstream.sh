#!/usr/bin/env bash
# Training parity: `kestrel train` against upstream YOLOv5 v7.0 train.py, or with RECIPE=yolov7 YOLOv7's
# train.py (run as an external program, for measurement only), from the same initial weights on the same
# batch. Manual: not part of the build, CI or tests. Results and their reading: docs/parity.md, "Training".
#
# Set-up that removes every source of difference but the implementations:
#   - data: the first N_IMAGES (16) demo train images, resized once to IMG (320) on the long side and saved
#     as PNG, so that no loader resizes (upstream truncates, kestrel rounds up) and no JPEG decoder differs;
#     train = val; batch size = N_IMAGES, so every epoch is the same single batch whatever the shuffle;
#   - hyp: hyp.scratch-low with every augmentation off (mosaic, HSV, translate, scale, fliplr = 0; the rest
#     are 0 already): both pipelines then only letterbox. RECIPE=yolov7: yolov7-tiny and hyp.scratch.tiny
#     with mosaic, mixup, paste_in, HSV, translate, fliplr = 0 and scale = -0.05: YOLOv7 always zooms by
#     U(1 - scale, 1.1 + scale), which that makes the constant 1.05 (a warp both sides must do pixel for
#     pixel alike); its HSV round trip at zero gains is exact on both sides;
#   - weights: a kestrel model after one epoch (any weights would do), exported to an upstream checkpoint
#     (tools/export_state_dict.py, bench/upstream_checkpoint_from_state_dict.py), float32 on both sides;
#     both trainers round them to float16 before their first step (train.py's model.half().float()), the
#     batch check of step 1 uses them unrounded;
#   - upstream's loss with ComputeLoss.sort_obj_iou = True (kestrel's rule for candidates sharing a cell,
#     docs/design.md); YOLOv7's OTA with ties among equally cheap candidates in index order (kestrel's rule;
#     upstream leaves it to torch.topk: bench/upstream_run.py KESTREL_STABLE_TOPK); --noautoanchor on both
#     sides; CPU, fp32, THREADS OpenMP threads each;
#   - upstream's OpenCV 4.10 (see the set-up): warp and HSV pixels as kestrel's OpenCV 4.6.
# Steps:
#   1. batch: kestrel's first training batch and loss (build/kestrel_train_batch) against upstream's own
#      sample of each image and upstream's model and ComputeLoss on kestrel's images and targets
#      (bench/upstream_train_batch.py);
#   2. runs: EPOCHS epochs of each (115: past YOLOv5's 100-iteration warm-up, so the schedule after it is
#      compared too; YOLOv7 warms up for 1,000 iterations: 60 by default, inside it, with its bias
#      learning rate, momentum and accumulation ramps); upstream's per-iteration losses and float32 final
#      weights come from
#      bench/upstream_run.py's KESTREL_TRAIN_DUMP. NOISE=1 adds a second upstream run with 2 threads:
#      how far float rounding alone moves a run;
#   3. bench/compare_training.py: losses per epoch, learning rates, final weights;
#   4. with AUG_EPOCHS > 0: the whole recipe, augmentations on (hyp.scratch-low, the 32 demo train images,
#      batch 16), AUG_EPOCHS epochs per seed in SEEDS on each side (kestrel's and upstream's run of a seed in
#      parallel), from the same weights: their random draws differ, so the train-loss curves are compared
#      in windows of epochs against the spread between seeds (compare_training.py --curves). Upstream
#      v7.0's --seed does not reach its loader's worker processes (their seeds come from a generator with a
#      constant seed, and --workers is capped at the core count), so its runs load in the main process
#      (--workers 0), whose random generators --seed does seed. Not with RECIPE=yolov7 (no --seed there).
#
# Upstream environment: as bench/train_cpu_vs_upstream.sh (its header), torch being the one kestrel links.
# Usage: bench/train_vs_upstream.sh      (about 10 minutes with NOISE=1 on a 2-core machine; AUG_EPOCHS=150
#        adds about 8 minutes per seed)
# Environment (defaults in brackets): RECIPE [yolov5; or yolov7], UPSTREAM_DIR [/tmp/yolov5; /tmp/yolov7],
#   UPSTREAM_PYTHON [/tmp/upstream-venv/bin/python],
#   KESTREL_BIN [build/kestrel; the batch tool is built in its folder], KESTREL_PYTHON [~/.cache/kestrel/venv/bin/python],
#   EPOCHS [115; yolov7 60], IMG [320], N_IMAGES [16], THREADS [1], NOISE [1], AUG_EPOCHS [0: step 4 off], SEEDS ["0 1"],
#   WORK [mktemp -d /tmp/kestrel-train-parity.XXXXXX; an existing one must not hold runs/ yet]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
. "$REPO/bench/lib/compare.sh"
RECIPE=${RECIPE:-yolov5}
case $RECIPE in
  yolov5) UPSTREAM_DIR=${UPSTREAM_DIR:-/tmp/yolov5} CFG=yolov5n EPOCHS=${EPOCHS:-115} ;;
  yolov7) UPSTREAM_DIR=${UPSTREAM_DIR:-/tmp/yolov7} CFG=yolov7-tiny EPOCHS=${EPOCHS:-60}
          [ "${AUG_EPOCHS:-0}" = 0 ] || { echo "AUG_EPOCHS: YOLOv5 only (YOLOv7's train.py has no --seed)" >&2; exit 1; } ;;
  *) echo "RECIPE=$RECIPE: yolov5 or yolov7" >&2; exit 1 ;;
esac
UPSTREAM_PYTHON=${UPSTREAM_PYTHON:-/tmp/upstream-venv/bin/python}
KESTREL_BIN=$(realpath "${KESTREL_BIN:-build/kestrel}")
BUILD_DIR=$(dirname "$KESTREL_BIN")
KPY=${KESTREL_PYTHON:-$HOME/.cache/kestrel/venv/bin/python}
IMG=${IMG:-320}
N_IMAGES=${N_IMAGES:-16}
THREADS=${THREADS:-1}
NOISE=${NOISE:-1}
WORK=${WORK:-$(mktemp -d /tmp/kestrel-train-parity.XXXXXX)}
WORK=$(realpath "$WORK")
echo "work folder: $WORK"
# Both trainers number a run folder that exists (init2, ...), which this script would not read.
[ ! -e "$WORK/runs" ] || { echo "$WORK/runs exists: give a new WORK" >&2; exit 1; }
[ -f "$UPSTREAM_DIR/train.py" ] || { echo "no upstream $RECIPE at $UPSTREAM_DIR (see the header)" >&2; exit 1; }

# ---- data, hyp, initial weights -------------------------------------------------------------------------
"$KPY" - "$REPO/data/demo" "$WORK/data" "$N_IMAGES" "$IMG" <<'PY'
import shutil, sys
from pathlib import Path
from PIL import Image
src, out, n, size = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for d in ('images/train', 'labels/train'):
    (out / d).mkdir(parents=True, exist_ok=True)
for p in sorted((src / 'images/train').glob('*.jpg'))[:n]:
    im = Image.open(p).convert('RGB')
    r = size / max(im.size)
    im.resize((round(im.size[0] * r), round(im.size[1] * r)), Image.BILINEAR).save(out / 'images/train' / (p.stem + '.png'))
    shutil.copy(src / 'labels/train' / (p.stem + '.txt'), out / 'labels/train')  # normalised: unchanged by a resize
names = [l for l in (src / 'demo.yaml').read_text().splitlines() if l.startswith('  ')]
# absolute entries: YOLOv7 reads no `path:` key
(out / 'data.yaml').write_text(f'train: {out}/images/train\nval: {out}/images/train\nnc: 80\nnames:\n' + '\n'.join(names) + '\n')
PY
if [ "$RECIPE" = yolov7 ]; then
  sed -e 's/^\(hsv_h\|hsv_s\|hsv_v\|translate\|fliplr\|mosaic\|mixup\|paste_in\):.*/\1: 0.0/' \
      -e 's/^scale:.*/scale: -0.05/' configs/hyps/hyp.scratch.tiny.yaml > "$WORK/hyp.yaml"
  no_val=(--notest)  # YOLOv7's name for --noval (kestrel takes both); YOLOv7 has no --noplots
  up_rule=(--stable-topk) up_rule_env=KESTREL_STABLE_TOPK=1
else
  sed -e 's/^\(hsv_h\|hsv_s\|hsv_v\|translate\|scale\|fliplr\|mosaic\):.*/\1: 0.0/' configs/hyps/hyp.scratch-low.yaml > "$WORK/hyp.yaml"
  no_val=(--noval --noplots)
  up_rule=(--sort-obj-iou) up_rule_env=KESTREL_SORT_OBJ_IOU=1
fi
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
common=(--data "$WORK/data/data.yaml" --hyp "$WORK/hyp.yaml" --batch-size "$N_IMAGES" --img "$IMG" --workers 2
        --device cpu "${no_val[@]}" --noautoanchor --project "$WORK/runs")
"$KESTREL_BIN" train --cfg "$CFG" "${common[@]}" --epochs 1 --name init --quiet > "$WORK/init.log"
"$KPY" tools/export_state_dict.py "$WORK/runs/init/weights/last.safetensors" "$WORK/init_sd.pt" --yaml "$WORK/model.yaml" > /dev/null
make_up_env  # upstream's quirks (bench/lib/compare.sh)
(cd "$UPSTREAM_DIR" && "${up_env[@]}" "$UPSTREAM_PYTHON" "$REPO/bench/upstream_checkpoint_from_state_dict.py" \
   --upstream-dir . --yaml "$WORK/model.yaml" --state-dict "$WORK/init_sd.pt" --data "$WORK/data/data.yaml" \
   --out "$WORK/init.pt" > "$WORK/checkpoint.log")
tail -1 "$WORK/checkpoint.log"

# ---- 1. one batch -----------------------------------------------------------------------------------------
cmake --build "$BUILD_DIR" --target kestrel_train_batch > /dev/null
echo "== batch: kestrel's first batch and loss, upstream's samples and loss on it"
"$BUILD_DIR/kestrel_train_batch" "$WORK/runs/init/weights/last.safetensors" "$WORK/data/data.yaml" "$WORK/hyp.yaml" "$IMG" \
  "$N_IMAGES" "$WORK/batch"
(cd "$UPSTREAM_DIR" && "${up_env[@]}" "$UPSTREAM_PYTHON" "$REPO/bench/upstream_train_batch.py" --ckpt "$WORK/init.pt" \
   --hyp "$WORK/hyp.yaml" --img "$IMG" --batch "$WORK/batch" "${up_rule[@]}" 2>&1 | sed '/^Scanning/d')

# ---- 2. the runs ------------------------------------------------------------------------------------------
echo "== runs: $EPOCHS epochs each, $THREADS thread(s)"
"$KESTREL_BIN" train --weights "$WORK/runs/init/weights/last.safetensors" "${common[@]}" --epochs "$EPOCHS" \
  --name kestrel --quiet > "$WORK/kestrel.log"
upstream_train() {  # name, threads
  # YOLOv7's train.py keeps a best_<epoch>.pt from epoch 200 on whenever the
  # fitness ties the best, which under --notest is every epoch (40 GB for a 1,040-epoch run), and an
  # epoch_<n>.pt every 25 epochs. Removed as
  # they appear (the comparison reads the dump, not them).
  local cleaner="" status=0
  if [ "$RECIPE" = yolov7 ] && [ "$EPOCHS" -gt 200 ]; then
    (while sleep 10; do rm -f "$WORK/runs/$1/weights/"best_[0-9]*.pt "$WORK/runs/$1/weights/"epoch_[0-9]*.pt; done) &
    cleaner=$!
  fi
  (cd "$UPSTREAM_DIR" && OMP_NUM_THREADS=$2 MKL_NUM_THREADS=$2 "${up_env[@]}" KESTREL_TRAIN_DUMP="$WORK/$1" \
     "$up_rule_env" "$UPSTREAM_PYTHON" "$REPO/bench/upstream_run.py" train.py --weights "$WORK/init.pt" \
     "${common[@]}" --epochs "$EPOCHS" --name "$1" > "$WORK/$1.log" 2>&1) || status=$?
  [ -z "$cleaner" ] || kill "$cleaner"
  return "$status"
}
upstream_train upstream "$THREADS"
other=()
if [ "$NOISE" = 1 ]; then
  upstream_train upstream_t2 2
  other=(--other-upstream-dump "$WORK/upstream_t2")
fi

# ---- 3. comparison ----------------------------------------------------------------------------------------
echo "== comparison"
"$KPY" bench/compare_training.py --upstream-dump "$WORK/upstream" --upstream-run "$WORK/runs/upstream" \
  --kestrel-run "$WORK/runs/kestrel" "${other[@]}" 2>&1 | sed '/[Ww]arn/d'

# ---- 4. the whole recipe with augmentation: loss curves ----------------------------------------------------
if [ "${AUG_EPOCHS:-0}" -gt 0 ]; then
  cp -r data/demo "$WORK/demo"
  rm -f "$WORK"/demo/labels/*.cache
  sed -i "s|^path: .*|path: $WORK/demo|" "$WORK/demo/demo.yaml"  # upstream resolves a relative path from its tree
  aug=(--data "$WORK/demo/demo.yaml" --hyp "$REPO/configs/hyps/hyp.scratch-low.yaml" --batch-size 16 --img "$IMG"
       --workers 2 --device cpu --noval --noautoanchor --noplots --project "$WORK/runs" --epochs "$AUG_EPOCHS")
  curves=()
  for seed in ${SEEDS:-0 1}; do
    echo "== augmented runs, seed $seed: $AUG_EPOCHS epochs each"
    "$KESTREL_BIN" train --weights "$WORK/runs/init/weights/last.safetensors" "${aug[@]}" --seed "$seed" \
      --name "kestrel_seed$seed" --quiet > "$WORK/kestrel_seed$seed.log" &
    kestrel_pid=$!
    (cd "$UPSTREAM_DIR" && "${up_env[@]}" KESTREL_TRAIN_DUMP="$WORK/upstream_seed$seed" KESTREL_SORT_OBJ_IOU=1 \
       "$UPSTREAM_PYTHON" "$REPO/bench/upstream_run.py" train.py --weights "$WORK/init.pt" "${aug[@]}" --seed "$seed" \
       --workers 0 --name "upstream_seed$seed" > "$WORK/upstream_seed$seed.log" 2>&1)
    wait "$kestrel_pid"  # its failure stops the script (set -e)
    curves+=("$WORK/runs/kestrel_seed$seed" "$WORK/runs/upstream_seed$seed")
  done
  "$KPY" bench/compare_training.py --curves "${curves[@]}"
fi
