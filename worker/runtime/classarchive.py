"""A class-data-sharing archive of the Spark driver JVM's classes (Java's dynamic AppCDS).

The driver JVM loads thousands of classes from Spark's jars before the first epoch runs, and with
no archive it spends most of its start-up doing so. Measured on this project's machine (2 cores,
Java 17, local mode, ``python bench/startup.py``): JVM gateway 1.98 s -> 1.19 s, SparkContext
1.29 s -> 0.55 s (medians of 3 fresh processes).

The first run of an installation records the archive as its JVM exits
(``-XX:ArchiveClassesAtExit``, ~70 MB, a few seconds at exit); later runs map it
(``-XX:SharedArchiveFile``). The archive lives in a cache directory (``$CONNECT_CACHE_DIR``, else
``$XDG_CACHE_HOME/connect-bridge``, else ``~/.cache/connect-bridge``) under a key of the java binary
and the Spark build, so a changed JDK or Spark gets a new one. Java itself refuses an archive that
does not match its class path or build and then runs without it (``-Xshare:auto``), so a stale or
damaged archive costs speed, never correctness. ``CONNECT_CLASS_ARCHIVE=off`` turns it all off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

__all__ = ["ClassArchive"]

_LOCK_STALE_S = 600.0  # a recording JVM that was killed leaves its lock; after this, another may record
# Java logs CDS warnings to stdout, i.e. into `connect run`'s output: classes it cannot archive
# (generated accessors), or an archive it will not use. Neither needs the user's attention.
_QUIET = "-Xshare:auto -Xlog:cds*=off -Xlog:class+path=off"


def _cache_dir() -> Path:
    if os.environ.get("CONNECT_CACHE_DIR"):
        return Path(os.environ["CONNECT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "connect-bridge"


def _java_binary() -> str | None:
    """The java Spark's launcher runs: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


class ClassArchive:
    """Decides the archive options of one driver JVM, and publishes a recorded archive."""

    def __init__(self, directory: Path, key: str) -> None:
        self.path = directory / f"spark-driver-{key}.jsa"
        self._lock = directory / f"spark-driver-{key}.lock"
        self._recording: Path | None = None

    @classmethod
    def for_this_install(cls) -> ClassArchive | None:
        """None when turned off, or when no java binary is found (Spark will then fail by itself)."""
        if os.environ.get("CONNECT_CLASS_ARCHIVE", "").lower() in ("off", "0", "false", "no"):
            return None
        java = _java_binary()
        if java is None:
            return None
        import pyspark

        spark_home = os.path.realpath(os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__))
        stat = os.stat(java)
        ident = f"{java}|{stat.st_size}|{stat.st_mtime_ns}|{pyspark.__version__}|{spark_home}"
        return cls(_cache_dir(), hashlib.sha256(ident.encode()).hexdigest()[:16])

    @property
    def recording(self) -> bool:
        return self._recording is not None

    def java_options(self) -> str:
        """Options that map the archive, or record it when this process is the one to do so."""
        if self.path.is_file():
            return f"-XX:SharedArchiveFile={self.path} {_QUIET}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self._take_lock():
                return ""  # another JVM is recording it right now
        except OSError:
            return ""  # an unwritable cache: run without
        self._recording = self.path.with_name(f"{self.path.stem}.{os.getpid()}.tmp")
        return f"-XX:ArchiveClassesAtExit={self._recording} {_QUIET}"

    def _take_lock(self) -> bool:
        for _ in range(2):
            try:
                os.close(os.open(self._lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                return True
            except FileExistsError:
                try:
                    if time.time() - self._lock.stat().st_mtime < _LOCK_STALE_S:
                        return False
                    self._lock.unlink()  # its recorder died; its partial file goes too
                    for stale in self.path.parent.glob(f"{self.path.stem}.*.tmp"):
                        stale.unlink(missing_ok=True)
                except FileNotFoundError:
                    pass
        return False

    def publish(self, jvm_exit_code: int | None) -> None:
        """After the recording JVM has exited: a clean exit's archive becomes the installation's."""
        if self._recording is None:
            return
        try:
            if jvm_exit_code == 0 and self._recording.is_file() and self._recording.stat().st_size > 0:
                os.replace(self._recording, self.path)
            else:
                self._recording.unlink(missing_ok=True)
        finally:
            self._lock.unlink(missing_ok=True)
            self._recording = None
