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
import os
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

import attrs

from connect import patterns
from connect.errors import ConfigError, ConfigIssue, PluginError
from connect.files import private_dir
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
    "parse_properties",
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


# --------------------------------------------------------------------------------------- providers


class ConfigDataError(ConfigError):
    """A provider cannot supply what was asked.

    ``missing`` names the requested keys that do not exist, optionally as ``{key: reason}`` (a
    reason for that key alone); empty means the whole path failed (unreadable file, unknown secret
    path...). Reasons must name paths and keys only, never a value.
    """

    def __init__(self, reason: str, *, missing: Iterable[str] | Mapping[str, str] = (), denied: Iterable[str] = ()):
        super().__init__(reason)
        self.reason = reason
        self.reasons: dict[str, str] = dict(missing) if isinstance(missing, Mapping) else {}
        self.missing = frozenset(missing)
        # keys (among ``missing``) a fence refused: a reference's ``:-default`` never hides that
        self.denied = frozenset(denied)

    def reason_for(self, key: str) -> str:
        """Why ``key`` is missing (its own reason if one was given, else :attr:`reason`)."""
        return self.reasons.get(key, self.reason)

    def __str__(self) -> str:
        return self.reason


class ConfigProvider:
    """Base class of every config provider, built-in or plugin.

    Lifecycle: the worker creates the provider with no arguments, calls :meth:`configure` once with
    the ``config.providers.<name>.param.*`` settings (names without the prefix), then :meth:`get` any
    number of times, and :meth:`close` when it shuts down.

    :meth:`get` returns a value for every requested key. When a key does not exist it raises
    :class:`ConfigDataError` with ``missing`` naming the absent keys (a plain ``KeyError(key)`` is
    understood too); when the path itself cannot be read it raises ConfigDataError with no
    ``missing``. Messages name paths and keys, never values.
    """

    def __init__(self) -> None:
        self.params: dict[str, str] = {}

    def configure(self, params: dict[str, str]) -> None:
        """Take the provider's parameters; raise ConfigError for bad ones."""
        self.params = dict(params)

    def get(self, path: str, keys: set[str]) -> dict[str, str]:
        """The values of ``keys`` at ``path`` ("" when the reference has no path)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get()")

    def store(self, path: str, values: Mapping[str, str]) -> None:
        """Keystore plugins (PIP-18): keep ``values`` at ``path`` so ``${name:path:key}`` finds them.
        Default: this provider only reads."""
        raise ConfigError([ConfigIssue("authPlugin", type(self).__name__, "this config provider cannot store "
                                       "secrets (it has no store(); use one that has, e.g. directory)")])

    def remove(self, path: str) -> None:
        """Keystore plugins: forget what ``store`` kept at ``path``. Default: nothing to forget."""

    def close(self) -> None:
        """Release what the provider holds (connections, caches). Default: nothing."""

    def __enter__(self) -> ConfigProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _check_params(provider: str, params: Mapping[str, str], known: Iterable[str]) -> None:
    unknown = sorted(set(params) - set(known))
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise ConfigError([ConfigIssue(f"param.{name}", None, f"unknown parameter of the {provider} provider "
                                                              f"(known: {allowed})") for name in unknown])


class EnvVarConfigProvider(ConfigProvider):
    """``${env:NAME}``: environment variables (the path must be empty).

    ``environ`` (tests, embedding) replaces ``os.environ``, which is otherwise read at each lookup.
    Param ``allowlist.pattern``: only variables whose whole name matches may be read.
    """

    def __init__(self, environ: Mapping[str, str] | None = None):
        super().__init__()
        self._environ = environ
        self._allow: patterns.JavaPattern | None = None

    def configure(self, params: dict[str, str]) -> None:
        _check_params("env", params, ["allowlist.pattern"])
        super().configure(params)
        pattern = params.get("allowlist.pattern")
        if pattern is not None:
            try:  # a reference names the variable: the match is bounded whoever chose the name
                self._allow = patterns.compile(pattern)
            except patterns.PatternError as exc:
                raise ConfigError([ConfigIssue("param.allowlist.pattern", pattern, f"not a regular expression: it {exc}")]) \
                    from None

    def get(self, path: str, keys: set[str]) -> dict[str, str]:
        if path:
            raise ConfigDataError(f"the env provider takes no path (write ${{env:NAME}}), got path {path!r}")
        environ = os.environ if self._environ is None else self._environ
        missing = {k: f"environment variable {k} is not allowed by allowlist.pattern"
                   for k in sorted(keys) if self._allow is not None and not self._allow.fullmatch(k)}
        missing.update((k, f"environment variable {k} is not set") for k in sorted(keys) if k not in missing
                       and k not in environ)
        if missing:
            denied = [k for k in missing if self._allow is not None and not self._allow.fullmatch(k)]
            raise ConfigDataError("; ".join(missing.values()), missing=missing, denied=denied)
        return {k: environ[k] for k in keys}


def _allowed_paths(params: Mapping[str, str], base: str | None) -> list[str] | None:
    """The real paths of ``allowed.paths`` (relative ones from ``base``, else the current directory),
    or None when the parameter is not set (every path allowed, as Kafka's KIP-993 default)."""
    raw = params.get("allowed.paths")
    if raw is None:
        return None
    return [os.path.realpath(os.path.join(base or "", p.strip())) for p in raw.split(",") if p.strip()]


def _check_allowed(allowed: list[str] | None, path: str, shown: str | None = None) -> None:
    """ConfigDataError unless ``path``, symlinks followed, lies in one of ``allowed``. The error says
    where the path (``shown`` as written) led and what is allowed: paths are not secrets, the
    values in the files are."""
    if allowed is None:
        return
    real = os.path.realpath(path)
    if not any(os.path.commonpath([real, root]) == root for root in allowed):
        shown = shown or path
        where = f" (it resolves to {real})" if real != shown else ""
        raise ConfigDataError(f"{shown}{where} is outside allowed.paths ({', '.join(allowed) or 'none'})",
                              denied=[_WHOLE_PATH])


class _FencedPaths:
    """Where a file-reading provider looks: relative paths, in references and in ``allowed.paths``,
    are taken from the ``base.dir`` param (the worker service sets its ``data.dir``), else from the
    current directory; every path must lie in ``allowed.paths`` when that is set."""

    _base: str | None = None
    _allowed: list[str] | None = None

    def _configure_paths(self, params: Mapping[str, str]) -> None:
        base = params.get("base.dir", "").strip()
        self._base = os.path.abspath(base) if base else None
        self._allowed = _allowed_paths(params, self._base)

    def _locate(self, path: str) -> str:
        """``path`` (relative ones from ``base.dir``), refused unless it lies in ``allowed.paths``."""
        full = os.path.join(self._base, path) if self._base and not os.path.isabs(path) else path
        _check_allowed(self._allowed, full, shown=path)
        return full


_WHOLE_PATH = "*"  # ConfigDataError.denied: the whole path was refused by a fence

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


class FileConfigProvider(_FencedPaths, ConfigProvider):
    """``${file:/path/to/file.properties:key}``: a value of a Java properties file (UTF-8,
    :func:`parse_properties`), read at each lookup. Params ``allowed.paths`` and ``base.dir``
    (:class:`_FencedPaths`)."""

    def configure(self, params: dict[str, str]) -> None:
        _check_params("file", params, ["allowed.paths", "base.dir"])
        super().configure(params)
        self._configure_paths(params)

    def get(self, path: str, keys: set[str]) -> dict[str, str]:
        if not path:
            raise ConfigDataError("the file provider needs a path: ${file:/path/to/file.properties:key}")
        full = self._locate(path)
        try:
            text = Path(full).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigDataError(f"cannot read {path}: not UTF-8 text") from None
        except OSError as exc:
            where = "" if full == path else f" ({full})"
            raise ConfigDataError(f"cannot read {path}{where}: {exc.strerror or type(exc).__name__}") from None
        try:
            entries = parse_properties(text)
        except ValueError as exc:
            raise ConfigDataError(f"cannot parse {path}: {exc}") from None
        missing = {k: f"{path} has no key {k!r}" for k in sorted(keys) if k not in entries}
        if missing:
            raise ConfigDataError("; ".join(missing.values()), missing=missing)
        return {k: entries[k] for k in keys}


class DirectoryConfigProvider(_FencedPaths, ConfigProvider):
    """``${directory:/dir:name}``: the whole content (UTF-8) of the file ``name`` in ``/dir``, as
    Kafka's DirectoryConfigProvider. ``name`` must be a plain file name (no separator, not ``.`` or
    ``..``); with ``allowed.paths`` a file that is a symlink out of them is refused too. Params
    ``allowed.paths``, ``base.dir`` (:class:`_FencedPaths`) and ``trim`` (``true`` strips surrounding
    whitespace; default ``false``: the content exactly)."""

    def __init__(self) -> None:
        super().__init__()
        self._trim = False

    def configure(self, params: dict[str, str]) -> None:
        _check_params("directory", params, ["allowed.paths", "base.dir", "trim"])
        super().configure(params)
        self._configure_paths(params)
        trim = params.get("trim", "false").strip().lower()
        if trim not in ("true", "false"):
            raise ConfigError([ConfigIssue("param.trim", params["trim"], "must be true or false")])
        self._trim = trim == "true"

    def get(self, path: str, keys: set[str]) -> dict[str, str]:
        if not path:
            raise ConfigDataError("the directory provider needs a path: ${directory:/dir:file}")
        where = self._locate(path)
        if not os.path.isdir(where):
            raise ConfigDataError(f"{path} is not a readable directory")
        values: dict[str, str] = {}
        problems: dict[str, str] = {}
        denied: list[str] = []
        for key in sorted(keys):
            if key in (".", "..") or "/" in key or os.sep in key or (os.altsep and os.altsep in key):
                problems[key] = f"{key!r} is not a plain file name"
                continue
            file = os.path.join(where, key)
            if not os.path.isfile(file):
                problems[key] = f"{path} has no file {key!r}"
                continue
            try:  # a symlink in an allowed directory must not lead out of it
                _check_allowed(self._allowed, file, shown=os.path.join(path, key))
            except ConfigDataError as exc:
                problems[key] = exc.reason
                denied.append(key)
                continue
            try:
                content = Path(file).read_text(encoding="utf-8")
            except UnicodeDecodeError:
                problems[key] = f"cannot read {file}: not UTF-8 text"
                continue
            except OSError as exc:
                problems[key] = f"cannot read {file}: {exc.strerror or type(exc).__name__}"
                continue
            values[key] = content.strip() if self._trim else content
        if problems:
            raise ConfigDataError("; ".join(problems.values()), missing=problems, denied=denied)
        return values

    def store(self, path: str, values: Mapping[str, str]) -> None:
        """One file per key in directory ``path`` (created 0700; files 0600, written atomically)."""
        path = self._locate(path)
        bad = [key for key in values if key in (".", "..") or "/" in key or os.sep in key or not key
               or key.endswith(".tmp")]
        if bad:  # checked before anything is written
            raise ConfigError([ConfigIssue(f"authParam.{key}", None, "not a plain file name") for key in bad])
        private_dir(path)
        for key, value in values.items():
            target = os.path.join(path, key)
            temp = f"{target}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(str(value))
            os.replace(temp, target)

    def remove(self, path: str) -> None:
        path = self._locate(path)
        if not os.path.isdir(path):
            return
        for name in os.listdir(path):
            file = os.path.join(path, name)
            if os.path.isfile(file):
                os.remove(file)
        try:
            os.rmdir(path)
        except OSError:
            pass  # something else lives there: leave it


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
