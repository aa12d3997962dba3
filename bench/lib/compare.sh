# Shared by the bench/*_vs_upstream.sh comparisons (sourced, never run). The caller sets SIDES,
# KESTREL_BIN, UPSTREAM_DIR, UPSTREAM_PYTHON and optionally THREADS, LOAD_MAX, MAX_WAIT, UPSTREAM_COMMIT.

# compare_defaults UPSTREAM_TREE: the settings every comparison shares, each left as the caller's
# environment gives it: UPSTREAM_DIR [UPSTREAM_TREE], UPSTREAM_PYTHON [/tmp/upstream-venv/bin/python],
# KESTREL_BIN [build/kestrel], SIDES [upstream kestrel], DATASET [../shared/datasets/coco128, else
# /work/shared/datasets/coco128].
compare_defaults() {
  UPSTREAM_DIR=${UPSTREAM_DIR:-$1}
  UPSTREAM_PYTHON=${UPSTREAM_PYTHON:-/tmp/upstream-venv/bin/python}
  KESTREL_BIN=${KESTREL_BIN:-build/kestrel}
  SIDES=${SIDES:-upstream kestrel}
  if [ -z "${DATASET:-}" ]; then
    DATASET=../shared/datasets/coco128
    [ -d "$DATASET" ] || DATASET=/work/shared/datasets/coco128
  fi
}

say() { printf '\033[1mbench:\033[0m %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
ncpus() { getconf _NPROCESSORS_ONLN; }  # every online CPU (nproc would follow OMP_NUM_THREADS)
cpu_line() { echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(ncpus)"; }

# compare_setup WORK_PREFIX UPSTREAM_FILE...: DO_UP / DO_KS from SIDES; the upstream tree must hold the
# given files and its Python must run; the kestrel binary must exist; absolute paths for both; THREADS
# exported to OpenMP and MKL; WORK (with logs/) created.
compare_setup() {
  local prefix=$1 f
  shift
  [[ " $SIDES " == *" upstream "* ]] && DO_UP=1 || DO_UP=0
  [[ " $SIDES " == *" kestrel "* ]] && DO_KS=1 || DO_KS=0
  if ((DO_UP)); then
    for f in "$@"; do
      [ -f "$UPSTREAM_DIR/$f" ] || die "UPSTREAM_DIR=$UPSTREAM_DIR has no $f (see the set-up at the top of $0)"
    done
    [ -x "$UPSTREAM_PYTHON" ] || die "UPSTREAM_PYTHON=$UPSTREAM_PYTHON is not executable"
    UPSTREAM_DIR=$(cd "$UPSTREAM_DIR" && pwd)
  fi
  if ((DO_KS)); then
    [ -x "$KESTREL_BIN" ] || die "$KESTREL_BIN not found: build kestrel first (scripts/setup.sh)"
    KESTREL_BIN=$(cd "$(dirname "$KESTREL_BIN")" && pwd)/$(basename "$KESTREL_BIN")
  fi
  if [ -n "${THREADS:-}" ]; then export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS; fi
  WORK=${WORK:-$(mktemp -d "/tmp/$prefix.XXXXXX")}
  mkdir -p "$WORK/logs"
  WORK=$(cd "$WORK" && pwd)
}

# upstream_commit: UPSTREAM_COMMIT, else the tree's git description, else its .upstream-commit file.
upstream_commit() {
  local c=${UPSTREAM_COMMIT:-}
  if [ -z "$c" ]; then
    if [ -e "$UPSTREAM_DIR/.git" ]; then c=$(git -C "$UPSTREAM_DIR" describe --tags --always 2>/dev/null) || true
    elif [ -f "$UPSTREAM_DIR/.upstream-commit" ]; then c=$(cat "$UPSTREAM_DIR/.upstream-commit"); fi
  fi
  echo "${c:-unknown}"
}

# make_up_env: the command prefix `up_env` that upstream's scripts run under, its quirks handled without
# touching its code:
#  YOLOv5_AUTOINSTALL=False          no `pip install` of requirements it considers missing
#  YOLOV5_CONFIG_DIR + Arial.ttf     check_dataset() downloads Arial.ttf from ultralytics.com otherwise
#                                     (a font for plots; a local DejaVuSans, or an empty file)
#  TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD  torch >= 2.6 loads weights_only by default; v7.0's strip_optimizer,
#                                     final validation and attempt_load torch.load() whole pickled models
# The font goes to WORK/ultralytics (WORK must be set).
make_up_env() {
  local font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
  mkdir -p "$WORK/ultralytics"
  if [ -f "$font" ]; then cp "$font" "$WORK/ultralytics/Arial.ttf"; else : >"$WORK/ultralytics/Arial.ttf"; fi
  up_env=(env YOLOv5_AUTOINSTALL=False YOLOV5_CONFIG_DIR="$WORK/ultralytics" TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1)
}

# kestrel_versions: "HEAD <commit> [(+ uncommitted changes)], binary built <time>; kestrel V, libtorch V, N torch threads"
kestrel_versions() {
  local commit env
  commit="HEAD $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  git diff --quiet HEAD 2>/dev/null || commit="$commit (+ uncommitted changes)"
  env=$("$KESTREL_BIN" env 2>&1) || die "$KESTREL_BIN env failed"
  echo "$commit, binary built $(date -u -r "$KESTREL_BIN" '+%Y-%m-%d %H:%M UTC'); kestrel $(awk '/^kestrel/ {print $2}' <<<"$env"), libtorch $(awk '/^libtorch/ {print $2}' <<<"$env"), $(awk '/^cpu threads/ {print $3}' <<<"$env") torch threads"
}

# ---- a shared machine: wait for quiet, and measure what others used ----
load1() { cut -d' ' -f1 /proc/loadavg; }
busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }  # user nice system irq softirq steal
waited=0
loaded_runs=0
# wait_for_quiet: waits while the 1-minute load exceeds LOAD_MAX, within the MAX_WAIT budget (seconds).
# A run's own threads raise the load it leaves behind, so it may wait between runs on an idle machine too.
wait_for_quiet() {
  while awk -v l="$(load1)" -v m="$LOAD_MAX" 'BEGIN { exit !(l + 0 > m + 0) }'; do
    if ((waited >= MAX_WAIT)); then
      say "load $(load1) > $LOAD_MAX, wait budget (${MAX_WAIT}s) spent: running anyway"
      loaded_runs=$((loaded_runs + 1))
      return
    fi
    say "load $(load1) > $LOAD_MAX: waiting 30 s (waited ${waited}s of ${MAX_WAIT}s)"
    sleep 30
    waited=$((waited + 30))
  done
}

# timed_run LOG cmd...: runs cmd with its output in LOG; stops with the log's end if it fails. Sets
# OTHERS: CPU time of other processes during the run as a share of all cores (the machine's busy time
# from /proc/stat minus the run's own user + system time, its child processes included).
timed_run() {
  local log=$1 busy0 busy1
  shift
  busy0=$(busy_jiffies)
  TIMEFORMAT='%R %U %S'
  if ! { time "$@" >"$log" 2>&1; } 2>"$log.time"; then tail -n 30 "$log" >&2; die "$* failed (log: $log)"; fi
  busy1=$(busy_jiffies)
  OTHERS=$(awk -v b0="$busy0" -v b1="$busy1" -v hz="$(getconf CLK_TCK)" -v n="$(ncpus)" '{ own = $2 + $3
    printf "%.0f%%", 100 * ((b1 - b0) / hz - own) / ($1 * n) }' "$log.time")
}

# note_loaded_rows ROW_LOADS: a note when any run started above LOAD_MAX.
note_loaded_rows() {
  awk -v m="$LOAD_MAX" -v rows="$1" \
    'BEGIN { n = split(rows, a, " "); for (i = 1; i <= n; i++) if (a[i] + 0 > m + 0) { printf "note: some runs started with a 1-minute load above %s: noisy\n", m; exit } }'
  echo "others: CPU time of other processes during the run (machine busy time from /proc/stat minus the run's own), % of all cores"
}
