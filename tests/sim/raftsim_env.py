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
    """pysyncobj's ``FileJournal`` as the simulation's disk, kept in memory across restarts.

    The durability model is FileJournal's under a process crash (kill -9), not under power loss:
    - entries are written through mmap at once, so every added entry survives a process crash
      (the page cache outlives the process);
    - current term and vote are written synchronously (``storeMeta`` on each change);
    - the commit index is kept in memory and written on the one-second timer (or along with a
      term change), so a crash forgets the commit index set since the last write.
    :meth:`crash` applies that model; the restarted ``SyncObj`` is handed the same object.
    """

    def __init__(self) -> None:
        self.entries: list[tuple[bytes, int, int]] = []
        self._meta: dict[str, Any] = {}
        self._meta_on_disk: dict[str, Any] = {}
        self._meta_saved = True

    # --- pysyncobj's Journal interface --------------------------------------------------------
    def add(self, command: bytes, idx: int, term: int) -> None:
        self.entries.append((command, idx, term))

    def clear(self) -> None:
        self.entries = []

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        del self.entries[entryFrom:]

    def deleteEntriesTo(self, entryTo: int) -> None:
        self.entries = self.entries[entryTo:]

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
        self._store_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:
        if not self._meta_saved:
            self._store_meta()

    # --- the simulation's side ----------------------------------------------------------------
    def _store_meta(self) -> None:
        self._meta_on_disk = dict(self._meta)
        self._meta_saved = True

    def crash(self) -> None:
        """A process crash: what was only in memory (an unwritten commit index) is gone."""
        self._meta = dict(self._meta_on_disk)
        self._meta_saved = True

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
