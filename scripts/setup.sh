#!/usr/bin/env bash
# Installs what is missing and builds. Safe to re-run: installed packages and an existing
# torch 2.11.0 are detected and not fetched again.
#   1. Debian packages (compiler, CMake, OpenCV, spdlog, CLI11, yaml-cpp, nlohmann-json, GoogleTest,
#      Gloo's headers, OpenSSL for SHA-256, protobuf + Boost.CRC for TensorBoard event files;
#      iproute2 and procps for the tests across hosts made from network namespaces; Slurm's
#      slurmctld, slurmd, slurm-client and munge for the tests of train sweep --launcher slurm,
#      which start a cluster of their own and stop it: no service is configured or started)
#      -- or, with TRAIN_DEBS=DIR, the .deb files in DIR unpacked without apt (a machine without
#      network or Debian's -dev packages, e.g. a GPU machine; DIR holds unpack-debs.sh)
#   2. (while step 1 downloads) a virtualenv ($TRAIN_VENV) with torch 2.11.0 (its LibTorch is what we link), torchvision,
#      numpy, Pillow, matplotlib, tensorboard -- or, with TRAIN_PYTHON=python3, that interpreter's own torch
#      2.11.0 (nothing is installed into it)
#   3. the CUDA compiler and headers that the CUDA LibTorch's CMake files need: the system toolkit
#      (nvcc on PATH or /usr/local/cuda), or, when there is none or TRAIN_IGNORE_SYSTEM_CUDA=1,
#      NVIDIA's CUDA 13.0 wheels from PyPI in the virtualenv (scripts/pip_cuda.sh)
#   4. CMake configure (skipped when $BUILD_DIR was configured with the same command) + build in
#      $BUILD_DIR ($BUILD_TYPE, default Release); BUILD_TARGETS limits
#      the build to some targets, CMAKE_ARGS adds configure options, CONFIGURE_ONLY=1 stops after
#      the configure step
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
case "${TRAIN_IGNORE_SYSTEM_CUDA:-0}" in
  0 | 1) ;;
  *) echo "setup: TRAIN_IGNORE_SYSTEM_CUDA=$TRAIN_IGNORE_SYSTEM_CUDA: expected 0 or 1" >&2; exit 2 ;;
esac

extra_prefix=""
if [[ -n "${TRAIN_DEBS:-}" ]]; then
  [[ -f "$TRAIN_DEBS/unpack-debs.sh" ]] || {
    echo "setup: TRAIN_DEBS=$TRAIN_DEBS holds no unpack-debs.sh (see ../shared/device/fetch-debs.sh)" >&2
    exit 2
  }
  extra_prefix=$(bash "$TRAIN_DEBS/unpack-debs.sh" "${TRAIN_DEBS_PREFIX:-/opt/devdeps}")
else
  debs=(build-essential cmake ninja-build ccache pkg-config python3 python3-venv
        libopencv-dev libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
        libgtest-dev libgmock-dev libgloo-dev libssl-dev libprotobuf-dev protobuf-compiler
        libboost-dev iproute2 procps universal-ctags slurmctld slurmd slurm-client munge)
  missing=()
  for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    sudo_cmd=(); [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    apt_install() {
      DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "$@" >/dev/null
    }
    # The virtualenv below needs Python's venv first; the rest downloads while pip downloads
    # torch (step 2), and is waited for before anything is configured.
    if ! python3 -c "import ensurepip, venv" 2>/dev/null; then
      echo "setup: installing Debian packages: python3 python3-venv (for the virtualenv)"
      apt_install python3 python3-venv
    fi
    echo "setup: installing Debian packages (beside the Python packages): ${missing[*]}"
    apt_install "${missing[@]}" &
    debs_pid=$!
    # However this script ends (pip fails, Ctrl-C), apt is waited for, never left running alone
    # or killed mid-install (which would leave dpkg half-configured).
    trap 'wait "$debs_pid" 2>/dev/null || true' EXIT
  fi
fi

# The pip LibTorch is a CUDA build; configuring against it needs a CUDA compiler and headers.
pip_cuda=0
if [[ -z "${LIBTORCH:-}" ]]; then
  if [[ "${TRAIN_IGNORE_SYSTEM_CUDA:-0}" == 1 ]] ||
     { ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; }; then
    pip_cuda=1
  fi
fi
if ((pip_cuda == 0)) && ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if ((pip_cuda)) && [[ -n "${TRAIN_PYTHON:-}" ]]; then
  echo "setup: no system CUDA toolkit to build with, and TRAIN_PYTHON=$TRAIN_PYTHON is not a" \
       "virtualenv to install CUDA's wheels into; unset TRAIN_PYTHON, or install cuda-toolkit-13-0" >&2
  exit 2
fi

has_torch() {  # the interpreter $1 has torch $TORCH_VERSION
  "$1" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null
}
if [[ -n "${TRAIN_PYTHON:-}" ]]; then
  python=$(command -v "$TRAIN_PYTHON") || { echo "setup: TRAIN_PYTHON=$TRAIN_PYTHON not found" >&2; exit 2; }
  has_torch "$python" || {
    echo "setup: TRAIN_PYTHON=$TRAIN_PYTHON has no torch==$TORCH_VERSION; unset TRAIN_PYTHON to use a virtualenv" >&2
    exit 2
  }
else
  python=$TRAIN_VENV/bin/python
  # One pip run: torch is found once, not again for torchvision.
  if ! has_torch "$python" ||
     ! "$python" -c "import torchvision, numpy, PIL, matplotlib, tensorboard" 2>/dev/null; then
    echo "setup: installing torch==$TORCH_VERSION, torchvision, numpy, Pillow, matplotlib," \
         "tensorboard into $TRAIN_VENV"
    [[ -x "$python" ]] || python3 -m venv "$TRAIN_VENV"
    "$TRAIN_VENV/bin/pip" install -q "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" \
      numpy pillow matplotlib tensorboard
  fi
fi
if [[ -n "${debs_pid:-}" ]]; then
  wait "$debs_pid" || { echo "setup: installing the Debian packages failed (apt-get above)" >&2; exit 1; }
  trap - EXIT
fi

cuda_args=()
if ((pip_cuda)); then
  # Prints the toolkit folder it assembled in the virtualenv; the CUDA CMake options point there.
  toolkit=$(bash "$REPO_ROOT/scripts/pip_cuda.sh" "$TRAIN_VENV")
  cuda_args=(-DCUDA_TOOLKIT_ROOT_DIR="$toolkit" -DCUDAToolkit_ROOT="$toolkit"
             -DCMAKE_CUDA_COMPILER="$toolkit/bin/nvcc")
  if [[ "${TRAIN_IGNORE_SYSTEM_CUDA:-0}" == 1 ]]; then
    # Hide every system copy: NVIDIA's packages install under /usr/local/cuda and may link their
    # bin/, lib/, lib64/ and include/ into /usr/local; nothing of ours comes from /usr/local.
    cuda_args+=(-DCMAKE_IGNORE_PREFIX_PATH="/usr/local/cuda;/usr/local")
    PATH=$(tr ':' '\n' <<<"$PATH" | while read -r d; do [[ -x "$d/nvcc" ]] || echo "$d"; done | paste -sd:)
    export PATH
  fi
fi
prefix=${LIBTORCH:-$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')}
[[ -n "$extra_prefix" ]] && prefix="$prefix;$extra_prefix"
generator=(-G Ninja)
command -v ninja >/dev/null || generator=()
# The options' defaults are passed every time, so that one run's CMAKE_ARGS does not stay in the
# build folder's cache for the next.
# shellcheck disable=SC2206  # CMAKE_ARGS is a list of options
configure=(cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE="$BUILD_TYPE"
  -DCMAKE_PREFIX_PATH="$prefix" -DPython3_EXECUTABLE="$python"
  "${cuda_args[@]}" -DTRAIN_USE_OPENCV=ON -DTRAIN_SANITIZE=OFF -DTRAIN_FUZZ=OFF ${CMAKE_ARGS:-})
# Configured before with the same command: not again (LibTorch's CMake files warn on every
# configure; a changed CMakeLists.txt still reconfigures, from the build itself).
stamp="$BUILD_DIR/.configure-command"
if [[ -f "$BUILD_DIR/CMakeCache.txt" && -f "$stamp" && "$(cat "$stamp")" == "${configure[*]}" ]]; then
  :
else
  rm -f "$stamp"
  "${configure[@]}" >/dev/null
  printf '%s' "${configure[*]}" >"$stamp"
fi
if [[ "${CONFIGURE_ONLY:-0}" == 1 ]]; then
  echo "setup: configured $BUILD_DIR"
  exit 0
fi
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" "${targets[@]}" -j "$(nproc)"
echo "setup: built $BUILD_DIR/train"
