"""What pysyncobj reads from its environment, replaced for the simulation.

pysyncobj 0.3.17 reads time through ``pysyncobj.syncobj.monotonicTime``, draws election timeouts
from ``pysyncobj.syncobj.random.random()`` and creates its journal through
``pysyncobj.syncobj.createJournal(conf.journalFile)``. None of the three can be passed in through
``SyncObjConf`` or the constructor, so :func:`patched_pysyncobj` swaps those three module globals
for the duration of one simulation and restores them afterwards (also on failure).

The replacements answer for the simulation only on the thread that runs it; any other thread
(for example a real-time ``SyncObj`` tick thread left over from another test in the same pytest
process) still gets the real clock, the real ``random`` module and real journals.

Everything else pysyncobj needs is passed in the ordinary way: the transport through
``transportClass``, nodes as :class:`SimNode` objects, ``autoTick=False`` with ``doTick(0)``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pysyncobj.syncobj as syncobj_module
from pysyncobj.journal import Journal
from pysyncobj.node import Node


class SimNode(Node):
    """A pysyncobj node named ``n<index>`` whose hash does not depend on the process.

    pysyncobj iterates ``set``s of nodes (sending append entries, counting votes). Hashes of
    ``str`` are salted per process (PYTHONHASHSEED), so with plain string ids a seed would replay
    differently in another process. Equality stays pysyncobj's: by id.
    """

    def __init__(self, index: int) -> None:
        super().__init__(f"n{index}")
        self.index = index

    def __hash__(self) -> int:
        return self.index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and self.id == other.id


class SimJournal(Journal):
    """A journal as the simulation's disk, kept in memory across restarts.

    Two models, chosen by ``durable``:

    - ``durable=False``: pysyncobj's ``FileJournal`` under a process crash (kill -9), not under
      power loss. Every added entry survives a process crash (mmap, page cache); current term
      and vote are written at once (``storeMeta`` on each change); the commit index is written on
      the one-second timer (or with a term change), so a crash forgets a newer one. Nothing is
      ever synced: a power loss keeps what the kernel wrote back, which :meth:`on_writeback`
      models (the simulation calls it every few seconds).
    - ``durable=True``: the adapter's DurableJournal (controller/raft/journal.py). Entries are
      written at once (pwrite: they survive kill -9), term, vote and commit index only when
      synced; only :meth:`sync` makes anything survive a power loss. The patched SyncObj asks for
      a sync (``needs_sync``) before anything it sends.

    :meth:`crash` applies a process crash and :meth:`power_loss` a power loss to it; the
    restarted ``SyncObj`` is handed the same object.
    """

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable
        self.entries: list[tuple[bytes, int, int]] = []
        self._meta: dict[str, Any] = {}
        self._meta_on_disk: dict[str, Any] = {}
        self._meta_saved = True
        #: What a power loss keeps: the entries and meta as of the last sync (or writeback).
        self.synced_entries: list[tuple[bytes, int, int]] = []
        self.synced_meta: dict[str, Any] = {}
        #: Leading entries of ``entries`` known to equal ``synced_entries``'.
        self._synced_prefix = 0
        self._entries_unsynced = False
        self._meta_unsynced = False
        self.syncs = 0

    # --- pysyncobj's Journal interface --------------------------------------------------------
    def add(self, command: bytes, idx: int, term: int) -> None:
        self.entries.append((command, idx, term))
        self._entries_unsynced = True

    def clear(self) -> None:
        self.deleteEntriesFrom(0)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        del self.entries[entryFrom:]
        self._synced_prefix = min(self._synced_prefix, max(entryFrom, 0))
        self._entries_unsynced = True

    def deleteEntriesTo(self, entryTo: int) -> None:
        self.entries = self.entries[entryTo:]
        if self.durable:
            # DurableJournal compacts into a new file, synced before it replaces the old one.
            self.synced_entries = list(self.entries)
            self._synced_prefix = len(self.entries)
            self._entries_unsynced = False
        else:
            self._synced_prefix = 0
            self._entries_unsynced = True

    def __getitem__(self, item: Any) -> Any:
        return self.entries[item]

    def __len__(self) -> int:
        return len(self.entries)

    def _destroy(self) -> None:
        pass

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._meta["raftCommitIndex"] = raftCommitIndex
        self._meta_saved = False

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("raftCommitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        if self.durable:
            self._meta_unsynced = True
        else:
            self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:
        if self._meta_saved:
            return
        self._meta_saved = True
        if self.durable:
            self._meta_unsynced = True
        else:
            self._store_meta()

    # --- durability (the patched SyncObj's side) ----------------------------------------------
    @property
    def needs_sync(self) -> bool:
        return self.durable and (self._entries_unsynced or self._meta_unsynced)

    def sync(self) -> None:
        if not self.durable:
            return  # pysyncobj's FileJournal never syncs
        self._make_durable()
        if self._meta_unsynced:
            self._meta_on_disk = dict(self._meta)
        self._entries_unsynced = self._meta_unsynced = False
        self.syncs += 1

    def on_writeback(self) -> None:
        """The kernel writes dirty pages back (FileJournal only: DurableJournal syncs itself)."""
        if not self.durable:
            self._make_durable()

    def _make_durable(self) -> None:
        del self.synced_entries[self._synced_prefix:]
        self.synced_entries.extend(self.entries[self._synced_prefix:])
        self._synced_prefix = len(self.entries)
        self.synced_meta = dict(self._meta_on_disk if not self.durable else self._meta)

    # --- the simulation's side ----------------------------------------------------------------
    def _store_meta(self) -> None:
        self._meta_on_disk = dict(self._meta)
        self._meta_saved = True

    def crash(self) -> None:
        """A process crash: what was only in memory (an unwritten commit index) is gone."""
        self._meta = dict(self._meta_on_disk)
        self._meta_saved = True
        self._meta_unsynced = False

    def power_loss(self, rng: random.Random) -> None:
        """The machine loses power: what was synced survives, and of the entries appended since,
        a random prefix (pages the kernel happened to write; DurableJournal reads back a chained
        prefix, so never a mix of a truncated log and a new one)."""
        self.crash()
        appended = self.entries[len(self.synced_entries):] \
            if self._synced_prefix == len(self.synced_entries) else []
        # What is read back after the restart is on the disk: synced from now on.
        self.entries = self.synced_entries + appended[:rng.randint(0, len(appended))]
        self.synced_entries = list(self.entries)
        self._synced_prefix = len(self.entries)
        self._entries_unsynced = False
        self._meta = dict(self.synced_meta)
        self._meta_on_disk = dict(self.synced_meta)

    def synced_term_and_vote(self) -> tuple[int, Any]:
        return int(self.synced_meta.get("currentTerm", 0)), self.synced_meta.get("votedForNodeId")

    def synced_entry_at(self, raft_index: int) -> tuple[bytes, int, int] | bool | None:
        """The synced entry with this index; True if a compaction dropped it (the dump holds
        it); None if the synced journal does not reach it."""
        entries = self.synced_entries
        if entries and raft_index < entries[0][1]:
            return True
        pos = raft_index - (entries[0][1] if entries else 0)
        return entries[pos] if entries and 0 <= pos < len(entries) else None

    def first_index(self) -> int:
        return self.entries[0][1] if self.entries else 0

    def entry_at(self, raft_index: int) -> tuple[bytes, int, int] | None:
        """The entry with this Raft index, if the journal still holds it (not compacted)."""
        first = self.first_index()
        pos = raft_index - first
        if not self.entries or pos < 0 or pos >= len(self.entries):
            return None
        entry = self.entries[pos]
        assert entry[1] == raft_index, "journal indexes are contiguous"
        return entry


class SimEnvironment:
    """The clock, randomness and journal factory pysyncobj sees while a simulation runs.

    The simulation sets :attr:`node_clock` and :attr:`node_rng` before it calls into a node, so
    each node reads its own (possibly drifting) clock and draws from its own seeded stream.
    """

    def __init__(self) -> None:
        self.thread_id: int | None = None
        self.node_clock: Callable[[], float] | None = None
        self.node_rng: random.Random | None = None
        self.node_name: str | None = None
        self.next_journal: SimJournal | None = None
        self.log_records: list[tuple[str | None, logging.LogRecord]] = []

    def _on_sim_thread(self) -> bool:
        return threading.get_ident() == self.thread_id

    def monotonic(self) -> float:
        if self._on_sim_thread():
            assert self.node_clock is not None, "pysyncobj read the clock outside a node step"
            return self.node_clock()
        return time.monotonic()

    def random(self) -> float:
        if self._on_sim_thread():
            assert self.node_rng is not None, "pysyncobj drew a random number outside a node step"
            return self.node_rng.random()
        return random.random()

    def create_journal(self, journal_file: str | None = None) -> Journal:
        if self._on_sim_thread():
            journal = self.next_journal
            assert journal is not None, "a SyncObj was built outside Simulation._construct"
            self.next_journal = None
            return journal
        return _REAL_CREATE_JOURNAL(journal_file)


class _RandomModuleProxy:
    """Stands in for the ``random`` module inside ``pysyncobj.syncobj`` (it calls ``random()``)."""

    def __init__(self, env: SimEnvironment) -> None:
        self._env = env

    def random(self) -> float:
        return self._env.random()

    def __getattr__(self, name: str) -> Any:
        return getattr(random, name)


class _LogCapture(logging.Handler):
    def __init__(self, env: SimEnvironment) -> None:
        super().__init__(level=logging.WARNING)
        self._env = env

    def emit(self, record: logging.LogRecord) -> None:
        if self._env._on_sim_thread():
            self._env.log_records.append((self._env.node_name, record))


_REAL_CREATE_JOURNAL = syncobj_module.createJournal
_installed = threading.Lock()


@contextlib.contextmanager
def patched_pysyncobj(env: SimEnvironment) -> Iterator[SimEnvironment]:
    """Route pysyncobj's clock, randomness and journals to ``env`` on this thread, then restore.

    pysyncobj's WARNING and CRITICAL log lines from the simulation are collected in
    ``env.log_records`` (the simulation reports them as anomalies).
    """
    if not _installed.acquire(blocking=False):
        raise RuntimeError("simulations do not nest: pysyncobj is already patched")
    saved = (syncobj_module.monotonicTime, syncobj_module.random, syncobj_module.createJournal)
    logger = logging.getLogger("pysyncobj")
    handler = _LogCapture(env)
    env.thread_id = threading.get_ident()
    try:
        syncobj_module.monotonicTime = env.monotonic
        syncobj_module.random = _RandomModuleProxy(env)  # type: ignore[assignment]
        syncobj_module.createJournal = env.create_journal
        logger.addHandler(handler)
        yield env
    finally:
        logger.removeHandler(handler)
        syncobj_module.monotonicTime, syncobj_module.random, syncobj_module.createJournal = saved
        env.thread_id = None
        _installed.release()
