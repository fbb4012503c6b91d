#!/usr/bin/env bash
# Installs Debian's chromium and chromedriver for the report's browser test (make test runs it).
# Idempotent: does nothing when both are already on PATH.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
"$(dirname "$0")"/apt-install.sh "the report's browser test" chromium chromium-driver
