"""A producer never dies silently: an exception its sender did not expect fails every pending
future, makes send() and flush() raise it, is logged, and close() still returns.

Each test queues records on three partitions of a fake broker (tests/unit/fake_broker.py) with a
long linger, so batches are queued and, once flush() hurries them, in flight in one request; then
one step of the sender's work raises: the produce answer's handler, the sender's main loop, a
delivery callback raising something that is not an ``Exception``, InitProducerId, a metadata
refresh, or the client I/O thread itself stopping. The injected faults stand for bugs; the
sender code around them is the real one. Every wait is bounded, so on code that hangs the test
fails instead. The same tests run again under ``python -O`` (a subprocess), where bare asserts
vanish.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_broker import FakeCluster, run_in_thread

from tidelog.client import Producer, ProducerSenderError
from tidelog.client.futures import FutureRecordMetadata
from tidelog.errors import ErrorCode, TidelogError, UnknownServerError

WAIT_S = 15  # upper bound on any wait; tests finish far sooner
FAST = dict(request_timeout_ms=2_000, delivery_timeout_ms=10_000, retry_backoff_ms=10,
            retry_backoff_max_ms=50, max_block_ms=5_000)
O_RUN_TIMEOUT_S = 240


class Injected(Exception):
    """The bug the test plants."""


class CallbackExit(BaseException):
    """What a delivery callback raises that is not an Exception (as SystemExit is not)."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(1) as fc:
        fc.create_topic("t", 3)
        yield fc


def queue(producer: Producer, count: int = 3,
          on_delivery: Callable[..., None] | None = None) -> list[FutureRecordMetadata]:
    """Records on partitions 0, 1, 2 (and around again), left waiting for their linger."""
    return [producer.send("t", b"v%d" % i, partition=i % 3, on_delivery=on_delivery)
            for i in range(count)]


def check_failed(producer: Producer, futures: list[FutureRecordMetadata],
                 caplog: pytest.LogCaptureFixture, cause: type[BaseException]) -> None:
    """What a failed sender leaves: futures failed with it, flush/send raising it, a log record
    with its traceback, and a close that returns."""
    flushed = run_in_thread(lambda: producer.flush())
    with pytest.raises(ProducerSenderError) as info:
        flushed.result(WAIT_S)
    failure = info.value
    assert isinstance(failure.__cause__, cause)
    assert "sender failed" in str(failure) and isinstance(failure, UnknownServerError)
    for future in futures:
        assert future.wait(WAIT_S), "a future was left pending"
    errors = [f.exception(0) for f in futures]
    assert all(e is failure for e in errors if e is not None)
    assert any(e is failure for e in errors)  # the tests leave at least one batch unanswered
    with pytest.raises(ProducerSenderError):
        producer.send("t", b"after", partition=0)
    with pytest.raises(ProducerSenderError):
        producer.send_many("t", [b"after"], partition=0)
    with pytest.raises(ProducerSenderError):
        producer.flush(100)
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info
              and isinstance(r.exc_info[1], cause)]
    assert logged, "the sender's failure was not logged with its traceback"
    closed = run_in_thread(lambda: producer.close(timeout_ms=1_000))
    closed.result(WAIT_S)


def all_failed(futures: list[FutureRecordMetadata]) -> bool:
    return all(isinstance(f.exception(0), ProducerSenderError) for f in futures)


def test_a_response_handler_that_raises(cluster: FakeCluster,
                                        caplog: pytest.LogCaptureFixture) -> None:
    producer = Producer(cluster.bootstrap, linger_ms=5_000, **FAST)
    futures = queue(producer)

    def handler_bug(*args: object) -> None:
        raise Injected("handling the produce answer")

    producer._sender._handle_partition = handler_bug  # type: ignore[method-assign]
    check_failed(producer, futures, caplog, Injected)
    assert all_failed(futures)


def test_the_main_loop_raising(cluster: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    producer = Producer(cluster.bootstrap, linger_ms=5_000, **FAST)
    warm = producer.send("t", b"warm", partition=0)  # the producer id, the metadata
    producer.flush(WAIT_S * 1000)
    assert warm.result(0).offset >= 0
    futures = queue(producer, 6)

    def expire_bug(now_ms: int) -> list[object]:
        raise Injected("in the sender's loop")

    producer._acc.expire = expire_bug  # type: ignore[assignment,method-assign]
    check_failed(producer, futures, caplog, Injected)
    assert all_failed(futures)


def test_a_callback_raising_a_base_exception(cluster: FakeCluster,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """An Exception from a callback is logged and the producer carries on (another test); a
    BaseException goes through the sender: its own batch was written and says so, the rest
    fail (partition 1's are kept retrying meanwhile, so they are still pending)."""
    def exits(meta: object, error: TidelogError | None) -> None:
        raise CallbackExit()

    cluster.inject("Produce", ErrorCode.NOT_ENOUGH_REPLICAS, topic="t", partition=1,
                   times=1_000_000)
    try:
        producer = Producer(cluster.bootstrap, linger_ms=5_000, **FAST)
        pending = [producer.send("t", b"p1-%d" % i, partition=1) for i in range(3)]
        first = producer.send("t", b"first", partition=0, on_delivery=exits)
        check_failed(producer, [first, *pending], caplog, CallbackExit)
    finally:
        cluster.clear_faults()
    assert first.result(0).offset >= 0  # written before the callback ran: not failed
    assert all_failed(pending)


def test_init_producer_id_raising(cluster: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    producer = Producer(cluster.bootstrap, linger_ms=5_000, **FAST)

    def pid_bug(producer_id: int, producer_epoch: int) -> None:
        raise Injected("taking the producer id")

    producer._sender._idem.set_producer_id = pid_bug  # type: ignore[method-assign]
    futures = queue(producer)
    check_failed(producer, futures, caplog, Injected)
    assert all_failed(futures)


def test_a_metadata_refresh_raising(cluster: FakeCluster,
                                    caplog: pytest.LogCaptureFixture) -> None:
    producer = Producer(cluster.bootstrap, linger_ms=5_000, **FAST)
    futures = queue(producer)

    def listener_bug() -> None:
        raise Injected("reading the metadata")

    producer._metadata.add_listener(listener_bug)
    producer._metadata.request_update()
    for _ in range(WAIT_S * 100):  # bounded poll until the refresh has run
        if producer._sender.fatal_error is not None:
            break
        futures[0].wait(0.01)
    check_failed(producer, futures, caplog, Injected)
    assert all_failed(futures)


def test_the_io_thread_stopping(cluster: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    """Something raised out of the loop (SystemExit from a callback) ends the shared I/O
    thread: the producer fails what it holds; the next client gets a new thread."""
    producer = Producer(cluster.bootstrap, linger_ms=5_000, **FAST)
    futures = queue(producer)

    def stop() -> None:
        raise SystemExit("a callback on the I/O loop called sys.exit()")

    io = producer._io
    io.call_soon(stop)
    check_failed(producer, futures, caplog, SystemExit)
    assert all_failed(futures)
    assert not io.alive
    with Producer(cluster.bootstrap, **FAST) as fresh:
        assert fresh._io is not io
        assert fresh.send("t", b"fresh", partition=0).result(WAIT_S).offset >= 0


@pytest.mark.skipif(os.environ.get("TIDELOG_UNDER_O") == "1", reason="already the -O run")
def test_the_same_under_python_O() -> None:
    """No check the failure path relies on may be a bare assert: run this file under -O."""
    here = Path(__file__)
    env = dict(os.environ, TIDELOG_UNDER_O="1")
    proc = subprocess.run(
        [sys.executable, "-O", "-m", "pytest", "-q", "-p", "no:cacheprovider", str(here)],
        cwd=here.parents[2], env=env, capture_output=True, text=True, timeout=O_RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" in proc.stdout


@pytest.mark.skipif(os.environ.get("TIDELOG_UNDER_O") != "1", reason="only the -O run")
def test_this_run_is_under_O() -> None:
    if __debug__:
        pytest.fail("expected python -O")
