"""Apache Kafka 4.x from Maven Central: the pinned jars and the files one KRaft node needs.

One process is both broker and controller (``process.roles=broker,controller``) on two loopback
ports. Sized for tests and the demo on a small machine: one-partition internal topics with
replication 1, few threads, a 2 MiB cleaner buffer (default 128 MiB), no initial rebalance delay.

The pom of ``kafka_2.13`` brings log4j-core and slf4j-api 1.7 but no binding between them (Kafka's
release tarball adds it): ``log4j-slf4j-impl`` (the SLF4J 1.x binding; the 2.x one,
``log4j-slf4j2-impl``, stays silent next to slf4j-api 1.7) at Kafka's log4j2 version.
"""

from __future__ import annotations

import base64
import os
import shutil
import uuid
from pathlib import Path
from xml.sax.saxutils import quoteattr

from worker.brokers.maven import Bundle, classpath

__all__ = ["KAFKA", "KAFKA_VERSION", "MIRROR_CLIENT", "MIRROR_MAKER", "cluster_id", "java_argv", "log4j2_xml",
           "server_properties"]

KAFKA_VERSION = "4.4.0"
LOG4J2_VERSION = "2.25.5"  # what kafka-server 4.4.0 depends on
KAFKA = Bundle("kafka", (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
                         f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J2_VERSION}"))
# MirrorMaker 2's client library (MirrorClient, RemoteClusterUtils, Checkpoint): tests read our
# MM2-format checkpoints with it. 4.1.0: mvn found no connect-mirror-client 4.4.0 on Maven Central
# (2026-11-27: "Missing"); the checkpoint record format it reads is the same since Kafka 2.4.
MIRROR_CLIENT_VERSION = "4.1.0"
MIRROR_CLIENT = Bundle("mirror-client", (f"org.apache.kafka:connect-mirror-client:{MIRROR_CLIENT_VERSION}",))
# MirrorMaker 2 itself (dedicated mode: org.apache.kafka.connect.mirror.MirrorMaker), same version as
# its client; connect-runtime uses log4j-core classes but declares them compile-only
MIRROR_MAKER = Bundle("mirror-maker", (f"org.apache.kafka:connect-mirror:{MIRROR_CLIENT_VERSION}",
                                       f"org.apache.logging.log4j:log4j-core:{LOG4J2_VERSION}",
                                       f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J2_VERSION}"))

# StandardAuthorizer (KRaft's ACL store): ACLs are enforced; with no ACL on a resource everyone may
# use it, and the PLAINTEXT principal (ANONYMOUS: tests, tools, the controller link) is a super user.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "super.users": "User:ANONYMOUS",
}


def cluster_id() -> str:
    """A new cluster id as Kafka's ``Uuid.randomUuid().toString()`` makes it: 16 random bytes,
    URL-safe base64 without padding, never starting with ``-`` (Kafka's tools read that as a flag)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def server_properties(*, port: int, controller_port: int, advertised_port: int, data_dir: Path,
                      authorizer: bool = True, extra: dict[str, str] | None = None) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{advertised_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        # one node: every internal topic with one replica (else transactions and groups never start)
        # and one partition (defaults 50: slow to create, memory for nothing)
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024),
        "num.io.threads": "2",
        "num.network.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        # no time-based retention: tests and the demo write records with fixed past timestamps, which
        # a 7-day retention would delete within minutes (topics may still set retention.ms)
        "log.retention.ms": "-1",
        **(AUTHORIZER if authorizer else {}),
        **(extra or {}),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def log4j2_xml(log_file: Path, level: str = "WARN") -> str:
    """Everything at ``level`` and above to ``log_file``; no console, no shutdown hook (the JVM's
    own hook would log through a stopped context at exit)."""
    return f"""<Configuration status="warn" shutdownHook="disable">
  <Appenders>
    <File name="file" fileName={quoteattr(str(log_file))}><PatternLayout pattern="[%d] %p %m (%c)%n"/></File>
  </Appenders>
  <Loggers><Root level="{level}"><AppenderRef ref="file"/></Root></Loggers>
</Configuration>
"""


def java_argv(main: list[str], *, heap: str, flags: tuple[str, ...], log4j2_config: Path,
              bundle: Bundle = KAFKA) -> list[str]:
    """``java`` (``$JAVA_HOME/bin`` first, then PATH) running ``main`` on the jars of ``bundle``
    (Kafka's by default; fetched on first use) with a ``heap`` bound and ``flags``."""
    home = os.environ.get("JAVA_HOME")
    java = (home and shutil.which("java", path=os.path.join(home, "bin"))) or shutil.which("java")
    if not java:
        raise RuntimeError("Apache Kafka needs Java 17+: no java in $JAVA_HOME/bin or on PATH "
                           "(Debian: apt-get install openjdk-17-jre-headless)")
    lib = classpath(bundle)[0].parent
    return [java, f"-Xmx{heap}", *flags, f"-Dlog4j2.configurationFile={log4j2_config}", "-cp", f"{lib}/*", *main]


if __name__ == "__main__":  # `python -m worker.brokers.kafka`: fetch now (make test does, before pytest)
    print(classpath(KAFKA)[0].parent)
