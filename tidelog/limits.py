"""Every limit in one place, as named constants whose relations are asserted at import.

Kafka's defaults are used where Kafka has one (names in comments). Servers import their limits
from here so a reader finds every bound in one file.
"""

from __future__ import annotations

from tidelog.invariants import check

# --- record batches -------------------------------------------------------------------------
#: Kafka's message.max.bytes / max.message.bytes default (1 MiB + batch overhead).
MESSAGE_BYTES_MAX = 1_048_588
#: The largest max.message.bytes a topic may configure.
MESSAGE_BYTES_MAX_CONFIGURABLE = 64 * 1024 * 1024
#: Records in one batch. Kafka has no such limit; one bounds decoding work and memory. A
#: property of the format (followers, consumers and the cleaner check it too), so lowering it
#: would make stored batches unreadable: what one request may cost is bounded below.
BATCH_RECORDS_MAX = 1_000_000
#: Uncompressed payload of one batch; bounds decompression (a "zip bomb" is refused here).
BATCH_UNCOMPRESSED_BYTES_MAX = 128 * 1024 * 1024
#: Keys and values: bounded by the batch limits; headers per record bounded separately.
RECORD_HEADERS_MAX = 1024

# --- requests and gRPC ----------------------------------------------------------------------
#: Bytes of one produce request (Kafka's socket.request.max.bytes); larger is
#: RECORD_LIST_TOO_LARGE for every partition.
PRODUCE_REQUEST_BYTES_MAX = 100 * 1024 * 1024
#: What the leader's record check of one produce request may cost (Kafka has no such limits:
#: its LogValidator decodes every record, in Java). Records and uncompressed bytes are summed
#: over the request's batch headers before any batch is checked; past either bound every
#: partition of the request is refused with RECORD_LIST_TOO_LARGE and nothing is decompressed.
#: The check costs ~0.1-0.3 µs per record (~1 µs in batches of more than 65,536 records,
#: walked in Python so that no one call holds the GIL long) and ~1 ms per MiB decompressed
#: (docs/brokers.md), so a request costs at most ~1 s of a record-check thread, never of the
#: event loop. The producer (tidelog.client) keeps its requests within both.
PRODUCE_REQUEST_RECORDS_MAX = 1_000_000
PRODUCE_REQUEST_UNCOMPRESSED_BYTES_MAX = 128 * 1024 * 1024
#: Of one produce request, the batches checked on the event loop itself, in request order,
#: while their records and uncompressed bytes stay within these (~1 ms of the loop): a hop to
#: a check thread and back costs more than checking a producer's usual 16 KiB batch. The rest
#: go to the record-check threads, in one job per request.
PRODUCE_INLINE_CHECK_RECORDS_MAX = 4_096
PRODUCE_INLINE_CHECK_BYTES_MAX = 512 * 1024
#: Threads that check produced batches (CRC, decompression, record framing) off the event loop;
#: a bound on the CPU and memory (one decompressed batch each) that checks take at once.
RECORD_CHECK_THREADS = 2
#: Produce/fetch request and response size limit on the gRPC channel (socket.request.max.bytes
#: is 100 MiB in Kafka); must hold a configured max message with room for framing.
GRPC_MESSAGE_BYTES_MAX = 128 * 1024 * 1024
#: fetch.max.bytes default (consumer, per request) and max.partition.fetch.bytes default.
FETCH_BYTES_MAX_DEFAULT = 50 * 1024 * 1024
PARTITION_FETCH_BYTES_MAX_DEFAULT = 1024 * 1024
#: Long-poll bound for fetch.max.wait.ms a client may ask for.
FETCH_WAIT_MS_MAX = 30_000
#: RPCs one gRPC server runs at once (grpc.aio's maximum_concurrent_rpcs; an open stream counts
#: as one for its life). Past it gRPC answers RESOURCE_EXHAUSTED, which clients retry. The client
#: listener serves producers' and consumers' streams and long-polls; the inter-broker listener
#: one stream per follower broker; the controller listener every broker's heartbeats, metadata
#: stream and forwarded admin requests.
CLIENT_LISTENER_CONCURRENT_RPCS_MAX = 4_096
INTER_BROKER_LISTENER_CONCURRENT_RPCS_MAX = 1_024
CONTROLLER_LISTENER_CONCURRENT_RPCS_MAX = 4_096

# --- streams (BrokerService.ProduceStream / FetchStream) ------------------------------------
#: Requests read from one ProduceStream and not yet answered (answer computed and handed to
#: gRPC). Past it the broker stops reading that stream, and gRPC's flow control makes the
#: client's writes wait. Kafka reads one request per connection at a time; 64 leaves room for
#: a producer's pipelined requests (idempotence allows 5 per partition).
PRODUCE_STREAM_IN_FLIGHT_MAX = 64
#: The same for one FetchStream: fetches are answered in order, one at a time (a consumer or
#: follower sends the next fetch after reading the answer to the last).
FETCH_STREAM_IN_FLIGHT_MAX = 1
#: Bytes one stream holds: requests being handled, then their answers until gRPC takes them (a
#: client that sends and never reads): past it the broker reads no further request on it.
STREAM_HELD_BYTES_MAX = 16 * 1024 * 1024

# --- audit log (broker/authz/audit.py) -------------------------------------------------------
#: Refusal lines of one kind (authentication, authorization) written per window; the rest are
#: counted and the next line written says how many were left out.
AUDIT_LINES_PER_WINDOW = 20
AUDIT_WINDOW_MS = 1_000

# --- topics and partitions -------------------------------------------------------------------
TOPIC_NAME_LENGTH_MAX = 249
PARTITIONS_PER_TOPIC_MAX = 10_000
PARTITIONS_PER_REQUEST_MAX = 100_000
#: Partitions a follower may fetch from one leader in one fetch session (the leader caches each,
#: about 560 bytes with its listed fetch: 1,000,000 would be ~560 MB). Not
#: PARTITIONS_PER_REQUEST_MAX: on a 100,000-partition cluster one broker may lead nearly all of
#: them after failures, and its followers must still follow it; a request lists at most
#: PARTITIONS_PER_REQUEST_MAX, the rest in the next ones.
PARTITIONS_PER_FETCH_SESSION_MAX = 1_000_000
REPLICATION_FACTOR_MAX = 16
#: Partitions one CreateTopics or CreatePartitions request may create (Kafka's
#: MAX_PARTITIONS_PER_BATCH, 10,000): its records are one metadata batch, committed at once.
#: Past it the whole request is refused with POLICY_VIOLATION, before anything is placed.
PARTITIONS_PER_CREATE_REQUEST_MAX = 10_000

# --- metadata (controller) ------------------------------------------------------------------
#: Bytes of one metadata record batch: one Raft proposal (controller.raft's
#: RaftSettings.batch_bytes_max, which must be at least this). An admin request whose records
#: would be larger is refused with POLICY_VIOLATION before anything is proposed. 10,000
#: partitions at replication factor 3 take ~0.45 MiB.
METADATA_BATCH_BYTES_MAX = 1024 * 1024

# --- what the peer listeners read (issue 25) --------------------------------------------------
#: AlterPartition items one leader sends at once (broker/alter_partition.py; the rest next).
ALTER_PARTITION_ITEMS_MAX = 2_000
#: Bytes of one AlterPartition item at its largest: a topic id, three int32s and an ISR of
#: REPLICATION_FACTOR_MAX members with their broker epochs, every integer at its longest
#: varint (tests/unit/test_peer_listener_limits.py builds it: 604 bytes).
ALTER_PARTITION_ITEM_BYTES_MAX = 640
#: The controller listener's largest request (grpc.max_receive_message_length there): its
#: callers are brokers, whose heartbeats, registrations and metadata streams are small, whose
#: AlterPartitions are bounded above, and who forward admin requests. A forwarded request that
#: could succeed is about the size of its records, at most one metadata batch; a larger one
#: would be refused with POLICY_VIOLATION anyway, and the broker refuses it so before sending.
CONTROLLER_REQUEST_BYTES_MAX = 4 * METADATA_BATCH_BYTES_MAX
#: Bytes one partition adds to a follower's fetch request at most, listed (with its own topic
#: entry, every integer at its longest varint: 88 bytes) and forgotten (32 bytes): measured in
#: tests/unit/test_peer_listener_limits.py.
REPLICA_FETCH_LISTED_PARTITION_BYTES_MAX = 96
REPLICA_FETCH_FORGOTTEN_PARTITION_BYTES_MAX = 32

#: The inter-broker listener's largest request (grpc.max_receive_message_length there): a
#: follower's fetch lists at most PARTITIONS_PER_REQUEST_MAX partitions, and may forget up to
#: its whole session (PARTITIONS_PER_FETCH_SESSION_MAX) at once; plus 1 MiB for the rest.
INTER_BROKER_REQUEST_BYTES_MAX = 48 * 1024 * 1024

# --- consumer groups (broker/group) ----------------------------------------------------------
#: Members of one consumer group (Kafka's group.consumer.max.size, which defaults to no bound);
#: a join past it gets GROUP_MAX_SIZE_REACHED.
GROUP_MEMBERS_MAX = 1_000
#: Groups one coordinator shard (one __consumer_offsets partition) holds; a new group past it is
#: refused with POLICY_VIOLATION naming the limit.
GROUPS_PER_SHARD_MAX = 100_000
#: Group ids, member ids, instance ids, racks, client ids and hosts, assignor names: characters.
GROUP_TEXT_LENGTH_MAX = 255
#: Topic names one member subscribes to.
GROUP_SUBSCRIBED_TOPICS_MAX = 10_000
#: Committed offset metadata, bytes of UTF-8 (Kafka's offset.metadata.max.bytes).
OFFSET_METADATA_BYTES_MAX = 4096
#: Committed offsets one group holds (one per topic partition).
OFFSETS_PER_GROUP_MAX = 1_000_000

# --- storage ---------------------------------------------------------------------------------
#: Leader-epoch cache entries kept per partition (oldest dropped beyond it after truncation of
#: the log start; Kafka keeps them all but they only grow with leader changes).
LEADER_EPOCH_ENTRIES_MAX = 10_000
#: Dirty (not yet cleaned) records and uncompressed bytes one log-cleaner pass reads into its
#: offset map (Kafka bounds the entries with log.cleaner.dedupe.buffer.size): the pass ends at
#: the batch where either is reached (a pass always takes one batch) and the next takes the
#: rest. They bound the map's memory and the decoding of its dirty part; counted from batch
#: headers, since a compressed byte may hold many records.
CLEANER_PASS_DIRTY_RECORDS_MAX = 500_000
CLEANER_PASS_DIRTY_UNCOMPRESSED_BYTES_MAX = 32 * 1024 * 1024
#: Bytes of stored batches a pass reads from RocksDB at a time, on the event loop, before it
#: decodes them on the cleaner's thread (a pass never holds the loop for more than one read,
#: one header parse per batch of it, or one write group).
CLEANER_READ_BYTES_MAX = 1024 * 1024
#: Bytes of old batches the cleaner replaces per RocksDB write batch (one atomic group).
CLEANER_GROUP_BYTES_MAX = 1024 * 1024

check(
    MESSAGE_BYTES_MAX <= MESSAGE_BYTES_MAX_CONFIGURABLE < GRPC_MESSAGE_BYTES_MAX,
    "message sizes must fit a gRPC message",
)
check(
    PARTITION_FETCH_BYTES_MAX_DEFAULT <= FETCH_BYTES_MAX_DEFAULT < GRPC_MESSAGE_BYTES_MAX,
    "fetch sizes must nest and fit a gRPC message",
)
check(
    BATCH_UNCOMPRESSED_BYTES_MAX <= GRPC_MESSAGE_BYTES_MAX,
    "an uncompressed batch must fit a gRPC message",
)
check(
    1 <= FETCH_STREAM_IN_FLIGHT_MAX <= PRODUCE_STREAM_IN_FLIGHT_MAX,
    "stream in-flight limits out of order",
)
check(
    STREAM_HELD_BYTES_MAX < GRPC_MESSAGE_BYTES_MAX,
    "a stream's held bytes must be below a gRPC message",
)
check(
    GROUP_TEXT_LENGTH_MAX >= TOPIC_NAME_LENGTH_MAX
    and OFFSET_METADATA_BYTES_MAX < MESSAGE_BYTES_MAX,
    "group limits out of order",
)
check(
    MESSAGE_BYTES_MAX_CONFIGURABLE <= BATCH_UNCOMPRESSED_BYTES_MAX,
    "an uncompressed batch of the largest max.message.bytes must be a valid batch",
)
check(
    BATCH_RECORDS_MAX <= PRODUCE_REQUEST_RECORDS_MAX
    and BATCH_UNCOMPRESSED_BYTES_MAX <= PRODUCE_REQUEST_UNCOMPRESSED_BYTES_MAX,
    "a produce request must hold a batch of the largest size",
)
check(
    MESSAGE_BYTES_MAX_CONFIGURABLE <= PRODUCE_REQUEST_BYTES_MAX < GRPC_MESSAGE_BYTES_MAX
    and PRODUCE_REQUEST_BYTES_MAX <= PRODUCE_REQUEST_UNCOMPRESSED_BYTES_MAX,
    "produce request sizes out of order (a request of uncompressed batches must fit both "
    "bounds, and a producer's max_request_size, at most MESSAGE_BYTES_MAX_CONFIGURABLE, too)",
)
check(
    0 < PRODUCE_INLINE_CHECK_RECORDS_MAX <= PRODUCE_REQUEST_RECORDS_MAX
    and 0 < PRODUCE_INLINE_CHECK_BYTES_MAX <= PRODUCE_REQUEST_UNCOMPRESSED_BYTES_MAX
    and RECORD_CHECK_THREADS >= 1,
    "produce check bounds out of order",
)
check(
    CLEANER_GROUP_BYTES_MAX <= CLEANER_PASS_DIRTY_UNCOMPRESSED_BYTES_MAX
    and CLEANER_READ_BYTES_MAX <= CLEANER_PASS_DIRTY_UNCOMPRESSED_BYTES_MAX
    and CLEANER_PASS_DIRTY_RECORDS_MAX >= 1,
    "cleaner bounds out of order",
)
check(
    PARTITIONS_PER_CREATE_REQUEST_MAX <= PARTITIONS_PER_REQUEST_MAX,
    "a create request's partitions must fit a request's",
)
check(
    ALTER_PARTITION_ITEMS_MAX * ALTER_PARTITION_ITEM_BYTES_MAX < CONTROLLER_REQUEST_BYTES_MAX
    and METADATA_BATCH_BYTES_MAX < CONTROLLER_REQUEST_BYTES_MAX < GRPC_MESSAGE_BYTES_MAX,
    "the controller listener must take any AlterPartition and any request that could commit",
)
check(
    PARTITIONS_PER_REQUEST_MAX * REPLICA_FETCH_LISTED_PARTITION_BYTES_MAX
    + PARTITIONS_PER_FETCH_SESSION_MAX * REPLICA_FETCH_FORGOTTEN_PARTITION_BYTES_MAX
    + 1024 * 1024 <= INTER_BROKER_REQUEST_BYTES_MAX < GRPC_MESSAGE_BYTES_MAX,
    "the inter-broker listener must take a follower's largest fetch request",
)
