"""An admin request larger than the controller takes in one operation is refused up front.

What it checks, through the client Admin against a real cluster (1 controller, 1 broker):
- CreateTopics of 1,000 topics x 30 partitions (30,000 partitions; before the limit it ended in
  REQUEST_TIMED_OUT "earlier metadata changes did not commit in time") is refused at once with
  POLICY_VIOLATION whose message names the request's size and the limit, and creates nothing;
- a request at the limit (100 topics x 100 partitions = PARTITIONS_PER_CREATE_REQUEST_MAX)
  succeeds, and the controller keeps serving writes afterwards.

How: tests/integration/cluster_harness.py runs the processes; waits are bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness

from tidelog import limits
from tidelog.client import Admin, NewTopic
from tidelog.errors import PolicyViolationError

pytestmark = pytest.mark.integration

#: The refusal comes before anything is placed or proposed: well under the commit timeout.
REFUSAL_S_MAX = 3.0
ADMIN = dict(request_timeout_ms=60_000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("admin-limits") / "cluster"
    with ClusterHarness.started(base, controllers=1, brokers=1) as harness:
        harness.start_brokers()
        yield harness


def test_oversized_create_topics_is_refused_with_the_limit(cluster: ClusterHarness) -> None:
    topics = [NewTopic(f"too-many-{i}", 30, 1) for i in range(1_000)]
    with Admin(cluster.bootstrap, **ADMIN) as admin:
        started = time.monotonic()
        result = admin.create_topics(topics)
        elapsed = time.monotonic() - started
        assert set(result.errors) == {t.name for t in topics} and not result.values
        error = result.errors["too-many-0"]
        assert isinstance(error, PolicyViolationError), error
        assert "would create 30,000 partitions; one request may create at most " \
            f"{limits.PARTITIONS_PER_CREATE_REQUEST_MAX:,}" in str(error)
        assert elapsed < REFUSAL_S_MAX, f"refused after {elapsed:.1f}s"
        assert not [n for n in admin.list_topics() if n.startswith("too-many-")]


def test_create_topics_at_the_limit_succeeds(cluster: ClusterHarness) -> None:
    per_topic = 100
    count = limits.PARTITIONS_PER_CREATE_REQUEST_MAX // per_topic
    topics = [NewTopic(f"at-limit-{i}", per_topic, 1) for i in range(count)]
    with Admin(cluster.bootstrap, **ADMIN) as admin:
        result = admin.create_topics(topics)
        assert not result.errors, next(iter(result.errors.values()))
        assert sum(t.num_partitions for t in result.values.values()) \
            == limits.PARTITIONS_PER_CREATE_REQUEST_MAX
        # The controller still takes writes.
        admin.create_topics([NewTopic("after", 1, 1)]).all()
        deadline = time.monotonic() + 30
        while "after" not in admin.list_topics():
            assert time.monotonic() < deadline, "the broker never saw topic 'after'"
            time.sleep(0.1)
