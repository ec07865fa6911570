"""An in-process fake of the BrokerService, for the client library's unit tests.

Not a broker: a test double that speaks the real gRPC contract (proto/tidelog/v1/broker.proto)
on 127.0.0.1 over an in-memory log, so the client's network code (metadata, produce, fetch,
list offsets, producer ids, admin calls) runs end to end without the real brokers. It keeps the
semantics the client relies on: per-partition errors with leader hints, offsets assigned by the
leader, idempotent producers (the last five batches per producer and partition; a duplicate
answers its first offset, a gap OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch
INVALID_PRODUCER_EPOCH; sequences wrap from 2**31-1 to 0 as Kafka's do), fetches of whole
batches from the one holding the fetch offset, long-polls bounded by max_wait_ms, and topic
configs validated by tidelog.configs.

Every fake broker of a ``FakeCluster`` is its own grpc.aio server (its own port), all on one
event loop on a daemon thread; the state is only touched on that loop, and tests change it
through ``FakeCluster`` methods that run there (``_on_loop``). Knobs for failures:

* ``inject(rpc, code, ...)``: the next ``times`` matching requests (or partitions) answer
  ``code`` (with a leader hint for NOT_LEADER_OR_FOLLOWER), optionally *after* appending
  (``after_append=True``: the write happened, the client does not know).
* ``move_leader(topic, partition, broker_id)``: a new leader with a new leader epoch; the old one
  answers NOT_LEADER_OR_FOLLOWER with a hint.
* ``set_delay(rpc, ms)`` / ``slow_next(rpc, ms, times=n)``: slow responses (always, or for the
  next n calls); ``stop_broker``/``start_broker``: a broker goes away (connection refused) and
  comes back on the same port.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from tidelog import limits
from tidelog.configs import TOPIC_CONFIGS, validate_topic_config
from tidelog.errors import ErrorCode, TidelogError
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.record_batch import (
    ConsumerRecord,
    assign,
    decode_records,
    last_offset,
    parse_batch,
    validate_batch,
)
from tidelog.v1 import broker_pb2, broker_pb2_grpc, common_pb2, controller_pb2, metadata_pb2

T = TypeVar("T")

INT32_MAX = 0x7FFFFFFF  # a producer's sequences wrap from here to 0, as Kafka's do
PRODUCER_STATE_BATCHES = 5  # what a leader remembers per producer and partition (DESIGN §9)
LOOP_CALL_TIMEOUT_S = 10.0


@dataclass
class Fault:
    rpc: str
    code: int
    topic: str | None = None
    partition: int | None = None
    broker: int | None = None
    times: int = 1
    after_append: bool = False
    message: str = "injected by the test"

    def matches(self, rpc: str, broker: int, topic: str | None, partition: int | None) -> bool:
        return (
            self.times > 0
            and self.rpc == rpc
            and (self.broker is None or self.broker == broker)
            and (self.topic is None or self.topic == topic)
            and (self.partition is None or self.partition == partition)
        )


@dataclass
class ProducerEntry:
    epoch: int
    batches: collections.deque[tuple[int, int, int]] = field(
        default_factory=lambda: collections.deque(maxlen=PRODUCER_STATE_BATCHES)
    )  # (first sequence, last sequence, base offset)


@dataclass
class FakePartition:
    leader: int
    leader_epoch: int
    replicas: list[int]
    batches: list[bytes] = field(default_factory=list)  # stamped, in offset order
    base_offsets: list[int] = field(default_factory=list)
    log_start: int = 0
    end_offset: int = 0
    producers: dict[int, ProducerEntry] = field(default_factory=dict)


@dataclass
class FakeTopic:
    name: str
    topic_id: bytes
    partitions: list[FakePartition]
    configs: dict[str, str] = field(default_factory=dict)
    is_internal: bool = False


class FakeCluster:
    """N fake brokers sharing one in-memory cluster state. Use as a context manager."""

    def __init__(self, brokers: int = 1, *, cluster_id: str = "fake-cluster") -> None:
        self.cluster_id = cluster_id
        self.broker_ids = list(range(1, brokers + 1))
        self.ports: dict[int, int] = {}
        self.topics: dict[str, FakeTopic] = {}
        self.faults: list[Fault] = []
        self.delays_ms: dict[str, int] = {}
        self.slow: dict[str, list[int]] = {}
        self.calls: collections.Counter[tuple[int, str]] = collections.Counter()
        self.produce_requests: list[broker_pb2.ProduceRequest] = []
        #: the topics every Metadata request named, in order ([]: all topics).
        self.metadata_requests: list[list[str]] = []
        #: every Fetch received: its (topic, partition, fetch offset) triples, in order.
        self.fetch_requests: list[list[tuple[str, int, int]]] = []
        self.producer_epochs: dict[int, int] = {}
        self.fenced: set[int] = set()
        self.default_partitions = 1
        self.cluster_configs: dict[str, str] = {}
        self._next_producer_id = 1000
        self._servers: dict[int, grpc.aio.Server] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-brokers",
                                        daemon=True)
        self._changed: asyncio.Event | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeCluster:
        self._thread.start()
        for broker_id in self.broker_ids:
            self.start_broker(broker_id)
        return self

    def __exit__(self, *exc: object) -> None:
        for broker_id in list(self._servers):
            self.stop_broker(broker_id)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=LOOP_CALL_TIMEOUT_S)
        self._loop.close()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(LOOP_CALL_TIMEOUT_S)

    def _on_loop(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            return fn()

        result: T = self._run(call())
        return result

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[b]}" for b in self.broker_ids)

    def address(self, broker_id: int) -> str:
        return f"127.0.0.1:{self.ports[broker_id]}"

    def start_broker(self, broker_id: int) -> None:
        async def start() -> None:
            if self._changed is None:
                self._changed = asyncio.Event()
            server = grpc.aio.server(options=[
                ("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
            ])
            _add_implemented(FakeBroker(self, broker_id), server)
            port = server.add_insecure_port(f"127.0.0.1:{self.ports.get(broker_id, 0)}")
            assert port, "could not bind"
            self.ports[broker_id] = port
            await server.start()
            self._servers[broker_id] = server

        self._run(start())

    def stop_broker(self, broker_id: int) -> None:
        server = self._servers.pop(broker_id)
        self._run(server.stop(0))

    # ------------------------------------------------------------------ knobs
    def create_topic(self, name: str, partitions: int = 1, *, replication_factor: int = 1,
                     configs: dict[str, str] | None = None) -> None:
        self._on_loop(lambda: self._create(name, partitions, replication_factor, configs or {}))

    def _create(self, name: str, partitions: int, rf: int, configs: dict[str, str]) -> FakeTopic:
        n = len(self.broker_ids)
        parts = []
        for p in range(partitions):
            replicas = [self.broker_ids[(p + i) % n] for i in range(rf)]
            parts.append(FakePartition(leader=replicas[0], leader_epoch=0, replicas=replicas))
        topic = FakeTopic(name, uuid.uuid4().bytes, parts, dict(configs))
        self.topics[name] = topic
        return topic

    def move_leader(self, topic: str, partition: int, broker_id: int) -> int:
        """Make ``broker_id`` the leader with the next leader epoch; returns that epoch."""
        def move() -> int:
            p = self.topics[topic].partitions[partition]
            p.leader = broker_id
            p.leader_epoch += 1
            if broker_id not in p.replicas:
                p.replicas.append(broker_id)
            return p.leader_epoch

        return self._on_loop(move)

    def inject(self, rpc: str, code: int, *, topic: str | None = None,
               partition: int | None = None, broker: int | None = None, times: int = 1,
               after_append: bool = False) -> Fault:
        fault = Fault(rpc, code, topic, partition, broker, times, after_append)
        self._on_loop(lambda: self.faults.append(fault))
        return fault

    def clear_faults(self) -> None:
        """Forget every injected fault that has not fired yet."""
        self._on_loop(self.faults.clear)

    def set_delay(self, rpc: str, delay_ms: int) -> None:
        self._on_loop(lambda: self.delays_ms.__setitem__(rpc, delay_ms))

    def slow_next(self, rpc: str, delay_ms: int, *, times: int = 1) -> None:
        """Delay only the next ``times`` calls of ``rpc`` (a slow response, then normal)."""
        self._on_loop(lambda: self.slow.setdefault(rpc, []).extend([delay_ms] * times))

    def set_last_sequence(self, topic: str, partition: int, producer_id: int,
                          last_sequence: int) -> None:
        """Make the leader remember ``last_sequence`` as the producer's last (with its current
        epoch), as if it had written that many records: tests of the sequence wrap start here."""
        def seed() -> None:
            entry = self.topics[topic].partitions[partition].producers[producer_id]
            entry.batches.clear()
            entry.batches.append((last_sequence, last_sequence, -1))

        self._on_loop(seed)

    def records(self, topic: str, partition: int) -> list[ConsumerRecord]:
        """Every record of the partition's log, decoded."""
        def read() -> list[bytes]:
            return list(self.topics[topic].partitions[partition].batches)

        return [r for data in self._on_loop(read) for r in decode_records(parse_batch(data))]

    def end_offset(self, topic: str, partition: int) -> int:
        return self._on_loop(lambda: self.topics[topic].partitions[partition].end_offset)

    def corrupt_last_batch(self, topic: str, partition: int) -> int:
        """Flip a payload byte of the partition's last batch; returns its base offset."""
        def corrupt() -> int:
            p = self.topics[topic].partitions[partition]
            batch = parse_batch(p.batches[-1])
            payload = bytearray(batch.records)
            payload[-1] ^= 0xFF
            batch.records = bytes(payload)
            p.batches[-1] = batch.SerializeToString()
            return p.base_offsets[-1]

        return self._on_loop(corrupt)

    def delete_records_before(self, topic: str, partition: int, offset: int) -> None:
        """Move the log start offset (as retention would), dropping whole batches below it."""
        def trim() -> None:
            p = self.topics[topic].partitions[partition]
            while p.batches and last_offset(parse_batch(p.batches[0])) < offset:
                p.batches.pop(0)
                p.base_offsets.pop(0)
            p.log_start = offset

        self._on_loop(trim)

    def fetches(self) -> list[list[tuple[str, int, int]]]:
        """The partitions and offsets of every Fetch received so far, in order."""
        return self._on_loop(lambda: [list(f) for f in self.fetch_requests])

    def metadata_topics(self) -> list[list[str]]:
        """The topics each Metadata request received so far named, in order ([]: all)."""
        return self._on_loop(lambda: [list(t) for t in self.metadata_requests])

    def count(self, rpc: str) -> int:
        return self._on_loop(lambda: sum(c for (_, name), c in self.calls.items() if name == rpc))

    # ------------------------------------------------------------------ helpers (loop only)
    def take_fault(self, rpc: str, broker: int, topic: str | None = None,
                   partition: int | None = None) -> Fault | None:
        for fault in self.faults:
            if fault.matches(rpc, broker, topic, partition):
                fault.times -= 1
                return fault
        return None

    def endpoint(self, broker_id: int) -> common_pb2.Endpoint:
        return common_pb2.Endpoint(host="127.0.0.1", port=self.ports.get(broker_id, 0))

    def hint(self, p: FakePartition) -> common_pb2.LeaderHint:
        return common_pb2.LeaderHint(leader_id=p.leader, leader_epoch=p.leader_epoch,
                                     endpoint=self.endpoint(p.leader))

    def notify(self) -> None:
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_data(self, timeout_s: float) -> None:
        assert self._changed is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    def new_producer_id(self, producer_id: int, epoch: int) -> tuple[int, int]:
        if producer_id < 0:
            pid = self._next_producer_id
            self._next_producer_id += 1
            self.producer_epochs[pid] = 0
            return pid, 0
        current = self.producer_epochs.get(producer_id, epoch)
        self.producer_epochs[producer_id] = current + 1
        return producer_id, current + 1


class _Handlers:
    """Stands in for the server while the generated code hands over its method handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.handlers = handlers


def _add_implemented(servicer: FakeBroker, server: Any) -> None:
    """Register only the methods the fake implements; a stream it lacks (ProduceStream, as in
    an older build) answers UNIMPLEMENTED (below). The generated stand-in raised
    NotImplementedError instead, which grpc-aio sometimes turns into an INTERNAL "Internal error
    from Core" on the client: a retriable break that used up one of a test's retries now and
    then."""
    captured = _Handlers()
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(servicer, captured)
    own = {name: handler for name, handler in captured.handlers.items()
           if getattr(type(servicer), name)
           is not getattr(broker_pb2_grpc.BrokerServiceServicer, name)}
    # The streams it lacks read the first request, then end UNIMPLEMENTED. A server that ends
    # an unknown method's call before reading can fail the client's first write with INTERNAL
    # ("Internal error from Core") before UNIMPLEMENTED arrives: a retriable break that cost a
    # test one of its retries now and then (test_retries_run_out, once in ~20 runs).
    for name, handler in captured.handlers.items():
        if name not in own and name.endswith("Stream"):
            own[name] = grpc.stream_stream_rpc_method_handler(
                _unimplemented_stream, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tidelog.v1.BrokerService", own),))


async def _unimplemented_stream(requests: Any, context: Any) -> Any:
    async for _ in requests:
        break
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    yield  # an async generator, as a stream handler is (never reached)


class FakeBroker(broker_pb2_grpc.BrokerServiceServicer):
    """One broker's BrokerService over the shared FakeCluster state."""

    def __init__(self, cluster: FakeCluster, broker_id: int) -> None:
        self.c = cluster
        self.id = broker_id

    async def _enter(self, rpc: str) -> None:
        self.c.calls[(self.id, rpc)] += 1
        delay = self.c.delays_ms.get(rpc, 0)
        slow = self.c.slow.get(rpc)
        if slow:
            delay = max(delay, slow.pop(0))
        if delay:
            await asyncio.sleep(delay / 1000)

    # ------------------------------------------------------------------ metadata
    async def Metadata(self, request: Any, context: Any) -> Any:
        self.c.metadata_requests.append(list(request.topics))
        await self._enter("Metadata")
        resp = broker_pb2.MetadataResponse(cluster_id=self.c.cluster_id, controller_id=1,
                                           metadata_offset=len(self.c.topics))
        for b in self.c.broker_ids:
            if b in self.c._servers and b not in self.c.fenced:
                resp.brokers.add(broker_id=b, endpoint=self.c.endpoint(b))
        names = list(request.topics) or sorted(self.c.topics)
        for name in names:
            t = self.c.topics.get(name)
            if t is None:
                try:
                    validate_topic_name(name)
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except TidelogError:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                resp.topics.add(name=name, error_code=code, error_message="no such topic")
                continue
            tm = resp.topics.add(name=name, topic_id=t.topic_id, is_internal=t.is_internal)
            for i, p in enumerate(t.partitions):
                tm.partitions.add(partition_id=i, leader=p.leader, leader_epoch=p.leader_epoch,
                                  replicas=p.replicas, isr=p.replicas)
        return resp

    # ------------------------------------------------------------------ produce
    async def Produce(self, request: Any, context: Any) -> Any:
        await self._enter("Produce")
        self.c.produce_requests.append(request)
        resp = broker_pb2.ProduceResponse()
        for td in request.topics:
            tr = resp.topics.add(name=td.name)
            for pd in td.partitions:
                tr.partitions.append(self._produce_partition(td.name, pd, request.acks))
        self.c.notify()
        return resp

    def _produce_partition(self, topic: str, pd: Any, acks: int) -> Any:
        out = broker_pb2.ProduceResponse.PartitionResponse(partition_id=pd.partition_id,
                                                           base_offset=-1, log_append_time_ms=-1)
        t = self.c.topics.get(topic)
        if t is None or pd.partition_id >= len(t.partitions):
            out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return out
        p = t.partitions[pd.partition_id]
        fault = self.c.take_fault("Produce", self.id, topic, pd.partition_id)
        if fault is not None and not fault.after_append:
            return self._fault(out, fault, p)
        if p.leader != self.id:
            out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            out.current_leader.CopyFrom(self.c.hint(p))
            return out
        try:
            batch = validate_batch(pd.batch)
        except TidelogError as e:
            out.error_code, out.error_message = e.code, e.message
            return out
        code, base = self._check_sequence(p, batch)
        if code == ErrorCode.NONE and base < 0:
            base = p.end_offset
            p.batches.append(assign(batch, base_offset=base, leader_epoch=p.leader_epoch,
                                    log_append_time_ms=0))
            p.base_offsets.append(base)
            p.end_offset += batch.record_count
            if batch.producer_id >= 0:
                entry = p.producers[batch.producer_id]
                entry.batches.append((batch.base_sequence,
                                      _increment(batch.base_sequence, batch.record_count - 1),
                                      base))
        if code != ErrorCode.NONE:
            out.error_code = code
            return out
        if fault is not None:
            return self._fault(out, fault, p)
        out.base_offset = base
        out.log_start_offset = p.log_start
        return out

    def _check_sequence(self, p: FakePartition, batch: Any) -> tuple[int, int]:
        """(error code, base offset of a duplicate or -1)."""
        if batch.producer_id < 0:
            return ErrorCode.NONE, -1
        entry = p.producers.get(batch.producer_id)
        first = batch.base_sequence
        last = _increment(first, batch.record_count - 1)
        if entry is not None and batch.producer_epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, -1
        if entry is None or batch.producer_epoch > entry.epoch:
            if first != 0:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
            p.producers[batch.producer_id] = ProducerEntry(batch.producer_epoch)
            return ErrorCode.NONE, -1
        for seq_first, seq_last, base in entry.batches:
            if (seq_first, seq_last) == (first, last):
                return ErrorCode.NONE, base  # a retried duplicate: its first offset
        expected = _increment(entry.batches[-1][1], 1) if entry.batches else 0
        if first != expected:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        return ErrorCode.NONE, -1

    def _fault(self, out: Any, fault: Fault, p: FakePartition) -> Any:
        out.error_code = fault.code
        out.error_message = fault.message
        out.base_offset = -1
        out.appended = fault.after_append  # as a real leader says of an acks=all that failed
        if fault.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            out.current_leader.CopyFrom(self.c.hint(p))
        return out

    # ------------------------------------------------------------------ fetch
    async def Fetch(self, request: Any, context: Any) -> Any:
        await self._enter("Fetch")
        self.c.fetch_requests.append([(td.name, pd.partition_id, pd.fetch_offset)
                                      for td in request.topics for pd in td.partitions])
        fault = self.c.take_fault("FetchRequest", self.id)
        if fault is not None:
            return broker_pb2.FetchResponse(error_code=fault.code, error_message=fault.message)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(request.max_wait_ms, limits.FETCH_WAIT_MS_MAX) / 1000
        # Bounded long-poll: wait for new data until max_wait_ms.
        while True:
            resp, size, errors = self._fetch_once(request)
            remaining = deadline - loop.time()
            if size >= max(request.min_bytes, 1) or errors or remaining <= 0:
                return resp
            await self.c.wait_for_data(remaining)

    def _fetch_once(self, request: Any) -> tuple[Any, int, bool]:
        resp = broker_pb2.FetchResponse()
        total = 0
        errors = False
        for td in request.topics:
            tr = resp.topics.add(name=td.name)
            for pd in td.partitions:
                out = tr.partitions.add(partition_id=pd.partition_id)
                code = self._fetch_partition(td.name, pd, out, request.max_bytes - total)
                total += sum(len(b) for b in out.batches)
                errors = errors or code != ErrorCode.NONE
        return resp, total, errors

    def _fetch_partition(self, topic: str, pd: Any, out: Any, budget: int) -> int:
        t = self.c.topics.get(topic)
        if t is None or pd.partition_id >= len(t.partitions):
            out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return out.error_code
        p = t.partitions[pd.partition_id]
        out.high_watermark = out.last_stable_offset = out.log_end_offset = p.end_offset
        out.log_start_offset = p.log_start
        fault = self.c.take_fault("Fetch", self.id, topic, pd.partition_id)
        if fault is not None:
            out.error_code, out.error_message = fault.code, fault.message
            if fault.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                out.current_leader.CopyFrom(self.c.hint(p))
            return out.error_code
        if p.leader != self.id:
            out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            out.current_leader.CopyFrom(self.c.hint(p))
            return out.error_code
        if pd.current_leader_epoch > p.leader_epoch:
            out.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
            return out.error_code
        if 0 <= pd.current_leader_epoch < p.leader_epoch:
            out.error_code = ErrorCode.FENCED_LEADER_EPOCH
            out.current_leader.CopyFrom(self.c.hint(p))
            return out.error_code
        if not p.log_start <= pd.fetch_offset <= p.end_offset:
            out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            return out.error_code
        limit = min(pd.partition_max_bytes, budget)
        used = 0
        for data in p.batches:
            if last_offset(parse_batch(data)) < pd.fetch_offset:
                continue
            if out.batches and used + len(data) > limit:
                break
            out.batches.append(data)
            used += len(data)
        return ErrorCode.NONE

    # ------------------------------------------------------------------ offsets and ids
    async def ListOffsets(self, request: Any, context: Any) -> Any:
        await self._enter("ListOffsets")
        resp = broker_pb2.ListOffsetsResponse()
        for td in request.topics:
            tr = resp.topics.add(name=td.name)
            for pd in td.partitions:
                out = tr.partitions.add(partition_id=pd.partition_id, timestamp=-1, offset=-1)
                t = self.c.topics.get(td.name)
                if t is None or pd.partition_id >= len(t.partitions):
                    out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                p = t.partitions[pd.partition_id]
                fault = self.c.take_fault("ListOffsets", self.id, td.name, pd.partition_id)
                if fault is not None:
                    out.error_code = fault.code
                    if fault.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                        out.current_leader.CopyFrom(self.c.hint(p))
                    continue
                if p.leader != self.id:
                    out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    out.current_leader.CopyFrom(self.c.hint(p))
                    continue
                out.leader_epoch = p.leader_epoch
                if pd.timestamp == -2:
                    out.offset = p.log_start
                elif pd.timestamp == -1:
                    out.offset = p.end_offset
                else:
                    for data in p.batches:
                        hit = next((r for r in decode_records(parse_batch(data))
                                    if r.timestamp_ms >= pd.timestamp and r.offset >= p.log_start),
                                   None)
                        if hit is not None:
                            out.offset, out.timestamp = hit.offset, hit.timestamp_ms
                            break
        return resp

    async def InitProducerId(self, request: Any, context: Any) -> Any:
        await self._enter("InitProducerId")
        fault = self.c.take_fault("InitProducerId", self.id)
        if fault is not None:
            return broker_pb2.InitProducerIdResponse(error_code=fault.code)
        pid, epoch = self.c.new_producer_id(request.producer_id, request.producer_epoch)
        return broker_pb2.InitProducerIdResponse(producer_id=pid, producer_epoch=epoch)

    # ------------------------------------------------------------------ admin
    async def _admin_fault(self, rpc: str, response_type: Any) -> Any | None:
        await self._enter(rpc)
        fault = self.c.take_fault(rpc, self.id)
        if fault is None:
            return None
        return response_type(error_code=fault.code, error_message=fault.message)

    async def CreateTopics(self, request: Any, context: Any) -> Any:
        failed = await self._admin_fault("CreateTopics", controller_pb2.CreateTopicsResponse)
        if failed is not None:
            return failed
        resp = controller_pb2.CreateTopicsResponse()
        for t in request.topics:
            r = resp.topics.add(name=t.name)
            code, message = self._check_new_topic(t)
            if code:
                r.error_code, r.error_message = code, message
                continue
            partitions = self.c.default_partitions if t.num_partitions == -1 else t.num_partitions
            rf = 1 if t.replication_factor == -1 else t.replication_factor
            configs = {c.name: validate_topic_config(c.name, c.value) for c in t.configs}
            r.num_partitions, r.replication_factor = partitions, rf
            for name, value in configs.items():
                r.configs.add(name=name, value=value)
            if not request.validate_only:
                r.topic_id = self.c._create(t.name, partitions, rf, configs).topic_id
        return resp

    def _check_new_topic(self, t: Any) -> tuple[int, str]:
        try:
            validate_topic_name(t.name)
            for c in t.configs:
                validate_topic_config(c.name, c.value)
        except TidelogError as e:
            return e.code, e.message
        if t.name in self.c.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists"
        if t.num_partitions == 0 or t.num_partitions < -1:
            return ErrorCode.INVALID_PARTITIONS, "num_partitions must be -1 or positive"
        if t.replication_factor == 0 or t.replication_factor < -1 or (
            t.replication_factor > len(self.c.broker_ids)
        ):
            return ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor above broker count"
        return ErrorCode.NONE, ""

    async def DeleteTopics(self, request: Any, context: Any) -> Any:
        failed = await self._admin_fault("DeleteTopics", controller_pb2.DeleteTopicsResponse)
        if failed is not None:
            return failed
        resp = controller_pb2.DeleteTopicsResponse()
        for name in request.names:
            r = resp.topics.add(name=name)
            t = self.c.topics.pop(name, None)
            if t is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                r.error_message = f"topic {name!r} does not exist"
            else:
                r.topic_id = t.topic_id
        return resp

    async def CreatePartitions(self, request: Any, context: Any) -> Any:
        failed = await self._admin_fault("CreatePartitions",
                                         controller_pb2.CreatePartitionsResponse)
        if failed is not None:
            return failed
        resp = controller_pb2.CreatePartitionsResponse()
        for t in request.topics:
            r = resp.topics.add(name=t.name)
            topic = self.c.topics.get(t.name)
            if topic is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif t.count <= len(topic.partitions):
                r.error_code = ErrorCode.INVALID_PARTITIONS
                r.error_message = f"topic already has {len(topic.partitions)} partitions"
            elif not request.validate_only:
                n = len(self.c.broker_ids)
                for i in range(len(topic.partitions), t.count):
                    leader = self.c.broker_ids[i % n]
                    topic.partitions.append(FakePartition(leader, 0, [leader]))
        return resp

    async def DescribeConfigs(self, request: Any, context: Any) -> Any:
        failed = await self._admin_fault("DescribeConfigs", controller_pb2.DescribeConfigsResponse)
        if failed is not None:
            return failed
        resp = controller_pb2.DescribeConfigsResponse()
        for res in request.resources:
            r = resp.resources.add(resource_type=res.resource_type,
                                   resource_name=res.resource_name)
            if res.resource_type == metadata_pb2.CONFIG_RESOURCE_TOPIC:
                topic = self.c.topics.get(res.resource_name)
                if topic is None:
                    r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                for name, d in sorted(TOPIC_CONFIGS.items()):
                    if res.names and name not in res.names:
                        continue
                    set_here = name in topic.configs
                    r.configs.add(name=name, value=topic.configs.get(name, d.default),
                                  source=controller_pb2.CONFIG_SOURCE_TOPIC if set_here
                                  else controller_pb2.CONFIG_SOURCE_DEFAULT,
                                  documentation=d.doc)
            else:
                for name, value in sorted(self.c.cluster_configs.items()):
                    r.configs.add(name=name, value=value,
                                  source=controller_pb2.CONFIG_SOURCE_CLUSTER)
        return resp

    async def AlterConfigs(self, request: Any, context: Any) -> Any:
        failed = await self._admin_fault("AlterConfigs", controller_pb2.AlterConfigsResponse)
        if failed is not None:
            return failed
        resp = controller_pb2.AlterConfigsResponse()
        for res in request.resources:
            r = resp.resources.add(resource_type=res.resource_type,
                                   resource_name=res.resource_name)
            topic = self.c.topics.get(res.resource_name)
            if res.resource_type != metadata_pb2.CONFIG_RESOURCE_TOPIC or topic is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            try:
                changes = {op.name: None if op.op == controller_pb2.ALTER_CONFIG_DELETE
                           else validate_topic_config(op.name, op.value) for op in res.ops}
            except TidelogError as e:
                r.error_code, r.error_message = e.code, e.message
                continue
            if not request.validate_only:
                for name, value in changes.items():
                    if value is None:
                        topic.configs.pop(name, None)
                    else:
                        topic.configs[name] = value
        return resp

    async def DescribeCluster(self, request: Any, context: Any) -> Any:
        failed = await self._admin_fault("DescribeCluster", broker_pb2.DescribeClusterResponse)
        if failed is not None:
            return failed
        resp = broker_pb2.DescribeClusterResponse(cluster_id=self.c.cluster_id, controller_id=1,
                                                  metadata_offset=7)
        for b in self.c.broker_ids:
            resp.brokers.add(broker_id=b, endpoint=self.c.endpoint(b), rack="r1",
                             fenced=b in self.c.fenced)
        return resp

    async def DescribeQuorum(self, request: Any, context: Any) -> Any:
        failed = await self._admin_fault("DescribeQuorum", controller_pb2.DescribeQuorumResponse)
        if failed is not None:
            return failed
        resp = controller_pb2.DescribeQuorumResponse(
            leader_id=1, leader_epoch=3, high_watermark=42, responder_id=1,
            cluster_id=self.c.cluster_id, metadata_offset=40)
        for node in (1, 2, 3):
            resp.voters.add(node_id=node, raft_address=f"127.0.0.1:{9000 + node}",
                            endpoint=common_pb2.Endpoint(host="127.0.0.1", port=9100 + node),
                            commit_index=42, applied_index=42, metadata_offset=40,
                            lag=0, connected=True, is_leader=node == 1)
        return resp

    async def DescribeLogs(self, request: Any, context: Any) -> Any:
        failed = await self._admin_fault("DescribeLogs", broker_pb2.DescribeLogsResponse)
        if failed is not None:
            return failed
        resp = broker_pb2.DescribeLogsResponse(broker_id=self.id)
        for td in request.topics:
            topic = self.c.topics.get(td.name)
            if topic is None:
                continue
            for pid in td.partitions or range(len(topic.partitions)):
                p = topic.partitions[pid]
                resp.partitions.add(
                    topic=td.name, partition_id=pid, is_leader=p.leader == self.id,
                    leader_epoch=p.leader_epoch, log_start_offset=p.log_start,
                    log_end_offset=p.end_offset, high_watermark=p.end_offset,
                    size_bytes=sum(len(b) for b in p.batches))
        return resp


def _increment(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: an int32 sequence wraps to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def run_in_thread(fn: Callable[[], T]) -> concurrent.futures.Future[T]:
    """Run a blocking client call on a helper thread (to act while it blocks)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future
