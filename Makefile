# Quick start: `make demo` runs the person detector on the demo video; `make test` runs lint and tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_VIDEO := build/demo/demo.mp4

.PHONY: demo test test-fast lint format typecheck bench system-deps schemas docs clean

# The stamps re-run pip whenever pyproject.toml changes.
$(VENV)/.runtime: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,video]'
	touch $@

$(VENV)/.test: $(VENV)/.runtime
	$(BIN)/python -m pip install --quiet -e '.[cpu,video,test]'
	touch $@

$(DEMO_VIDEO): tools/make_demo_video.py tools/assets/astronaut.jpg | $(VENV)/.runtime
	$(BIN)/python tools/make_demo_video.py $@

demo: $(VENV)/.runtime $(DEMO_VIDEO)
	$(BIN)/edge-sdk run pipelines/demo.yaml

# Tests start private brokers (mosquitto), RTSP servers (rtsp-server-perl) and a headless browser
# (chromium, for the preview sink and the dashboard), and check systemd units (systemd-analyze);
# install Debian's packages when missing and we are root (one apt-get update), otherwise say what to run.
SYSTEM_DEPS := mosquitto:/usr/sbin/mosquitto rtsp-server-perl:/usr/bin/rtsp-server-perl chromium:/usr/bin/chromium systemd:/usr/bin/systemd-analyze
system-deps:
	@missing=""; \
	for dep in $(SYSTEM_DEPS); do \
		command -v $${dep%%:*} >/dev/null 2>&1 || test -x $${dep#*:} || missing="$$missing $${dep%%:*}"; \
	done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
		echo "missing:$$missing; run 'sudo apt-get install$$missing' (Debian/Ubuntu), then 'make test' again" >&2; \
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

# The Triton Inference Server the Triton forwarding tests and bench run against (tools/harness/triton.py):
# NVIDIA's tritonserver bundled by the nvidia-pytriton wheel, in a venv of its own since pytriton needs
# numpy<2. It serves the ONNX model through ONNX Runtime, so it runs on any x86-64 Linux, no GPU needed.
TRITON_VENV := .venv-triton
$(TRITON_VENV)/.ready: Makefile
	test -x $(TRITON_VENV)/bin/python || $(PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TRITON_VENV)/bin/python -m pip install --quiet 'nvidia-pytriton>=0.5' onnxruntime 'numpy<2'
	touch $@

# Two workers or more (pytest-xdist): most tests wait on subprocesses, brokers and sockets, so the
# suite takes about 9.5 minutes on 2 cores; at most 4, as the live-timing tests need a core.
test: $(VENV)/.test $(TRITON_VENV)/.ready system-deps lint
	$(BIN)/python -m pytest --numprocesses=auto --maxprocesses=4

# The edit loop: no brokers, RTSP servers, multi-process pipelines or subprocesses (markers broker, slow).
test-fast: $(VENV)/.test
	$(BIN)/python -m pytest -q -m "not broker and not slow" --numprocesses=auto --maxprocesses=4

# Figures for docs/benchmarks.md; each script prints what it measured.
bench: $(VENV)/.test $(DEMO_VIDEO)
	$(BIN)/python tools/bench/engine_start.py
	$(BIN)/python tools/bench/demo_pipeline.py
	$(BIN)/python tools/bench/frame_ring.py
	$(BIN)/python tools/bench/pipeline_runtime.py
	$(BIN)/python tools/bench/graph_passes.py
	$(BIN)/python tools/bench/preprocess_fold.py
	$(BIN)/python tools/bench/int8.py
	$(BIN)/python tools/bench/spool.py
	$(BIN)/python tools/bench/fleet_rollout.py

schemas: $(VENV)/.runtime
	$(BIN)/edge-sdk schema profile --out device_profiles/profile.schema.json
	$(BIN)/edge-sdk schema pipeline --out pipelines/pipeline.schema.json

# docs/cli.md: every command's --help (tests/cli/test_cli_reference.py checks it is current).
docs: $(VENV)/.runtime
	$(BIN)/python tools/cli_reference.py --out docs/cli.md

clean:
	rm -rf build .pytest_cache .ruff_cache .mypy_cache
