"""A name server and a broker of Apache RocketMQ in one JVM: a ten-line launcher compiled once.

RocketMQ ships ``NamesrvStartup`` and ``BrokerStartup`` as two programs, so a cluster costs two JVMs:
two heaps, two JIT compilers, two sets of GC and timer threads. ``NamesrvStartup.main0`` returns once
the name server listens and ``BrokerStartup.start`` once the broker does, so one ``main`` can run
both, the broker registering with a name server already up. Each keeps its own shutdown hook.

The launcher is compiled with ``javac`` (a JDK, not only a JRE) against the fetched jars, once, into
the bundle's cache folder; :func:`launcher_classpath` answers ``None`` when no ``javac`` is found
(the caller then starts two JVMs).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["MAIN", "SOURCE", "javac", "launcher_classpath"]

MAIN = "RocketMQPair"
SOURCE = """import org.apache.rocketmq.broker.BrokerStartup;
import org.apache.rocketmq.namesrv.NamesrvStartup;

/** Apache RocketMQ's name server and broker in one JVM: args are namesrv.properties and broker.conf. */
public final class RocketMQPair {
    public static void main(String[] args) throws Exception {
        NamesrvStartup.main0(new String[] {"-c", args[0]});  // exits the JVM when it fails
        BrokerStartup.start(BrokerStartup.createBrokerController(new String[] {"-c", args[1]}));
    }
}
"""


def javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    return (home and shutil.which("javac", path=os.path.join(home, "bin"))) or shutil.which("javac")


def launcher_classpath(lib: Path) -> Path | None:
    """The folder holding ``RocketMQPair.class`` compiled against the jars in ``lib`` (compiled on
    first use, under a lock: pytest-xdist workers share it), or ``None`` without ``javac``."""
    compiler = javac()
    if compiler is None:
        return None
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    folder = lib.parent / f"launcher-{digest}"
    if (folder / f"{MAIN}.class").is_file():
        return folder
    with open(lib.parent / f"launcher-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / f"{MAIN}.class").is_file():
            return folder
        with tempfile.TemporaryDirectory(dir=lib.parent) as work:
            source = Path(work) / f"{MAIN}.java"
            source.write_text(SOURCE)
            out = Path(work) / "classes"
            done = subprocess.run([compiler, "-nowarn", "-cp", f"{lib}/*", "-d", str(out), str(source)],
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"compiling the one-JVM RocketMQ launcher with {compiler} failed: "
                                   f"{done.stderr.strip()[-2000:]}")
            os.replace(out, folder)
    return folder
