"""connect.patterns / connect.javaregex: Java's regex dialect on RE2, each construct matching as
java.util.regex does, each construct RE2 cannot run refused by name, and every cost bounded."""

from __future__ import annotations

import pickle
import time

import pytest

from connect import patterns
from connect.config import valid_regex
from connect.patterns import JavaReplacement, PatternError


def matches(java: str, text: str) -> bool:
    return patterns.fullmatch(java, text)


# -- constructs Kafka Connect / MirrorMaker 2 configs use, matching as in Java ---------------------

@pytest.mark.parametrize("java, yes, no", [
    (r"(?<env>[a-z]+)\.(?<rest>.*)", ["prod.orders"], ["prod"]),
    (r"\p{Alnum}+", ["abc123"], ["a-b", "é"]),  # POSIX classes are ASCII in Java
    (r"\p{Alpha}\p{Digit}", ["a1"], ["11"]),
    (r"\p{Lower}\p{Upper}", ["aB"], ["Ab"]),
    (r"\p{Punct}+", ["!-._~"], ["a"]),
    (r"\p{Space}", ["\x0b", "\t"], ["a"]),  # Java's \p{Space} and \s include \x0B
    (r"\s\S", [" x", "\x0bx"], ["xx"]),
    (r"\p{XDigit}+|\p{Blank}|\p{Cntrl}", ["0aF", " ", "\x01"], ["g"]),
    (r"\P{Alpha}", ["1"], ["a"]),
    (r"[\p{Alnum}_.-]+", ["a_b.c-1"], ["a b"]),
    (r"[^\p{Alnum}]", ["-"], ["a"]),
    (r"[\P{Alnum}]", ["-"], ["a"]),
    (r"\p{L}+", ["Ωmega"], ["1"]),
    (r"\p{Lu}\p{IsL}\p{IsLatin}\p{sc=Greek}\pL\p{IsLetter}\p{IsDigit}", ["AbcΩde1"], ["abcΩde1"]),
    (r"\P{L}", ["1"], ["a"]),
    (r"\p{IsGREEK}\p{IsOld_Italic}\p{script=Latin}\p{gc=Nd}", ["Ω\U00010300a1"], ["ab\U00010300a1"]),
    (r"\p{LD}+", ["a1"], ["-"]),
    (r"\P{LD}", ["-"], ["a"]),
    (r"[\p{LC}]", ["a"], ["1"]),
    (r"\Q.*\E", [".*"], ["ab"]),
    (r"[\Q-]\E]+", ["-]"], ["a"]),
    (r"\Qa.b", ["a.b"], ["axb"]),  # \Q without \E quotes to the end
    (r"\u00e9\x41\x{1F600}\0101\cA\e\t", ["éA😀A\x01\x1b\t"], []),
    (r"\uD83D\uDE00", ["😀"], []),  # a surrogate pair is one code point
    (r"\N{LATIN SMALL LETTER E WITH ACUTE}", ["é"], ["e"]),
    (r"\h\v", ["\u3000\u2028", "\t\x85"], ["a\n"]),
    (r"\H\V", ["ab"], [" \n"]),
    (r"[\h]", ["\xa0"], ["a"]),
    (r"(?i)orders", ["ORDERS"], []),
    (r"(?i:a)b", ["Ab"], ["AB"]),
    (r"(?iu)é", ["É"], []),
    (r"(?d)a.", ["ab"], ["a\n"]),
    (r"a{2,3}?", ["aa", "aaa"], ["a"]),
    (r"a{2,}", ["aaaa"], ["a"]),
    (r"x{y", ["x{y"], []),  # a '{' that is no repetition is itself
    (r"[]a]+", ["]a"], []),  # as in Java, ']' first in a class is a member
    (r"[^]a]", ["b"], ["]"]),
    (r"[a-]+|[-b]", ["a-", "-"], ["c"]),
    (r"\.\$\(\)\[\]\{\}\|\\", [".$()[]{}|\\"], []),
    (r"orders\..*|heartbeats", ["orders.eu", "heartbeats"], ["orders"]),
    (r"__.*|.*\.internal", ["__consumer_offsets", "a.internal"], ["a"]),
    (r"(?P<name>a)", ["a"], []),  # the Python spelling this project took before stays accepted
    (r"\bab\B", [], ["ab"]),
    (r"\Aab\z", ["ab"], []),
])
def test_java_constructs_match_as_in_java(java, yes, no):
    for text in yes:
        assert matches(java, text), (java, text)
    for text in no:
        assert not matches(java, text), (java, text)


def test_named_groups_are_named():
    p = patterns.compile(r"(?<env>\p{Alnum}+)\.(?<rest>.*)")
    m = p.fullmatch("prod.orders")
    assert (m.group("env"), m.group("rest"), m.group(1)) == ("prod", "orders", "prod")
    assert p.groups == 2 and p.groupindex == {"env": 1, "rest": 2}


def test_search_finds_and_fullmatch_needs_the_whole_text():
    p = patterns.compile("b+")
    assert p.search("abbc") and not p.fullmatch("abbc") and p.fullmatch("bb")


def test_a_compiled_pattern_pickles_as_its_source():
    assert pickle.loads(pickle.dumps(patterns.compile(r"\p{Alnum}+"))).fullmatch("a1")


# -- refused, naming the construct and where it is -------------------------------------------------

@pytest.mark.parametrize("java, named", [
    ("(a)\\1", "a backreference (\\1) at position 3"),
    ("(?<x>a)\\k<x>", "a named backreference \\k<name>"),
    ("(?P=x)", "a backreference (?P=name)"),
    ("(?=a)a", "a lookahead (?=...) at position 0"),
    ("(?!a)b", "a negative lookahead (?!...)"),
    ("(?<=a)b", "a lookbehind (?<=...)"),
    ("(?<!a)b", "a negative lookbehind (?<!...)"),
    ("(?>a)", "an atomic group (?>...)"),
    ("a++", "a possessive quantifier (++) at position 1"),
    ("a*+", "a possessive quantifier (*+)"),
    ("a?+", "a possessive quantifier (?+)"),
    ("a{2}+", "a possessive quantifier ({2}+)"),
    ("a\\Z", "\\Z (end before a final line break"),
    ("\\Ga", "\\G"),
    ("\\R", "\\R (any line break sequence)"),
    ("\\X", "\\X (grapheme cluster)"),
    ("\\b{g}", "\\b{g}"),
    ("\\p{InGreek}", "\\p{InGreek}"),
    ("\\p{javaLowerCase}", "\\p{javaLowerCase}"),
    ("\\p{blk=Greek}", "\\p{blk=Greek}"),
    ("[a-z&&[^b]]", "a character class intersection &&"),
    ("[a[bc]]", "a nested character class"),
    ("(?x) a", "the comments flag (?x)"),
    ("(?U)\\w", "the flag (?U)"),
    ("[\\H]", "\\H inside a character class"),
    ("[\\P{LD}]", "\\P{LD} inside a character class"),
])
def test_what_re2_cannot_run_is_refused_by_name(java, named):
    with pytest.raises(PatternError) as caught:
        patterns.compile(java)
    assert named in str(caught.value)
    assert "RE2" in str(caught.value)
    problem = valid_regex(java)  # what a config key reports
    assert problem.startswith("is not a valid regular expression") and named in problem


@pytest.mark.parametrize("java, says", [
    ("a(b", "unclosed '('"), ("a)", "unmatched ')' at position 1"), ("[ab", "unclosed character class"),
    ("a\\", "lone backslash"), ("\\q", "unknown escape \\q"), ("\\p{Foo}", "unknown or unsupported character property"),
    ("\\p{IsAlphabetic}", "\\p{IsAlphabetic}"), ("[z-a]", "bad range"), ("\\uD800", "lone surrogate"),
    ("\\x{110000}", "beyond U+10FFFF"), ("\\0", "octal escape"), ("(?<1a>x)", "group name"), ("(?<a_b>x)", "group name"),
    ("(?#c)", "unknown group construct"), ("(?z)", "unknown flag 'z'"), ("*a", "regex engine"),
    ("a{1001}", "regex engine"), ("a{99999999}", "repetition count"), ("\\N{NO SUCH NAME}", "character name"),
])
def test_malformed_patterns_say_what_is_wrong(java, says):
    with pytest.raises(PatternError, match=None) as caught:
        patterns.compile(java)
    assert says in str(caught.value)


# -- bounded cost ------------------------------------------------------------------------------------

def test_catastrophic_backtracking_patterns_match_in_linear_time():
    started = time.perf_counter()
    for n in (26, 40, 5000):
        assert not matches("(a+)+b", "a" * n)
        assert not matches("(a|aa)*c", "a" * n)
        assert not matches("(.*a){12}", "a" * 11 + "b" * n)
    assert time.perf_counter() - started < 0.5


def test_deep_nesting_is_refused_without_recursion():
    with pytest.raises(PatternError, match="nests groups deeper than 100"):
        patterns.compile("(" * 3000 + ")" * 3000)
    assert patterns.fullmatch("(" * 100 + "a" + ")" * 100, "a")


def test_length_and_expanded_size_are_capped_and_compiles_stay_fast():
    with pytest.raises(PatternError, match="950,000 characters long; at most 32,768"):
        patterns.compile("a" * 950_000)
    for costly in (r"\p{L}" * 6500, r"\p{L}{1000}", r"(\p{L}{30}){30}", "(.{30}){30}" * 40, r"[\p{L}\p{N}]" * 100):
        started = time.perf_counter()
        with pytest.raises(PatternError):
            patterns.compile(costly)
        assert time.perf_counter() - started < 0.5, costly
    started = time.perf_counter()
    names = "|".join(f"topic-{i:05d}-name" for i in range(1800))  # 30,599 characters: allowed
    assert patterns.fullmatch(names, "topic-01234-name")
    assert time.perf_counter() - started < 0.5


def test_compiles_are_cached():
    assert patterns.compile("x+") is patterns.compile("x+")


# -- replacements (Matcher.appendReplacement) --------------------------------------------------------

def expand(java: str, text: str, replacement: str) -> str:
    p = patterns.compile(java)
    return JavaReplacement(replacement, p).expand(p.fullmatch(text))


def test_replacements_follow_java():
    assert expand(r"(?<env>\p{Alnum}+)\.(?<rest>.*)", "prod.orders", "dc1_${rest}_$1") == "dc1_orders_prod"
    assert expand(r"(a)", "a", r"\$1 is $1, \\ is a backslash") == "$1 is a, \\ is a backslash"
    eleven = "(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)"
    assert expand(eleven, "abcdefghijk", "$11-$12") == "k-a2"  # digits are taken while a group exists
    assert expand("(a)|(b)", "b", "[$1][$2]") == "[][b]"  # a group that did not take part adds nothing
    assert expand("x", "x", "$0!") == "x!"


@pytest.mark.parametrize("replacement, says", [
    ("cost $", "'$' must be followed"), ("$x", "'$' must be followed"), ("x\\", "lone backslash"),
    ("${}", "malformed ${name}"), ("${1a}", "malformed ${name}"), ("${open", "malformed ${name}"),
])
def test_malformed_replacements_are_refused(replacement, says):
    with pytest.raises(PatternError, match=None) as caught:
        JavaReplacement(replacement)
    assert says in str(caught.value)


def test_a_replacement_naming_a_missing_group_is_refused_with_the_pattern():
    p = patterns.compile("(?<x>a)(b)")
    with pytest.raises(PatternError, match=r"group \{nope\}, which the regex does not have"):
        JavaReplacement("${nope}", p)
    with pytest.raises(PatternError, match=r"group \$3, but the regex has 2"):
        JavaReplacement("$3", p)
    JavaReplacement("${nope}$3")  # syntax alone is fine without the pattern
