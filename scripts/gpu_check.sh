#!/usr/bin/env bash
# Is this GPU machine set up right, and what does it do? One command:
#
#   scripts/gpu_check.sh OUT_DIR [--speed]
#
# 1. builds `train` and the CUDA suite (Release, in $BUILD_DIR, default build-gpu), with no
#    network: TRAIN_PYTHON (default python3) must already hold torch 2.11.0; the Debian packages
#    come from carried .deb files when TRAIN_DEBS (default .devdeps, filled here by
#    EXTRA_DEBS="libssl-dev libssl3" ../shared/device/fetch-debs.sh; add the protobuf and Boost
#    packages docs/commands.md lists for TensorBoard files) exists; OpenCV is not needed
# 2. runs the CUDA suite, `ctest -L cuda`
# 3. a find-max sweep under a 4 GiB limit (ResNet-18, CIFAR stem), `train plan` for a 16 GiB card
#    from that sweep, `train memory` for ResNet-50 at batch 256 (with the allocator's snapshot),
#    one NCCL rank through scripts/launch.py, and the seed's CPU-vs-GPU table
#    (scripts/compare_devices.py on configs/resnet50_cifar10.yaml: the seed's settings, the study
#    config, each device at its fastest; the GPU a whole epoch, the CPU 30 steps, projected; on the
#    real data when it was converted, else synthetic)
# 4. real data, when .devdata/cifar10-jpeg.tar.gz (or CIFAR10_TARBALL) is there: converted to
#    binary batches in train's order, decoded with Pillow (get_data.py --to-binary
#    --decode-with-pillow: this build has no OpenCV); one epoch on it
# 5. with --speed: matmul fp32/bf16 at N=8192 with % of peak, ResNet-50 (CIFAR stem) bf16 +
#    channels_last at batch 128 and 512 for 100 steps on synthetic device-resident data (images/s,
#    TFLOP/s, MFU), eager and with the graph-captured step (training.cuda_graph=on), the same
#    pair at the seed's settings (ImageNet stem, 1000 classes, fp32, batch 32), and, with real
#    data, the C++ trainer against the seed's Python loop at the seed's settings
#    (scripts/bench_python.py) and that loop under torch.compile (scripts/python_baseline.py
#    --compile)
#
# 6. card: the card prediction against the card, on cases it was not tuned to. The predictions are
#    made beforehand on the CPU machine and carried in .devdata/card-predictions
#    (scripts/predict_gpu_cases.py --train build/train --out .devdata/card-predictions --grid);
#    here the same cases are measured with `train memory --device cuda` and the error table printed
#    (predicted against measured allocated peak and reserved bytes). Skipped (failed) without the
#    carried predictions.
#
# 7. speed-model: the speed model (training/cards/speed_model.h) against this card, on cases
#    written down here before any run: ResNet-50 at 32x32 (CIFAR stem) and at 224x224 (ImageNet
#    stem, data.image_size 224), batches 64, 128 and 256, contiguous and channels_last, fp32 and
#    bf16: two `train sweep --card CARD` (24 trials, each measured and predicted), then
#    scripts/speed_check.py's table of predicted against measured images/s. CARD: GPU_CHECK_CARD,
#    else the card `nvidia-smi` names when it is one of `train cards` (H200, H100 80GB, A100
#    80GB); skipped (failed) otherwise.
#
# 8. only when named in --only (each its own run of a few minutes): fast trains
#    configs/resnet50_cifar10_fast.yaml end to end on the real data, as written (eager);
#    fast-graphed trains it with training.cuda_graph=on. The report gives the wall time (training +
#    evaluation) to each of the config's accuracy thresholds, 94% among them.
#
# --only suite,find-max,plan,memory,card,nccl,compare,data,speed,speed-model,fast,fast-graphed runs those groups
# alone (after the GPU and build checks). CUDA_TEST_JOBS runs the suite's tests that many at a time (default 1; the
# NVML test runs alone after them). GPU_CHECK_PREBUILT=1 uses a build folder carried from another
# machine (built against the same torch 2.11.0 wheel) when its `train` runs here, finding LibTorch
# and the CUDA runtime through LD_LIBRARY_PATH; otherwise it builds.
#
# Writes OUT_DIR/gpu_check.md, OUT_DIR/gpu_check.json and one log per check; exits 1 when any
# check failed (2 for bad arguments). On a machine where `nvidia-smi -L` lists no GPU it says so in
# its first line and exits 1 without building, running or writing anything. A re-run reuses the
# build folder.
set -uo pipefail
export BUILD_DIR=${BUILD_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build-gpu}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO_ROOT"

usage() { echo "usage: scripts/gpu_check.sh OUT_DIR [--speed] [--only GROUP,...]" >&2; exit 2; }
[[ $# -ge 1 && $1 != -* ]] || usage
out_arg=$1
shift
speed=0
only=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --speed) speed=1 ;;
    --only)
      [[ $# -ge 2 ]] || usage
      only=",$2,"
      for group in ${2//,/ }; do
        case $group in
          suite | find-max | plan | memory | card | nccl | compare | data | speed | speed-model | fast | fast-graphed) ;;
          *) echo "gpu_check: --only: unknown group '$group'" >&2; exit 2 ;;
        esac
      done
      [[ $only == *,speed,* ]] && speed=1
      shift ;;
    *) usage ;;
  esac
  shift
done
# Without a GPU there is nothing to check: said first, before anything is built, run or written.
if ! gpus=$(nvidia-smi -L 2>/dev/null) || [[ $gpus != *GPU* ]]; then
  echo "gpu_check: no GPU on this machine (nvidia-smi -L lists none); nothing was checked" >&2
  exit 1
fi
out=$(mkdir -p "$out_arg" && cd "$out_arg" && pwd) || { echo "gpu_check: cannot create $out_arg" >&2; exit 2; }
# wanted GROUP: the group runs (every group when --only is not given). named GROUP: --only names it.
named() { [[ $only == *",$1,"* ]]; }
wanted() { [[ -z $only ]] || named "$1"; }

export TRAIN_PYTHON=${TRAIN_PYTHON:-python3}
if [[ -z "${TRAIN_DEBS:-}" && -f .devdeps/unpack-debs.sh ]]; then export TRAIN_DEBS=.devdeps; fi
tarball=${CIFAR10_TARBALL:-.devdata/cifar10-jpeg.tar.gz}
train="$BUILD_DIR/train"
checks="$out/checks.jsonl"
: >"$checks"

# check NAME LOG COMMAND...: runs COMMAND with its output in OUT_DIR/LOG, records pass/fail/time.
check() {
  local name=$1 log=$2 start status
  shift 2
  echo "== $name ($(date +%T))"
  start=$(date +%s.%N)
  "$@" >"$out/$log" 2>&1
  status=$?
  "$TRAIN_PYTHON" - "$checks" "$name" "$log" "$status" "$start" <<'EOF'
import json, sys, time
path, name, log, status, start = sys.argv[1:]
with open(path, "a") as f:
    f.write(json.dumps({"check": name, "log": log, "passed": status == "0", "exit_code": int(status),
                        "seconds": round(time.time() - float(start), 1)}) + "\n")
EOF
  [[ $status -eq 0 ]] && echo "   passed" || echo "   FAILED (exit $status, see $out/$log)"
  return $status
}

gpu_info() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv || return 1
  "$TRAIN_PYTHON" -c "import sys, torch
print('torch', torch.__version__, 'CUDA', torch.version.cuda)
sys.exit(0 if torch.cuda.is_available() else 'torch sees no GPU')"
}

build() {
  if [[ -n "${GPU_CHECK_PREBUILT:-}" ]]; then
    [[ -n "${TRAIN_DEBS:-}" ]] && bash "$TRAIN_DEBS/unpack-debs.sh" "${TRAIN_DEBS_PREFIX:-/opt/devdeps}"
    local torch_lib cudart
    torch_lib=$("$TRAIN_PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    cudart=$(find "$torch_lib/../.." -path '*nvidia*' -name 'libcudart.so.13' 2>/dev/null | head -1)
    export LD_LIBRARY_PATH="$torch_lib${cudart:+:$(dirname "$cudart")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if "$train" --help >/dev/null && "$BUILD_DIR/tests/cuda_tests" --gtest_list_tests >/dev/null; then
      echo "gpu_check: using the carried build in $BUILD_DIR (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
      return 0
    fi
    echo "gpu_check: the carried build does not run here; building"
  fi
  BUILD_TARGETS="train cuda_tests" CMAKE_ARGS="-DTRAIN_USE_OPENCV=OFF" scripts/setup.sh
}

cuda_suite() {
  local status=0
  ctest --test-dir "$BUILD_DIR" -L cuda -E Nvml -j "${CUDA_TEST_JOBS:-1}" --output-on-failure \
    --timeout "${CUDA_TEST_TIMEOUT:-600}" || status=1
  # Compares with nvidia-smi's reading of the whole GPU: alone, so that no other test's memory moves.
  ctest --test-dir "$BUILD_DIR" -L cuda -R Nvml --output-on-failure || status=1
  return $status
}

find_max() {
  local config="$out/find_max.yaml"
  printf '%s\n' "model: {arch: resnet18, stem: cifar}" "training: {device: cuda}" \
    "sweep: {batch_sizes: [256, 512], warmup_steps: 1, measure_steps: 2}" >"$config"
  rm -rf "$out/find_max"
  "$train" sweep --config "$config" --find-max --memory-limit 4GiB --output-dir "$out/find_max" &&
    cat "$out/find_max/sweep.md"
}

plan() {
  "$train" plan --memory 16GiB --from "$out/find_max"
}

memory_study() {
  rm -rf "$out/memory"
  "$train" memory --config configs/resnet50_cifar10.yaml --device cuda --batch-size 256 \
    --set memory.snapshot=true --output-dir "$out/memory" && cat "$out/memory/memory_breakdown.md"
}

card_prediction() {  # predictions made on the CPU machine, measured here
  local predicted="$REPO_ROOT/.devdata/card-predictions"
  if [[ ! -d $predicted ]]; then
    echo "no predictions carried in $predicted: run scripts/predict_gpu_cases.py --grid there first"
    return 1
  fi
  rm -rf "$out/card"
  "$TRAIN_PYTHON" scripts/predict_gpu_cases.py --train "$train" --out "$out/card" --grid --measure &&
    "$TRAIN_PYTHON" scripts/predict_gpu_cases.py --compare "$predicted" --measured "$out/card"
}

nccl_one_rank() {
  rm -rf "$out/nccl"
  timeout -k 5 120 "$TRAIN_PYTHON" scripts/launch.py -n 1 --master-port 0 "$train" --config configs/quick_cpu.yaml \
    --device cuda --set distributed.backend=nccl --set data.source=synthetic \
    --set training.max_steps=20 --set training.epochs=1 --output-dir "$out/nccl"
}

compare() {  # the seed's CPU-vs-GPU table: the seed's settings, the study config, each fastest
  rm -rf "$out/compare"
  local data=(--set data.source=synthetic)
  [[ -f "$REPO_ROOT/.devdata/cifar10-bin/cifar-10-batches-bin/data_batch_1.bin" ]] &&
    data=(--set data.source=binary --set data.root="$REPO_ROOT/.devdata/cifar10-bin")
  "$TRAIN_PYTHON" scripts/compare_devices.py --train "$train" --config configs/resnet50_cifar10.yaml \
    --cpu-steps 30 --gpu-epochs 1 --devices cpu,cuda --threads "$(nproc)" "${data[@]}" \
    --out "$out/compare" && cat "$out/compare/compare.md"
}

matmul() {
  # Dense peaks of the H100/H200 SXM (NVIDIA's data sheet): 989.4 TFLOP/s bf16, 66.9 fp32.
  local peaks=()
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -Eq 'H100|H200'; then
    peaks=(--peak cuda:bf16=989400 --peak cuda:fp32=66900)
  fi
  "$train" bench matmul --size 8192 --devices cuda --dtypes fp32,bf16 --repeats 10 \
    "${peaks[@]}" --output "$out/matmul.json"
}

resnet50() {  # resnet50 DIR [train args]
  # Sweep trials: the training step alone on a batch held on the device, 10 warm-up steps (cuDNN's
  # autotuning among them; a graphed trial's capture too) and 100 measured, median step time.
  local dir=$1
  shift
  rm -rf "${out:?}/$dir"
  "$train" sweep --config configs/resnet50_cifar10.yaml --device cuda --batch-sizes 128,512 \
    --precisions bf16 --memory-formats channels_last --warmup-steps 10 --measure-steps 100 \
    --output-dir "$out/$dir" "$@" && cat "$out/$dir/sweep.md"
}

seed_settings() {  # seed_settings DIR [train args]: the seed's model and batch (fp32, batch 32)
  local dir=$1
  shift
  rm -rf "${out:?}/$dir"
  "$train" sweep --config configs/resnet50_cifar10.yaml --device cuda --batch-sizes 32 \
    --precisions fp32 --memory-formats contiguous --warmup-steps 10 --measure-steps 100 \
    --set model.stem=imagenet --set model.num_classes=1000 --output-dir "$out/$dir" "$@" &&
    cat "$out/$dir/sweep.md"
}

convert_data() {
  # This machine's train has no OpenCV: train's listing (train convert --list), Pillow's decoder.
  "$TRAIN_PYTHON" scripts/get_data.py --from "$tarball" --root "$REPO_ROOT/.devdata/cifar10-bin" \
    --to-binary --decode-with-pillow --train "$train"
}

python_baseline() {
  "$TRAIN_PYTHON" scripts/bench_python.py --train "$train" --data "$REPO_ROOT/.devdata/cifar10-bin" \
    --device cuda --threads "$(nproc)" --pairs 1 --steps 100 --skip-accuracy \
    --markdown "$out/bench_python.md" && cat "$out/bench_python.md"
}

python_compile() {
  # The Python user's fast path at the seed's settings: torch.compile(mode="reduce-overhead"),
  # its compilation and graph recording (the first 3 steps) timed apart.
  "$TRAIN_PYTHON" scripts/python_baseline.py --data "$REPO_ROOT/.devdata/cifar10-bin/cifar-10-batches-bin" \
    --arch resnet50 --classes 1000 --batch-size 32 --steps 103 --train-limit 3296 --device cuda \
    --compile
}

real_data() {
  rm -rf "$out/real" &&
    "$train" --config configs/resnet50_cifar10.yaml --device cuda --output-dir "$out/real" \
      --set data.root="$REPO_ROOT/.devdata/cifar10-bin" --set data.source=binary \
      --set training.epochs=1 --set training.precision=bf16 --set checkpoint.enabled=false
}

card_name() {  # the card `train cards` knows this GPU as: GPU_CHECK_CARD, else by nvidia-smi's name
  if [[ -n ${GPU_CHECK_CARD:-} ]]; then echo "$GPU_CHECK_CARD"; return; fi
  case $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) in
    *H200*) echo H200 ;;
    *H100*80GB*HBM3*) echo H100-SXM ;;
    *H100*PCIe*) echo H100-PCIe ;;
    *A100*80GB*PCIe* | *A100*PCIe*80GB*) echo A100-80GB-PCIe ;;
    *A100*80GB* | *A100*SXM*80GB*) echo A100-80GB-SXM ;;
    *A100*) echo A100-40GB ;;
    *H100*NVL*) echo H100-NVL ;;
    *) return 1 ;;
  esac
}

speed_model() {  # the cases of the speed model's check, measured and predicted on this card
  local card
  card=$(card_name) || { echo "gpu_check: speed-model: set GPU_CHECK_CARD to this GPU's name in train cards"; return 1; }
  local status=0 size stem
  for size in 32 224; do
    stem=$([[ $size == 32 ]] && echo cifar || echo imagenet)
    rm -rf "${out:?}/speed_model_$size"
    "$train" sweep --config configs/resnet50_cifar10.yaml --device cuda --card "$card" \
      --output-dir "$out/speed_model_$size" --batch-sizes 64,128,256 --precisions fp32,bf16 \
      --memory-formats contiguous,channels_last --warmup-steps 3 --measure-steps 10 \
      --set model.stem=$stem --set data.image_size=$size --set data.source=synthetic || status=1
  done
  "$TRAIN_PYTHON" scripts/speed_check.py "$out/speed_model_32" "$out/speed_model_224" || status=1
  return $status
}

fast_config() {  # fast_config DIR [train args]: the time-to-accuracy config on the real data
  local dir=$1
  shift
  rm -rf "${out:?}/$dir" &&
    "$train" --config configs/resnet50_cifar10_fast.yaml --device cuda --output-dir "$out/$dir" \
      --set data.root="$REPO_ROOT/.devdata/cifar10-bin" --set data.source=binary \
      --set checkpoint.enabled=false "$@" && cat "$out/$dir/report.md"
}

failed=0
check "GPU visible" gpu.log gpu_info || failed=1
check "build (Release)" build.log build || { failed=1; }
if [[ -x "$train" ]]; then
  if wanted suite; then check "CUDA suite (ctest -L cuda)" cuda_suite.log cuda_suite || failed=1; fi
  if wanted find-max || wanted plan; then
    check "find-max sweep under 4 GiB" find_max.log find_max || failed=1
  fi
  if wanted plan; then check "train plan for 16 GiB from that sweep" plan.log plan || failed=1; fi
  if wanted memory; then
    check "train memory, ResNet-50 batch 256" memory.log memory_study || failed=1
  fi
  if wanted card; then
    check "card prediction against the card" card.log card_prediction || failed=1
  fi
  if wanted nccl; then check "NCCL, one rank" nccl.log nccl_one_rank || failed=1; fi
  data=0
  if [[ -f "$tarball" ]] && { wanted data || wanted compare || wanted speed || named fast || named fast-graphed; }; then
    check "real CIFAR-10 to binary batches" convert.log convert_data && data=1 || failed=1
  fi
  if ((data)) && wanted data; then
    check "real CIFAR-10, one epoch" real_data.log real_data || failed=1
  fi
  if wanted compare; then check "CPU vs GPU, the seed's table" compare.log compare || failed=1; fi
  if ((speed)); then
    check "matmul fp32/bf16 N=8192" matmul.log matmul || failed=1
    check "ResNet-50 bf16 channels_last, batch 128 and 512, 100 steps" resnet50.log \
      resnet50 resnet50 || failed=1
    check "the same, graph-captured step" resnet50_graphed.log \
      resnet50 resnet50_graphed --set training.cuda_graph=on || failed=1
    check "seed settings, eager step" seed_eager.log seed_settings seed_eager || failed=1
    check "seed settings, graph-captured step" seed_graphed.log \
      seed_settings seed_graphed --set training.cuda_graph=on || failed=1
    if ((data)); then
      check "C++ vs the seed's Python loop, seed settings" bench_python.log python_baseline || failed=1
      check "Python torch.compile, seed settings" python_compile.log python_compile || failed=1
    fi
  fi
  if named speed-model; then
    check "speed model against this card, 24 cases" speed_model.log speed_model || failed=1
  fi
  if named fast || named fast-graphed; then
    if ((data)); then
      if named fast; then
        check "fast config to 94%, eager" fast.log fast_config fast || failed=1
      fi
      if named fast-graphed; then
        check "fast config to 94%, graph-captured step" fast_graphed.log \
          fast_config fast_graphed --set training.cuda_graph=on || failed=1
      fi
    else
      echo "gpu_check: fast and fast-graphed need the real data ($tarball)" >&2
      failed=1
    fi
  fi
fi

"$TRAIN_PYTHON" scripts/gpu_check_report.py "$out" || failed=1
echo "gpu_check: $out/gpu_check.md"
exit $failed
