#!/usr/bin/env bash
# Installs what is missing and builds. Safe to re-run: installed packages and an existing
# torch 2.11.0 are detected and not fetched again.
#   1. Debian packages (compiler, CMake, OpenCV, spdlog, CLI11, yaml-cpp, nlohmann-json, GoogleTest)
#   2. a virtualenv ($TRAIN_VENV) with torch 2.11.0 (its LibTorch is what we link), torchvision,
#      numpy, Pillow, matplotlib
#   3. CMake configure + build in $BUILD_DIR ($BUILD_TYPE, default Release)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"

debs=(build-essential cmake ninja-build ccache pkg-config python3 python3-venv
      libopencv-dev libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
      libgtest-dev libgmock-dev libgloo-dev)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The pip LibTorch is a CUDA build; configuring against it needs the CUDA toolkit's headers.
if [[ -z "${LIBTORCH:-}" ]] && ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: the CUDA toolkit (nvcc, headers) is required to build against the CUDA LibTorch" \
       "from PyPI; install NVIDIA's cuda-toolkit-13-0, or set LIBTORCH=/path/to/libtorch" >&2
  exit 2
fi
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

if ! "$TRAIN_VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION into $TRAIN_VENV"
  [[ -x "$TRAIN_VENV/bin/python" ]] || python3 -m venv "$TRAIN_VENV"
  "$TRAIN_VENV/bin/pip" install -q "torch==$TORCH_VERSION"
fi
if ! "$TRAIN_VENV/bin/python" -c "import torchvision, numpy, PIL, matplotlib" 2>/dev/null; then
  echo "setup: installing torchvision, numpy, Pillow, matplotlib into $TRAIN_VENV"
  "$TRAIN_VENV/bin/pip" install -q "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" \
    numpy pillow matplotlib
fi

prefix=${LIBTORCH:-$("$TRAIN_VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DCMAKE_PREFIX_PATH="$prefix" -DPython3_EXECUTABLE="$TRAIN_VENV/bin/python" >/dev/null
cmake --build "$BUILD_DIR"
echo "setup: built $BUILD_DIR/train"
