#!/usr/bin/env bash
# Installs the Debian packages moex needs to build, test and train, and the npm packages of
# the server's client tests (tests/serve_clients/install.sh). Idempotent and
# non-interactive: packages already present are skipped without touching apt or npm.
#   --run   only what building and running `moex` needs (`make run`)
#   --fuzz  what `make fuzz` needs
set -euo pipefail

run_packages=(
  build-essential cmake ninja-build pkg-config
  libhwy-dev nlohmann-json3-dev libcli11-dev liburing-dev libpcre2-dev libcpp-httplib-dev
  libopenblas-dev libedit-dev
)
# Open MPI: expert parallelism over several processes or hosts (docs/expert-parallel.md),
# optional at run time, built and tested here (mpirun on loopback).
build_packages=("${run_packages[@]}" libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev
  openmpi-bin)
# Python is used only by tools/ (training, PyTorch reference logits in tests).
python_packages=(python3 python3-numpy python3-torch libopenblas0-pthread)
# The server's tests: promtool checks /metrics, Chromium loads the web page, Node runs the
# official openai client (tests/serve_clients); clang checks the locking rules
# (scripts/check-thread-safety.sh). A Node.js already installed is kept.
test_packages=(prometheus chromium jq tmux clang)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  test_packages+=(nodejs npm)
fi

# `make fuzz` (--fuzz): clang with libFuzzer's runtime, and nothing else.
fuzz_packages=(clang libclang-rt-14-dev)
wanted=("${build_packages[@]}" "${python_packages[@]}" "${test_packages[@]}")
if [ "${1:-}" = "--fuzz" ]; then wanted=("${build_packages[@]}" "${fuzz_packages[@]}"); fi
if [ "${1:-}" = "--run" ]; then wanted=("${run_packages[@]}"); fi

missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ -z "${1:-}" ]; then bash "$(dirname "$0")/../tests/serve_clients/install.sh"; fi
