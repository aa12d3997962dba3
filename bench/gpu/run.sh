#!/usr/bin/env bash
# The standard GPU check and benchmark set, run ON the GPU machine from the repository root with the
# bundle from bench/gpu/bundle.sh carried as build-device/. One device call, within BUDGET seconds
# (default 480), so that with the machine's start-up it leaves room in a 15-minute lease for one rerun:
#
#   run(command="bash bench/gpu/run.sh", carry=["build-device"], timeout_s=540)
#
# Steps run in priority order; each gets at most its own limit and what is left of the budget, and a step
# that no longer fits (under 25 s left) is skipped and listed, so the call never runs past the budget.
#   1. kestrel env; the CUDA tests (NMS kernel vs CPU, side-stream prefetcher, fused BN-SiLU kernels,
#      graph capture, no host waits in the step, validation on CUDA vs the CPU, pinned host copies)
#   2. a short --cuda-graph training run across epoch boundaries (graphs captured, then replayed into the
#      same gradients after each epoch's zeroing)
#   3. the training-step ablation (yolov5s, batch 64, 640)
#   4. yolov7 with OTA, eager and as a CUDA graph; yolov3
#   5. bench e2e (loader + copy + step) on the carried coco128 images; the loader alone on 16 cores
#   6. if time is left: yolov5n, yolov7-w6 at 1280 (aux OTA), the allocator row, a training run, AutoBatch's
#      choice and a TensorRT engine from export --end2end and --include-nms (where TensorRT is installed)
# The device tool brings back at most 8 files from $OUT and the last 12,000 characters of the output: the
# steps' logs are written under $RUNS/figures and packed at the end (also when stopped) into
# $OUT/figures.tgz, with $OUT/summary.txt, the figures' lines of every log, printed last.
# `bash bench/gpu/run.sh tests` runs step 1 and 2 only (a rerun after a fix).
# `bash bench/gpu/run.sh cpu-check` runs every step HERE, on the CPU at toy sizes (batch 2, 64 px, 2 steps),
# with build/'s binaries (or $K and $T): the test suite's check that the commands below are still accepted,
# so that a GPU session is not spent on a renamed flag (tests/bench/gpu_run_script_test.cpp).
set -uo pipefail
WHAT=${1:-all}
BUDGET=${BUDGET:-480}
OUT=${OUT:-/tmp/kestrel-gpu-out}
RUNS=${RUNS:-/tmp/kruns}
LOGS=$RUNS/figures  # the steps' logs, packed into $OUT at exit
rm -rf "$LOGS" && mkdir -p "$OUT" "$LOGS"  # a rerun on a warm machine starts its logs afresh
# The figures' lines of every log (each step's header and exit, the --json lines, the tables' rows and
# speed lines), then everything packed: two files in $OUT whatever the number of steps.
pack_figures() {
  {
    for log in "$LOGS"/*.txt; do
      [ -f "$log" ] || continue
      echo "--- $(basename "$log")"
      grep -E '^(=== |exit [0-9]+ after|\{|\[  (PASSED|FAILED)|kestrel |libtorch|cuda|cudnn|gpu)|[0-9]x +[0-9]|images/s|ms/step|peak|AutoBatch|epochs completed|^ +all +[0-9]|[Ee]rror|FAILED|captured|engine built|parsed|export success' "$log" |
        grep -vE '^(train|val): |^\[ +(RUN|OK) +\]|^\[-' | cut -c1-400 | head -60
    done
    echo "skipped for time: ${SKIPPED[*]:-none}"
  } >"$OUT/summary.txt"
  tar czf "$OUT/figures.tgz" -C "$LOGS" .
  echo; echo "===== summary ($OUT/summary.txt; every log in $OUT/figures.tgz)"; cat "$OUT/summary.txt"
}
trap pack_figures EXIT
PY=${KESTREL_PYTHON:-python3}
if [ "$WHAT" = cpu-check ]; then
  K=${K:-${KESTREL_BUILD_DIR:-build}/kestrel}
  T=${T:-${KESTREL_BUILD_DIR:-build}/tests/kestrel_tests}
fi
K=${K:-build-device/kestrel}
T=${T:-build-device/kestrel_tests}
if [ "$WHAT" != cpu-check ]; then  # build/'s binaries find their libraries by their run path
  TORCH_LIB=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  NVIDIA_LIBS=$("$PY" - <<'PYEOF'
import glob, os, site
dirs = set()
for root in site.getsitepackages():
    for lib in glob.glob(os.path.join(root, "nvidia", "**", "lib"), recursive=True):
        dirs.add(lib)
print(":".join(sorted(dirs)))
PYEOF
  )
  export LD_LIBRARY_PATH="$PWD/build-device/lib:$TORCH_LIB:$NVIDIA_LIBS:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
fi
SKIPPED=()

# run_step NAME LIMIT OUTFILE COMMAND...: the command under timeout min(LIMIT, budget left), its output
# appended to $LOGS/OUTFILE and shown (the last 25 lines); skipped when under 25 s of the budget are left.
run_step() {
  local name=$1 limit=$2 file=$3
  shift 3
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 25 ]; then SKIPPED+=("$name"); return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo; echo "=== $name (limit ${limit}s, ${SECONDS}s used)"
  [ "$WHAT" = cpu-check ] && set -- bash -c 'toy_sizes "$@"' toy_sizes "$@"
  { echo "=== $name"; timeout "$limit" "$@" 2>&1; echo "exit $? after ${SECONDS}s"; } >>"$LOGS/$file"
  tail -25 "$LOGS/$file"
}

# cpu-check: runs a step's command with the CPU and toy sizes in place of the GPU's settings.
toy_sizes() {
  local args=()
  while (($#)); do
    case "$1" in
      --device) args+=(--device cpu); shift ;;
      --img) args+=(--img 64); shift ;;
      --batch-size) if [ "$2" = -1 ]; then args+=(--batch-size -1); else args+=(--batch-size 2); fi; shift ;;  # AutoBatch: 16 on the CPU
      --precision) args+=(--precision bf16); shift ;;
      --workers) args+=(--workers 2); shift ;;
      --steps | --epochs) args+=("$1" 2); shift ;;
      --warmup | --repeat) args+=("$1" 1); shift ;;
      --cuda-graph) ;;  # needs CUDA
      *) args+=("$1") ;;
    esac
    shift
  done
  "${args[@]}"
}
export -f toy_sizes  # run by timeout through bash

# Loading: an older C++ runtime there takes the one built against; anything else missing is named.
if ! $K --help >/dev/null 2>"$LOGS/load_check.txt" && grep -q GLIBCXX "$LOGS/load_check.txt"; then
  export LD_LIBRARY_PATH="$PWD/build-device/lib-fallback:$LD_LIBRARY_PATH"
  echo "using the carried libstdc++ (this machine's is older)"
fi
ldd $K $T | grep "not found" && echo "MISSING LIBRARIES above: nothing below can run"
DATA=build-device/coco128/coco128.yaml
[ -f "$DATA" ] || DATA=data/demo/demo.yaml
FAST=(--batch-size 64 --img 640 --device 0 --precision fp16 --channels-last)
# The PyTorch reference's step settings (shared/reference/pytorch_baseline.md): 8 boxes an image, 5 warm-up
# steps, 15 timed (8 for OTA).
REF=(--targets 8 --warmup 5 --steps 15)
REF_OTA=(--targets 8 --warmup 5 --steps 8)

run_step env 20 env.txt $K env
run_step "cuda tests" 120 cuda_tests.txt $T '--gtest_filter=*Cuda*:*CUDA*:DevicePrefetcher*:NmsCuda*'
# 48 images as one batch (of 48: --batch-size 64 > the split) at 320: an update every batch (nominal batch
# 64), warm-up over after 3 epochs, so the update graph is captured in epoch 6 and replayed after the next
# epochs' gradient zeroing.
run_step "train --cuda-graph across epochs" 90 train_graph.txt \
  $K train --cfg yolov5n --data "$DATA" --epochs 9 --batch-size 64 --img 320 --device 0 --workers 8 --cache ram \
  --cuda-graph --min-warmup-iters 0 --noval --project $RUNS --name graph --exist-ok --quiet
[ "$WHAT" = tests ] && exit 0

run_step "ablation yolov5s" 170 ablation_yolov5s.txt $K bench train --cfg yolov5s --batch-size 64 --img 640 --device 0 --ablation "${REF[@]}"
run_step "bench yolov7 --ota" 60 bench_models.txt $K bench train --cfg yolov7 --ota "${FAST[@]}" "${REF_OTA[@]}" --json
run_step "bench yolov7 --ota --cuda-graph" 60 bench_models.txt $K bench train --cfg yolov7 --ota --cuda-graph "${FAST[@]}" "${REF_OTA[@]}" --json
run_step "bench yolov3" 50 bench_models.txt $K bench train --cfg yolov3 "${FAST[@]}" "${REF[@]}" --json
# --repeat 40: 48 carried images as 1,920 per epoch, 30 whole batches of 64 (the loader keeps a short last
# batch: 48 x 43 made 32 of 64 and one of 16, a shape of its own), near the reference's coco128 x 16
# (2,048), so that 16 workers have work; the 60 timed steps (after the untimed warm-up steps) are 60 whole
# batches, two epochs' worth, across three epochs. The reference e2e is fp16 NCHW;
# this is kestrel's fast configuration (channels-last), the NCHW row follows if time allows.
run_step "bench e2e ($DATA)" 90 bench_e2e.txt $K bench e2e --data "$DATA" --cfg yolov5s "${FAST[@]}" --workers 16 --repeat 40 --steps 60
run_step "loader 16 workers ($DATA)" 60 bench_data.txt $K bench data --data "$DATA" --img 640 --batch-size 64 --workers 16 --cache ram --repeat 40 --epochs 3

# Only with time left over.
run_step "bench e2e NCHW, the reference's layout ($DATA)" 60 bench_e2e.txt $K bench e2e --data "$DATA" --cfg yolov5s \
  --batch-size 64 --img 640 --device 0 --precision fp16 --workers 16 --repeat 40 --steps 60
run_step "bench yolov5n" 40 bench_models.txt $K bench train --cfg yolov5n "${FAST[@]}" "${REF[@]}" --json
# YOLOv7's P6 recipe (train_aux.py: 1280 px, the auxiliary-head OTA loss); batch 16 as its README's yolov7-w6 run.
run_step "bench yolov7-w6 1280 aux OTA" 60 bench_models.txt $K bench train --cfg yolov7-w6 --ota --batch-size 16 --img 1280 --device 0 --precision fp16 --channels-last "${REF_OTA[@]}" --json
run_step "bench e2e + CUDA graph" 60 bench_e2e.txt $K bench e2e --data "$DATA" --cfg yolov5s "${FAST[@]}" --cuda-graph --workers 16 --repeat 40 --warmup 8 --steps 60
# Caching-allocator settings come from PyTorch's own variable (LibTorch reads it): compare peak memory and speed.
# Its control is the same command in a fresh process without the setting (the ablation's rows share a process).
run_step "allocator: control" 45 allocator.txt $K bench train --cfg yolov5s "${FAST[@]}" "${REF[@]}"
run_step "allocator: expandable segments" 45 allocator.txt env PYTORCH_ALLOC_CONF=expandable_segments:True \
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $K bench train --cfg yolov5s "${FAST[@]}" "${REF[@]}"
# Training's fast layout end to end: channels-last weights, activations and validation.
run_step "train e2e ($DATA)" 120 train_e2e.txt $K train --cfg yolov5s --data "$DATA" --epochs 2 --batch-size 64 --img 640 \
  --device 0 --workers 16 --cache ram --channels-last --project $RUNS --name gpu --exist-ok --quiet
# AutoBatch (--batch-size -1): the batch it picks for yolov5s at 640 in fp16 on this GPU (its log lines).
run_step "train AutoBatch ($DATA)" 60 train_autobatch.txt $K train --cfg yolov5s --data "$DATA" --epochs 1 --batch-size -1 \
  --img 640 --device 0 --workers 16 --noval --nosave --noplots --project $RUNS --name autobatch --exist-ok
# export --end2end and --include-nms for TensorRT (EfficientNMS_TRT): does TensorRT, where the machine has it,
# build an engine from them?
W=$RUNS/gpu/weights/last.safetensors
if [ -f "$W" ] && [ $((BUDGET - SECONDS)) -ge 25 ]; then
  $K export --weights "$W" --end2end --topk-all 100 --iou-thres 0.65 --conf-thres 0.35 --out $RUNS/e2e_trt.onnx 2>&1 | tee "$LOGS/trt_end2end.txt"
  $K export --weights "$W" --grid --include-nms --out $RUNS/include_nms.onnx 2>&1 | tee -a "$LOGS/trt_end2end.txt"
  if command -v trtexec >/dev/null; then
    run_step "trtexec --end2end" 150 trtexec.txt trtexec --onnx=$RUNS/e2e_trt.onnx --saveEngine=$RUNS/e2e.engine --fp16
    run_step "trtexec --include-nms" 150 trtexec.txt trtexec --onnx=$RUNS/include_nms.onnx --saveEngine=$RUNS/include_nms.engine --fp16
  elif "$PY" -c "import tensorrt" 2>/dev/null; then
    cat >$RUNS/trt_build.py <<'PYEOF'
import sys, tensorrt as trt
log = trt.Logger(trt.Logger.WARNING)
trt.init_libnvinfer_plugins(log, "")
for path in sys.argv[1:]:
    builder = trt.Builder(log)
    net = builder.create_network(0)
    parser = trt.OnnxParser(net, log)
    ok = parser.parse(open(path, "rb").read())
    print(path, "parsed", ok, [str(parser.get_error(i)) for i in range(parser.num_errors)])
    print("outputs", [(net.get_output(i).name, tuple(net.get_output(i).shape)) for i in range(net.num_outputs)])
    engine = builder.build_serialized_network(net, builder.create_builder_config()) if ok else None
    print("engine built", engine is not None)
PYEOF
    run_step "TensorRT (Python) build" 200 trt_end2end.txt "$PY" $RUNS/trt_build.py $RUNS/e2e_trt.onnx $RUNS/include_nms.onnx
  else
    echo "neither trtexec nor the tensorrt Python package here: TensorRT build skipped" | tee -a "$LOGS/trt_end2end.txt"
  fi
fi
echo; echo "done in ${SECONDS}s"
