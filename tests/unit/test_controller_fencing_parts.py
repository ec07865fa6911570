"""A dead broker fenced in parts by the active controller's prober (controller/broker_prober.py,
``_fence_in_parts``), on a real one-voter quorum.

What it checks: a broker whose listeners refuse connections, in more partitions than one
fencing part holds, is fenced on the probe's evidence alone (its session is far from expiring):
every part commits in order, each made from the speculative image that has the parts still in
flight before it, and the end is the same image as fencing it in one go: every partition led
by another broker with it out of the ISR, the broker fenced, nothing pending, and its leaderships
moved before its follower ISR entries.

How: ControllerRuntime in this process, FENCE_CHANGES_PER_BATCH_MAX set to 3 so that 20
partitions need seven parts; the brokers' registered endpoints are free ports (connects are
refused); broker 1's metadata stream ends (the probe's trigger); brokers 2 and 3 keep
heartbeating, broker 1 never does after it is unfenced. Each commit is slowed so that a part is
made while the ones before it are still in flight, which the test sees.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from controller_testkit import RuntimeDriver, create_topic, one_voter_runtime, register_request

from tidelog.controller.broker_prober import FENCE_PARTS_IN_FLIGHT
from tidelog.controller.control import ControllerResult
from tidelog.controller.managers import cluster_control
from tidelog.controller.runtime import ControllerRuntime
from tidelog.local_cluster import free_ports
from tidelog.metadata.image import MetadataImage
from tidelog.v1 import controller_pb2 as cpb

WAIT_S = 20.0
PART = 3
PARTITIONS = 20


def test_a_dead_broker_in_many_partitions_is_fenced_in_pipelined_parts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert FENCE_PARTS_IN_FLIGHT > 1, "the parts are meant to be pipelined"
    monkeypatch.setattr(cluster_control, "FENCE_CHANGES_PER_BATCH_MAX", PART)
    asyncio.run(_fence_on_a_one_voter_quorum(tmp_path))


async def _fence_on_a_one_voter_quorum(tmp_path: Path) -> None:
    refused = free_ports(3)
    # Only the probe can fence here: the session would take 10 minutes, and the periodic tick
    # (which also finishes a fencing begun, one part at a time) does not come within the test:
    # the probe starts from the broker's metadata stream ending, and goes alone.
    runtime: ControllerRuntime = one_voter_runtime(
        tmp_path, broker_session_timeout_ms=600_000, broker_probe_after_ms=1_500,
        fence_check_interval_ms=60_000)

    # Batches proposed and not committed yet, each time the probe path makes its next part:
    # pipelined, the parts before it are still in flight; one at a time, there are none. Each
    # commit is slowed (50 ms on the Raft thread) so that a one-voter quorum cannot commit a
    # part before the next is made.
    apply = runtime.apply

    def slow_apply(batch: bytes, index: int) -> None:
        time.sleep(0.05)
        apply(batch, index)
    runtime.apply = slow_apply  # type: ignore[method-assign]
    pending_at_part: list[int] = []
    next_part = runtime.logic.handle_broker_unreachable

    def observed(*args: int) -> ControllerResult[None]:
        pending_at_part.append(runtime.logic.pending_batches)
        return next_part(*args)
    runtime.logic.handle_broker_unreachable = observed  # type: ignore[method-assign]
    driver = RuntimeDriver(runtime)
    write, heartbeat = driver.write, driver.heartbeat

    await runtime.start()
    try:
        deadline = time.monotonic() + WAIT_S
        await driver.wait_active(WAIT_S)
        for broker_id, broker_port in zip((1, 2, 3), refused, strict=True):
            await write("register_broker",
                        register_request(broker_id, cluster_id="c", host="127.0.0.1",
                                         port=broker_port))
            await heartbeat(broker_id)
        await write("create_topics", cpb.CreateTopicsRequest(
            topics=[create_topic("t", assignments=[[1, 2, 3]] * PARTITIONS)]))
        before = runtime.logic.committed_offset
        topic_id = runtime.logic.committed_image.topics.get("t").topic_id  # type: ignore[union-attr]
        runtime._on_metadata_stream_end(1)  # what a dead broker's FetchMetadata stream does
        images: list[MetadataImage] = []
        while not _fenced(image := runtime.logic.committed_image, 1):
            assert time.monotonic() < deadline + WAIT_S, "broker 1 was not fenced by the probe"
            images.append(image)
            await heartbeat(2)
            await heartbeat(3)
            await asyncio.sleep(0.02)

        image = runtime.logic.committed_image
        for partition_id in range(PARTITIONS):
            p = image.topics.partition(topic_id, partition_id)
            assert p is not None and p.leader == 2 and p.isr == (2, 3), (partition_id, p)
        assert runtime.logic.pending_batches == 0
        # 20 leaderships (each change also takes broker 1 out of the ISR) in parts of 3: the
        # last part carries the fence. Heartbeats of 2 and 3 write no records once unfenced.
        assert image.offset - before == PARTITIONS + 1
        # Seen part by part as they committed: the number of partitions broker 1 still led
        # only ever went down (no part undid another), and it was fenced last.
        led = [sum(1 for pid in range(PARTITIONS)
                   if (p := i.topics.partition(topic_id, pid)) is not None and p.leader == 1)
               for i in images]
        assert led == sorted(led, reverse=True) and led[0] == PARTITIONS
        assert not any(_fenced(i, 1) for i in images)
        assert max(pending_at_part) >= 1, f"no part was made while another was in flight: " \
            f"{pending_at_part}"
    finally:
        await runtime.stop()


def _fenced(image: MetadataImage, broker_id: int) -> bool:
    registration = image.cluster.broker(broker_id)
    return registration is not None and registration.fenced
