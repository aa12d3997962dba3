#!/usr/bin/env bash
# Runs one harness for a while: fuzz/run.sh <target> [seconds] [extra libFuzzer flags ...]
# Corpus: build-fuzz/corpus/<target> (seeded from fuzz/corpus/<target>); crashes, timeouts and
# OOMs land in build-fuzz/artifacts/<target>/; the log in build-fuzz/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
t=$1
secs=${2:-360}
shift $(( $# >= 2 ? 2 : 1 ))
out=build-fuzz
mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
cp -n fuzz/corpus/"$t"/* "$out/corpus/$t/" 2>/dev/null || true
dict=()
case $t in
  yaml) dict=(-dict=fuzz/yaml.dict) ;;
  coco_eval) dict=(-dict=fuzz/json.dict) ;;
  safetensors|training_state|weights_file) dict=(-dict=fuzz/safetensors.dict) ;;
esac
# Leaks at exit inside third-party libraries are not findings.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} "$out/${t}_fuzz" "$out/corpus/$t" "${dict[@]}" \
  -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$out/artifacts/$t/" "$@" >"$out/$t.log" 2>&1 || true
grep -E "^#[0-9]+.*DONE|ERROR|FINDING|SUMMARY|Test unit|artifact|stat::" "$out/$t.log" || true
