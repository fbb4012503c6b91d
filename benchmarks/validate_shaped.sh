#!/bin/bash
# The performance model against every engine across emulated nodes on a shaped link
# (docs/perfmodel.md, "Per engine: the model's error on each network"): the microbench of each
# engine's collectives on the same nodes and link, then the four predictions-100mbit presets on
# NETWORK, 3 runs a point, interleaved, then predict --validate. 2 nodes for the all-reduce
# engines and mxnet-kv (its server and scheduler on the second node), 3 for the parameter
# servers of torch and TensorFlow (one process a node). 15 (ResNet-20) to 23 minutes on 2
# cores; run it alone, as root (the links are network namespaces shaped by tc).
# NODES above 2: the all-reduce engines at NODES workers, one a node (microbench of NODES ranks),
# and keras-fit and torch-fsdp at 1 and NODES workers; the parameter servers are left out (their
# servers are extra processes, placed for 2 and 3 nodes). 4 nodes: about 25 minutes (ResNet-20).
# Usage: benchmarks/validate_shaped.sh NETWORK [RESULTS_DIR] [MODEL] [NODES]   e.g. 100mbit, 1gbit
set -euo pipefail
N=${1:?network, e.g. 100mbit or 1gbit}
R=${2:-/tmp/validate-$N}
M=${3:-resnet20}
NODES=${4:-2}
B=${DLSCALE:-dlscale}
rm -rf "$R"
echo "start $(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg), commit $(git -C "$(dirname "$0")" rev-parse --short HEAD), network $N, model $M, nodes $NODES"
on_nodes() { echo --launcher torchrun --set nnodes="$1" --set network="$N"; }
run() { $B run --preset "$@" --repeats 3 --set network="$N" --model "$M" --results "$R"; }
if [ "$NODES" != 2 ]; then
  for b in torch-ddp horovod-torch tf-mwms jax-dp; do
    $B microbench --backend $b --workers "$NODES" $(on_nodes "$NODES") --sizes 4..4M --results "$R" > /dev/null
  done
  echo "microbench done $(date -u +%FT%TZ)"
  run predictions-100mbit --workers "$NODES" --set nnodes="$NODES"
  run predictions-100mbit-baselines --backend keras-fit,torch-fsdp --workers 1,"$NODES" --set nnodes="$NODES"
else
  for b in torch-ddp horovod-torch tf-mwms jax-dp mxnet-kv; do
    $B microbench --backend $b --workers 2 $(on_nodes 2) --sizes 4..4M --results "$R" > /dev/null
  done
  $B microbench --backend torch-ddp --workers 3 $(on_nodes 3) --sizes 4..4M --results "$R" > /dev/null
  echo "microbench done $(date -u +%FT%TZ)"
  run predictions-100mbit
  run predictions-100mbit-baselines --set kvstore=dist_sync,dist_async
  run predictions-100mbit-ps
  run predictions-100mbit-ps-async
fi
echo "runs done $(date -u +%FT%TZ)"
COLUMNS=200 $B predict --validate "$R"
$B predict --validate "$R" --json > "$R/validation.jsonl"
echo "end $(date -u +%FT%TZ)"
