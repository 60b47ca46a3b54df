#!/usr/bin/env bash
# Installs the npm packages of the client tests (exactly those of package-lock.json) into
# tests/serve_clients/node_modules, which git ignores. Idempotent: does nothing when they
# were installed from the current lock file.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null; then
  echo "serve_clients: npm is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
stamp=node_modules/.moex-installed-from
lock=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock" ]; then
  exit 0
fi
echo "serve_clients: npm ci in $(pwd)"
npm ci --no-audit --no-fund --loglevel=error
echo "$lock" >"$stamp"
