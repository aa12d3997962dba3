#!/usr/bin/env bash
# CPU training speed, same machine, same configuration: upstream YOLOv5 (ultralytics/yolov5 v7.0,
# run as an external program, for measurement only) against `kestrel train`.
# Manual benchmark: not part of the build, CI or tests. Run it on an otherwise idle machine.
#
# What it runs (yolov5n from scratch, hyp.scratch-low, demo dataset of 32 train / 16 val images,
# batch 16, 320 px, 2 loader workers, --noval --nosave, CPU), for each side, E_SHORT and E_LONG
# epochs:
#   upstream: python train.py --weights '' --cfg yolov5n.yaml --data <demo copy, absolute path>
#             --hyp data/hyps/hyp.scratch-low.yaml --epochs E --batch-size 16 --img 320 --workers 2
#             --device cpu --noval --nosave --noplots
#   kestrel:  build/kestrel train --cfg yolov5n --data <demo copy>/demo.yaml --epochs E
#             --batch-size 16 --img 320 --workers 2 --device cpu --noval --nosave
# Speed = (E_LONG - E_SHORT) * train images / (wall(E_LONG) - wall(E_SHORT)). The difference cancels
# everything paid once per run on both sides: start-up, model build, label scan, AutoAnchor, the
# validation after the final epoch (done even with --noval), checkpoint writing and the final
# best-weights validation. Both sides read the same copy of data/demo under the work folder.
# Both sides use the same torch 2.11.0 build (OpenMP, MKL, oneDNN). With as many OpenMP threads as
# cores, any other load on the machine makes steps stall for seconds (spinning barriers): check the
# load figures in the report, and on a shared machine compare with THREADS=1 as well.
#
# Upstream environment (what this script was written against; only PyPI needs to be reachable):
#   G=<git dir of ultralytics/yolov5>   # e.g. from: git clone --bare https://github.com/ultralytics/yolov5 /tmp/yolov5.git
#   mkdir -p /tmp/yolov5 && git --git-dir=$G archive v7.0 | tar -x -C /tmp/yolov5
#   echo "v7.0 $(git --git-dir=$G rev-parse 'v7.0^{commit}')" > /tmp/yolov5/.upstream-commit  # v7.0 915bbf294bb74c859f0b41f1c23bc395014ea679
#   python3 -m venv /tmp/upstream-venv
#   P=/tmp/upstream-venv/bin/python; $P -m pip install -q --upgrade pip
#   # the very torch kestrel links (same wheel, same MKL/oneDNN), without its pip CUDA wheels, as
#   # scripts/setup.sh installs it (the wheel is cached in ~/.cache/kestrel/wheels, or use torch==2.11.0):
#   $P -m pip install -q --no-deps ~/.cache/kestrel/wheels/torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl
#   $P -m pip install -q filelock 'typing-extensions>=4.10.0' 'setuptools<82' 'sympy>=1.13.3' \
#       'networkx>=2.5.1' jinja2 'fsspec>=0.8.5' nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 nvidia-cufile
#   $P -m pip install -q --no-deps torchvision==0.26.0
#   # yolov5 requirements.txt, minimal (headless OpenCV; no clearml/comet/wandb; ipython is imported by models/common.py).
#   # OpenCV 4.10: its warpAffine and HSV conversions give the pixels of the OpenCV 4.6 kestrel links; 5.0's
#   # differ by up to 3 (warp) and 5 (HSV round trip) levels (bench/train_vs_upstream.sh compares pixels):
#   $P -m pip install -q numpy opencv-python-headless==4.10.0.84 pandas matplotlib seaborn pyyaml tqdm psutil thop \
#       requests scipy pillow gitpython tensorboard ipython
#
# Usage:
#   bench/train_cpu_vs_upstream.sh
# Environment (defaults in brackets):
#   UPSTREAM_DIR     yolov5 v7.0 source tree [/tmp/yolov5]
#   UPSTREAM_PYTHON  its Python [/tmp/upstream-venv/bin/python]
#   UPSTREAM_COMMIT  shown in the report [git rev-parse in UPSTREAM_DIR, else UPSTREAM_DIR/.upstream-commit]
#   KESTREL_BIN      [build/kestrel]
#   E_SHORT, E_LONG  epochs of the two runs per side [1, 4]
#   REPEATS          pairs of runs per side; the fastest wall time of each length is used [1]
#   THREADS          if set, OMP_NUM_THREADS/MKL_NUM_THREADS for both sides [unset: torch's default]
#   WORK             work folder (dataset copy, runs, logs) [mktemp -d /tmp/kestrel-bench.XXXXXX]
#   SIDES            "upstream kestrel", or one of them [both]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
. "$REPO/bench/lib/compare.sh"
compare_defaults /tmp/yolov5

E_SHORT=${E_SHORT:-1}
E_LONG=${E_LONG:-4}
REPEATS=${REPEATS:-1}
BATCH=16 IMG=320 WORKERS=2

((E_LONG > E_SHORT)) || die "E_LONG ($E_LONG) must be larger than E_SHORT ($E_SHORT)"
compare_setup kestrel-bench train.py

# ---- dataset: one copy of data/demo for both sides (upstream writes labels/*.cache next to it) ----
rm -rf "$WORK/demo"
cp -r data/demo "$WORK/demo"
rm -f "$WORK"/demo/labels/*.cache
NIMG=$(find "$WORK/demo/images/train" -maxdepth 1 -type f | wc -l)
# upstream resolves a relative `path:` against its own folder, so it gets an absolute one.
{ printf 'path: %s\ntrain: images/train\nval: images/val\n' "$WORK/demo"; sed -n '/^nc:/,$p' data/demo/demo.yaml; } >"$WORK/demo-upstream.yaml"

# ---- upstream quirks, handled without touching its code (bench/lib/compare.sh make_up_env) ----
make_up_env

now() { date +%s.%N; }
load1() { cut -d' ' -f1 /proc/loadavg; }
peak_load=0
note_load() { peak_load=$(awk -v a="$peak_load" -v b="$(load1)" 'BEGIN { print (b + 0 > a + 0) ? b : a }'); }
# run_timed NAME LOG cmd... : runs, prints the wall seconds; on failure shows the log's end and stops.
run_timed() {
  local name=$1 log=$2; shift 2
  local t0 t1
  t0=$(now)
  if ! "$@" >"$log" 2>&1; then tail -n 30 "$log" >&2; die "$name failed (log: $log)"; fi
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }'
}
run_upstream() {  # E R
  (cd "$UPSTREAM_DIR" && "${up_env[@]}" "$UPSTREAM_PYTHON" train.py --weights '' --cfg yolov5n.yaml \
     --data "$WORK/demo-upstream.yaml" --hyp data/hyps/hyp.scratch-low.yaml --epochs "$1" \
     --batch-size $BATCH --img $IMG --workers $WORKERS --device cpu --noval --nosave --noplots \
     --project "$WORK/runs/upstream" --name "e$1-r$2")
}
run_kestrel() {  # E R
  (cd "$REPO" && "$KESTREL_BIN" train --cfg yolov5n --data "$WORK/demo/demo.yaml" --epochs "$1" \
     --batch-size $BATCH --img $IMG --workers $WORKERS --device cpu --noval --nosave --quiet \
     --project "$WORK/runs/kestrel" --name "e$1-r$2")
}

# ---- versions and machine ----
((DO_UP)) && up_commit=$(upstream_commit)
load_before=$(uptime)
note_load

# ---- warm-up, untimed: page cache for the libraries, upstream's .pyc files ----
if ((DO_UP)); then
  say "upstream: checking the environment"
  (cd "$UPSTREAM_DIR" && "${up_env[@]}" "$UPSTREAM_PYTHON" -c 'import train' >"$WORK/logs/upstream-import.log" 2>&1) \
    || { cat "$WORK/logs/upstream-import.log" >&2; die "cannot import upstream train.py with $UPSTREAM_PYTHON"; }
  up_versions=$("$UPSTREAM_PYTHON" -c 'import sys, torch, torchvision, cv2, numpy
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"opencv {cv2.__version__}, numpy {numpy.__version__}, {torch.get_num_threads()} torch threads")')
fi
if ((DO_KS)); then
  ks_versions=$(kestrel_versions)
fi

# ---- measurement: short and long runs alternate between the sides ----
declare -A best
for ((r = 1; r <= REPEATS; r++)); do
  for e in "$E_SHORT" "$E_LONG"; do
    for side in upstream kestrel; do
      [[ $side == upstream ]] && ((!DO_UP)) && continue
      [[ $side == kestrel ]] && ((!DO_KS)) && continue
      note_load
      say "$side: $e epoch(s), repeat $r/$REPEATS ($(uptime | sed 's/.*load/load/'))"
      t=$(run_timed "$side $e epochs" "$WORK/logs/$side-e$e-r$r.log" "run_$side" "$e" "$r")
      say "$side: $e epoch(s) in ${t}s"
      k="$side,$e"
      if [ -z "${best[$k]:-}" ] || awk -v a="$t" -v b="${best[$k]}" 'BEGIN { exit !(a < b) }'; then best[$k]=$t; fi
    done
  done
done
load_after=$(uptime)
note_load

# ---- report ----
echo
echo "CPU training speed: yolov5n from scratch, demo dataset ($NIMG train images), batch $BATCH, ${IMG} px, $WORKERS workers"
echo "date        $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "cpu         $(cpu_line)"
echo "load before load average${load_before#*load average}"
echo "load after  load average${load_after#*load average}"
((DO_UP)) && echo "upstream    yolov5 $up_commit; $up_versions"
((DO_KS)) && echo "kestrel     $ks_versions"
echo "speed = ($E_LONG - $E_SHORT) epochs x $NIMG images / (wall($E_LONG epochs) - wall($E_SHORT epoch(s))), fastest of $REPEATS"
echo
printf '%-10s %12s %12s %12s %10s\n' side "wall E=$E_SHORT" "wall E=$E_LONG" "s/epoch" "images/s"
declare -A speed
for side in upstream kestrel; do
  [ -n "${best[$side,$E_SHORT]:-}" ] || continue
  read -r spe ips < <(awk -v a="${best[$side,$E_SHORT]}" -v b="${best[$side,$E_LONG]}" -v n="$NIMG" -v d=$((E_LONG - E_SHORT)) \
    'BEGIN { dt = b - a; if (dt <= 0) { print "nan nan"; exit } printf "%.2f %.2f\n", dt / d, d * n / dt }')
  speed[$side]=$ips
  printf '%-10s %11ss %11ss %11ss %10s\n' "$side" "${best[$side,$E_SHORT]}" "${best[$side,$E_LONG]}" "$spe" "$ips"
done
if [ -n "${speed[upstream]:-}" ] && [ -n "${speed[kestrel]:-}" ]; then
  awk -v k="${speed[kestrel]}" -v u="${speed[upstream]}" 'BEGIN { if (u > 0) printf "kestrel / upstream: %.2fx\n", k / u }'
fi
echo "peak 1-minute load seen before and between runs: $peak_load"
awk -v l="$peak_load" \
  'BEGIN { if (l + 0 > 0.5) printf "note: the 1-minute load reached %s (> 0.5): other work shared the CPUs, these figures are noisy\n", l }'
echo "logs and runs: $WORK"
