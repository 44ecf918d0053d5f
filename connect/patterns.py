"""User regular expressions: Java's dialect, run by RE2 in time linear in the text.

Every regex a config supplies (``topics.regex``, ``topics.exclude``, RegexRouter's ``regex``,
TopicNameMatches' ``pattern``, checkpoint ``groups``, the metadata connectors' filters...) goes
through :func:`compile` and is matched by the :class:`JavaPattern` it returns.

Why RE2 (``google-re2``, Google's own bindings; a binary wheel, no compiler needed): it matches in
time linear in the text, by construction, and releases the GIL while it does. Names a broker
hands us (anyone who can create a topic or a group there chooses them) are matched against
operators' regexes, so the bound must hold for any text, not just the ones the operator imagined.
``regex`` with ``timeout=`` keeps backtracking (so lookaround and backreferences), but it bounds
cost by failing a match after the fact: every call site in the driver would need an error path
for "took too long", and each slow match still burns the whole timeout. RE2 needs neither. The
price is the constructs that need backtracking: they are refused at validation, naming the
construct (:class:`PatternError`). RE2 itself reads ``(?P<name>..)`` and ``(?<name>..)``, reports
errors as ``re2.error`` with a bytes message, and compiles holding the GIL, so its input is
bounded here first.

Guarantees:

- A pattern is at most :data:`MAX_LENGTH` characters, nests groups at most :data:`MAX_DEPTH`
  deep and expands to at most :data:`MAX_COST`; its translation never recurses (no
  ``RecursionError`` for any input) and RE2 compiles it within :data:`MAX_MEMORY` bytes or refuses
  it: a compile takes ~0.1 s at worst, a match of a 250-character name ~0.06 s at worst.
- Java's dialect is translated by :mod:`connect.javaregex`, which names every construct it
  refuses (backreferences, lookaround, possessive quantifiers, atomic groups...).

Replacements (:class:`JavaReplacement`) follow ``Matcher.appendReplacement``: ``$n`` takes as many
digits as name an existing group, ``${name}`` a named group, ``\\`` escapes the next character,
and a group that did not take part adds nothing.
"""

from __future__ import annotations

import functools
import re as _re
from typing import Any

import re2

from connect.javaregex import MAX_COST, MAX_DEPTH, MAX_LENGTH, MAX_MEMORY, OPTIONS, PatternError, translate

__all__ = ["MAX_COST", "MAX_DEPTH", "MAX_LENGTH", "MAX_MEMORY", "JavaPattern", "JavaReplacement", "PatternError",
           "compile", "fullmatch", "problem", "replacement_problem", "translate"]

_REPLACEMENT_NAME = _re.compile(r"\{([a-zA-Z0-9]*)(\}?)")


# -- compiled patterns ------------------------------------------------------------------------------

class JavaPattern:
    """A compiled Java-dialect pattern. ``fullmatch`` is Java's ``Matcher.matches()`` (what Kafka
    Connect uses for topic and group filters), ``search`` is ``Matcher.find()``; both are linear in
    the text and return a match (``group(n)``, ``group(name)``) or None."""

    __slots__ = ("java", "_re2")

    def __init__(self, java: str):
        self.java = java
        try:
            self._re2 = re2.compile(translate(java), OPTIONS)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            raise PatternError(f"is refused by the regex engine: {reason}") from None

    @property
    def groups(self) -> int:
        return self._re2.groups

    @property
    def groupindex(self) -> dict[str, int]:
        return dict(self._re2.groupindex)

    def fullmatch(self, text: str) -> Any:
        return self._re2.fullmatch(text)

    def search(self, text: str) -> Any:
        return self._re2.search(text)

    def __reduce__(self):  # travels to executors as its source, compiled again there
        return (compile, (self.java,))

    def __repr__(self) -> str:
        return f"JavaPattern({self.java!r})"


@functools.lru_cache(maxsize=256)
def compile(java: str) -> JavaPattern:  # noqa: A001 - the name every regex module uses
    """The compiled pattern (cached: configs repeat); :class:`PatternError` naming what is refused."""
    return JavaPattern(java)


def fullmatch(java: str, text: str) -> bool:
    """Whether ``text`` matches Java pattern ``java`` whole (``Matcher.matches()``)."""
    return compile(java).fullmatch(text) is not None


def problem(value: Any) -> str | None:
    """A config validator: None for an empty or valid pattern, else a sentence saying what is wrong."""
    if not value:
        return None
    try:
        compile(value)
    except PatternError as exc:
        return f"is not a valid regular expression: it {exc}"
    return None


# -- replacements -------------------------------------------------------------------------------------

class JavaReplacement:
    """A ``Matcher.appendReplacement`` replacement string. Built without a pattern it checks the
    syntax only; with one, every group it names must exist (Java would throw at the first match)."""

    def __init__(self, text: str, pattern: JavaPattern | None = None):
        parts: list[str | int] = []
        literal: list[str] = []
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "\\":
                if i + 1 >= n:
                    raise PatternError("ends with a lone backslash (write \\\\ for a backslash)")
                literal.append(text[i + 1])
                i += 2
                continue
            if c != "$":
                literal.append(c)
                i += 1
                continue
            if i + 1 >= n:
                raise PatternError(f"a '$' must be followed by a group number or {{name}} (position {i}; "
                                   "write \\$ for a dollar)")
            if text[i + 1] == "{":
                m = _REPLACEMENT_NAME.match(text, i + 1)
                name = m.group(1)
                if not name or not m.group(2) or name[0].isdigit():
                    raise PatternError(f"has a malformed ${{name}} at position {i} (a letter, then letters and "
                                       "digits, then '}')")
                if pattern is not None and name not in pattern.groupindex:
                    raise PatternError(f"names group {{{name}}}, which the regex does not have")
                group: int | str = pattern.groupindex[name] if pattern is not None else name
                i = m.end()
            elif "0" <= text[i + 1] <= "9":
                group, i = int(text[i + 1]), i + 2
                # Java takes further digits while they still name an existing group
                while pattern is not None and i < n and "0" <= text[i] <= "9" and group * 10 + int(text[i]) <= pattern.groups:
                    group, i = group * 10 + int(text[i]), i + 1
                if pattern is not None and group > pattern.groups:
                    raise PatternError(f"refers to group ${group}, but the regex has {pattern.groups} group(s)")
            else:
                raise PatternError(f"a '$' must be followed by a group number or {{name}} (position {i}; "
                                   "write \\$ for a dollar)")
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(group)
        if literal:
            parts.append("".join(literal))
        self.text = text
        self._parts = parts

    def expand(self, match: Any) -> str:
        """The replacement for ``match`` (a group that did not take part adds nothing)."""
        return "".join(p if isinstance(p, str) else (match.group(p) or "") for p in self._parts)


def replacement_problem(value: Any) -> str | None:
    """A config validator for a replacement's syntax (the groups are checked with the pattern)."""
    try:
        JavaReplacement(str(value))
    except PatternError as exc:
        return str(exc)
    return None
