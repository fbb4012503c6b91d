# Two commands on a fresh machine: `make demo` and `make test`. CI runs `make test` (.ci/run).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU torch pinned here: an unpinned torch pulls several GB of CUDA wheels.
PIP_INSTALL := $(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt

.PHONY: demo test check coverage test-env test-static static-checks system-packages openmpi lint \
	typecheck bench clean allocators horovod tensorflow mxnet mxnet-env horovod-mxnet slurm \
	horovod-test-env

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-run: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e '.[torch]'
	touch $@

$(VENV)/.installed-test: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e '.[test]'
	touch $@ $(VENV)/.installed-run

# The default allocator (glibc-tuned) needs no library: the demo runs without them.
demo: $(VENV)/.installed-run
	scripts/install-allocators.sh || echo "note: allocator=jemalloc|tcmalloc need these libraries; the demo does not"
	$(BIN)/dlscale run
	$(BIN)/dlscale report

$(VENV)/.installed-tensorflow: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e '.[torch,tensorflow]'
	touch $@

# make test: the environment (below), then lint, types and layer rules, then every test
# (scripts/run-tests.sh: on 2 pytest-xdist workers where that is safe, TEST_WORKERS=N to
# change it, then the tests that compare timings alone). The set-up steps run side by side
# where one does not need another (make -j3: pip, apt and MXNet's environment at once, the two
# Horovod builds beside each other and beside the static checks); each step's output is
# printed whole when the step ends.
test:
	$(MAKE) --no-print-directory -j3 -Otarget test-env test-static
	scripts/run-tests.sh

# The fast loop (under 5 minutes): lint, types, layer rules, the unit tests and the end-to-end
# tests that start no framework's workers; needs only .venv (`make test` is the full gate).
check: $(VENV)/.installed-test
	$(static_checks)
	scripts/run-tests.sh --fast

# Line and branch coverage of src/dlscale over the whole suite, every process it starts counted
# (the CLI, launchers and workers of both environments): the figure, and htmlcov/index.html.
coverage:
	$(MAKE) --no-print-directory -j3 -Otarget test-env
	scripts/run-tests.sh --coverage

# The test tools, TensorFlow, JAX, DeepSpeed and Ray in .venv, in one resolution.
$(VENV)/.installed-test-env: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e '.[test,tensorflow,jax,deepspeed,ray]'
	touch $@ $(VENV)/.installed-test $(VENV)/.installed-tensorflow $(VENV)/.installed-run

# Everything the tests use: both environments, Debian's packages, Horovod built for both (the
# two builds side by side: each waits only for its environment and OpenMPI).
test-env: $(VENV)/.installed-test-env system-packages horovod-mxnet horovod-test-env

horovod-test-env: $(VENV)/.installed-test-env openmpi
	scripts/build-horovod.sh $(VENV)

define static_checks
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
endef

static-checks: $(VENV)/.installed-test
	$(static_checks)

test-static: $(VENV)/.installed-test-env
	$(static_checks)

# Debian's packages of every real component the tests start (each script installs only what
# is missing, so a second run costs nothing). apt runs one at a time: OpenMPI first, which the
# Horovod builds wait for.
system-packages: openmpi
	scripts/install-browser.sh
	scripts/install-allocators.sh
	scripts/install-slurm.sh
	scripts/install-iproute2.sh
	scripts/install-openssh.sh

openmpi:
	scripts/install-openmpi.sh

# Debian's jemalloc and tcmalloc for the allocator key (allocator = jemalloc | tcmalloc).
allocators:
	scripts/install-allocators.sh

# Horovod 0.28.1 built from source against this environment's PyTorch, with Gloo and (OpenMPI
# installed first) MPI; the wheel is cached in ~/.cache/dlscale/wheels (DLSCALE_WHEEL_CACHE).
horovod: $(VENV)/.installed-run openmpi
	scripts/build-horovod.sh $(VENV)

# TensorFlow 2.21 and tf-keras in this environment, beside PyTorch (docs/architecture.md says
# why one environment), and Horovod built with its TensorFlow binding too (horovod-tf,
# horovod-keras; presets/frameworks-cpu.toml compares them): about 20 minutes the first time,
# seconds once the wheel is cached.
tensorflow: $(VENV)/.installed-tensorflow openmpi
	scripts/build-horovod.sh $(VENV)

# MXNet 1.9.1 in its own environment (.venv-mxnet: numpy 1.23.5, which MXNet needs), and Horovod
# built there with its MXNet binding (horovod-mxnet): a few minutes the first time.
mxnet: $(VENV)/.installed-run horovod-mxnet

mxnet-env:
	scripts/install-mxnet.sh

horovod-mxnet: mxnet-env openmpi
	scripts/build-horovod.sh .venv-mxnet mxnet

# A real Slurm from Debian (slurm-wlm, munge) for --launcher slurm; scripts/slurm-local.sh
# start DIR runs a one-node cluster on this machine, --hosts N one of N emulated hosts (the
# tests start and stop their own). OpenSSH's server for the emulated hosts (dlscale hosts).
slurm:
	scripts/install-slurm.sh
	scripts/install-iproute2.sh
	scripts/install-openssh.sh

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

bench: $(VENV)/.installed-run
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .venv-mxnet dlscale-results
