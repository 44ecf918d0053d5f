"""Every code block of the README and of docs/ is run or checked by the suite (issue 38.5).

Each fenced block is covered by exactly one rule, by its language:

- ```sh / ```bash: run line by line by tests/e2e/test_readme_examples.py, which asserts that every
  shell block is in a section it runs (the README's `make` lines: tests/e2e/test_readme_commands.py);
- ```python: run by the test named in ``PYTHON`` (by the block's first line and where it is);
- ```json: every connector document is validated here as `connect validate` validates a file;
- ```toml: parsed, and every entry point names a class a ```python block of the same page defines;
- a plain ``` block (the source layout): every directory and module it names exists.

A block in any other language, or a python block no test runs, fails ``test_every_block_is_covered``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from readme_connector import readme_sink
from readme_util import ROOT, SHELL_FENCES, SHELL_SECTIONS, TEST_KIT, TRANSFORMS, WRITING, Block, all_blocks, blocks

from connect.clientpolicy import ClientConfigPolicy
from worker.pipeline import load_pipeline_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs tomli there
    import tomli as tomllib

# (page, section, first line) of each ```python block -> the test that runs it as printed
PYTHON = {
    (*TRANSFORMS, "# stamp.py (in your package)"): "test_transforms_docs.py::test_the_custom_transform_example_works",
    (*WRITING, "# upper_sink.py (in your package)"): "test_readme_connector_kit.py, e2e/test_readme_connector.py",
    (*TEST_KIT, "from connect.testing import run_pair"): "test_transforms_docs.py::test_the_test_kit_example_runs_as_printed",
}
CHECKED_HERE = ("json", "toml", "")
# what the documented connector files read from the environment (conf/demo-mirror.json's variables)
ENV = {"SOURCE_BOOTSTRAP": "127.0.0.1:9092", "TARGET_BOOTSTRAP": "127.0.0.1:9093"}


def _first_line(block: Block) -> str:
    return block.text.split("\n", 1)[0].strip()


def _label(block: Block) -> str:
    return f"{block.page}:{block.line} ({block.section!r}, ```{block.fence})"


def test_every_block_is_covered():
    found = all_blocks()
    assert len(found) >= 15 and {b.page for b in found} >= {"README.md", "docs/operations.md", "docs/transforms.md"}
    for block in found:
        if block.fence in SHELL_FENCES:
            assert block.where in SHELL_SECTIONS, f"{_label(block)}: no test runs shell blocks there"
        elif block.fence == "python":
            assert (*block.where, _first_line(block)) in PYTHON, f"{_label(block)}: no test runs it (add it to PYTHON)"
        else:
            assert block.fence in CHECKED_HERE, f"{_label(block)}: no rule checks ```{block.fence} blocks"
    python = [(*b.where, _first_line(b)) for b in found if b.fence == "python"]
    assert sorted(python) == sorted(PYTHON), "a PYTHON entry names a block that is gone or duplicated"


def _documents(text: str) -> list[dict]:
    """The JSON documents of a block: one, or several one after the other (one per connector)."""
    decoder, documents, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
        while at < len(text) and text[at].isspace():
            at += 1
    return documents


JSON_BLOCKS = blocks(("json",))


@pytest.mark.parametrize("block", JSON_BLOCKS, ids=[f"{b.page}:{b.line}" for b in JSON_BLOCKS])
def test_json_connector_examples_validate(block, tmp_path, monkeypatch):
    """Each documented connector passes the checks `connect validate` makes (the example sink of
    "Writing a connector" installed as its entry point would be; its file under an allowed path)."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(tmp_path))
    documents = _documents(block.text)
    assert documents, _label(block)
    with readme_sink(tmp_path):  # the alias "upper" must not outlive this test (test_plugins.py owns one)
        for i, document in enumerate(documents):
            sink_path = document["config"].get("sink.path")
            policy = ClientConfigPolicy.from_settings(allowed_paths=str(Path(sink_path).parent) if sink_path else ())
            path = tmp_path / f"connector-{i}.json"
            path.write_text(json.dumps(document))
            pipeline = load_pipeline_file(path, policy)  # raises ConfigError naming every bad key
            assert pipeline.name == document["name"]


def _python_classes(page: str) -> dict[str, set[str]]:
    """module name -> classes, of the ```python blocks of a page whose first line is ``# module.py ...``."""
    found = {}
    for block in blocks(("python",)):
        if block.page == page and (match := re.match(r"# (\w+)\.py\b", _first_line(block))):
            found[match.group(1)] = set(re.findall(r"^class (\w+)\b", block.text, re.M))
    return found


@pytest.mark.parametrize("block", blocks(("toml",)), ids=lambda b: f"{b.page}:{b.line}")
def test_toml_entry_points_name_the_documented_classes(block):
    document = tomllib.loads(block.text)
    groups = document["project"]["entry-points"]
    assert groups, _label(block)
    classes = _python_classes(block.page)
    for group, entries in groups.items():
        assert group in ("connect.connectors", "connect.transforms", "connect.predicates"), group
        for name, target in entries.items():
            module, _, cls = target.partition(":")
            assert cls in classes.get(module, ()), f"{_label(block)}: {name} = {target!r} names no documented class"


def test_layout_names_what_exists():
    """The source layout (docs/development.md): every top-level directory, every worker/ subpackage and
    every module it names exists where it says."""
    [layout] = [b for b in all_blocks() if b.fence == "" and b.section == "Layout"]
    directory = ROOT
    for line in layout.text.splitlines():
        if match := re.match(r"^(\S+/)", line):
            directory = ROOT / match.group(1)
        elif match := re.match(r"^  (\S+/)", line):
            directory = ROOT / "worker" / match.group(1)
        assert directory.is_dir(), f"{line!r}: {directory} is not a directory"
        for module in re.findall(r"(?<![\w/.])([a-z_]+\.(?:py|xml|properties))\b", line):
            assert list(directory.rglob(module)), f"{line!r}: no {module} under {directory.relative_to(ROOT)}"
        for path in re.findall(r"(?<![\w/.])((?:[\w.]+/)+[\w.]+\.(?:py|yml))\b", line):
            assert (ROOT / path).is_file(), f"{line!r}: no {path}"
