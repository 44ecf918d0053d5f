"""docs/writing-a-connector.md's example (``UpperSink``), as printed, and what running it must
do - written apart from how it is run (the Spark driver today, an in-process harness later).

The records: a value, a tombstone (value None), a record without key, a record the README's sink
refuses (a line break in its value: it reports it with ``context.errant_record_reporter``) and a
last value. Run with a dead-letter topic kept by a broker sink (``dlq.connector.class``): the
tombstone is handled (nothing written for it), the refused record is in the dead-letter topic with
its error headers, every other value is in the file, every offset is committed, and the pair is
never FAILED.
"""

from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator

from readme_util import python_block

from connect import plugins
from connect.plugins import register_plugin

__all__ = ["FIRST_LINE", "RECORDS", "REFUSED_OFFSET", "install_readme_sink", "readme_sink", "pipeline_config", "check_outcome"]

FIRST_LINE = "# upper_sink.py (in your package)"
RECORDS = [(b"k0", b"a"), (b"k1", None), (None, b"b"), (b"k3", b"bad\nline"), (b"k4", b"c")]  # (key, value)
REFUSED_OFFSET = 3
EXPECTED_FILE = b"A\nB\nC\n"


@contextmanager
def readme_sink(directory: Path) -> Iterator[ModuleType]:
    """:func:`install_readme_sink` for the ``with`` block only: afterwards neither the module nor the
    alias ``upper`` is left behind for later tests (``test_plugins.py`` owns a plugin named ``upper``)."""
    module = install_readme_sink(directory)
    try:
        yield module
    finally:
        sys.modules.pop("upper_sink", None)
        plugins._REGISTERED.pop("upper", None)


def install_readme_sink(directory: Path) -> ModuleType:
    """The README's block, exactly as printed, as module ``upper_sink`` (written to ``directory``),
    and connector name ``upper`` resolving to its ``UpperSink``."""
    path = directory / "upper_sink.py"
    path.write_text(python_block(FIRST_LINE).text)
    spec = importlib.util.spec_from_file_location("upper_sink", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["upper_sink"] = module
    spec.loader.exec_module(module)
    register_plugin("upper", "upper_sink:UpperSink")
    return module


def pipeline_config(*, topic: str, out_path: Path, dlq_topic: str, source: dict[str, str],
                    dlq: dict[str, str]) -> dict[str, str]:
    """The pipeline: ``source`` (its keys, unprefixed) -> the README's sink, dead letters kept by the
    broker sink ``dlq`` (its keys, unprefixed, ``connector.class`` among them)."""
    return {**{f"source.{k}": v for k, v in source.items()},
            "source.topics": topic, "sink.connector.class": "upper", "sink.path": str(out_path),
            "errors.deadletterqueue.topic.name": dlq_topic, **{f"dlq.{k}": v for k, v in dlq.items()}}


def check_outcome(out_path: Path, dead_letters: list[tuple[bytes | None, bytes | None, dict[str, bytes]]],
                  committed_next: int, dead_lettered: int) -> None:
    """What must hold after the run: ``dead_letters`` as (key, value, headers) read from the
    dead-letter topic, ``committed_next`` the committed source position (offset + 1),
    ``dead_lettered`` the pair's count of dead letters."""
    assert out_path.read_bytes() == EXPECTED_FILE  # the tombstone wrote nothing, the refused record neither
    key, value = RECORDS[REFUSED_OFFSET]
    assert [(k, v) for k, v, _ in dead_letters] == [(key, value)]
    headers = dead_letters[0][2]
    assert headers["__connect.errors.offset"] == str(REFUSED_OFFSET).encode()
    assert headers["__connect.errors.exception.class.name"] == b"DeliveryError"
    assert headers["__connect.errors.exception.message"] == b"a line break in the value"
    assert committed_next == len(RECORDS)  # nothing lost, nothing held
    assert dead_lettered == 1
