"""Installing a small distribution for a test: modules and an entry_points.txt in a dist-info folder on
sys.path, as pip would leave them, so importlib.metadata finds its entry points."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def install_distribution(root: Path, monkeypatch, name: str, modules: dict[str, str], entry_points: str) -> None:
    """``modules``: module name -> source; ``entry_points``: the text of entry_points.txt.
    Undone by ``monkeypatch`` (sys.path); call :func:`forget` for the imported modules."""
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()


def forget(*modules: str) -> None:
    for module in modules:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()
