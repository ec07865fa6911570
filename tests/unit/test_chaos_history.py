"""The history format (chaos/history.py): what the writer writes the reader reads back, and a
bad line -- its shape or its place in the history -- is refused with its line number and the
reason, never a crash (a history is user input to ``tidelog chaos check``).

How: operations are built as dataclasses, written with HistoryWriter or encode_op, and parsed
back; malformed files are written by hand, one defect each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chaos_testkit import Builder

from tidelog.chaos.history import (
    LINE_BYTES_MAX,
    Fault,
    HistoryError,
    HistoryWriter,
    Poll,
    PolledRecord,
    Send,
    parse_history,
    read_history,
)

SEND = {"type": "invoke", "f": "send", "process": 0, "time_ns": 1, "topic": "t", "value": 7,
        "acks": "all", "idempotent": True}
SEND_OK = {**SEND, "type": "ok", "time_ns": 2, "partition": 1, "offset": 4}


def lines(*objs: dict[str, object]) -> list[str]:
    return [json.dumps(o) for o in objs]


def test_what_the_writer_writes_reads_back_the_same(tmp_path: Path) -> None:
    b = Builder()
    b.fault("kill", start=True, targets=("broker-2",))
    b.send(0, 1, partition=2, offset=0)
    b.send(1, 2, outcome="fail")
    b.send(0, 3, acks="0", idempotent=False, offset=None, partition=1)
    b.poll(3, 0, [(2, 0, 1)])
    b.poll(3, 0, [], outcome="info")
    b.fault("kill", start=False, targets=("broker-2",))
    b.poll(9, 1, [(2, 0, 1)], drain=True)
    b.send(1, 4, outcome=None)  # cut short: an open invoke at the end is allowed
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        written = [writer.write(op) for op in b.ops]
    assert written == list(range(1, len(b.ops) + 1))
    history = read_history(path)
    assert [e.op for e in history] == b.ops
    assert [e.line for e in history] == written
    assert history.entries[3].op == Send("ok", 0, b.ops[3].time_ns, "t", 1, "all", True, 2, 0)
    assert history.entries[15].op.records == (PolledRecord(2, 0, 1),)  # type: ignore[union-attr]
    assert isinstance(history.entries[0].op, Fault) and history.entries[0].op.process == "nemesis"


def test_the_writer_refuses_what_the_reader_would_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        writer.write(Send("invoke", 0, 1, "t", 5, "all", True))
        with pytest.raises(HistoryError, match="line 2: process 0 invokes poll while its send"):
            writer.write(Poll("invoke", 0, 2, "t", 0))
        with pytest.raises(HistoryError, match="needs its offset"):
            writer.write(Send("ok", 0, 3, "t", 5, "all", True, partition=0))
        assert writer.write(Send("ok", 0, 3, "t", 5, "all", True, 0, 9)) == 2
        huge = Poll("ok", 1, 4, "t", 0, records=tuple(PolledRecord(0, i, i)
                                                      for i in range(LINE_BYTES_MAX // 8)))
        writer.write(Poll("invoke", 1, 4, "t", 0))
        with pytest.raises(HistoryError, match="longer than"):
            writer.write(huge)
    assert len(path.read_text().splitlines()) == 3
    with pytest.raises(FileExistsError):  # a history is a new file: line numbers start at 1
        HistoryWriter(path)


@pytest.mark.parametrize(("text", "reason"), [
    ("{not json", "line 2: not JSON"),
    ("[1, 2]", "line 2: not a JSON object"),
    ('{"type": "ok", "f": "write"}', "line 2: f must be one of send, poll, start, stop"),
    (json.dumps({**SEND_OK, "ofset": 4}), "line 2: unknown field 'ofset' for f=send"),
    (json.dumps({**SEND_OK, "type": "done"}), "line 2: type must be one of"),
    (json.dumps({**SEND_OK, "offset": -1}), "line 2: offset must be an integer >= 0"),
    (json.dumps({**SEND_OK, "offset": True}), "line 2: offset must be an integer >= 0"),
    (json.dumps({**SEND_OK, "value": "7"}), "line 2: value must be an integer >= 0"),
    (json.dumps({**SEND_OK, "acks": -1}), 'line 2: acks must be "all", "1" or "0"'),
    (json.dumps({**SEND_OK, "idempotent": "yes"}), "line 2: idempotent must be true or false"),
    (json.dumps({k: v for k, v in SEND_OK.items() if k != "partition"}),
     "line 2: an ok send needs the partition"),
    (json.dumps({**SEND_OK, "acks": "0"}), "line 2: only an ok send with acks 1 or all"),
    (json.dumps({**SEND_OK, "topic": ""}), "line 2: topic must be a non-empty string"),
    (json.dumps({**SEND_OK, "time_ns": 1.5}), "line 2: time_ns must be an integer"),
    (json.dumps({**SEND_OK, "value": 8}), "line 2: does not complete the invoke at line 1: "
                                          "value 8 != 7"),
    (json.dumps({**SEND_OK, "process": 3}), "line 2: ok send of process 3 completes nothing"),
    (json.dumps({**SEND, "time_ns": 3}), "line 2: process 0 invokes send while its send from "
                                         "line 1 is open"),
    ("[" * 100_000, "line 2: not JSON"),
])
def test_a_bad_line_is_refused_with_its_number_and_reason(text: str, reason: str) -> None:
    with pytest.raises(HistoryError) as e:
        parse_history([json.dumps(SEND), text])
    assert str(e.value).startswith(reason), str(e.value)
    assert e.value.line == 2


@pytest.mark.parametrize(("objs", "reason"), [
    ([{"type": "invoke", "f": "poll", "process": 1, "time_ns": 1, "topic": "t", "session": 0},
      {"type": "ok", "f": "poll", "process": 1, "time_ns": 2, "topic": "t", "session": 0,
       "records": [[0, 1]]}], "line 2: records[0] must be [partition, offset, value]"),
    ([{"type": "invoke", "f": "poll", "process": 1, "time_ns": 1, "topic": "t", "session": 0},
      {"type": "info", "f": "poll", "process": 1, "time_ns": 2, "topic": "t", "session": 0,
       "records": [[0, 1, 2]]}], "line 2: a info poll has no records"),
    ([{"type": "invoke", "f": "poll", "process": 1, "time_ns": 1, "topic": "t", "session": 0},
      {"type": "ok", "f": "poll", "process": 1, "time_ns": 2, "topic": "t", "session": 0,
       "records": [[0, 1, 2]]},
      {"type": "invoke", "f": "poll", "process": 2, "time_ns": 3, "topic": "t", "session": 0}],
     "line 3: session 0 belongs to process 1 (line 1), not 2"),
    ([SEND, SEND_OK, {**SEND, "time_ns": 5}],
     "line 3: send value 7 was already sent at line 1 (values are unique per run)"),
    ([{"type": "info", "f": "start", "process": 0, "time_ns": 1, "fault": "kill"}],
     "line 1: process of a fault start must be 'nemesis'"),
])
def test_the_history_structure_is_checked_across_lines(objs: list[dict[str, object]],
                                                       reason: str) -> None:
    with pytest.raises(HistoryError) as e:
        parse_history(lines(*objs))
    assert str(e.value).startswith(reason), str(e.value)


def test_a_file_with_an_overlong_line_or_bad_bytes_is_refused_by_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(json.dumps(SEND).encode() + b"\n\n" + b"x" * (LINE_BYTES_MAX + 10))
    with pytest.raises(HistoryError, match=r"^line 3: longer than \d+ bytes"):
        read_history(path)
    path.write_bytes(json.dumps(SEND).encode() + b"\n" + b'{"f": "\xff"}\n')
    with pytest.raises(HistoryError, match=r"^line 2: not UTF-8"):
        read_history(path)


def test_blank_lines_are_skipped_but_keep_the_numbering() -> None:
    history = parse_history([json.dumps(SEND), "", "  ", json.dumps(SEND_OK)])
    assert [e.line for e in history] == [1, 4]
