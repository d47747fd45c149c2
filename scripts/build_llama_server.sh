#!/usr/bin/env bash
# Build llama-server + llama-quantize (+ llama-bench with --bench) from a llama.cpp source tree
# (the vendor/llama.cpp of the PyPI sdist llama-cpp-python==0.3.36, commit 0c1e57098) and install the
# binaries into PREFIX/bin. Works on the 2-core CPU machine and, with --cuda, on the H200 box
# (nvcc + cmake + ninja there, no network: the UI flags keep cmake from downloading the web UI).
#
# usage: scripts/build_llama_server.sh SRC_DIR PREFIX [--cuda] [--bench] [--jobs N] [--build-dir DIR]
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 SRC_DIR PREFIX [--cuda] [--bench] [--jobs N] [--build-dir DIR]" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
prefix=$2
shift 2
cuda=0
bench=0
jobs=$(nproc)
build_dir=""
commit=${LLAMA_BUILD_COMMIT:-0c1e57098}
while [[ $# -gt 0 ]]; do
  case $1 in
    --cuda) cuda=1 ;;
    --bench) bench=1 ;;
    --jobs) jobs=$2; shift ;;
    --build-dir) build_dir=$2; shift ;;
    *) echo "$0: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -n $build_dir ]] || build_dir="$src/build"
[[ -f $src/CMakeLists.txt && -d $src/tools/server ]] || { echo "$0: $src is not a llama.cpp tree" >&2; exit 2; }

flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DGGML_NATIVE=OFF            # ON ties the binary to the build CPU
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_UI=OFF         # without these two the build tries to download a web UI
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_OPENSSL=OFF
  -DBUILD_SHARED_LIBS=OFF      # self-contained binaries: they can be copied out of the build dir
  -DLLAMA_BUILD_COMMIT="$commit"  # else the server reports "build 0 (unknown)"
)
targets=(llama-server llama-quantize)
[[ $bench == 1 ]] && targets+=(llama-bench)
if [[ $cuda == 1 ]]; then
  flags+=(-G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}")
fi

t0=$(date +%s)
cmake -S "$src" -B "$build_dir" "${flags[@]}"
cmake --build "$build_dir" --config Release -j "$jobs" --target "${targets[@]}"
t1=$(date +%s)

mkdir -p "$prefix/bin"
for t in "${targets[@]}"; do
  install -m 755 "$build_dir/bin/$t" "$prefix/bin/$t"
done
echo "built ${targets[*]} in $((t1 - t0)) s -> $prefix/bin"
"$prefix/bin/llama-server" --version 2>&1 | head -3 || true
