# Two commands on a fresh machine: `make demo` and `make test`. CI runs `make test` (.ci/run).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU torch pinned here: an unpinned torch pulls several GB of CUDA wheels.
PIP_INSTALL := $(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt

.PHONY: demo test lint typecheck check bench clean allocators horovod tensorflow mxnet slurm

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

test: $(VENV)/.installed-test $(VENV)/.installed-tensorflow
	scripts/install-browser.sh
	scripts/install-allocators.sh
	scripts/install-openmpi.sh
	scripts/install-slurm.sh
	scripts/install-iproute2.sh
	scripts/install-openssh.sh
	scripts/build-horovod.sh $(VENV)
	scripts/install-mxnet.sh
	scripts/build-horovod.sh .venv-mxnet mxnet
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

# Debian's jemalloc and tcmalloc for the allocator key (allocator = jemalloc | tcmalloc).
allocators:
	scripts/install-allocators.sh

# Horovod 0.28.1 built from source against this environment's PyTorch, with Gloo and (OpenMPI
# installed first) MPI; the wheel is cached in ~/.cache/dlscale/wheels (DLSCALE_WHEEL_CACHE).
horovod: $(VENV)/.installed-run
	scripts/install-openmpi.sh
	scripts/build-horovod.sh $(VENV)

# TensorFlow 2.21 and tf-keras in this environment, beside PyTorch (docs/architecture.md says
# why one environment), and Horovod built with its TensorFlow binding too (horovod-tf,
# horovod-keras; studies/frameworks-cpu.toml compares them): about 20 minutes the first time,
# seconds once the wheel is cached.
tensorflow: $(VENV)/.installed-tensorflow
	scripts/install-openmpi.sh
	scripts/build-horovod.sh $(VENV)

# MXNet 1.9.1 in its own environment (.venv-mxnet: numpy 1.23.5, which MXNet needs), and Horovod
# built there with its MXNet binding (horovod-mxnet): a few minutes the first time.
mxnet: $(VENV)/.installed-run
	scripts/install-mxnet.sh
	scripts/install-openmpi.sh
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
