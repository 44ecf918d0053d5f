"""The PySpark daemon module of this project's Spark applications (``spark.python.daemon.module``).

Spark puts ``pyspark.zip`` and the py4j zip first on its Python workers' path. Python cannot
cache compiled modules inside a zip, so every daemon recompiled PySpark before its first worker:
0.8 s between the daemon's start and its first fork (measured: process start times read from
``/proc``, local mode). When those zips are the ones shipped inside an installed ``pyspark``
package, that package is the same build, importable from the environment with its cached
bytecode; the zips are then left off the path and the stock daemon runs unchanged.
"""

from __future__ import annotations

import os
import sys


def _shipped_zips(paths: list[str]) -> set[str]:
    """The entries of ``paths`` that are zips under ``<pkg>/python/lib/`` of an installed pyspark
    package (``<pkg>/__init__.py`` beside them)."""
    found = set()
    for entry in paths:
        if not entry.endswith(".zip"):
            continue
        lib = os.path.dirname(entry)
        package = os.path.dirname(os.path.dirname(lib))
        if (
            os.path.basename(lib) == "lib"
            and os.path.basename(package) == "pyspark"
            and os.path.isfile(os.path.join(package, "__init__.py"))
        ):
            found.add(entry)
    return found


def main() -> None:
    shipped = _shipped_zips(sys.path)
    if shipped:
        sys.path[:] = [p for p in sys.path if p not in shipped]
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in shipped
        )
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
