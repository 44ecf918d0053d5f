"""An ``mm2.properties`` file read as Java reads it, each entry with the line it starts on.

Parsing is ``javaproperties`` (the format of ``java.util.Properties.load``: ``=``, ``:`` or
whitespace separators, continuation lines, ``\\`` escapes, ``#`` / ``!`` comments); this module
only adds line numbers, so that an error can name the key and the line. A later duplicate key
wins, as in Java (the line reported is the later one).
"""

from __future__ import annotations

from dataclasses import dataclass

import javaproperties

__all__ = ["Entry", "PropertiesError", "read_properties"]


@dataclass(frozen=True)
class Entry:
    value: str
    line: int


class PropertiesError(ValueError):
    """The file is not a readable properties file; the message names the line."""


def read_properties(text: str) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    line = 1
    try:
        for item in javaproperties.parse(text):
            if isinstance(item, javaproperties.KeyValue):
                entries[item.key] = Entry(item.value, line)
            line += item.source.count("\n") + (item.source.count("\r") - item.source.count("\r\n"))
    except javaproperties.InvalidUEscapeError as exc:
        # the next entry starts at ``line``: the bad escape is in it (the message holds no value)
        raise PropertiesError(f"line {line}: a \\u escape needs 4 hex digits ({exc.escape!r} is not one)") from None
    return entries
