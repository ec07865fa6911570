"""The queue workload's configuration: who sends and reads, how fast, for how long, and the
clients' timeouts. Validated when built (a ValueError names the field), so a bad scenario fails
before anything starts. Every bound is a named constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Final

from tidelog.chaos.history import ACKS, Acks
from tidelog.chaos.workload.pacing import RATE_PER_S_MAX

__all__ = [
    "CONSUMERS_MAX",
    "DURATION_S_MAX",
    "IN_FLIGHT_MAX",
    "PRODUCERS_MAX",
    "ClientSettings",
    "ProducerSpec",
    "QueueWorkloadConfig",
]

#: Producers (threads) of one workload; each has its own Producer.
PRODUCERS_MAX: Final = 64
#: Consumers of each kind (assign, group) of one workload; each has its own Consumer.
CONSUMERS_MAX: Final = 64
#: Sends one producer keeps in flight; each slot is a history process.
IN_FLIGHT_MAX: Final = 32
#: One workload's run (a day); a chaos scenario runs for minutes.
DURATION_S_MAX: Final = 86_400.0


@dataclass(frozen=True, slots=True)
class ProducerSpec:
    """One producer: its acks, its idempotence, and how many sends it keeps in flight (each
    in-flight slot is a history process, since a process has one operation open at a time)."""

    acks: Acks = "all"
    idempotent: bool = True
    in_flight: int = 4
    #: The Producer's ``retries``; 0 lets a NOT_ENOUGH_REPLICAS refusal be recorded as fail.
    retries: int = 2_147_483_647

    def __post_init__(self) -> None:
        if self.acks not in ACKS:
            raise ValueError(f'acks must be "all", "1" or "0", got {self.acks!r}')
        if self.idempotent and self.acks != "all":
            raise ValueError(f"an idempotent producer needs acks=all (got acks={self.acks})")
        if not 1 <= self.in_flight <= IN_FLIGHT_MAX:
            raise ValueError(f"in_flight must be within 1..{IN_FLIGHT_MAX}, got {self.in_flight}")
        if self.retries < 0 or (self.idempotent and self.retries == 0):
            raise ValueError(f"retries must be >= 0 (> 0 with idempotence), got {self.retries}")

    def describe(self) -> str:
        return f"acks={self.acks} idempotent={str(self.idempotent).lower()}"


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """The clients' timeouts, short enough that every operation ends within a run's bounds."""

    request_timeout_ms: int = 5_000
    delivery_timeout_ms: int = 15_000
    max_block_ms: int = 5_000
    linger_ms: int = 5
    retry_backoff_ms: int = 50
    retry_backoff_max_ms: int = 500
    fetch_max_wait_ms: int = 200
    #: How long one poll() waits for records.
    poll_timeout_ms: int = 200
    max_poll_records: int = 500
    auto_commit_interval_ms: int = 1_000
    #: Bound of a client's close() (and of a producer's flush at the end).
    close_timeout_ms: int = 10_000
    #: Pause before a consumer that failed is opened again.
    reopen_backoff_ms: int = 200

    def __post_init__(self) -> None:
        for item in fields(self):
            name, value = item.name, getattr(self, item.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ValueError("delivery_timeout_ms must be >= linger_ms + request_timeout_ms")


@dataclass(frozen=True, slots=True)
class QueueWorkloadConfig:
    """A queue workload: producers of unique values to ``topic``, consumers that ``assign``
    every partition, consumers in group ``group_id`` that ``subscribe`` and commit."""

    bootstrap: str
    topic: str
    duration_s: float
    producers: tuple[ProducerSpec, ...] = (ProducerSpec(), ProducerSpec())
    assign_consumers: int = 1
    group_consumers: int = 2
    group_id: str = "chaos-queue"
    #: Sends per second, all producers together.
    rate_per_s: float = 100.0
    #: After the deadline: how long sends in flight and closes may take before the workload
    #: gives up on them (their invokes stay open: unknown outcomes).
    finish_timeout_s: float = 30.0
    client: ClientSettings = field(default_factory=ClientSettings)

    def __post_init__(self) -> None:
        if not self.bootstrap or not self.topic or not self.group_id:
            raise ValueError("bootstrap, topic and group_id must be non-empty")
        if not 0 < self.duration_s <= DURATION_S_MAX:
            raise ValueError(f"duration_s must be within (0, {DURATION_S_MAX}], "
                             f"got {self.duration_s}")
        if not 0 <= len(self.producers) <= PRODUCERS_MAX:
            raise ValueError(f"at most {PRODUCERS_MAX} producers, got {len(self.producers)}")
        for name in ("assign_consumers", "group_consumers"):
            count = getattr(self, name)
            if not 0 <= count <= CONSUMERS_MAX:
                raise ValueError(f"{name} must be within 0..{CONSUMERS_MAX}, got {count}")
        if not 0 < self.rate_per_s <= RATE_PER_S_MAX:
            raise ValueError(f"rate_per_s must be within (0, {RATE_PER_S_MAX}], "
                             f"got {self.rate_per_s}")
        if not 0 < self.finish_timeout_s <= DURATION_S_MAX:
            raise ValueError(f"finish_timeout_s must be positive, got {self.finish_timeout_s}")
