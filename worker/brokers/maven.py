"""Pinned Maven Central artifacts, fetched once into a project-local cache.

``classpath(bundle)`` returns the jars of a :class:`Bundle` (a name and pinned ``group:artifact:version``
coordinates with their runtime dependencies). The first call writes a tiny pom, runs
``mvn dependency:copy-dependencies`` into ``<cache>/<name>-<digest>/lib`` and marks the folder
complete; every later call (any process) finds the mark and runs no ``mvn``: the cache works
offline. The digest covers the coordinates, so a changed pin fetches into a new folder.

The cache is ``.brokers/`` at the repository root (git-ignored), or ``$CONNECT_BROKERS_DIR``.
An exclusive file lock per bundle lets concurrent processes (pytest-xdist workers) share one
fetch: the second waits and then finds the mark.

A failed fetch raises :class:`FetchError` naming the coordinates and the tail of mvn's output.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

__all__ = ["Bundle", "FetchError", "cache_root", "classpath"]

# copy-dependencies at a pinned plugin version: Maven 3.8's default (2.8) resolves differently.
DEPENDENCY_PLUGIN = "3.8.1"
MVN_TIMEOUT_S = 900
_TAIL_LINES = 25


class FetchError(RuntimeError):
    """Broker artifacts could not be fetched from Maven Central."""


@dataclass(frozen=True)
class Bundle:
    """What one broker needs on its classpath: ``artifacts`` are ``group:artifact:version``
    coordinates, resolved with their runtime dependencies (nearest-first, as Maven mediates)."""

    name: str
    artifacts: tuple[str, ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.artifacts).encode()).hexdigest()[:12]


def cache_root() -> Path:
    configured = os.environ.get("CONNECT_BROKERS_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".brokers"


def _pom(bundle: Bundle) -> str:
    deps = []
    for coordinates in bundle.artifacts:
        group, artifact, version = coordinates.split(":")
        deps.append(f"<dependency><groupId>{escape(group)}</groupId><artifactId>{escape(artifact)}</artifactId>"
                    f"<version>{escape(version)}</version></dependency>")
    newline = "\n    "
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.connect.brokers</groupId><artifactId>{escape(bundle.name)}</artifactId><version>1</version>
  <dependencies>
    {newline.join(deps)}
  </dependencies>
  <build><plugins><plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-dependency-plugin</artifactId>
    <version>{DEPENDENCY_PLUGIN}</version></plugin></plugins></build>
</project>
"""


def classpath(bundle: Bundle, *, progress=None) -> list[Path]:
    """The jars of ``bundle``, fetched first if the cache does not hold them yet.
    ``progress``: called with one line of text before a fetch starts and when it ends (default: stderr)."""
    folder = cache_root() / f"{bundle.name}-{bundle.digest}"
    mark = folder / "complete"
    if not mark.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f"{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here, then finds the mark
            if not mark.exists():
                _fetch(bundle, folder, progress or _stderr)
    jars = sorted((folder / "lib").glob("*.jar"))
    if not jars:
        raise FetchError(f"the cache folder {folder} is marked complete but holds no jars: delete it to fetch again")
    return jars


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _fetch(bundle: Bundle, folder: Path, progress) -> None:
    named = ", ".join(bundle.artifacts)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError(f"cannot fetch {named}: Apache Maven (mvn) is not on PATH (Debian: apt-get install maven)")
    shutil.rmtree(folder, ignore_errors=True)  # a fetch that died half-way leaves no mark: start clean
    folder.mkdir(parents=True)
    (folder / "pom.xml").write_text(_pom(bundle))
    progress(f"fetching {named} from Maven Central into {folder} (once; later runs reuse it)")
    started = time.monotonic()
    argv = [mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(folder / "pom.xml"), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={folder / 'lib'}"]
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=MVN_TIMEOUT_S, cwd=folder)
    except subprocess.TimeoutExpired as e:
        raise FetchError(f"fetching {named} took over {MVN_TIMEOUT_S}s; mvn said:\n{_tail(e.output)}") from None
    if done.returncode != 0:
        raise FetchError(f"fetching {named} failed (mvn exit {done.returncode}); mvn said:\n{_tail(done.stdout)}")
    (folder / "complete").write_text("\n".join(bundle.artifacts) + "\n")
    progress(f"fetched {bundle.name} in {time.monotonic() - started:.1f}s")


def _tail(output: bytes | None) -> str:
    lines = (output or b"").decode(errors="replace").splitlines()
    return "\n".join(lines[-_TAIL_LINES:]) or "(nothing)"
