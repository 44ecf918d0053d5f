"""The README's shell examples, as the tests that run them read them (tests/e2e/test_readme_*.py).

A *block* is a fenced ```sh or ```bash block; its *section* is the title of the nearest heading
above it (headings inside fences do not count). A block's *commands* are its logical lines:
backslash continuations joined, blank lines and whole-line comments dropped, trailing comments
kept (``argv`` drops them, as the shell does).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL_FENCES = ("sh", "bash")

_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_FENCE = re.compile(r"^```(\w*)\s*$")
_ALTERNATIVES = re.compile(r"^[a-z][\w-]*(\|[a-z][\w-]*)+$")


@dataclass(frozen=True)
class Block:
    section: str
    line: int  # 1-based line of the opening fence in the README
    text: str

    def commands(self) -> list[str]:
        joined = re.sub(r"\\\n\s*", "", self.text)
        return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def readme_text() -> str:
    return README.read_text()


def opening() -> str:
    """The README before its first section (``## ...``): what a new user reads first."""
    return readme_text().split("\n## ", 1)[0]


def _fenced_blocks(fences: tuple[str, ...]) -> list[Block]:
    blocks, section, fence, start, body = [], "", None, 0, []
    for number, line in enumerate(readme_text().splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence, start, body = match.group(1), number, []
            elif heading := _HEADING.match(line):
                section = heading.group(2)
        elif match and not match.group(1):
            if fence in fences:
                blocks.append(Block(section, start, "\n".join(body)))
            fence = None
        else:
            body.append(line)
    return blocks


def shell_blocks() -> list[Block]:
    return _fenced_blocks(SHELL_FENCES)


def argv_variants(command: str) -> list[list[str]]:
    """The argv of a README command, as the shell splits it (comments dropped); the README's
    shorthand ``pause|resume|stop|delete`` (a word of names joined by ``|``) is one command per name."""
    argv = shlex.split(command, comments=True)
    for i, word in enumerate(argv):
        if _ALTERNATIVES.match(word):
            return [argv[:i] + [name] + argv[i + 1:] for name in word.split("|")]
    return [argv]


def python_block(first_line: str) -> Block:
    """The README's ```python block whose first line is ``first_line`` (e.g. ``# upper_sink.py ...``)."""
    found = [b for b in _fenced_blocks(("python",)) if b.text.split("\n", 1)[0].strip() == first_line]
    if len(found) != 1:
        raise AssertionError(f"README.md has {len(found)} ```python blocks starting {first_line!r}, not one")
    return found[0]
