#!/usr/bin/env bash
# Installs Debian's jemalloc and tcmalloc (minimal) for the `allocator` key (jemalloc, tcmalloc;
# src/dlscale/runtime/allocator.py). make test and make demo run it.
# Idempotent: does nothing when both libraries are already known to the dynamic loader.
set -euo pipefail
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
have() {  # known to the loader's cache, or in a library directory
    "$ldconfig" -p 2>/dev/null | awk -v name="$1" '$1 == name {found = 1} END {exit !found}' && return 0
    for file in /usr/lib/*/"$1" /usr/lib64/"$1" /usr/lib/"$1"; do [ -e "$file" ] && return 0; done
    return 1
}
if have libjemalloc.so.2 && have libtcmalloc_minimal.so.4; then
    exit 0
fi
"$(dirname "$0")"/apt-install.sh "the allocator key (jemalloc: libjemalloc.so.2, tcmalloc: libtcmalloc_minimal.so.4)" \
    libjemalloc2 libtcmalloc-minimal4
