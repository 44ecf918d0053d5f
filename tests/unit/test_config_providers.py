"""connect.providers: reference grammar, built-in providers, plugin discovery, worker settings, masking."""

from __future__ import annotations

import importlib
import sys
import textwrap
from importlib import metadata

import pytest

from connect.builtin_providers import DirectoryConfigProvider, EnvVarConfigProvider, FileConfigProvider
from connect.config_provider import ConfigDataError, ConfigProvider
from connect.errors import ConfigError
from connect.properties import parse_properties
from connect.providers import (
    ENTRY_POINT_GROUP,
    ConfigProviders,
    UnresolvedReferences,
    discover_config_providers,
    load_provider_class,
    mask_config,
    parse_references,
    references,
)
from connect.secrets import MASK, Redactor
from worker.pipeline import resolve_env_references

PROPERTIES = (
    "# a comment\n"
    "! another comment\n"
    "\n"
    "   db.password = s3cr3t-Value   \n"
    "db.user: admin\n"
    "spaced   plain value\n"
    "long = first,\\\n"
    "       second,\\\n"
    "       third\n"
    "eq\\=key = a\\=b\\:c\n"
    "escaped.blank = x\\ \n"
    "tab = a\\tb\n"
    "unicode = caf\\u00e9\n"
    "backslash = C:\\\\dir\n"
    "empty =\n"
    "  # indented comment = not a key\n"
    "dup = old\n"
    "dup = new\n"
    "not.continued = ends in two \\\\\n"
    "next = line\n"
)


@pytest.fixture
def props(tmp_path):
    path = tmp_path / "secrets.properties"
    path.write_text(PROPERTIES, encoding="utf-8")
    return path


def _providers(**extra) -> ConfigProviders:
    return ConfigProviders({"env": EnvVarConfigProvider({"HOST": "db.local", "PORT": "5432", "PW": "env-pass-1"}),
                            "file": FileConfigProvider(), **extra})


class TestProperties:
    def test_syntax(self):
        entries = parse_properties(PROPERTIES)
        assert entries == {
            "db.password": "s3cr3t-Value",
            "db.user": "admin",
            "spaced": "plain value",
            "long": "first,second,third",
            "eq=key": "a=b:c",
            "escaped.blank": "x ",
            "tab": "a\tb",
            "unicode": "café",
            "backslash": "C:\\dir",
            "empty": "",
            "dup": "new",
            "not.continued": "ends in two \\",
            "next": "line",
        }

    def test_crlf_and_continuation_at_end_of_file(self):
        assert parse_properties("a=1\r\nb = 2\\\r\n  3\rc=4\\") == {"a": "1", "b": "23", "c": "4"}

    def test_continuation_line_starting_with_hash_is_not_a_comment(self):
        assert parse_properties("a = x\\\n  #y\n") == {"a": "x#y"}

    def test_malformed_unicode_escape(self):
        with pytest.raises(ValueError, match="malformed"):
            parse_properties("a = \\u12\n")


class TestFileProvider:
    def test_get(self, props):
        provider = FileConfigProvider()
        assert provider.get(str(props), {"db.password", "long"}) == {"db.password": "s3cr3t-Value",
                                                                     "long": "first,second,third"}

    def test_missing_keys_and_file(self, props, tmp_path):
        provider = FileConfigProvider()
        with pytest.raises(ConfigDataError) as exc_info:
            provider.get(str(props), {"db.password", "nope"})
        assert exc_info.value.missing == {"nope"} and "nope" in str(exc_info.value)
        with pytest.raises(ConfigDataError) as exc_info:
            provider.get(str(tmp_path / "absent.properties"), {"k"})
        assert exc_info.value.missing == frozenset() and "absent.properties" in str(exc_info.value)

    def test_resolve_reports_every_issue_by_key_and_never_a_value(self, props, tmp_path):
        config = {
            "sink.sasl.password": f"${{file:{props}:db.password}}",
            "sink.user": f"${{file:{props}:nope}}",
            "source.password": f"${{file:{tmp_path}/absent.properties:pw}}",
            "source.token": "${vault:secret/x:token}",
            "plain": "untouched",
        }
        with pytest.raises(ConfigError) as exc_info:
            _providers().resolve(config, source="c.json")
        err = exc_info.value
        assert isinstance(err, UnresolvedReferences)
        assert [i.key for i in err.issues] == ['$.config["sink.user"]', '$.config["source.password"]',
                                               '$.config["source.token"]']
        text = str(err)
        assert text.startswith("c.json: 3 configuration errors")
        assert f"${{file:{props}:nope}}" in text and f"{props} has no key 'nope'" in text
        assert "absent.properties" in text and "No such file" in text
        assert "unknown config provider 'vault' (enabled: env, file)" in text
        assert "s3cr3t-Value" not in text  # resolved fine, but never shown

    def test_path_with_colons_key_after_last(self, tmp_path):
        odd = tmp_path / "a:b"
        odd.mkdir()
        (odd / "c.properties").write_text("k = v-colon\n")
        resolved = _providers().resolve({"x": f"${{file:{odd}/c.properties:k}}"})
        assert resolved.config == {"x": "v-colon"}

    def test_allowed_paths_param(self, props, tmp_path):
        elsewhere = tmp_path / "other"
        elsewhere.mkdir()
        provider = FileConfigProvider()
        provider.configure({"allowed.paths": str(elsewhere)})
        with pytest.raises(ConfigDataError, match="outside allowed.paths"):
            provider.get(str(props), {"db.user"})
        provider.configure({"allowed.paths": f"{elsewhere}, {tmp_path}"})
        assert provider.get(str(props), {"db.user"}) == {"db.user": "admin"}


class TestEnvProvider:
    def test_plain_default_and_several_references_in_one_value(self):
        resolved = _providers().resolve({
            "url": "jdbc:pg://${env:HOST}:${env:PORT}/db",
            "fallback": "${env:UNSET_VAR:-127.0.0.1:9092}",
            "empty.default": "${env:UNSET_VAR:-}",
            "set.wins": "${env:HOST:-ignored}",
            "sasl.password": "${env:PW}",
            "count": 3,
        })
        assert resolved.config == {"url": "jdbc:pg://db.local:5432/db", "fallback": "127.0.0.1:9092",
                                   "empty.default": "", "set.wins": "db.local", "sasl.password": "env-pass-1",
                                   "count": 3}
        assert resolved.provided_keys == {"url", "set.wins", "sasl.password"}
        assert resolved.secret_values == {"db.local", "5432", "env-pass-1"}

    def test_os_environ_read_at_lookup(self, monkeypatch):
        providers = ConfigProviders({"env": EnvVarConfigProvider()})
        monkeypatch.setenv("CONNECT_PROVIDER_TEST", "from-os")
        assert providers.resolve({"a": "${env:CONNECT_PROVIDER_TEST}"}).config == {"a": "from-os"}

    def test_unset_each_reported(self):
        with pytest.raises(UnresolvedReferences) as exc_info:
            _providers().resolve({"a": "${env:NOPE_1}-${env:HOST}-${env:NOPE_2}"})
        assert [(f.key, f.reference, f.reason) for f in exc_info.value.failures] == [
            ("a", "${env:NOPE_1}", "environment variable NOPE_1 is not set"),
            ("a", "${env:NOPE_2}", "environment variable NOPE_2 is not set")]

    def test_allowlist_param(self):
        provider = EnvVarConfigProvider({"APP_X": "1", "HOME": "/root"})
        provider.configure({"allowlist.pattern": "APP_.*"})
        providers = ConfigProviders({"env": provider})
        assert providers.resolve({"a": "${env:APP_X}"}).config == {"a": "1"}
        with pytest.raises(ConfigError, match="HOME is not allowed by allowlist.pattern"):
            providers.resolve({"a": "${env:HOME}"})

    def test_unknown_param_refused(self):
        with pytest.raises(ConfigError, match="unknown parameter"):
            EnvVarConfigProvider().configure({"allowlist.patern": "x"})


class TestGrammar:
    def test_untouched_text(self):
        config = {"a": "no reference", "b": "$${env:HOST}", "c": "${topic}", "d": "$ {env:HOST}", "e": "${env:HOST"}
        assert _providers().resolve(config).config == config

    def test_parse(self):
        (ref,) = parse_references("x${file:/a:b/c.properties:key:-d:e}y")
        assert (ref.provider, ref.path, ref.key, ref.default) == ("file", "/a:b/c.properties", "key", "d:e")
        (ref,) = parse_references("${env:NAME}")
        assert (ref.provider, ref.path, ref.key, ref.default) == ("env", "", "NAME", None)

    def test_references(self):
        assert references({"a": "${env:A}/${file:/p:k}", "b": "plain", "c": "$${env:C}", "n": 1}) == {
            "a": ["${env:A}", "${file:/p:k}"]}

    def test_missing_key_is_an_issue(self):
        with pytest.raises(UnresolvedReferences, match="names no key"):
            _providers().resolve({"a": "${env:}"})

    def test_default_covers_missing_file(self, tmp_path):
        assert _providers().resolve({"a": f"${{file:{tmp_path}/none:k:-dflt}}"}).config == {"a": "dflt"}


class TestDirectoryProvider:
    def test_reads_file_content(self, tmp_path):
        (tmp_path / "db-password").write_text("dir-secret-1\n")
        provider = DirectoryConfigProvider()
        providers = ConfigProviders({"directory": provider})
        assert providers.resolve({"p": f"${{directory:{tmp_path}:db-password}}"}).config == {"p": "dir-secret-1\n"}
        provider.configure({"trim": "true"})
        assert providers.resolve({"p": f"${{directory:{tmp_path}:db-password}}"}).config == {"p": "dir-secret-1"}

    def test_missing_and_escaping_names(self, tmp_path):
        (tmp_path / "sub").mkdir()
        providers = ConfigProviders({"directory": DirectoryConfigProvider()})
        with pytest.raises(UnresolvedReferences) as exc_info:
            providers.resolve({"a": f"${{directory:{tmp_path}:nope}}", "b": f"${{directory:{tmp_path}:..}}",
                               "c": f"${{directory:{tmp_path}/sub:../x}}"})
        reasons = {f.key: f.reason for f in exc_info.value.failures}
        assert reasons["a"] == f"{tmp_path} has no file 'nope'"
        assert "not a plain file name" in reasons["b"] and "not a plain file name" in reasons["c"]


class TestWorkerConfig:
    def test_default_enables_env_and_file(self):
        providers = ConfigProviders.from_worker_config({})
        assert providers.names == ["env", "file"]
        assert isinstance(providers["file"], FileConfigProvider)

    def test_params_reach_configure(self, props, tmp_path):
        (tmp_path / "tok").write_text("  tok-value-1 \n")
        providers = ConfigProviders.from_worker_config({
            "config.providers": "file, directory",
            "config.providers.file.param.allowed.paths": str(tmp_path / "nowhere"),
            "config.providers.directory.class": "connect.providers:DirectoryConfigProvider",
            "config.providers.directory.param.trim": "true",
        })
        assert providers.names == ["file", "directory"]
        assert providers["file"].params == {"allowed.paths": str(tmp_path / "nowhere")}
        assert providers.resolve({"t": f"${{directory:{tmp_path}:tok}}"}).config == {"t": "tok-value-1"}
        with pytest.raises(UnresolvedReferences, match="outside allowed.paths"):
            providers.resolve({"p": f"${{file:{props}:db.user}}"})
        with pytest.raises(UnresolvedReferences, match="unknown config provider 'env'"):
            providers.resolve({"p": "${env:HOME}"})

    def test_every_problem_in_one_error(self):
        with pytest.raises(ConfigError) as exc_info:
            ConfigProviders.from_worker_config({
                "config.providers": "env,vault,bad name,thing",
                "config.providers.env.param.nope": "1",
                "config.providers.thing.class": "os.path:join",
                "config.providers.env.params.x": "typo",
            })
        text = str(exc_info.value)
        keys = {i.key for i in exc_info.value.issues}
        assert {"config.providers", "config.providers.env.param.nope", "config.providers.vault.class",
                "config.providers.thing.class", "config.providers.env.params.x"} <= keys, text
        assert "config provider 'vault' has no class" in text
        assert "is not a ConfigProvider subclass" in text

    def test_configure_failure_hides_secret_params(self):
        with pytest.raises(ConfigError) as exc_info:
            ConfigProviders.from_worker_config({
                "config.providers": "boom",
                "config.providers.boom.class": f"{__name__}:ExplodingProvider",
                "config.providers.boom.param.token": "tok-secret-77",
            })
        text = str(exc_info.value)
        assert "configure() failed: RuntimeError" in text and "tok-secret-77" not in text and MASK in text


class ExplodingProvider(ConfigProvider):
    def configure(self, params):
        raise RuntimeError(f"bad token {params['token']}")


class TestMasking:
    def test_rule(self):
        config = {
            "sasl.password": "${file:/s.properties:pw}",
            "sasl.jaas.config": "user=${env:U} password=${env:P:-fallback-pw}",
            "auth": "literal-secret",
            "bootstrap": "${env:B:-127.0.0.1:9092}",
            "topic": "orders",
            "token": None,
        }
        assert mask_config(config, {"auth"}) == {
            "sasl.password": "${file:/s.properties:pw}",
            "sasl.jaas.config": f"{MASK}${{env:U}}{MASK}${{env:P:-{MASK}}}",
            "auth": MASK,
            "bootstrap": "${env:B:-127.0.0.1:9092}",
            "topic": "orders",
            "token": None,
        }

    def test_resolved_values_masked_by_provided_keys(self):
        resolved = _providers().resolve({"url": "pg://${env:HOST}", "topic": "orders"})
        shown = mask_config(resolved.config, provided_keys=resolved.provided_keys)
        assert shown == {"url": MASK, "topic": "orders"}
        assert Redactor(resolved.secret_values).redact("connecting to db.local") == f"connecting to {MASK}"


# ------------------------------------------------------------------------- third-party plugin


@pytest.fixture
def vault_plugin(tmp_path, monkeypatch):
    """A real installed-looking distribution declaring a ``vault`` provider entry point."""
    (tmp_path / "fake_vault_provider.py").write_text(textwrap.dedent("""
        from connect.providers import ConfigDataError, ConfigProvider

        STORE = {"secret/db": {"password": "vault-pass-42", "user": "svc"}}

        class VaultProvider(ConfigProvider):
            def configure(self, params):
                super().configure(params)
                if params.get("token") != "root-token-9":
                    raise ValueError("login refused for token " + str(params.get("token")))
                self.namespace = params["namespace"]

            def get(self, path, keys):
                data = STORE.get(f"{self.namespace}/{path}")
                if data is None:
                    raise ConfigDataError(f"no secret at {path}")
                missing = {k for k in keys if k not in data}
                if missing:
                    raise ConfigDataError(f"no key {sorted(missing)} at {path}", missing=missing)
                return {k: data[k] for k in keys}
    """))
    dist_info = tmp_path / "fake_vault_provider-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-vault-provider\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nvault = fake_vault_provider:VaultProvider\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fake_vault_provider", raising=False)
    importlib.invalidate_caches()
    yield tmp_path
    sys.modules.pop("fake_vault_provider", None)
    importlib.invalidate_caches()


VAULT_SETTINGS = {
    "config.providers": "env,vault",
    "config.providers.vault.param.token": "root-token-9",
    "config.providers.vault.param.namespace": "secret",
}


def test_plugin_is_discovered_through_its_entry_point(vault_plugin):
    assert {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)} >= {"vault", "env", "file", "directory"}
    info = discover_config_providers()["vault"]
    assert (info.target, info.origin) == ("fake_vault_provider:VaultProvider", "fake-vault-provider")
    assert load_provider_class("vault").__module__ == "fake_vault_provider"


def test_plugin_resolves_with_configured_params(vault_plugin):
    providers = ConfigProviders.from_worker_config(VAULT_SETTINGS)
    assert providers.names == ["env", "vault"]
    assert providers["vault"].params == {"token": "root-token-9", "namespace": "secret"}
    resolved = providers.resolve({"sink.sasl.password": "${vault:db:password}", "sink.user": "${vault:db:user}"})
    assert resolved.config == {"sink.sasl.password": "vault-pass-42", "sink.user": "svc"}
    assert resolved.provided_keys == {"sink.sasl.password", "sink.user"}
    with pytest.raises(UnresolvedReferences) as exc_info:
        providers.resolve({"a": "${vault:db:password}", "b": "${vault:db:nope}", "c": "${vault:gone:x}"})
    assert [(f.key, f.reason) for f in exc_info.value.failures] == [
        ("b", "no key ['nope'] at db"), ("c", "no secret at gone")]
    assert "vault-pass-42" not in str(exc_info.value)


def test_plugin_configure_failure_is_reported_without_the_token(vault_plugin):
    with pytest.raises(ConfigError) as exc_info:
        ConfigProviders.from_worker_config({**VAULT_SETTINGS, "config.providers.vault.param.token": "wrong-token-1"})
    text = str(exc_info.value)
    assert "config.providers.vault.class" in text and "login refused" in text and "wrong-token-1" not in text


def test_plugin_gone_without_fixture():
    with pytest.raises(ConfigError, match="config provider 'vault' has no class"):
        ConfigProviders.from_worker_config({"config.providers": "vault"})


# ------------------------------------------------------------------------- secrets never leak


class LeakyProvider(ConfigProvider):
    """Returns a secret, then fails mentioning it: the failure text must come out masked."""

    def get(self, path, keys):
        if "bad" in keys:
            raise RuntimeError("upstream said: leaky-secret-123 expired")
        return {k: "leaky-secret-123" for k in keys}


def test_resolved_secret_never_in_error_text(props):
    providers = _providers(leaky=LeakyProvider())
    with pytest.raises(ConfigError) as exc_info:
        providers.resolve({
            "good.password": f"${{file:{props}:db.password}}",
            "sasl.password": "${leaky:p:ok}",
            "x": "${leaky:q:bad}",
            "y": "${env:UNSET_PW}",
        })
    text = str(exc_info.value) + repr(exc_info.value.issues)
    for secret in ("s3cr3t-Value", "leaky-secret-123", "env-pass-1"):
        assert secret not in text
    assert "RuntimeError: upstream said: ******** expired" in text


# ------------------------------------------------------------------------- backward compatibility


def test_resolve_env_references_delegates_and_keeps_its_messages(monkeypatch):
    monkeypatch.setenv("CONNECT_PT_HOST", "h1")
    monkeypatch.delenv("CONNECT_PT_UNSET", raising=False)
    document = {"name": "n", "config": {"a": "${env:CONNECT_PT_HOST}:${env:CONNECT_PT_UNSET:-9092}",
                                        "f": "${file:/x.properties:k}", "n": 5}}
    assert resolve_env_references(document) == {"name": "n", "config": {
        "a": "h1:9092", "f": "${file:/x.properties:k}", "n": 5}}
    assert resolve_env_references(document, {"CONNECT_PT_HOST": "h2"})["config"]["a"] == "h2:9092"
    with pytest.raises(ConfigError) as exc_info:
        resolve_env_references({"config": {"k": "${env:CONNECT_PT_UNSET}", "j": "${env:CONNECT_PT_UNSET}x"}}, {})
    assert [str(i) for i in exc_info.value.issues] == [
        '$.config["k"]: environment variable CONNECT_PT_UNSET is not set',
        '$.config["j"]: environment variable CONNECT_PT_UNSET is not set']
    assert resolve_env_references(["not", "a", "document"]) == ["not", "a", "document"]


def test_builtins_registered_as_entry_points():
    eps = {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert eps["env"] == "connect.providers:EnvVarConfigProvider"
    assert eps["file"] == "connect.providers:FileConfigProvider"
    assert eps["directory"] == "connect.providers:DirectoryConfigProvider"


def test_provider_name_must_be_valid():
    with pytest.raises(ValueError):
        ConfigProviders({"a.b": FileConfigProvider()})


def test_an_address_from_the_environment_is_shown_other_provider_values_stay_secret(tmp_path):
    from connect.providers import secret_provider_values

    secrets = tmp_path / "s.properties"
    secrets.write_text("pw=hunter2-pw\nhost=file-host:9092\n")
    env = {"SOURCE_BOOTSTRAP": "kafka-a:9092", "SOURCE_PW": "env-pw-1234", "SHARED": "shared-value"}
    providers = ConfigProviders({"env": EnvVarConfigProvider(env), "file": FileConfigProvider()})
    config = {"source.bootstrap.servers": "${env:SOURCE_BOOTSTRAP}",  # shown: an address from env
              "sink.bootstrap.servers": f"${{file:{secrets}:host}}",  # masked: from a file
              "source.service.url": "pulsar://${env:SHARED}",  # masked: not wholly one reference
              "sink.producer.override.sasl.password": "${env:SOURCE_PW}",
              "dlq.bootstrap.servers": "${env:SHARED}", "source.client.id": "${env:SHARED}"}  # also a client id
    resolved = providers.resolve(config)
    assert secret_provider_values(config, resolved) == {"file-host:9092", "env-pw-1234", "shared-value"}
    # the key name is the REST caller's: a credential variable in an address key stays masked
    sneaky = {"source.bootstrap.servers": "${env:SOURCE_PW}"}
    assert secret_provider_values(sneaky, providers.resolve(sneaky)) == {"env-pw-1234"}
