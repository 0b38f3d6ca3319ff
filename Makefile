# Two entry points on a fresh machine with Python >= 3.11: `make bench` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: env env-llamacpp bench test lint report clean

$(BIN)/labkit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[notebooks,dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(BIN)/labkit

env: $(BIN)/labkit

# The optional real CPU engine (llama-cpp-python compiles from source once; pip's wheel cache serves reruns).
# Without it the llama.cpp tests skip with a reason.
$(VENV)/.llamacpp: $(BIN)/labkit
	$(BIN)/pip install --quiet -e '.[llamacpp]'
	touch $@

env-llamacpp: $(VENV)/.llamacpp

# The main job on the embedded default lane: boot the simulator on localhost, measure it, tear it down,
# store the run under results/sim/, and regenerate results/TABLES.md from the stored runs.
bench: env
	$(BIN)/labkit check
	$(BIN)/labkit run bench -p recipe sim -o $(OUT)/bench-sim.ipynb
	$(BIN)/labkit report

test: env
	$(BIN)/ruff check labkit tests benchmarks
	$(BIN)/ruff format --check labkit tests benchmarks
	$(BIN)/nbstripout --verify notebooks/*.ipynb
	$(BIN)/python -m pytest -q
	$(BIN)/labkit report --check

# Regenerate results/TABLES.md and results/plots/ from the stored runs.
report: env
	$(BIN)/labkit report

lint: env
	$(BIN)/ruff check labkit tests benchmarks
	$(BIN)/ruff format --check labkit tests benchmarks
	$(BIN)/nbstripout --verify notebooks/*.ipynb

clean:
	rm -rf $(VENV) $(OUT)
