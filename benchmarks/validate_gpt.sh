#!/bin/bash
# The performance model on a transformer (docs/benchmarks.md, "The GPT predicted: DDP against
# FSDP on one model"): gpt-mini through torch-ddp (the ring), torch-fsdp and deepspeed-zero2
# (FSDP's collectives) at 1 and 2 workers, 3 runs each, interleaved; the microbench of the
# collectives they use; then each 2-worker point predicted on its own pattern.
# Usage: benchmarks/validate_gpt.sh [RESULTS_DIR]  (about 6 minutes on 2 cores; run it alone)
set -euo pipefail
R=${1:-/tmp/validate-gpt}
B=${DLSCALE:-dlscale}
rm -rf "$R"
echo "start $(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg), commit $(git -C "$(dirname "$0")" rev-parse --short HEAD)"
$B run --preset sharded-dp --backend torch-ddp,torch-fsdp,deepspeed-zero2 --repeats 3 --results "$R"
$B microbench --backend torch-ddp --workers 2 --sizes 4..32M \
  --collectives all_reduce,all_gather,reduce_scatter --results "$R"
COLUMNS=160 $B predict --validate "$R"
echo "end $(date -u +%FT%TZ)"
