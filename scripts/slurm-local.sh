#!/usr/bin/env bash
# A real one-node Slurm on this machine, for the slurm launcher's tests and for trying it:
#   scripts/slurm-local.sh start DIR   writes DIR/slurm.conf, starts munged (if not running),
#                                      slurmctld and slurmd, waits until the node is idle;
#                                      prints the line to export: SLURM_CONF=DIR/slurm.conf
#   scripts/slurm-local.sh stop DIR    stops the daemons it started (and munged, if it did)
# Needs root (the daemons run as root here) and scripts/install-slurm.sh. The configuration
# lives in DIR, not /etc/slurm, so a machine's own Slurm is left alone; clients find it through
# SLURM_CONF. The node offers more CPUs than the machine has (config_overrides), so a study's
# points of 3-4 processes fit on a 2-core machine, as under the local launcher.
set -euo pipefail
action=${1:?usage: slurm-local.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: slurm-local.sh start|stop DIR}")
conf=$dir/slurm.conf

stop() {
    for daemon in slurmd slurmctld munged; do
        if [ -f "$dir/$daemon.pid" ]; then
            pid=$(cat "$dir/$daemon.pid")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
            rm -f "$dir/$daemon.pid"
        fi
    done
}

if [ "$action" = stop ]; then
    stop
    exit 0
fi
[ "$action" = start ] || { echo "usage: slurm-local.sh start|stop DIR" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slurm-local.sh: the daemons need root" >&2; exit 1; }
command -v slurmctld >/dev/null || { echo "slurm-local.sh: run scripts/install-slurm.sh first" >&2; exit 1; }
stop  # whatever an earlier start in DIR left
if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
    echo "slurm-local.sh: a Slurm already runs on this machine (slurmctld/slurmd); use it through" \
        "its SLURM_CONF, or stop it first (slurm-local.sh stop ITS_DIR)" >&2
    exit 1
fi
mkdir -p "$dir/state" "$dir/spool" "$dir/log"

if ! pgrep -x munged >/dev/null; then
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    runuser -u munge -- munged --force
    for _ in $(seq 50); do  # the daemon's pid once it serves (not the pid that forked it)
        if [ -s /run/munge/munged.pid ] && munge -n >/dev/null 2>&1; then break; fi
        sleep 0.1
    done
    cp /run/munge/munged.pid "$dir/munged.pid"
fi

host=$(hostname -s)
cpus=$(( $(nproc) > 8 ? $(nproc) : 8 ))
memory=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10 ))
cat > "$conf" <<CONF
ClusterName=dlscale-local
SlurmctldHost=$host
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=600
KillWait=5
JobAcctGatherType=jobacct_gather/none
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF

export SLURM_CONF=$conf
slurmctld
slurmd
for _ in $(seq 150); do
    state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
    if [ "$state" = idle ]; then
        echo "SLURM_CONF=$conf"
        exit 0
    fi
    sleep 0.2
done
echo "slurm-local.sh: the node did not become idle in 30 s (state '${state:-none}'); logs in $dir/log" >&2
stop
exit 1
