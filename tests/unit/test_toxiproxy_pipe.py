"""The sans-I/O pipe of the Toxiproxy-compatible server (chaos/toxiproxy/pipe.py): what one
direction writes when, given the toxics in force, a seeded rng and the times passed in.

No sockets and no clock: each test pushes chunks with made-up read times and steps the pipe as
its shell would, moving the clock to each Wait's time (`_follow`). Checked: a pipe without
toxics writes what it holds and stops; latency counted from each chunk's read time, latencies
adding up, jitter within latency ± jitter and replayed by the seed; bandwidth in 100 ms slices,
the lowest rate winning, idle time earning no burst; slicer pieces delay apart, within
average ± variation; limit_data writing up to its bytes then closing, counting across an
update; timeout 0 holding data and the end of the stream until removed, a timeout over 0
closing that long after it was applied (or updated); reset_peer's countdown from the first
chunk, which is lost, then a reset; slow_close delaying the end; toxicity 0 acting as no
toxic until an update redraws it; a removed toxic no longer delaying queued chunks; flow control
(a paused destination, the queue limit, the end of the source).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tidelog.chaos.toxiproxy.limits import PIPE_QUEUE_BYTES_MAX
from tidelog.chaos.toxiproxy.pipe import Close, PassEof, Pipe, Step, Stop, Wait, Write
from tidelog.chaos.toxiproxy.toxics import Toxic, create_toxic, update_toxic


def _toxic(kind: str, *, name: str | None = None, toxicity: float = 1.0,
           **attributes: int) -> Toxic:
    body: dict[str, Any] = {"type": kind, "toxicity": toxicity, "attributes": attributes}
    if name is not None:
        body["name"] = name
    return create_toxic(body, [])


def _pipe(*toxics: Toxic, seed: int = 1, now: float = 0.0) -> Pipe:
    pipe = Pipe(random.Random(seed))
    pipe.set_toxics(list(toxics), now)
    return pipe


def _follow(pipe: Pipe, now: float) -> list[tuple[float, Step]]:
    """Steps `pipe` from `now` as its shell would, moving the clock to each timed Wait, until
    it writes nothing more without an event; each step but the timed waits, with its time."""
    steps: list[tuple[float, Step]] = []
    for _ in range(10_000):
        step = pipe.step(now)
        if isinstance(step, Wait) and step.until is not None:
            assert step.until > now, "a pipe never waits for a time already passed"
            now = step.until
            continue
        steps.append((now, step))
        if not isinstance(step, Write):
            return steps
    raise AssertionError("the pipe kept writing")


def _writes(steps: list[tuple[float, Step]]) -> list[tuple[float, bytes]]:
    return [(at, bytes(step.data)) for at, step in steps if isinstance(step, Write)]


def test_a_pipe_without_toxics_writes_what_it_holds_then_stops() -> None:
    pipe = _pipe()
    assert pipe.step(0.0) == Stop()  # nothing for a driver to do: the shell's fast path
    pipe.push(b"abc", 0.0)  # what a shell queued while a toxic was still in force
    assert _follow(pipe, 0.0) == [(0.0, Write(b"abc")), (0.0, Stop())]


def test_latency_counts_from_when_each_chunk_was_read() -> None:
    pipe = _pipe(_toxic("latency", latency=100))
    pipe.push(b"a", 0.0)
    pipe.push(b"b", 0.05)
    assert _follow(pipe, 0.0) == [
        (pytest.approx(0.1), Write(b"a")),
        (pytest.approx(0.15), Write(b"b")),  # delayed, not slowed: not 0.2
        (pytest.approx(0.15), Wait()),       # a toxic in force: wait for the next chunk
    ]


def test_latencies_of_one_stream_add_up() -> None:
    pipe = _pipe(_toxic("latency", name="a", latency=100), _toxic("latency", name="b", latency=50))
    pipe.push(b"x", 1.0)
    assert _writes(_follow(pipe, 1.0)) == [(pytest.approx(1.15), b"x")]


def _jitter_delays(seed: int) -> list[float]:
    pipe = _pipe(_toxic("latency", latency=100, jitter=20), seed=seed)
    delays = []
    for second in range(50):  # one chunk a second: each one's delay is its own
        pipe.push(b"j", float(second))
        [(written_at, _)] = _writes(_follow(pipe, float(second)))
        delays.append(round(written_at - second, 6))
    return delays


def test_jitter_stays_within_latency_plus_or_minus_jitter_and_replays_with_the_seed() -> None:
    delays = _jitter_delays(seed=7)
    assert all(0.08 <= delay < 0.12 for delay in delays)  # Toxiproxy: latency + [-jitter, jitter)
    assert len(set(delays)) > 10
    assert _jitter_delays(seed=7) == delays
    assert _jitter_delays(seed=8) != delays


def test_bandwidth_sends_in_100_ms_slices() -> None:
    pipe = _pipe(_toxic("bandwidth", rate=100))  # 100 KB/s: 10,000 bytes a slice
    payload = bytes(range(250)) * 200
    pipe.push(payload, 0.0)
    writes = _writes(_follow(pipe, 0.0))
    assert [at for at, _ in writes] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert [len(data) for _, data in writes] == [10_000] * 5
    assert b"".join(data for _, data in writes) == payload


def test_bandwidth_idle_time_earns_no_burst_and_the_lowest_rate_wins() -> None:
    pipe = _pipe(_toxic("bandwidth", name="fast", rate=100),
                 _toxic("bandwidth", name="slow", rate=10))
    pipe.push(b"s" * 2500, 0.0)  # 10 KB/s: 1,000-byte slices, 0.1 s each
    writes = _writes(_follow(pipe, 0.0))
    assert [(round(at, 6), len(data)) for at, data in writes] == [(0.1, 1000), (0.2, 1000),
                                                                   (0.25, 500)]
    pipe.push(b"t" * 100, 10.0)  # after 9.75 s idle: still paced from now
    assert _writes(_follow(pipe, 10.0)) == [(pytest.approx(10.01), b"t" * 100)]


def test_slicer_cuts_pieces_its_delay_apart() -> None:
    pipe = _pipe(_toxic("slicer", average_size=100, delay=5000))  # delay in µs
    payload = bytes(range(250))
    pipe.push(payload, 0.0)
    writes = _writes(_follow(pipe, 0.0))
    assert [at for at, _ in writes] == pytest.approx([0.005, 0.010, 0.015])
    assert [data for _, data in writes] == [payload[:100], payload[100:200], payload[200:]]


def test_slicer_pieces_vary_within_average_plus_or_minus_variation() -> None:
    pipe = _pipe(_toxic("slicer", average_size=100, size_variation=20), seed=3)
    payload = bytes(range(256)) * 40
    pipe.push(payload, 0.0)
    sizes = [len(data) for _, data in _writes(_follow(pipe, 0.0))]
    assert sum(sizes) == len(payload)
    assert all(80 <= size <= 120 for size in sizes[:-1]) and len(set(sizes)) > 5


def test_limit_data_writes_up_to_its_bytes_then_closes() -> None:
    pipe = _pipe(_toxic("limit_data", bytes=1000))
    pipe.push(b"d" * 600, 0.0)
    pipe.push(b"e" * 600, 0.0)
    assert _follow(pipe, 0.0) == [(0.0, Write(b"d" * 600)), (0.0, Write(b"e" * 400)),
                                  (0.0, Close())]  # graceful: what was written arrives


def test_limit_data_counts_the_bytes_sent_before_an_update() -> None:
    limit = _toxic("limit_data", bytes=1000)
    pipe = _pipe(limit)
    pipe.push(b"a" * 600, 0.0)
    assert _follow(pipe, 0.0) == [(0.0, Write(b"a" * 600)), (0.0, Wait())]
    update_toxic(limit, {"attributes": {"bytes": 800}})
    pipe.set_toxics([limit], 1.0)
    pipe.push(b"b" * 600, 1.0)
    assert _follow(pipe, 1.0) == [(1.0, Write(b"b" * 200)), (1.0, Close())]


def test_timeout_zero_holds_data_and_the_end_of_the_stream_until_removed() -> None:
    pipe = _pipe(_toxic("timeout"))
    pipe.push(b"held", 0.0)
    pipe.push_eof()
    assert _follow(pipe, 0.0) == [(0.0, Wait())]
    assert _follow(pipe, 3600.0) == [(3600.0, Wait())]  # no time makes it let go
    pipe.set_toxics([], 3600.0)
    assert _follow(pipe, 3600.0) == [(3600.0, Write(b"held")), (3600.0, PassEof())]
    assert pipe.done and pipe.step(3600.0) == Stop()


def test_a_timeout_closes_the_connection_that_long_after_it_was_applied_or_updated() -> None:
    timeout = _toxic("timeout", timeout=250)  # times a float holds exactly
    pipe = _pipe(timeout, now=1.0)
    assert pipe.step(1.0) == Wait(1.25)
    update_toxic(timeout, {"attributes": {"timeout": 250}})
    pipe.set_toxics([timeout], 1.125)  # an update starts its timer again
    assert pipe.step(1.25) == Wait(1.375)
    assert pipe.step(1.375) == Close()


def test_reset_peer_counts_down_from_the_first_chunk_loses_it_and_resets() -> None:
    pipe = _pipe(_toxic("reset_peer", timeout=100))
    assert pipe.step(0.0) == Wait()  # no chunk yet: no countdown
    pipe.push(b"lost", 2.0)
    assert _follow(pipe, 2.0) == [(pytest.approx(2.1), Close(reset=True))]


def test_slow_close_delays_the_end_of_the_stream() -> None:
    pipe = _pipe(_toxic("slow_close", delay=300))
    pipe.push(b"x", 0.0)
    pipe.push_eof()
    assert _follow(pipe, 0.0) == [(0.0, Write(b"x")), (pytest.approx(0.3), PassEof())]


def test_toxicity_zero_is_no_toxic_until_an_update_redraws_it() -> None:
    latency = _toxic("latency", toxicity=0.0, latency=100)
    pipe = _pipe(latency)
    assert not pipe.has_active_toxics and pipe.step(0.0) == Stop()
    update_toxic(latency, {"toxicity": 1.0})
    pipe.set_toxics([latency], 1.0)
    pipe.push(b"x", 1.0)
    assert pipe.has_active_toxics and _writes(_follow(pipe, 1.0)) == [(pytest.approx(1.1), b"x")]


def test_a_removed_toxic_no_longer_delays_the_chunks_it_held() -> None:
    pipe = _pipe(_toxic("latency", latency=1000))
    pipe.push(b"q", 0.0)
    assert pipe.step(0.0) == Wait(1.0)
    pipe.set_toxics([], 0.2)
    assert _follow(pipe, 0.2) == [(0.2, Write(b"q")), (0.2, Stop())]


def test_a_paused_destination_holds_the_writes_and_the_reading() -> None:
    pipe = _pipe(_toxic("latency", latency=10))
    pipe.push(b"p", 0.0)
    pipe.set_dst_paused(True)
    assert not pipe.reading_wanted
    assert pipe.step(1.0) == Wait()  # woken by the destination draining
    pipe.set_dst_paused(False)
    assert pipe.reading_wanted and pipe.step(1.0) == Write(b"p")


def test_reading_stops_at_the_queue_limit_and_at_the_end_of_the_source() -> None:
    pipe = _pipe(_toxic("timeout"))
    pipe.push(b"f" * (PIPE_QUEUE_BYTES_MAX - 1), 0.0)
    assert pipe.reading_wanted
    pipe.push(b"f", 0.0)
    assert not pipe.reading_wanted  # TCP pushes back on the source from here
    pipe.discard()
    assert pipe.reading_wanted and pipe.queued_bytes == 0
    pipe.push_eof()
    assert not pipe.reading_wanted


def test_a_seed_replays_every_draw() -> None:
    def run(seed: int) -> list[tuple[float, Step]]:
        pipe = _pipe(_toxic("latency", latency=5, jitter=5),
                     _toxic("slicer", average_size=50, size_variation=40, delay=100),
                     _toxic("latency", name="maybe", toxicity=0.5, latency=7), seed=seed)
        pipe.push(bytes(range(256)) * 8, 0.0)
        return _follow(pipe, 0.0)

    assert run(5) == run(5)
    assert run(5) != run(6)
