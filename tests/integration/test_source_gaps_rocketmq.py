"""RocketMQ: a committed queue offset below the queue's new min offset is a gap (issue 40), on an
Apache RocketMQ broker that deletes its commit log at once (small files, fileReservedTime 0, every
hour a deletion hour): the queue's min offset moves past what a stopped pair committed."""

from __future__ import annotations

import time

import pytest
import rocketmq_util
from service_util import wait_for

from connect.records import partition_key
from connect.source import OffsetStorageReader, SourceTaskContext
from connect.source.gaps import SourceGapError
from connectors.rocketmq.source import RocketMQSourceTask
from connectors.rocketmq.sync_client import SyncRocketMQClient

pytestmark = pytest.mark.timeout(400)

N = 1000


@pytest.fixture(scope="module")
def retaining_rocketmq(tmp_path_factory):
    from worker.embedded import ApacheRocketMQ

    root = tmp_path_factory.mktemp("rocketmq-retention")
    broker = ApacheRocketMQ(root / "r", log_path=root / "r.log", broker_extra={
        "mappedFileSizeCommitLog": str(32 * 1024), "mappedFileSizeConsumeQueue": str(20 * 50),
        "fileReservedTime": "0", "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
        "cleanResourceInterval": "500", "deletePhysicFilesInterval": "0", "destroyMapedFileIntervalForcibly": "0",
        # a loaded test machine: no flow control on sends waiting a few seconds
        "waitTimeMillsInSendQueue": "60000", "osPageCacheBusyTimeOutMills": "60000"})
    broker.start()
    yield broker
    broker.stop()


def _min_offset(broker, topic: str) -> int:
    with SyncRocketMQClient(broker.namesrv, timeout=30) as c:
        return c.min_offset(broker.broker_addr, topic, 0)


def _task(broker, topic: str, policy: str, committed: int) -> RocketMQSourceTask:
    sp = {"topic": topic, "broker": broker.name, "queue": 0}
    config = {"namesrv.addr": broker.namesrv, "topics": topic, "task.assignment": f"{topic}@{broker.name}:0",
              "source.gap.policy": policy}
    task = RocketMQSourceTask()
    task.start(config, SourceTaskContext("gaps-0", config, OffsetStorageReader({partition_key(sp): {"offset": committed}})))
    return task


def test_a_committed_offset_below_the_queues_new_min_offset_is_a_gap(retaining_rocketmq, unique):
    broker = retaining_rocketmq
    topic = f"gaps-{unique}"[:100]
    rocketmq_util.produce(broker, topic, N, 1)  # commit log files of 32 KiB, ~150 messages each
    low = wait_for(lambda: (m := _min_offset(broker, topic)) > 10 and m, 120, "the commit log to be deleted")

    failing = _task(broker, topic, "fail", 9)  # committed 9: resumes at 10, gone
    try:
        with pytest.raises(SourceGapError, match=rf"{topic}\[{broker.name}:0\] offsets 10\.\.{low - 1} "
                                                 rf"\({low - 10} record\(s\)\) were never copied"):
            failing.poll()
        assert [(g.first, g.last, g.records) for g in failing.take_gaps()] == [(10, low - 1, low - 10)]
    finally:
        failing.stop()

    task = _task(broker, topic, "report", 9)
    try:
        got: list = []
        deadline = time.monotonic() + 60
        while (not got or got[-1].source_offset["offset"] < N - 1) and time.monotonic() < deadline:
            got.extend(task.poll() or [])
        # retention goes on while the task reads (every closed file is deleted at once here): the pulls
        # that find their offset moved (PULL_OFFSET_MOVED) are gaps too, each starting where the last ended
        gaps = task.take_gaps()
        assert gaps and gaps[0].first == 10 and all(g.policy == "report" for g in gaps)
        offsets = [r.source_offset["offset"] for r in got]
        assert offsets == sorted(set(offsets)) and offsets[-1] == N - 1
        # copied + counted == produced after the committed offset (10..N-1), none twice
        assert len(got) + sum(g.records for g in gaps) == N - 10
    finally:
        task.stop()
