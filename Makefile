# speedlayer — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
# test processes: the suite's Spark work leaves a core idle about half the time when run in one
TEST_WORKERS ?= 2

.PHONY: run test servers bench soak clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel  # a user's `pip install -e .` builds with these

# Reinstall only when the project's dependencies change.
# constraints.txt pins what the tests run on; pyproject.toml declares the ranges users install within.
PIP_INSTALL := $(PY) -m pip install --quiet -c constraints.txt
$(VENV)/.installed: pyproject.toml constraints.txt | $(PY)
	$(PIP_INSTALL) -e .
	touch $@

# The tests also install the example package of docs/extending.md (a job, a source and a sink as plug-ins).
EXAMPLE := examples/acme-speedlayer
$(VENV)/.installed-dev: pyproject.toml constraints.txt $(VENV)/.installed $(EXAMPLE)/pyproject.toml $(wildcard $(EXAMPLE)/acme_speedlayer/*.py)
	$(PIP_INSTALL) -e '.[dev]'
	$(PIP_INSTALL) ./$(EXAMPLE)
	touch $@

## run: the flagship fleet job on the built-in generator, with a live view and the dashboard (Ctrl-C stops it);
## at most 10,000 events a batch (a machine too slow for the rate shows its lag instead of a growing delay) and
## Spark's own dedup (--dedup fast), the low-latency choice
run: $(VENV)/.installed
	$(VENV)/bin/speedlayer run fleet --source 'generator://?rate=5000&vehicles=2000&seed=7&max_per_batch=10000' \
		--dedup fast --dashboard $(ARGS)

## servers: the servers the README's examples use, for a machine without them: PostgreSQL, MariaDB, Redis and a
## Kafka broker on their usual loopback ports (5432, 3306, 6379, 9092), data in temporary directories, until Ctrl-C
servers: $(VENV)/.installed-dev
	tests/install_servers.sh
	$(PY) -m tests.servers --usual-ports

## test: ruff's lint, the docs site (mkdocs --strict: a broken link fails), then the suite and the docstrings'
## examples against real servers the suite starts on free ports: PostgreSQL, MariaDB, Redis, a Kafka broker
## (tests/install_servers.sh installs Debian's packages and Chromium when missing; Maven fetches Kafka's jars once;
## `speedlayer warm-up` writes the class archive every test's Spark starts from, once)
test: $(VENV)/.installed-dev
	tests/install_servers.sh
	$(VENV)/bin/ruff check src tests bench examples
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site
	-$(VENV)/bin/speedlayer warm-up  # only a faster start: the suite runs without it
	$(PY) -m tests.servers -- $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(ARGS)

## bench: the whole job against its speed targets and its peers, every figure from one run (~45 min; ARGS=--quick: ~6 min)
bench: $(VENV)/.installed-dev
	$(PY) bench/targets.py $(ARGS)

## soak: the fleet job from the CLI for 30 min at 3,000 events/s (batches 10 s apart, RocksDB bounded at 256 MB),
## sampling memory, state and disk every 30 s;
## slopes, a flat-or-not verdict per series, the outputs checked against the oracle; a JSON and a plot in
## bench/results (ARGS="--minutes 120" for longer; ARGS=--quick: 3 min, a sample every 10 s)
soak: $(VENV)/.installed-dev
	$(PY) bench/soak.py $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache spark-warehouse
