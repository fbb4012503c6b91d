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
if ! command -v apt-get >/dev/null; then
    echo "no apt-get here: install jemalloc (libjemalloc.so.2) and gperftools' tcmalloc (libtcmalloc_minimal.so.4) with this system's package manager" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install libjemalloc2 and libtcmalloc-minimal4 (Debian) as root" >&2; exit 1; }
    sudo=sudo
fi
echo "installing libjemalloc2 + libtcmalloc-minimal4 (Debian packages) for the allocator key"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libjemalloc2 libtcmalloc-minimal4 >/dev/null
