#!/usr/bin/env bash
# Installs Debian's perf (package linux-perf) for benchmarks/instructions.py.
# Idempotent: does nothing when perf is already on PATH. perf counts instructions only where the
# kernel drives the CPU's counters (bare metal, or a virtual machine with a virtual PMU) and
# /proc/sys/kernel/perf_event_paranoid allows it (<= 2 for a user's own processes, or root).
set -euo pipefail
if command -v perf >/dev/null; then
    exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install linux-perf (Debian) as root" >&2; exit 1; }
    sudo=sudo
fi
echo "installing linux-perf (Debian package) for benchmarks/instructions.py"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq linux-perf >/dev/null
