#!/bin/bash
# The performance model against every engine on the loopback (docs/perfmodel.md, "Per engine:
# the model's error on each network"): each engine's microbench of its own collectives, then
# presets/predictions.toml (ResNet-20, every engine on its own pattern) at 3 runs a point,
# interleaved, then predict --validate. 10 (ResNet-20) to 15 minutes (ResNet-44) on 2 cores;
# run it alone.
# Usage: benchmarks/validate_loopback.sh [RESULTS_DIR] [MODEL]   (MODEL: resnet20, the default)
set -euo pipefail
R=${1:-/tmp/validate-loopback}
M=${2:-resnet20}
B=${DLSCALE:-dlscale}
rm -rf "$R"
echo "start $(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg), commit $(git -C "$(dirname "$0")" rev-parse --short HEAD), model $M"
for b in torch-ddp horovod-torch tf-mwms mxnet-kv jax-dp torch-ps tf-ps; do
  $B microbench --backend $b --workers 2 --sizes 4..16M --results "$R" > /dev/null
done
echo "microbench done $(date -u +%FT%TZ)"
$B run --preset predictions --repeats 3 --model "$M" --results "$R"
echo "runs done $(date -u +%FT%TZ)"
COLUMNS=200 $B predict --validate "$R"
$B predict --validate "$R" --json > "$R/validation.jsonl"
echo "end $(date -u +%FT%TZ)"
