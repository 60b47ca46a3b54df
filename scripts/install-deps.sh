#!/usr/bin/env bash
# Installs the Debian packages moex needs to build, test and train. Idempotent and
# non-interactive: packages already present are skipped without touching apt.
set -euo pipefail

build_packages=(
  build-essential cmake ninja-build pkg-config
  libhwy-dev nlohmann-json3-dev libcli11-dev liburing-dev libpcre2-dev libcpp-httplib-dev
  libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev
)
# Python is used only by tools/ (training, PyTorch reference logits in tests).
python_packages=(python3 python3-numpy python3-torch libopenblas0-pthread)

missing=()
for p in "${build_packages[@]}" "${python_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
