#!/usr/bin/env bash
# Quick start: install what is missing, build (Release), get CIFAR-10 into datasets/cifar10, then
# train with configs/resnet50_cifar10.yaml. Arguments are passed on to `train`, e.g.
#   scripts/quickstart.sh --set training.epochs=1 --device cpu
# Without network set CIFAR10_FROM to a local cifar-10-binary.tar.gz, JPEG tarball or folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
scripts/setup.sh
scripts/get-data.sh --root datasets/cifar10 ${CIFAR10_FROM:+--from "$CIFAR10_FROM"}
exec "$BUILD_DIR/train" --config configs/resnet50_cifar10.yaml "$@"
