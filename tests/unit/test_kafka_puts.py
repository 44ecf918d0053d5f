"""PutLog: the Kafka sink's puts awaiting outcomes, oldest first, and the delivery timeout measured on them."""

from __future__ import annotations

import time

from connect.sink import Outstanding
from connectors.kafka.puts import PutLog


def test_puts_keep_put_order_and_count_what_has_no_outcome():
    log, gen = PutLog(0), Outstanding()
    first, second = log.new(gen), log.new(gen)
    assert (first.seq, second.seq) == (0, 1) and first.gen is gen
    first.left, second.left = 2, 3
    assert log.unsettled() == 5 and log.oldest() is first
    first.left = 0  # every report of the first put came
    assert log.oldest() is second and log.unsettled() == 3
    second.left = 0
    assert log.oldest() is None and log.unsettled() == 0


def test_the_delivery_timeout_counts_from_the_oldest_put_still_waiting():
    log, gen = PutLog(0.05), Outstanding()
    old = log.new(gen)
    old.left = 1
    old.at -= 1.0  # put a second ago
    fresh = log.new(gen)
    fresh.left = 1
    assert log.expired()
    old.left = 0  # its outcome came: the fresh put alone waits, within the timeout
    assert not log.expired()
    fresh.at = time.monotonic() - 1.0
    assert log.expired()
    log.clear()
    assert not log.expired() and log.unsettled() == 0


def test_no_timeout_never_expires():
    log = PutLog(0)
    put = log.new(Outstanding())
    put.left, put.at = 1, put.at - 3600
    assert not log.expired()
