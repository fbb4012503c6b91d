#!/usr/bin/env bash
# Installs Debian's chromium and chromedriver for the report's browser test (make test runs it).
# Idempotent: does nothing when both are already on PATH.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install chromium and chromium-driver (Debian) as root" >&2; exit 1; }
    sudo=sudo
fi
echo "installing chromium + chromium-driver (Debian packages) for the report's browser test"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
