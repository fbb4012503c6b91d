#!/usr/bin/env bash
# A real Slurm on this machine, for the slurm launcher's tests and for trying it:
#   scripts/slurm-local.sh start DIR   writes DIR/slurm.conf, starts munged (if not running),
#                                      slurmctld and slurmd, waits until the node is idle;
#                                      prints the line to export: SLURM_CONF=DIR/slurm.conf
#   scripts/slurm-local.sh start DIR --hosts N [--owner PID]
#                                      a Slurm of N nodes: N emulated hosts (dlscale hosts
#                                      start DIR/hosts: network and UTS namespaces, sshd), one
#                                      slurmd in each (dlsnode1..N), slurmctld on this machine
#   scripts/slurm-local.sh start DIR ... --cpus C --gpus G
#                                      nodes that advertise C CPUs (default: this machine's,
#                                      at least 8) and G GPUs each (Gres whose devices are
#                                      empty files: a GPU study is planned and dry-run against
#                                      them, as from a login node, while this machine keeps its
#                                      own cores and no GPU)
#   scripts/slurm-local.sh stop DIR    stops the daemons it started (and munged, if it did)
#                                      and the emulated hosts
# Needs root (the daemons run as root here) and scripts/install-slurm.sh. The configuration
# lives in DIR, not /etc/slurm, so a machine's own Slurm is left alone; clients find it through
# SLURM_CONF. The node offers more CPUs than the machine has (config_overrides), so a study's
# points of 3-4 processes fit on a 2-core machine, as under the local launcher.
set -euo pipefail
usage="usage: slurm-local.sh start|stop DIR [--hosts N] [--cpus C] [--gpus G] [--owner PID]"
action=${1:?$usage}
dir=$(realpath -m "${2:?$usage}")
shift 2
hosts=0
cpus=$(( $(nproc) > 8 ? $(nproc) : 8 ))
gpus=0
owner=()
while [ $# -gt 0 ]; do
    case $1 in
        --hosts) hosts=${2:?$usage}; shift 2 ;;
        --cpus) cpus=${2:?$usage}; shift 2 ;;
        --gpus) gpus=${2:?$usage}; shift 2 ;;
        --owner) owner=(--owner "${2:?$usage}"); shift 2 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
case $hosts in ''|*[!0-9]*) echo "slurm-local.sh: --hosts takes a number of nodes, not '$hosts'" >&2; exit 2 ;; esac
case $cpus in ''|0|*[!0-9]*) echo "slurm-local.sh: --cpus takes a number of CPUs (1 or more), not '$cpus'" >&2; exit 2 ;; esac
case $gpus in ''|*[!0-9]*) echo "slurm-local.sh: --gpus takes a number of GPUs, not '$gpus'" >&2; exit 2 ;; esac
conf=$dir/slurm.conf
root=$(cd "$(dirname "$0")/.." && pwd)
python=${DLSCALE_PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3

stop() {
    for file in "$dir"/*.slurmd.pid "$dir/slurmctld.pid" "$dir/munged.pid"; do
        if [ -f "$file" ]; then
            pid=$(cat "$file")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
            rm -f "$file"
        fi
    done
    if [ -f "$dir/hosts/hosts.json" ]; then  # the nodes' slurmd go with their hosts
        "$python" -m dlscale hosts stop "$dir/hosts" >/dev/null || true
    fi
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
controller=$host
memory=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10 ))
gres=""
gres_types=""
if [ "$gpus" -gt 0 ]; then  # GPUs planned against, never used: empty files stand for devices
    gres=" Gres=gpu:$gpus"
    gres_types="GresTypes=gpu"
    mkdir -p "$dir/dev"  # Slurm drops a GPU without a File ("file-less GPU"), so each has one
    for k in $(seq 0 $((gpus - 1))); do : > "$dir/dev/gpu$k"; done
    echo "Name=gpu File=$dir/dev/gpu[0-$((gpus - 1))]" > "$dir/gres.conf"  # beside slurm.conf
else
    rm -f "$dir/gres.conf"
fi
nodes="NodeName=$host CPUs=$cpus RealMemory=$memory$gres State=UNKNOWN"
partition=$host
if [ "$hosts" -gt 0 ]; then
    "$python" -m dlscale hosts start "$dir/hosts" --hosts "$hosts" --slots "$cpus" "${owner[@]}" >/dev/null
    controller="$host(10.98.0.1)"  # this machine, as the hosts reach it
    memory=$(( memory / hosts ))
    nodes=""
    for k in $(seq "$hosts"); do
        nodes+="NodeName=dlsnode$k NodeAddr=10.98.0.$((100 + k)) CPUs=$cpus RealMemory=$memory$gres State=UNKNOWN"$'\n'
    done
    partition="dlsnode[1-$hosts]"
fi
cat > "$conf" <<CONF
ClusterName=dlscale-local
SlurmctldHost=$controller
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/%n.slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=600
KillWait=5
JobAcctGatherType=jobacct_gather/none
$gres_types
$nodes
PartitionName=debug Nodes=$partition Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF

export SLURM_CONF=$conf
slurmctld
if [ "$hosts" -gt 0 ]; then  # each node's slurmd in its host, started over ssh as on a cluster
    for k in $(seq "$hosts"); do
        mkdir -p "$dir/spool/dlsnode$k"
        if ! ssh "dlsnode$k" "slurmd -f '$conf' -N dlsnode$k"; then
            said=$(tail -1 "$dir/log/slurmd-dlsnode$k.log" 2>/dev/null || true)
            echo "slurm-local.sh: slurmd did not start on dlsnode$k: ${said:-no log}" >&2
            stop
            exit 1
        fi
    done
else
    mkdir -p "$dir/spool/$host"
    slurmd
fi
want=$(( hosts > 0 ? hosts : 1 ))
for _ in $(seq 150); do
    idle=$(sinfo -h -N -o %t 2>/dev/null | grep -cx idle || true)
    if [ "$idle" -ge "$want" ]; then
        echo "SLURM_CONF=$conf"
        exit 0
    fi
    sleep 0.2
done
state=$(sinfo -h -N -o '%N %t' 2>/dev/null | tr '\n' ' ' || true)
echo "slurm-local.sh: the nodes did not become idle in 30 s (${state:-no state}); logs in $dir/log" >&2
stop
exit 1
