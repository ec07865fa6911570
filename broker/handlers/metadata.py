"""The Metadata answer (Kafka's MetadataResponse), from the broker's metadata image.

Clients and tools ask for it often: a producer's or consumer's refresh, a CLI's describe, a test
or benchmark waiting for leaders. At 30,000 partitions a full answer built partition by partition
cost the answering broker ~0.1-0.2 s of CPU each time (a benchmark polling it took 28-36% of one
broker's samples during a fencing it was timing). Images share every unchanged part with the
image before them (tidelog.metadata.image), so :class:`TopicMetadataCache` keeps each topic's
encoded entry while its ``TopicImage`` and the ``ClusterImage`` (which brokers are fenced: the
offline replicas) are the very objects it was built from: an answer then costs the topics that
changed since the last one, and a C-level copy of the others.
"""

from __future__ import annotations

from tidelog.metadata.image import ClusterImage, MetadataImage, TopicImage
from tidelog.metadata.topic_names import INTERNAL_TOPICS
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import common_pb2
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["TopicMetadataCache", "metadata_response"]


class TopicMetadataCache:
    """Each topic's encoded ``TopicMetadata``, valid while its ``TopicImage`` and the
    ``ClusterImage`` are the ones it was built from (compared by identity)."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[TopicImage, ClusterImage, bytes]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, topic: TopicImage, cluster: ClusterImage) -> bytes:
        cached = self._entries.get(topic.name)
        if cached is not None and cached[0] is topic and cached[1] is cluster:
            return cached[2]
        encoded: bytes = topic_metadata(topic, cluster).SerializeToString()
        self._entries[topic.name] = (topic, cluster, encoded)
        return encoded

    def forget_missing(self, image: MetadataImage) -> None:
        """Drop entries of topics the image no longer has (deleted: bounded memory)."""
        by_name = image.topics.by_name
        for name in [n for n in self._entries if n not in by_name]:
            del self._entries[name]


def topic_metadata(topic: TopicImage, cluster: ClusterImage) -> pb.TopicMetadata:
    brokers = cluster.brokers
    t = pb.TopicMetadata(name=topic.name, topic_id=topic.topic_id,
                         is_internal=topic.name in INTERNAL_TOPICS)
    for pid in range(topic.num_partitions):
        p = topic.partitions[pid]
        offline = [r for r in p.replicas if r not in brokers or brokers[r].fenced]
        t.partitions.add(
            partition_id=pid, leader=p.leader, leader_epoch=p.leader_epoch,
            replicas=p.replicas, isr=p.isr, offline_replicas=offline,
            error_code=ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE)
    return t


def metadata_response(image: MetadataImage, topics: list[str], *, cluster_id: str,
                      controller_id: int,
                      cache: TopicMetadataCache | None = None) -> pb.MetadataResponse:
    """The Metadata answer from an image: unfenced brokers, and the asked (or all) topics."""
    brokers = image.cluster.brokers
    response = pb.MetadataResponse(cluster_id=cluster_id, controller_id=controller_id,
                                   metadata_offset=image.offset)
    for b in sorted(brokers.values(), key=lambda b: b.broker_id):
        if not b.fenced:
            response.brokers.add(broker_id=b.broker_id, rack=b.rack,
                                 endpoint=common_pb2.Endpoint(host=b.host, port=b.port))
    names = topics or sorted(image.topics.by_name)
    for name in names:
        topic = image.topics.by_name.get(name)
        if topic is None:
            response.topics.add(name=name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                error_message=f"topic {name!r} does not exist")
        elif cache is None:
            response.topics.append(topic_metadata(topic, image.cluster))
        else:
            response.topics.add().MergeFromString(cache.entry(topic, image.cluster))
    if cache is not None and len(cache) > 2 * len(image.topics.by_name) + 16:
        cache.forget_missing(image)
    return response
