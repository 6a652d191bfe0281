# `make demo` and `make test` set everything up on a fresh machine: both depend on `make env`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  ?= torch==2.13.0
# Where torch comes from: PyPI unless named. PyPI's torch for Linux x86-64 is the CUDA build; a
# machine without a GPU can take the CPU build from PyTorch's CPU index instead:
# make env TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL ?=
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
# What `make env` says before it downloads torch. The sizes are 2.13.0's wheels for Python 3.11
# on Linux x86-64 (pip install --dry-run --report names the files; each file's size as served).
ifeq ($(TORCH_INDEX_URL),)
TORCH_SAYS = $(TORCH) from PyPI: on Linux x86-64 its CUDA build, 527 MB, and the NVIDIA \
	libraries and triton it needs, 2.2 GB more (2.7 GB for 2.13.0). Without a GPU, the CPU build \
	is 192 MB: make env TORCH_INDEX_URL=$(TORCH_CPU_INDEX)
else
TORCH_SAYS = $(TORCH) from $(TORCH_INDEX_URL)$(if $(filter $(TORCH_CPU_INDEX),$(TORCH_INDEX_URL)), \
	(the CPU build: 192 MB for 2.13.0))
endif
FMS    ?= 3.2.2
STAMP  := $(VENV)/.installed
comma  := ,
# one list per fms-hf-tuning version, shipped in the wheel (the actuator builds the others)
PACKAGE_LISTS := ado_actuators/sfttrainer/plan/packages

# the loop to run while working (under two minutes): ruff's lint and format checks, mypy, the
# strict docs build, then the fast unit tests on both cores. .pre-commit-config.yaml runs the same.
.PHONY: env check lint typecheck test coverage test-fast test-versions test-operators mutation demo guided-demo vision-demo bench overnight bench-gpu gpu-kit gpu-kit-rehearsal docs docs-build clean

env: $(STAMP)

# torch first (pinned, from TORCH_INDEX_URL where one is named), then fms-hf-tuning's own
# requirements minus torch, then fms-hf-tuning --no-deps, then this package with extras $(2),
# into the virtual environment $(1).
define INSTALL
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/pip install --quiet --upgrade pip
	@echo "make env: installing $(TORCH_SAYS)"
	$(1)/bin/pip install --quiet $(if $(TORCH_INDEX_URL),--index-url "$(TORCH_INDEX_URL)") "$(TORCH)"
	$(1)/bin/pip install --quiet -r $(PACKAGE_LISTS)/fms-hf-tuning_v$(FMS).txt
	$(1)/bin/pip install --quiet --no-deps fms-hf-tuning==$(FMS)
	$(1)/bin/pip install --quiet -e '.[$(2)]'
	touch $(1)/.installed
endef

$(STAMP): pyproject.toml $(PACKAGE_LISTS)/fms-hf-tuning_v$(FMS).txt
	$(call INSTALL,$(VENV),test)

# ado's optimisers (ray_tune, trim) in an environment of their own: ado-trim caps ray below
# 2.59, the main environment has ray 2.60.
OPS_VENV  := .venv-operators
OPS_STAMP := $(OPS_VENV)/.installed

$(OPS_STAMP): pyproject.toml $(PACKAGE_LISTS)/fms-hf-tuning_v$(FMS).txt
	$(call INSTALL,$(OPS_VENV),test$(comma)operators)

# Two pytest-xdist workers, each taking whole modules (a module's cluster is started once):
# most of a slow test is waiting on Ray, ado and launchers, so one worker left a core idle.
# Modules go in collection order, the slow e2e and integration ones first (xdist's default
# orders them by test count, which left the longest module running alone at the end).
TEST_WORKERS ?= 2
PYTEST_SUITE := pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadscope \
	--no-loadscope-reorder --durations 25
test: env lint docs-build
	$(BIN)/python -m $(PYTEST_SUITE)

# The same suite under coverage.py, which follows every Python process the tests start
# (pyproject.toml, [tool.coverage.run]); then the total and the modules under 80 % with their
# reasons. Not part of `make test`: tracing every process (trainers, ranks, ado, Ray's daemons
# and workers) adds about a quarter to the suite's time on two cores.
COVERAGE_DATA := .coverage-data
coverage: env
	rm -rf $(COVERAGE_DATA) && mkdir -p $(COVERAGE_DATA)
	$(BIN)/python -m coverage run -m $(PYTEST_SUITE); status=$$?; \
	$(BIN)/python tests/coverage/summary.py $(COVERAGE_DATA); exit $$status

test-fast: env
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow" -n $(TEST_WORKERS)

lint: env typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy over the package, as pyproject.toml's [tool.mypy] sets it (strict on contract/, catalog/,
# plan/, engine/, space/, ledger/, stopping/, stats/). Its cache, .mypy_cache/, makes a re-run a few seconds; the first 40 s to 2 min.
typecheck: env
	$(BIN)/mypy

check: lint docs-build test-fast

# The documentation site (mkdocs.yml, docs/). The reference pages are generated from the code at
# build time (docs/hooks/reference.py). --strict turns mkdocs' warnings into failures: a broken
# link or anchor, an absolute link, a page missing from the navigation (mkdocs.yml, validation).
# NO_MKDOCS_2_WARNING quiets mkdocs-material's banner about its successor; not --quiet, which
# hides the very warnings --strict counts.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
docs: env
	$(MKDOCS) serve

docs-build: env
	$(MKDOCS) build --strict --site-dir site

# every offered fms-hf-tuning version x {full, LoRA, prompt tuning}, trained on CPU; a table
test-versions: env
	$(BIN)/python tests/versions/matrix.py

# ray_tune (Optuna) and TRIM over a tiny-model CPU space with invalid entities (tests/operators;
# `make test` collects them too, and they skip where the optimisers are not installed)
test-operators: $(OPS_STAMP)
	$(OPS_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/operators

# mutmut over the measurement core (pyproject.toml [tool.mutmut]), from a clean mutants/, then
# the score: fails under 90 % killed or on a survivor not in tests/mutation/equivalent.txt.
# mutmut's progress goes to mutants/run.log (its tail is shown when the run itself fails).
MUTMUT_CHILDREN ?= 2
mutation: env
	rm -rf mutants && mkdir mutants
	$(BIN)/mutmut run --max-children $(MUTMUT_CHILDREN) > mutants/run.log 2>&1 \
		|| { tail -c 3000 mutants/run.log; exit 1; }
	$(BIN)/python tests/mutation/score.py mutants

demo: env
	$(BIN)/python examples/local-cpu/demo.py

# The guided walk on the demo's tiny model: one configuration measured, one left with its reason.
guided-demo: env
	$(BIN)/python examples/local-cpu/demo.py --guided

# A tiny vision-language model (granite-vision's architecture) measured on pictures, on CPU.
vision-demo: env
	$(BIN)/python examples/local-cpu/demo.py --vision

bench: env
	$(BIN)/python benchmarks/time_to_first_step.py
	$(BIN)/python benchmarks/operation_overhead.py
	$(BIN)/python benchmarks/stopping.py

# a night rehearsed: 72 measurements on a 2-raylet local cluster, the ado process SIGKILLed
# halfway and the operation run again, then audited (benchmarks/overnight.py; ~5 min on 2
# cores). OVERNIGHT_ARGS=--small: 48 measurements, which `make test` runs too
# (tests/e2e/test_overnight.py: every check but the overhead).
overnight: env
	$(BIN)/python benchmarks/overnight.py $(OVERNIGHT_ARGS)

# one GPU, offline (benchmarks/gpu/README.md); BENCH_ARGS=--cpu runs the tiny model on the CPU
bench-gpu: env
	$(BIN)/python benchmarks/gpu/run.py $(BENCH_ARGS)

# The wheels a lent GPU machine's image lacks for the GPU check, into .gpu-kit/ (ignored).
# The device tool carries ignored folders of the session's own checkout only: run it there.
gpu-kit: env
	$(BIN)/python benchmarks/gpu/kit.py --dest .gpu-kit

# The kit rehearsed on a CPU imitation of the GPU image: a Python 3.12 environment with the
# image's torch/transformers/numpy versions (benchmarks/gpu/imitation.txt; CUDA torch from
# PyPI, some GB, run on the CPU), then `device-check.sh --cpu` with that Python.
IMITATION := .gpu-imitation
PYTHON312 ?= python3.12
gpu-kit-rehearsal: gpu-kit $(IMITATION)/.installed
	PYTHON=$(abspath $(IMITATION))/bin/python OUT=$(abspath device-check-out) \
		benchmarks/gpu/device-check.sh --cpu

# what the image lacks must be absent here too, or the rehearsal proves nothing
$(IMITATION)/.installed: benchmarks/gpu/imitation.txt
	test -x $(IMITATION)/bin/python || $(PYTHON312) -m venv $(IMITATION)
	$(IMITATION)/bin/pip install --quiet -r benchmarks/gpu/imitation.txt
	$(IMITATION)/bin/pip uninstall --quiet --yes pydantic pydantic-core annotated-types \
		typing-inspection datasets trl fms-hf-tuning ray ado-core ado-sfttrainer
	touch $@

clean:
	rm -rf $(VENV) $(OPS_VENV) demo-work demo-work-guided demo-work-vision mutants site
