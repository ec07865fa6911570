"""Validation of a ConsumerGroupHeartbeat request and of a member's epoch (Kafka's
throwIfConsumerGroupHeartbeatRequestIsInvalid and throwIfMemberEpochIsInvalid).

Bad input gets INVALID_REQUEST (or INVALID_GROUP_ID, or INVALID_REGULAR_EXPRESSION for a
subscription regex that RE2 does not compile) with a message naming the field; a member
whose epoch the coordinator does not expect gets FENCED_MEMBER_EPOCH, after which the client
must rejoin with epoch 0 and treat its partitions as lost. One allowance, as Kafka's: a member
that missed the response moving it to a new epoch may still heartbeat with its previous epoch,
as long as it owns nothing it has not been assigned.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog import limits
from tidelog.broker.group.group import ConsumerGroupMember
from tidelog.broker.group.records import Partitions
from tidelog.broker.group.topic_regex import compile_regex
from tidelog.errors import FencedMemberEpochError, InvalidGroupIdError, InvalidRequestError
from tidelog.v1 import broker_pb2 as pb

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ClientIdentity",
    "check_member_epoch",
    "validate_heartbeat",
]

#: Kafka's epochs with a meaning: leave the group; a static member leaves but keeps its place.
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: Bytes of one member's subscribed topic names together: they go into one member record, which
#: must fit one write batch with the group's epoch bump (so that the two are written together).
SUBSCRIBED_TOPIC_NAMES_BYTES_MAX = 256 * 1024


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who sent a heartbeat: the client id it named (Kafka's request header; gRPC metadata
    here) and the host it connected from. Empty when unknown."""

    client_id: str = ""
    client_host: str = ""
    #: The authenticated principal (User:<name>); empty with authorization off.
    principal: str = ""

    def validate(self) -> None:
        for name, value in (("client id", self.client_id), ("client host", self.client_host)):
            if len(value) > limits.GROUP_TEXT_LENGTH_MAX:
                raise InvalidRequestError(
                    f"{name} is longer than {limits.GROUP_TEXT_LENGTH_MAX} characters")


def validate_heartbeat(request: pb.ConsumerGroupHeartbeatRequest) -> None:
    if not request.group_id or len(request.group_id) > limits.GROUP_TEXT_LENGTH_MAX:
        raise InvalidGroupIdError(
            f"group id must be 1..{limits.GROUP_TEXT_LENGTH_MAX} characters, got "
            f"{len(request.group_id)}")
    for name in ("member_id", "instance_id", "rack_id", "server_assignor"):
        if len(getattr(request, name)) > limits.GROUP_TEXT_LENGTH_MAX:
            raise InvalidRequestError(
                f"{name} is longer than {limits.GROUP_TEXT_LENGTH_MAX} characters")
    names = request.subscribed_topic_names
    if len(names) > limits.GROUP_SUBSCRIBED_TOPICS_MAX:
        raise InvalidRequestError(
            f"{len(names)} subscribed topics, more than {limits.GROUP_SUBSCRIBED_TOPICS_MAX}")
    for name in names:
        if not name or len(name) > limits.TOPIC_NAME_LENGTH_MAX:
            raise InvalidRequestError(f"subscribed topic name {name[:50]!r} is not valid")
    names_bytes = sum(len(name.encode()) for name in names)
    if names_bytes > SUBSCRIBED_TOPIC_NAMES_BYTES_MAX:
        raise InvalidRequestError(
            f"subscribed topic names take {names_bytes} bytes, more than "
            f"{SUBSCRIBED_TOPIC_NAMES_BYTES_MAX}")
    if request.subscribed_topic_regex:
        compile_regex(request.subscribed_topic_regex)  # INVALID_REGULAR_EXPRESSION
    epoch = request.member_epoch
    if epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise InvalidRequestError(f"member_epoch {epoch} is not valid (0 joins, -1 leaves, "
                                  f"-2 a static member leaves)")
    if epoch == 0:
        if request.rebalance_timeout_ms <= 0:
            raise InvalidRequestError("rebalance_timeout_ms must be given when joining")
        if not names and not request.subscribed_topic_regex:
            raise InvalidRequestError(
                "subscribed_topic_names or subscribed_topic_regex must be given when joining")
    elif not request.member_id:
        raise InvalidRequestError(f"member_id must be given with member_epoch {epoch}")
    if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and not request.instance_id:
        raise InvalidRequestError("instance_id must be given with member_epoch -2")


def check_member_epoch(member: ConsumerGroupMember, received_epoch: int,
                       owned: Partitions) -> None:
    if received_epoch > member.member_epoch:
        raise FencedMemberEpochError(
            f"member {member.member_id} sent epoch {received_epoch}, newer than its epoch "
            f"{member.member_epoch}")
    if received_epoch < member.member_epoch:
        assigned = member.assigned
        extra = any(parts - assigned.get(t, frozenset()) for t, parts in owned.items())
        if received_epoch != member.previous_member_epoch or extra:
            raise FencedMemberEpochError(
                f"member {member.member_id} sent epoch {received_epoch}, older than its epoch "
                f"{member.member_epoch}")
