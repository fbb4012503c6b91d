#!/usr/bin/env bash
# Installs iproute2 (ip, tc) from Debian if missing: network = ... (docs/clusters.md) makes a
# network namespace per node, veth links and tc shaping with it, and its tests make them.
# Idempotent: installs only what is missing.
set -euo pipefail
if command -v ip >/dev/null && command -v tc >/dev/null; then
    exit 0
fi
"$(dirname "$0")"/apt-install.sh "emulated networks (network namespaces, veth, tc)" iproute2
