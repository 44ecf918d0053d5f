"""Checks of what a request asks the embedded broker: header fields, topic and group names.

Names follow RocketMQ's rules (``TopicValidator``, the client's ``Validators.checkGroup``): not
blank, only ``%|a-zA-Z0-9_-``, topics at most 127 characters (255 for the broker's own ``%RETRY%``
and ``%DLQ%`` topics, as this broker always allowed), groups at most 255. Names become file paths
(``consumequeue/<topic>``) and keys of files rewritten whole (``offsets.json``), so the whole name
must match: ``re.fullmatch``, never ``match`` with ``$``, which accepts a trailing newline.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from connectors.rocketmq.names import GROUP_MAX_LENGTH, LEGAL_CHARACTERS, TOPIC_MAX_LENGTH
from connectors.rocketmq.protocol import RemotingCommand, ResponseCode

__all__ = ["Refused", "field", "check_topic_name", "check_group_name", "check_expression", "shown",
           "TOPIC_MAX_LENGTH", "GROUP_MAX_LENGTH", "EXPRESSION_MAX_LENGTH"]

_NAME = re.compile(f"{LEGAL_CHARACTERS}+")  # TopicValidator's VALID_CHAR_BIT_MAP (connectors.rocketmq.names)
INTERNAL_TOPIC_MAX_LENGTH = 255
EXPRESSION_MAX_LENGTH = 64 * 1024  # ours: a tag expression is hashed tag by tag at every pull that uses it
_JAVA_LONG = 1 << 63


class Refused(Exception):
    """A request answered with an error code and remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def shown(value: str, most: int = 80) -> str:
    """``value`` cut for a remark or a log line: a name is echoed, never a megabyte of it."""
    return value if len(value) <= most else f"{value[:most]}...({len(value)} chars)"


def field(cmd: RemotingCommand, name: str, kind: Callable = str, default: Any = ...):
    """A header field of ``cmd`` as ``kind``: missing or malformed required fields are refused
    naming the field, as Java's ``decodeCommandCustomHeader`` does. Integers must fit a Java
    long (the header classes' widest type)."""
    value = cmd.ext_fields.get(name)
    if value is None:
        if default is ...:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null")
        return default
    if kind is bool:
        return value.lower() in ("true", "1")  # Boolean.parseBoolean, and the C++ client's "1"
    try:
        out = kind(value)
    except ValueError:
        raise Refused(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is {shown(value)!r}, "
                                                 f"not {kind.__name__}") from None
    if kind is int and not -_JAVA_LONG <= out < _JAVA_LONG:
        raise Refused(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is {shown(value)!r}, beyond a Java long")
    return out


def check_topic_name(name: str) -> None:
    most = INTERNAL_TOPIC_MAX_LENGTH if name.startswith("%") else TOPIC_MAX_LENGTH
    if not name or len(name) > most or not _NAME.fullmatch(name):
        raise Refused(ResponseCode.INVALID_PARAMETER, f"The specified topic[{shown(name)}] is not valid: "
                                                      f"1-{TOPIC_MAX_LENGTH} characters of [%|a-zA-Z0-9_-]")


def check_group_name(name: str) -> None:
    if not name or len(name) > GROUP_MAX_LENGTH or not _NAME.fullmatch(name):
        raise Refused(ResponseCode.INVALID_PARAMETER, f"the specified group[{shown(name)}] is not valid: "
                                                      f"1-{GROUP_MAX_LENGTH} characters of [%|a-zA-Z0-9_-]")


def check_expression(expression: str | None) -> str | None:
    if expression is not None and len(expression) > EXPRESSION_MAX_LENGTH:
        raise Refused(ResponseCode.SYSTEM_ERROR, f"subscription expression of {len(expression)} characters: at most "
                                                 f"{EXPRESSION_MAX_LENGTH}")
    return expression
