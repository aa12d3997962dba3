#!/usr/bin/env bash
# The standard GPU check and benchmark set, run ON the GPU machine from the repository root with the
# bundle from bench/gpu/bundle.sh carried as build-device/. Writes every figure to $OUT (the device tool
# brings it back) and prints a summary. Two parts of about 4-5 minutes each on an H200, so that each fits
# one device call with room to spare (all of it: no argument):
#
#   run(command="bash bench/gpu/run.sh 1", carry=["build-device"], timeout_s=400)
#   run(command="bash bench/gpu/run.sh 2", carry=["build-device"], timeout_s=400)
#
# Part 1: kestrel env; the CUDA tests (NMS kernel vs CPU, side-stream prefetcher, fused BN-SiLU kernels,
# graph capture, CUDA runtime queries); the training-step ablation (yolov5s, batch 64, 640); the allocator
# row; single rows for yolov5n, yolov3, yolov7 with OTA (eager and as a CUDA graph) and yolov7-w6 at 1280.
# Part 2: the loader on 16 cores; bench e2e (loader + copy + step, eager and graphed); a short training run
# on the 48 carried coco128 images; where TensorRT is installed, an engine built from export --end2end.
set -uo pipefail
PART=${1:-all}
OUT=${OUT:-/tmp/kestrel-gpu-out}
mkdir -p "$OUT"
PY=${KESTREL_PYTHON:-python3}
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
K=build-device/kestrel
T=build-device/kestrel_tests
step() { echo; echo "=== $*"; }

# Loading: an older C++ runtime there takes the one built against; anything else missing is named.
if ! $K --help >/dev/null 2>"$OUT/load_check.txt" && grep -q GLIBCXX "$OUT/load_check.txt"; then
  export LD_LIBRARY_PATH="$PWD/build-device/lib-fallback:$LD_LIBRARY_PATH"
  echo "using the carried libstdc++ (this machine's is older)"
fi
ldd $K $T | grep "not found" && echo "MISSING LIBRARIES above: nothing below can run"

if [ "$PART" != 2 ]; then
step env;                 $K env 2>&1 | tee "$OUT/env.txt"
step cuda tests;          timeout 120 $T --gtest_filter='*Cuda*:*CUDA*:DevicePrefetcher*:NmsCuda*' >"$OUT/cuda_tests.txt" 2>&1; tail -25 "$OUT/cuda_tests.txt"
step ablation yolov5s;    timeout 200 $K bench train --cfg yolov5s --batch-size 64 --img 640 --device 0 --ablation --steps 20 2>&1 | tee "$OUT/ablation_yolov5s.txt"
# Caching-allocator settings come from PyTorch's own variable (LibTorch reads it): compare peak memory and speed.
step "allocator: expandable segments"; PYTORCH_ALLOC_CONF=expandable_segments:True PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 60 $K bench train --cfg yolov5s --batch-size 64 --img 640 --device 0 --precision fp16 --channels-last --steps 20 2>&1 | tee "$OUT/allocator.txt"
for row in "yolov5n" "yolov3" "yolov7 --ota" "yolov7 --ota --cuda-graph"; do
  step "bench $row";      timeout 90 $K bench train --cfg $row --batch-size 64 --img 640 --device 0 --precision fp16 --channels-last --steps 10 --json 2>&1 | tee -a "$OUT/bench_models.jsonl"
done
# YOLOv7's P6 recipe (train_aux.py: 1280 px, the auxiliary-head OTA loss); batch 16 as its README's yolov7-w6 run.
step "bench yolov7-w6 1280 aux OTA"; timeout 90 $K bench train --cfg yolov7-w6 --ota --batch-size 16 --img 1280 --device 0 --precision fp16 --channels-last --steps 10 --json 2>&1 | tee -a "$OUT/bench_models.jsonl"
fi
if [ "$PART" != 1 ]; then
DATA=build-device/coco128/coco128.yaml
[ -f "$DATA" ] || DATA=data/demo/demo.yaml
# --repeat 16: 48 carried images as 768 per epoch (12 batches of 64), so that 16 workers have work and
# epochs do not restart with every step (upstream's loader figure used coco128 x 16).
step "loader 16 workers ($DATA)"; timeout 90 $K bench data --data "$DATA" --img 640 --batch-size 64 --workers 16 --cache ram --repeat 16 --epochs 3 2>&1 | tee "$OUT/bench_data.txt"
step "bench e2e ($DATA)"; timeout 120 $K bench e2e --data "$DATA" --cfg yolov5s --batch-size 64 --img 640 --device 0 --precision fp16 --channels-last --workers 16 --repeat 16 --steps 20 2>&1 | tee "$OUT/bench_e2e.txt"
step "bench e2e + CUDA graph"; timeout 90 $K bench e2e --data "$DATA" --cfg yolov5s --batch-size 64 --img 640 --device 0 --precision fp16 --channels-last --cuda-graph --workers 16 --repeat 16 --warmup 8 --steps 20 2>&1 | tee -a "$OUT/bench_e2e.txt"
step "train e2e ($DATA)"; timeout 150 $K train --cfg yolov5s --data "$DATA" --epochs 2 --batch-size 64 --img 640 --device 0 --workers 16 --cache ram --project /tmp/kruns --name gpu 2>&1 | grep -v '^ \{10,\}[a-z]' | tail -20 | tee "$OUT/train_e2e.txt"
# export --end2end for TensorRT (EfficientNMS_TRT): does TensorRT, where the machine has it, build an engine from it?
W=$(ls -d /tmp/kruns/gpu*/weights/last.safetensors 2>/dev/null | tail -1)
if [ -n "$W" ]; then
  step "TensorRT build of export --end2end"
  $K export --weights "$W" --end2end --topk-all 100 --iou-thres 0.65 --conf-thres 0.35 --out /tmp/kruns/e2e_trt.onnx 2>&1 | tee "$OUT/trt_end2end.txt"
  if command -v trtexec >/dev/null; then
    timeout 240 trtexec --onnx=/tmp/kruns/e2e_trt.onnx --saveEngine=/tmp/kruns/e2e.engine --fp16 >"$OUT/trtexec.txt" 2>&1; echo "trtexec exit $?" | tee -a "$OUT/trt_end2end.txt"; tail -5 "$OUT/trtexec.txt"
  elif "$PY" -c "import tensorrt" 2>/dev/null; then
    timeout 240 "$PY" - /tmp/kruns/e2e_trt.onnx <<'PYEOF' 2>&1 | tee -a "$OUT/trt_end2end.txt"
import sys, tensorrt as trt
log = trt.Logger(trt.Logger.WARNING)
trt.init_libnvinfer_plugins(log, "")
builder = trt.Builder(log)
net = builder.create_network(0)
parser = trt.OnnxParser(net, log)
ok = parser.parse(open(sys.argv[1], "rb").read())
print("parsed", ok, [str(parser.get_error(i)) for i in range(parser.num_errors)])
print("outputs", [(net.get_output(i).name, tuple(net.get_output(i).shape)) for i in range(net.num_outputs)])
engine = builder.build_serialized_network(net, builder.create_builder_config()) if ok else None
print("engine built", engine is not None)
PYEOF
  else
    echo "neither trtexec nor the tensorrt Python package here: TensorRT build skipped" | tee -a "$OUT/trt_end2end.txt"
  fi
fi
fi
echo; echo "figures in $OUT"
