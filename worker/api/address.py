"""Where a running worker listens, and how many times it has started: ``<data.dir>/rest.json``.

A worker under a supervisor (systemd, supervisord, a Kubernetes Deployment) comes back by itself
after its driver is lost; an operator or a script should not need to know which port it took
(``rest.port`` 0 picks a free one) to find it again. So the worker writes, once its REST socket is
bound, a small JSON document into its data directory (where its embedded stores and lock live)::

    {"url": "http://127.0.0.1:8083", "pid": 4711, "worker_id": "127.0.0.1:8083",
     "started_at": 1764130000.5, "generation": 3}

``connect connectors --data-dir DIR`` (or ``CONNECT_DATA_DIR``, the variable ``connect worker
start`` reads too) takes its URL from there when no ``--url`` is given.

``generation`` counts the starts of a worker on this data directory: the previous document's
generation + 1 (1 on a fresh directory). The console shows it with the uptime, so a restart by the
supervisor is visible.

The document is written whole or not at all (a temporary file in the same directory, fsynced, then
renamed over the old one), 0600 like the stores, and never through a symlink: a worker killed while
writing leaves the previous document, never half of one. A document that does not parse (written by
something else) is reported as such by :func:`read_address` and replaced at the next start. A
wildcard listen address (``0.0.0.0``, ``::``) is written as the loopback address of its family,
which is where a client on the same host reaches it.

The CLI sends its credentials to the URL it reads, so :func:`read_address` trusts the document only
when nobody but this user (or root) could have written it or its directory, and only for a loopback
or IP-literal URL; anything else needs ``--url``.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import stat
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import orjson

from connect.errors import ConnectError
from connect.files import private_dir
from worker.api.authpolicy import is_loopback

__all__ = ["ADDRESS_FILE", "WorkerAddress", "record_start", "read_address", "UntrustedAddressFile"]

ADDRESS_FILE = "rest.json"
_MAX_DOCUMENT = 64 << 10  # a worker writes about 150 bytes


@attrs.frozen
class WorkerAddress:
    url: str
    pid: int
    worker_id: str
    started_at: float  # Unix time
    generation: int

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _url(scheme: str, host: str, port: int) -> str:
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _previous_generation(path: Path) -> int:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return 0
    generation = doc.get("generation") if isinstance(doc, dict) else None
    return generation if isinstance(generation, int) and generation > 0 else 0


def record_start(data_dir: str | os.PathLike, *, scheme: str, host: str, port: int, worker_id: str) -> WorkerAddress:
    """Write this worker's address and next generation into ``data_dir`` (atomically); return them."""
    directory = private_dir(data_dir)
    path = directory / ADDRESS_FILE
    address = WorkerAddress(_url(scheme, host, port), os.getpid(), worker_id, time.time(),
                            _previous_generation(path) + 1)
    tmp = directory / f".{ADDRESS_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, orjson.dumps(address.as_dict()))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)  # whole or not at all
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)
    return address


class UntrustedAddressFile(ConnectError):
    """``rest.json`` exists but is not one the CLI may send credentials to; the message says why."""


def _check_owner(what: str, st: os.stat_result) -> str | None:
    """Why a file or directory with this status could have been written by someone else; None if it could not."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"{what} is owned by uid {st.st_uid}, neither you (uid {os.geteuid()}) nor root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _read_trusted(directory: Path) -> bytes:
    """The bytes of ``directory/rest.json`` when it and its directory can only have been written by
    this user (or root): both owned by us or root and not group- or world-writable, the file a
    regular file opened without following a symlink (checked on the open descriptors, so nothing can
    be swapped between the check and the read)."""
    path = directory / ADDRESS_FILE
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        why = _check_owner(f"its directory {directory}", os.fstat(dir_fd))
        if why is not None:
            raise UntrustedAddressFile(f"refusing {path}: {why}, so anyone could have planted it; give --url")
        try:
            fd = os.open(ADDRESS_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UntrustedAddressFile(f"refusing {path}: it is a symbolic link (never followed); give --url") from None
            raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        why = "it is not a regular file" if not stat.S_ISREG(st.st_mode) else _check_owner("it", st)
        if why is not None:
            raise UntrustedAddressFile(f"refusing {path}: {why}; give --url")
        return os.read(fd, _MAX_DOCUMENT)
    finally:
        os.close(fd)


def read_address(data_dir: str | os.PathLike) -> WorkerAddress:
    """The address a worker wrote into ``data_dir``; ConnectError saying what is wrong otherwise.

    The CLI sends its credentials to this URL, so the document is used only when nobody else could
    have written it (:func:`_read_trusted`) and its URL's host is loopback or an IP literal (a name
    could resolve anywhere): :class:`UntrustedAddressFile` otherwise."""
    path = Path(data_dir) / ADDRESS_FILE
    try:
        doc = orjson.loads(_read_trusted(Path(data_dir)))
    except FileNotFoundError:
        raise ConnectError(f"{path} does not exist: no worker has started with data directory {data_dir} "
                           "(connect worker start --data-dir ...), or give --url") from None
    except OSError as exc:
        raise ConnectError(f"{path} cannot be read: {exc.strerror}") from None
    except orjson.JSONDecodeError:
        raise ConnectError(f"{path} is not the JSON a worker writes; start the worker again or give --url") from None
    try:
        address = WorkerAddress(url=str(doc["url"]), pid=int(doc["pid"]), worker_id=str(doc["worker_id"]),
                                started_at=float(doc["started_at"]), generation=int(doc["generation"]))
    except (KeyError, TypeError, ValueError):
        raise ConnectError(f"{path} lacks url, pid, worker_id, started_at or generation; start the worker again "
                           "or give --url") from None
    parts = urlsplit(address.url)
    if parts.scheme not in ("http", "https") or not _ip_or_loopback(parts.hostname or ""):
        raise UntrustedAddressFile(f"refusing {path}: its URL is not http(s) to a loopback or IP address (a host "
                                   "name could lead anywhere); give --url")
    return address


def _ip_or_loopback(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return is_loopback(host)
    return True
