"""The Tidelog source's and sink's options, parsed and checked as Spark's Kafka source does.

Names are Spark's Kafka source and sink option names without the ``kafka.`` prefix
(``bootstrap.servers``, ``subscribe``, ``startingOffsets``, ``topic``, …), looked up without
regard to case, as Spark's ``CaseInsensitiveMap``. :func:`parse_source_options` and
:func:`parse_sink_options` turn the strings Spark hands a data source into typed, frozen values,
or raise :class:`~tidelog.spark.offsets.SparkOptionError` naming the option: an unknown name
(with the nearest known one), a malformed value, or options that contradict each other (not
exactly one of ``subscribe``/``subscribePattern``/``assign``; ``endingOffsets`` in a streaming
query; ``latest`` as a batch query's start; …). Messages keep Spark's wording where Spark has
one, so a Spark user recognises them.

What Spark only logs (``maxOffsetsPerTrigger`` in a batch query is ignored) comes back in
``SourceOptions.warnings`` for the shell to log. Pure: no I/O, no pyspark, no client import.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypedDict

from tidelog.scram import MECHANISMS
from tidelog.spark.offsets import (
    EARLIEST,
    LATEST,
    SparkOptionError,
    TopicPartition,
    assignment_from_json,
    offsets_from_json,
    timestamps_from_json,
)

__all__ = [
    "Assign",
    "EarliestOffsets",
    "GlobalTimestamp",
    "LatestOffsets",
    "OffsetLimit",
    "SinkOptions",
    "SourceOptions",
    "SpecificOffsets",
    "SpecificTimestamps",
    "Subscribe",
    "SubscribePattern",
    "Subscription",
    "parse_sink_options",
    "parse_source_options",
]

#: The source's options as documented (lower case → documented spelling).
SOURCE_OPTIONS = {name.lower(): name for name in (
    "bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets",
    "endingOffsets", "startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp",
    "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "failOnDataLoss",
    "minPartitions", "maxRecordsPerPartition", "maxOffsetsPerTrigger", "minOffsetsPerTrigger",
    "maxTriggerDelay", "includeHeaders", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "security.protocol", "ssl.cafile", "ssl.certfile",
    "ssl.keyfile", "sasl.mechanism", "sasl.username", "sasl.password",
)}
#: The sink's options as documented.
SINK_OPTIONS = {name.lower(): name for name in (
    "bootstrap.servers", "topic", "includeHeaders", "security.protocol", "ssl.cafile",
    "ssl.certfile", "ssl.keyfile", "sasl.mechanism", "sasl.username", "sasl.password")}
#: The client's security settings (tidelog.tls.ClientSecurity), Kafka's names as Spark's Kafka
#: source takes them without ``kafka.`` (librdkafka's for the SCRAM user, which Spark's Kafka
#: source puts in a JAAS config): option (lower case) -> client keyword.
SECURITY_OPTIONS = {"security.protocol": "security_protocol", "ssl.cafile": "ssl_cafile",
                    "ssl.certfile": "ssl_certfile", "ssl.keyfile": "ssl_keyfile",
                    "sasl.mechanism": "sasl_mechanism", "sasl.username": "sasl_username",
                    "sasl.password": "sasl_password"}
#: ``security.protocol`` values.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
#: ``sasl.mechanism`` values.
SASL_MECHANISMS = tuple(MECHANISMS)
#: Options Spark hands every data source from the query itself (a streaming query's checkpoint
#: location and name, a save path): not the source's or sink's to check.
SPARK_ENGINE_OPTIONS = frozenset({"checkpointlocation", "path", "queryname"})
#: Spark options that Tidelog leaves out on purpose, and why (said in the error).
NOT_SUPPORTED = {
    "groupidprefix": "Tidelog's source uses no consumer group: a query's offsets live in "
                     "Spark's checkpoint",
}
STRATEGY_OPTIONS = ("assign", "subscribe", "subscribePattern")
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000   # Spark's "15m"
DEFAULT_POLL_TIMEOUT_MS = 120_000               # spark.network.timeout's 120 s
DEFAULT_FETCH_OFFSET_NUM_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 10
TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                 "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class Subscribe:
    """``subscribe``: these topics, by name."""

    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    """``subscribePattern``: every topic whose whole name the regex matches."""

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True, slots=True)
class Assign:
    """``assign``: exactly these partitions."""

    partitions: tuple[TopicPartition, ...]


Subscription = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True, slots=True)
class EarliestOffsets:
    """Each partition's log start offset."""


@dataclass(frozen=True, slots=True)
class LatestOffsets:
    """Each partition's high watermark."""


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """An offset per partition (``-2`` earliest, ``-1`` latest), for every partition read."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    """For every partition, the first offset whose timestamp is ≥ ``timestamp_ms``."""

    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class SpecificTimestamps:
    """A timestamp per partition, resolved as :class:`GlobalTimestamp` is."""

    timestamps: Mapping[TopicPartition, int]


OffsetLimit = EarliestOffsets | LatestOffsets | SpecificOffsets | GlobalTimestamp | \
    SpecificTimestamps


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """A source's options, checked. ``ending`` is :class:`LatestOffsets` in a streaming query."""

    bootstrap_servers: tuple[str, ...]
    subscription: Subscription
    starting: OffsetLimit
    ending: OffsetLimit
    #: A starting timestamp no record reaches: fail ("error") or start at the HW ("latest").
    timestamp_strategy: Literal["error", "latest"]
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    include_headers: bool
    poll_timeout_ms: int
    fetch_offset_num_retries: int
    fetch_offset_retry_interval_ms: int
    warnings: tuple[str, ...] = ()
    #: Keyword arguments for the clients (security_protocol, ssl_*, sasl_*), as pairs; the
    #: password is a :class:`Secret` (its repr hides it).
    security: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """A sink's options, checked. ``topic`` (when set) overrides a ``topic`` column."""

    bootstrap_servers: tuple[str, ...]
    topic: str | None
    include_headers: bool
    security: tuple[tuple[str, str], ...] = ()


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check a source's options as Spark's KafkaSourceProvider does for a batch
    (``streaming=False``) or a streaming query, and return them typed."""
    params = _case_insensitive(options, SOURCE_OPTIONS, "source")
    if streaming:
        for key in ("endingoffsets", "endingoffsetsbytimestamp", "endingtimestamp"):
            if key in params:
                what = "offset" if key == "endingoffsets" else "timestamp"
                raise SparkOptionError(SOURCE_OPTIONS[key],
                                       f"ending {what} not valid in streaming queries "
                                       f"(option '{SOURCE_OPTIONS[key]}')")
    starting = _offset_limit(params, "starting", default=LatestOffsets() if streaming
                             else EarliestOffsets())
    ending = LatestOffsets() if streaming else _offset_limit(params, "ending",
                                                             default=LatestOffsets())
    if not streaming:
        _check_batch_limits(starting, ending)
    max_offsets = _positive(params, "maxoffsetspertrigger")
    min_offsets = _positive(params, "minoffsetspertrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise SparkOptionError("minOffsetsPerTrigger",
                               f"The value of minOffsetPerTrigger({min_offsets}) is higher than "
                               f"the maxOffsetsPerTrigger({max_offsets}).")
    return SourceOptions(
        bootstrap_servers=_bootstrap_servers(params),
        subscription=_subscription(params),
        starting=starting,
        ending=ending,
        timestamp_strategy=_timestamp_strategy(params),
        fail_on_data_loss=_boolean(params, "failondataloss", default=True),
        min_partitions=_positive(params, "minpartitions"),
        max_records_per_partition=_positive(params, "maxrecordsperpartition"),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=_duration_ms(params, "maxtriggerdelay",
                                          default=DEFAULT_MAX_TRIGGER_DELAY_MS),
        include_headers=_boolean(params, "includeheaders", default=False),
        poll_timeout_ms=_non_negative(params, "kafkaconsumer.polltimeoutms",
                                      default=DEFAULT_POLL_TIMEOUT_MS),
        fetch_offset_num_retries=_non_negative(params, "fetchoffset.numretries",
                                               default=DEFAULT_FETCH_OFFSET_NUM_RETRIES),
        fetch_offset_retry_interval_ms=_non_negative(
            params, "fetchoffset.retryintervalms", default=DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS),
        warnings=() if streaming else _batch_warnings(params),
        security=_security(params),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check a sink's options (batch and streaming alike) and return them typed."""
    params = _case_insensitive(options, SINK_OPTIONS, "sink")
    topic = params["topic"].strip() if "topic" in params else None
    if topic == "":
        raise SparkOptionError("topic", "option 'topic' is empty: give a topic name, or leave "
                               "the option out and write a 'topic' column")
    return SinkOptions(bootstrap_servers=_bootstrap_servers(params), topic=topic,
                       include_headers=_boolean(params, "includeheaders", default=False),
                       security=_security(params))


class SecurityKwargs(TypedDict, total=False):
    """The clients' security keywords (Producer, Consumer, Admin)."""

    security_protocol: str
    ssl_cafile: str
    ssl_certfile: str
    ssl_keyfile: str
    sasl_mechanism: str
    sasl_username: str
    sasl_password: str


class Secret(str):
    """A password: a str whose ``repr`` hides it, so the options' reprs (a log line, an error
    that shows them, Spark's plan) never show it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'<hidden>'"


def security_kwargs(pairs: tuple[tuple[str, str], ...]) -> SecurityKwargs:
    """``SourceOptions.security`` / ``SinkOptions.security`` as keyword arguments."""
    kwargs = SecurityKwargs()
    for key, value in pairs:
        kwargs[key] = value  # type: ignore[literal-required]
    return kwargs


def _security(params: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The security options as client keywords; the files are read when a client is made.
    No message shows ``sasl.password``'s value."""
    protocol = params.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise SparkOptionError("security.protocol", f"option 'security.protocol' must be "
                               f"{', '.join(SECURITY_PROTOCOLS[:-1])} or "
                               f"{SECURITY_PROTOCOLS[-1]}, got {params['security.protocol']!r}")
    files = {k: v for k, v in params.items() if k.startswith("ssl.")}
    sasl = {k: v for k, v in params.items() if k.startswith("sasl.")}
    if files and protocol == "PLAINTEXT":
        raise SparkOptionError(SOURCE_OPTIONS[next(iter(files))],
                               "options 'ssl.*' need option 'security.protocol' = SSL or "
                               "SASL_SSL")
    if sasl and protocol != "SASL_SSL":
        raise SparkOptionError(SOURCE_OPTIONS[next(iter(sasl))],
                               "options 'sasl.*' need option 'security.protocol' = SASL_SSL")
    if protocol != "PLAINTEXT" and "ssl.cafile" not in files:
        raise SparkOptionError("ssl.cafile", f"option 'security.protocol' = {protocol} needs "
                               "option 'ssl.cafile' (the CA that verifies the brokers)")
    if protocol == "SASL_SSL":
        missing = [SOURCE_OPTIONS[k] for k in ("sasl.username", "sasl.password")
                   if not sasl.get(k)]
        if missing:
            raise SparkOptionError(missing[0], "option 'security.protocol' = SASL_SSL needs "
                                   + " and ".join(f"option '{m}'" for m in missing)
                                   + " (a SCRAM user: `tidelog user create`)")
        mechanism = sasl.get("sasl.mechanism", SASL_MECHANISMS[0]).strip().upper()
        if mechanism not in SASL_MECHANISMS:
            raise SparkOptionError("sasl.mechanism", f"option 'sasl.mechanism' must be "
                                   f"{' or '.join(SASL_MECHANISMS)}, got "
                                   f"{sasl['sasl.mechanism']!r}")
        sasl = {**sasl, "sasl.mechanism": mechanism, "sasl.password": Secret(sasl["sasl.password"])}
    pairs = [("security_protocol", protocol)]
    pairs += [(SECURITY_OPTIONS[k], v) for k, v in sorted({**files, **sasl}.items())]
    return tuple(pairs) if protocol != "PLAINTEXT" else ()


def _case_insensitive(options: Mapping[str, str], known: Mapping[str, str],
                      kind: str) -> dict[str, str]:
    """Lower-case keys; an unknown key, or one key given twice with two values, is an error.
    Options that Spark itself sets for every data source are dropped."""
    params: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for name, value in options.items():
        key = name.lower()
        if key in SPARK_ENGINE_OPTIONS:
            continue
        if key not in known:
            raise SparkOptionError(name, _unknown_option_message(name, known, kind))
        if not isinstance(value, str):
            raise SparkOptionError(known[key], f"option '{name}' must be a string, got "
                                   f"{type(value).__name__}")
        if key in params and params[key] != value:
            raise SparkOptionError(known[key], f"option '{known[key]}' is given twice with "
                                   f"different values ('{spelled[key]}' and '{name}')")
        params[key], spelled[key] = value, name
    return params


def _unknown_option_message(name: str, known: Mapping[str, str], kind: str) -> str:
    key = name.lower()
    if key in NOT_SUPPORTED:
        return f"option '{name}' is not supported: {NOT_SUPPORTED[key]}"
    if key.startswith("kafka."):
        bare = key.removeprefix("kafka.")
        if bare in known:
            return (f"unknown option '{name}': Tidelog's options have no 'kafka.' prefix; "
                    f"use '{known[bare]}'")
        return f"unknown option '{name}': the Tidelog {kind} takes no Kafka client configs"
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean '{known[close[0]]}'?" if close else ""
    return (f"unknown option '{name}' for the Tidelog {kind}{hint} (known: "
            f"{', '.join(sorted(known.values(), key=str.lower))})")


def _bootstrap_servers(params: Mapping[str, str]) -> tuple[str, ...]:
    if "bootstrap.servers" not in params:
        raise SparkOptionError("bootstrap.servers", "Option 'bootstrap.servers' must be "
                               "specified for configuring the Tidelog client")
    value = params["bootstrap.servers"]
    servers = tuple(s.strip() for s in value.split(",") if s.strip())
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SparkOptionError("bootstrap.servers", f"option 'bootstrap.servers': "
                                   f"'{server}' is not host:port (in '{value}')")
    if not servers:
        raise SparkOptionError("bootstrap.servers", f"option 'bootstrap.servers' names no "
                               f"server: '{value}'")
    return servers


def _subscription(params: Mapping[str, str]) -> Subscription:
    given = [name for name in STRATEGY_OPTIONS if name.lower() in params]
    if len(given) != 1:
        which = "One" if not given else "Only one"
        verb = "must" if not given else "can"
        raise SparkOptionError(" ".join(given) or "subscribe",
                               f"{which} of the following options {verb} be specified for the "
                               f"Tidelog source: {', '.join(STRATEGY_OPTIONS)}. See "
                               f"docs/spark.md for more details.")
    value = params[given[0].lower()]
    if given[0] == "assign":
        if not value.strip().startswith("{"):
            raise SparkOptionError("assign", f"No topicpartitions to assign as specified value "
                                   f"for option 'assign' is '{value}'")
        return Assign(assignment_from_json(value))
    if given[0] == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise SparkOptionError("subscribe", f"No topics to subscribe to as specified value "
                                   f"for option 'subscribe' is '{value}'")
        return Subscribe(topics)
    pattern = value.strip()
    if not pattern:
        raise SparkOptionError("subscribePattern", f"Pattern to subscribe is empty as specified "
                               f"value for option 'subscribePattern' is '{value}'")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise SparkOptionError("subscribePattern", f"option 'subscribePattern': '{pattern}' is "
                               f"not a valid regular expression: {exc}") from None
    return SubscribePattern(pattern)


def _offset_limit(params: Mapping[str, str], side: Literal["starting", "ending"], *,
                  default: OffsetLimit) -> OffsetLimit:
    """Spark's order of preference: ``<side>Timestamp``, then ``<side>OffsetsByTimestamp``,
    then ``<side>Offsets``, then the default."""
    timestamp_key, by_timestamp_key = f"{side}timestamp", f"{side}offsetsbytimestamp"
    offsets_key = f"{side}offsets"
    if timestamp_key in params:
        text = params[timestamp_key].strip()
        if not re.fullmatch(r"[+-]?\d+", text) or int(text) < 0:
            raise SparkOptionError(SOURCE_OPTIONS[timestamp_key],
                                   f"option '{SOURCE_OPTIONS[timestamp_key]}': Expected a single "
                                   f"long value (milliseconds since the epoch), got {text}")
        return GlobalTimestamp(int(text))
    if by_timestamp_key in params:
        option = SOURCE_OPTIONS[by_timestamp_key]
        return SpecificTimestamps(timestamps_from_json(params[by_timestamp_key].strip(),
                                                       option=option))
    if offsets_key not in params:
        return default
    text = params[offsets_key].strip()
    if text.lower() == "latest":
        return LatestOffsets()
    if text.lower() == "earliest":
        return EarliestOffsets()
    return SpecificOffsets(offsets_from_json(text, option=SOURCE_OPTIONS[offsets_key]))


def _check_batch_limits(starting: OffsetLimit, ending: OffsetLimit) -> None:
    """Spark's validateBatchOptions and checkOffsetLimitValidity."""
    if isinstance(starting, LatestOffsets):
        raise SparkOptionError("startingOffsets", "starting offset can't be latest for batch "
                               "queries on Tidelog (option 'startingOffsets')")
    if isinstance(ending, EarliestOffsets):
        raise SparkOptionError("endingOffsets", "ending offset can't be earliest for batch "
                               "queries on Tidelog (option 'endingOffsets')")
    if isinstance(starting, SpecificOffsets):
        for tp, offset in sorted(starting.offsets.items()):
            if offset == LATEST:
                raise SparkOptionError("startingOffsets", f"startingOffsets for {tp} can't be "
                                       f"latest for batch queries on Tidelog")
    if isinstance(ending, SpecificOffsets):
        for tp, offset in sorted(ending.offsets.items()):
            if offset == EARLIEST:
                raise SparkOptionError("endingOffsets", f"ending offset for {tp} can't be "
                                       f"earliest for batch queries on Tidelog")
    #: (what, starting option, ending option, starting values, ending values)
    pairs: list[tuple[str, str, str, Mapping[TopicPartition, int],
                      Mapping[TopicPartition, int]]] = []
    if isinstance(starting, SpecificOffsets) and isinstance(ending, SpecificOffsets):
        pairs.append(("offset", "startingOffsets", "endingOffsets", starting.offsets,
                      ending.offsets))
    if isinstance(starting, SpecificTimestamps) and isinstance(ending, SpecificTimestamps):
        pairs.append(("timestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
                      starting.timestamps, ending.timestamps))
    for what, start_option, end_option, start, end in pairs:
        if set(start) != set(end):
            raise SparkOptionError(end_option, f"Partitions specified for the starting and "
                                   f"ending {what}s are different: {start_option} "
                                   f"{_names(start)}, {end_option} {_names(end)}")
        for tp in sorted(start):
            if 0 <= end[tp] < start[tp]:
                raise SparkOptionError(start_option, f"The specified starting {what} "
                                       f"{start[tp]} is greater than the specified ending "
                                       f"{what} {end[tp]} for {tp} ({start_option}, "
                                       f"{end_option})")


def _batch_warnings(params: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(f"{SOURCE_OPTIONS[key]} option ignored in batch queries"
                 for key in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay")
                 if key in params)


def _timestamp_strategy(params: Mapping[str, str]) -> Literal["error", "latest"]:
    value = params.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if value == "error":
        return "error"
    if value == "latest":
        return "latest"
    raise SparkOptionError("startingOffsetsByTimestampStrategy",
                           f"option 'startingOffsetsByTimestampStrategy' must be 'error' or "
                           f"'latest', got '{params['startingoffsetsbytimestampstrategy']}'")


def _boolean(params: Mapping[str, str], key: str, *, default: bool) -> bool:
    if key not in params:
        return default
    value = params[key].strip().lower()
    if value not in ("true", "false"):
        name = SOURCE_OPTIONS.get(key, key)
        raise SparkOptionError(name, f"option '{name}' must be 'true' or 'false', got "
                               f"'{params[key]}'")
    return value == "true"


def _integer(params: Mapping[str, str], key: str) -> int | None:
    if key not in params:
        return None
    text = params[key].strip()
    if not re.fullmatch(r"[+-]?\d{1,19}", text):
        name = SOURCE_OPTIONS[key]
        raise SparkOptionError(name, f"option '{name}' must be an integer, got '{params[key]}'")
    return int(text)


def _positive(params: Mapping[str, str], key: str) -> int | None:
    value = _integer(params, key)
    if value is not None and value <= 0:
        raise SparkOptionError(SOURCE_OPTIONS[key], f"{SOURCE_OPTIONS[key]} must be positive, "
                               f"got {value}")
    return value


def _non_negative(params: Mapping[str, str], key: str, *, default: int) -> int:
    value = _integer(params, key)
    if value is not None and value < 0:
        raise SparkOptionError(SOURCE_OPTIONS[key], f"{SOURCE_OPTIONS[key]} must not be "
                               f"negative, got {value}")
    return default if value is None else value


def _duration_ms(params: Mapping[str, str], key: str, *, default: int) -> int:
    """Spark's time strings: a number and an optional unit (us, ms, s, m, min, h, d; ms when
    none is given), e.g. ``15m`` or ``500``."""
    if key not in params:
        return default
    match = re.fullmatch(r"(\d{1,15})\s*([a-z]+)?", params[key].strip().lower())
    if match is None or (match.group(2) or "ms") not in TIME_UNITS_MS:
        name = SOURCE_OPTIONS[key]
        raise SparkOptionError(name, f"option '{name}' must be a duration such as '15m', "
                               f"'30s' or '500ms', got '{params[key]}'")
    return int(int(match.group(1)) * TIME_UNITS_MS[match.group(2) or "ms"])


def _names(partitions: Mapping[TopicPartition, int]) -> str:
    return "[" + ", ".join(str(tp) for tp in sorted(partitions)) + "]"
