# The whole set-up: `make demo` and `make test` each create and use the virtualenv .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-vllm samples clean

$(STAMP): pyproject.toml setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --quiet -e '.[ocr,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/orandcar build samples/pool.jsonl -o OrandCar --work work
	$(BIN)/orandcar validate OrandCar

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The real-vLLM engine tests (several GB in .venv-vllm on first run; not part of `make test`).
test-vllm:
	bash tests/vllm/run.sh

samples: $(STAMP)
	$(BIN)/python samples/make_samples.py

clean:
	rm -rf OrandCar work .pytest_cache
