#!/usr/bin/env bash
# Quick start: install what is missing, build the `train` target alone (Release; the tests are
# scripts/test.sh's), get CIFAR-10 into datasets/cifar10, then train. Without arguments:
#   - with a GPU (nvidia-smi -L lists one): the study, configs/resnet50_cifar10.yaml (30 epochs);
#   - without one: configs/quick_cpu.yaml (ResNet-18, 10,000 images, 4 epochs: minutes on a CPU,
#     where the study would take days), with its report, then the command for the study.
# Arguments are passed on to `train` with the study config, e.g.
#   scripts/quickstart.sh --set training.epochs=1 --device cpu
# Without network set CIFAR10_FROM to a local cifar-10-binary.tar.gz, JPEG tarball or folder.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"
BUILD_TARGETS=${BUILD_TARGETS:-train} scripts/setup.sh
scripts/get-data.sh --root datasets/cifar10 ${CIFAR10_FROM:+--from "$CIFAR10_FROM"}
study=(--config configs/resnet50_cifar10.yaml)
if [[ $# -gt 0 ]] || { gpus=$(nvidia-smi -L 2>/dev/null) && [[ $gpus == *GPU* ]]; }; then
  exec "$BUILD_DIR/train" "${study[@]}" "$@"
fi
echo "quickstart: no GPU here, so a short CPU run (configs/quick_cpu.yaml: ResNet-18, 10,000" \
     "images, 4 epochs) instead of the 30-epoch ResNet-50 study, which would take days on a CPU"
"$BUILD_DIR/train" --config configs/quick_cpu.yaml
echo "quickstart: the full study: $BUILD_DIR/train ${study[*]}   (on a GPU; on this CPU add e.g." \
     "--set training.max_steps=200 --set data.test_limit=1000 to bound its training and its" \
     "evaluation)"
