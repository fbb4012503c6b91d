#!/usr/bin/env bash
# Creates MXNet's own virtual environment (default .venv-mxnet, beside .venv): numpy 1.23.5,
# mxnet 1.9.1, and what a dlscale worker needs there (torch for the PyTorch twin's initial
# weights, scikit-learn for the digits data set), pinned in constraints-mxnet.txt. dlscale's
# MXNet backends run their processes with this interpreter (docs/architecture.md, "MXNet");
# dlscale itself is not installed there: each run links it into the workers' path.
#
#   scripts/install-mxnet.sh [VENV]      (`make mxnet` calls it, then builds Horovod there)
#
# Idempotent: a second run with the same constraints does nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/.venv-mxnet}
constraints="$root/constraints-mxnet.txt"
stamp="$venv/.installed-mxnet"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$constraints" "$stamp"; then
    echo "MXNet environment ready: $venv"
    exit 0
fi
python=${PYTHON:-python3}
echo "creating the MXNet environment $venv (numpy 1.23.5, mxnet 1.9.1; about a minute)"
"$python" -m venv "$venv"
# the constraints file names every package: install exactly those, one resolution
"$venv/bin/python" -m pip install --disable-pip-version-check -q -c "$constraints" \
    $(grep -v '^#' "$constraints" | sed 's/==.*//')
"$venv/bin/python" - <<'PY'
import mxnet, numpy
features = mxnet.runtime.Features()
assert features.is_enabled("DIST_KVSTORE"), "this mxnet wheel has no distributed kvstore"
print(f"mxnet {mxnet.__version__} (numpy {numpy.__version__}) ready")
PY
cp "$constraints" "$stamp"
