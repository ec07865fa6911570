"""A chaos run's history: the operation model and its JSON-lines file (``history.jsonl``).

Every client operation of a run is recorded twice, Jepsen-style: an ``invoke`` line when the
client starts it, then one completion line, ``ok`` (it happened), ``fail`` (it certainly did
not happen) or ``info`` (unknown: a timeout, a lost connection). An invoke without a completion
(the run was cut short) counts as ``info``. Three kinds of operation (``f``):

- ``send`` (:class:`Send`): a producer sends one unique integer ``value`` to ``topic``; an
  ``ok`` says where it landed (``partition``, ``offset``; no offset with acks=0, where Kafka
  returns none). ``acks`` and ``idempotent`` describe the producer, because the verdict
  depends on them: an acks=1 loss is reported, an acks=all loss breaks the promise.
- ``poll`` (:class:`Poll`): a consumer polls ``topic``; an ``ok`` lists what it got as
  ``records`` ``[[partition, offset, value], ...]``. ``session`` numbers the consumer's
  position continuity (unique per run, one process's): the workload starts a new session
  whenever the consumer may legitimately jump (a new consumer, assign, seek, a rebalance), so
  polls within one session must advance without gaps or steps back. ``drain`` marks the final
  read on the healed cluster; a drain that could not read everything ends ``info``.
- ``start`` / ``stop`` (:class:`Fault`): the nemesis (``process`` ``"nemesis"``) starts or
  heals the fault named ``fault`` on ``targets``, for the report's fault windows.

The format is Jepsen's history (jepsen.history, and the queue workload's ops in
jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``) flattened to one partition-level record
per poll entry. docs/chaos.md documents it field by field.

:func:`read_history` and :func:`parse_history` turn a file into a :class:`History`, rejecting
the first bad line with a :class:`HistoryError` naming the line and the reason (a history is a
user's input to ``tidelog chaos check``). Besides each line's shape they check the history's
structure: one operation in flight per process, a completion matching its invoke, send values
unique per run, a session owned by one process. :class:`HistoryWriter` appends lines (one per
call, flushed, checked by the same rules, so a workload bug fails at the first bad operation).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, Literal, NamedTuple, TypeAlias

__all__ = [
    "ACKS",
    "LINE_BYTES_MAX",
    "NEMESIS",
    "OPS_MAX",
    "Acks",
    "Entry",
    "Fault",
    "History",
    "HistoryError",
    "HistoryWriter",
    "Op",
    "OpType",
    "Poll",
    "PolledRecord",
    "Send",
    "decode_op",
    "encode_op",
    "op_to_json",
    "parse_history",
    "read_history",
]

#: One line's bound: a poll of Kafka's max.poll.records (500) takes ~20 KiB; a line past this
#: is refused when read or written, so a corrupt file cannot exhaust memory with one "line".
LINE_BYTES_MAX: Final = 1024 * 1024
#: Operations in one history (invokes and completions). The checkers hold the history in
#: memory, as Jepsen's do; a run of an hour at 1,000 ops/s stays well below this.
OPS_MAX: Final = 20_000_000
#: The nemesis's process name (Jepsen's :nemesis); clients are numbered from 0.
NEMESIS: Final = "nemesis"

OpType: TypeAlias = Literal["invoke", "ok", "fail", "info"]
Acks: TypeAlias = Literal["all", "1", "0"]
OP_TYPES: Final[tuple[OpType, ...]] = ("invoke", "ok", "fail", "info")
ACKS: Final[tuple[Acks, ...]] = ("all", "1", "0")


class PolledRecord(NamedTuple):
    """One record a poll returned: where it was and its value."""

    partition: int
    offset: int
    value: int


@dataclass(frozen=True, slots=True)
class Send:
    """A producer's send of one unique value (``f`` = ``send``)."""

    type: OpType
    process: int
    time_ns: int
    topic: str
    value: int
    acks: Acks
    idempotent: bool
    partition: int | None = None  # on ok: where it landed (on invoke: when chosen explicitly)
    offset: int | None = None     # on ok with acks 1/all
    error: str | None = None      # on fail/info: the error's Kafka name or the exception

    @property
    def f(self) -> str:
        return "send"


@dataclass(frozen=True, slots=True)
class Poll:
    """A consumer's poll (``f`` = ``poll``); ``records`` only on ``ok``."""

    type: OpType
    process: int
    time_ns: int
    topic: str
    session: int
    drain: bool = False
    records: tuple[PolledRecord, ...] = ()
    error: str | None = None

    @property
    def f(self) -> str:
        return "poll"


@dataclass(frozen=True, slots=True)
class Fault:
    """The nemesis starting (``f`` = ``start``) or healing (``stop``) a fault."""

    type: OpType
    f: Literal["start", "stop"]
    time_ns: int
    fault: str
    targets: tuple[str, ...] = ()
    error: str | None = None

    @property
    def process(self) -> str:
        return NEMESIS


Op: TypeAlias = Send | Poll | Fault


@dataclass(frozen=True, slots=True)
class Entry:
    """An operation and the line of the history it came from (1-based), to name it."""

    line: int
    op: Op


@dataclass(frozen=True, slots=True)
class History:
    """A whole history, in file order."""

    entries: tuple[Entry, ...]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)


class HistoryError(ValueError):
    """A history line that is not a valid operation, or breaks the history's structure."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


# =============================================================================== encoding
def encode_op(op: Op) -> str:
    """One JSON line (without the newline), fields in a fixed order, absent ones left out."""
    return json.dumps(op_to_json(op), separators=(",", ":"), ensure_ascii=False)


def op_to_json(op: Op) -> dict[str, object]:
    """The JSON object of one line, as :func:`encode_op` writes it."""
    out: dict[str, object] = {"type": op.type, "f": op.f, "process": op.process,
                              "time_ns": op.time_ns}
    if isinstance(op, Send):
        out.update(topic=op.topic, value=op.value, acks=op.acks, idempotent=op.idempotent)
        _put(out, "partition", op.partition)
        _put(out, "offset", op.offset)
    elif isinstance(op, Poll):
        out.update(topic=op.topic, session=op.session)
        if op.drain:
            out["drain"] = True
        if op.type == "ok":
            out["records"] = [list(r) for r in op.records]
    else:
        out["fault"] = op.fault
        if op.targets:
            out["targets"] = list(op.targets)
    _put(out, "error", op.error)
    return out


def _put(out: dict[str, object], key: str, value: object) -> None:
    if value is not None:
        out[key] = value


_OP_TYPE_BY_NAME: Final[Mapping[str, OpType]] = {name: name for name in OP_TYPES}
_ACKS_BY_NAME: Final[Mapping[str, Acks]] = {name: name for name in ACKS}
_COMMON = {"type", "f", "process", "time_ns", "error"}
_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "send": frozenset(_COMMON | {"topic", "value", "acks", "idempotent", "partition", "offset"}),
    "poll": frozenset(_COMMON | {"topic", "session", "drain", "records"}),
    "start": frozenset(_COMMON | {"fault", "targets"}),
    "stop": frozenset(_COMMON | {"fault", "targets"}),
}


def decode_op(obj: object, line: int) -> Op:
    """The operation a decoded JSON line describes; :class:`HistoryError` says what is wrong."""
    if not isinstance(obj, dict):
        raise HistoryError(line, "not a JSON object")
    f = obj.get("f")
    if not isinstance(f, str) or f not in _FIELDS:
        raise HistoryError(line, f"f must be one of send, poll, start, stop, got {f!r}")
    unknown = sorted(str(key) for key in set(obj) - _FIELDS[f])
    if unknown:
        raise HistoryError(line, f"unknown field {unknown[0]!r} for f={f}")
    op_type = _OP_TYPE_BY_NAME.get(str(obj.get("type")))
    if op_type is None:
        raise HistoryError(line, f"type must be one of invoke, ok, fail, info, "
                                 f"got {obj.get('type')!r}")
    time_ns = _int(obj, "time_ns", line)
    error = _optional_str(obj, "error", line)
    if f == "send":
        return _decode_send(obj, op_type, time_ns, error, line)
    if f == "poll":
        return _decode_poll(obj, op_type, time_ns, error, line)
    if obj.get("process") != NEMESIS:
        raise HistoryError(line, f"process of a fault {f} must be {NEMESIS!r}")
    targets = obj.get("targets", [])
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise HistoryError(line, "targets must be a list of strings")
    return Fault(op_type, "start" if f == "start" else "stop", time_ns,
                 _str(obj, "fault", line), tuple(targets), error)


def _decode_send(obj: dict[str, object], op_type: OpType, time_ns: int, error: str | None,
                 line: int) -> Send:
    acks = _ACKS_BY_NAME.get(str(obj.get("acks")))
    if acks is None or not isinstance(obj.get("acks"), str):
        raise HistoryError(line, f'acks must be "all", "1" or "0", got {obj.get("acks")!r}')
    idempotent = obj.get("idempotent")
    if not isinstance(idempotent, bool):
        raise HistoryError(line, "idempotent must be true or false")
    partition = _optional_int(obj, "partition", line)
    offset = _optional_int(obj, "offset", line)
    if op_type == "ok" and partition is None:
        raise HistoryError(line, "an ok send needs the partition it landed in")
    if op_type == "ok" and offset is None and acks != "0":
        raise HistoryError(line, f"an ok send with acks={acks} needs its offset")
    if offset is not None and (op_type != "ok" or acks == "0"):
        raise HistoryError(line, "only an ok send with acks 1 or all has an offset")
    return Send(op_type, _int(obj, "process", line), time_ns, _str(obj, "topic", line),
                _int(obj, "value", line), acks, idempotent, partition, offset, error)


def _decode_poll(obj: dict[str, object], op_type: OpType, time_ns: int, error: str | None,
                 line: int) -> Poll:
    drain = obj.get("drain", False)
    if not isinstance(drain, bool):
        raise HistoryError(line, "drain must be true or false")
    raw = obj.get("records")
    if op_type != "ok" and raw:
        raise HistoryError(line, f"a {op_type} poll has no records (only an ok poll does)")
    if op_type == "ok" and not isinstance(raw, list):
        raise HistoryError(line, "an ok poll needs records: [[partition, offset, value], ...]")
    items: list[object] = raw if isinstance(raw, list) else []
    records = tuple(_record(item, index, line) for index, item in enumerate(items))
    return Poll(op_type, _int(obj, "process", line), time_ns, _str(obj, "topic", line),
                _int(obj, "session", line), drain, records, error)


def _record(item: object, index: int, line: int) -> PolledRecord:
    if (not isinstance(item, list) or len(item) != 3
            or not all(_is_count(x) for x in item)):
        raise HistoryError(line, f"records[{index}] must be [partition, offset, value] with "
                                 f"integers >= 0, got {item!r}")
    return PolledRecord(item[0], item[1], item[2])


def _is_count(value: object) -> bool:
    # bool is an int in Python; true/false is never a count here.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _int(obj: dict[str, object], key: str, line: int) -> int:
    value = obj.get(key)
    if not _is_count(value):
        raise HistoryError(line, f"{key} must be an integer >= 0, got {value!r}")
    assert isinstance(value, int)  # narrowed by _is_count
    return value


def _optional_int(obj: dict[str, object], key: str, line: int) -> int | None:
    return None if obj.get(key) is None else _int(obj, key, line)


def _str(obj: dict[str, object], key: str, line: int) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise HistoryError(line, f"{key} must be a non-empty string, got {value!r}")
    return value


def _optional_str(obj: dict[str, object], key: str, line: int) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise HistoryError(line, f"{key} must be a string, got {value!r}")
    return value


# ============================================================================== structure
class _Structure:
    """The rules across lines, fed one operation at a time (by the reader and the writer)."""

    def __init__(self) -> None:
        self._open: dict[int | str, Entry] = {}   # process -> its invoke still in flight
        self._send_values: dict[int, int] = {}    # value -> line of its send invoke
        self._session_process: dict[int, tuple[int, int]] = {}  # session -> (process, line)
        self._ops = 0

    def admit(self, entry: Entry) -> None:
        """Check ``entry`` against the lines before it, then record it. A refused entry leaves
        no trace (the writer goes on after refusing one)."""
        if self._ops >= OPS_MAX:
            raise HistoryError(entry.line, f"more than {OPS_MAX} operations in one history")
        op = entry.op
        if isinstance(op, Poll):
            owner = self._session_process.get(op.session, (op.process, entry.line))
            if owner[0] != op.process:
                raise HistoryError(entry.line, f"session {op.session} belongs to process "
                                               f"{owner[0]} (line {owner[1]}), not {op.process}")
        pending = self._open.get(op.process)
        if op.type == "invoke":
            self._check_invoke(entry, pending)
            self._open[op.process] = entry
            if isinstance(op, Send):
                self._send_values[op.value] = entry.line
        else:
            self._check_completion(entry, pending)
            del self._open[op.process]
        if isinstance(op, Poll):
            self._session_process.setdefault(op.session, (op.process, entry.line))
        self._ops += 1

    def _check_invoke(self, entry: Entry, pending: Entry | None) -> None:
        op = entry.op
        if pending is not None:
            raise HistoryError(entry.line, f"process {op.process} invokes {op.f} while its "
                                           f"{pending.op.f} from line {pending.line} is open")
        if isinstance(op, Send) and op.value in self._send_values:
            raise HistoryError(entry.line, f"send value {op.value} was already sent at line "
                                           f"{self._send_values[op.value]} (values are unique "
                                           f"per run)")

    def _check_completion(self, entry: Entry, invoke: Entry | None) -> None:
        op = entry.op
        if invoke is None:
            raise HistoryError(entry.line, f"{op.type} {op.f} of process {op.process} "
                                           f"completes nothing (no open invoke)")
        mismatch = _mismatch(invoke.op, op)
        if mismatch:
            raise HistoryError(entry.line, f"does not complete the invoke at line "
                                           f"{invoke.line}: {mismatch}")


def _mismatch(invoke: Op, completion: Op) -> str | None:
    if invoke.f != completion.f:
        return f"f {completion.f} != {invoke.f}"
    keys: tuple[str, ...] = ()
    if isinstance(invoke, Send):
        keys = ("topic", "value", "acks", "idempotent")
    elif isinstance(invoke, Poll):
        keys = ("topic", "session", "drain")
    else:
        keys = ("fault",)
    for key in keys:
        before, after = getattr(invoke, key), getattr(completion, key)
        if before != after:
            return f"{key} {after!r} != {before!r}"
    return None


# ============================================================================ read / write
def parse_history(lines: Iterable[str | bytes]) -> History:
    """A history from its lines (blank lines skipped); the first bad one raises."""
    structure = _Structure()
    entries: list[Entry] = []
    for number, raw in enumerate(lines, start=1):
        entry = _parse_line(raw, number)
        if entry is not None:
            structure.admit(entry)
            entries.append(entry)
    return History(tuple(entries))


def _parse_line(raw: str | bytes, number: int) -> Entry | None:
    if len(raw) > LINE_BYTES_MAX:
        raise HistoryError(number, f"longer than {LINE_BYTES_MAX} bytes")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise HistoryError(number, f"not UTF-8 ({e.reason} at byte {e.start})") from None
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as e:
        reason = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deep"
        raise HistoryError(number, f"not JSON ({reason})") from None
    return Entry(number, decode_op(obj, number))


def read_history(path: str | Path) -> History:
    """Read ``history.jsonl``; OSError if it cannot be read, HistoryError if it is invalid."""
    with open(path, "rb") as file:
        return parse_history(_bounded_lines(file))


def _bounded_lines(file: IO[bytes]) -> Iterator[bytes]:
    # readline(limit) never holds more than one line's bound, even in a file with no newlines.
    while True:
        raw = file.readline(LINE_BYTES_MAX + 2)
        if not raw:
            return
        yield raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw


class HistoryWriter:
    """Appends operations to a new history file, one flushed line each (to the OS: a killed
    runner loses nothing it wrote), checked as the reader checks them. Thread-safe: a run's
    workers share one writer."""

    def __init__(self, path: str | Path) -> None:
        # "x": a new file only, so line numbers and the structure checks start with it.
        self._file = open(path, "xb")  # noqa: SIM115 - closed by close()/__exit__
        self._lock = threading.Lock()
        self._structure = _Structure()
        self._line = 0

    def write(self, op: Op) -> int:
        """Append ``op``; returns its line number. Raises HistoryError (a workload bug) for an
        operation the reader would refuse, writing nothing."""
        text = encode_op(op)
        data = text.encode("utf-8")
        with self._lock:
            line = self._line + 1
            if len(data) > LINE_BYTES_MAX:
                raise HistoryError(line, f"longer than {LINE_BYTES_MAX} bytes")
            entry = Entry(line, decode_op(json.loads(text), line))
            self._structure.admit(entry)
            self._file.write(data + b"\n")
            self._file.flush()
            self._line = line
            return line

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
