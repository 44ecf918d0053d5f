"""Pulsar's topic name rules, as the Pulsar sink checks its targets.

A name is completed first as the sink and Pulsar's ``TopicName`` complete it: ``x`` is
``persistent://public/default/x``, ``tenant/ns/x`` is ``persistent://tenant/ns/x``. Then:

- the domain is ``persistent`` or ``non-persistent`` (``TopicDomain``);
- tenant and namespace are non-empty and made of ``[A-Za-z0-9_=:.-]`` (``NamedEntity.checkName``:
  the Java broker's ``^[-=:.\\w]*$``, the C++ client's ``isalnum`` plus ``_-=:.``, which the Python
  client uses, refusing the name as ``InvalidTopicName`` before it reaches a broker);
- the local name is not blank and holds no ``/``: ``TopicName`` splits
  ``persistent://a/b/c/d`` into a v1 name (tenant ``a``, cluster ``b``, namespace ``c``, topic
  ``d``), another topic than the one meant, in a namespace that usually does not exist.

Pulsar checks no other character of a local name (it URL-encodes them: dots, ``%``, spaces and
non-ASCII letters are accepted, by pulsar-lite too), so a Kafka or RocketMQ name maps as it is:
``orders.created`` is ``persistent://public/default/orders.created``. What ``replace`` changes: a
``/`` in the local name and characters outside ``NamedEntity``'s in the tenant and namespace.
"""

from __future__ import annotations

import re

from connectors.pulsar.source import full_topic_name

__all__ = ["DOMAINS", "topic_problem", "PULSAR_NAMES"]

DOMAINS = ("persistent", "non-persistent")
_ENTITY = "[A-Za-z0-9_=:.-]"
_NOT_ENTITY = re.compile(r"[^A-Za-z0-9_=:.-]")


def _parts(full: str) -> tuple[str, list[str]]:
    domain, _, rest = full.partition("://")
    return domain, rest.split("/", 2)


def topic_problem(name: str) -> str | None:
    """Why Pulsar refuses (or misreads) the full topic name ``name``; None when it takes it as meant."""
    domain, parts = _parts(name)
    if domain not in DOMAINS:
        return f"the domain must be {' or '.join(DOMAINS)}"
    if len(parts) < 3 or not parts[2].strip():
        return "a topic name is domain://tenant/namespace/topic, with a non-blank topic"
    for what, part in (("tenant", parts[0]), ("namespace", parts[1])):
        bad = sorted(set(_NOT_ENTITY.findall(part)))
        if not part or bad:
            shown = f" (not {' '.join(repr(c) for c in bad)})" if bad else ""
            return f"a {what} name is one or more of {_ENTITY}{shown}"
    if "/" in parts[2]:
        return ("the topic's local name may not hold '/' (Pulsar would read a v1 name "
                "tenant/cluster/namespace/topic: another topic)")
    return None


class _PulsarNames:
    """These rules as :class:`connect.sink.naming.TargetNames` asks for them."""

    broker = "Pulsar"

    @staticmethod
    def complete(name: str) -> str:
        return full_topic_name(name)

    @staticmethod
    def problem(name: str) -> str | None:
        return topic_problem(name)

    @staticmethod
    def replace(source_topic: str, rendered: str, template: str | None, replacement: str) -> str:
        domain, parts = _parts(full_topic_name(rendered))
        if domain not in DOMAINS or len(parts) < 3 or not parts[2].strip():
            raise ValueError(f"{rendered!r} is not domain://tenant/namespace/topic")
        tenant, namespace = (_NOT_ENTITY.sub(replacement, p) for p in parts[:2])
        return f"{domain}://{tenant}/{namespace}/{parts[2].replace('/', replacement)}"

    @staticmethod
    def replacement_problem(replacement: str) -> str | None:
        if not replacement or _NOT_ENTITY.search(replacement):
            return f"must be one or more of {_ENTITY} (legal in every part of a Pulsar topic name)"
        return None


PULSAR_NAMES = _PulsarNames()
