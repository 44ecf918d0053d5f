"""The config provider contract: the base class every provider subclasses, built-in or plugin
(a vault, a cloud key store, a PIP-18 keystore), and the error it raises when it cannot supply a
value. How references are written, found and resolved is :mod:`connect.providers`; the built-in
``env``, ``file`` and ``directory`` providers are :mod:`connect.builtin_providers`.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from connect.errors import ConfigError, ConfigIssue

__all__ = ["ConfigDataError", "ConfigProvider"]


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
