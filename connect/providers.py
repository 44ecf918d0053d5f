"""Config providers: config values that name where a secret lives instead of holding it.

This is Kafka Connect's ``ConfigProvider`` idea. A connector config value may contain
*references*; :meth:`ConfigProviders.resolve` replaces each with what the named provider returns,
so that files, stores and REST answers keep only the reference text, never the secret.

Reference grammar (exact)::

    reference := "${" provider ":" body "}"
    provider  := [A-Za-z_][A-Za-z0-9_-]*
    body      := [ path ":" ] key [ ":-" default ]      (no "}" anywhere in the body)

- ``default`` is the text after the FIRST ``:-`` of the body (it may contain ``:``, e.g.
  ``${env:BOOTSTRAP:-127.0.0.1:9092}``); without ``:-`` there is no default.
- In what is left, ``key`` is the text after the LAST ``:`` and ``path`` the text before it (so a
  path may contain ``:``; a key may not); without ``:`` the path is empty.
- A ``${`` right after a ``$`` (``$${env:X}``) is not a reference: the text stays exactly as written.
- Text that does not match (``${topic}``, a lone ``$``) is left as is; references do not nest, and a
  value may hold several of them (``jdbc:x://${env:HOST}/db?user=${env:USER}``).
- The default replaces a reference whose provider cannot supply the value (missing path, missing
  key); it is never used for an unknown provider or a reference without a key.

Built-in providers (also declared as entry points in ``pyproject.toml``):

- ``env`` (:class:`EnvVarConfigProvider`): ``${env:NAME}``, ``${env:NAME:-default}``. Param
  ``allowlist.pattern``: a regular expression the whole variable name must match.
- ``file`` (:class:`FileConfigProvider`): ``${file:/path/to/file.properties:key}``, a Java properties
  file. Param ``allowed.paths``: comma list of directories the files must lie in (symlinks followed;
  unset: any). Param ``base.dir``: where relative paths (in references and ``allowed.paths``) are
  taken from (default: the current directory; the worker service sets its ``data.dir``).
- ``directory`` (:class:`DirectoryConfigProvider`): ``${directory:/run/secrets:db-password}``, the
  whole content of the file ``db-password`` in that directory (Kubernetes / Docker secret mounts).
  Params ``allowed.paths`` and ``base.dir`` as above, ``trim`` (``true``: strip surrounding whitespace).

Third-party providers (a vault, a cloud key store) subclass :class:`ConfigProvider` and declare an
entry point in the ``connect.config_providers`` group (``vault = "my_pkg.vault:VaultProvider"``),
used as ``${vault:secret/path:key}``.

Worker settings, in Kafka Connect's style (:meth:`ConfigProviders.from_worker_config`)::

    config.providers=env,file,vault
    config.providers.vault.class=vault            # entry point name or module:Class; optional when
                                                  # an entry point is named like the provider
    config.providers.vault.param.address=https://vault:8200   # passed to configure()

Without ``config.providers`` the ``env`` and ``file`` providers are enabled.

Masking (:func:`mask_config`): a value holding references is shown with its references as written
(a reference is not secret); when the key is secret (declared, or named like a credential) the text
around the references and any ``:-default`` inside them show :data:`~connect.secrets.MASK`. Other
values of secret keys, and values that came from a provider, show MASK.
"""

from __future__ import annotations

import importlib
import re
from importlib import metadata
from typing import Any, Iterable, Mapping, NamedTuple

import attrs

# The provider contract and the built-in providers are re-exported: their public names are
# ``connect.providers.ConfigProvider`` (plugin authors subclass it, docs/security.md) and
# ``connect.providers:FileConfigProvider`` etc. (the entry points in pyproject.toml, worker settings).
from connect.builtin_providers import DirectoryConfigProvider, EnvVarConfigProvider, FileConfigProvider
from connect.config_provider import ConfigDataError, ConfigProvider
from connect.errors import ConfigError, ConfigIssue, PluginError
from connect.secrets import MASK, Redactor, is_secret_name

__all__ = [
    "ENTRY_POINT_GROUP",
    "DEFAULT_PROVIDERS",
    "ConfigProvider",
    "ConfigDataError",
    "EnvVarConfigProvider",
    "FileConfigProvider",
    "DirectoryConfigProvider",
    "ProviderInfo",
    "discover_config_providers",
    "list_config_providers",
    "load_provider_class",
    "Reference",
    "parse_references",
    "references",
    "mask_config",
    "ReferenceFailure",
    "UnresolvedReferences",
    "Resolved",
    "ConfigProviders",
    "secret_provider_values",
]

ENTRY_POINT_GROUP = "connect.config_providers"
DEFAULT_PROVIDERS = ("env", "file")

_BUILTINS = {
    "env": "connect.providers:EnvVarConfigProvider",
    "file": "connect.providers:FileConfigProvider",
    "directory": "connect.providers:DirectoryConfigProvider",
}

_REFERENCE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_-]*):([^}]*)\}")
_PROVIDER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


# --------------------------------------------------------------------------------------- discovery


class ProviderInfo(NamedTuple):
    name: str
    target: str  # "module:Class"
    origin: str  # distribution name, or "builtin"


def discover_config_providers() -> dict[str, ProviderInfo]:
    """Every provider class known by name: the built-ins, then the ``connect.config_providers``
    entry points of installed distributions (which win on a name clash)."""
    found = {name: ProviderInfo(name, target, "builtin") for name, target in _BUILTINS.items()}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        found[ep.name] = ProviderInfo(ep.name, ep.value, dist.name if dist is not None else "entry point")
    return found


def list_config_providers() -> list[ProviderInfo]:
    return sorted(discover_config_providers().values())


def load_provider_class(spec: str) -> type[ConfigProvider]:
    """The ConfigProvider subclass ``spec`` designates: an entry point name, ``module:Class`` or
    ``module.Class``. Raises PluginError saying why not."""
    spec = spec.strip()
    known = discover_config_providers()
    if spec in known:
        target = known[spec].target
    elif ":" in spec or "." in spec:
        target = spec
    else:
        names = ", ".join(sorted(known))
        raise PluginError(f"unknown config provider class {spec!r}; known: {names} (or give 'module:Class')")
    module_name, sep, attr = target.partition(":")
    if not sep:
        module_name, _, attr = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"cannot import module {module_name!r} for config provider {spec!r}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise PluginError(f"module {module_name!r} has no attribute {attr!r} (config provider {spec!r})")
    if not (isinstance(obj, type) and issubclass(obj, ConfigProvider)):
        raise PluginError(f"{target!r} is not a ConfigProvider subclass")
    return obj


# -------------------------------------------------------------------------------------- references


class Reference(NamedTuple):
    """One ``${provider:[path:]key[:-default]}`` as parsed (see the module's grammar)."""

    text: str  # as written in the value
    provider: str
    path: str
    key: str
    default: str | None

    def shown(self) -> str:
        """The reference for messages: as written, with any default replaced by MASK (a default can
        be a literal secret)."""
        path = f"{self.path}:" if self.path else ""
        default = "" if self.default is None else f":-{MASK if self.default else ''}"
        return f"${{{self.provider}:{path}{self.key}{default}}}"


def _parse(match: re.Match[str]) -> Reference:
    body = match.group(2)
    default = None
    if ":-" in body:
        body, _, default = body.partition(":-")
    path, _, key = body.rpartition(":")
    return Reference(match.group(0), match.group(1), path, key, default)


def parse_references(value: str) -> list[Reference]:
    """The references in ``value``, in order."""
    return [_parse(m) for m in _REFERENCE.finditer(value)]


def references(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """``{key: [reference text, ...]}`` for the keys whose (string) value holds references."""
    out: dict[str, list[str]] = {}
    for key, value in config.items():
        if isinstance(value, str):
            found = [m.group(0) for m in _REFERENCE.finditer(value)]
            if found:
                out[key] = found
    return out


def _mask_around_references(value: str) -> str:
    parts: list[str] = []
    end = 0
    for match in _REFERENCE.finditer(value):
        if match.start() > end:
            parts.append(MASK)
        parts.append(_parse(match).shown())
        end = match.end()
    if end < len(value):
        parts.append(MASK)
    return "".join(parts)


def mask_config(config: Mapping[str, Any], secret_keys: Iterable[str] = (), *,
                provided_keys: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of ``config`` fit to show (logs, REST, CLI), key by key:

    1. a key in ``provided_keys`` (its value came from a provider: pass ``Resolved.provided_keys``
       when showing a resolved config) shows MASK;
    2. a value holding references shows them as written (they are not secret); if the key is secret
       (in ``secret_keys`` or :func:`~connect.secrets.is_secret_name`), the text around them and any
       ``:-default`` inside them show MASK instead;
    3. another value of a secret key shows MASK;
    4. any other value is shown as is. ``None`` stays ``None``.
    """
    declared, provided = set(secret_keys), set(provided_keys)
    out: dict[str, Any] = {}
    for key, value in config.items():
        secret = key in declared or is_secret_name(key)
        if value is None:
            out[key] = None
        elif key in provided:
            out[key] = MASK
        elif isinstance(value, str) and _REFERENCE.search(value):
            out[key] = _mask_around_references(value) if secret else value
        else:
            out[key] = MASK if secret else value
    return out


# --------------------------------------------------------------------------------------- resolving


class ReferenceFailure(NamedTuple):
    """A reference that could not be resolved: the config key, the reference (any default masked)
    and why (never a resolved value)."""

    key: str
    reference: str
    reason: str


class UnresolvedReferences(ConfigError):
    """Some references could not be resolved; ``failures`` has one entry per reference, ``issues``
    one ``$.config["<key>"]`` issue per failure."""

    def __init__(self, failures: Iterable[ReferenceFailure], *, source: str | None = None):
        self.failures = list(failures)
        super().__init__([ConfigIssue(f'$.config["{f.key}"]', None, f"cannot resolve {f.reference}: {f.reason}")
                          for f in self.failures], source=source)


@attrs.frozen
class Resolved:
    """The outcome of :meth:`ConfigProviders.resolve`."""

    config: dict[str, Any]  # every reference substituted
    provided_keys: set[str]  # keys whose value came (at least in part) from a provider: mask them
    secret_values: set[str]  # the substituted values: feed them to a Redactor


class ConfigProviders:
    """The enabled providers, by the name references use. Close it (or use ``with``) at shutdown."""

    def __init__(self, providers: Mapping[str, ConfigProvider]):
        for name, provider in providers.items():
            if not _PROVIDER_NAME.fullmatch(name):
                raise ValueError(f"invalid config provider name {name!r}")
            if not isinstance(provider, ConfigProvider):
                raise TypeError(f"config provider {name!r} is not a ConfigProvider")
        self._providers = dict(providers)

    @classmethod
    def from_worker_config(cls, cfg: Mapping[str, Any], *, source: str | None = None) -> ConfigProviders:
        """Providers as the worker settings declare them (see the module docs); raises one ConfigError
        listing every problem (unknown or broken class, bad parameters, stray settings)."""
        settings = {str(k): "" if v is None else str(v) for k, v in cfg.items()}
        if "config.providers" in settings:
            names = list(dict.fromkeys(n.strip() for n in settings["config.providers"].split(",") if n.strip()))
        else:
            names = list(DEFAULT_PROVIDERS)
        issues: list[ConfigIssue] = []
        for name in names:
            if not _PROVIDER_NAME.fullmatch(name):
                issues.append(ConfigIssue("config.providers", settings["config.providers"],
                                          f"invalid provider name {name!r}: letters, digits, '_' or '-'"))
        names = [n for n in names if _PROVIDER_NAME.fullmatch(n)]
        for key in sorted(settings):
            if not key.startswith("config.providers."):
                continue
            name, _, rest = key[len("config.providers."):].partition(".")
            if name in names and rest != "class" and not (rest.startswith("param.") and len(rest) > len("param.")):
                issues.append(ConfigIssue(key, None, f"unknown setting; expected config.providers.{name}.class "
                                                     f"or config.providers.{name}.param.<name>"))
        providers: dict[str, ConfigProvider] = {}
        for name in names:
            prefix = f"config.providers.{name}."
            params = {k[len(prefix) + len("param."):]: v for k, v in settings.items() if k.startswith(prefix + "param.")}
            redact = Redactor(v for p, v in params.items() if is_secret_name(p)).redact
            class_key = prefix + "class"
            spec = settings.get(class_key, "").strip() or name
            try:
                provider_cls = load_provider_class(spec)
            except PluginError as exc:
                if class_key in settings:
                    issues.append(ConfigIssue(class_key, spec, str(exc)))
                else:
                    issues.append(ConfigIssue(class_key, None, f"config provider {name!r} has no class: set {class_key} "
                                                               f"(an entry point name or module:Class); {exc}"))
                continue
            try:
                provider = provider_cls()
                provider.configure(dict(params))
            except ConfigError as exc:
                for issue in exc.issues:
                    param_key = f"{prefix}{issue.key}" if issue.key.startswith("param.") else class_key
                    value = None if issue.value is None or is_secret_name(param_key) else redact(str(issue.value))
                    issues.append(ConfigIssue(param_key, value, redact(issue.message)))
                continue
            except Exception as exc:  # a plugin's own failure: report it with the others
                issues.append(ConfigIssue(class_key, None, redact(f"configure() failed: {type(exc).__name__}: {exc}")))
                continue
            providers[name] = provider
        if issues:
            for provider in providers.values():
                provider.close()
            raise ConfigError(issues, source=source)
        return cls(providers)

    @property
    def names(self) -> list[str]:
        return list(self._providers)

    def __contains__(self, name: object) -> bool:
        return name in self._providers

    def __getitem__(self, name: str) -> ConfigProvider:
        return self._providers[name]

    def close(self) -> None:
        for provider in self._providers.values():
            provider.close()

    def __enter__(self) -> ConfigProviders:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _fetch(self, name: str, path: str, keys: set[str]) -> tuple[dict[str, str], dict[str, str], set[str]]:
        """(values, reasons, denied): what ``name`` supplies for ``keys`` at ``path``, why not for
        the others, and which of those a fence refused."""
        provider = self._providers[name]
        values: dict[str, str] = {}
        reasons: dict[str, str] = {}
        denied: set[str] = set()
        pending = set(keys)
        while pending:
            try:
                got = provider.get(path, set(pending))
            except ConfigDataError as exc:
                missing = exc.missing & pending
                if not missing:  # the whole path failed
                    reasons.update(dict.fromkeys(pending, exc.reason))
                    if exc.denied:
                        denied.update(pending)
                    break
                reasons.update({k: exc.reason_for(k) for k in missing})
                denied.update(exc.denied & missing)
                pending -= missing
                continue  # ask again for the keys that do exist
            except KeyError as exc:
                missing = {a for a in exc.args if a in pending} or set(pending)
                reasons.update({k: f"config provider {name!r} has no key {k!r} at path {path!r}" for k in missing})
                pending -= missing
                continue
            except Exception as exc:  # a plugin's own failure, e.g. a vault that cannot be reached
                reasons.update(dict.fromkeys(pending, f"config provider {name!r} failed: {type(exc).__name__}: {exc}"))
                break
            if not isinstance(got, Mapping):
                reasons.update(dict.fromkeys(pending, f"config provider {name!r} returned {type(got).__name__}, "
                                                      "not a mapping"))
                break
            for key in pending:
                if got.get(key) is None:
                    reasons[key] = f"config provider {name!r} returned no value for key {key!r}"
                else:
                    values[key] = str(got[key])
            break
        return values, reasons, denied

    def resolve(self, config: Mapping[str, Any], *, source: str | None = None,
                ignore_unknown: bool = False) -> Resolved:
        """``config`` with every reference replaced (see the module's grammar); non-string values are
        copied as they are. Raises :class:`UnresolvedReferences` (a ConfigError) listing every
        reference that could not be resolved (unknown provider, missing path or key, reference
        without a key); no resolved value appears in it. With ``ignore_unknown``, references to
        providers that are not enabled are left as written instead."""
        wanted: dict[tuple[str, str], set[str]] = {}
        for value in config.values():
            if isinstance(value, str):
                for ref in parse_references(value):
                    if ref.provider in self._providers and ref.key:
                        wanted.setdefault((ref.provider, ref.path), set()).add(ref.key)
        fetched: dict[tuple[str, str], tuple[dict[str, str], dict[str, str], set[str]]] = {
            where: self._fetch(where[0], where[1], keys) for where, keys in wanted.items()}
        redact = Redactor(v for values, _, _ in fetched.values() for v in values.values()).redact
        failures: list[ReferenceFailure] = []
        provided: set[str] = set()
        secret_values: set[str] = set()
        enabled = ", ".join(self._providers) or "none"

        def substitute(key: str, match: re.Match[str]) -> str:
            ref = _parse(match)
            if ref.provider not in self._providers:
                if not ignore_unknown:
                    failures.append(ReferenceFailure(key, ref.shown(), f"unknown config provider {ref.provider!r} "
                                                                       f"(enabled: {enabled})"))
                return ref.text
            if not ref.key:
                failures.append(ReferenceFailure(key, ref.shown(), "the reference names no key"))
                return ref.text
            values, reasons, denied = fetched[(ref.provider, ref.path)]
            if ref.key in values:
                provided.add(key)
                secret_values.add(values[ref.key])
                return values[ref.key]
            if ref.default is not None and ref.key not in denied:  # a fence is never papered over
                return ref.default
            failures.append(ReferenceFailure(key, ref.shown(), redact(reasons.get(ref.key, "no value"))))
            return ref.text

        out: dict[str, Any] = {}
        for key, value in config.items():
            out[key] = _REFERENCE.sub(lambda m, k=key: substitute(k, m), value) if isinstance(value, str) else value
        if failures:
            raise UnresolvedReferences(failures, source=source)
        return Resolved(config=out, provided_keys=provided, secret_values=secret_values)


# Keys that name where a cluster is, not a credential: a broker address read from the environment
# is shown in errors and logs (operators need it to debug), unless the key itself is secret.
_ADDRESS_KEY = re.compile(r"(?:^|\.)(?:bootstrap\.servers|service\.url|admin\.url|namesrv\.addr)$")


# ...and only when the variable's own name says it holds an address: the key name is the REST
# caller's choice, the variable name the operator's (``${env:KAFKA_SASL_PASSWORD}`` in
# bootstrap.servers stays masked).
_ADDRESS_VARIABLE = re.compile(r"[A-Z0-9_]*_(?:BOOTSTRAP|BOOTSTRAP_SERVERS|SERVERS|NAMESRV|NAMESRV_ADDR|URL|ADDR|ADDRESS"
                               r"|HOST|HOSTS|PULSAR|ROCKETMQ|PRIMARY|STANDBY|[AB])")


def secret_provider_values(config: Mapping[str, Any], resolved: Resolved) -> set[str]:
    """The provider values to mask in free text (logs, traces, errors): all of them, except a value
    that is the whole of an address key (``bootstrap.servers``, ``service.url``, ``admin.url``,
    ``namesrv.addr``) given by one ``${env:NAME}`` reference whose variable is named like an
    address (``..._BOOTSTRAP``, ``..._URL``, ``..._NAMESRV``...) and not like a credential, and used
    by no other provided key. Values from files, directories and keystores are always masked."""
    exempt_keys = set()
    for key in resolved.provided_keys:
        value = config.get(key)
        refs = parse_references(value) if isinstance(value, str) else []
        if (_ADDRESS_KEY.search(key) and not is_secret_name(key) and len(refs) == 1 and refs[0].text == value
                and refs[0].provider == "env" and _ADDRESS_VARIABLE.fullmatch(refs[0].key)
                and not is_secret_name(refs[0].key)):
            exempt_keys.add(key)
    others = [str(resolved.config[k]) for k in resolved.provided_keys - exempt_keys]
    shown = {str(resolved.config[k]) for k in exempt_keys}
    shown = {v for v in shown if not any(v in other for other in others)}
    return set(resolved.secret_values) - shown
