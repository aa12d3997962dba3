#!/usr/bin/env bash
# 1 process (2 OpenMP threads, 2 loader workers) against 2 data-parallel ranks (Gloo, 1 core, 1 thread
# and 1 worker each) on the demo data: images/s = 3 extra epochs x 32 images / (wall(4) - wall(1)).
# Run from the repository root after `make`; REPEATS=3 by default. Needs bc.
set -uo pipefail
K=${KESTREL:-build/kestrel}
REPEATS=${REPEATS:-3}
OUTDIR=$(mktemp -d)
common="--cfg yolov5n --data data/demo/demo.yaml --img 320 --batch-size 16 --device cpu --noval --nosave --noautoanchor
        --quiet --project $OUTDIR --exist-ok --hyp configs/hyps/hyp.scratch-low.yaml"
wall() {
  local start; start=$(date +%s.%N)
  "$@" > "$OUTDIR/last.log" 2>&1 || { echo "failed: $*" >&2; tail -5 "$OUTDIR/last.log" >&2; exit 1; }
  echo "$(date +%s.%N) - $start" | bc
}
for rep in $(seq 1 "$REPEATS"); do
  a1=$(OMP_NUM_THREADS=2 wall $K train $common --workers 2 --epochs 1 --name s1)
  a4=$(OMP_NUM_THREADS=2 wall $K train $common --workers 2 --epochs 4 --name s4)
  b1=$(wall env -u OMP_NUM_THREADS $K train --nproc-per-node 2 $common --workers 1 --epochs 1 --name d1)
  b4=$(wall env -u OMP_NUM_THREADS $K train --nproc-per-node 2 $common --workers 1 --epochs 4 --name d4)
  printf 'repeat %d: 1 process %.1f images/s, 2 ranks %.1f images/s\n' "$rep" \
    "$(echo "96 / ($a4 - $a1)" | bc -l)" "$(echo "96 / ($b4 - $b1)" | bc -l)"
done
rm -rf "$OUTDIR"
