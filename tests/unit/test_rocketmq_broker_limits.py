"""The embedded RocketMQ broker's defences, in process: header decoding, names, ACL accounts and
signatures, and the store's data directory, descriptor cache, waiters and metadata saves (issue 20).
Over the wire, against a broker process: tests/integration/test_rocketmq_broker_abuse.py."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest

from connectors.rocketmq.acl import ACL_ENV, check_access, load_accounts
from connectors.rocketmq.datadir import DataDirBusyError
from connectors.rocketmq.protocol import MessageExt, ProtocolError, RemotingCommand
from connectors.rocketmq.remoting import AclSigner
from connectors.rocketmq.store import MessageStore, TopicConfig
from connectors.rocketmq.validation import Refused, check_group_name, check_topic_name, field


def _frame(header: bytes) -> bytes:
    return struct.pack(">I", len(header)) + header


@pytest.mark.parametrize("header", [b'{"code":10,"opaque":"' + b"9" * 25 + b'"}', b'{"code":10,"opaque":18446744073709551615}',
                                    b'{"code":1099511627776}', b'{"code":10,"flag":-2147483649}',
                                    b'{"code":10,"version":2147483648}'])
def test_header_numbers_beyond_32_bits_are_decode_errors(header):
    with pytest.raises(ProtocolError, match="32 bits|not an integer"):
        RemotingCommand.decode(_frame(header))


def test_names_follow_rocketmqs_rules_whole():
    for ok in ("orders", "a" * 127, "%RETRY%g", "A-b_c|d%"):
        check_topic_name(ok)
    for bad in ("evil\n", "", "a" * 128, "a/b", "a b", "\u00e9", "..", "%" + "a" * 255):
        with pytest.raises(Refused):
            check_topic_name(bad)
    check_group_name("g" * 255)
    for bad in ("g" * 256, "g\n", "", "g.h", "g@h"):
        with pytest.raises(Refused):
            check_group_name(bad)


def test_integer_fields_must_fit_a_java_long():
    cmd = RemotingCommand(15, ext_fields={"a": str(1 << 63), "b": str(-(1 << 63)), "c": "x" * 9000})
    with pytest.raises(Refused, match="beyond a Java long"):
        field(cmd, "a", int)
    assert field(cmd, "b", int) == -(1 << 63)
    with pytest.raises(Refused) as refused:
        field(cmd, "c", int)
    assert len(refused.value.remark) < 200  # the value is cut, not echoed whole


def test_acl_accounts_from_a_file_and_the_environment_never_echo_a_secret(tmp_path, caplog):
    secrets = tmp_path / "acl"
    secrets.write_text("# comment\n\nfile:one\nboth:from-file\n")
    secrets.chmod(0o600)
    accounts = load_accounts(file=secrets, env={ACL_ENV: "env:two, both:from-env\nthird:3"})
    assert accounts == {"file": "one", "both": "from-env", "env": "two", "third": "3"}
    assert load_accounts(env={}) == {}
    with pytest.raises(ValueError) as bad:
        load_accounts(env={ACL_ENV: "ok:1 missing-colon-s3cret"})
    assert "s3cret" not in str(bad.value) and ACL_ENV in str(bad.value)
    secrets.chmod(0o644)
    load_accounts(file=secrets, env={})
    assert "chmod 600" in caplog.text
    assert load_accounts(env={}, inline=["cli:x"]) == {"cli": "x"} and "ps" in caplog.text


def test_signatures_are_checked_as_the_official_clients_sign_and_their_documented_limit():
    accounts = {"rocket": "s3cret"}
    cmd = RemotingCommand(10, ext_fields={"topic": "t", "queueId": "1", "b": "x"}, body=b"payload")
    AclSigner("rocket", "s3cret").sign(cmd)
    check_access(accounts, cmd)
    tampered = RemotingCommand(10, ext_fields=dict(cmd.ext_fields), body=b"other")
    with pytest.raises(Refused, match="signature"):
        check_access(accounts, tampered)
    with pytest.raises(Refused, match="No acl config"):
        check_access(accounts, RemotingCommand(10, ext_fields={"AccessKey": "nobody"}))
    # RocketMQ's limit, kept for wire compatibility (README): values are joined without separators
    # and the request code is not signed, so a re-cut or re-coded request passes with the same signature.
    recut = dict(cmd.ext_fields, b="x1", queueId="")  # keys in order b, queueId: "x" + "1" == "x1" + ""
    check_access(accounts, RemotingCommand(215, ext_fields=recut, body=b"payload"))


def _put(store: MessageStore, topic: str, queue: int, body: bytes) -> MessageExt:
    return store.put([MessageExt(topic, body, queue, 0)])[0]


def test_the_data_dir_is_private_locked_and_its_lock_never_followed(tmp_path):
    data = tmp_path / "a" / "b" / "data"
    store = MessageStore(data)
    try:
        for d in (tmp_path / "a", tmp_path / "a" / "b", data):
            assert d.stat().st_mode & 0o777 == 0o700
        store.set_topic("t", TopicConfig.make("t", 1))
        _put(store, "t", 0, b"x")
        for f in (data / "commitlog", data / "lock", data / "topics.json", data / "consumequeue" / "t" / "0"):
            assert f.stat().st_mode & 0o777 == 0o600, f
        with pytest.raises(DataDirBusyError, match=f"in use by another broker \\(pid {os.getpid()}"):
            MessageStore(data)
    finally:
        store.close()
    MessageStore(data).close()  # released on close
    trap = tmp_path / "trap"
    trap.mkdir()
    (tmp_path / "victim").write_text("keep")
    (trap / "lock").symlink_to(tmp_path / "victim")
    with pytest.raises(OSError, match="symlink"):
        MessageStore(trap)
    assert (tmp_path / "victim").read_text() == "keep"


def test_queue_files_go_through_a_bounded_descriptor_cache(tmp_path):
    store = MessageStore(tmp_path / "d", max_open_files=3)
    try:
        for t in range(10):
            store.set_topic(f"t{t}", TopicConfig.make(f"t{t}", 4))
            for q in range(4):
                _put(store, f"t{t}", q, f"{t}.{q}".encode())
                _put(store, f"t{t}", q, f"{t}.{q}.b".encode())
        assert store.open_queue_files == 3
    finally:
        store.close()
    store = MessageStore(tmp_path / "d", max_open_files=3)
    try:
        assert all(store.max_offset(f"t{t}", q) == 2 for t in range(10) for q in range(4))
        assert store.open_queue_files == 0  # recovery reads each file and closes it
    finally:
        store.close()


def test_long_poll_waiters_are_dropped_when_they_time_out(tmp_path):
    store = MessageStore(tmp_path / "d")
    store.set_topic("t", TopicConfig.make("t", 1))

    async def polls() -> None:
        await asyncio.gather(*(store.wait_message("t", 0, 0.01) for _ in range(3000)))
        assert store.waiters == 0
        woken = asyncio.ensure_future(store.wait_message("t", 0, 10))
        await asyncio.sleep(0.01)
        assert store.waiters == 1
        _put(store, "t", 0, b"x")
        await asyncio.wait_for(woken, 1)
        assert store.waiters == 0

    try:
        asyncio.run(polls())
    finally:
        store.close()


def test_a_metadata_change_that_cannot_be_saved_is_undone(tmp_path):
    store = MessageStore(tmp_path / "d")
    try:
        (tmp_path / "d" / ".topics.json.tmp").mkdir()
        with pytest.raises(OSError, match="cannot save topics.json"):
            store.set_topic("t", TopicConfig.make("t", 1))
        assert "t" not in store.topics
        (tmp_path / "d" / ".groups.json.tmp").mkdir()
        with pytest.raises(OSError):
            store.set_group("g", {"groupName": "g"})
        assert "g" not in store.groups
    finally:
        store.close()
