"""connect.config: typed conversion, defaults, validators, all-issues-at-once reporting, secrets."""

from __future__ import annotations

import pytest

from connect.config import (
    NO_DEFAULT,
    ConfigDef,
    ConfigKey,
    Importance,
    Type,
    at_least,
    in_range,
    mask_secrets,
    non_empty,
    one_of,
    valid_regex,
)
from connect.errors import ConfigError, ConfigIssue, ConnectError
from connect.sink.routing import ROUTING_CONFIG, TopicRouter, check_template, render_template

MASK = "********"


def one(kind: Type, raw, **kw):
    """Parse a single key 'k' of ``kind`` from ``raw``."""
    return ConfigDef().define("k", kind, **kw).parse({"k": raw})["k"]


def issues_of(kind: Type, raw, **kw) -> list[ConfigIssue]:
    return ConfigDef().define("k", kind, doc="the k", **kw).validate({"k": raw})


# -- Type conversions -------------------------------------------------------------------------


class TestStringAndPassword:
    @pytest.mark.parametrize("kind", [Type.STRING, Type.PASSWORD])
    def test_string_kept_verbatim(self, kind):
        assert one(kind, "  a b  ") == "  a b  "
        assert one(kind, "") == ""

    @pytest.mark.parametrize("kind", [Type.STRING, Type.PASSWORD])
    @pytest.mark.parametrize("raw", [5, 1.5, True, ["a"]])
    def test_non_string_rejected(self, kind, raw):
        [issue] = issues_of(kind, raw)
        assert issue.key == "k"
        assert "must be a string" in issue.message


class TestInt:
    @pytest.mark.parametrize("raw, expected", [("42", 42), (" -7 ", -7), (0, 0), (12, 12), ("0", 0)])
    def test_valid(self, raw, expected):
        value = one(Type.INT, raw)
        assert value == expected
        assert type(value) is int

    @pytest.mark.parametrize("raw", ["4.5", "abc", "", "1e3", True, False, 3.5])
    def test_invalid(self, raw):
        [issue] = issues_of(Type.INT, raw)
        assert issue.key == "k"
        assert issue.value == raw
        assert "must be an integer" in issue.message
        assert "the k" in issue.message  # the doc says what the key is for


class TestDouble:
    @pytest.mark.parametrize("raw, expected", [("1.5", 1.5), (" 2 ", 2.0), (3, 3.0), ("-0.25", -0.25), ("1e3", 1000.0)])
    def test_valid(self, raw, expected):
        value = one(Type.DOUBLE, raw)
        assert value == expected
        assert type(value) is float

    @pytest.mark.parametrize("raw", ["abc", "", "1,5"])
    def test_invalid(self, raw):
        [issue] = issues_of(Type.DOUBLE, raw)
        assert issue.value == raw
        assert "must be a number" in issue.message


class TestBoolean:
    @pytest.mark.parametrize("raw", ["true", "TRUE", " True ", "yes", "YES", "1", "on", 1, True])
    def test_true(self, raw):
        assert one(Type.BOOLEAN, raw) is True

    @pytest.mark.parametrize("raw", ["false", "False", "no", "NO", "0", "off", 0, False])
    def test_false(self, raw):
        assert one(Type.BOOLEAN, raw) is False

    @pytest.mark.parametrize("raw", ["maybe", "", "2", "y", "t", 2])
    def test_invalid(self, raw):
        [issue] = issues_of(Type.BOOLEAN, raw)
        assert issue.value == raw
        assert "must be true or false" in issue.message


class TestList:
    def test_comma_separated_trimmed_and_empties_dropped(self):
        assert one(Type.LIST, " a, b ,,c , ,") == ["a", "b", "c"]

    def test_single_and_empty(self):
        assert one(Type.LIST, "solo") == ["solo"]
        assert one(Type.LIST, "") == []
        assert one(Type.LIST, " , ,") == []

    def test_python_list_and_tuple_accepted(self):
        assert one(Type.LIST, [" x ", "", "y", 3]) == ["x", "y", "3"]
        assert one(Type.LIST, ("p", " ")) == ["p"]

    @pytest.mark.parametrize("raw", [5, {"a": 1}])
    def test_invalid(self, raw):
        [issue] = issues_of(Type.LIST, raw)
        assert "must be a comma-separated list" in issue.message


# -- defaults and required keys ---------------------------------------------------------------


def _def() -> ConfigDef:
    return (
        ConfigDef()
        .define("host", Type.STRING, doc="Host to connect to.", importance=Importance.HIGH)
        .define("port", Type.INT, 9092, "Port.")
        .define("ratio", Type.DOUBLE, 0.5, "Ratio.")
        .define("enabled", Type.BOOLEAN, False, "Switch.")
        .define("topics", Type.LIST, [], "Topics.")
    )


def test_defaults_filled_for_every_missing_optional_key():
    assert _def().parse({"host": "h"}) == {"host": "h", "port": 9092, "ratio": 0.5, "enabled": False, "topics": []}


def test_none_value_counts_as_missing():
    assert _def().parse({"host": "h", "port": None})["port"] == 9092
    [issue] = _def().validate({"host": None})
    assert issue.key == "host"


def test_undeclared_keys_are_ignored_by_parse():
    assert "other" not in _def().parse({"host": "h", "other": "x"})


def test_given_values_override_defaults_and_are_typed():
    out = _def().parse({"host": "h", "port": "1", "ratio": "2", "enabled": "yes", "topics": "a,b"})
    assert out == {"host": "h", "port": 1, "ratio": 2.0, "enabled": True, "topics": ["a", "b"]}


def test_required_key_missing():
    issues = _def().validate({})
    assert [i.key for i in issues] == ["host"]
    issue = issues[0]
    assert issue.value is None
    assert "missing required value" in issue.message
    assert "Host to connect to." in issue.message
    assert str(issue) == f"host: {issue.message}"  # no "invalid value" part for a missing key
    with pytest.raises(ConfigError) as exc_info:
        _def().parse({})
    assert exc_info.value.issues == issues


def test_config_key_properties():
    required = ConfigKey("a", Type.STRING)
    assert required.required and required.default is NO_DEFAULT
    assert not ConfigKey("a", Type.STRING, "x").required
    assert ConfigKey("a", Type.PASSWORD, "").is_secret
    assert ConfigKey("a", Type.STRING, "", secret=True).is_secret
    assert not ConfigKey("a", Type.STRING, "").is_secret


def test_validate_returns_empty_list_when_valid():
    assert _def().validate({"host": "h", "port": "10"}) == []


# -- validators -------------------------------------------------------------------------------


class TestValidators:
    def test_one_of_case_insensitive_by_default(self):
        check = one_of("none", "all")
        assert check("none") is None
        assert check("ALL") is None
        assert check("some") == "must be one of none, all"

    def test_one_of_case_sensitive(self):
        check = one_of("none", "all", case_sensitive=True)
        assert check("all") is None
        assert check("ALL") == "must be one of none, all"

    def test_at_least(self):
        check = at_least(1)
        assert check(1) is None
        assert check(100) is None
        assert check(0) == "must be at least 1"
        assert at_least(0.5)(0.4) == "must be at least 0.5"

    def test_in_range_inclusive(self):
        check = in_range(1, 10)
        assert check(1) is None
        assert check(10) is None
        assert check(5) is None
        assert check(0) == "must be between 1 and 10"
        assert check(11) == "must be between 1 and 10"

    def test_non_empty(self):
        assert non_empty("x") is None
        assert non_empty(["x"]) is None
        assert non_empty("") == "must not be empty"
        assert non_empty([]) == "must not be empty"

    def test_valid_regex(self):
        assert valid_regex("^a+b$") is None
        assert valid_regex("") is None
        message = valid_regex("a(b")
        assert message is not None
        assert message.startswith("is not a valid regular expression")

    def test_validator_runs_on_the_typed_value_through_configdef(self):
        d = (
            ConfigDef()
            .define("n", Type.INT, 5, validator=at_least(1))
            .define("mode", Type.STRING, "a", validator=one_of("a", "b"))
            .define("r", Type.DOUBLE, 0.5, validator=in_range(0, 1))
            .define("name", Type.STRING, "x", validator=non_empty)
            .define("re", Type.STRING, "", validator=valid_regex)
            .define("l", Type.LIST, "x", validator=non_empty)
        )
        assert d.parse({"n": "3", "mode": "B", "r": "1", "re": "a.*", "l": "a"})["n"] == 3
        issues = {i.key: i for i in d.validate({"n": "0", "mode": "c", "r": "1.5", "name": "", "re": "(", "l": " , "})}
        assert set(issues) == {"n", "mode", "r", "name", "re", "l"}
        assert issues["n"] == ConfigIssue("n", "0", "must be at least 1")
        assert issues["mode"] == ConfigIssue("mode", "c", "must be one of a, b")
        assert issues["r"] == ConfigIssue("r", "1.5", "must be between 0 and 1")
        assert issues["name"] == ConfigIssue("name", "", "must not be empty")
        assert issues["re"].value == "("
        assert "regular expression" in issues["re"].message
        assert issues["l"].message == "must not be empty"

    def test_validator_not_run_when_conversion_fails(self):
        calls = []

        def spy(value):
            calls.append(value)
            return None

        [issue] = ConfigDef().define("n", Type.INT, 1, validator=spy).validate({"n": "x"})
        assert calls == []
        assert "must be an integer" in issue.message


# -- every problem reported at once -----------------------------------------------------------


def test_validate_and_parse_report_every_bad_key_at_once():
    d = (
        ConfigDef()
        .define("host", Type.STRING, doc="Host.")
        .define("port", Type.INT, 1, "Port.", validator=in_range(1, 65535))
        .define("mode", Type.STRING, "a", "Mode.", validator=one_of("a", "b"))
        .define("tls", Type.BOOLEAN, False, "TLS.")
        .define("ok", Type.INT, 1, "Fine.")
    )
    bad = {"port": "70000", "mode": "z", "tls": "perhaps", "ok": "2"}
    issues = d.validate(bad)
    assert [i.key for i in issues] == ["host", "port", "mode", "tls"]  # declaration order
    by_key = {i.key: i for i in issues}
    assert by_key["port"].value == "70000" and "between 1 and 65535" in by_key["port"].message
    assert by_key["mode"].value == "z" and "one of a, b" in by_key["mode"].message
    assert by_key["tls"].value == "perhaps" and "true or false" in by_key["tls"].message
    assert by_key["host"].value is None and "missing required value" in by_key["host"].message

    with pytest.raises(ConfigError) as exc_info:
        d.parse(bad, source="my.json")
    err = exc_info.value
    assert isinstance(err, ConnectError)
    assert err.issues == issues
    assert err.source == "my.json"
    text = str(err)
    assert text.startswith("my.json: 4 configuration errors:")
    for fragment in ("port: invalid value '70000'", "mode: invalid value 'z'", "tls: invalid value 'perhaps'",
                     "host: missing required value"):
        assert fragment in text


def test_config_error_singular_and_from_string():
    err = ConfigError([ConfigIssue("a", "1", "bad")])
    assert str(err) == "1 configuration error:\n  - a: invalid value '1': bad"
    err = ConfigError("whole thing is broken")
    assert err.issues == [ConfigIssue("<config>", None, "whole thing is broken")]
    assert "<config>: whole thing is broken" in str(err)


# -- secrets ----------------------------------------------------------------------------------


class TestSecrets:
    def _d(self):
        return (
            ConfigDef()
            .define("password", Type.PASSWORD, "", "The password.", validator=non_empty)
            .define("token", Type.INT, 0, "A secret int.", secret=True, validator=at_least(10))
            .define("jaas", Type.STRING, "", "Secret string.", secret=True, validator=one_of("x"))
            .define("plain", Type.INT, 0, "Not secret.")
        )

    def test_secrets_masked_in_issues(self):
        issues = self._d().validate({"token": "hunter2", "jaas": "s3cr3t", "plain": "oops"})
        by_key = {i.key: i for i in issues}
        assert by_key["token"].value == MASK  # conversion failure
        assert by_key["jaas"].value == MASK  # validator failure
        assert by_key["plain"].value == "oops"

    def test_password_masked_on_validator_failure_and_never_in_error_text(self):
        d = ConfigDef().define("pw", Type.PASSWORD, "", validator=one_of("other"))
        with pytest.raises(ConfigError) as exc_info:
            d.parse({"pw": "topsecret"})
        assert exc_info.value.issues[0].value == MASK
        assert "topsecret" not in str(exc_info.value)
        assert MASK in str(exc_info.value)

    def test_secret_values_returned_unmasked_by_parse(self):
        assert self._d().parse({"password": "pw", "token": "12"}) == {
            "password": "pw", "token": 12, "jaas": "", "plain": 0}

    def test_secret_names(self):
        assert self._d().secret_names() == {"password", "token", "jaas"}

    def test_mask_secrets(self):
        config = {
            "sasl.password": "p", "api.token": "t", "client.secret": "s", "sasl.jaas.config": "j",
            "credentials": "c", "credential": "c1", "declared": "d", "bootstrap.servers": "a:1",
            "ssl.key.password": "", "MY_PASSWORD": "up",
        }
        masked = mask_secrets(config, ["declared"])
        assert masked == {
            "sasl.password": MASK, "api.token": MASK, "client.secret": MASK, "sasl.jaas.config": MASK,
            "credentials": MASK, "credential": MASK, "declared": MASK, "bootstrap.servers": "a:1",
            "ssl.key.password": "",  # empty values stay empty: nothing to hide
            "MY_PASSWORD": MASK,
        }
        assert config["sasl.password"] == "p"  # a copy, the original is untouched


# -- declaring keys ---------------------------------------------------------------------------


def test_duplicate_key_declaration_rejected():
    d = ConfigDef().define("a", Type.STRING, "")
    with pytest.raises(ValueError, match="'a' declared twice"):
        d.define("a", Type.INT, 1)
    with pytest.raises(ValueError, match="declared twice"):
        ConfigDef([ConfigKey("b", Type.STRING), ConfigKey("b", Type.INT)])


def test_merge():
    a = ConfigDef().define("x", Type.INT, 1).define("y", Type.STRING, "y")
    b = ConfigDef().define("z", Type.BOOLEAN, True)
    merged = a.merge(b)
    assert [k.name for k in merged.keys()] == ["x", "y", "z"]
    assert merged.parse({"x": "5"}) == {"x": 5, "y": "y", "z": True}
    # inputs untouched
    assert [k.name for k in a.keys()] == ["x", "y"]
    assert [k.name for k in b.keys()] == ["z"]
    assert "z" in merged and "z" not in a
    assert merged["z"].type is Type.BOOLEAN
    with pytest.raises(ValueError, match="declared twice"):
        a.merge(ConfigDef().define("y", Type.INT, 0))


def test_define_is_chainable_and_keeps_metadata():
    d = ConfigDef()
    assert d.define("k", Type.INT, 3, "Doc.", importance=Importance.LOW, secret=True) is d
    key = d["k"]
    assert (key.name, key.type, key.default, key.doc, key.importance, key.secret) == (
        "k", Type.INT, 3, "Doc.", Importance.LOW, True)


# -- integer ranges ---------------------------------------------------------------------------


INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


class TestIntegerRanges:
    @pytest.mark.parametrize("raw", [str(INT32[0]), str(INT32[1]), INT32[1], 0])
    def test_int_accepts_the_signed_32_bit_range(self, raw):
        assert one(Type.INT, raw) == int(raw)

    @pytest.mark.parametrize("raw", [str(INT32[1] + 1), str(INT32[0] - 1), "99999999999999999999", 2**40])
    def test_int_rejects_beyond_32_bits(self, raw):
        [issue] = issues_of(Type.INT, raw)
        assert issue.value == raw
        assert "must be an integer between -2147483648 and 2147483647 (signed 32-bit)" in issue.message

    def test_range_checked_before_the_validator(self):
        [issue] = ConfigDef().define("n", Type.INT, 1, validator=at_least(1)).validate({"n": "99999999999999999999"})
        assert "signed 32-bit" in issue.message

    @pytest.mark.parametrize("raw", ["1700000000000", str(INT64[0]), str(INT64[1]), 2**40, " -5 "])
    def test_long_accepts_the_signed_64_bit_range(self, raw):
        value = one(Type.LONG, raw)
        assert value == int(raw) and type(value) is int

    @pytest.mark.parametrize("raw", [str(INT64[1] + 1), str(INT64[0] - 1), "1" * 40])
    def test_long_rejects_beyond_64_bits(self, raw):
        [issue] = issues_of(Type.LONG, raw)
        assert "must be an integer between -9223372036854775808 and 9223372036854775807 (signed 64-bit)" in issue.message

    @pytest.mark.parametrize("raw", ["1.5", "x", "", True])
    def test_long_rejects_non_integers(self, raw):
        [issue] = issues_of(Type.LONG, raw)
        assert "must be an integer" in issue.message

    @pytest.mark.parametrize("raw", ["nan", "inf", "-Infinity", "1e999"])
    def test_double_must_be_finite(self, raw):
        [issue] = issues_of(Type.DOUBLE, raw)
        assert "must be a finite number" in issue.message


# -- pass-through prefixes and unknown keys ---------------------------------------------------


def _declared() -> ConfigDef:
    return (ConfigDef()
            .define("start.position", Type.STRING, "earliest", "Where to start.")
            .define("poll.timeout.ms", Type.INT, 100, "Poll timeout.")
            .define_prefix("producer.override.", "Producer settings.")
            .define_prefix("client.override.", "Client settings."))


class TestUnknownKeys:
    def test_the_one_line_format(self):
        [issue] = _declared().unknown_keys({"start.postion": "latest"}, prefix="source.")
        assert str(issue) == "source.start.postion: unknown key; did you mean source.start.position?"
        assert issue.value is None

    def test_declared_and_pass_through_keys_are_known(self):
        config = {"start.position": "x", "poll.timeout.ms": "1", "producer.override.linger.ms": "5",
                  "client.override.sasl.password": "p"}
        assert _declared().unknown_keys(config) == []

    def test_also_known_keys_are_accepted_and_suggested(self):
        d = _declared()
        assert d.unknown_keys({"value.converter": "json"}, also_known=["value.converter"]) == []
        [issue] = d.unknown_keys({"value.convertr": "json"}, prefix="sink.", also_known=["value.converter"])
        assert issue.message == "unknown key; did you mean sink.value.converter?"

    def test_without_close_match_the_message_says_what_is_accepted(self):
        [issue] = _declared().unknown_keys({"zzz": "1"}, prefix="s.")
        assert issue.message == ("unknown key; the keys declared are s.start.position, s.poll.timeout.ms; "
                                 "keys under s.producer.override., s.client.override. are passed through")
        [issue] = ConfigDef().unknown_keys({"zzz": "1"})
        assert issue.message == "unknown key; no keys are declared"

    def test_misspelt_prefix_is_suggested_with_the_rest_of_the_key(self):
        [issue] = _declared().unknown_keys({"producer.overide.linger.ms": "5"})
        assert issue.message == "unknown key; did you mean producer.override.linger.ms?"

    def test_every_unknown_key_reported_in_order(self):
        found = _declared().unknown_keys({"a": "1", "start.position": "x", "b": "2"})
        assert [i.key for i in found] == ["a", "b"]

    def test_secret_values_of_unknown_keys_never_shown(self):
        [issue] = _declared().unknown_keys({"sasl.passwrd": "hunter2-secret"})
        assert issue.value is None
        assert "hunter2-secret" not in str(issue)

    def test_empty_prefix_passes_every_key_through(self):
        assert ConfigDef().define_prefix("").unknown_keys({"anything": "1", "x.y": "2"}) == []

    def test_parse_still_ignores_undeclared_keys(self):
        assert _declared().parse({"producer.override.acks": "all", "junk": "1"}) == {
            "start.position": "earliest", "poll.timeout.ms": 100}


class TestPrefixes:
    def test_define_prefix_is_chainable_and_listed_in_order(self):
        d = ConfigDef()
        assert d.define_prefix("b.", "B") is d
        d.define_prefix("a.")
        assert d.prefixes() == {"b.": "B", "a.": ""}
        assert d.passes_through("a.x") and not d.passes_through("ax")

    def test_duplicate_prefix_rejected(self):
        with pytest.raises(ValueError, match="prefix 'a.' declared twice"):
            ConfigDef().define_prefix("a.").define_prefix("a.")

    def test_merge_keeps_the_prefixes_of_both(self):
        a = ConfigDef().define("x", Type.INT, 1).define_prefix("client.override.")
        b = ConfigDef().define("y", Type.INT, 1).define_prefix("producer.override.", "P")
        merged = a.merge(b)
        assert merged.prefixes() == {"client.override.": "", "producer.override.": "P"}
        assert merged.unknown_keys({"client.override.a": "1", "producer.override.b": "2", "x": "1", "y": "1"}) == []
        assert a.prefixes() == {"client.override.": ""}  # inputs untouched
        with pytest.raises(ValueError, match="declared twice"):
            a.merge(ConfigDef().define_prefix("client.override."))


class TestSecretByName:
    @pytest.mark.parametrize("name", ["producer.override.sasl.password", "client.override.ssl.key.password",
                                      "ssl.keystore.password", "sasl.oauthbearer.client.secret", "ssl.key.pem",
                                      "sasl.jaas.config", "sasl.oauthbearer.config", "api.key", "aws.access.key.id"])
    def test_keys_named_like_credentials_are_secret(self, name):
        assert ConfigKey(name, Type.STRING, "").is_secret
        assert ConfigDef().is_secret(name)

    def test_declared_secret_and_plain_keys(self):
        d = ConfigDef().define("auth", Type.STRING, "", secret=True).define("host", Type.STRING, "")
        assert d.is_secret("auth") and not d.is_secret("host")
        assert d.secret_names() == {"auth"}

    def test_value_of_a_key_secret_by_name_is_masked(self):
        d = ConfigDef().define("ssl.key.password", Type.INT, 0, "Not really an int.")
        [issue] = d.validate({"ssl.key.password": "s3cr3t-value"})
        assert issue.value == MASK
        assert "s3cr3t-value" not in str(ConfigError([issue]))


# -- topic templates --------------------------------------------------------------------------


class TestTopicTemplate:
    @pytest.mark.parametrize("template", ["{topic}", "dc1.{topic}", "{topic}.{topic}", "fixed", "", "a-{topic}_b"])
    def test_valid(self, template):
        assert check_template(template) is None

    @pytest.mark.parametrize("template, shown", [
        ("{topic.__class__}", "'{topic.__class__}'"), ("{topic[0]}", "'{topic[0]}'"), ("{0}", "'{0}'"),
        ("{}", "'{}'"), ("{name}", "'{name}'"), ("{topic!r}", "'{topic!r}'"), ("{topic:>9}", "'{topic:>9}'"),
        ("{ topic }", "'{ topic }'"),
    ])
    def test_other_fields_rejected_naming_the_allowed_placeholder(self, template, shown):
        assert check_template(template) == f"may only use the placeholder {{topic}} ({shown} is not allowed)"

    @pytest.mark.parametrize("template", ["{topic", "topic}", "a{b", "{{topic}}", "}{topic}{"])
    def test_stray_braces_rejected(self, template):
        assert check_template(template) == "may only use the placeholder {topic} (an unpaired brace is not allowed)"

    def test_routing_config_rejects_at_validation(self):
        [issue] = ROUTING_CONFIG.validate({"topic.template": "{topic.__class__.__name__}"})
        assert issue.key == "topic.template"
        assert "{topic}" in issue.message

    def test_render_substitutes_only_topic(self):
        assert render_template("dc1.{topic}.{topic}", "orders") == "dc1.orders.orders"
        assert render_template("{other}", "orders") == "{other}"
        assert render_template("{topic}", "{topic.__class__}") == "{topic.__class__}"  # values are not re-expanded

    def test_router_uses_the_substitution(self):
        route = TopicRouter({"topic.template": "backup.{topic}"})
        assert route("orders") == "backup.orders"
        assert TopicRouter({})("orders") == "orders"
        assert TopicRouter({"topic": "fixed", "topic.template": "x.{topic}"})("orders") == "fixed"

    @pytest.mark.parametrize("template", ["{topic.__class__}", "{0}", "x{"])
    def test_router_refuses_an_unchecked_template(self, template):
        with pytest.raises(ConfigError) as exc_info:
            TopicRouter({"topic.template": template})
        assert exc_info.value.issues[0].key == "topic.template"
