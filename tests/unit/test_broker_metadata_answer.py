"""The Metadata answer (broker/handlers/metadata.py) and its per-topic cache.

What it checks: an answer built through the cache equals the one built without it, after every
kind of change (a partition's ISR, a broker fenced, a topic deleted and another created); an
unchanged topic's encoded entry is reused, not rebuilt; a changed topic, or any topic after a
broker's fencing (its offline replicas), is rebuilt; deleted topics leave the cache.
"""

from __future__ import annotations

from controller_testkit import (
    r_change,
    r_fence,
    r_partition,
    r_register,
    r_topic,
    r_unfence,
    replay_all,
    topic_id_of,
)

from tidelog.broker.handlers.metadata import TopicMetadataCache, metadata_response
from tidelog.metadata.image import MetadataImage
from tidelog.v1 import metadata_pb2


def _answer(image: MetadataImage, cache: TopicMetadataCache | None,
            topics: list[str] | None = None) -> bytes:
    response = metadata_response(image, topics or [], cluster_id="c", controller_id=1,
                                 cache=cache)
    return bytes(response.SerializeToString())


def _same(image: MetadataImage, cache: TopicMetadataCache,
          topics: list[str] | None = None) -> None:
    assert _answer(image, cache, topics) == _answer(image, None, topics)


def _cluster_with_two_topics() -> MetadataImage:
    records = [r_register(b, b - 1) for b in (1, 2, 3)]
    records += [r_unfence(b, b - 1) for b in (1, 2, 3)]
    records += [r_topic("a", 1), r_partition(1, 0, [1, 2, 3]), r_partition(1, 1, [2, 3, 1])]
    records += [r_topic("b", 2), r_partition(2, 0, [3, 1, 2])]
    return replay_all(records)


def test_cached_answers_equal_fresh_ones_and_reuse_unchanged_topics() -> None:
    cache = TopicMetadataCache()
    image = _cluster_with_two_topics()
    _same(image, cache)
    _same(image, cache, ["b", "missing"])
    topic_a, topic_b = image.topics.get("a"), image.topics.get("b")
    assert topic_a is not None and topic_b is not None
    entry_a, entry_b = cache.entry(topic_a, image.cluster), cache.entry(topic_b, image.cluster)

    image = replay_all([r_change(1, 1, 0, isr=[2, 3])], image)  # topic a changes
    _same(image, cache)
    topic_a2, topic_b2 = image.topics.get("a"), image.topics.get("b")
    assert topic_a2 is not None and topic_b2 is not None
    assert cache.entry(topic_b2, image.cluster) is entry_b, "b did not change: reused"
    assert cache.entry(topic_a2, image.cluster) != entry_a

    image = replay_all([r_fence(3, 2)], image)  # every topic: broker 3 is an offline replica
    _same(image, cache)
    topic_b3 = image.topics.get("b")
    assert topic_b3 is not None and cache.entry(topic_b3, image.cluster) != entry_b


def test_deleted_topics_leave_the_cache() -> None:
    cache = TopicMetadataCache()
    image = _cluster_with_two_topics()
    _same(image, cache)
    assert len(cache) == 2
    for n in range(3, 60):  # topics come and go: the cache stays near the image's size
        image = replay_all([r_topic(f"t{n}", n), r_partition(n, 0, [1, 2, 3])], image)
        _same(image, cache)  # t{n} is cached
        image = replay_all([metadata_pb2.MetadataRecord(
            remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=topic_id_of(n)))], image)
        _same(image, cache, [f"t{n}"])  # unknown now
        assert len(cache) <= 2 * len(image.topics.by_name) + 16 + 1
    assert len(cache) < 57
