"""Connector, SourceConnector and SinkConnector: the control-plane half of a plugin.

Lifecycle (the contract, as in Kafka Connect): the worker instantiates the class, may call
:meth:`Connector.validate` any number of times, then calls :meth:`Connector.start` with the
connector's own config (its ``source.`` or ``sink.`` keys, prefix removed), asks
:meth:`Connector.task_configs` how to split the work, and calls :meth:`Connector.stop` when the
pipeline stops or is reconfigured. A connector may call
``context.request_task_reconfiguration()`` at any time (e.g. a new topic appeared); the worker then
asks for task configs again before its next epoch.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from connect.config import Configurable
from connect.errors import ConfigIssue

if TYPE_CHECKING:
    from connect.sink.side import SideWriter

__all__ = ["Connector", "SourceConnector", "SinkConnector", "ConnectorContext"]


class ConnectorContext:
    """What a running connector may ask of the worker."""

    def __init__(self, name: str):
        self.name = name
        self._reconfigure = threading.Event()

    def request_task_reconfiguration(self) -> None:
        self._reconfigure.set()

    def reconfiguration_requested(self) -> bool:
        """Worker side: whether a request waits (it stays until taken)."""
        return self._reconfigure.is_set()

    def take_reconfiguration_request(self) -> bool:
        """Worker side: True once per request."""
        if self._reconfigure.is_set():
            self._reconfigure.clear()
            return True
        return False


class Connector(Configurable):
    """Base of every connector. Subclasses declare ``config_def()`` and ``task_class()``."""

    kind = "abstract"

    def __init__(self) -> None:
        self.context: ConnectorContext | None = None
        self.config: dict[str, Any] = {}

    def initialize(self, context: ConnectorContext) -> None:
        self.context = context

    def start(self, config: Mapping[str, Any]) -> None:
        """Remember the config; connectors that watch their source start that here."""
        self.config = dict(config)

    @classmethod
    def task_class(cls) -> type:
        raise NotImplementedError

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """At most ``max_tasks`` task configs; each becomes one task. Default: one copy."""
        return [dict(self.config)]

    def stop(self) -> None:
        """Release what ``start`` acquired. Called once."""


class SourceConnector(Connector):
    kind = "source"

    @classmethod
    def named_topics(cls, config: Mapping[str, Any]) -> list[str] | None:
        """The topic names this source's records will carry, when ``config`` alone says (a
        ``topics`` list), so a sink can check its target names before anything runs; None when
        they are only found while running (a regex)."""
        return None

    def source_topics(self) -> Mapping[str, int] | None:
        """Topics this connector reads, with their partition (or queue) counts, when known.

        The worker hands them to the sink connector's ``prepare_topics`` before the tasks start
        and after every reconfiguration, so targets can be created with matching partition
        counts (MirrorMaker 2 does the same).
        """
        return None

    def committed_lag(self, committed: Mapping[str, Mapping[str, Any]]) -> Mapping[str, int] | None:
        """Records still to be delivered per source partition: from just after its committed
        offset (``committed``: partition key -> offset, as the tasks commit them) to the source's
        end. Called on the driver whatever the connector's state (running, paused, stopped,
        failing), so lag means what is left to deliver, not where a consumer stands. Partitions
        without a committed offset are left out; None when this source cannot tell."""
        return None

    def waiting_for(self) -> str | None:
        """While the connector has no work to hand out (``task_configs`` is empty): what it waits
        for, in words for status and progress ("waiting for topics matching 'orders.*'"); None
        otherwise, or when it cannot say."""
        return None


class SinkConnector(Connector):
    kind = "sink"

    @classmethod
    def target_issues(cls, config: Mapping[str, Any], source_topics: Sequence[str]) -> list[ConfigIssue]:
        """Issues with the targets records of ``source_topics`` (named as this sink receives
        them) would get under ``config``: names the target broker refuses, several sources in one
        target. Checked by the pipeline's validation once both sides are valid alone."""
        return []

    def prepare_topics(self, source_topics: Mapping[str, int]) -> None:
        """Make sure targets for these source topics exist (partition counts as given)."""

    @classmethod
    def transaction_timeout_ms(cls, config: Mapping[str, Any]) -> int | None:
        """Exactly-once (``exactly.once.support``): how long a transaction of this sink may stay open
        under ``config`` before the target aborts it (an epoch must end well within it); None: no bound
        (or no transactions)."""
        return None

    @classmethod
    def alter_target_offsets(cls, config: Mapping[str, Any], connector: str, changes: Mapping[str, Any] | None,
                             tasks: int) -> bool:
        """Exactly-once: where this sink keeps the pair's source offsets in its target (the pairs
        resume there, not from the worker's store), apply an operator's change to them: ``changes``
        maps partition keys to offsets (None removes one); ``changes`` None removes every offset of
        ``connector`` (a reset). Earlier attempts of the connector's ``tasks`` pairs are fenced first,
        so none commits after the change. Called while the connector is STOPPED (Kafka Connect's
        KIP-875 for exactly-once source connectors). Returns False when this sink keeps no offsets
        in its target; raises when they could not be changed."""
        return False

    def fence_removed_tasks(self, tasks: int) -> list[int]:
        """Exactly-once: fence the transactional ids of this connector's task pairs numbered ``tasks``
        and above that ran before (the task count shrank), so a zombie of a removed pair cannot commit
        records or offsets of partitions that other pairs now own. Called by the driver each time the
        tasks are configured. Returns the task numbers fenced; the default sink has none."""
        return []

    @classmethod
    def side_writer(cls, config: Mapping[str, Any], topic: str) -> SideWriter | None:
        """A writer of side outputs (dead letters, offset syncs) to ``topic`` of this sink's
        cluster, with a client of its own built from ``config`` (this connector's keys; for the
        dead-letter topic with the ``dlq.*`` overrides applied). Called on the executor that runs
        the task pair, when the first side record is due; the writer must not connect before its
        first ``send``. ``None`` (the default): this sink has no cluster to write side outputs to,
        and the pipeline refuses ``errors.deadletterqueue.topic.name`` and ``offset.syncs.topic``
        for it. See :mod:`connect.sink.side` for the contract."""
        return None
