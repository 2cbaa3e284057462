#!/usr/bin/env bash
# ctest fixture: unpack the real CIFAR-10 JPEG tarball into CIFAR10_TEST_ROOT with the project's
# get-data script (so that script is exercised on the real archive too). Without the tarball it
# says so and succeeds; the tests that need the data then skip, or fail under CI=true.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -f "$CIFAR10_JPEG_TARBALL" ]]; then
  echo "real-data fixture: $CIFAR10_JPEG_TARBALL not found; real-data tests will skip"
  exit 0
fi
"${PYTHON:-python3}" "$here/../scripts/get_data.py" --from "$CIFAR10_JPEG_TARBALL" --root "$CIFAR10_TEST_ROOT"
