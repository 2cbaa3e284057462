#!/usr/bin/env bash
# Lists every function of the sources (app, data, models, training) longer than 80 lines, with
# clang-tidy's readability-function-size. A function may stay longer only with a comment that
# says why (NOLINT(readability-function-size): <reason>).
#
#   scripts/check_function_sizes.sh          (configures build-tidy/ without precompiled headers,
#                                             which clang cannot read from gcc, then checks)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
python=$(train_python)
prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-tidy -G Ninja -DTRAIN_PRECOMPILED_HEADERS=OFF -DCMAKE_PREFIX_PATH="$prefix" \
  -DPython3_EXECUTABLE="$python" >/dev/null
files=$(git ls-files 'app/*.cpp' 'data/*.cpp' 'models/*.cpp' 'training/*.cpp' | grep -v device_cuda)
config='{CheckOptions: [{key: readability-function-size.LineThreshold, value: 80}]}'
printf '%s\n' $files | xargs -P "$(nproc)" -n 1 clang-tidy -p build-tidy --quiet \
  --checks='-*,readability-function-size' --config="$config" 2>/dev/null |
  grep -E "warning: function .* exceeds recommended size" | sort -u || true
