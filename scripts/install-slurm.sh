#!/usr/bin/env bash
# Installs a real Slurm from Debian (slurm-wlm: slurmctld, slurmd, srun, sbatch, squeue,
# scontrol, scancel; munge for its authentication). The slurm launcher drives it;
# scripts/slurm-local.sh starts and stops a one-node cluster on this machine for the tests.
# Idempotent: installs only what is missing.
set -euo pipefail
missing=()
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
"$(dirname "$0")"/apt-install.sh "the slurm launcher and its tests (a one-node Slurm)" "${missing[@]}"
