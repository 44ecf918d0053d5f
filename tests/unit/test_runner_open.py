"""sink.open is called once per source partition, however the source builds its partition dicts."""

from __future__ import annotations

from connect.records import ConnectRecord
from connect.sink import SinkTask
from connect.source import SourceTask
from connect.tasks.plan import PairPlan
from connect.tasks.policy import RunnerPolicy
from connect.tasks.runner import TaskPairRunner


class FreshDictSource(SourceTask):
    """Builds a new source_partition dict for every record (allowed, if slower)."""

    def start(self, config, context):
        self.sent = False

    def poll(self):
        if self.sent:
            return []
        self.sent = True
        return [ConnectRecord("t", None, b"v", None, None, {"topic": "t", "partition": i % 3}, {"offset": i // 3})
                for i in range(30)]


class OpenRecordingSink(SinkTask):
    def start(self, config, context):
        self.opened = []

    def put(self, records):
        pass

    def open(self, partitions):
        self.opened.extend(p["partition"] for p in partitions)


def test_open_once_per_partition_and_offsets_per_partition_with_fresh_dicts():
    source, sink = FreshDictSource(), OpenRecordingSink()
    runner = TaskPairRunner(PairPlan(connector="c", task_id=0, source=source, sink=sink, source_config={}, sink_config={},
                                     policy=RunnerPolicy(epoch_max_ms=200)))
    result = runner.run_epoch(1)
    assert sorted(sink.opened) == [0, 1, 2]
    assert sorted(result.offsets.values(), key=str) == [{"offset": 9}] * 3
    assert len(result.offsets) == 3
    runner.stop()
