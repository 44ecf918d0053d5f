"""The code blocks of the README and of the documentation pages (docs/**/*.md), as the tests that run
or check them read them (tests/e2e/test_readme_examples.py, tests/unit/test_docs_examples.py and the
tests they name).

A *block* is a fenced block (```` ```sh ````, ```` ```json ````...); its *page* is the file it is in
(relative to the repository, e.g. ``docs/operations.md``), its *section* the title of the nearest
heading above it (headings inside fences do not count). A shell block's *commands* are its logical
lines: backslash continuations joined, blank lines and whole-line comments dropped, trailing
comments kept (``argv`` drops them, as the shell does).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SHELL_FENCES = ("sh", "bash")

# Where the documented examples live, as (page, section). The shell blocks of these sections are run
# line by line by tests/e2e/test_readme_examples.py (the opening's `make` lines by test_readme_commands.py).
OPENING = ("README.md", "connect-bridge")
FIRST_MIRROR = ("README.md", "A first mirror in five minutes")
RUNNING = ("docs/operations.md", "Running a connector")
WORKER = ("docs/operations.md", "Running the worker service")
REPLICATORS = ("docs/replication.md", "Replicators (PIP-18 onboarding)")
SHELL_SECTIONS = (OPENING, FIRST_MIRROR, RUNNING, WORKER, REPLICATORS)
# ```python blocks, each run by the test named (by the block's first line)
TRANSFORMS = ("docs/transforms.md", "Transforms and predicates")
WRITING = ("docs/writing-a-connector.md", "Writing a connector")
TEST_KIT = ("docs/writing-a-connector.md", "Testing a connector (test kit)")

_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_FENCE = re.compile(r"^```(\w*)\s*$")
_ALTERNATIVES = re.compile(r"^[a-z][\w-]*(\|[a-z][\w-]*)+$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: README.md, docs/operations.md...
    section: str
    line: int  # 1-based line of the opening fence in the page
    fence: str  # the fence's language ("" for a plain ```)
    text: str

    @property
    def where(self) -> tuple[str, str]:
        return self.page, self.section

    def commands(self) -> list[str]:
        joined = re.sub(r"\\\n\s*", "", self.text)
        return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def pages() -> list[Path]:
    """The README and every documentation page."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def readme_text() -> str:
    return README.read_text()


def opening() -> str:
    """The README before its first section (``## ...``): what a new user reads first."""
    return readme_text().split("\n## ", 1)[0]


def _page_blocks(path: Path) -> list[Block]:
    page = path.relative_to(ROOT).as_posix()
    blocks, section, fence, start, body = [], "", None, 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence, start, body = match.group(1), number, []
            elif heading := _HEADING.match(line):
                section = heading.group(2)
        elif match and not match.group(1):
            blocks.append(Block(page, section, start, fence, "\n".join(body)))
            fence = None
        else:
            body.append(line)
    if fence is not None:
        raise AssertionError(f"{page}:{start}: a ```{fence} block that is never closed")
    return blocks


def all_blocks() -> list[Block]:
    """Every fenced block of every page, in page order."""
    return [block for path in pages() for block in _page_blocks(path)]


def blocks(fences: tuple[str, ...], where: tuple[str, str] | None = None) -> list[Block]:
    return [b for b in all_blocks() if b.fence in fences and (where is None or b.where == where)]


def shell_blocks() -> list[Block]:
    return blocks(SHELL_FENCES)


def argv_variants(command: str) -> list[list[str]]:
    """The argv of a documented command, as the shell splits it (comments dropped); the shorthand
    ``pause|resume|stop|delete`` (a word of names joined by ``|``) is one command per name."""
    argv = shlex.split(command, comments=True)
    for i, word in enumerate(argv):
        if _ALTERNATIVES.match(word):
            return [argv[:i] + [name] + argv[i + 1:] for name in word.split("|")]
    return [argv]


def python_block(first_line: str) -> Block:
    """The ```python block, on any page, whose first line is ``first_line`` (e.g. ``# upper_sink.py ...``)."""
    found = [b for b in blocks(("python",)) if b.text.split("\n", 1)[0].strip() == first_line]
    if len(found) != 1:
        raise AssertionError(f"the README and docs/ have {len(found)} ```python blocks starting {first_line!r}, not one")
    return found[0]
