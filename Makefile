# speedlayer — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: run test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall only when the project's dependencies change.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

## run: the flagship fleet job on the built-in generator, with a live view (Ctrl-C stops it)
run: $(VENV)/.installed
	$(VENV)/bin/speedlayer run fleet --source 'generator://?rate=5000&vehicles=2000&seed=7' $(ARGS)

## test: the whole suite
test: $(VENV)/.installed-dev
	$(PY) -m pytest $(ARGS)

## bench: fleet throughput, speedlayer vs plain PySpark (see docs/benchmarks.md)
bench: $(VENV)/.installed-dev
	$(PY) bench/fleet_throughput.py $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache spark-warehouse
