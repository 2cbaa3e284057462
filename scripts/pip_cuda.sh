#!/usr/bin/env bash
# The CUDA 13.0 compiler and headers from PyPI, for a machine without NVIDIA's toolkit.
#   scripts/pip_cuda.sh VENV     (called by setup.sh; prints the toolkit folder on stdout)
# torch 2.11.0's wheels already put CUDA 13.0's headers and libraries in VENV's
# site-packages/nvidia/cu13; nvcc (with its crt headers and NVVM) is what is missing. It comes from
# the same CUDA release, pinned: unpinned, pip picks the newest (13.5), whose crt headers do not
# match the 13.0 nvcc. Nothing is fetched when the pinned versions are there.
# The wheels lay the libraries out for Python (only versioned names, no libcuda stub), not for
# CMake's FindCUDA/FindCUDAToolkit, so VENV/cuda-toolkit is assembled from links: bin/, include/,
# nvvm/, lib64/ with unversioned names, and lib64/stubs/libcuda.so. That stub is an empty library
# compiled here: LibTorch's CMake targets name CUDA::cuda_driver, but nothing we link calls the
# driver (the link drops it as not needed; scripts/check_pip_cuda.sh checks the binary), and at run
# time LibTorch opens the real libcuda.so.1 itself.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: scripts/pip_cuda.sh VENV" >&2; exit 2; }
venv=$1
[[ -x "$venv/bin/python" ]] || { echo "pip_cuda: $venv is not a virtualenv (no bin/python)" >&2; exit 2; }
CUDA_WHEEL_VERSION=13.0.88
wheels=("nvidia-cuda-nvcc==$CUDA_WHEEL_VERSION" "nvidia-cuda-crt==$CUDA_WHEEL_VERSION"
        "nvidia-nvvm==$CUDA_WHEEL_VERSION")

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cu13=$site/nvidia/cu13
[[ -d "$cu13/include" && -d "$cu13/lib" ]] || {
  echo "pip_cuda: $cu13 has no include/ and lib/ (torch 2.11.0's CUDA 13.0 wheels)" >&2
  exit 2
}
installed=$("$venv/bin/pip" list --format=freeze 2>/dev/null | grep -c -E \
  "^(nvidia-cuda-nvcc|nvidia-cuda-crt|nvidia-nvvm)==$CUDA_WHEEL_VERSION\$" || true)
if [[ "$installed" != 3 || ! -x "$cu13/bin/nvcc" ]]; then
  echo "setup: installing CUDA $CUDA_WHEEL_VERSION's nvcc from PyPI into $venv" >&2
  "$venv/bin/pip" install -q "${wheels[@]}" >&2
fi

toolkit=$venv/cuda-toolkit
rm -rf "$toolkit.new"
mkdir -p "$toolkit.new/lib64/stubs"
for d in bin include nvvm; do ln -s "$cu13/$d" "$toolkit.new/$d"; done
shopt -s nullglob
for lib in "$cu13"/lib/*.so.* "$cu13"/lib/*.a; do
  name=$(basename "$lib")
  ln -s "$lib" "$toolkit.new/lib64/$name"
  if [[ "$name" == *.so.* ]]; then ln -sf "$lib" "$toolkit.new/lib64/${name%%.so.*}.so"; fi
done
cc -shared -x c /dev/null -o "$toolkit.new/lib64/stubs/libcuda.so" -Wl,-soname,libcuda.so.1
rm -rf "$toolkit"
mv "$toolkit.new" "$toolkit"
echo "$toolkit"
