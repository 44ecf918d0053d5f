"""Failure reasons as an operator reads them.

The executors keep a refused record's reason as ``"<ErrorClass>: <str(error)>"``, which for a
Kafka client error is a repr: ``KafkaException: KafkaError{code=MSG_SIZE_TOO_LARGE,val=10,
str="Broker: Message size too large"}``. :func:`readable_reason` says it as a sentence -
``Broker: Message size too large (Kafka error MSG_SIZE_TOO_LARGE, KafkaException)``; a position
printed as a dict (``orders[0]@{'offset': 4}``) reads ``orders[0] at offset 4``; and a text
that was cut where it was kept (:data:`connect.tasks.results.REASON_SHOWN` characters) ends at a
word with an ellipsis, not in the middle of one. The reason as kept stays in the document too.
"""

from __future__ import annotations

import ast
import re

from connect.tasks.results import REASON_SHOWN

__all__ = ["readable_reason"]

# bounded: no nested quantifiers; the input is at most REASON_SHOWN characters
_KAFKA_ERROR = re.compile(r'KafkaError\{code=([A-Z0-9_]+),val=-?\d+,str="([^"]*)"\}')
_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*): ")
_DICT = re.compile(r"@?\{'[^{}]*\}")  # a position printed as a dict: {'offset': 4}, {'ledger': 1, 'entry': 2}


def _words(match: re.Match) -> str:
    text = match.group(0)
    try:
        value = ast.literal_eval(text.lstrip("@"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    if not isinstance(value, dict):
        return text
    said = ", ".join(f"{k} {v}" for k, v in value.items())
    return f" at {said}" if text.startswith("@") else said


def readable_reason(reason: str) -> str:
    text = str(reason)
    m = _PREFIX.match(text)
    error_class = m.group(1) if m else None
    body = text[m.end():] if m else text
    if len(text) >= REASON_SHOWN:  # cut where it was kept: end at a word
        body = (body.rsplit(" ", 1)[0] if " " in body else body).rstrip(" ,.;:") + " \u2026 (cut)"
    body = _DICT.sub(_words, body)
    k = _KAFKA_ERROR.search(body)
    if k:
        rest = (body[:k.start()] + body[k.end():]).strip(" :,")
        body = f"{k.group(2)} (Kafka error {k.group(1)}{', ' + error_class if error_class else ''})"
        if rest:
            body = f"{rest}: {body}"
    elif error_class:
        body = f"{body} ({error_class})"
    return body
