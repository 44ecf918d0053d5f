"""Import a script from ``bench/`` under the name ``bench_<name>``.

``bench/e2e.py`` shares its name with the ``tests/e2e`` package: a plain ``import e2e`` gets
whichever of the two was imported first in the session, so tests load bench scripts by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` as module ``bench_<name>`` (its sibling ``bench_util`` importable)."""
    alias = f"bench_{name}"
    if alias in sys.modules:
        return sys.modules[alias]
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))  # after tests/ and the project: bench_util only, no shadowing
    spec = importlib.util.spec_from_file_location(alias, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    spec.loader.exec_module(module)
    return module


def bench_module_with_e2e(name: str) -> ModuleType:
    """``bench/<name>.py`` that imports its sibling ``e2e``: loaded with ``bench/e2e.py`` standing in for
    ``e2e`` (which the ``tests/e2e`` package would shadow), the name restored afterwards."""
    saved = sys.modules.get("e2e")
    sys.modules["e2e"] = bench_module("e2e")
    try:
        return bench_module(name)
    finally:
        if saved is None:
            sys.modules.pop("e2e")
        else:
            sys.modules["e2e"] = saved
