# Two entry points for a fresh machine (see README):
#   make run    install into .venv and run the main job on the embedded defaults
#   make test   install into .venv (with the test extra) and run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= results

.PHONY: run test bench clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/nohair offsets --out $(OUT)/offsets

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q -n 2 tests

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/offsets.py

clean:
	rm -rf $(VENV) $(OUT)
