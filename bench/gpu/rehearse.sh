#!/usr/bin/env bash
# Rehearses bench/gpu/run.sh on a stand-in for the GPU machine, here, before a GPU session is spent on it:
# a bare Debian root (debootstrap minbase: no -dev libraries, no CUDA toolkit, no OpenCV or yaml-cpp) whose
# only extra is a Python venv with `pip install torch==2.11.0` and the NVIDIA wheels it pulls in, as the
# GPU machine's /opt/torch/.venv. The bundle (bench/gpu/bundle.sh) and the working tree are copied in,
# as the device tool sends them, and `run.sh tests` runs there: every library must be found, `kestrel env`
# and the CUDA test filter run (the CUDA tests skip), and the --device 0 training run stops at
# "no CUDA device". Needs root, Debian's mirror and PyPI (about 5 GB under $ROOT, a few minutes the first
# time; later runs reuse the root). Not part of CI.
#
#   bash bench/gpu/bundle.sh && sudo bash bench/gpu/rehearse.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${ROOT:-/tmp/kestrel-devsim}
[ -d build-device ] || { echo "no build-device/: run bench/gpu/bundle.sh first" >&2; exit 1; }
if [ ! -x "$ROOT/opt/torch/.venv/bin/python" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  debootstrap --variant=minbase bookworm "$ROOT" http://deb.debian.org/debian >/dev/null
  cp /etc/resolv.conf "$ROOT/etc/"
  chroot "$ROOT" bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends python3 python3-venv ca-certificates >/dev/null && python3 -m venv /opt/torch/.venv'
  # This machine's certificate bundle and pip settings (a proxy's CA, an index) reach PyPI from inside too;
  # after ca-certificates, which would write its own bundle over them.
  cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt" 2>/dev/null || true
  if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$ROOT/etc/pip.conf"; fi
  chroot "$ROOT" /opt/torch/.venv/bin/pip install -q "$(grep '^torch==' scripts/requirements.txt)"
fi
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
rm -rf "$ROOT/repo" && mkdir -p "$ROOT/repo"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$ROOT/repo"
cp -a build-device "$ROOT/repo/"
chroot "$ROOT" bash -c 'cd /repo && export PATH=/opt/torch/.venv/bin:$PATH && BUDGET=120 OUT=/tmp/rehearsal \
  bash bench/gpu/run.sh tests' 2>&1 | tee /tmp/kestrel-rehearsal.log
if grep -q "MISSING LIBRARIES" /tmp/kestrel-rehearsal.log || ! grep -q "no CUDA device is available" /tmp/kestrel-rehearsal.log; then
  echo "rehearsal FAILED: see /tmp/kestrel-rehearsal.log" >&2
  exit 1
fi
echo "rehearsal passed: the bundle loads and runs with only pip's torch beside it"
