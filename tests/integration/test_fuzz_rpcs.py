"""Fuzz every RPC of every service on every port of a real cluster; the cluster must not notice.

What it checks, on 3 controller and 3 broker processes (tests/integration/cluster_harness.py):
random, truncated and mutated requests, and valid envelopes with wrong ids, epochs, offsets,
sizes and corrupt record batches (tests/integration/fuzz_strategies.py), are sent to every method
of every service in the generated descriptors (tidelog/v1/*_pb2.py: BrokerService,
ReplicaService, ControllerService, and whatever is added later) on every gRPC port of every node
(client, inter-broker when the node serves one, controller), each call without credentials, with
a forged one, and with a valid broker credential derived from the cluster's secret (an
authenticated but buggy broker: that is where the deep handlers run). Unary calls, short
client streams and server streams; every call has a deadline. Any gRPC status is an acceptable
answer. After every round of calls:

- every process still runs (its pid is alive) and every node is ready and answers (readiness,
  Metadata on each broker, DescribeQuorum on each controller);
- no handler raised: an exception that escapes a handler (grpcio logs "Unexpected [X] raised by
  servicer method [M]" with a traceback) or that a handler caught as a bug (log.exception) is a
  failure, listed by node, method and exception. A request that does not parse is answered
  UNKNOWN by grpcio itself before any handler runs (it logs a traceback too); those, and
  UNIMPLEMENTED methods, are counted in the summary, not failures;
- a producer (acks=all, RF=3, min.insync.replicas=2) writes known records to a topic the fuzzer
  may read and produce to but not delete or reconfigure; at the end each acknowledged record is
  read once at its acknowledged offset, and the replicas are compared byte for byte
  (replica_checks.assert_replicas_identical).

A summary of the statuses per method (and every UNKNOWN/INTERNAL answer) is printed; run with
``-s`` to see it on success. Budget: ``TIDELOG_FUZZ_SECONDS`` of calls (40 by default, which keeps
the test within about a minute with the cluster's start; ``make fuzz`` sets 600).
Seeds: each round's hypothesis seed is printed and named in a failure; ``TIDELOG_FUZZ_SEED``
replays a run's rounds (the cluster's timing still differs between runs).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import os
import pkgutil
import random
import re
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness
from fuzz_strategies import Pools, payloads
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from replica_checks import (
    GRPC_OPTIONS,
    Client,
    all_running,
    assert_replicas_identical,
    wait_for,
)

import tidelog.v1
from tidelog.client import Producer
from tidelog.cluster_secret import (
    BROKERS,
    CONTROLLERS,
    PEER_AUTH_METADATA,
    PEER_ID_METADATA,
    broker_credential,
)
from tidelog.local_cluster import HOST
from tidelog.record_batch import decode_records, parse_batch
from tidelog.v1 import broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

#: Seconds of fuzzing (rounds of calls); the cluster's start and the final checks come on top.
FUZZ_SECONDS = float(os.environ.get("TIDELOG_FUZZ_SECONDS", "40"))
ROUND_S = 5.0
#: Deadline of one fuzzed call, and the calls of one example (sent concurrently).
CALL_TIMEOUT_S = 1.5
CALLS_PER_EXAMPLE_MAX = 6
STREAM_MESSAGES_MAX = 4
#: A round runs chunks of this many examples until ROUND_S have passed.
EXAMPLES_PER_CHUNK = 10
ACKED_PER_ROUND = 20
ACK_TIMEOUT_S = 30.0
HEALTH_TIMEOUT_S = 20.0

#: Written by the producer and checked at the end: the fuzzer may read it and produce to it,
#: but never names it in a request that could delete or reconfigure it (that would be the
#: cluster doing what it was told, not losing data). Its configs are all set on the topic, so a
#: fuzzed cluster-wide default cannot change them either.
PROTECTED = "fuzz-acked"
PROTECTED_CONFIGS = dict(min_insync_replicas="2", retention_ms="-1", retention_bytes="-1",
                         cleanup_policy="delete", max_message_bytes="1048588",
                         message_timestamp_type="CreateTime", compression_type="producer",
                         unclean_leader_election_enable="false")
#: What the fuzzer may do anything to.
TARGET = "fuzz-target"
#: Methods that only read, or append to, the topics they name.
READ_METHODS = frozenset({"Metadata", "Produce", "ProduceStream", "Fetch", "FetchStream",
                          "ListOffsets", "DescribeLogs", "DescribeConfigs", "FetchMetadata",
                          "DescribeCluster", "DescribeQuorum", "OffsetFetch"})
FAST = {"controller": {"broker_session_timeout_ms": 4_000, "fence_check_interval_ms": 100},
        "broker": {"heartbeat_interval_ms": 500, "replica_lag_time_max_ms": 3_000,
                   "replica_fetch_wait_max_ms": 200}}
#: Statuses worth listing one by one in the summary.
NOTABLE = frozenset({"UNKNOWN", "INTERNAL"})
#: How grpcio's UNKNOWN answer to a request that does not parse begins.
UNPARSED = "Unexpected <class 'google.protobuf.message.DecodeError'>"


# --- what is fuzzed ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    service: str
    name: str
    request: Descriptor
    response: Descriptor
    client_streaming: bool
    server_streaming: bool

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"


def rpc_methods() -> list[Method]:
    """Every method of every service of every generated module in tidelog/v1."""
    found = []
    for module_info in pkgutil.iter_modules(tidelog.v1.__path__):
        if not module_info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(f"tidelog.v1.{module_info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            found += [Method(service.full_name, m.name, m.input_type, m.output_type,
                             m.client_streaming, m.server_streaming) for m in service.methods]
    return found


@dataclass(frozen=True)
class Target:
    node: str
    listener: str  # client, inter-broker, controller
    port: int


def targets(cluster: ClusterHarness) -> list[Target]:
    """Every gRPC port a node listens on now (one not served yet, e.g. 0 or unbound, is left
    out, so this runs before and after a listener is added)."""
    found = []
    for name, spec in cluster.local.nodes.items():
        ports = []
        if spec.is_broker:
            ports += [("client", spec.broker_port), ("inter-broker", spec.inter_broker_port)]
        if spec.is_controller:
            ports.append(("controller", spec.controller_port))
        found += [Target(name, listener, port) for listener, port in ports
                  if port and _listening(port)]
    return found


def served_services(channel: grpc.Channel, methods: list[Method]) -> set[str]:
    """The services a port serves: grpcio answers "Method not found!" for the others (probed
    with an empty request to each service's first unary method)."""
    served = set()
    for service in sorted({m.service for m in methods}):
        probe = next((m for m in methods if m.service == service and not m.client_streaming
                      and not m.server_streaming), None)
        if probe is None:
            continue
        try:
            channel.unary_unary(probe.path, request_serializer=None,
                                response_deserializer=None)(b"", timeout=HEALTH_TIMEOUT_S)
        except grpc.RpcError as error:
            if (error.code() == grpc.StatusCode.UNIMPLEMENTED
                    and error.details() == "Method not found!"):
                continue
        served.add(service)
    return served


def _pick(draw: st.DrawFn, items: list[Any]) -> Any:
    """One of ``items``, evenly: hypothesis's own choices lean on the first (its "simplest"),
    which would spend a fifth of the calls on one method. The Random is seeded from the
    example's data, so a seed still replays."""
    return draw(st.randoms(use_true_random=True)).choice(items)


def _listening(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
    except OSError:
        return False
    return True


# --- the calls -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    target: Target
    method: Method
    credential: str                       # none, forged, valid
    metadata: tuple[tuple[str, str], ...]
    requests: tuple[tuple[str, bytes, str], ...]  # (kind, bytes, description)


@dataclass
class Outcomes:
    """What came back, for the summary."""

    statuses: Counter[tuple[str, str]] = field(default_factory=Counter)
    codes: Counter[tuple[str, str]] = field(default_factory=Counter)  # error codes in answers
    notable: dict[tuple[str, str, str], Call] = field(default_factory=dict)
    calls: int = 0

    def add(self, call: Call, status: str, details: str, codes: list[int]) -> None:
        self.calls += 1
        for code in codes:
            self.codes[(call.method.path, _code_name(code))] += 1
        if status == "UNKNOWN" and details.startswith(UNPARSED):
            status = "UNKNOWN(unparsed)"  # grpcio's answer to bytes that do not parse
        self.statuses[(call.method.path, status)] += 1
        if status in NOTABLE:
            key = (call.method.path, status, details[:120])
            self.notable.setdefault(key, call)

    def summary(self) -> str:
        lines = [f"{self.calls} fuzzed calls; statuses per method:"]
        for path in sorted({p for p, _ in self.statuses}):
            counts = ", ".join(f"{s} {n}" for (p, s), n in sorted(self.statuses.items())
                               if p == path)
            errors = ", ".join(f"{c} {n}" for (p, c), n in sorted(self.codes.items())
                               if p == path)
            lines.append(f"  {path}: {counts}" + (f"; error codes: {errors}" if errors else ""))
        for (path, status, details), call in sorted(self.notable.items()):
            kind, _, text = call.requests[0]
            lines.append(f"  {status} from {path} on {call.target.node}/{call.target.listener} "
                         f"({call.credential} credential, {kind} request {text[:160]!r}): "
                         f"{details}")
        return "\n".join(lines)


def send(channel: grpc.Channel, call: Call) -> tuple[str, str, list[int]]:
    """Make one call (raw bytes both ways); its status name and details, and the error codes
    in the answers."""
    method, payloads_ = call.method, [data for _, data, _ in call.requests]
    options: dict[str, Any] = dict(request_serializer=None, response_deserializer=None)
    kwargs: dict[str, Any] = dict(timeout=CALL_TIMEOUT_S, metadata=call.metadata or None)
    answers: list[bytes] = []
    try:
        if not method.client_streaming and not method.server_streaming:
            answers.append(channel.unary_unary(method.path, **options)(payloads_[0], **kwargs))
        elif not method.client_streaming:
            stream = channel.unary_stream(method.path, **options)(payloads_[0], **kwargs)
            _drain(stream, STREAM_MESSAGES_MAX, answers)
        elif method.server_streaming:
            stream = channel.stream_stream(method.path, **options)(iter(payloads_), **kwargs)
            _drain(stream, len(payloads_) + 1, answers)
        else:
            answers.append(
                channel.stream_unary(method.path, **options)(iter(payloads_), **kwargs))
    except grpc.RpcError as error:
        return error.code().name, error.details() or "", _error_codes(method.response, answers)
    return "OK", "", _error_codes(method.response, answers)


def _drain(stream: Any, messages_max: int, answers: list[bytes]) -> None:
    """Read a few answers, then end the call (a metadata stream never ends by itself)."""
    try:
        for i, answer in enumerate(stream):
            answers.append(answer)
            if i + 1 >= messages_max:
                break
    finally:
        stream.cancel()


def _error_codes(response: Descriptor, answers: list[bytes]) -> list[int]:
    """Every ``error_code`` field in the answers, at any depth (how deep the calls got)."""
    codes: list[int] = []
    for data in answers:
        _collect_codes(message_factory.GetMessageClass(response).FromString(data), codes)
    return codes


def _collect_codes(message: Any, codes: list[int]) -> None:
    for f, value in message.ListFields():
        if f.name == "error_code":
            codes.append(value)
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            for item in (value if f.is_repeated else [value]):
                _collect_codes(item, codes)


def _code_name(code: int) -> str:
    try:
        return ErrorCode.Name(code)
    except ValueError:
        return str(code)


# --- node logs -----------------------------------------------------------------------------------


_SERVICER = re.compile(r"raised by servicer method \[(?P<method>[^\]]+)\]")


@dataclass(frozen=True)
class LoggedError:
    node: str
    header: str      # the log line before the traceback
    exception: str   # its last line
    text: str

    @property
    def kind(self) -> str:
        """decode: grpcio could not parse the request (no handler ran); unimplemented: a method
        the node does not serve; handler: anything else (a bug)."""
        if "cygrpc.deserialize" in self.text and "DecodeError" in self.exception:
            return "decode"
        if self.exception.startswith("NotImplementedError: Method not implemented"):
            return "unimplemented"
        return "handler"

    @property
    def method(self) -> str:
        match = _SERVICER.search(self.header)
        return match["method"] if match else "?"


class LogWatch:
    """Tracebacks that appear in the nodes' logs after a point (``mark``)."""

    def __init__(self, cluster: ClusterHarness) -> None:
        self.cluster = cluster
        self.offsets: dict[str, int] = {}

    def mark(self) -> None:
        for name in self.cluster.local.nodes:
            path = self.cluster.local.log_path(name)
            self.offsets[name] = path.stat().st_size if path.exists() else 0

    def new_errors(self) -> list[LoggedError]:
        found: list[LoggedError] = []
        for name in self.cluster.local.nodes:
            path = self.cluster.local.log_path(name)
            with open(path, "rb") as f:
                f.seek(self.offsets.get(name, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line being written now is read next time
            self.offsets[name] = self.offsets.get(name, 0) + end
            found += _tracebacks(name, data[:end].decode(errors="replace").splitlines())
        return found


def _tracebacks(node: str, lines: list[str]) -> list[LoggedError]:
    found = []
    for i, line in enumerate(lines):
        if not line.startswith("Traceback (most recent call last)"):
            continue
        j = i + 1
        while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
            j += 1
        exception = lines[j] if j < len(lines) else "?"
        header = lines[i - 1] if i else ""
        found.append(LoggedError(node, header, exception, "\n".join(lines[i:j + 1])))
    return found


# --- the cluster ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("fuzz") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3, overrides=FAST) as harness:
        harness.start_brokers()
        yield harness


class Fuzzer:
    """Draws calls (hypothesis), sends them concurrently, and keeps what came back."""

    def __init__(self, cluster: ClusterHarness, broker_ids: list[int], topic_ids: dict[str, bytes]
                 ) -> None:
        self.cluster = cluster
        self.broker_ids = broker_ids
        self.secret = cluster.local.secret_path.read_text().strip()
        self.targets = targets(cluster)
        self.methods = rpc_methods()
        self.outcomes = Outcomes()
        self.channels = {t.port: grpc.insecure_channel(f"{HOST}:{t.port}", options=GRPC_OPTIONS)
                         for t in self.targets}
        self.served = {t.port: served_services(self.channels[t.port], self.methods)
                       for t in self.targets}
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=CALLS_PER_EXAMPLE_MAX)
        ids = sorted(cluster.node(n).node_id for n in cluster.local.nodes)
        strings = [TARGET, "fuzz-other", "__consumer_offsets", cluster.cluster_id,
                   "retention.ms", "min.insync.replicas", "max.message.bytes",
                   "cleanup.policy", "compact", "uniform", "range", "group-1", HOST]
        self.write_pools = Pools(ints=ids, strings=strings, blobs=[topic_ids[TARGET]])
        self.read_pools = Pools(ints=ids, strings=[*strings, PROTECTED],
                                blobs=[topic_ids[TARGET], topic_ids[PROTECTED]])

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for channel in self.channels.values():
            channel.close()

    def credentials(self, draw: st.DrawFn, target: Target
                    ) -> tuple[str, int, tuple[tuple[str, str], ...]]:
        """(mode, the broker id it names, gRPC metadata). A valid credential is the one a
        broker presents to ``target``'s listener (the controllers and brokers get different
        keys: tidelog.cluster_secret)."""
        mode = _pick(draw, ["valid", "valid", "none", "forged"])
        broker_id = _pick(draw, self.broker_ids)
        audience = CONTROLLERS if target.listener == "controller" else BROKERS

        def key(of: int) -> str:
            return broker_credential(self.secret, of).presented_to(audience)
        if mode == "none":
            return mode, broker_id, ()
        if mode == "valid":
            return mode, broker_id, (
                (PEER_ID_METADATA, str(broker_id)), (PEER_AUTH_METADATA, key(broker_id)))
        other = draw(st.sampled_from([b for b in self.broker_ids if b != broker_id]))
        peer, auth = draw(st.sampled_from([
            (str(broker_id), key(other)),  # another broker's
            (str(broker_id), "00" * 32), ("abc", key(broker_id)),
            ("-1", ""), (str(broker_id), "not-hex")]))
        return mode, broker_id, ((PEER_ID_METADATA, peer), (PEER_AUTH_METADATA, auth))

    def draw_call(self, draw: st.DrawFn) -> Call:
        target = _pick(draw, self.targets)
        served = [m for m in self.methods if m.service in self.served[target.port]]
        # Mostly what the port serves; the rest must be refused as unknown methods.
        anything = not served or _pick(draw, range(10)) == 9
        method = _pick(draw, self.methods if anything else served)
        credential, peer, metadata = self.credentials(draw, target)
        pools = self.read_pools if method.name in READ_METHODS else self.write_pools
        # Ids in the request are often the credential's own, as a real broker's would be, so a
        # valid credential gets past the identity check into the handler.
        pools = dataclasses.replace(pools, ints=[peer] * len(pools.ints) + pools.ints)
        count = draw(st.integers(1, STREAM_MESSAGES_MAX)) if method.client_streaming else 1
        requests = tuple(draw(payloads(method.request, pools)) for _ in range(count))
        return Call(target, method, credential, metadata, requests)

    def run_example(self, draw: st.DrawFn) -> None:
        calls = [self.draw_call(draw) for _ in range(draw(st.integers(1, CALLS_PER_EXAMPLE_MAX)))]
        futures = {self.pool.submit(send, self.channels[c.target.port], c): c for c in calls}
        for future, call in futures.items():
            status, details, codes = future.result(timeout=CALL_TIMEOUT_S * 10)
            self.outcomes.add(call, status, details, codes)

    def run_round(self, round_seed: int, seconds: float) -> None:
        """Chunks of examples until ``seconds`` have passed; each chunk's hypothesis seed comes
        from ``round_seed``, so a round replays from it. (One long hypothesis run cut short by
        the clock would draw differently for the same choices, which hypothesis refuses.)"""
        deadline = time.monotonic() + seconds
        seeds = random.Random(round_seed)

        @settings(max_examples=EXAMPLES_PER_CHUNK, deadline=None, database=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(st.data())
        def fuzz(data: st.DataObject) -> None:
            self.run_example(data.draw)

        while time.monotonic() < deadline:
            seed(seeds.randrange(2**32))(fuzz)()


# --- checks --------------------------------------------------------------------------------------


def assert_all_serve(cluster: ClusterHarness) -> None:
    """Every process alive, ready, and answering its own service."""
    dead = [n for n in cluster.local.nodes if not cluster.is_running(n)]
    assert not dead, "processes died: " + "; ".join(
        f"{n}:\n{cluster.log_tail(n, 40)}" for n in dead)
    cluster.wait_ready(list(cluster.local.nodes), timeout_s=HEALTH_TIMEOUT_S)
    for spec in cluster.local.nodes.values():
        port = spec.broker_port if spec.is_broker else spec.controller_port
        with grpc.insecure_channel(f"{HOST}:{port}", options=GRPC_OPTIONS) as channel:
            if spec.is_broker:
                broker_pb2_grpc.BrokerServiceStub(channel).Metadata(
                    broker_pb2.MetadataRequest(), timeout=HEALTH_TIMEOUT_S)
            else:
                controller_pb2_grpc.ControllerServiceStub(channel).DescribeQuorum(
                    controller_pb2.DescribeQuorumRequest(), timeout=HEALTH_TIMEOUT_S)


def write_acked(producer: Producer, round_no: int, acked: dict[int, bytes]) -> None:
    futures = [producer.send(PROTECTED, f"acked-{round_no}-{i}".encode(), partition=0)
               for i in range(ACKED_PER_ROUND)]
    producer.flush(timeout_ms=int(ACK_TIMEOUT_S * 1000))
    for i, future in enumerate(futures):
        meta = future.result(timeout=ACK_TIMEOUT_S)
        acked[meta.offset] = f"acked-{round_no}-{i}".encode()


def assert_acked_intact(client: Client, acked: dict[int, bytes]) -> None:
    """Each acknowledged record, read once at its acknowledged offset."""
    wrong = []
    for offset, value in sorted(acked.items()):
        answer = client.fetch(PROTECTED, offset)
        assert answer.error_code == ErrorCode.NONE, (offset, answer.error_message)
        found = [r.value for data in answer.batches
                 for r in decode_records(parse_batch(data)) if r.offset == offset]
        if found != [value]:
            wrong.append((offset, value, found))
    assert not wrong, f"acknowledged records changed or lost (offset, wrote, read): {wrong[:20]}"


def failure_report(errors: list[LoggedError]) -> str:
    by_key: dict[tuple[str, str], list[LoggedError]] = {}
    for error in errors:
        by_key.setdefault((error.method, error.exception), []).append(error)
    parts = []
    for (method, exception), seen in sorted(by_key.items()):
        nodes = sorted({e.node for e in seen})
        parts.append(f"{method}: {exception} ({len(seen)}x on {', '.join(nodes)})\n"
                     f"{seen[0].header}\n{seen[0].text}")
    return "\n\n".join(parts)


# --- the test ------------------------------------------------------------------------------------


def test_fuzzed_rpcs_leave_the_cluster_serving_and_acked_records_intact(
        cluster: ClusterHarness) -> None:
    all_running(cluster)
    client = Client(cluster)
    wait_for(lambda: len(client.live()) == 3, "three brokers")
    replicas = sorted(client.names)
    client.create_topic(PROTECTED, replicas, **PROTECTED_CONFIGS)
    client.create_topic(TARGET, replicas, min_insync_replicas="2")
    topic_ids = {}
    for name in (PROTECTED, TARGET):
        meta = client.metadata(name)
        assert meta is not None, name
        topic_ids[name] = meta.topic_id
    base_seed = int(os.environ.get("TIDELOG_FUZZ_SEED", random.randrange(2**32)))
    fuzzer = Fuzzer(cluster, replicas, topic_ids)
    print(f"\nfuzzing {len(fuzzer.methods)} methods on {len(fuzzer.targets)} ports "
          f"({', '.join(f'{t.node}/{t.listener}' for t in fuzzer.targets)}) for "
          f"{FUZZ_SECONDS:.0f} s; TIDELOG_FUZZ_SEED={base_seed}")
    logs = LogWatch(cluster)
    acked: dict[int, bytes] = {}
    handler_errors: list[LoggedError] = []
    framework: Counter[str] = Counter()
    producer = Producer(cluster.bootstrap, acks="all", request_timeout_ms=5_000,
                        delivery_timeout_ms=int(ACK_TIMEOUT_S * 1000), retry_backoff_ms=50)
    try:
        write_acked(producer, -1, acked)
        logs.mark()
        end = time.monotonic() + FUZZ_SECONDS
        round_no = 0
        while (left := end - time.monotonic()) > 0:
            round_seed = (base_seed + round_no) % 2**32
            try:
                fuzzer.run_round(round_seed, min(ROUND_S, left))
                assert_all_serve(cluster)
                write_acked(producer, round_no, acked)
            except BaseException:
                print(f"failed in round {round_no} (hypothesis seed {round_seed}, "
                      f"TIDELOG_FUZZ_SEED={base_seed})\n{fuzzer.outcomes.summary()}")
                raise
            for error in logs.new_errors():
                if error.kind == "handler":
                    handler_errors.append(error)
                else:
                    framework[error.kind] += 1
            round_no += 1
    finally:
        producer.close()
        fuzzer.close()
    print(fuzzer.outcomes.summary())
    print(f"tracebacks grpcio logged for requests no handler saw: {dict(framework)}")
    if handler_errors:
        print(failure_report(handler_errors))
    assert fuzzer.outcomes.calls > 0, "nothing was fuzzed"
    try:
        assert_acked_intact(client, acked)
        assert_replicas_identical(client, PROTECTED)
    finally:
        client.close()
    assert not handler_errors, (
        f"handlers raised on fuzzed input (TIDELOG_FUZZ_SEED={base_seed}):\n"
        + failure_report(handler_errors))
