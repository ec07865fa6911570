"""``Admin.alter_group_offsets`` and ``tidelog group reset-offsets`` against real brokers.

On 1 controller + 3 broker processes with ``offsets_topic_num_partitions`` 3: a member joins
(raw ConsumerGroupHeartbeat) and commits offset 20 of orders-3, 50 records are produced to
orders-3, then

- Admin.alter_group_offsets and ``reset-offsets --execute`` are refused while the member is in
  (the error says the group has active members);
- once it left (heartbeat with epoch -1): a dry run prints the plan and changes nothing;
  --to-earliest --execute commits 0, --shift-by 5 commits 5, --to-latest commits 50,
  --to-offset 1000 is clamped to 50 (as Kafka does), --to-datetime in the future gives 50;
  Admin.alter_group_offsets sets 7;
- bad input (no --to-*, two of them, a bad partition list, an unknown topic, a partition the
  topic does not have) is one error line with exit code 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness
from replica_checks import Client
from test_group_admin import COMMITTED, RECORDS, group_with_a_commit, leave
from test_group_coordinator import (
    GROUP,
    OVERRIDES,
    TOPIC,
)

from tidelog.client import Admin, TopicPartition
from tidelog.errors import UnknownMemberIdError

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 60
TP = TopicPartition(TOPIC, 3)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterHarness]:
    with ClusterHarness.started(tmp_path / "cluster", controllers=1, brokers=3,
                                overrides=OVERRIDES) as cluster:
        cluster.start_brokers()
        yield cluster


def reset(cluster: ClusterHarness, *args: str, ok: bool = True
          ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "group", "reset-offsets", GROUP, *args,
         "--brokers", cluster.bootstrap, "--format", "json"],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert (result.returncode == 0) == ok, (result.stdout, result.stderr)
    if not ok:
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result
    return result


def plan(result: subprocess.CompletedProcess[str]) -> list[tuple[int, int, int]]:
    return [(r["partition"], r["current_offset"], r["new_offset"])
            for r in json.loads(result.stdout)]


def test_reset_offsets(cluster: ClusterHarness) -> None:
    client = Client(cluster)
    try:
        coordinator, member = group_with_a_commit(cluster, client)

        with Admin(cluster.bootstrap, default_api_timeout_ms=30_000) as admin:
            def committed_offset() -> int:
                return admin.list_group_offsets(GROUP, [TP])[TP].offset

            # Refused while the member is in.
            with pytest.raises(UnknownMemberIdError, match="active members; stop them first"):
                admin.alter_group_offsets(GROUP, {TP: 0})
            refused = reset(cluster, "--topic", f"{TOPIC}:3", "--to-earliest", "--execute",
                            ok=False)
            assert "active member" in refused.stderr and GROUP in refused.stderr
            assert committed_offset() == COMMITTED

            leave(client, coordinator, member)
            dry = reset(cluster, "--topic", f"{TOPIC}:3", "--to-earliest")
            assert plan(dry) == [(3, COMMITTED, 0)]
            assert "dry run: nothing changed" in dry.stderr
            assert committed_offset() == COMMITTED

            assert plan(reset(cluster, "--topic", f"{TOPIC}:3", "--to-earliest",
                              "--execute")) == [(3, COMMITTED, 0)]
            assert committed_offset() == 0
            assert plan(reset(cluster, "--topic", f"{TOPIC}:3", "--shift-by", "5",
                              "--execute")) == [(3, 0, 5)]
            assert committed_offset() == 5
            assert plan(reset(cluster, "--topic", f"{TOPIC}:3", "--to-latest",
                              "--execute")) == [(3, 5, RECORDS)]
            assert committed_offset() == RECORDS
            admin.alter_group_offsets(GROUP, {TP: 7})
            assert committed_offset() == 7
            # Beyond the end: clamped to the high watermark (Kafka clamps too).
            assert plan(reset(cluster, "--topic", f"{TOPIC}:3", "--to-offset", "1000",
                              "--execute")) == [(3, 7, RECORDS)]
            assert committed_offset() == RECORDS
            assert plan(reset(cluster, "--topic", f"{TOPIC}:2,3", "--to-datetime",
                              "2999-01-01T00:00:00Z")) == [(2, -1, 0), (3, RECORDS, RECORDS)]
            # All partitions, no --partition list: six rows.
            assert [p for p, _, _ in plan(reset(cluster, "--topic", TOPIC, "--to-earliest"))
                    ] == list(range(6))

            # Bad input: one line, exit code 2.
            assert "exactly one" in reset(cluster, "--topic", TOPIC, ok=False).stderr
            assert "exactly one" in reset(cluster, "--topic", TOPIC, "--to-earliest",
                                          "--to-latest", ok=False).stderr
            assert "partitions are numbers" in reset(cluster, "--topic", f"{TOPIC}:x",
                                                     "--to-earliest", ok=False).stderr
            assert "no 9" in reset(cluster, "--topic", f"{TOPIC}:9", "--to-earliest",
                                   ok=False).stderr
            assert "nope" in reset(cluster, "--topic", "nope", "--to-earliest",
                                   ok=False).stderr
            assert committed_offset() == RECORDS
    finally:
        client.close()
