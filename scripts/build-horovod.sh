#!/usr/bin/env bash
# Builds Horovod 0.28.1 (the last release) from its source distribution into a virtual
# environment, against the frameworks installed there, and caches the wheel outside the
# checkout so that the next install takes seconds.
#
#   scripts/build-horovod.sh [VENV [FRAMEWORKS]]   (default .venv; `make horovod` calls it)
#
# What it builds: the Gloo controller always; MPI when OpenMPI's compiler wrapper (mpicxx) is
# installed; the PyTorch, TensorFlow and MXNet bindings of the frameworks found in VENV, or of
# those of them named in FRAMEWORKS (comma-separated: torch,tensorflow,mxnet). The MXNet
# environment holds torch too (for the PyTorch twin's initial weights) but gets the MXNet
# binding only: `make mxnet` passes `mxnet`.
# CPU operations only (HOROVOD_CPU_OPERATIONS=gloo): a machine may have nvcc and no GPU
# (this one has), and Horovod's GPU operations need NCCL and a GPU to build and test against;
# set HOROVOD_GPU_OPERATIONS=NCCL yourself on a GPU machine (the cache key then says nccl).
#
# Patches applied to the unpacked sdist (docs/architecture.md, "Horovod"):
# - C++17 instead of C++14 in its CMake files: PyTorch >= 2.1 headers need C++17
#   (horovod/horovod#3996; fixed on master by #3998, never released);
# - TensorFlow only: the XLA custom-call source dropped (TF 2.21's wheel lacks the XLA headers
#   it includes; the XLA ops are optional);
# - CMake's build type Release instead of RelWithDebInfo (no debug information: faster to
#   build, the same -O3 code; NDEBUG turns Horovod's C++ assert()s off, as in any release build);
# - the bundled Gloo's reduce-scatter waits for its sends before it overwrites the buffer they
#   read (third_party/gloo/gloo/reduce_scatter.h, ReduceScatterHalvingDoubling::run: every rank
#   but 0 copies its reduced part to the start of the buffer while the part it sent from there
#   may still be queued on the socket; rank 0 then sums the peer's result instead of its input:
#   hvd.reducescatter wrong about 1 call in 10-30 from 16 MiB on 2 ranks here, where a socket
#   takes 4 MiB at once; the same function is suspected in jax-ml/jax#40830). PATCH_LEVEL in
#   the cache key: a wheel built before a patch is never reused.
# Built with `cmake<4` from PyPI: CMake 4 refuses the bundled gloo's cmake_minimum_required.
#
# Cache: $DLSCALE_WHEEL_CACHE (default ~/.cache/dlscale/wheels), one directory per key
# horovod-0.28.1-<patch level>-cp311-<framework versions>-<controllers>.
set -euo pipefail

HOROVOD_VERSION=0.28.1
PATCH_LEVEL=p1  # bumped with each change to the patches below
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-.venv}
[ -x "$venv/bin/python" ] || { echo "build-horovod: no virtual environment at $venv (run make first)" >&2; exit 2; }
venv=$(cd "$venv" && pwd)
py="$venv/bin/python"
cache_root=${DLSCALE_WHEEL_CACHE:-$HOME/.cache/dlscale/wheels}

version_of() { "$py" - "$1" <<'PY'
import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass
PY
}
pyver=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
torch_v=$(version_of torch)
tf_v=$(version_of tensorflow)
mx_v=$(version_of mxnet)
if [ -n "${2:-}" ]; then  # only the bindings asked for
    case ",$2," in *,torch,*) ;; *) torch_v= ;; esac
    case ",$2," in *,tensorflow,*) ;; *) tf_v= ;; esac
    case ",$2," in *,mxnet,*) ;; *) mx_v= ;; esac
fi
[ -n "$torch_v$tf_v$mx_v" ] || { echo "build-horovod: none of ${2:-torch,tensorflow,mxnet} is installed in $venv" >&2; exit 2; }

controllers=gloo
command -v mpicxx >/dev/null && controllers=gloo-mpi
gpu=${HOROVOD_GPU_OPERATIONS:-}
key="horovod-$HOROVOD_VERSION-$PATCH_LEVEL-$pyver${torch_v:+-torch$torch_v}${tf_v:+-tf$tf_v}${mx_v:+-mxnet$mx_v}-$controllers${gpu:+-$(echo "$gpu" | tr 'A-Z' 'a-z')}"
cache="$cache_root/$key"
deps=(cloudpickle psutil pyyaml packaging "cffi>=1.4.0")  # Horovod's own requirements

record="$venv/horovod-build.json"  # what was built, for `dlscale ls backends` too
if [ "$(version_of horovod)" = "$HOROVOD_VERSION" ] && grep -qF "\"key\": \"$key\"" "$record" 2>/dev/null; then
    echo "horovod $HOROVOD_VERSION already built for this environment ($key)"
    exit 0
fi

if ! ls "$cache"/horovod-*.whl >/dev/null 2>&1; then
    echo "building horovod $HOROVOD_VERSION ($key): a few minutes on 2 cores, once"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$py" -m pip install --disable-pip-version-check -q 'cmake<4' wheel setuptools "${deps[@]}"
    "$py" -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
        -d "$work" "horovod==$HOROVOD_VERSION"
    tar -xzf "$work"/horovod-$HOROVOD_VERSION.tar.gz -C "$work"
    src="$work/horovod-$HOROVOD_VERSION"
    if [ -n "$torch_v$tf_v" ]; then  # PyTorch and TensorFlow need C++17; MXNet 1.9 builds as shipped
        sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
            "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    fi
    if [ -n "$tf_v" ]; then
        sed -i '/xla_mpi_ops.cc/d' "$src/horovod/tensorflow/CMakeLists.txt"
    fi
    "$py" "$here/patch-gloo-reduce-scatter.py" \
        "$src/third_party/gloo/gloo/reduce_scatter.h"
    # CMake's Release (-O3, NDEBUG) instead of setup.py's RelWithDebInfo (-O3 -g): the same
    # optimized code without debug information, which compiles about 30% faster (a TensorFlow
    # op file: 33 s against 23 s; docs/architecture.md)
    grep -q "else 'RelWithDebInfo'" "$src/setup.py" || { echo "build-horovod: setup.py's build type moved" >&2; exit 1; }
    sed -i "s/else 'RelWithDebInfo'/else 'Release'/" "$src/setup.py"
    flags=(HOROVOD_WITH_GLOO=1 HOROVOD_CPU_OPERATIONS=gloo)
    if [ -n "$torch_v" ]; then flags+=(HOROVOD_WITH_PYTORCH=1); else flags+=(HOROVOD_WITHOUT_PYTORCH=1); fi
    if [ -n "$tf_v" ]; then flags+=(HOROVOD_WITH_TENSORFLOW=1); else flags+=(HOROVOD_WITHOUT_TENSORFLOW=1); fi
    if [ -n "$mx_v" ]; then flags+=(HOROVOD_WITH_MXNET=1); else flags+=(HOROVOD_WITHOUT_MXNET=1); fi
    if [ "$controllers" = gloo-mpi ]; then flags+=(HOROVOD_WITH_MPI=1); else flags+=(HOROVOD_WITHOUT_MPI=1); fi
    # the venv's cmake (<4) first
    (cd "$src" && env PATH="$(dirname "$py"):$PATH" MAKEFLAGS="-j$(nproc)" "${flags[@]}" \
        "$py" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps -w "$work/dist" .)
    mkdir -p "$cache_root"
    # whole or not at all: an interrupted copy must not look like a cached build
    mv "$work/dist" "$cache_root/.$key.$$" && mv -T "$cache_root/.$key.$$" "$cache"
fi
# its requirements first, so that pip's check of the wheel finds them
"$py" -m pip install --disable-pip-version-check -q "${deps[@]}"
"$py" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps "$cache"/horovod-*.whl
frameworks=$(echo "${torch_v:+torch }${tf_v:+tensorflow }${mx_v:+mxnet}" | xargs | tr ' ' ,)
printf '{"horovod": "%s", "key": "%s", "frameworks": "%s", "controllers": "%s", "gpu_operations": "%s"}\n' \
    "$HOROVOD_VERSION" "$key" "$frameworks" "${controllers//-/,}" "${gpu:-none}" > "$record"
echo "horovod $HOROVOD_VERSION installed from $cache"
