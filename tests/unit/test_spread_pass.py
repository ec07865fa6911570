"""SpreadPass (broker/spread_pass.py): a periodic job over every partition, spread over the
ticks of its period instead of one event-loop turn. Pure logic, driven with explicit clocks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tidelog.broker.spread_pass import SpreadPass


@dataclass(eq=False)
class _Item:
    name: int
    closed: bool = False


def _pass(items: list[_Item], visits: list[tuple[int, int]], *, period_ms: int = 1000,
          tick_ms: int = 100, first_at_ms: int = 0) -> SpreadPass[_Item]:
    return SpreadPass(period_ms=period_ms, tick_ms=tick_ms, items=lambda: list(items),
                      visit=lambda item, now: visits.append((item.name, now)),
                      first_at_ms=first_at_ms)


def test_each_item_is_visited_once_per_period_a_share_per_tick() -> None:
    items = [_Item(i) for i in range(25)]
    visits: list[tuple[int, int]] = []
    job = _pass(items, visits)
    shares = [job.tick(now) for now in range(0, 1000, 100)]
    assert sorted(name for name, _ in visits) == list(range(25))
    assert max(shares) <= 3 and sum(shares) == 25  # ceil(25 / 10 ticks)
    assert not job.in_progress and job.passes == 1
    assert job.tick(1000) > 0 and job.passes == 2  # the next period's pass


def test_late_ticks_catch_up_so_a_pass_ends_within_its_period() -> None:
    items = [_Item(i) for i in range(100)]
    visits: list[tuple[int, int]] = []
    job = _pass(items, visits)
    assert job.tick(0) == 10
    assert job.tick(950) == 90  # the loop was busy: what was due meanwhile is done now
    assert not job.in_progress


def test_nothing_before_the_first_start_and_closed_items_are_skipped() -> None:
    items = [_Item(i) for i in range(4)]
    visits: list[tuple[int, int]] = []
    job = _pass(items, visits, first_at_ms=500)
    assert job.tick(400) == 0 and job.passes == 0
    assert job.tick(500) == 1
    items[1].closed = True  # deleted while the pass goes on
    items.append(_Item(9))  # created meanwhile: the next pass has it
    for now in range(600, 1500, 100):
        job.tick(now)
    assert not job.in_progress
    assert [name for name, _ in visits] == [0, 2, 3]
    visits.clear()
    for now in range(1500, 2500, 100):
        job.tick(now)
    assert sorted(name for name, _ in visits) == [0, 2, 3, 9]


def test_a_period_or_tick_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        _pass([], [], period_ms=0)
