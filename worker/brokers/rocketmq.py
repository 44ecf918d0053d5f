"""Apache RocketMQ 5.x from Maven Central: the pinned jars and the files a name server and a broker need.

``rocketmq-broker`` brings ``rocketmq-tools`` (``MQAdminStartup``) and RocketMQ's own shaded
logback (``rocketmq-logback-classic``, configured by ``-Drmq.logback.configurationFile``): nothing
needs adding to the pom. Without a configuration file of ours, logback picks whichever
``rmq.*.logback.xml`` comes first on the classpath and writes under ``${user.home}/logs``.

Ports: the name server listens on one; the broker on ``listenPort`` and also on ``listenPort - 2``
(the "fast"/VIP remoting server) and ``listenPort + 1`` (the HA service): :func:`broker_port`
picks a port whose two neighbours are free too. Both bind 127.0.0.1 (``bindAddress``; the HA
service binds every interface, which a standalone master never serves).

Sized for tests on a small machine: small heaps, serial GC, two processors, C1 only, 32 MiB commit
log files, 60,000-entry consume queue files and 8 MiB timer log files (defaults 1 GiB, 300,000 and
100 MiB: mapped and sparse, but each new file is pre-allocated). The timer wheel stays on although
nothing here sends delayed messages: without it DELETE_TOPIC_IN_BROKER fails (5.3.3 reads the
timer store's metrics unguarded: a NullPointerException answered as SYSTEM_ERROR).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from xml.sax.saxutils import escape

from worker.brokers.maven import Bundle, classpath

__all__ = ["JAVA_OPENS", "ROCKETMQ", "ROCKETMQ_VERSION", "authentication", "broker_conf", "broker_port", "java_argv",
           "logback_xml", "namesrv_properties"]

ROCKETMQ_VERSION = "5.3.3"
ROCKETMQ = Bundle("rocketmq", (f"org.apache.rocketmq:rocketmq-namesrv:{ROCKETMQ_VERSION}",
                               f"org.apache.rocketmq:rocketmq-broker:{ROCKETMQ_VERSION}"))

# What RocketMQ's runbroker.sh/runserver.sh pass on Java 9+ (it reflects into NIO buffers and cleaners).
JAVA_OPENS = ("--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
              "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED")
# tls.server.mode=disabled: in its default mode (permissive) every remoting server makes a self-signed
# certificate at start, an RSA key pair each: 20 s of a loaded core for the broker's two servers.
JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:MaxMetaspaceSize=160m",
             "-XX:ReservedCodeCacheSize=48m", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
             "-Dtls.server.mode=disabled")

CLUSTER = "DefaultCluster"


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def broker_port(attempts: int = 200) -> int:
    """A free loopback port P with P-2 and P+1 free too (the broker binds all three)."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 1026 and port < 65535 and _free(port - 2) and _free(port + 1):
            return port
    raise RuntimeError(f"no free loopback port P with P-2 and P+1 free after {attempts} tries")


def _properties(settings: dict[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def namesrv_properties(*, port: int, extra: dict[str, str] | None = None) -> str:
    return _properties({"listenPort": port, "bindAddress": "127.0.0.1", **(extra or {})})


def broker_conf(*, name: str, port: int, namesrv: str, store: Path, extra: dict[str, str] | None = None) -> str:
    settings = {
        "brokerClusterName": CLUSTER,
        "brokerName": name,
        "brokerId": 0,
        "brokerRole": "ASYNC_MASTER",
        "namesrvAddr": namesrv,
        "brokerIP1": "127.0.0.1",
        "bindAddress": "127.0.0.1",
        "listenPort": port,
        "storePathRootDir": store,
        "storePathCommitLog": store / "commitlog",
        "autoCreateTopicEnable": "true",
        "autoCreateSubscriptionGroup": "true",
        "mappedFileSizeCommitLog": 32 * 1024 * 1024,
        "mappedFileSizeConsumeQueue": 60_000 * 20,  # entries of 20 bytes
        "mappedFileSizeTimerLog": 8 * 1024 * 1024,
        "flushDiskType": "ASYNC_FLUSH",
        # flow control: a send waiting over 200 ms in the broker's queue, or a store write over 1 s,
        # is answered SYSTEM_BUSY (retriable); clients here pipeline thousands of sends on 2 loaded cores
        "waitTimeMillsInSendQueue": 5000,
        # one send thread, as 4.x had: 5.x's min(cores, 4) threads may store sends pipelined to one
        # queue out of order (the sink keeps one batch in flight per queue; the tests' producers pipeline)
        "sendMessageThreadPoolNums": 1,
        "osPageCacheBusyTimeOutMills": 5000,
        # the timer's flush compares its 38 MiB wheel byte by byte with the mapped file each interval
        # (default 1 s): a quarter of a core on an idle broker. Only delayed messages' progress lives
        # there (a clean shutdown flushes it anyway), and nothing here sends delayed messages.
        "timerFlushIntervalMs": 60_000,
        **(extra or {}),
    }
    return _properties(settings)


def authentication(access_key: str, secret_key: str) -> dict[str, str]:
    """``broker.conf`` settings switching on 5.x authentication (ACL 2.0; 5.3 dropped the plain ACL
    of 4.x) with one user: requests must be signed as ``AclClientRPCHook`` signs them (HmacSHA1 of
    the ext fields and body, the project's ``AclSigner``) or are answered NO_PERMISSION. Users are
    kept in RocksDB under the store. The name server checks nothing. The secret is written to
    ``broker.conf`` in the instance's folder, never to a command line."""
    user = json.dumps({"username": access_key, "password": secret_key})
    provider = "org.apache.rocketmq.auth.authentication.provider"
    return {"authenticationEnabled": "true",
            "authenticationProvider": f"{provider}.DefaultAuthenticationProvider",
            "authenticationMetadataProvider": f"{provider}.LocalAuthenticationMetadataProvider",
            "initAuthenticationUser": user,
            "innerClientAuthenticationCredentials": json.dumps({"accessKey": access_key, "secretKey": secret_key})}


def logback_xml(what: str, level: str = "WARN") -> str:
    """Everything at ``level`` and above to stdout (the process's log), each line naming ``what``."""
    pattern = escape(f"[%d] %p {what} %c{{1}}: %m%n")
    return f"""<configuration>
  <appender name="out" class="org.apache.rocketmq.logging.ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>{pattern}</pattern></encoder>
  </appender>
  <root level="{escape(level)}"><appender-ref ref="out"/></root>
</configuration>
"""


def java_argv(main: list[str], *, heap: str, processors: int, home: Path, logback: Path,
              direct_memory: str | None = None) -> list[str]:
    """``java`` (``$JAVA_HOME/bin`` first, then PATH) running ``main`` on RocketMQ's jars (fetched on
    first use), with ``home`` as ``user.home`` and ``rocketmq.home.dir``."""
    java_home = os.environ.get("JAVA_HOME")
    java = (java_home and shutil.which("java", path=os.path.join(java_home, "bin"))) or shutil.which("java")
    if not java:
        raise RuntimeError("Apache RocketMQ needs Java 8+ (17 here): no java in $JAVA_HOME/bin or on PATH "
                           "(Debian: apt-get install openjdk-17-jre-headless)")
    lib = classpath(ROCKETMQ)[0].parent
    memory = [f"-Xmx{heap}", "-Xms32m"] + ([f"-XX:MaxDirectMemorySize={direct_memory}"] if direct_memory else [])
    return [java, *memory, f"-XX:ActiveProcessorCount={processors}", *JVM_FLAGS, *JAVA_OPENS,
            f"-Duser.home={home}", f"-Drocketmq.home.dir={home}", f"-Drmq.logback.configurationFile={logback}",
            "-cp", f"{lib}/*", *main]


if __name__ == "__main__":  # `python -m worker.brokers.rocketmq`: fetch (and compile the launcher) now, as make test does
    from worker.brokers.rocketmq_launcher import launcher_classpath

    print(classpath(ROCKETMQ)[0].parent)
    print(launcher_classpath(classpath(ROCKETMQ)[0].parent) or "no javac: a cluster is two JVMs")
