"""RocketMQ's topic name rules, shared by the data sink and the config sync (one rule, one place).

What a RocketMQ client refuses to send to (``Validators.checkTopic`` and
``Validators.isNotAllowedSendTopic``, the same in 4.9.x and 5.x; the broker's
``TopicValidator.validateTopic`` checks the same characters):

- a blank name;
- a name longer than 127 characters (``Validators.TOPIC_MAX_LENGTH``);
- a character outside ``[%|a-zA-Z0-9_-]`` (``TopicValidator.VALID_CHAR_BIT_MAP``): Kafka's ``.``,
  Pulsar's ``/`` and ``:``, spaces, anything beyond ASCII;
- the broker's internal topics no client may send to (``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``).

Other system topics (``rmq_sys_*``, ``TBW102``...) are legal targets: RIP-45's replicator itself
writes heartbeats into ``rmq_sys_replicator_heartbeat``.

Mapping a name from another broker (:func:`local_topic_name`, what the metadata connectors and the
sink's ``topic.illegal.chars=replace`` do): a Pulsar ``persistent://tenant/ns/x`` becomes its local
name ``x`` (RocketMQ has no namespaces), the template applies, then each refused character becomes
the replacement (``_``): ``orders.created`` -> ``orders_created``.
"""

from __future__ import annotations

import re

from connect.sink.routing import render_template
from connect.tasks.origin import local_topic_name as _local_part

__all__ = ["LEGAL_CHARACTERS", "ILLEGAL_CHARACTER", "TOPIC_MAX_LENGTH", "GROUP_MAX_LENGTH", "NOT_ALLOWED_SEND_TOPICS",
           "topic_problem", "legal_name", "local_topic_name", "ROCKETMQ_NAMES"]

LEGAL_CHARACTERS = "[%|a-zA-Z0-9_-]"
ILLEGAL_CHARACTER = re.compile(r"[^%|a-zA-Z0-9_-]")  # TopicValidator's legal characters, negated
TOPIC_MAX_LENGTH, GROUP_MAX_LENGTH = 127, 255  # Validators.TOPIC_MAX_LENGTH, CHARACTER_MAX_LENGTH
NOT_ALLOWED_SEND_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX_V2", "RMQ_SYS_TRANS_HALF_TOPIC",
                                     "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC",
                                     "OFFSET_MOVED_EVENT"})


def topic_problem(name: str, sending: bool = True) -> str | None:
    """Why a RocketMQ client refuses topic ``name`` (``sending``: as a target, where the internal
    topics are forbidden too); None when it takes it."""
    if not name.strip():
        return "a topic name may not be blank"
    bad = sorted(set(ILLEGAL_CHARACTER.findall(name)))
    if bad:
        shown = " ".join(repr(c) for c in bad)
        return f"topic names may only hold {LEGAL_CHARACTERS} (not {shown})"
    if len(name) > TOPIC_MAX_LENGTH:
        return f"topic names are at most {TOPIC_MAX_LENGTH} characters long (this one has {len(name)})"
    if sending and name in NOT_ALLOWED_SEND_TOPICS:
        return "no client may send to this internal topic (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET)"
    return None


def legal_name(name: str, what: str = "topic", longest: int = TOPIC_MAX_LENGTH,
               replacement: str = "_") -> tuple[str, bool]:
    """(``name`` with every refused character replaced, whether one was). ValueError when the
    result is empty or longer than ``longest``: no replacement makes such a name legal."""
    fixed = ILLEGAL_CHARACTER.sub(replacement, name)
    if not fixed:
        raise ValueError(f"{what} name {name!r} is empty")
    if len(fixed) > longest:
        raise ValueError(f"{what} name {fixed!r} is longer than RocketMQ's {longest} characters")
    return fixed, fixed != name


def local_topic_name(name: str, template: str = "{topic}", replacement: str = "_") -> tuple[str, bool]:
    """(RocketMQ topic name for ``name`` as another cluster names it, whether characters were
    replaced): ``persistent://t/ns/x`` -> ``x``, ``template`` applied, characters outside
    ``[%|a-zA-Z0-9_-]`` -> ``replacement``. ValueError when nothing legal remains or it is too long."""
    base = _local_part(name)
    if not base:
        raise ValueError(f"topic name {name!r} has no local part")
    return legal_name(render_template(template, base), "topic", TOPIC_MAX_LENGTH, replacement)


class _RocketMQNames:
    """These rules as :class:`connect.sink.naming.TargetNames` asks for them."""

    broker = "RocketMQ"

    @staticmethod
    def complete(name: str) -> str:
        return name

    @staticmethod
    def problem(name: str) -> str | None:
        return topic_problem(name)

    @staticmethod
    def replace(source_topic: str, rendered: str, template: str | None, replacement: str) -> str:
        if template is None:  # a fixed name: its own characters
            return legal_name(rendered, replacement=replacement)[0]
        # The metadata connectors' mapping (a Pulsar topic's local name, then the template), so the
        # data and the topics config sync creates meet under one name.
        return local_topic_name(source_topic, template, replacement)[0]

    @staticmethod
    def replacement_problem(replacement: str) -> str | None:
        if not replacement or ILLEGAL_CHARACTER.search(replacement):
            return f"must be one or more characters RocketMQ allows in topic names ({LEGAL_CHARACTERS})"
        return None


ROCKETMQ_NAMES = _RocketMQNames()
