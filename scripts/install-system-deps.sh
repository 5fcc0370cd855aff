#!/usr/bin/env bash
# Debian packages the tests use, installed only when missing (root, or via sudo when available).
set -euo pipefail
needed=()
command -v chromium >/dev/null 2>&1 || needed+=(chromium)
if [ ${#needed[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-system-deps: need root to install: ${needed[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${needed[@]}" >/dev/null
