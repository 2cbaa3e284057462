#!/usr/bin/env bash
# Builds the project and its unit tests with AddressSanitizer + UndefinedBehaviorSanitizer (in
# $BUILD_DIR, default build-asan) and runs the test suite through ctest, arguments passed on:
#
#   scripts/sanitize.sh [ctest args]          e.g. scripts/sanitize.sh -R 'Config|Checkpoint'
#
# Too slow for CI here (everything runs several times slower); run it before submitting. LibTorch
# itself is not instrumented: only our code is checked. Leak checking is off, because LibTorch's
# process-wide singletons are never freed by design.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
export BUILD_DIR=${SANITIZE_BUILD_DIR:-$REPO_ROOT/build-asan}
BUILD_TYPE=RelWithDebInfo CMAKE_ARGS="-DTRAIN_SANITIZE=ON" scripts/setup.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
