"""Start-up aids of the Spark driver: the JVM class archive's life cycle and the daemon's path.

The archive is exercised for real (a recording JVM, then one mapping the archive) by every test
session and `connect run`; these tests pin the decisions around it that a run cannot show.
"""

from __future__ import annotations

import os
import time

import pytest

from worker.runtime.classarchive import ClassArchive
from worker.runtime.pydaemon import _shipped_zips


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONNECT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CONNECT_CLASS_ARCHIVE", raising=False)
    return tmp_path


def test_first_run_records_then_publishes_and_later_runs_map(cache):
    first = ClassArchive.for_this_install()
    assert first is not None
    options = first.java_options()
    assert "-XX:ArchiveClassesAtExit=" in options and first.recording
    # A second process while the first records: neither records nor maps.
    assert ClassArchive.for_this_install().java_options() == ""
    recorded = options.split("-XX:ArchiveClassesAtExit=")[1].split()[0]
    with open(recorded, "wb") as f:
        f.write(b"archive")
    first.publish(0)
    assert first.path.read_bytes() == b"archive" and not first.recording
    assert list(cache.iterdir()) == [first.path]  # no lock, no temporary left
    later = ClassArchive.for_this_install()
    assert later.java_options().startswith(f"-XX:SharedArchiveFile={first.path} ")
    assert not later.recording


def test_a_failed_recording_is_dropped_and_the_next_run_records(cache):
    first = ClassArchive.for_this_install()
    recorded = first.java_options().split("-XX:ArchiveClassesAtExit=")[1].split()[0]
    open(recorded, "wb").write(b"partial")
    first.publish(137)  # the JVM was killed while writing
    assert not first.path.exists() and list(cache.iterdir()) == []
    assert "-XX:ArchiveClassesAtExit=" in ClassArchive.for_this_install().java_options()


def test_a_dead_recorders_lock_expires(cache):
    first = ClassArchive.for_this_install()
    recorded = first.java_options().split("-XX:ArchiveClassesAtExit=")[1].split()[0]
    open(recorded, "wb").write(b"partial")  # its driver was killed: nobody publishes
    lock = next(cache.glob("*.lock"))
    assert ClassArchive.for_this_install().java_options() == ""
    old = time.time() - 3600
    os.utime(lock, (old, old))
    again = ClassArchive.for_this_install()
    assert "-XX:ArchiveClassesAtExit=" in again.java_options()
    assert not os.path.exists(recorded)  # the dead recorder's partial file went with its lock


def test_turned_off_and_key_follows_the_install(cache, monkeypatch):
    monkeypatch.setenv("CONNECT_CLASS_ARCHIVE", "off")
    assert ClassArchive.for_this_install() is None
    monkeypatch.delenv("CONNECT_CLASS_ARCHIVE")
    here = ClassArchive.for_this_install().path
    monkeypatch.setenv("SPARK_HOME", str(cache))  # another Spark build: another archive
    assert ClassArchive.for_this_install().path != here


def test_an_unwritable_cache_runs_without_archive(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("CONNECT_CACHE_DIR", str(blocker / "cache"))
    assert ClassArchive.for_this_install().java_options() == ""


def test_daemon_drops_only_the_zips_shipped_inside_an_installed_pyspark(tmp_path):
    package = tmp_path / "site-packages" / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shipped = [str(package / "python" / "lib" / "pyspark.zip"), str(package / "python" / "lib" / "py4j-0.10.9.9-src.zip")]
    spark_home_zip = str(tmp_path / "opt" / "spark" / "python" / "lib" / "pyspark.zip")  # no package beside it
    paths = [*shipped, spark_home_zip, str(tmp_path / "site-packages"), "/usr/lib/python311.zip"]
    assert _shipped_zips(paths) == set(shipped)
