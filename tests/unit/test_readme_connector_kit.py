"""docs/writing-a-connector.md's example, run as printed with the authors' test kit
(``connect.testing.run_pair``, in-process, no Spark, no broker): a tombstone among the records,
a dead-letter topic configured. The same outcome is checked over the wire through the driver and
Spark in ``tests/e2e/test_readme_connector.py``."""

from __future__ import annotations

from readme_connector import RECORDS, check_outcome, readme_sink

from connect.testing import run_pair


def test_readme_sink_with_the_test_kit(tmp_path):
    with readme_sink(tmp_path):
        out = tmp_path / "upper.txt"
        run = run_pair({"sink.connector.class": "upper", "sink.path": str(out),
                        "errors.deadletterqueue.topic.name": "upper-dlq"},
                       records=RECORDS, epochs=3)
        assert run.state == "RUNNING", run.trace
        letters = [(r.key, r.value, {k: v for k, v in r.headers or ()}) for r in run.dead_letters]
        (offset,) = [o["offset"] for o in run.committed.values()]
        check_outcome(out, letters, offset + 1, run.stats["dead_lettered"])
