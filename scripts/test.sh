#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest.
# The real-data tests need ../shared/data/cifar10-jpeg.tar.gz (or -DCIFAR10_JPEG_TARBALL=...);
# without it they skip, except under CI=true or REQUIRE_REAL_DATA=1, where they fail.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
scripts/setup.sh
# The set-up without a system CUDA toolkit, configure step only (scripts/check_pip_cuda.sh).
if [[ -z "${TRAIN_PYTHON:-}" && -z "${LIBTORCH:-}" ]]; then
  scripts/check_pip_cuda.sh --configure-only
fi
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
