#!/usr/bin/env bash
# Installs the instruction counters of benchmarks/instructions.py from Debian packages:
# linux-perf (hardware counters) and valgrind (counts in software where there are none).
# Idempotent: installs only what is missing. perf counts instructions only where the kernel
# drives the CPU's counters (bare metal, or a virtual machine with a virtual PMU) and
# /proc/sys/kernel/perf_event_paranoid allows it (<= 2 for a user's own processes, or root).
set -euo pipefail
missing=()
command -v perf >/dev/null || missing+=(linux-perf)
command -v valgrind >/dev/null || missing+=(valgrind)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
"$(dirname "$0")"/apt-install.sh "benchmarks/instructions.py" "${missing[@]}"
