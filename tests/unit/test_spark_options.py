"""The Spark source's and sink's options (tidelog/spark/options.py).

Every option form parses to its typed value; names are case-insensitive; each bad or
contradictory option raises SparkOptionError naming the option, with Spark's wording where Spark
has one. Pure: the parser is called with dicts of strings, as Spark hands them over.
"""

from __future__ import annotations

import pytest

from tidelog.spark.offsets import SparkOptionError, TopicPartition
from tidelog.spark.options import (
    Assign,
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    parse_sink_options,
    parse_source_options,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def source(**extra: str) -> dict[str, str]:
    return {**BASE, **extra}


def test_defaults_of_a_batch_and_a_streaming_read() -> None:
    batch = parse_source_options(BASE, streaming=False)
    assert batch.bootstrap_servers == ("127.0.0.1:9092",)
    assert batch.subscription == Subscribe(("orders",))
    assert batch.starting == EarliestOffsets() and batch.ending == LatestOffsets()
    assert batch.fail_on_data_loss is True and batch.include_headers is False
    assert batch.min_partitions is None and batch.max_offsets_per_trigger is None
    assert batch.timestamp_strategy == "error"
    assert batch.max_trigger_delay_ms == 15 * 60_000
    assert (batch.poll_timeout_ms, batch.fetch_offset_num_retries,
            batch.fetch_offset_retry_interval_ms) == (120_000, 3, 10)
    streaming = parse_source_options(BASE, streaming=True)
    assert streaming.starting == LatestOffsets() and streaming.ending == LatestOffsets()


def test_names_are_case_insensitive_as_in_spark() -> None:
    options = parse_source_options({"BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "o.*",
                                    "STARTINGOFFSETS": "Earliest", "failondataloss": "FALSE",
                                    "minpartitions": "4", "IncludeHeaders": "true"},
                                   streaming=False)
    assert options.subscription == SubscribePattern("o.*")
    assert options.starting == EarliestOffsets()
    assert (options.fail_on_data_loss, options.min_partitions, options.include_headers) == \
        (False, 4, True)


def test_every_subscription_form() -> None:
    subscribe = parse_source_options(source(subscribe=" a, b ,,a "), streaming=False)
    assert subscribe.subscription == Subscribe(("a", "b"))
    assign = {"bootstrap.servers": "h:1", "assign": '{"t":[1,0],"u":[2]}'}
    assert parse_source_options(assign, streaming=True).subscription == Assign(
        (T0, T1, TopicPartition("u", 2)))
    pattern = {"bootstrap.servers": "h:1", "subscribePattern": " orders\\..* "}
    parsed = parse_source_options(pattern, streaming=True).subscription
    assert parsed == SubscribePattern("orders\\..*")
    assert isinstance(parsed, SubscribePattern)
    assert parsed.matches("orders.eu") and not parsed.matches("old.orders.eu")


def test_every_offset_form() -> None:
    def starting(**extra: str) -> object:
        return parse_source_options(source(**extra), streaming=False).starting

    assert starting(startingOffsets="earliest") == EarliestOffsets()
    assert starting(startingOffsets='{"t":{"0":23,"1":-2}}') == SpecificOffsets({T0: 23, T1: -2})
    assert starting(startingTimestamp="1700000000000") == GlobalTimestamp(1700000000000)
    assert starting(startingOffsetsByTimestamp='{"t":{"0":5}}') == SpecificTimestamps({T0: 5})
    ending = parse_source_options(source(endingOffsets='{"t":{"0":50,"1":-1}}',
                                         startingOffsets='{"t":{"0":3,"1":-2}}'),
                                  streaming=False).ending
    assert ending == SpecificOffsets({T0: 50, T1: -1})
    by_time = parse_source_options(source(endingTimestamp="99"), streaming=False).ending
    assert by_time == GlobalTimestamp(99)
    latest = parse_source_options(source(startingOffsets="LATEST"), streaming=True).starting
    assert latest == LatestOffsets()


def test_timestamp_options_take_precedence_as_in_spark() -> None:
    """startingTimestamp over startingOffsetsByTimestamp over startingOffsets (documented)."""
    options = parse_source_options(source(startingTimestamp="7",
                                          startingOffsetsByTimestamp='{"t":{"0":5}}',
                                          startingOffsets="earliest"), streaming=False)
    assert options.starting == GlobalTimestamp(7)
    options = parse_source_options(source(startingOffsetsByTimestamp='{"t":{"0":5}}',
                                          startingOffsets="earliest"), streaming=False)
    assert options.starting == SpecificTimestamps({T0: 5})


def test_trigger_and_tuning_options() -> None:
    options = parse_source_options(source(maxOffsetsPerTrigger="1000", minOffsetsPerTrigger="10",
                                          maxTriggerDelay="30s", maxRecordsPerPartition="500",
                                          startingOffsetsByTimestampStrategy="Latest",
                                          **{"kafkaConsumer.pollTimeoutMs": "5000",
                                             "fetchOffset.numRetries": "0",
                                             "fetchOffset.retryIntervalMs": "100"}),
                                   streaming=True)
    assert (options.max_offsets_per_trigger, options.min_offsets_per_trigger) == (1000, 10)
    assert options.max_trigger_delay_ms == 30_000
    assert options.max_records_per_partition == 500
    assert options.timestamp_strategy == "latest"
    assert (options.poll_timeout_ms, options.fetch_offset_num_retries,
            options.fetch_offset_retry_interval_ms) == (5000, 0, 100)
    for text, ms in (("500", 500), ("2min", 120_000), ("1h", 3_600_000), ("1500us", 1)):
        assert parse_source_options(source(maxTriggerDelay=text),
                                    streaming=True).max_trigger_delay_ms == ms


def test_trigger_options_in_a_batch_query_are_ignored_with_a_warning() -> None:
    options = parse_source_options(source(maxOffsetsPerTrigger="10"), streaming=False)
    assert options.warnings == ("maxOffsetsPerTrigger option ignored in batch queries",)


def test_the_sink_options() -> None:
    sink = parse_sink_options({"Bootstrap.Servers": "a:1, b:2", "TOPIC": " out "})
    assert sink.bootstrap_servers == ("a:1", "b:2")
    assert sink.topic == "out" and sink.include_headers is False
    assert parse_sink_options({"bootstrap.servers": "a:1"}).topic is None


def test_options_spark_sets_for_every_data_source_are_not_the_sources() -> None:
    # A streaming query hands its sink (and a save its writer) these with the user's options.
    sink = parse_sink_options({"bootstrap.servers": "a:1", "topic": "t",
                               "checkpointLocation": "/tmp/c", "path": "/tmp/p",
                               "queryName": "q"})
    assert sink.topic == "t"
    assert parse_source_options(source(checkpointLocation="/c"), streaming=True).bootstrap_servers


BAD_SOURCE: list[tuple[dict[str, str], bool, str, str]] = [
    # (options, streaming, the option named, words of the message)
    ({"subscribe": "t"}, False, "bootstrap.servers",
     "Option 'bootstrap.servers' must be specified"),
    ({"bootstrap.servers": "h:x", "subscribe": "t"}, False, "bootstrap.servers",
     "'h:x' is not host:port"),
    ({"bootstrap.servers": " , "}, False, "bootstrap.servers", "names no server"),
    ({"bootstrap.servers": "h:1"}, False, "subscribe",
     "One of the following options must be specified for the Tidelog source: assign, "
     "subscribe, subscribePattern"),
    ({**BASE, "assign": '{"t":[0]}'}, False, "assign subscribe",
     "Only one of the following options can be specified"),
    ({**BASE, "subscribe": " , "}, False, "subscribe",
     "No topics to subscribe to as specified value for option 'subscribe' is ' , '"),
    ({"bootstrap.servers": "h:1", "subscribePattern": "  "}, False, "subscribePattern",
     "Pattern to subscribe is empty"),
    ({"bootstrap.servers": "h:1", "subscribePattern": "a("}, False, "subscribePattern",
     "'a(' is not a valid regular expression"),
    ({"bootstrap.servers": "h:1", "assign": "t:0"}, False, "assign",
     "No topicpartitions to assign as specified value for option 'assign' is 't:0'"),
    ({"bootstrap.servers": "h:1", "assign": '{"t":[0,0]}'}, False, "assign",
     "t-0 is assigned twice"),
    ({"bootstrap.servers": "h:1", "assign": '{"t":[]}'}, False, "assign",
     "No topicpartitions to assign"),
    ({"bootstrap.servers": "h:1", "assign": '{"t":["0"]}'}, False, "assign",
     'expected e.g. {"topicA":[0,1],"topicB":[2,4]}'),
    ({**BASE, "subscrib": "x"}, False, "subscrib", "did you mean 'subscribe'?"),
    ({**BASE, "kafka.bootstrap.servers": "h:1"}, False, "kafka.bootstrap.servers",
     "Tidelog's options have no 'kafka.' prefix; use 'bootstrap.servers'"),
    ({**BASE, "kafka.group.id": "g"}, False, "kafka.group.id", "takes no Kafka client configs"),
    ({**BASE, "groupIdPrefix": "g"}, False, "groupIdPrefix", "uses no consumer group"),
    ({**BASE, "Subscribe": "other"}, False, "subscribe", "is given twice with different values"),
    ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets",
     "ending offset not valid in streaming queries"),
    ({**BASE, "endingOffsetsByTimestamp": '{"t":{"0":1}}'}, True, "endingOffsetsByTimestamp",
     "ending timestamp not valid in streaming queries"),
    ({**BASE, "endingTimestamp": "1"}, True, "endingTimestamp",
     "ending timestamp not valid in streaming queries"),
    ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets",
     "starting offset can't be latest for batch queries"),
    ({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, False, "startingOffsets",
     "startingOffsets for t-0 can't be latest for batch queries"),
    ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets",
     "ending offset can't be earliest for batch queries"),
    ({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, False, "endingOffsets",
     "ending offset for t-0 can't be earliest for batch queries"),
    ({**BASE, "startingOffsets": '{"t":{"0":1}}', "endingOffsets": '{"t":{"1":5}}'}, False,
     "endingOffsets", "Partitions specified for the starting and ending offsets are different"),
    ({**BASE, "startingOffsets": '{"t":{"0":9}}', "endingOffsets": '{"t":{"0":5}}'}, False,
     "startingOffsets", "The specified starting offset 9 is greater than the specified ending "
     "offset 5 for t-0"),
    ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":9}}',
      "endingOffsetsByTimestamp": '{"t":{"0":5}}'}, False, "startingOffsetsByTimestamp",
     "The specified starting timestamp 9 is greater"),
    ({**BASE, "startingOffsets": "{oops"}, False, "startingOffsets",
     'expected e.g. {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}, got {oops'),
    ({**BASE, "startingOffsets": '{"t":{"0":-3}}'}, True, "startingOffsets",
     "offset -3 for t-0 is invalid"),
    ({**BASE, "startingTimestamp": "yesterday"}, False, "startingTimestamp",
     "Expected a single long value"),
    ({**BASE, "startingTimestamp": "-5"}, False, "startingTimestamp",
     "Expected a single long value"),
    ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":-5}}'}, False,
     "startingOffsetsByTimestamp", "timestamp -5 for t-0 is negative"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "earliest"}, False,
     "startingOffsetsByTimestampStrategy", "must be 'error' or 'latest', got 'earliest'"),
    ({**BASE, "failOnDataLoss": "yes"}, False, "failOnDataLoss",
     "must be 'true' or 'false', got 'yes'"),
    ({**BASE, "includeHeaders": "1"}, False, "includeHeaders", "must be 'true' or 'false'"),
    ({**BASE, "minPartitions": "0"}, False, "minPartitions", "minPartitions must be positive"),
    ({**BASE, "minPartitions": "2.5"}, False, "minPartitions", "must be an integer, got '2.5'"),
    ({**BASE, "maxRecordsPerPartition": "-1"}, False, "maxRecordsPerPartition",
     "maxRecordsPerPartition must be positive"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger", "must be positive"),
    ({**BASE, "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"}, True,
     "minOffsetsPerTrigger",
     "The value of minOffsetPerTrigger(6) is higher than the maxOffsetsPerTrigger(5)."),
    ({**BASE, "maxTriggerDelay": "soon"}, True, "maxTriggerDelay",
     "must be a duration such as '15m'"),
    ({**BASE, "maxTriggerDelay": "5 weeks"}, True, "maxTriggerDelay", "must be a duration"),
    ({**BASE, "kafkaConsumer.pollTimeoutMs": "-1"}, True, "kafkaConsumer.pollTimeoutMs",
     "must not be negative"),
]


@pytest.mark.parametrize(("options", "streaming", "option", "words"), BAD_SOURCE)
def test_each_bad_source_option_is_named_in_its_error(options: dict[str, str], streaming: bool,
                                                      option: str, words: str) -> None:
    with pytest.raises(SparkOptionError) as caught:
        parse_source_options(options, streaming=streaming)
    assert caught.value.option == option
    assert words in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("options", "option", "words"), [
    ({"topic": "t"}, "bootstrap.servers", "must be specified"),
    ({"bootstrap.servers": "h:1", "topic": "  "}, "topic", "option 'topic' is empty"),
    ({"bootstrap.servers": "h:1", "subscribe": "t"}, "subscribe",
     "unknown option 'subscribe' for the Tidelog sink"),
    ({"bootstrap.servers": "h:1", "kafka.acks": "1"}, "kafka.acks",
     "the Tidelog sink takes no Kafka client configs"),
])
def test_each_bad_sink_option_is_named_in_its_error(options: dict[str, str], option: str,
                                                    words: str) -> None:
    with pytest.raises(SparkOptionError) as caught:
        parse_sink_options(options)
    assert caught.value.option == option
    assert words in str(caught.value)


def test_tls_options_become_client_keywords() -> None:
    from tidelog.spark.options import security_kwargs

    tls = {"security.protocol": "ssl", "ssl.cafile": "/pki/ca.crt",
           "ssl.certfile": "/pki/app.crt", "ssl.keyfile": "/pki/app.key"}
    source = parse_source_options({"bootstrap.servers": "b:9092", "subscribe": "t", **tls},
                                  streaming=False)
    assert security_kwargs(source.security) == {
        "security_protocol": "SSL", "ssl_cafile": "/pki/ca.crt",
        "ssl_certfile": "/pki/app.crt", "ssl_keyfile": "/pki/app.key"}
    sink = parse_sink_options({"bootstrap.servers": "b:9092", "SSL.CAFile": "/pki/ca.crt",
                               "security.protocol": "SSL"})
    assert security_kwargs(sink.security) == {"security_protocol": "SSL",
                                              "ssl_cafile": "/pki/ca.crt"}
    assert parse_sink_options({"bootstrap.servers": "b:9092"}).security == ()


@pytest.mark.parametrize(("options", "option", "message"), [
    ({"security.protocol": "SASL_PLAINTEXT"}, "security.protocol",
     "option 'security.protocol' must be PLAINTEXT, SSL or SASL_SSL, got 'SASL_PLAINTEXT'"),
    ({"ssl.cafile": "/ca.crt"}, "ssl.cafile",
     "options 'ssl.*' need option 'security.protocol' = SSL"),
    ({"security.protocol": "SSL"}, "ssl.cafile",
     "option 'security.protocol' = SSL needs option 'ssl.cafile'"),
])
def test_tls_option_mistakes_name_the_option(options: dict[str, str], option: str,
                                             message: str) -> None:
    with pytest.raises(SparkOptionError) as e:
        parse_sink_options({"bootstrap.servers": "b:9092", **options})
    assert e.value.option == option and str(e.value).startswith(message)


def test_sasl_options_become_client_keywords_and_the_password_stays_hidden() -> None:
    from tidelog.spark.options import security_kwargs

    sasl = {"security.protocol": "sasl_ssl", "ssl.cafile": "/pki/ca.crt",
            "SASL.Username": "alice", "sasl.password": "hunter2",
            "sasl.mechanism": "scram-sha-512"}
    source = parse_source_options({"bootstrap.servers": "b:9092", "subscribe": "t", **sasl},
                                  streaming=True)
    assert security_kwargs(source.security) == {
        "security_protocol": "SASL_SSL", "ssl_cafile": "/pki/ca.crt",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "alice", "sasl_password": "hunter2"}
    assert "hunter2" not in repr(source)
    sink = parse_sink_options({"bootstrap.servers": "b:9092", **sasl})
    assert "hunter2" not in repr(sink) and "alice" in repr(sink)
    assert dict(sink.security)["sasl_password"] == "hunter2"
    # What the clients are given is what ClientSecurity takes (the CA file is read then).
    from tidelog.errors import InvalidConfigError
    from tidelog.tls import ClientSecurity

    with pytest.raises(InvalidConfigError, match=r"cannot read ssl CA file /pki/ca\.crt") as e:
        ClientSecurity(**security_kwargs(sink.security))
    assert "hunter2" not in str(e.value)


@pytest.mark.parametrize(("options", "option", "message"), [
    ({"sasl.username": "a"}, "sasl.username",
     "options 'sasl.*' need option 'security.protocol' = SASL_SSL"),
    ({"security.protocol": "SSL", "ssl.cafile": "/ca", "sasl.password": "hunter2"},
     "sasl.password", "options 'sasl.*' need option 'security.protocol' = SASL_SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.username": "a", "sasl.password": "hunter2"},
     "ssl.cafile", "option 'security.protocol' = SASL_SSL needs option 'ssl.cafile'"),
    ({"security.protocol": "SASL_SSL", "ssl.cafile": "/ca", "sasl.password": "hunter2"},
     "sasl.username", "option 'security.protocol' = SASL_SSL needs option 'sasl.username' "
                      "(a SCRAM user"),
    ({"security.protocol": "SASL_SSL", "ssl.cafile": "/ca"}, "sasl.username",
     "needs option 'sasl.username' and option 'sasl.password'"),
    ({"security.protocol": "SASL_SSL", "ssl.cafile": "/ca", "sasl.username": "a",
      "sasl.password": "hunter2", "sasl.mechanism": "PLAIN"}, "sasl.mechanism",
     "option 'sasl.mechanism' must be SCRAM-SHA-256 or SCRAM-SHA-512, got 'PLAIN'"),
])
def test_sasl_option_mistakes_name_the_option_never_the_password(
        options: dict[str, str], option: str, message: str) -> None:
    for parse in (lambda o: parse_sink_options(o),
                  lambda o: parse_source_options({**o, "subscribe": "t"}, streaming=False)):
        with pytest.raises(SparkOptionError) as e:
            parse({"bootstrap.servers": "b:9092", **options})
        assert e.value.option == option and message in str(e.value)
        assert "hunter2" not in str(e.value)
