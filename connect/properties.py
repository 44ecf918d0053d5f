"""Java properties files (``java.util.Properties.load``), as the ``file`` config provider reads them."""

from __future__ import annotations

import re

__all__ = ["parse_properties"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLANK = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _continues(line: str) -> bool:
    """True when the line ends with an odd number of backslashes (a line continuation)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, *, trim_end: bool) -> str:
    out: list[str] = []
    significant = 0  # length of ``out`` up to its last non-blank or escaped character
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\":
            out.append(char)
            if char not in _BLANK:
                significant = len(out)
            continue
        if i == len(text):  # a lone trailing backslash is dropped, as in Java
            break
        char = text[i]
        i += 1
        if char == "u":
            digits = text[i:i + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError("malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(char, char))
        significant = len(out)
    return "".join(out[:significant] if trim_end else out)


def _split_entry(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in "=:" or char in _BLANK:
            break
        i += 1
    key = line[:i]
    while i < len(line) and line[i] in _BLANK:
        i += 1
    if i < len(line) and line[i] in "=:":
        i += 1
    while i < len(line) and line[i] in _BLANK:
        i += 1
    return _unescape(key, trim_end=False), _unescape(line[i:], trim_end=True)


def parse_properties(text: str) -> dict[str, str]:
    """Entries of a Java properties file.

    ``key=value``, ``key: value`` or ``key value``; lines whose first non-blank character is ``#`` or
    ``!`` are comments; whitespace around keys and values is dropped (an escaped blank, ``\\ ``, is
    kept); a line ending in an odd number of backslashes continues on the next line (whose leading
    blanks are dropped); ``\\=``, ``\\:``, ``\\#``, ``\\!``, ``\\ ``, ``\\\\``, ``\\t``, ``\\n``,
    ``\\r``, ``\\f`` and ``\\uXXXX`` are escapes (any other ``\\c`` is ``c``). A later duplicate key wins.
    Raises ValueError for a malformed ``\\u`` escape (the message holds no file content).
    """
    entries: dict[str, str] = {}
    lines = _LINE_BREAK.split(text)
    index = 0
    while index < len(lines):
        line = lines[index].lstrip(_BLANK)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if index == len(lines):
                break
            line += lines[index].lstrip(_BLANK)
            index += 1
        key, value = _split_entry(line)
        entries[key] = value
    return entries
