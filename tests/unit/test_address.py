"""worker.api.address: where a worker listens, written whole into its data directory, its generation
counting its starts there, and the errors of a reader that finds no usable document."""

from __future__ import annotations

import os
import stat

import orjson
import pytest

from connect.errors import ConnectError
from worker.api.address import ADDRESS_FILE, read_address, record_start


def test_each_start_writes_the_url_and_the_next_generation(tmp_path):
    first = record_start(tmp_path / "data", scheme="http", host="127.0.0.1", port=8083, worker_id="w")
    assert first.generation == 1 and first.url == "http://127.0.0.1:8083" and first.pid == os.getpid()
    second = record_start(tmp_path / "data", scheme="https", host="0.0.0.0", port=9000, worker_id="w")
    assert second.generation == 2 and second.url == "https://127.0.0.1:9000"  # a wildcard: reached on loopback
    assert read_address(tmp_path / "data") == second
    path = tmp_path / "data" / ADDRESS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in (tmp_path / "data").iterdir()] == [ADDRESS_FILE]  # no temporary file left
    assert record_start(tmp_path / "v6", scheme="http", host="::", port=1, worker_id="w").url == "http://[::1]:1"


def test_a_document_that_is_not_a_workers_starts_generations_afresh_and_is_named_by_the_reader(tmp_path):
    path = tmp_path / ADDRESS_FILE
    path.write_text("{half a docu")
    with pytest.raises(ConnectError, match="not the JSON a worker writes"):
        read_address(tmp_path)
    assert record_start(tmp_path, scheme="http", host="127.0.0.1", port=1, worker_id="w").generation == 1
    path.write_bytes(orjson.dumps({"url": "http://x:1"}))
    with pytest.raises(ConnectError, match="lacks url, pid"):
        read_address(tmp_path)
    with pytest.raises(ConnectError, match="no worker has started with data directory"):
        read_address(tmp_path / "elsewhere")


def test_the_address_is_never_written_through_a_symlink(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    (tmp_path / "data").mkdir()
    os.symlink(target, tmp_path / "data" / f".{ADDRESS_FILE}.{os.getpid()}.tmp")
    with pytest.raises(OSError):
        record_start(tmp_path / "data", scheme="http", host="127.0.0.1", port=1, worker_id="w")
    assert target.read_text() == "keep"


def _plant(directory, url: str = "http://127.0.0.1:1"):
    (directory / ADDRESS_FILE).write_bytes(orjson.dumps({"url": url, "pid": 1, "worker_id": "w", "started_at": 1.0,
                                                         "generation": 1}))


def test_a_document_others_could_have_written_is_refused_naming_why(tmp_path):
    from worker.api.address import UntrustedAddressFile

    open_dir = tmp_path / "open"
    open_dir.mkdir()
    _plant(open_dir)
    os.chmod(open_dir, 0o777)
    with pytest.raises(UntrustedAddressFile, match="its directory .* writable by its group or by others"):
        read_address(open_dir)
    own = tmp_path / "own"
    own.mkdir(mode=0o700)
    _plant(own)
    os.chmod(own / ADDRESS_FILE, 0o666)
    with pytest.raises(UntrustedAddressFile, match="refusing .*rest.json: it is writable"):
        read_address(own)
    os.chmod(own / ADDRESS_FILE, 0o600)
    assert read_address(own).url == "http://127.0.0.1:1"


def test_a_symlinked_document_or_a_host_name_url_is_refused(tmp_path):
    from worker.api.address import UntrustedAddressFile

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _plant(elsewhere)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    os.symlink(elsewhere / ADDRESS_FILE, data / ADDRESS_FILE)
    with pytest.raises(UntrustedAddressFile, match="symbolic link"):
        read_address(data)
    os.unlink(data / ADDRESS_FILE)
    _plant(data, "https://attacker.example:8083")
    with pytest.raises(UntrustedAddressFile, match="not http\\(s\\) to a loopback or IP address"):
        read_address(data)
    for url in ("http://localhost:8083", "https://[::1]:1", "http://10.0.0.7:8083"):
        _plant(data, url)
        assert read_address(data).url == url
