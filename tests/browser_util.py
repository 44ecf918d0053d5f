"""A headless Chromium for the console's browser test: Debian's ``chromium`` package, driven by
Playwright's Python API (the ``test`` extra) with that system browser - Playwright's own browser
downloads are not used (they come from outside the package registries).

Where the browser is missing and the tests run as root on a Debian-like system, it is installed
with ``apt-get install chromium`` (the project's own set-up, as ``make test`` installs its Python
packages). If it still cannot be had, the test fails in CI (``CI=true``) with what to install, and
is skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

__all__ = ["chromium_path", "unavailable"]

_CANDIDATES = ("chromium", "chromium-browser")


def unavailable(reason: str):
    """Fail in CI, skip on a developer's machine."""
    message = f"the console's browser test cannot run: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _found() -> str | None:
    for name in _CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_path() -> str:
    """The system Chromium, installed with apt-get when missing and we may."""
    path = _found()
    if path:
        return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        unavailable("no chromium on PATH; install Debian's chromium package (apt-get install chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"])
    for step in steps:
        done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            unavailable(f"{' '.join(step)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return _found() or unavailable("apt-get installed chromium but it is not on PATH")
