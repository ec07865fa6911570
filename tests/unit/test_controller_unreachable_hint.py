"""A broker reported unreachable by another broker's heartbeat is probed at once, and fenced when
every listener refuses (controller/service.py BrokerHeartbeat -> ControllerRuntime
.on_unreachable_reported -> the probe of controller/broker_prober.py).

Why: a dead broker whose metadata stream went to a standby controller ends no stream on the
active one, which then waited for the 2.5 s of silence before probing (a 30,000-partition kill -9
took 4.1 s instead of 2 that way). Its followers see their fetch connections fail at once and
say so in a heartbeat sent now. The report is a hint: the controller's own refused connects are
the evidence, so a false report costs a probe, never a fencing.

On a real one-voter quorum; the brokers' registered endpoints are free ports (connects are
refused) or a listening socket (connects accepted: a live broker). Sessions and the silence
probe are far out of reach, so only the report can start a probe here.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

from controller_testkit import RuntimeDriver, create_topic, one_voter_runtime, register_request

from tidelog.controller.runtime import ControllerRuntime
from tidelog.controller.service import ControllerService
from tidelog.local_cluster import HOST, free_ports
from tidelog.v1 import controller_pb2 as cpb

WAIT_S = 20.0


def _runtime(tmp_path: Path) -> ControllerRuntime:
    # Sessions and the silence probe out of reach: only a report can start a probe here.
    runtime: ControllerRuntime = one_voter_runtime(
        tmp_path, broker_session_timeout_ms=600_000, broker_probe_after_ms=300_000,
        fence_check_interval_ms=100)
    return runtime


class _Context:
    """What the service reads of a gRPC context: no peer credential (a node without a secret)."""

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: Any, details: str) -> None:
        raise AssertionError(f"aborted: {code} {details}")


def _listening(port: int) -> socket.socket:
    """A broker's listener: connects to it are accepted (a live, if silent, broker)."""
    listener = socket.socket()
    listener.bind((HOST, port))
    listener.listen()
    return listener


def _fenced(runtime: ControllerRuntime, broker_id: int) -> bool:
    registration = runtime.logic.committed_image.cluster.broker(broker_id)
    return registration is not None and registration.fenced


async def _register(driver: RuntimeDriver, ports: dict[int, int]) -> None:
    """Register each broker at its port and heartbeat it once."""
    for broker_id, broker_port in ports.items():
        await driver.write("register_broker", register_request(
            broker_id, cluster_id="c", host=HOST, port=broker_port))
        await driver.heartbeat(broker_id)


def test_a_broker_reported_unreachable_is_probed_and_fenced_a_live_one_is_not(
        tmp_path: Path) -> None:
    asyncio.run(_report_on_a_one_voter_quorum(tmp_path))


async def _report_on_a_one_voter_quorum(tmp_path: Path) -> None:
    dead_port, port_2, port_3 = free_ports(3)
    runtime = _runtime(tmp_path)
    service = ControllerService(runtime)
    driver = RuntimeDriver(runtime)
    live = _listening(port_3)  # broker 3: alive, if silent

    def heartbeat_request(broker_id: int, *unreachable: int) -> cpb.BrokerHeartbeatRequest:
        logic = runtime.logic
        registration = logic.committed_image.cluster.broker(broker_id)
        assert registration is not None
        return cpb.BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=registration.broker_epoch,
            current_metadata_offset=logic.committed_offset, unreachable_brokers=unreachable)

    def fenced(broker_id: int) -> bool:
        return _fenced(runtime, broker_id)

    await runtime.start()
    try:
        await driver.wait_active(WAIT_S)
        await _register(driver, {1: dead_port, 2: port_2, 3: port_3})
        await driver.write("create_topics", cpb.CreateTopicsRequest(
            topics=[create_topic("t", assignments=[[1, 2, 3]] * 3)]))

        # Broker 2 reports broker 3 (alive: its connects are accepted) and itself: nothing.
        response = await service.BrokerHeartbeat(heartbeat_request(2, 3, 2), _Context())
        assert response.error_code == 0, response
        deadline = time.monotonic() + WAIT_S
        while runtime.prober.in_flight:  # the probe of broker 3 ends, without a fencing
            assert time.monotonic() < deadline, "the probe of broker 3 did not end"
            await asyncio.sleep(0.02)
        assert not fenced(3) and not fenced(2)

        # Broker 2 reports broker 1, whose listener is gone: fenced at once, its leaderships
        # moved (its session would last 10 minutes, and silence probes start after 5).
        response = await service.BrokerHeartbeat(heartbeat_request(2, 1), _Context())
        assert response.error_code == 0, response
        while not fenced(1):
            assert time.monotonic() < deadline, "broker 1 was not fenced after the report"
            await asyncio.sleep(0.02)
        image = runtime.logic.committed_image
        topic = image.topics.get("t")
        assert topic is not None
        assert all(p.leader != 1 and 1 not in p.isr for p in topic.partitions.values())
        assert not fenced(3) and not fenced(2)
    finally:
        live.close()
        await runtime.stop()


def test_a_reported_broker_still_closing_its_listeners_is_fenced(tmp_path: Path) -> None:
    """A dying process closes its sockets one by one: the report (or its stream's end) can come
    while a listener still accepts. Seen in a 30,000-partition kill -9: a connect accepted 1 ms
    after the stream ended, the listener gone 2 ms later, and the next probe only after the 2.5 s
    of silence. A probe started on a hint looks again once, a moment later."""
    asyncio.run(_dying_on_a_one_voter_quorum(tmp_path))


async def _dying_on_a_one_voter_quorum(tmp_path: Path) -> None:
    dying_port, port_2 = free_ports(2)
    runtime = _runtime(tmp_path)
    driver = RuntimeDriver(runtime)
    dying = _listening(dying_port)  # broker 1's listener, open when the report comes
    await runtime.start()
    try:
        await driver.wait_active(WAIT_S)
        await _register(driver, {1: dying_port, 2: port_2})
        # A probe's evidence must be newer than the broker's last heartbeat, and the same
        # millisecond is not newer: a report right after it (10% of runs here) found the
        # broker "heard from since the probe started". In life the report comes later.
        await asyncio.sleep(0.005)
        runtime.prober.on_unreachable_reported(2, [1])
        await asyncio.sleep(0.02)  # the probe's first connect is accepted...
        dying.close()  # ...then the process's last sockets close
        deadline = time.monotonic() + WAIT_S
        while not _fenced(runtime, 1):
            assert time.monotonic() < deadline, "broker 1 was not fenced once its listener closed"
            await asyncio.sleep(0.02)
    finally:
        dying.close()
        await runtime.stop()


def test_a_new_active_controller_probes_every_broker_at_once(tmp_path: Path) -> None:
    """A broker that died with the previous active controller, or whose fencing that controller
    began, left no hint with the new one (its stream and its followers' reports went to the old
    one): the new active controller probes every unfenced broker as it activates, instead of
    after broker_probe_after_ms of silence counted from its activation (seen at 100,000
    partitions: an election mid-fencing, and the fencing went on only 2.9 s later)."""
    asyncio.run(_activation_on_a_one_voter_quorum(tmp_path))


async def _activation_on_a_one_voter_quorum(tmp_path: Path) -> None:
    dead_port, live_port = free_ports(2)
    runtime = _runtime(tmp_path)
    driver = RuntimeDriver(runtime)
    live = _listening(live_port)  # broker 2: alive

    def fenced(broker_id: int) -> bool:
        return _fenced(runtime, broker_id)

    await runtime.start()
    try:
        await driver.wait_active(WAIT_S)
        await _register(driver, {1: dead_port, 2: live_port})
        await driver.write("create_topics", cpb.CreateTopicsRequest(
            topics=[create_topic("t", assignments=[[1, 2], [2, 1]])]))
        assert not fenced(1) and not fenced(2)
        # As after an election won by another controller: this one activates again, with
        # fresh sessions for every broker and no hint about broker 1, whose listener is gone.
        runtime._resign("the test's election")
        runtime._maybe_reactivate()
        await driver.wait_active(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while not fenced(1):
            assert time.monotonic() < deadline, "broker 1 was not fenced after the activation"
            await asyncio.sleep(0.02)
        topic = runtime.logic.committed_image.topics.get("t")
        assert topic is not None
        assert all(p.leader == 2 and p.isr == (2,) for p in topic.partitions.values())
        while runtime.prober.in_flight:  # broker 2's probe (accepted, looked at twice) ends
            assert time.monotonic() < deadline, "the probe of broker 2 did not end"
            await asyncio.sleep(0.02)
        assert not fenced(2)
    finally:
        live.close()
        await runtime.stop()
