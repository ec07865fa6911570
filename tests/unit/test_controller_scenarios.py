"""Golden scenarios for the controller: commands in, records, responses and images out.

Each file in testdata/controller/ is a script in the style of etcd-raft's datadriven tests:

    # a comment
    register broker=1 rack=a
    ----
    + register_broker broker_id=1 ...
    = broker_epoch=1

A command line, ``----``, then the expected output up to a blank line. ``+`` lines are records
proposed, ``=`` the response, ``!`` a batch that became a no-op at replay. By default every
proposal commits at once; ``autocommit off`` leaves them in flight until ``commit``.

After every command the runner also checks that replaying the committed log from scratch gives
the committed image's digest, and that a snapshot round trip does too.

Run with TIDELOG_REWRITE_GOLDEN=1 to rewrite the expected output from what the code does now
(then review the diff).
"""

from __future__ import annotations

import pathlib
import shlex
from collections.abc import Callable
from typing import Any

import pytest
from controller_testkit import (
    BROKER,
    TOPIC,
    TestCluster,
    alter_op,
    create_topic,
    register_request,
)
from golden import check_golden
from google.protobuf.message import Message

from tidelog import scram
from tidelog.acl import AclBinding, AclFilter, binding_to_proto, filter_to_proto
from tidelog.controller.control import ControllerResult, ReplayOutcome
from tidelog.controller.managers.cluster_control import ProbeTarget
from tidelog.metadata.records import describe_message, image_from_snapshot
from tidelog.v1 import common_pb2, controller_pb2

TESTDATA = pathlib.Path(__file__).parent / "testdata" / "controller"
HEX = 8  # bytes shown as this many hex characters


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


class Runner:
    """Executes commands against a TestCluster and renders what happened."""

    def __init__(self) -> None:
        self.cluster = TestCluster()
        self.probes: dict[int, ProbeTarget] = {}

    def run(self, command: str) -> list[str]:
        words = shlex.split(command)
        name, args = words[0], words[1:]
        flags = {a for a in args if "=" not in a}
        pairs: dict[str, list[str]] = {}
        for arg in args:
            if "=" in arg:
                key, value = arg.split("=", 1)
                pairs.setdefault(key, []).append(value)
        handler: Callable[[dict[str, list[str]], set[str]], list[str]] = getattr(
            self, "cmd_" + name.replace("-", "_")
        )
        output = handler(pairs, flags)
        self._check_invariants()
        return output or ["ok"]

    # --- output -------------------------------------------------------------------------------

    def _proposal(self, result: ControllerResult[Any], *, show_response: bool = True) -> list[str]:
        lines = [
            f"+ {result.base_offset + index} {describe_message(record, bytes_hex_max=HEX)}"
            for index, record in enumerate(result.records)
        ]
        if show_response and result.response is not None:
            lines += self._response(result.response)
        return lines

    def _response(self, response: Message) -> list[str]:
        """``= `` and the top-level fields, then ``=   `` and one line per listed item."""
        head = type(response)()
        head.CopyFrom(response)
        items = []
        for field in response.DESCRIPTOR.fields:
            if field.is_repeated and field.message_type is not None:
                for item in getattr(response, field.name):
                    items.append(f"=   {describe_message(item, bytes_hex_max=HEX)}")
                head.ClearField(field.name)
        return [f"= {describe_message(head, bytes_hex_max=HEX)}".rstrip(), *items]

    def _check_invariants(self) -> None:
        logic = self.cluster.logic
        assert self.cluster.replayed_from_scratch().digest() == logic.committed_image.digest()
        restored = image_from_snapshot(logic.committed_snapshot())
        assert restored.digest() == logic.committed_image.digest()

    # --- commands: quorum ---------------------------------------------------------------------

    def cmd_become_active(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        self.cluster.now_ms += int(pairs.get("advance", ["0"])[0])
        return self._proposal(self.cluster.activate())

    def cmd_resign(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        self.cluster.logic.on_resign()
        dropped = len(self.cluster.in_flight)
        return [f"active=false in_flight={dropped}"]

    def cmd_autocommit(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        self.cluster.autocommit = "on" in flags
        return []

    def cmd_commit(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        count = int(pairs["count"][0]) if "count" in pairs else None
        lines = []
        for outcome in self.cluster.commit(count):
            lines += self._outcome(outcome)
        return lines

    def _outcome(self, outcome: ReplayOutcome) -> list[str]:
        lines = [
            f"replayed base={outcome.base_offset} own={str(outcome.own).lower()} "
            f"diverged={str(outcome.diverged).lower()}"
        ]
        if outcome.ignored:
            lines.append(f"! {outcome.ignored}")
        return lines

    def cmd_status(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        logic = self.cluster.logic
        return [
            f"active={str(logic.is_active).lower()} committed={logic.committed_offset} "
            f"next={logic.next_offset} pending={logic.pending_batches}"
        ]

    def cmd_image(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        logic = self.cluster.logic
        image = logic.committed_image if "committed" in flags else logic.image
        return image.canonical_lines()

    def cmd_local_changes(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        """What the last committed batch asks of a broker."""
        assert self.cluster.last_commit is not None
        _, delta = self.cluster.last_commit
        changes = delta.local_changes(int(pairs["broker"][0]))
        lines = []
        for kind, entries in (
            ("delete", changes.deletes), ("lead", changes.leaders), ("follow", changes.followers)
        ):
            for p in entries:
                r = p.registration
                lines.append(
                    f"{kind} {p.topic_name}-{p.partition_id} leader={r.leader} "
                    f"leader_epoch={r.leader_epoch} isr={list(r.isr)}"
                )
        return lines or ["nothing"]

    # --- commands: brokers --------------------------------------------------------------------

    def cmd_advance(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        self.cluster.now_ms += int(pairs["ms"][0])
        return [f"now={self.cluster.now_ms}"]

    def cmd_register(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        kwargs: dict[str, object] = {"rack": pairs.get("rack", [""])[0]}
        if "gen" in pairs:
            kwargs["generation"] = int(pairs["gen"][0])
        if "cluster" in pairs:
            kwargs["cluster_id"] = pairs["cluster"][0]
        if "host" in pairs:
            kwargs["host"] = pairs["host"][0]
        request = register_request(int(pairs["broker"][0]), **kwargs)  # type: ignore[arg-type]
        if "inter-broker-port" in pairs:
            request.inter_broker_endpoint.CopyFrom(common_pb2.Endpoint(
                host=request.endpoint.host, port=int(pairs["inter-broker-port"][0])))
        result = self.cluster.logic.handle_register_broker(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    def cmd_heartbeat(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        broker_id = int(pairs["broker"][0])
        offset = pairs.get("offset", ["committed"])[0]
        registration = self.cluster.logic.image.cluster.broker(broker_id)
        epoch = registration.broker_epoch if registration is not None else 0
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=int(pairs["epoch"][0]) if "epoch" in pairs else epoch,
            current_metadata_offset=(
                self.cluster.logic.committed_offset if offset == "committed" else int(offset)
            ),
            want_fence="fence" in flags,
            want_shutdown="shutdown" in flags,
        )
        result = self.cluster.logic.handle_broker_heartbeat(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    def cmd_tick(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        self.cluster.now_ms += int(pairs.get("advance", ["0"])[0])
        result = self.cluster.logic.maybe_fence_stale_brokers(self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result), show_response=False)

    def cmd_probe(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        """Start the probes that are due: ``silent=MS`` (default 2500), ``stream-ended=B,...``
        (brokers whose metadata stream ended), ``limit=N``; ``advance=MS`` first."""
        self.cluster.now_ms += int(pairs.get("advance", ["0"])[0])
        targets = self.cluster.logic.start_broker_probes(
            self.cluster.now_ms, silent_ms=int(pairs.get("silent", ["2500"])[0]),
            hinted=_ints(pairs.get("stream-ended", [""])[0]),
            limit=int(pairs.get("limit", ["100"])[0]))
        lines = []
        for t in targets:
            self.probes[t.broker_id] = t
            endpoints = ",".join(f"{host}:{port}" for host, port in t.endpoints)
            lines.append(f"probe broker={t.broker_id} epoch={t.broker_epoch} "
                         f"endpoints={endpoints} started={t.started_ms}")
        return lines or ["nothing to probe"]

    def cmd_probe_result(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        """The probe of ``broker=`` ends ``refused`` (every listener refused) or not; then the
        runtime calls handle_broker_unreachable (``epoch=`` overrides the probed epoch)."""
        self.cluster.now_ms += int(pairs.get("advance", ["0"])[0])
        broker_id = int(pairs["broker"][0])
        target = self.probes.pop(broker_id, None) or ProbeTarget(  # a made-up one (epoch= given)
            broker_id, int(pairs["epoch"][0]), (), self.cluster.now_ms)
        lines = []
        if "refused" in flags:
            epoch = int(pairs["epoch"][0]) if "epoch" in pairs else target.broker_epoch
            result = self.cluster.logic.handle_broker_unreachable(
                target.broker_id, epoch, target.started_ms, self.cluster.now_ms)
            lines = self._proposal(self.cluster.submit(result), show_response=False)
        self.cluster.logic.heartbeats.end_probe(target.broker_id, target.started_ms)
        return lines or ["not fenced"]

    # --- commands: topics ---------------------------------------------------------------------

    def cmd_create_topic(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        topics = []
        configs = [tuple(c.split("=", 1)) for c in pairs.get("config", [])]
        assignments = None
        if "assign" in pairs:
            assignments = [_ints(p) for p in pairs["assign"][0].split(";")]
        for name in pairs["name"]:
            topics.append(create_topic(
                name,
                int(pairs["partitions"][0]) if "partitions" in pairs else None,
                int(pairs["rf"][0]) if "rf" in pairs else None,
                configs=configs,  # type: ignore[arg-type]
                assignments=assignments,
            ))
        request = controller_pb2.CreateTopicsRequest(
            topics=topics, validate_only="validate-only" in flags
        )
        result = self.cluster.logic.handle_create_topics(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    def cmd_delete_topic(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        request = controller_pb2.DeleteTopicsRequest(
            names=pairs.get("name", []), topic_ids=[bytes.fromhex(i) for i in pairs.get("id", [])]
        )
        result = self.cluster.logic.handle_delete_topics(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    def cmd_create_partitions(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        topic = controller_pb2.CreatePartitionsRequest.Topic(
            name=pairs["name"][0], count=int(pairs["count"][0])
        )
        if "assign" in pairs:
            first = int(pairs.get("first", ["0"])[0])
            for index, brokers in enumerate(pairs["assign"][0].split(";")):
                topic.assignments.add(partition_id=first + index, broker_ids=_ints(brokers))
        request = controller_pb2.CreatePartitionsRequest(
            topics=[topic], validate_only="validate-only" in flags
        )
        result = self.cluster.logic.handle_create_partitions(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    def _isr_epochs(self, pairs: dict[str, list[str]]) -> list[Any]:
        """KIP-903's NewIsrWithEpochs: each member's current registration epoch, as a leader
        that saw it fetch would send, unless ``isr-epochs=BROKER:EPOCH,...`` says otherwise."""
        given = dict(tuple(map(int, e.split(":"))) for e in pairs.get("isr-epochs", [""])[0]
                     .split(",") if e)
        brokers = self.cluster.logic.image.cluster.brokers
        return [controller_pb2.AlterPartitionRequest.BrokerState(
            broker_id=b, broker_epoch=given.get(b, brokers[b].broker_epoch if b in brokers
                                                else -1))
            for b in _ints(pairs["isr"][0])]

    def cmd_alter_partition(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        topic = self.cluster.logic.image.topics.get(pairs["topic"][0])
        assert topic is not None
        partition_id = int(pairs.get("partition", ["0"])[0])
        current = topic.partitions[partition_id]
        broker_id = int(pairs["broker"][0])
        registration = self.cluster.logic.image.cluster.broker(broker_id)
        request = controller_pb2.AlterPartitionRequest(
            broker_id=broker_id,
            broker_epoch=int(pairs["broker-epoch"][0]) if "broker-epoch" in pairs
            else (registration.broker_epoch if registration else 0),
        )
        request.topics.add(topic_id=topic.topic_id).partitions.add(
            partition_id=partition_id,
            leader_epoch=int(pairs.get("leader-epoch", [str(current.leader_epoch)])[0]),
            partition_epoch=int(pairs.get("partition-epoch", [str(current.partition_epoch)])[0]),
            new_isr=_ints(pairs["isr"][0]),
            new_isr_with_epochs=self._isr_epochs(pairs),
        )
        result = self.cluster.logic.handle_alter_partition(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    # --- commands: configs and producer ids ---------------------------------------------------

    def _resource(self, pairs: dict[str, list[str]], flags: set[str]) -> tuple[int, str]:
        if "topic" in pairs:
            return TOPIC, pairs["topic"][0]
        if "broker" in pairs:
            return BROKER, pairs["broker"][0]
        assert "cluster" in flags
        return BROKER, ""

    def cmd_alter_config(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        resource_type, resource_name = self._resource(pairs, flags)
        ops = []
        for kind in ("set", "delete", "append", "subtract"):
            for entry in pairs.get(kind, []):
                name, _, value = entry.partition("=")
                ops.append(alter_op(name, value, kind))
        request = controller_pb2.AlterConfigsRequest(validate_only="validate-only" in flags)
        request.resources.add(
            resource_type=resource_type,  # type: ignore[arg-type]
            resource_name=resource_name, ops=ops,
        )
        result = self.cluster.logic.handle_alter_configs(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    def cmd_describe_config(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        resource_type, resource_name = self._resource(pairs, flags)
        request = controller_pb2.DescribeConfigsRequest()
        request.resources.add(
            resource_type=resource_type,  # type: ignore[arg-type]
            resource_name=resource_name,
            names=pairs.get("names", [""])[0].split(",") if "names" in pairs else [],
        )
        result = self.cluster.logic.handle_describe_configs(request, self.cluster.now_ms)
        assert not result.records
        lines = []
        for resource in result.response.resources:
            if resource.error_code:
                lines.append(f"= {describe_message(resource, bytes_hex_max=HEX)}")
            for config in resource.configs:
                source = controller_pb2.ConfigSource.Name(config.source)
                lines.append(f"{config.name}={config.value} ({source})")
        return lines

    def cmd_allocate_producer_ids(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        broker_id = int(pairs["broker"][0])
        registration = self.cluster.logic.image.cluster.broker(broker_id)
        request = controller_pb2.AllocateProducerIdsRequest(
            broker_id=broker_id,
            broker_epoch=int(pairs["epoch"][0]) if "epoch" in pairs
            else (registration.broker_epoch if registration else 0),
        )
        result = self.cluster.logic.handle_allocate_producer_ids(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    # --- commands: ACLs -----------------------------------------------------------------------

    def cmd_create_acls(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        """``acl="PERMISSION PRINCIPAL HOST OPERATION TYPE PATTERN NAME"``, repeated."""
        creations = []
        for text in pairs.get("acl", []):
            permission, principal, host, operation, kind, pattern, name = text.split(" ")
            creations.append(binding_to_proto(
                AclBinding(principal, host, kind, name, pattern, operation, permission)))
        request = controller_pb2.CreateAclsRequest(creations=creations)
        result = self.cluster.logic.handle_create_acls(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))

    def cmd_delete_acls(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        """``filter="field=value ..."``, repeated; ``filter=`` matches every binding."""
        filters = []
        for text in pairs.get("filter", []):
            fields = dict(entry.split("=", 1) for entry in text.split(" ") if entry)
            filters.append(filter_to_proto(AclFilter(**fields)))
        request = controller_pb2.DeleteAclsRequest(filters=filters)
        result = self.cluster.logic.handle_delete_acls(request, self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))


    # --- commands: SCRAM credentials -----------------------------------------------------------

    def cmd_alter_scram(self, pairs: dict[str, list[str]], flags: set[str]) -> list[str]:
        """``upsert="NAME MECHANISM ITERATIONS SALT_HEX PASSWORD"`` and
        ``delete="NAME MECHANISM"``, each repeated; the password is salted here, as the client
        does."""
        request = controller_pb2.AlterUserScramCredentialsRequest()
        for text in pairs.get("delete", []):
            name, mechanism = text.split(" ")
            request.deletions.add(name=name, mechanism=_mechanism_value(mechanism))
        for text in pairs.get("upsert", []):
            name, mechanism, iterations, salt_hex, password = text.split(" ")
            m = scram.mechanism_named(mechanism)
            salt = bytes.fromhex(salt_hex)
            salted = scram.salted_password(m, password, salt, int(iterations)) \
                if m is not None and int(iterations) <= scram.ITERATIONS_MAX else b"?"
            request.upsertions.add(name=name, mechanism=_mechanism_value(mechanism),
                                   iterations=int(iterations), salt=salt,
                                   salted_password=salted)
        result = self.cluster.logic.handle_alter_user_scram_credentials(request,
                                                                        self.cluster.now_ms)
        return self._proposal(self.cluster.submit(result))


def _mechanism_value(name: str) -> int:
    m = scram.mechanism_named(name)
    return m.value if m is not None else 99


def _scenario_files() -> list[pathlib.Path]:
    return sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda p: p.stem)
def test_scenario(path: pathlib.Path) -> None:
    check_golden(path, Runner().run)


def test_scenario_files_exist() -> None:
    assert len(_scenario_files()) >= 5
