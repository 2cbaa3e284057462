#!/usr/bin/env bash
# Fuzzes the parsers with libFuzzer (clang, AddressSanitizer + UndefinedBehaviorSanitizer):
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# TARGETs: config, set, binary_batches, image_folder, checkpoint_frame (default: all), each run for
# SECONDS_PER_TARGET (default 300) from its corpus in tests/fuzz/corpus/<target>. Inputs that add
# coverage are merged back into that corpus (minimised); a crash leaves its input in
# $BUILD_DIR/artifacts/ and makes the script exit 1. The build goes to $BUILD_DIR (default
# build-fuzz). CI replays the corpus with an ordinary build (ctest -R fuzz.replay).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
seconds=${1:-300}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(config set binary_batches image_folder checkpoint_frame)
export BUILD_DIR=${FUZZ_BUILD_DIR:-$REPO_ROOT/build-fuzz}
command -v clang++ >/dev/null || { echo "fuzz: clang++ is needed (apt-get install clang)" >&2; exit 2; }

build_targets=""
for t in "${targets[@]}"; do build_targets+=" fuzz_$t"; done
BUILD_TYPE=RelWithDebInfo BUILD_TARGETS="$build_targets" \
  CMAKE_ARGS="-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTRAIN_FUZZ=ON" \
  scripts/setup.sh

mkdir -p "$BUILD_DIR/artifacts"
status=0
for t in "${targets[@]}"; do
  work="$BUILD_DIR/corpus/$t"
  rm -rf "$work" && mkdir -p "$work"
  echo "== fuzz_$t for ${seconds}s"
  # Halts on the first crash (an uncaught exception or a sanitizer report); timeouts of 10 s
  # per input count as crashes too.
  if ! "$BUILD_DIR/tests/fuzz_$t" "$work" "tests/fuzz/corpus/$t" -max_total_time="$seconds" \
        -timeout=10 -rss_limit_mb=4096 -artifact_prefix="$BUILD_DIR/artifacts/$t-" \
        -print_final_stats=1 2>"$BUILD_DIR/fuzz_$t.log"; then
    echo "   CRASH: see $BUILD_DIR/fuzz_$t.log and $BUILD_DIR/artifacts/"
    status=1
    continue
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$BUILD_DIR/fuzz_$t.log" || true
  # Keep only the inputs that add coverage to the committed corpus.
  "$BUILD_DIR/tests/fuzz_$t" -merge=1 "tests/fuzz/corpus/$t" "$work" 2>>"$BUILD_DIR/fuzz_$t.log"
  echo "   no crash; corpus: $(ls "tests/fuzz/corpus/$t" | wc -l) inputs"
done
exit $status
