#!/usr/bin/env bash
# Installs OpenMPI from Debian (openmpi-bin for mpirun, libopenmpi-dev for mpicxx, which
# Horovod's build needs to build its MPI controller). The mpirun launcher and Horovod's MPI
# controller use it. Idempotent: installs only what is missing.
set -euo pipefail
missing=()
command -v mpirun >/dev/null || missing+=(openmpi-bin)
command -v mpicxx >/dev/null || missing+=(libopenmpi-dev)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
"$(dirname "$0")"/apt-install.sh "the mpirun launcher and Horovod's MPI controller" "${missing[@]}"
