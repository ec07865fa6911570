"""DurableJournal: pysyncobj's Journal interface on files that survive a power loss.

Why not pysyncobj's FileJournal: it writes entries through an mmap that is msynced only when
the node is destroyed, and its term/vote file with write + rename and no fsync, so a controller
that loses power can forget entries it acknowledged and the vote it gave (two leaders in one
term); a write into an mmap page the file system cannot allocate is a SIGBUS, not an error (a
full disk killed the process); its record offsets are 4 bytes (a hard failure past 4 GiB); and
it compacts by rewriting the file in place, so a power loss in the middle leaves neither the
old log nor the new one.

This journal:

* is durable only after :meth:`sync`. patches.py's _PatchedSyncObj holds every message it would
  send while :attr:`needs_sync`, syncs once per flush point of its tick (so one fsync covers
  everything answered in that tick), then sends them: a vote is on disk before the answer goes
  out, an entry before it is acknowledged;
* appends with pwrite into space reserved with posix_fallocate (and zero-filled), so a full disk
  is an OSError when the file grows (a JournalError: the node stops), never a SIGBUS;
* chains each record's CRC-32 to the previous record's and keeps eight zero bytes after the last
  record (written with every append and every truncation). Reading stops at the first record
  that is not whole, does not chain or does not follow its predecessor's index, so whatever
  subset of pages reached the disk before a power loss, what is read back is a log this node
  held at some point (never stale records of a truncated log);
* compacts by writing the remaining entries to a new file, fsyncing it and renaming it over the
  old one (then fsyncing the directory): after a power loss, the old log or the new one;
* keeps the term, the vote and the commit index in a small file next to it, replaced atomically
  (write, fsync, rename, fsync of the directory);
* has 64-bit offsets and a size limit of its own, ``bytes_max`` (the whole log also lives in
  memory): an append past it raises JournalError, which stops the node with a line saying so.
  The adapter compacts long before (RaftSettings.snapshot_journal_bytes) and refuses proposals
  that would cross the limit (quorum.py).

A journal in pysyncobj's format (written by an older Tidelog) is converted when opened.

Format, little-endian. Header: magic ``TLRAFTJL``, u32 format version, u32 CRC-32 of those 12
bytes. Each record: u32 body length, u32 CRC-32 of the body seeded with the previous record's
CRC (the header's for the first), body = u64 index, u64 term, command. Then eight zero bytes.
The state file: magic ``TLRAFTMT``, u32 version, u64 term, u64 commit index, u16 length of the
voted-for node id (0xFFFF: none) and its UTF-8 bytes, u32 CRC-32 of everything before it.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from array import array
from pathlib import Path
from typing import Any

from pysyncobj.journal import FileJournal, Journal, MemoryJournal

logger = logging.getLogger("controller.raft")  # one logger for the whole adapter

_MAGIC = b"TLRAFTJL"
_FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sI")  # magic, version; then the CRC-32 of these
_U32 = struct.Struct("<I")
_HEADER_BYTES = _HEADER.size + _U32.size
_RECORD_HEAD = struct.Struct("<II")  # body length, chained CRC-32 of the body
_BODY_HEAD = struct.Struct("<QQ")  # index, term; the command follows
#: What follows the last record: a record head of length 0, which no record has.
_TERMINATOR = bytes(_RECORD_HEAD.size)
#: Bytes a record adds to its command.
RECORD_OVERHEAD_BYTES = _RECORD_HEAD.size + _BODY_HEAD.size
#: The file grows by at least this much at a time (reserved, then zero-filled).
GROWTH_BYTES = 1024 * 1024
_STATE_MAGIC = b"TLRAFTMT"
_STATE_VERSION = 1
_STATE_HEAD = struct.Struct("<8sIQQH")  # magic, version, term, commit index, voted-for length
_NO_VOTE = 0xFFFF
#: How pysyncobj's FileJournal starts (its APP_NAME): such a file is converted on open.
_PYSYNCOBJ_MAGIC = b"PYSYNCOBJ"
#: pysyncobj's commit index when none was saved (its FileJournal's default).
_COMMIT_INDEX_NONE = 1

Entry = tuple[bytes, int, int]  # pysyncobj's (command, index, term)


class JournalError(Exception):
    """The journal cannot be read or written (a full disk, an I/O error, its size limit, a
    file that is not a journal). Raised by every later call too: the node must stop."""


def fsync_directory(path: Path) -> None:
    """Makes the names created, renamed or removed in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _header() -> bytes:
    head = _HEADER.pack(_MAGIC, _FORMAT_VERSION)
    return head + _U32.pack(zlib.crc32(head))


def _records(entries: list[Entry], seed: int, start: int) -> tuple[bytes, array[int], array[int]]:
    """Encodes ``entries`` (contiguous indexes) as records from offset ``start``: the bytes,
    each record's end offset and each record's CRC."""
    parts: list[bytes] = []
    ends, crcs = array("Q"), array("L")
    offset, crc = start, seed
    for position, (command, index, term) in enumerate(entries):
        if position and index != entries[position - 1][1] + 1:
            raise JournalError(f"journal entry {index} does not follow entry "
                               f"{entries[position - 1][1]}")
        body = _BODY_HEAD.pack(index, term) + command
        crc = zlib.crc32(body, crc)
        parts += [_RECORD_HEAD.pack(len(body), crc), body]
        offset += _RECORD_HEAD.size + len(body)
        ends.append(offset)
        crcs.append(crc)
    return b"".join(parts), ends, crcs


def _parse(data: bytes, seed: int) -> tuple[list[Entry], array[int], array[int], int]:
    """The records of a journal file's bytes, up to the first that is not whole, does not chain
    or does not follow: (entries, ends, CRCs, the offset after the last one)."""
    view = memoryview(data)
    entries: list[Entry] = []
    ends, crcs = array("Q"), array("L")
    offset, crc, index = _HEADER_BYTES, seed, -1
    while offset + _RECORD_HEAD.size <= len(data):
        length, record_crc = _RECORD_HEAD.unpack_from(data, offset)
        body_at = offset + _RECORD_HEAD.size
        end = body_at + length
        if length < _BODY_HEAD.size or end > len(data):
            break
        if zlib.crc32(view[body_at:end], crc) != record_crc:
            break
        entry_index, term = _BODY_HEAD.unpack_from(data, body_at)
        if index >= 0 and entry_index != index + 1:
            break
        entries.append((bytes(view[body_at + _BODY_HEAD.size:end]), entry_index, term))
        ends.append(end)
        crcs.append(record_crc)
        offset, crc, index = end, record_crc, entry_index
    return entries, ends, crcs, offset


class DurableJournal(Journal):  # type: ignore[misc]
    """pysyncobj's Journal interface (what SyncObj calls) plus :attr:`needs_sync` and
    :meth:`sync`. Used on the tick thread only. See the module docstring."""

    def __init__(self, path: Path, state_path: Path, *, bytes_max: int) -> None:
        if bytes_max < _HEADER_BYTES + GROWTH_BYTES:
            raise ValueError(f"bytes_max must be at least {_HEADER_BYTES + GROWTH_BYTES}")
        self.path = path
        self.state_path = state_path
        self.bytes_max = bytes_max
        self._failure: JournalError | None = None
        self._journal_dirty = False
        self._state_dirty = False
        self._commit_changed = False
        self._fd = -1
        self._allocated = 0
        self._seed = zlib.crc32(_HEADER.pack(_MAGIC, _FORMAT_VERSION))
        self._entries: list[Entry] = []
        self._ends: array[int] = array("Q")
        self._crcs: array[int] = array("L")
        if _starts_with(path, _PYSYNCOBJ_MAGIC):
            self._convert_from_pysyncobj()
        self._term, self._voted_for, self._commit_index = self._read_state()
        if not path.exists():
            self._write_new_file([])
        self._open()

    # --- pysyncobj's Journal interface ----------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        self._check_usable()
        if self._entries and idx != self._entries[-1][1] + 1:
            raise self._fail(f"entry {idx} does not follow entry {self._entries[-1][1]}")
        start = self.bytes_used
        crc_before = self._crcs[-1] if self._crcs else self._seed
        data, ends, crcs = _records([(command, idx, term)], crc_before, start)
        end = ends[0]
        if end + len(_TERMINATOR) > self.bytes_max:
            raise self._fail(
                f"appending entry {idx} ({len(command)} bytes) would take the journal past its "
                f"limit of {self.bytes_max} bytes (journal_bytes_max): log compaction did not "
                f"keep it below that (see the snapshot errors logged before this)")
        self._reserve(end + len(_TERMINATOR))
        self._write(data + _TERMINATOR, start)
        self._entries.append((command, idx, term))
        self._ends.append(end)
        self._crcs.append(crcs[0])
        self._journal_dirty = True

    def clear(self) -> None:
        self.deleteEntriesFrom(0)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        self._check_usable()
        if entryFrom >= len(self._entries):
            return
        entry_from = max(entryFrom, 0)
        del self._entries[entry_from:]
        del self._ends[entry_from:]
        del self._crcs[entry_from:]
        # The removed records must not be read back: the terminator goes where they began.
        self._write(_TERMINATOR, self.bytes_used)
        self._journal_dirty = True

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Compaction: the entries from ``entryTo`` on go to a new file, which replaces this
        one once it is on disk."""
        self._check_usable()
        if entryTo <= 0:
            return
        try:
            os.close(self._fd)
            self._fd = -1
            self._write_new_file(self._entries[entryTo:])
            self._open()
        except (OSError, JournalError) as exc:
            raise self._fail("cannot write the compacted journal", exc) from exc
        self._journal_dirty = False

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if self._fd < 0:
            return
        if self._failure is None:
            try:
                self.sync()
            except JournalError:
                logger.exception("raft: the journal could not be synced when closed")
        os.close(self._fd)
        self._fd = -1

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Saved on the one-second timer, as pysyncobj does: Raft needs no durable commit index
        # (it is learnt again from the leader); this only lets a restart apply sooner.
        if raftCommitIndex != self._commit_index:
            self._commit_index = raftCommitIndex
            self._commit_changed = True

    def getRaftCommitIndex(self) -> int:
        return self._commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        if votedForNodeId is not None and not isinstance(votedForNodeId, str):
            raise TypeError(f"a voted-for node id is a str, not {type(votedForNodeId).__name__}")
        self._term, self._voted_for = term, votedForNodeId
        self._state_dirty = True

    def getCurrentTerm(self) -> int:
        return self._term

    def getVotedForNodeId(self) -> str | None:
        return self._voted_for

    def onOneSecondTimer(self) -> None:
        if self._commit_changed:
            self._commit_changed = False
            self._state_dirty = True

    # --- durability -----------------------------------------------------------------------

    @property
    def needs_sync(self) -> bool:
        """True while something written since the last sync is not on disk (always, after a
        failure: nothing may be answered any more)."""
        return self._failure is not None or self._journal_dirty or self._state_dirty

    def sync(self) -> None:
        """Puts everything written so far on disk: fdatasync of the journal, then the state
        file replaced. Raises JournalError (and the journal stays failed) if either fails."""
        self._check_usable()
        try:
            if self._journal_dirty:
                os.fdatasync(self._fd)
                self._journal_dirty = False
            if self._state_dirty:
                self._write_state()
                self._state_dirty = False
        except OSError as exc:
            raise self._fail("cannot sync", exc) from exc

    @property
    def failure(self) -> JournalError | None:
        return self._failure

    @property
    def bytes_used(self) -> int:
        """Bytes of the journal file in use (header and records)."""
        return self._ends[-1] if self._ends else _HEADER_BYTES

    def bytes_before(self, position: int) -> int:
        """Bytes of the records before the one at ``position`` (clamped to the journal)."""
        position = min(max(position, 0), len(self._ends))
        return (self._ends[position - 1] if position else _HEADER_BYTES) - _HEADER_BYTES

    # --- files ----------------------------------------------------------------------------

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR)
        data = _read_all(self._fd)
        if len(data) < _HEADER_BYTES or data[:_HEADER_BYTES] != _header():
            raise JournalError(f"{self.path} is not a Tidelog Raft journal of format "
                               f"{_FORMAT_VERSION} (its header does not match)")
        self._entries, self._ends, self._crcs, end = _parse(data, self._seed)
        self._allocated = len(data)
        if data[end:end + len(_TERMINATOR)] != _TERMINATOR[:len(data) - end]:
            # Normal after a power loss or a kill during a write: those entries were never
            # synced, so nothing was acknowledged or answered for them.
            logger.warning("raft: journal %s: ignored what follows its last whole record "
                           "(entry %s at offset %d): a write not synced before the node "
                           "stopped", self.path, self._entries[-1][1] if self._entries else None,
                           end)
            self._reserve(end + len(_TERMINATOR))
            self._write(_TERMINATOR, end)
            os.fdatasync(self._fd)

    def _write_new_file(self, entries: list[Entry]) -> None:
        """Writes a journal holding ``entries`` beside this one, syncs it and renames it over
        this one; the directory is synced last."""
        records, _ends, _crcs = _records(entries, self._seed, _HEADER_BYTES)
        data = _header() + records + _TERMINATOR
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            size = max(len(data), GROWTH_BYTES)
            os.posix_fallocate(fd, 0, size)
            _write_fully(fd, data + bytes(size - len(data)), 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_directory(self.path.parent)

    def _reserve(self, end: int) -> None:
        """Makes the file at least ``end`` bytes, allocated: posix_fallocate raises ENOSPC
        here rather than a write into a hole failing later. The new space is zero-filled too,
        so later overwrites change no extent and an fdatasync writes data only."""
        if end <= self._allocated:
            return
        size = min(max(end, self._allocated + GROWTH_BYTES), max(end, self.bytes_max))
        grow = size - self._allocated
        try:
            os.posix_fallocate(self._fd, self._allocated, grow)
            _write_fully(self._fd, bytes(grow), self._allocated)
        except OSError as exc:
            raise self._fail(f"cannot grow the file by {grow} bytes to {size}", exc) from exc
        self._allocated = size

    def _write(self, data: bytes, offset: int) -> None:
        try:
            _write_fully(self._fd, data, offset)
        except OSError as exc:
            raise self._fail(f"cannot write {len(data)} bytes at offset {offset}", exc) from exc

    def _read_state(self) -> tuple[int, str | None, int]:
        try:
            data = self.state_path.read_bytes()
        except FileNotFoundError:
            return 0, None, _COMMIT_INDEX_NONE
        except OSError as exc:
            raise JournalError(f"cannot read {self.state_path}: {exc}") from exc
        state = _parse_state(data)
        if state is None:
            # Written with fsync before its rename: a bad file is a damaged disk, not a crash.
            raise JournalError(f"{self.state_path} is damaged (magic, version, length or CRC "
                               f"check failed): the node cannot know its vote")
        return state

    def _write_state(self) -> None:
        vote = b"" if self._voted_for is None else self._voted_for.encode()
        assert len(vote) < _NO_VOTE, "a node id is a host:port"
        data = _STATE_HEAD.pack(_STATE_MAGIC, _STATE_VERSION, self._term, self._commit_index,
                                _NO_VOTE if self._voted_for is None else len(vote)) + vote
        data += _U32.pack(zlib.crc32(data))
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_fully(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.state_path)
        fsync_directory(self.state_path.parent)

    def _convert_from_pysyncobj(self) -> None:
        """Rewrites a journal of pysyncobj's FileJournal (and its term/vote file) in this
        format. Each step is atomic and the old state file goes last, so a crash midway
        converts again on the next start."""
        old = FileJournal(str(self.path))
        try:
            entries = [(bytes(command), int(index), int(term)) for command, index, term in old[:]]
            self._term, self._voted_for = old.getCurrentTerm(), old.getVotedForNodeId()
            self._commit_index = old.getRaftCommitIndex()
        finally:
            old._destroy()
        self._write_state()
        self._write_new_file(entries)
        old_state = Path(f"{self.path}.meta")
        if old_state.exists():
            old_state.unlink()
            fsync_directory(self.path.parent)
        logger.info("raft: converted journal %s (%d entries) from pysyncobj's format, which "
                    "was never fsynced, to Tidelog's", self.path, len(entries))

    # --- failure --------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise JournalError(str(self._failure)) from self._failure

    def _fail(self, what: str, cause: BaseException | None = None) -> JournalError:
        error = JournalError(f"raft journal {self.path}: {what}"
                             + (f": {cause}" if cause is not None else ""))
        error.__cause__ = cause
        if self._failure is None:
            self._failure = error
        return error


class InMemoryJournal(MemoryJournal):  # type: ignore[misc]
    """pysyncobj's MemoryJournal with the durability interface and nothing to sync: for the
    start-up self-test, which has no disk."""

    needs_sync = False

    def sync(self) -> None:
        pass


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except FileNotFoundError:
        return False


def _parse_state(data: bytes) -> tuple[int, str | None, int] | None:
    """(term, voted-for, commit index) of a state file's bytes, or None if they fail a check."""
    try:
        magic, version, term, commit_index, vote_length = _STATE_HEAD.unpack_from(data)
        vote_end = _STATE_HEAD.size + (0 if vote_length == _NO_VOTE else vote_length)
        (crc,) = _U32.unpack_from(data, vote_end)
        vote = None if vote_length == _NO_VOTE else data[_STATE_HEAD.size:vote_end].decode()
    except (struct.error, UnicodeDecodeError):
        return None
    if magic != _STATE_MAGIC or version != _STATE_VERSION or len(data) != vote_end + _U32.size \
            or zlib.crc32(data[:vote_end]) != crc:
        return None
    return term, vote, commit_index


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    parts, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _write_fully(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
