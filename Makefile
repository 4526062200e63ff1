# The whole set-up: `make demo` and `make test` each create and use the virtualenv .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.demo-installed
TEST_STAMP := $(VENV)/.test-installed

.PHONY: demo test lint test-vllm samples clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The demo needs the package and its CPU engine.
$(DEMO_STAMP): pyproject.toml setup.cfg constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --quiet -c constraints.txt -e '.[ocr]'
	touch $@

# The tests also need pytest/hypothesis and Ray Data (the Ray executor runs on a local cluster).
$(TEST_STAMP): pyproject.toml setup.cfg constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --quiet -c constraints.txt -e '.[ocr,test,ray]'
	touch $@ $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/orandcar build samples/pool.jsonl -o OrandCar --work work
	$(BIN)/orandcar validate OrandCar

test: $(TEST_STAMP)
	$(BIN)/python -m pytest -q

# ruff over the package, the tests and the benchmarks ([tool.ruff] in pyproject.toml); .ci/run runs it.
lint: $(TEST_STAMP)
	$(BIN)/ruff check .

# The real-vLLM engine tests (several GB in .venv-vllm on first run; not part of `make test`).
test-vllm:
	bash tests/vllm/run.sh

samples: $(DEMO_STAMP)
	$(BIN)/python samples/make_samples.py

clean:
	rm -rf OrandCar work .pytest_cache
