#!/usr/bin/env bash
# kestrel's COCO evaluator against pycocotools at COCO val2017's size, same files, same run.
# Manual benchmark: not part of CI or the tests (those check the 12 numbers on coco128-sized inputs).
#
# Writes IMAGES images' worth of annotations and DETS detections per image (bench/coco_eval_scale.py:
# seeded, COCO-like counts) to DIR, then times build/kestrel_coco_eval and pycocotools' COCOeval
# (evaluate + accumulate + summarize) on them, one after the other, with /usr/bin/time for wall time and
# peak memory, and checks that both print the same 12 numbers.
#   IMAGES (5000)  DETS (100; val.py keeps up to 300)  DIR (/tmp/kestrel-coco-eval-scale)
#   PY (the project's venv python)  BIN (build/kestrel_coco_eval, built here: not part of the default build)
# Recorded runs: docs/benchmarks.md ("COCO evaluation at COCO's size").
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES=${IMAGES:-5000} DETS=${DETS:-100} DIR=${DIR:-/tmp/kestrel-coco-eval-scale}
PY=${PY:-${KESTREL_HOME:-$HOME/.cache/kestrel}/venv/bin/python} BIN=${BIN:-build/kestrel_coco_eval}
mkdir -p "$DIR"
[ "$BIN" = build/kestrel_coco_eval ] && cmake --build build --target kestrel_coco_eval >/dev/null
"$PY" bench/coco_eval_scale.py make "$DIR" "$IMAGES" "$DETS"
echo "== kestrel ($BIN)"
/usr/bin/time -f "%e s wall, %M KB peak" "$BIN" "$DIR/ann.json" "$DIR/res.json" 2>&1 | tee "$DIR/kestrel.txt" | tail -2
echo "== pycocotools"
/usr/bin/time -f "%e s wall, %M KB peak" "$PY" bench/coco_eval_scale.py pycocotools "$DIR" 2>&1 | tee "$DIR/pycocotools.txt" | tail -2
if diff <(grep "Average" "$DIR/kestrel.txt") <(grep "Average" "$DIR/pycocotools.txt") >/dev/null; then
  echo "the 12 numbers agree"
else
  echo "the 12 numbers differ:"; diff <(grep "Average" "$DIR/kestrel.txt") <(grep "Average" "$DIR/pycocotools.txt") || true
  exit 1
fi
