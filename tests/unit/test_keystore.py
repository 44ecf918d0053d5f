"""Keystore plugins (PIP-18): config providers that can also keep credentials."""

from __future__ import annotations

import os
import stat

import pytest

from connect.builtin_providers import DirectoryConfigProvider, EnvVarConfigProvider
from connect.config_provider import ConfigDataError, ConfigProvider
from connect.errors import ConfigError


def test_directory_provider_stores_reads_and_removes(tmp_path):
    p = DirectoryConfigProvider()
    p.configure({"allowed.paths": str(tmp_path)})
    path = str(tmp_path / "kafka.east.ns")
    p.store(path, {"sasl.password": "s3cret", "access.key": "AK"})
    assert p.get(path, {"sasl.password", "access.key"}) == {"sasl.password": "s3cret", "access.key": "AK"}
    assert stat.S_IMODE(os.stat(os.path.join(path, "sasl.password")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    p.store(path, {"sasl.password": "rotated"})  # replaced atomically
    assert p.get(path, {"sasl.password"}) == {"sasl.password": "rotated"}
    p.remove(path)
    assert not os.path.exists(path)
    p.remove(path)  # twice: nothing left to remove


def test_directory_provider_refuses_paths_outside_allowed_and_bad_names(tmp_path):
    p = DirectoryConfigProvider()
    p.configure({"allowed.paths": str(tmp_path / "keys")})
    with pytest.raises(ConfigDataError, match="outside allowed.paths"):
        p.store(str(tmp_path / "elsewhere"), {"k": "v"})
    with pytest.raises(ConfigError, match="plain file name"):
        p.store(str(tmp_path / "keys" / "x"), {"../escape": "v"})


def test_read_only_providers_say_they_cannot_store():
    for provider in (ConfigProvider(), EnvVarConfigProvider()):
        with pytest.raises(ConfigError, match="cannot store"):
            provider.store("p", {"k": "v"})
