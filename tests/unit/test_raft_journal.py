"""The Raft adapter's DurableJournal (controller/raft/journal.py), on files in tmp_path.

What is checked, and how (each test opens, writes, closes or drops, and reopens a journal):
- entries, term, vote and commit index come back after a reopen; nothing needs a sync until
  something changes, and every change (an entry, a truncation, a vote) does until synced; the
  commit index only once the one-second timer saved it;
- what a power loss can leave is read back as a log the node had: a torn or half-written tail
  is ignored, and the records of a truncated log never come back, not even when a new record of
  the same size lands exactly where an old one was and the bytes after it are the old log's
  (the page with the terminator not written back): the CRC chain stops the reader;
- compaction writes a new file and renames it over the old one: a failed rename leaves the old
  log whole; the compacted file is small again;
- a full disk (posix_fallocate failing with ENOSPC) and the size limit are JournalErrors, raised
  again by every later call, and nothing is durable after them (needs_sync stays true);
- a damaged state file refuses to open; a journal of pysyncobj's FileJournal (an older Tidelog)
  is converted with its entries, term, vote and commit index.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.journal import FileJournal

from tidelog.controller.raft import RaftSettings
from tidelog.controller.raft.journal import GROWTH_BYTES, DurableJournal, JournalError

BYTES_MAX = 64 * 1024 * 1024


def open_journal(tmp_path: Path, bytes_max: int = BYTES_MAX) -> DurableJournal:
    return DurableJournal(tmp_path / "raft.journal", tmp_path / "raft.state", bytes_max=bytes_max)


def fill(journal: DurableJournal, first: int, last: int, term: int, size: int = 40) -> None:
    for index in range(first, last + 1):
        journal.add(b"%d-%d|" % (index, term) + b"x" * size, index, term)


def indexes(journal: DurableJournal) -> list[tuple[int, int]]:
    return [(entry[1], entry[2]) for entry in journal[:]]


def test_entries_vote_and_commit_index_come_back(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    assert len(journal) == 0 and not journal.needs_sync and journal.getCurrentTerm() == 0
    fill(journal, 1, 10, 1)
    assert journal.needs_sync
    journal.sync()
    assert not journal.needs_sync
    journal.setCurrentTerm(3, "127.0.0.1:9094")
    assert journal.needs_sync
    journal.setRaftCommitIndex(7)
    journal.sync()
    journal.setRaftCommitIndex(9)
    assert not journal.needs_sync, "the commit index waits for the one-second timer"
    journal.onOneSecondTimer()
    assert journal.needs_sync
    journal.sync()
    journal._destroy()

    again = open_journal(tmp_path)
    assert indexes(again) == [(i, 1) for i in range(1, 11)]
    assert again[4][0] == b"5-1|" + b"x" * 40
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (3, "127.0.0.1:9094")
    assert again.getRaftCommitIndex() == 9
    again._destroy()


def test_a_torn_tail_is_ignored(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    fill(journal, 1, 20, 1)
    journal.sync()
    end_of_ten = journal.bytes_before(10)
    journal._destroy()
    path = tmp_path / "raft.journal"
    data = bytearray(path.read_bytes())
    data[16 + end_of_ten + 30] ^= 0x01  # a byte of entry 11 not as written
    path.write_bytes(bytes(data))
    assert indexes(open_journal(tmp_path)) == [(i, 1) for i in range(1, 11)]

    os.truncate(path, 16 + end_of_ten + 20)  # entry 11 cut in the middle: a half-done write
    torn = open_journal(tmp_path)
    assert indexes(torn) == [(i, 1) for i in range(1, 11)]
    fill(torn, 11, 12, 2)  # appends go where the whole records end
    torn.sync()
    torn._destroy()
    assert indexes(open_journal(tmp_path)) == [(i, 1) for i in range(1, 11)] + [(11, 2), (12, 2)]


def test_a_truncated_log_never_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = open_journal(tmp_path)
    fill(journal, 1, 10, 1)
    journal.sync()
    old = path.read_bytes()
    journal.deleteEntriesFrom(4)  # entries 5-10 conflicted with a new leader's
    journal.sync()
    journal._destroy()
    assert indexes(open_journal(tmp_path)) == [(i, 1) for i in range(1, 5)]

    journal = open_journal(tmp_path)
    fill(journal, 5, 5, 2)  # the new leader's entry 5, the same size as the old one
    new_end = 16 + journal.bytes_before(5)
    journal.sync()
    journal._destroy()
    # The page holding the new entry 5 reached the disk, the one after it (its terminator) did
    # not: the old entries 6-10 follow, byte for byte where they were, each a whole record.
    torn = path.read_bytes()[:new_end] + old[new_end:]
    path.write_bytes(torn)
    assert indexes(open_journal(tmp_path)) == [(i, 1) for i in range(1, 5)] + [(5, 2)]


def test_compaction_replaces_the_file_or_leaves_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = open_journal(tmp_path)
    fill(journal, 1, 30_000, 1)  # ~2 MiB: the file has grown
    journal.sync()
    assert (tmp_path / "raft.journal").stat().st_size > GROWTH_BYTES
    journal.deleteEntriesTo(29_990)
    assert not journal.needs_sync, "a compacted journal is written and synced whole"
    assert indexes(journal) == [(i, 1) for i in range(29_991, 30_001)]
    assert (tmp_path / "raft.journal").stat().st_size == GROWTH_BYTES
    journal._destroy()
    journal = open_journal(tmp_path)
    assert indexes(journal) == [(i, 1) for i in range(29_991, 30_001)]

    def failing_replace(src: Any, dst: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(JournalError, match=r"compacted journal.*Input/output error"):
        journal.deleteEntriesTo(5)
    monkeypatch.undo()
    journal._destroy()
    assert indexes(open_journal(tmp_path)) == [(i, 1) for i in range(29_991, 30_001)]


def test_a_full_disk_is_an_error_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = open_journal(tmp_path)
    fill(journal, 1, 5, 1)
    journal.sync()

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(JournalError, match=r"cannot grow the file.*No space left on device"):
        journal.add(b"y" * GROWTH_BYTES, 6, 1)
    monkeypatch.undo()
    assert len(journal) == 5 and journal.needs_sync, "nothing is durable after a failure"
    for call in (lambda: journal.add(b"z", 6, 1), journal.sync, journal.clear,
                 lambda: journal.deleteEntriesTo(2)):
        with pytest.raises(JournalError, match="No space left on device"):
            call()
    journal._destroy()
    assert indexes(open_journal(tmp_path)) == [(i, 1) for i in range(1, 6)]


def test_the_size_limit_is_refused_with_a_reason(tmp_path: Path) -> None:
    limit = 16 + GROWTH_BYTES
    journal = open_journal(tmp_path, bytes_max=limit)
    fill(journal, 1, 3, 1, size=300_000)
    with pytest.raises(JournalError, match=f"past its limit of {limit} bytes "
                                           r"\(journal_bytes_max\)"):
        fill(journal, 4, 4, 1, size=300_000)
    assert len(journal) == 3


def test_the_production_limits_relate() -> None:
    settings = RaftSettings()
    assert settings.journal_bytes_max == 2 * 1024**3
    assert settings.snapshot_journal_bytes == 64 * 1024**2
    # Compaction starts far below the limit, which holds a full queue of the largest batches
    # on top of the compaction threshold.
    assert settings.journal_bytes_max >= (settings.snapshot_journal_bytes
                                          + settings.uncommitted_bytes_max)
    with pytest.raises(ValueError, match="journal_bytes_max"):
        RaftSettings(journal_bytes_max=512 * 1024**2)


def test_a_damaged_state_file_refuses_to_open(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.setCurrentTerm(4, "a:1")
    journal.sync()
    journal._destroy()
    state = tmp_path / "raft.state"
    data = bytearray(state.read_bytes())
    data[12] ^= 0xFF
    state.write_bytes(bytes(data))
    with pytest.raises(JournalError, match=r"damaged.*cannot know its vote"):
        open_journal(tmp_path)


def test_a_pysyncobj_journal_is_converted(tmp_path: Path) -> None:
    old = FileJournal(str(tmp_path / "raft.journal"))
    old.add(b"\x01", 1, 0)
    for index in range(2, 50):
        old.add(b"entry %d" % index, index, 2)
    old.setCurrentTerm(5, "127.0.0.1:9095")
    old.setRaftCommitIndex(40)
    old.onOneSecondTimer()
    old._destroy()
    assert (tmp_path / "raft.journal.meta").exists()

    journal = open_journal(tmp_path)
    assert indexes(journal) == [(1, 0)] + [(i, 2) for i in range(2, 50)]
    assert journal[10][0] == b"entry 11"
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId()) == (5, "127.0.0.1:9095")
    assert journal.getRaftCommitIndex() == 40
    assert not (tmp_path / "raft.journal.meta").exists()
    assert (tmp_path / "raft.journal").read_bytes().startswith(b"TLRAFTJL")
    journal._destroy()
    assert indexes(open_journal(tmp_path))[-1] == (49, 2)
