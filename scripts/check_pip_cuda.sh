#!/usr/bin/env bash
# Proves the set-up of a machine without NVIDIA's CUDA toolkit: scripts/setup.sh with the system
# toolkit hidden (TRAIN_IGNORE_SYSTEM_CUDA=1) into its own build folder, so the CUDA compiler and
# headers come from PyPI's CUDA 13.0 wheels in the virtualenv (scripts/pip_cuda.sh).
#   scripts/check_pip_cuda.sh [--configure-only]
# Checks: the configure used the virtualenv's toolkit and nothing under /usr/local; a second
# set-up installs nothing; and, without --configure-only (CI runs only the configure step, a second
# full build would not fit its time), the build links no libcuda and trains 2 steps on the CPU.
# BUILD_DIR defaults to build-pip-cuda here. Exit 0 when every check holds, 1 when one fails.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
configure_only=0
case "${1:-}" in
  "") ;;
  --configure-only) configure_only=1 ;;
  *) echo "check_pip_cuda: unknown argument '$1' (expected --configure-only or nothing)" >&2; exit 2 ;;
esac
export BUILD_DIR=${PIP_CUDA_BUILD_DIR:-$REPO_ROOT/build-pip-cuda}
export TRAIN_IGNORE_SYSTEM_CUDA=1 CONFIGURE_ONLY=$configure_only
unset TRAIN_PYTHON LIBTORCH
fail() { echo "check_pip_cuda: FAIL: $*" >&2; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
scripts/setup.sh 2>&1 | tee "$log"
echo "check_pip_cuda: first set-up $(($(date +%s) - start)) s"

cache=$BUILD_DIR/CMakeCache.txt
toolkit=$TRAIN_VENV/cuda-toolkit
value() { sed -n "s|^$1:[A-Z]*=||p" "$cache"; }
[[ "$(value CUDA_TOOLKIT_ROOT_DIR)" == "$toolkit" ]] ||
  fail "CUDA_TOOLKIT_ROOT_DIR is '$(value CUDA_TOOLKIT_ROOT_DIR)', expected $toolkit"
[[ "$(value CMAKE_CUDA_COMPILER)" == "$toolkit/bin/nvcc" ]] ||
  fail "CMAKE_CUDA_COMPILER is '$(value CMAKE_CUDA_COMPILER)', expected $toolkit/bin/nvcc"
"$toolkit/bin/nvcc" --version | grep -q "release 13.0," || fail "$toolkit/bin/nvcc is not CUDA 13.0"
# A system toolkit shows as a path under /usr/local or one naming cuda outside the virtualenv
# (the host compiler and librt, which FindCUDAToolkit also records, are neither).
used=$(grep -E '^(CUDA|CUDAToolkit|CUDNN|CMAKE_CUDA)[A-Za-z0-9_]*:(FILEPATH|PATH|STRING)=/' "$cache" |
       grep -v "=$TRAIN_VENV" | grep -i -E '=/usr/local|=[^;]*cuda' || true)
[[ -z "$used" ]] || fail "CUDA entries from a system toolkit: $(paste -sd' ' <<<"$used")"
echo "check_pip_cuda: every CUDA toolkit path in $cache is in $TRAIN_VENV"

scripts/setup.sh >"$log" 2>&1 || { cat "$log"; fail "the second set-up failed"; }
if grep -q "installing" "$log"; then
  fail "the second set-up installed again: $(grep installing "$log" | paste -sd' ')"
fi
echo "check_pip_cuda: the second set-up installed nothing"
((configure_only)) && exit 0

if readelf -d "$BUILD_DIR/train" | grep -q "libcuda\.so"; then
  fail "$BUILD_DIR/train needs libcuda.so, so the empty stub would break it"
fi
out=$(mktemp -d)
"$BUILD_DIR/train" --config configs/quick_cpu.yaml --device cpu --output-dir "$out/run" \
  --set data.source=synthetic --set data.synthetic_train_size=128 \
  --set data.synthetic_test_size=64 --set training.max_steps=2 >"$log" 2>&1 ||
  { cat "$log"; fail "the 2-step CPU run failed"; }
rm -rf "$out"
echo "check_pip_cuda: $BUILD_DIR/train links no libcuda and trained 2 steps on the CPU"
