# Shared settings for the scripts (sourced, not run).
#   TRAIN_VENV   virtualenv holding torch 2.11.0 (default ~/.cache/train-studies/venv)
#   BUILD_DIR    CMake build folder (default build)
#   BUILD_TYPE   CMake build type (default Release)
#   LIBTORCH     an unpacked LibTorch zip to build against instead of the virtualenv's torch
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAIN_VENV=${TRAIN_VENV:-$HOME/.cache/train-studies/venv}
BUILD_DIR=${BUILD_DIR:-$REPO_ROOT/build}
BUILD_TYPE=${BUILD_TYPE:-Release}
TORCH_VERSION=2.11.0
TORCHVISION_VERSION=0.26.0

# The virtualenv's python when it exists, else the system one (get-data works with either).
train_python() {
  if [[ -x "$TRAIN_VENV/bin/python" ]]; then echo "$TRAIN_VENV/bin/python"; else command -v python3; fi
}
