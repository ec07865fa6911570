"""FutureRecordMetadata: the light per-record result of Producer.send()."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from tidelog.client.futures import FutureRecordMetadata
from tidelog.client.records import RecordMetadata, TopicPartition
from tidelog.errors import RequestTimedOutError

META = RecordMetadata("t", 0, 7, 1000)


def _resolve(f: FutureRecordMetadata, meta: RecordMetadata | None,
             error: RequestTimedOutError | None) -> None:
    """Complete ``f`` as the sender does, through its batch's result: a batch of one record at
    ``meta``'s offset, or failed."""
    if error is None:
        assert meta is not None
        f._batch.complete(TopicPartition(meta.topic, meta.partition), meta.offset, -1, None)
    else:
        f._batch.complete(None, -1, -1, error)


def test_result_callbacks_and_delivery_order() -> None:
    seen: list[str] = []
    f = FutureRecordMetadata(1000, lambda meta, error: seen.append(f"delivery {meta.offset}"))
    assert not f.done() and f.running() and not f.cancelled() and not f.cancel()
    with pytest.raises(concurrent.futures.TimeoutError):
        f.result(timeout=0.01)
    f.add_done_callback(lambda fut: seen.append(f"done {fut.result().offset}"))
    _resolve(f, META, None)
    assert f.done() and f.result(0) == META and f.exception() is None
    assert seen == ["delivery 7", "done 7"]  # the delivery callback first, as in Kafka
    f.add_done_callback(lambda fut: seen.append("late"))  # already done: runs at once
    assert seen[-1] == "late"
    _resolve(f, None, RequestTimedOutError("x"))  # a second completion is ignored
    assert f.result() == META


def test_error_and_waiting_threads() -> None:
    f = FutureRecordMetadata(0)
    results: list[BaseException | None] = []
    threads = [threading.Thread(target=lambda: results.append(f.exception(5)))
               for _ in range(4)]
    for t in threads:
        t.start()
    error = RequestTimedOutError("gone")
    _resolve(f, None, error)
    for t in threads:
        t.join(5)
    assert results == [error] * 4
    with pytest.raises(RequestTimedOutError):
        f.result()


def test_a_raising_done_callback_is_contained() -> None:
    f = FutureRecordMetadata(0)
    f.add_done_callback(lambda fut: 1 / 0)
    after: list[bool] = []
    f.add_done_callback(lambda fut: after.append(fut.done()))
    _resolve(f, META, None)
    assert after == [True]
