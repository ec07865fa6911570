# Tidelog's two commands for users: `make run` (a local cluster with a demo) and `make test`.
# Both create .venv and install what they need, so they work on a fresh machine.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-dev
PROTOS := $(wildcard proto/tidelog/v1/*.proto)

.PHONY: deploy-tools deploy-demo pipeline bench-spark chaos run stop test test-slow fuzz lint typecheck proto proto-check unit integration bench bench-scale bench-storage bench-controller bench-produce-consume bench-groups clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark,chaos]'
	touch $(STAMP)

test: $(STAMP) deploy-tools lint typecheck proto-check
	$(PY) -m pytest -q -m "not slow" --durations=25 tests

# Debian's prometheus package (prometheus and promtool): the deploy tests run a real Prometheus
# and check the rules with promtool. Installed once, as root; elsewhere the note says what to do
# and those tests skip.
deploy-tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's prometheus package (deploy tests)"; \
	    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -q --no-install-recommends prometheus >/dev/null; \
	  else echo "note: no promtool; as root: apt-get install prometheus (deploy tests skip)"; fi; }

# A rendered 3 controllers + 3 brokers on six network namespaces with Prometheus: a broker's
# link goes down and comes back, nothing acknowledged is lost, the alert fires (needs root).
deploy-demo: $(STAMP) deploy-tools
	$(PY) -m tidelog.chaos.multihost

# The long seeded Raft simulation sweeps (many seeds, long fault schedules; tens of minutes),
# left out of make test.
test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow tests

# The RPC fuzz test (tests/integration/test_fuzz_rpcs.py) for 10 minutes instead of make
# test's 40 s; TIDELOG_FUZZ_SEED=<n> replays a run's seeds.
fuzz: $(STAMP)
	TIDELOG_FUZZ_SECONDS=600 $(PY) -m pytest -q -s --timeout=900 tests/integration/test_fuzz_rpcs.py

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP)
	$(PY) -m pytest -q tests/integration

lint: $(STAMP)
	$(PY) -m ruff check .

# mypy cannot follow setuptools' editable finder (setup.py maps broker/ to tidelog.broker, and so
# on), so it runs over a tree of links in the installed layout: .typecheck/tidelog/ links every
# entry of tidelog/ and the three mapped folders. Every product module is checked strictly
# (tidelog/v1/, generated, is excluded in pyproject.toml); error lines name tidelog/broker/...
MAPPED := broker controller chaos
typecheck: $(STAMP)
	rm -rf .typecheck && mkdir -p .typecheck/tidelog
	for entry in tidelog/* $(MAPPED); do ln -s "$(CURDIR)/$$entry" .typecheck/tidelog/; done
	cd .typecheck && $(CURDIR)/$(PY) -m mypy --strict --config-file $(CURDIR)/pyproject.toml \
	  --cache-dir $(CURDIR)/.mypy_cache tidelog

# Regenerate the protobuf/gRPC code from proto/ (committed in tidelog/v1/).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)

# Fails when the committed generated code differs from what proto/ generates.
proto-check: $(STAMP)
	@tmp=$$(mktemp -d) && \
	$(PY) -m grpc_tools.protoc -Iproto --python_out=$$tmp --pyi_out=$$tmp --grpc_python_out=$$tmp $(PROTOS) && \
	diff -r -x __init__.py -x __pycache__ $$tmp/tidelog/v1 tidelog/v1 && rm -rf $$tmp && \
	echo "proto-check: generated code is up to date"

bench-storage: $(STAMP)
	$(PY) -m bench.storage

bench-controller: $(STAMP)
	$(PY) -m bench.controller

bench-produce-consume: $(STAMP)
	$(PY) -m bench.produce_consume

# Consumer groups: rebalance times (join, leave, kill -9), offset commits/s, group consume.
bench-groups: $(STAMP)
	$(PY) -m bench.groups

# The Spark source and sink: 1,000,000 100-byte records read through the source (local[2]) next
# to the Python Consumer, and written through the sink.
bench-spark: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) SPARK_LOCAL_IP=127.0.0.1 $(PY) -m bench.spark

# Every chaos scenario once (tidelog chaos run, 20 s of workload each, its own cluster each;
# 380 s in all measured on 2 cores): a table of figures, runs under chaos-runs/suite-<time>/
chaos: $(STAMP)
	$(PY) -m tidelog.chaos.runner_suite

# Scale: idle CPU and RSS at 0 / 3k / 10k / 30k partitions, failure handling and clients at
# scale (docs/performance.md#scale); about 15 minutes on 2 cores.
bench-scale: $(STAMP)
	$(PY) -m bench.scale

bench: bench-storage bench-controller bench-produce-consume

run: $(STAMP)
	$(PY) -m tidelog.demo

# A Structured Streaming job on the make-run cluster (started here when it is not running):
# page views in, windowed counts per page out to a compacted topic, then a restart from the
# checkpoint. Spark's Python workers need the venv's python (pyarrow, tidelog).
pipeline: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) SPARK_LOCAL_IP=127.0.0.1 $(PY) -m tidelog.spark.pipeline

stop: $(STAMP)
	$(PY) -m tidelog.cli cluster down --dir .tidelog/run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .typecheck
