#!/usr/bin/env bash
# scripts/setup.sh: installs the Debian packages mlxcel needs to build, test and run.
# Idempotent: packages already present are not fetched again. Used by the README, .ci/run and
# developers alike. It does not build anything (see `make`).
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libjansson-dev libpcre2-dev libutf8proc-dev liblzma-dev xz-utils
  libmicrohttpd-dev libcurl4-openssl-dev libopenblas-dev libyaml-dev
  curl python3 nodejs npm clang libclang-rt-14-dev
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # nodejs/npm may come from outside Debian on some machines: accept any working binary
    case "$p" in
      nodejs) command -v node >/dev/null 2>&1 && continue ;;
      npm) command -v npm >/dev/null 2>&1 && continue ;;
      python3) command -v python3 >/dev/null 2>&1 && continue ;;
      clang) command -v clang >/dev/null 2>&1 && continue ;;
    esac
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"

# Node packages for the server's client tests (tests/node: the official `openai` client).
# Skipped when node_modules already matches package-lock.json.
NODE_DIR="$(cd "$(dirname "$0")/.." && pwd)/tests/node"
if [ -f "$NODE_DIR/package-lock.json" ] && command -v npm >/dev/null 2>&1; then
  if [ -f "$NODE_DIR/node_modules/.package-lock.json" ] && [ "$NODE_DIR/node_modules/.package-lock.json" -nt "$NODE_DIR/package-lock.json" ]; then
    echo "setup: tests/node packages present"
  else
    echo "setup: npm ci in tests/node"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
fi
