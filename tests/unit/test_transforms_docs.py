"""The examples of docs/transforms.md and of the test kit (docs/writing-a-connector.md) run as printed:
the connector JSON is a valid pipeline whose transforms do what the text says, the custom transform
is a working Transformation, and the test-kit block's assertions hold."""

from __future__ import annotations

import orjson
from readme_util import TEST_KIT, TRANSFORMS, blocks, python_block

from connect.records import ConnectRecord
from connect.transforms import Transformation
from worker.pipeline import parse_pipeline

STAMP = "# stamp.py (in your package)"


def test_the_transforms_example_connector_is_valid_and_does_what_it_says():
    [document] = [b.text for b in blocks(("json",), TRANSFORMS)]
    pipeline = parse_pipeline(orjson.loads(document))
    steps, _ = pipeline.transforms.build()

    def through(record):
        for _, step in steps:
            record = step(record)
            if record is None:
                return None
        return record

    sp = {"topic": "orders.eu", "partition": 0}
    out = through(ConnectRecord("orders.eu", b"k", b'{"card": "4111", "id": 1}', None, None, sp, {"offset": 0}))
    assert out.topic == "dc1_orders_eu" and orjson.loads(out.value) == {"card": "", "id": 1}
    assert through(ConnectRecord("orders.eu", b"k", None, None, None, sp, {"offset": 1})) is None


def test_the_custom_transform_example_works():
    block = python_block(STAMP)
    assert block.where == TRANSFORMS, block
    namespace: dict = {}
    exec(compile(block.text, f"{block.page}:stamp.py", "exec"), namespace)  # noqa: S102 - the page's own example
    stamp = namespace["Stamp"]
    assert issubclass(stamp, Transformation)
    t = stamp()
    t.configure(stamp.config_def().parse({}))
    out = t.apply(ConnectRecord("t", b"k", b"v", [("a", b"1")]))
    assert out.headers == [("a", b"1"), ("stamped-by", b"dc1")]


def test_the_test_kit_example_runs_as_printed():
    [block] = blocks(("python",), TEST_KIT)
    exec(compile(block.text, f"{block.page}:testkit", "exec"), {})  # noqa: S102 - its asserts are the test
