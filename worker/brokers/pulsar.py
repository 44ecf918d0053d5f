"""Apache Pulsar 4.0 standalone from Maven Central: the pinned jars and the files one standalone needs.

One process runs a bookie and the broker, with its metadata in RocksDB (``rocksdb://``, PIP-117:
no ZooKeeper, no stream storage) and no functions worker (``-nfw``). All of it listens on loopback
ports chosen by the caller: the broker (binary protocol), the web service (admin REST API) and the
bookie. Sized for tests on a small machine: small bookie caches, few threads, no load balancer.

Pins: Pulsar 4.0.7 (the 4.0 LTS line; Java 17). The pom of 4.0.8 names ``jetcd-core-shaded:4.0.8``,
which Maven Central does not serve to us, so 4.0.8 cannot be resolved. ``pulsar-broker`` brings
log4j-api and slf4j-api 2 but not log4j-core nor the binding between them (the release tarball
adds both): ``log4j-core`` and ``log4j-slf4j2-impl`` at Pulsar's log4j2 version.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote
from xml.sax.saxutils import quoteattr

from worker.brokers.maven import Bundle, classpath

__all__ = ["PULSAR", "PULSAR_VERSION", "admin_request", "create_partitioned_topics", "java_argv", "log4j2_xml",
           "standalone_args", "standalone_conf", "wait_ready"]

PULSAR_VERSION = "4.0.7"
LOG4J2_VERSION = "2.23.1"  # what Pulsar 4.0.7 builds with
PULSAR = Bundle("pulsar", (f"org.apache.pulsar:pulsar-broker:{PULSAR_VERSION}",
                           f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J2_VERSION}",
                           f"org.apache.logging.log4j:log4j-core:{LOG4J2_VERSION}"))

# What bin/pulsar passes to every JVM it starts (Java 17): the module openings BookKeeper and Netty
# use, Netty's reflective access, and BookKeeper's drivers for Pulsar's metadata store.
PULSAR_JVM_FLAGS = (
    "--add-opens", "java.base/java.io=ALL-UNNAMED", "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED", "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true", "-Djava.net.preferIPv4Stack=true", "-Dlog4j2.is.webapp=false",
    "-Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
)


def standalone_conf(*, cluster: str, broker_port: int, web_port: int, partitions: int = 0,
                    extra: dict[str, str] | None = None) -> str:
    """The settings both the broker and the bookie read (standalone loads one file for both).
    ``partitions``: topics created on first use are partitioned with that many partitions (0: not
    partitioned, Pulsar's default)."""
    settings = {
        "clusterName": cluster,
        "bindAddress": "127.0.0.1",
        "advertisedAddress": "127.0.0.1",
        "brokerServicePort": str(broker_port),
        "webServicePort": str(web_port),
        # one bookie: every ledger on it
        "managedLedgerDefaultEnsembleSize": "1",
        "managedLedgerDefaultWriteQuorum": "1",
        "managedLedgerDefaultAckQuorum": "1",
        "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
        "loadBalancerEnabled": "false",
        # the bookie: on loopback, small caches (defaults: a quarter of direct memory each)
        "allowLoopback": "true",
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": "16",
        "dbStorage_readAheadCacheMaxSizeMb": "16",
        "dbStorage_rocksDB_blockCacheSize": str(8 * 1024 * 1024),
        "dbStorage_rocksDB_writeBufferSizeMB": "4",
        "dbStorage_rocksDB_sstSizeInMB": "4",
        "journalSyncData": "false",
        "journalMaxGroupWaitMSec": "1",
        "diskUsageThreshold": "0.99",
        "diskUsageWarnThreshold": "0.99",
        # the bookie's frames must take a whole broker message (maxMessageSize 5 MiB) with its
        # headers: BookKeeper's default (5 MiB exactly) drops a 5 MiB chunk and the send times out
        "nettyMaxFrameSizeBytes": str(5 * 1024 * 1024 + 10 * 1024),
        # few threads: two cores shared with everything else
        "numIOThreads": "2",
        "numHttpServerThreads": "8",
        "numOrderedExecutorThreads": "2",
        "numExecutorThreadPoolSize": "2",
        "numCacheExecutorThreadPoolSize": "2",
        "managedLedgerNumSchedulerThreads": "1",
        "bookkeeperClientNumWorkerThreads": "1",
        "bookkeeperClientNumIoThreads": "2",
        "numWorkerThreadsForNonPersistentTopic": "1",
        "webSocketServiceEnabled": "false",
        "defaultNumberOfNamespaceBundles": "1",  # one bundle to load per namespace (default 4)
        "managedLedgerCacheSizeMB": "32",
        # topics stay until deleted (tests create them with the admin API and write later)
        "brokerDeleteInactiveTopicsEnabled": "false",
        "brokerShutdownTimeoutMs": "3000",
        # every entry carries its partition's message index: what the Pulsar source's gap detection
        # reads (connectors.pulsar.gaps)
        "brokerEntryMetadataInterceptors": "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
        "allowAutoTopicCreationType": "partitioned" if partitions else "non-partitioned",
        "defaultNumPartitions": str(max(partitions, 1)),
        **(extra or {}),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def standalone_args(config: Path, data_dir: Path, bookie_port: int) -> list[str]:
    """``PulsarStandaloneStarter``'s arguments: no functions worker, no stream storage, metadata in
    RocksDB and bookie data under ``data_dir`` (a ZooKeeper folder that never exists there keeps the
    standalone on RocksDB), the bookie on ``bookie_port``."""
    return ["org.apache.pulsar.PulsarStandaloneStarter", "--config", str(config), "-nfw", "-nss",
            "--metadata-dir", str(data_dir / "metadata"), "--bookkeeper-dir", str(data_dir / "bookkeeper"),
            "--zookeeper-dir", str(data_dir / "zookeeper"), "--bookkeeper-port", str(bookie_port)]


def log4j2_xml(log_file: Path, level: str = "WARN") -> str:
    """Everything at ``level`` and above to ``log_file``; no console, no shutdown hook."""
    return f"""<Configuration status="warn" shutdownHook="disable">
  <Appenders>
    <File name="file" fileName={quoteattr(str(log_file))}><PatternLayout pattern="[%d] %p [%t] %m (%c)%n"/></File>
  </Appenders>
  <Loggers><Root level="{level}"><AppenderRef ref="file"/></Root></Loggers>
</Configuration>
"""


def java_argv(main: list[str], *, heap: str, direct: str, flags: tuple[str, ...], log4j2_config: Path) -> list[str]:
    """``java`` (``$JAVA_HOME/bin`` first, then PATH) running ``main`` on Pulsar's jars (fetched on
    first use) with ``heap`` and ``direct`` memory bounds, bin/pulsar's flags and ``flags``."""
    home = os.environ.get("JAVA_HOME")
    java = (home and shutil.which("java", path=os.path.join(home, "bin"))) or shutil.which("java")
    if not java:
        raise RuntimeError("Apache Pulsar needs Java 17+: no java in $JAVA_HOME/bin or on PATH "
                           "(Debian: apt-get install openjdk-17-jre-headless)")
    lib = classpath(PULSAR)[0].parent
    return [java, f"-Xmx{heap}", f"-XX:MaxDirectMemorySize={direct}", *flags, *PULSAR_JVM_FLAGS,
            f"-Dlog4j.configurationFile={log4j2_config}", "-cp", f"{lib}/*", *main]


def admin_request(admin_url: str, method: str, path: str, body=None, timeout: float = 30.0):
    """One admin REST call; the decoded JSON answer (None when empty). An HTTP error raises
    ``urllib.error.HTTPError`` (its ``code`` is Pulsar's status)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{admin_url.rstrip('/')}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        text = answer.read()
    return json.loads(text) if text else None


WARM_UP_TOPIC = "persistent://public/default/__connect-warm-up"


def wait_ready(admin_url: str, service_url: str, alive, timeout: float, what: str) -> None:
    """Until the admin API lists ``public/default`` (the standalone creates it once its broker
    serves), then one message is written there to a topic deleted again: the namespace's bundle and
    its topic-policies system topic are loaded, so the first real topic does not pay for them (a
    first producer took over 10 s on a loaded machine). ``alive()`` False (the process ended) or
    ``timeout`` raise RuntimeError."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive():
            raise RuntimeError(f"{what} exited before it served")
        try:
            if "public/default" in (admin_request(admin_url, "GET", "/admin/v2/namespaces/public", timeout=5) or []):
                break
        except (OSError, ValueError):  # not listening yet, or answering 5xx/404 while it starts
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not serve public/default within {timeout:.0f}s")
        time.sleep(0.5)
    _warm_up(admin_url, service_url, max(1.0, deadline - time.monotonic()), what)


def _warm_up(admin_url: str, service_url: str, timeout: float, what: str) -> None:
    """One message stored, tried again until ``timeout``: right after a restart the admin API may
    answer while the binary protocol still refuses (ConnectError, "service is not ready")."""
    import pulsar

    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 1.0)
        client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
                               operation_timeout_seconds=max(int(left), 1))
        try:
            producer = client.create_producer(WARM_UP_TOPIC, send_timeout_millis=int(left * 1000))
            producer.send(b"ready")
            producer.close()
            break
        except Exception as exc:  # noqa: BLE001 - pulsar raises its own exception types
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{what} did not take a message within {timeout:.0f}s: {exc}") from None
        finally:
            client.close()
        time.sleep(0.5)
    admin_request(admin_url, "DELETE", f"{_topic_path(WARM_UP_TOPIC)}?force=true", timeout=timeout)


def _topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` (or a short name, in public/default) as its admin REST path."""
    if "://" not in topic:
        topic = f"persistent://public/default/{topic}"
    domain, rest = topic.split("://", 1)
    return f"/admin/v2/{domain}/" + "/".join(quote(part, safe="") for part in rest.split("/"))


def create_partitioned_topics(admin_url: str, topics: dict[str, int]) -> None:
    """Each topic created partitioned with its count through the admin API; one that exists
    already with that count is fine, with another count an error."""
    for topic, count in topics.items():
        path = f"{_topic_path(topic)}/partitions"
        try:
            admin_request(admin_url, "PUT", path, count)
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise RuntimeError(f"creating {topic} with {count} partitions failed: HTTP {e.code} "
                                   f"{e.read()[:300]!r}") from None
            have = (admin_request(admin_url, "GET", path) or {}).get("partitions")
            if have != count:
                raise RuntimeError(f"{topic} exists with {have} partitions, not {count}") from None


if __name__ == "__main__":  # `python -m worker.brokers.pulsar`: fetch now
    print(classpath(PULSAR)[0].parent)
