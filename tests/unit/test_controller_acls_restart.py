"""ACL bindings survive a controller restart, on a real one-voter quorum inside this process.

A ControllerRuntime serves CreateAcls and DeleteAcls through its gRPC servicer (called directly,
without a server: the peer-auth interceptor is the server's and is tested elsewhere); part of the
log is compacted into a Raft snapshot, the rest stays in the journal. A new runtime on the same
data dir restores the snapshot, replays the journal and holds the same bindings under the same
ids. A stopped controller answers NOT_CONTROLLER in every item.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from controller_testkit import one_voter_config
from prometheus_client import CollectorRegistry

from tidelog.acl import AclBinding, AclFilter, binding_from_proto, binding_to_proto, filter_to_proto
from tidelog.config import NodeConfig
from tidelog.controller.metrics import ControllerMetrics
from tidelog.controller.runtime import ControllerRuntime
from tidelog.controller.service import ControllerService
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

WAIT_S = 10.0

READ_ORDERS = AclBinding("User:alice", "*", "topic", "orders", "literal", "Read", "allow")
WRITE_LOGS = AclBinding("User:bob", "10.0.0.1", "topic", "logs-", "prefixed", "Write", "allow")
DENY_GROUP = AclBinding("User:*", "*", "group", "g", "literal", "All", "deny")
ALTER_CLUSTER = AclBinding("User:ops", "*", "cluster", "kafka-cluster", "literal", "Alter",
                           "allow")


def _config(tmp_path: Path) -> NodeConfig:
    config: NodeConfig = one_voter_config(tmp_path)
    return config


async def _wait(predicate: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


class _Runtime(ControllerRuntime):
    """Counts snapshot restores (the Raft adapter calls ``restore`` on its thread)."""

    restores = 0

    def restore(self, data: bytes) -> None:
        self.restores += 1
        super().restore(data)


async def _started(config: NodeConfig) -> _Runtime:
    runtime = _Runtime(config, cluster_id="c", metrics=ControllerMetrics(CollectorRegistry()))
    await runtime.start()
    await _wait(lambda: runtime.active, "the one voter to become active")
    return runtime


async def _create(service: ControllerService, *bindings: AclBinding) -> cpb.CreateAclsResponse:
    request = cpb.CreateAclsRequest(creations=[binding_to_proto(b) for b in bindings])
    response: cpb.CreateAclsResponse = await service.CreateAcls(request, None)
    return response


async def _delete(service: ControllerService, *filters: AclFilter) -> cpb.DeleteAclsResponse:
    request = cpb.DeleteAclsRequest(filters=[filter_to_proto(f) for f in filters])
    response: cpb.DeleteAclsResponse = await service.DeleteAcls(request, None)
    return response


def test_acls_survive_a_restart_from_snapshot_and_journal(tmp_path: Path) -> None:
    asyncio.run(_restart(tmp_path))


async def _restart(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await _started(config)
    service = ControllerService(first)
    try:
        created = await _create(service, READ_ORDERS, WRITE_LOGS, DENY_GROUP)
        assert [r.error_code for r in created.results] == [ErrorCode.NONE] * 3, created
        first.quorum.force_snapshot()
        await _wait(first.quorum.snapshot_path.exists, "the Raft snapshot")
        # After the snapshot, in the journal only: a delete and a creation.
        removed = await _delete(service, AclFilter(principal="User:bob"))
        assert [binding_from_proto(b) for b in removed.results[0].deleted] == [WRITE_LOGS]
        await _create(service, ALTER_CLUSTER)
        before = dict(first.logic.committed_image.acls.by_id)
        assert set(before.values()) == {READ_ORDERS, DENY_GROUP, ALTER_CLUSTER}
    finally:
        await first.stop()

    refused = await _create(service, READ_ORDERS, WRITE_LOGS)
    assert [r.error_code for r in refused.results] == [ErrorCode.NOT_CONTROLLER] * 2, refused
    assert "not the active controller" in refused.results[0].error_message

    second = await _started(config)
    try:
        assert second.restores == 1, "started from the snapshot, then the journal"
        assert dict(second.logic.committed_image.acls.by_id) == before
        # Still one copy of each: re-creating writes nothing, deleting finds the restored ids.
        offset = second.logic.committed_offset
        again = await _create(ControllerService(second), READ_ORDERS)
        assert again.results[0].error_code == ErrorCode.NONE
        assert second.logic.committed_offset == offset
        gone = await _delete(ControllerService(second), AclFilter())
        assert len(gone.results[0].deleted) == 3
        assert second.logic.committed_image.acls.bindings() == ()
    finally:
        await second.stop()
