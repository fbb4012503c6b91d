#!/usr/bin/env bash
# Installs Debian's OpenSSH server and client if missing: the emulated hosts (dlscale hosts
# start, docs/clusters.md) run one sshd per host, which mpirun and horovodrun reach by ssh as on
# a cluster. Nothing is started or enabled here: each test bed starts its own sshd daemons.
# Idempotent: installs only what is missing.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null || missing+=(openssh-client)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
"$(dirname "$0")"/apt-install.sh "the emulated hosts' ssh servers" "${missing[@]}"
