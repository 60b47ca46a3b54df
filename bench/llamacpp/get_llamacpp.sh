#!/usr/bin/env bash
# Puts llama.cpp on a machine without internet access except the npm registry: installs
# node-llama-cpp (the version bench/llamacpp/package.json pins, prebuilt CPU binaries for
# node) into DEST/llamacpp-npm, checks out the llama.cpp source that package ships (a git
# bundle) into DEST/llama.cpp and builds its CPU tools there with cmake. Never run in CI.
#
#   bench/llamacpp/get_llamacpp.sh [DEST=/work/data]
#
# Binaries: DEST/llama.cpp/build/bin/{llama-bench,llama-quantize,llama-cli,llama-simple,
# llama-server,llama-logits}. llama-logits is bench/llamacpp/llama_logits.c (writes the raw
# logits of every position for given token ids). llama-server comes without its web UI (a
# download); its API works. Environment: JOBS (default 2); the build runs under `nice` (31
# minutes on 2 vCPUs at load 5-7). Re-running reuses what is there (npm install and the
# build are incremental; seconds).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dest=${1:-/work/data}
jobs=${JOBS:-2}
mkdir -p "$dest/llamacpp-npm"
dest=$(cd "$dest" && pwd)
npm_dir=$dest/llamacpp-npm
src=$dest/llama.cpp

cp "$here/package.json" "$here/package-lock.json" "$npm_dir/"
(cd "$npm_dir" && npm install --no-audit --no-fund)
bundle=$npm_dir/node_modules/node-llama-cpp/llama/gitRelease.bundle
[[ -f $bundle ]] || { echo "no llama.cpp source bundle at $bundle" >&2; exit 1; }
[[ -d $src/.git ]] || git clone --quiet "$bundle" "$src"

# Same compiler flags as the machine allows (GGML_NATIVE); no network: no HTTPS client and
# no prebuilt web UI download for llama-server.
cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
nice cmake --build "$src/build" -j "$jobs" \
  --target llama-bench llama-quantize llama-cli llama-simple llama-server
# The logit printer, compiled against the libllama just built.
nice cc -O2 -std=c11 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" "$here/llama_logits.c" \
  -L"$src/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$src/build/bin" \
  -o "$src/build/bin/llama-logits"
ls -l "$src"/build/bin/llama-{bench,quantize,cli,simple,server,logits}
