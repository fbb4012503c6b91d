#!/bin/bash
# The performance model on two levels (docs/perfmodel.md, "Two levels, measured"): 2 emulated
# nodes (torchrun, network namespaces) on 100 Mbit/s links, 2 ranks a node. The link between
# nodes is fitted by a microbench of one rank a node, the link inside by one of two ranks on one
# node; torch-ddp and torch-fsdp at 4 workers (2 a node) are then priced on the two fits (no
# microbench measured 4 ranks), each point 3 runs, interleaved. Root (tc); about 3 minutes on 2
# cores; run it alone. Usage: benchmarks/validate_two_levels.sh [RESULTS_DIR]
set -euo pipefail
R=${1:-/tmp/validate-two-levels}
B=${DLSCALE:-dlscale}
rm -rf "$R"
echo "start $(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg), commit $(git -C "$(dirname "$0")" rev-parse --short HEAD)"
$B microbench --backend torch-ddp --workers 2 --launcher torchrun --set nnodes=2 \
  --set network=100mbit --sizes 4..4M --results "$R"
$B microbench --backend torch-ddp --workers 2 --sizes 4..4M --results "$R"
$B run --preset predictions-100mbit --backend torch-ddp,torch-fsdp --workers 1,4 --repeats 3 \
  --results "$R"
COLUMNS=160 $B predict --validate "$R"
COLUMNS=120 $B predict --network-from "$R" --results "$R" --ranks-per-node 2 --model resnet20 \
  --batch 32 --workers 4,16,64 --pattern ring,ring-overlap,hierarchical,fsdp
echo "end $(date -u +%FT%TZ)"
