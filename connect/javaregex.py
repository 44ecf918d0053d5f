"""Java's regex dialect (``java.util.regex.Pattern``) translated to RE2's, with RE2's cost bounded.

:func:`translate` reads a Java pattern in one pass and writes the RE2 pattern that means the same,
or raises :class:`PatternError` naming the construct RE2 cannot run and where it is. What it
takes, refuses and where the two dialects still differ:

- Java's syntax for what Kafka Connect and MirrorMaker 2 configs use works as in Java: named groups
  ``(?<name>...)``; POSIX classes ``\\p{Alnum}`` ``\\p{Alpha}`` ``\\p{Digit}`` ``\\p{Lower}``
  ``\\p{Upper}`` ``\\p{Punct}`` ``\\p{Space}`` ... (ASCII, as in Java); Unicode categories and
  scripts ``\\p{L}`` ``\\p{Lu}`` ``\\p{IsL}`` ``\\p{IsLatin}`` ``\\p{sc=Greek}``, and ``\\P{...}``;
  ``\\Q...\\E``; ``\\uhhhh``, ``\\x{h...}``, ``\\0ooo``, ``\\cX``, ``\\e``, ``\\N{NAME}``; ``\\h``
  ``\\v`` ``\\s`` with Java's sets; inline flags ``i m s d u``; lazy quantifiers.
- Refused, with the construct named: backreferences (``\\1``, ``\\k<name>``), lookahead and
  lookbehind, atomic groups ``(?>...)``, possessive quantifiers (``*+`` ``++`` ``?+`` ``{n}+``: in
  a whole-name match they can refuse names a greedy one accepts, so they are not translated),
  ``\\G`` ``\\Z`` ``\\R`` ``\\X`` ``\\b{g}``, Unicode blocks ``\\p{InGreek}``, ``java*`` and binary
  properties, class intersections ``&&`` and nested classes ``[a[b]]``, and the flags ``(?x)``
  and ``(?U)``.
- Known differences, none of which a Kafka topic name can show: ``.`` excludes only
  ``\\n`` (Java's ``UNIX_LINES``), ``$`` matches only at the very end (never before a final line
  break), and ``(?i)`` folds Unicode case (Java's ``(?iu)``).

Bounds (RE2 compiles holding the GIL, and refuses a pattern for ``max_mem`` only at the end of
parsing it): at most :data:`MAX_LENGTH` characters, :data:`MAX_DEPTH` nested groups and
:data:`MAX_COST` once expanded, so that a compile takes ~0.1 s at worst.
"""

from __future__ import annotations

import functools
import re as _re
import unicodedata

import re2

__all__ = ["MAX_COST", "MAX_DEPTH", "MAX_LENGTH", "MAX_MEMORY", "OPTIONS", "PatternError", "translate"]

MAX_LENGTH = 32_768
"""Characters in one pattern: room for an alternation of ~1,000 topic names, and a compile of
a few tens of milliseconds at most."""
MAX_DEPTH = 100
"""Nested groups: configs nest a handful; 3,000 ``(`` answered a 500 (``RecursionError``) before."""
MAX_MEMORY = 1 << 20
"""RE2's ``max_mem`` per pattern: a pattern whose program would need more is refused. It also
bounds a match's cost per character (0.06 s for a 250-character name at worst, measured), and
the GIL is released while matching."""
MAX_COST = 40_000
"""The pattern's size once RE2 expands it, estimated (:class:`_Translator`): a character counts 1,
a Unicode property ``\\p{..}`` :data:`_PROPERTY_COST`, and ``{n}`` multiplies its operand
(6,500 ``\\p{L}`` took RE2 4 s to refuse; under this cap every compile measured took <= 0.1 s)."""
_PROPERTY_COST = 400


class PatternError(ValueError):
    """A pattern (or replacement) this module refuses; the text names the construct and where it is."""


# -- translation from Java's dialect to RE2's ----------------------------------------------------------

_POSIX = {"Lower": "lower", "Upper": "upper", "ASCII": "ascii", "Alpha": "alpha", "Digit": "digit",
          "Alnum": "alnum", "Punct": "punct", "Graph": "graph", "Print": "print", "Blank": "blank",
          "Cntrl": "cntrl", "XDigit": "xdigit", "Space": "space"}
"""Java's POSIX names (ASCII-only, as in Java without ``UNICODE_CHARACTER_CLASS``) -> RE2's; both
define the same ASCII sets."""
_UNION = {"L1": r"\x{0}-\x{FF}", "LD": r"\p{L}\p{Nd}", "LC": r"\p{Lu}\p{Ll}\p{Lt}", "all": r"\x{0}-\x{10FFFF}"}
_IS = {"LETTER": "L", "DIGIT": "Nd", "PUNCTUATION": "P", "CONTROL": "Cc"}
"""Java's ``\\p{IsX}`` binary properties that are exactly one general category."""
_H = r"\x{9}\x{20}\x{A0}\x{1680}\x{180E}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}"
_V = r"\x{A}-\x{D}\x{85}\x{2028}\x{2029}"
_CONTROL = {"t": 0x9, "n": 0xA, "r": 0xD, "f": 0xC, "a": 0x7, "e": 0x1B}
_REFUSED_ESCAPES = {
    "G": "\\G (end of the previous match)", "Z": "\\Z (end before a final line break; use $ or \\z)",
    "R": "\\R (any line break sequence)", "X": "\\X (grapheme cluster)", "k": "a named backreference \\k<name>",
}
_QUANTIFIER = _re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")
_FLAGS = _re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")
_GROUP_NAME = _re.compile(r"\(\?P?<([a-zA-Z][a-zA-Z0-9]*)>")
_HEX = _re.compile(r"\{([0-9a-fA-F]{1,6})\}|([0-9a-fA-F]{2})")
_OCTAL = _re.compile(r"[0-3][0-7]{0,2}|[4-7][0-7]?")
_NAME = _re.compile(r"\{([^}]*)\}")
OPTIONS = re2.Options()
OPTIONS.log_errors = False
OPTIONS.max_mem = MAX_MEMORY


def _refuse(what: str, at: int) -> PatternError:
    return PatternError(f"uses {what} at position {at}, which the linear-time engine (RE2) cannot run")


def _lit(code: int) -> str:
    """One code point as RE2 text that means exactly that character, in or out of a class."""
    c = chr(code)
    return c if c.isascii() and c.isalnum() else f"\\x{{{code:X}}}"


@functools.lru_cache(maxsize=256)
def _re2_knows(prop: str) -> bool:
    try:
        re2.compile(f"\\p{{{prop}}}", OPTIONS)
    except re2.error:
        return False
    return True


class _Translator:
    """One left-to-right pass over a Java pattern (no recursion: the open groups are a list)."""

    def __init__(self, java: str):
        self.s, self.i, self.out = java, 0, []
        # RE2 compiles in time about linear in its expanded program: a counted repetition copies
        # its operand, a Unicode property is hundreds of ranges. ``cost`` estimates that size (the
        # current group's so far), ``last`` the operand a quantifier would copy.
        self.cost, self.last, self.outer = 0, 0, []

    def run(self) -> str:
        s, n = self.s, len(self.s)
        while self.i < n:
            c, at = s[self.i], self.i
            if c == "\\":
                self._atom(self._escape(in_class=False))
            elif c == "[":
                self._class()
            elif c == "(":
                self._group()
            elif c == ")":
                if not self.outer:
                    raise PatternError(f"has an unmatched ')' at position {at}")
                self.last, self.cost = self.cost, self.outer.pop() + self.cost
                self.out.append(")")
                self.i += 1
            elif c in "*+?":
                self.out.append(c)
                self.i += 1
                self._quantifier_mode(at)
            elif c == "{" and (m := _QUANTIFIER.match(s, self.i)):
                self.out.append(m.group())
                self.i = m.end()
                if len(m.group(1)) > 6 or len(m.group(2) or "") > 6:
                    raise PatternError(f"has a repetition count over 999,999 at position {at}")
                low, high = int(m.group(1)), m.group(2)
                self._repeat(low if high is None else low + 1 if high == "" else max(low, int(high)), at)
                self._quantifier_mode(at)
            elif c in ".^$|":
                self._atom(c)
                self.i += 1
            else:
                self._atom(_lit(ord(c)))
                self.i += 1
        if self.outer:
            raise PatternError(f"has {len(self.outer)} unclosed '(' (missing ')')")
        return "".join(self.out)

    def _atom(self, text: str) -> None:
        self.out.append(text)
        self.last = 1 + _PROPERTY_COST * (text.count("\\p{") + text.count("\\P{"))
        self.cost += self.last
        self._within_budget(self.i)

    def _repeat(self, copies: int, at: int) -> None:
        """The last operand stands ``copies`` times (``{n}``: RE2 copies it n times)."""
        copies = min(max(copies, 1), 10**6)
        self.cost += self.last * (copies - 1)
        self.last *= copies
        self._within_budget(at)

    def _within_budget(self, at: int) -> None:
        if self.cost + sum(self.outer) > MAX_COST:
            raise PatternError(f"is too large for the regex engine once expanded (at position {at}: counted "
                               "repetitions and Unicode classes multiply its size)")

    def _quantifier_mode(self, at: int) -> None:
        nxt = self.s[self.i:self.i + 1]
        if nxt == "?":
            self.out.append("?")
            self.i += 1
        elif nxt == "+":
            raise _refuse(f"a possessive quantifier ({self.s[at:self.i + 1]})", at)

    def _group(self) -> None:
        s, at = self.s, self.i
        if len(self.outer) >= MAX_DEPTH:
            raise PatternError(f"nests groups deeper than {MAX_DEPTH} levels (at position {at})")
        self.outer.append(self.cost)
        self.cost = 0
        if not s.startswith("(?", at):
            self.out.append("(")
            self.i += 1
            return
        for prefix, what in (("(?=", "a lookahead (?=...)"), ("(?!", "a negative lookahead (?!...)"),
                             ("(?<=", "a lookbehind (?<=...)"), ("(?<!", "a negative lookbehind (?<!...)"),
                             ("(?>", "an atomic group (?>...)"), ("(?P=", "a backreference (?P=name)")):
            if s.startswith(prefix, at):
                raise _refuse(what, at)
        if s.startswith("(?:", at):
            self.out.append("(?:")
            self.i += 3
            return
        if m := _GROUP_NAME.match(s, at):  # Java's (?<name>, and Python's (?P<name> that this project took before
            self.out.append(f"(?P<{m.group(1)}>")
            self.i = m.end()
            return
        if s.startswith("(?<", at):
            raise PatternError(f"has a group name that is not a letter followed by letters and digits at position {at}")
        m = _FLAGS.match(s, at)
        if m is None:
            raise PatternError(f"has an unknown group construct {s[at:at + 3]!r} at position {at}")
        on, off, end = m.group(1), m.group(2) or "", m.group(3)
        for flag in on + off:
            if flag == "x":
                raise _refuse("the comments flag (?x)", at)
            if flag == "U":
                raise _refuse("the flag (?U) (UNICODE_CHARACTER_CLASS)", at)
            if flag not in "imsdu":
                raise PatternError(f"has an unknown flag {flag!r} at position {at}")
        # d (UNIX_LINES) is RE2's only behaviour; u (Unicode case) is how RE2 always folds.
        on, off = "".join(f for f in on if f in "ims"), "".join(f for f in off if f in "ims")
        flags = on + (f"-{off}" if off else "")
        if end == ")":
            self.cost = self.outer.pop()
            self.out.append(f"(?{flags})" if flags else "")
        else:
            self.out.append(f"(?{flags}:")
        self.i = m.end()

    # -- escapes ----------------------------------------------------------------------------------
    def _escape(self, *, in_class: bool) -> str:
        """The RE2 text of the escape at ``self.i``: a single character as :func:`_lit` writes it,
        or a set (outside a class: a whole class; inside: its members)."""
        s, at = self.s, self.i
        if at + 1 >= len(s):
            raise PatternError("ends with a lone backslash")
        c = s[at + 1]
        self.i = at + 2
        code = self._char_escape(c, at)
        if code is not None:
            return _lit(code)
        if c == "Q":
            end = s.find("\\E", self.i)
            end = len(s) if end < 0 else end
            text = "".join(_lit(ord(ch)) for ch in s[self.i:end])
            self.i = min(end + 2, len(s))
            return text
        if c in "dDwW":
            return "\\" + c
        if c in "sS":
            member = "[:space:]" if c == "s" else "[:^space:]"  # Java's \s: [ \t\n\x0B\f\r], POSIX space
            return member if in_class else f"[{member}]"
        if c in "hHvV":
            members = _H if c in "hH" else _V
            if c.isupper():
                if in_class:
                    raise _refuse(f"\\{c} inside a character class", at)
                return f"[^{members}]"
            return members if in_class else f"[{members}]"
        if c in "pP":
            return self._property(c == "P", at, in_class)
        if c.isdigit():
            raise _refuse(f"a backreference (\\{c})", at)
        if c in "bBAz" and not in_class:
            if c == "b" and s.startswith("{", self.i):
                raise _refuse("\\b{g} (grapheme cluster boundary)", at)
            return "\\" + c
        if c in _REFUSED_ESCAPES:
            raise _refuse(_REFUSED_ESCAPES[c], at)
        if c.isascii() and c.isalpha():
            raise PatternError(f"has an unknown escape \\{c} at position {at}")
        return _lit(ord(c))  # \. \$ \( ...: the character itself

    def _char_escape(self, c: str, at: int) -> int | None:
        """The code point of a character escape (``\\t``, ``\\x41``, ``\\u00e9``...), None otherwise."""
        s = self.s
        if c in _CONTROL:
            return _CONTROL[c]
        if c == "0":
            digits = _OCTAL.match(s[self.i:self.i + 3])
            if not digits:
                raise PatternError(f"has an octal escape \\0 without digits at position {at}")
            self.i += digits.end()
            return int(digits.group(), 8)
        if c == "x":
            m = _HEX.match(s, self.i)
            if not m:
                raise PatternError(f"has a malformed \\x escape at position {at}")
            self.i = m.end()
            return self._code_point(int(m.group(1) or m.group(2), 16), at)
        if c == "u":
            code = self._hex4(at)
            if 0xD800 <= code < 0xDC00 and s.startswith("\\u", self.i):
                low_at = self.i
                self.i += 2
                low = self._hex4(low_at)
                if 0xDC00 <= low < 0xE000:
                    return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                self.i = low_at
            return self._code_point(code, at)
        if c == "c":
            if self.i >= len(s):
                raise PatternError(f"has \\c without a control letter at position {at}")
            self.i += 1
            return ord(s[self.i - 1]) ^ 64
        if c == "N":
            m = _NAME.match(s, self.i)
            try:
                code = ord(unicodedata.lookup(m.group(1))) if m else None
            except KeyError:
                code = None
            if code is None:
                raise PatternError(f"has an unknown character name \\N{{...}} at position {at}")
            self.i = m.end()
            return code
        return None

    def _hex4(self, at: int) -> int:
        digits = self.s[self.i:self.i + 4]
        if not _re.fullmatch(r"[0-9a-fA-F]{4}", digits):
            raise PatternError(f"has a malformed \\u escape at position {at}")
        self.i += 4
        return int(digits, 16)

    @staticmethod
    def _code_point(code: int, at: int) -> int:
        if 0xD800 <= code < 0xE000 or code > 0x10FFFF:
            raise PatternError(f"has an escape for a lone surrogate or beyond U+10FFFF at position {at}")
        return code

    def _property(self, negated: bool, at: int, in_class: bool) -> str:
        s = self.s
        if s.startswith("{", self.i):
            end = s.find("}", self.i)
            if end < 0:
                raise PatternError(f"has an unclosed \\p{{ at position {at}")
            name, self.i = s[self.i + 1:end], end + 1
        elif self.i < len(s):
            name, self.i = s[self.i], self.i + 1
        else:
            raise PatternError(f"has \\p without a property name at position {at}")
        shown = f"\\{'P' if negated else 'p'}{{{name}}}"
        if name in _POSIX:
            member = f"[:{'^' if negated else ''}{_POSIX[name]}:]"
            return member if in_class else f"[{member}]"
        if name in _UNION:
            if in_class and negated:
                raise _refuse(f"{shown} inside a character class", at)
            return _UNION[name] if in_class else f"[{'^' if negated else ''}{_UNION[name]}]"
        key, _, value = name.partition("=")
        if value and key in ("sc", "script", "gc", "general_category"):
            name = value
        elif value or name.startswith("In") or name.startswith("java"):
            raise _refuse(f"{shown} (Unicode blocks, java* and other properties)", at)
        elif name.startswith("Is"):
            name = _IS.get(name[2:].upper(), name[2:])
        # scripts as Java also takes them (IsGREEK, Isold_italic) are RE2's Greek, Old_Italic
        for known in (name, "_".join(part.capitalize() for part in name.split("_"))):
            if known.isascii() and known.replace("_", "").isalnum() and _re2_knows(known):
                return f"\\{'P' if negated else 'p'}{{{known}}}"
        raise PatternError(f"has an unknown or unsupported character property {shown} at position {at}")

    # -- character classes ------------------------------------------------------------------------
    def _class(self) -> None:
        s, start = self.s, self.i
        self.i += 1
        out = ["["]
        if s.startswith("^", self.i):
            out.append("^")
            self.i += 1
        first = True
        while True:
            if self.i >= len(s):
                raise PatternError(f"has an unclosed character class '[' at position {start}")
            c, at = s[self.i], self.i
            if c == "]" and not first:  # as in Java, a ']' right after '[' or '[^' is a member
                self.i += 1
                break
            first = False
            if c == "[":
                raise _refuse("a nested character class [..[..]..]", at)
            if s.startswith("&&", at):
                raise _refuse("a character class intersection &&", at)
            low = self._member(out)
            if low is not None and s.startswith("-", self.i) and self.i + 1 < len(s) and s[self.i + 1] != "]":
                self.i += 1
                high = self._member(out)
                if high is None or high < low:
                    raise PatternError(f"has a bad range in a character class at position {at}")
                out.append(f"{_lit(low)}-{_lit(high)}")
            elif low is not None:
                out.append(_lit(low))
        out.append("]")
        self._atom("".join(out))

    def _member(self, out: list[str]) -> int | None:
        """A single character of a class (its code point), or None after adding a set or a
        ``\\Q...\\E`` quote to ``out``."""
        s, at = self.s, self.i
        if s[at] != "\\":
            self.i += 1
            return ord(s[at])
        if at + 1 < len(s):
            self.i += 2
            code = self._char_escape(s[at + 1], at)
            if code is not None:
                return code
            if not s[at + 1].isascii() or not s[at + 1].isalnum():
                return ord(s[at + 1])  # \- \] \[ ...: the character itself
            self.i = at
        out.append(self._escape(in_class=True))
        return None


def translate(java: str) -> str:
    """The RE2 pattern that means what Java pattern ``java`` means; :class:`PatternError` if refused."""
    if not isinstance(java, str):
        raise PatternError("must be a string")
    if len(java) > MAX_LENGTH:
        raise PatternError(f"is {len(java):,} characters long; at most {MAX_LENGTH:,} are allowed")
    return _Translator(java).run()
