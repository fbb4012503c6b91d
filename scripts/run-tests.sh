#!/usr/bin/env bash
# Runs the tests as `make test`, `make check` and `make coverage` do (the environment must be
# set up: make test-env, or .venv alone for --fast).
#
#   scripts/run-tests.sh              every test: first those not marked `alone` on
#                                     TEST_WORKERS pytest-xdist workers (--dist loadgroup:
#                                     tests/conftest.py keeps the tests that share something of
#                                     the machine's in one group each), then the tests marked
#                                     `alone`, which compare timings, with nothing beside them
#   scripts/run-tests.sh --fast       the unit tests and the end-to-end tests that start no
#                                     framework's workers (those marked `dist` are left out,
#                                     and the model twins of TensorFlow and MXNet: `twins`)
#   scripts/run-tests.sh --coverage   every test, as above, under coverage.py (every Python
#                                     process they start counted), then the combined figure
#   ... -- ARGS                       more arguments for pytest (a path, -k, -x)
#
# TEST_WORKERS (default 2; 1 runs one plain pytest, one test after another). Measured on the
# 2-core VM the suite is written for, 2026-11-27: 2 workers 44 minutes, 1 worker 56 minutes,
# 3 workers 46 minutes (2026-11-26): the tests keep the cores busy most of the time, so a
# third worker only adds oversubscription.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
mode=all
extra=()
while [ $# -gt 0 ]; do
    case $1 in
        --fast) mode=fast; shift ;;
        --coverage) mode=coverage; shift ;;
        --) shift; extra=("$@"); break ;;
        *) echo "usage: scripts/run-tests.sh [--fast|--coverage] [-- PYTEST-ARGS]" >&2; exit 2 ;;
    esac
done
workers=${TEST_WORKERS:-2}
pytest=("$bin/python" -m pytest)
# Bytecode caches on: a machine that turns them off (PYTHONDONTWRITEBYTECODE) compiles
# dlscale's modules again in every one of the suite's ~900 processes (0.25 s each) and pytest's
# rewritten test modules in every worker (about 10 s).
unset PYTHONDONTWRITEBYTECODE
# Tests side by side share the cores: threads that wait for work sleep instead of spinning
# (OpenMP's default spins, which takes the core from the other tests' processes), and so do
# the ranks mpirun starts (OpenMPI polls for messages at full speed when it counts no more
# ranks than cores: a 2-rank horovod-torch run under mpirun beside 2 busy processes took
# 42 s, 40 s of CPU, and 26 s, 24 s of CPU, yielding; docs/architecture.md, "Tests").
if [ "$workers" -gt 1 ]; then
    export OMP_WAIT_POLICY=PASSIVE OMPI_MCA_mpi_yield_when_idle=1
fi

if [ "$mode" = coverage ]; then
    data="$PWD/.coverage-data"
    rm -rf "$data" htmlcov
    mkdir -p "$data"
    export COVERAGE_FILE="$data/coverage"
    # MXNet's workers run under .venv-mxnet: coverage there too (its .pth file starts it)
    version=$("$bin/python" -c 'import coverage; print(coverage.__version__)')
    if [ -x .venv-mxnet/bin/python ]; then
        .venv-mxnet/bin/python -m pip install --disable-pip-version-check -q "coverage==$version"
    fi
    pytest=("$bin/python" -m coverage run -m pytest)
fi

status=0
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadgroup)
if [ "$mode" = fast ]; then
    "${pytest[@]}" "${parallel[@]}" -m "not dist and not twins" --durations=30 \
        tests/unit tests/e2e "${extra[@]}" || status=$?
    exit $status
fi

if [ "$workers" -gt 1 ]; then
    "${pytest[@]}" "${parallel[@]}" -m "not alone" --durations=30 "${extra[@]}" || status=$?
    # the files that hold such tests (collecting the whole suite again costs 10-20 s); a
    # selection of the caller's (a path, -k) is kept whole
    files=()
    [ ${#extra[@]} -eq 0 ] && mapfile -t files < <(grep -rl --include='test_*.py' 'pytest\.mark\.alone' tests)
    "${pytest[@]}" -m alone --durations=30 "${files[@]}" "${extra[@]}"
    alone=$?
    [ $alone -eq 5 ] && alone=0  # no test selected (a path or -k without any): not a failure
    [ $status -eq 0 ] && status=$alone
else
    "${pytest[@]}" --durations=30 "${extra[@]}" || status=$?
fi

if [ "$mode" = coverage ]; then
    "$bin/python" -m coverage combine --quiet
    "$bin/python" -m coverage html --quiet
    "$bin/python" -m coverage report --skip-covered --sort=cover | tail -n 25
    echo "coverage of src/dlscale (lines and branches, every process): $("$bin/python" -m coverage report --format=total)%"
fi
exit $status
