# Set-up and entry points. `make demo` and `make test` work on a fresh machine with only Python 3.11 and pip.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MINERU_VENV := .venv-mineru
STAMP := $(VENV)/.installed
MINERU_STAMP := $(MINERU_VENV)/.installed
DEMO_DIR ?= demo_out

.PHONY: install mineru demo test lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)

# torch first (CPU build), then the project with a constraint that keeps that torch.
$(STAMP): $(VENV)/bin/python pyproject.toml constraints.txt
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -c constraints.txt -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# MinerU 4.0.12 in its own venv: it pins openai<3 and pulls gradio. Its `flash` tier runs on a CPU offline.
$(MINERU_STAMP):
	$(PYTHON) -m venv $(MINERU_VENV) || python3 -m venv $(MINERU_VENV)
	$(MINERU_VENV)/bin/python -m pip install -q --upgrade pip
	$(MINERU_VENV)/bin/python -m pip install -q "mineru==4.0.12"
	touch $(MINERU_STAMP)

mineru: $(MINERU_STAMP)

demo: $(STAMP)
	$(PY) -m data_prep demo --out $(DEMO_DIR)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP) $(MINERU_STAMP) lint
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m pytest -q benchmarks -s -p no:cacheprovider -o python_files='bench_*.py' -o python_functions='bench_* test_*'

clean:
	rm -rf $(VENV) $(MINERU_VENV) $(DEMO_DIR)
