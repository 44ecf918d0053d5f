"""The built-in config providers: ``env`` (environment variables), ``file`` (a value of a Java
properties file) and ``directory`` (the content of a file in a secrets directory), with the
``allowed.paths`` / ``base.dir`` fence the two file readers share. Their references and params are
described in :mod:`connect.providers`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from connect import patterns
from connect.config_provider import ConfigDataError, ConfigProvider
from connect.errors import ConfigError, ConfigIssue
from connect.files import private_dir
from connect.properties import parse_properties

__all__ = ["EnvVarConfigProvider", "FileConfigProvider", "DirectoryConfigProvider"]


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
