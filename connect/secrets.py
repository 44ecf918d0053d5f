"""Which config keys hold credentials, and keeping their values out of every output.

Guarantees:

- :func:`is_secret_name` is True for every key whose name says it holds a credential, wherever
  the telling part sits (so also behind a pass-through prefix such as ``producer.override.``):
  password / passwd, secret, token, credential(s), jaas, private key, access key, api key
  (``.``, ``_``, ``-``, space or nothing between the words), ``sasl.oauthbearer.config``,
  ``*key.pem`` and ``*keystore.key`` (PEM private keys). Matching ignores case.
- :meth:`Redactor.redact` replaces every occurrence of every collected secret value (and of its
  ``repr``/JSON-escaped spelling) with :data:`MASK`; longer values are matched first, so a
  secret containing another one is masked whole. Values shorter than :data:`MIN_SECRET_LENGTH`
  characters (2 or 3) are masked only where they stand alone, not inside a longer word or number
  (``abc`` in ``password abc.`` but not in ``abcdef``): anywhere would mask random fragments of
  unrelated text. Single characters are not collected at all (such keys are still masked by name
  wherever a config value is shown, and validation errors never echo values).
- :class:`RedactingFilter` never drops a log record: it rewrites the record's message (with its
  arguments applied), exception text and stack text so that no collected secret value remains.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any, Iterable, Mapping

__all__ = ["MASK", "MIN_SECRET_LENGTH", "MIN_SHORT_SECRET_LENGTH", "is_secret_name", "Redactor", "RedactingFilter",
           "install_log_redaction"]

MASK = "********"
MIN_SECRET_LENGTH = 4
MIN_SHORT_SECRET_LENGTH = 2

_SECRET_NAME = re.compile(
    r"passw(?:or)?d|secret|token|credential|jaas|sasl\.oauthbearer\.config"
    r"|private[\s._-]?key|access[\s._-]?key|api[\s._-]?key|\bkey\.pem|keystore\.key\b",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True when the key's name says it holds a credential (see the module's guarantees)."""
    return bool(_SECRET_NAME.search(name))


def _spellings(value: str) -> set[str]:
    """The value as written, and as it reads inside a repr() or a JSON string."""
    return {value, repr(value)[1:-1], json.dumps(value)[1:-1]}


def _alternative(value: str) -> str:
    """The regex of one secret spelling: anywhere, or standing alone when it is short."""
    if len(value) >= MIN_SECRET_LENGTH:
        return re.escape(value)
    return rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])"


class Redactor:
    """Collects secret values and masks them in any text. Thread-safe; usable as a callable."""

    def __init__(self, values: Iterable[Any] = ()):
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()
        self.add(values)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> Redactor:
        """A redactor holding the values of ``config``'s secret keys: those in ``secret_keys``
        (declared secret) and those whose name looks secret (:func:`is_secret_name`)."""
        redactor = cls()
        redactor.add_config(config, secret_keys)
        return redactor

    def add_config(self, config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> None:
        declared = set(secret_keys)
        self.add(v for k, v in config.items() if v is not None and (k in declared or is_secret_name(k)))

    def add(self, values: Iterable[Any]) -> None:
        new = {s for v in values for s in _spellings(str(v)) if len(s) >= MIN_SHORT_SECRET_LENGTH}
        with self._lock:
            if new <= self._values:
                return
            self._values |= new
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(_alternative(v) for v in ordered))

    def redact(self, text: str) -> str:
        """``text`` with every collected secret value replaced by MASK."""
        pattern = self._pattern
        if pattern is None or not text:
            return text
        return pattern.sub(MASK, text)

    __call__ = redact

    def __len__(self) -> int:
        return len(self._values)


class RedactingFilter(logging.Filter):
    """A logging filter (put it on handlers) that masks a :class:`Redactor`'s values in records."""

    def __init__(self, redactor: Redactor):
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        redact = self.redactor.redact
        broken = False
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not fit: logging would print them raw, so fold them in
            message, broken = f"{record.msg} (arguments: {record.args!r})", True
        redacted = redact(message)
        if broken or redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def install_log_redaction(redactor: Redactor, logger: logging.Logger | None = None) -> RedactingFilter:
    """Add one RedactingFilter to every handler of ``logger`` (default: the root logger)."""
    flt = RedactingFilter(redactor)
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(flt)
    return flt
