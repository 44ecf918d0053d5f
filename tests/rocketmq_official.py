"""The official RocketMQ C++ client (rocketmq-client-cpp 2.1.0, through rocketmq-client-python 2.0.0)
for interop tests, run in subprocesses: ``python tests/rocketmq_official.py produce|consume ...``.

No package registry serves the official ``librocketmq.so``: the PyPI sdist ``rocketmq-python-cvs``
2.1.0.3 holds a prebuilt one exporting what the binding needs. :func:`ensure_lib` downloads that
sdist with pip (never installs it: it ships its own, different, ``rocketmq`` package), checks its
hash and extracts the library into a cache directory. :func:`load` makes the binding find it: the
binding asks ``ctypes.util.find_library('rocketmq')`` at import time and has no setting of its own.

Known limits of this build, worked around here: ``PushConsumer.shutdown`` crashes (SIGSEGV, upstream
ISSUE #286), so a consumer process ends with ``os._exit``; its default log directory is
``/logs/rocketmq-client``, so ``ROCKETMQ_CLIENT_LOG_DIR`` is always set.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes.util
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

SDIST = ("rocketmq-python-cvs", "2.1.0.3", "99e4ce8008554a74193a3ad94b60f939a4666c48ffabbf4c4417a109daf1419d")
LIB_MEMBER = "rocketmq-python-cvs-2.1.0.3/rocketmq/librocketmq.so"
LIB_SHA256 = "ed3fce39f2b926637637a2b8b9122799f207b0cdf98dbd9110505bf43170fa30"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_dir() -> Path:
    base = os.environ.get("CONNECT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "connect-bridge")
    return Path(base) / "rocketmq-cpp-2.1.0"


def ensure_lib(target: Path | None = None) -> Path:
    """The path of ``librocketmq.so``, downloaded and extracted on first use (hashes checked)."""
    target = target or cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    lib = target / "librocketmq.so"
    if lib.is_file() and _sha256(lib) == LIB_SHA256:
        return lib
    name, version, digest = SDIST
    sdist = target / f"{name}-{version}.tar.gz"
    if not (sdist.is_file() and _sha256(sdist) == digest):
        subprocess.run([sys.executable, "-m", "pip", "download", f"{name}=={version}", "--no-deps", "--no-binary",
                        ":all:", "--disable-pip-version-check", "-q", "-d", str(target)], check=True)
    if _sha256(sdist) != digest:
        raise RuntimeError(f"{sdist}: unexpected sha256 {_sha256(sdist)}")
    tmp = lib.with_suffix(".tmp")
    with tarfile.open(sdist, "r:gz") as tf:
        tmp.write_bytes(tf.extractfile(tf.getmember(LIB_MEMBER)).read())
    if _sha256(tmp) != LIB_SHA256:
        tmp.unlink()
        raise RuntimeError(f"{LIB_MEMBER} in {sdist}: unexpected sha256")
    tmp.chmod(0o755)
    tmp.replace(lib)
    return lib


def load(lib: Path, log_dir: str):
    """``rocketmq.client`` bound to ``lib``."""
    os.makedirs(log_dir, exist_ok=True)
    os.environ["ROCKETMQ_CLIENT_LOG_DIR"] = log_dir
    original = ctypes.util.find_library
    ctypes.util.find_library = lambda name: str(lib) if name == "rocketmq" else original(name)
    try:
        import rocketmq.client
    finally:
        ctypes.util.find_library = original
    return rocketmq.client


def _text(v):
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v


def produce(client, args) -> int:
    from rocketmq import ffi

    producer = client.Producer(args.group, timeout=5000)
    producer.set_name_server_address(args.namesrv)
    ffi.dll.SetProducerInstanceName(producer._handle, f"interop-producer-{os.getpid()}".encode())
    producer.start()
    failed = 0
    try:
        for i in range(args.n):
            msg = client.Message(args.topic)
            msg.set_keys(f"key-{i}")
            msg.set_tags(args.tag)
            msg.set_property("seq", str(i))
            msg.set_property("color", "red")
            msg.set_body(f"{args.body} #{i}")
            try:
                r = producer.send_sync(msg)
                rec = {"i": i, "ok": r.status == client.SendStatus.OK, "msg_id": r.msg_id, "offset": r.offset}
            except Exception as exc:  # noqa: BLE001 - reported to the test
                rec = {"i": i, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            failed += not rec["ok"]
            print(json.dumps(rec), flush=True)
    finally:
        producer.shutdown()
    return 1 if failed else 0


def consume(client, args) -> int:
    consumer = client.PushConsumer(args.group)
    consumer.set_name_server_address(args.namesrv)
    consumer.set_instance_name(f"interop-consumer-{os.getpid()}")
    lock, done, count = threading.Lock(), threading.Event(), [0]

    def on_message(msg):
        rec = {"topic": msg.topic, "tags": _text(msg.tags), "keys": _text(msg.keys), "body": _text(msg.body),
               "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "id": msg.id,
               "props": {k: _text(msg.get_property(k)) for k in args.props.split(",") if msg.get_property(k)}}
        with lock:
            count[0] += 1
            print(json.dumps(rec), flush=True)
            if count[0] >= args.expect:
                done.set()
        return client.ConsumeStatus.CONSUME_SUCCESS

    consumer.subscribe(args.topic, on_message, expression=args.expr)
    consumer.start()
    reached = done.wait(args.timeout)
    time.sleep(0.5)  # callbacks in flight finish; offsets were committed with the pulls
    sys.stdout.flush()
    os._exit(0 if reached else 2)  # shutdown() crashes in this build (ISSUE #286)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["produce", "consume"])
    ap.add_argument("namesrv")
    ap.add_argument("topic")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--group", default="interop")
    ap.add_argument("--tag", default="TagA")
    ap.add_argument("--body", default="from the C++ client")
    ap.add_argument("--expr", default="*")
    ap.add_argument("--expect", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--props", default="seq,color,origin")
    args = ap.parse_args()
    client = load(Path(args.lib), args.log_dir)
    with contextlib.suppress(BrokenPipeError):
        return produce(client, args) if args.mode == "produce" else consume(client, args)
    return 1


if __name__ == "__main__":
    sys.exit(main())
