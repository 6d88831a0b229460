# Quick start: `make demo` runs the person detector on the demo video; `make test` runs lint and tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_VIDEO := build/demo/demo.mp4

.PHONY: demo test lint format typecheck bench mosquitto schemas clean

# The stamps re-run pip whenever pyproject.toml changes.
$(VENV)/.runtime: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu]'
	touch $@

$(VENV)/.test: $(VENV)/.runtime
	$(BIN)/python -m pip install --quiet -e '.[cpu,test]'
	touch $@

$(DEMO_VIDEO): tools/make_demo_video.py tools/assets/astronaut.jpg | $(VENV)/.runtime
	$(BIN)/python tools/make_demo_video.py $@

demo: $(VENV)/.runtime $(DEMO_VIDEO)
	$(BIN)/edge-sdk run pipelines/demo.yaml

# Tests start private brokers from the Mosquitto binary; install Debian's when missing and we are root.
mosquitto:
	@if command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's mosquitto"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null; \
	else \
		echo "mosquitto is missing: run 'sudo apt-get install mosquitto' (Debian/Ubuntu), then 'make test' again" >&2; \
		exit 1; \
	fi

lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.test
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(VENV)/.test
	$(BIN)/mypy

test: $(VENV)/.test mosquitto lint
	$(BIN)/python -m pytest

# Figures for docs/benchmarks.md; each script prints what it measured.
bench: $(VENV)/.test $(DEMO_VIDEO)
	$(BIN)/python tools/bench/engine_start.py
	$(BIN)/python tools/bench/demo_pipeline.py

schemas: $(VENV)/.runtime
	$(BIN)/edge-sdk schema profile --out device_profiles/profile.schema.json
	$(BIN)/edge-sdk schema pipeline --out pipelines/pipeline.schema.json

clean:
	rm -rf build .pytest_cache .ruff_cache .mypy_cache
