"""A simulated network for pysyncobj: TCP-like connections over delayed, cuttable links.

pysyncobj talks to its peers through a ``Transport`` (connect/disconnect callbacks plus
``send``). :class:`SimTransport` is that transport; :class:`SimNetwork` decides when and whether
each message arrives. The model follows what pysyncobj's ``TCPTransport`` does over real TCP:

- One connection per pair, opened by the node whose id compares greater (``_shouldConnect``),
  retried every ``connectionRetryTime``. A connection attempt succeeds after a round trip if the
  link is up and the peer's host answers (a paused process's kernel still accepts), and fails
  after a round trip (crashed peer: RST) or after ``connect_timeout_us`` (link cut).
- Each connection is FIFO (per direction), over a link with a per-link base delay plus seeded
  jitter; two connections between the same nodes are not ordered with each other. While a link
  is cut its messages wait (TCP retransmits) and are delivered after the heal, each connection
  on its own retransmission timer, unless the connection was closed meanwhile. Messages to a
  paused process wait in its kernel buffer.
- pysyncobj closes a connection when it has read nothing for ``connectionTimeout`` and then
  sends or receives on it; a cut link is also closed by TCP keepalive (``keepalive_us``). A close
  sends a FIN behind the data; a crashed process's kernel sends an RST, and a random suffix of
  the data it had not yet sent is lost.
- An acceptor that gets a new connection from a peer keeps the old one open, as pysyncobj does
  (it replaces its ``_connections[node]`` entry without closing the old socket).

``datagram=True`` drops the TCP guarantees on purpose: messages are reordered (no FIFO), lost
with probability ``drop_rate``, and lost rather than held while a link is cut. pysyncobj is not
written for that; the mode exists to show what its protocol relies on.
"""

from __future__ import annotations

import bisect
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pysyncobj.transport import Transport

if TYPE_CHECKING:
    from raftsim import Simulation

US = 1_000_000
#: After a cut heals, a connection's waiting data goes out when its retransmission timer fires.
RETRANSMIT_WAIT_US = 200_000
#: Messages in flight on one link; more means a runaway sender (see raftsim.EVENTS_MAX).
LINK_QUEUE_MAX = 50_000


@dataclass
class NetConfig:
    datagram: bool = False
    drop_rate: float = 0.0
    base_delay_us: tuple[int, int] = (200, 3_000)
    jitter_mean_us: int = 500
    connect_timeout_us: int = 1 * US
    #: Linux keepalive with pysyncobj's tcp_keepalive=(16, 3, 5): idle 16 s + 5 probes 3 s apart.
    keepalive_us: int = 31 * US


@dataclass(order=True)
class Envelope:
    due_us: int
    seq: int
    kind: str = field(compare=False)  # "hello" | "msg" | "fin" | "rst"
    epoch: int = field(compare=False)
    payload: bytes | None = field(compare=False, default=None)


@dataclass
class _Side:
    """Node a's end of its connection(s) to node b, as pysyncobj's transport sees it."""

    current: int | None = None
    open_epochs: set[int] = field(default_factory=set)
    last_read_us: int = 0
    last_attempt_us: int | None = None
    connecting: bool = False


@dataclass
class _Link:
    """The directed link a -> b: messages in flight in send order (or due order, datagram)."""

    src: int
    dst: int
    base_delay_us: int
    slow_factor: int = 1
    queue: list[Envelope] = field(default_factory=list)
    #: Per connection (epoch): TCP orders bytes within a connection, not across connections.
    last_due_us: dict[int, int] = field(default_factory=dict)
    wake_us: int | None = None


class SimTransport(Transport):
    """pysyncobj's Transport over :class:`SimNetwork` (one per SyncObj process lifetime)."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any, *,
                 net: SimNetwork, index: int) -> None:
        super().__init__(syncObj, selfNode, otherNodes)
        self.net = net
        self.index = index
        self.alive = True
        self._lowest_reject: dict[int, int] = {}
        #: The adapter's fix for reject-pingpong (patched runs): the very class its transport uses.
        self.reject_floor: Any = None
        if net.sim.config.patched:
            from raftsim import adapter_patches

            self.reject_floor = adapter_patches()._RejectFloor()
        syncObj.addOnTickCallback(self._on_tick)

    def _on_tick(self) -> None:
        if self.alive:
            self.net.on_tick(self.index)

    def keep_lowest_reject(self, node: int, message: Any) -> Any:
        """KNOWN_BUGS["reject-pingpong"], worked around where a follower sends its replies.

        After rejecting an append_entries for a conflicting entry (next=k), a follower must not
        let a later rejection for a gap (next = its last index + 1 > k) undo that: the leader
        keeps the last reset it reads. Until the next success, rejections say at most k.
        """
        if message.get("type") != "next_node_idx":
            return message
        if message["success"]:
            self._lowest_reject.pop(node, None)
            return message
        lowest = self._lowest_reject.get(node)
        if lowest is not None and message["next_node_idx"] > lowest:
            return dict(message, next_node_idx=lowest)
        self._lowest_reject[node] = message["next_node_idx"]
        return message

    def send(self, node: Any, message: Any) -> bool:
        if not self.alive:
            return False
        return self.net.send(self.index, node.index, message)

    # The node set is fixed in the simulation (no dynamic membership).
    def addNode(self, node: Any) -> None:
        pass

    def dropNode(self, node: Any) -> None:
        pass

    def destroy(self) -> None:
        self.alive = False


class SimNetwork:
    def __init__(self, sim: Simulation, config: NetConfig, node_count: int) -> None:
        self.sim = sim
        self.config = config
        self.rng = sim.rng_for("network")
        self.n = node_count
        self.links = {
            (a, b): _Link(a, b, self.rng.randint(*config.base_delay_us))
            for a in range(node_count) for b in range(node_count) if a != b
        }
        self.sides = {(a, b): _Side() for (a, b) in self.links}
        self.cut_count: dict[tuple[int, int], int] = {}
        self.cut_since: dict[tuple[int, int], int] = {}
        self._epoch = 0
        self._seq = 0
        self.transports: dict[int, SimTransport] = {}
        self.counters = {"sent": 0, "delivered": 0, "dropped": 0}

    # --- the fault model's handles --------------------------------------------------------------
    @staticmethod
    def _pair(a: int, b: int) -> tuple[int, int]:
        return (a, b) if a < b else (b, a)

    def is_cut(self, a: int, b: int) -> bool:
        return self.cut_count.get(self._pair(a, b), 0) > 0

    def cut(self, a: int, b: int) -> None:
        pair = self._pair(a, b)
        self.cut_count[pair] = self.cut_count.get(pair, 0) + 1
        self.cut_since.setdefault(pair, self.sim.now_us)

    def heal(self, a: int, b: int) -> None:
        pair = self._pair(a, b)
        self.cut_count[pair] -= 1
        if self.cut_count[pair] == 0:
            del self.cut_count[pair], self.cut_since[pair]
            for link in (self.links[(a, b)], self.links[(b, a)]):
                self._release(link, redeliver=True)

    def set_slow(self, a: int, b: int, factor: int) -> None:
        self.links[(a, b)].slow_factor = factor

    def reset(self, a: int, b: int) -> None:
        """The network resets the connection: its data in flight is lost, both ends get an RST."""
        epochs = self.sides[(a, b)].open_epochs | self.sides[(b, a)].open_epochs
        for epoch in sorted(epochs):
            self._drop_epoch(self.links[(a, b)], epoch)
            self._drop_epoch(self.links[(b, a)], epoch)
        for x, y in ((a, b), (b, a)):
            current = self.sides[(x, y)].current
            if current is not None:
                self._enqueue(y, x, "rst", current)

    def on_crash(self, a: int) -> None:
        """Process a died: its kernel RSTs its connections, unsent data is partly lost."""
        self.transports.pop(a).alive = False
        for b in range(self.n):
            if b == a:
                continue
            link = self.links[(a, b)]
            msgs = [env for env in link.queue if env.kind == "msg"]
            keep = self.rng.randint(0, len(msgs))
            for env in msgs[keep:]:
                link.queue.remove(env)
                self.counters["dropped"] += 1
            side = self.sides[(a, b)]
            for epoch in sorted(side.open_epochs):
                self._enqueue(a, b, "rst", epoch)
            self.sides[(a, b)] = _Side()

    def on_resume(self, a: int) -> None:
        for b in range(self.n):
            if b != a:
                self._release(self.links[(b, a)], redeliver=False)

    def register(self, index: int, transport: SimTransport) -> None:
        self.transports[index] = transport

    # --- pysyncobj's side -------------------------------------------------------------------------
    def send(self, a: int, b: int, message: Any) -> bool:
        side = self.sides[(a, b)]
        if side.current is None:
            return False
        if self._timed_out(side):
            self._close(a, b, "timeout")
            return False
        if "reject-pingpong" in self.sim.config.workarounds:
            message = self.transports[a].keep_lowest_reject(b, message)
        floor = self.transports[a].reject_floor
        if floor is not None:
            message = floor.apply(b, message)
        self.sim.check_durable_send(a, b, message)
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.counters["sent"] += 1
        if self.config.datagram and self.rng.random() < self.config.drop_rate:
            self.counters["dropped"] += 1
            return True
        self._enqueue(a, b, "msg", side.current, payload)
        return True

    def on_tick(self, a: int) -> None:
        """pysyncobj's transport tick: keepalive failures, then (re)connect as the initiator."""
        now = self.sim.now_us
        for b in range(self.n):
            if b == a:
                continue
            side = self.sides[(a, b)]
            pair = self._pair(a, b)
            silent_us = min(now - self.cut_since.get(pair, now), now - side.last_read_us)
            if side.current is not None and silent_us >= self.config.keepalive_us:
                self._close(a, b, "keepalive")
            self._maybe_connect(a, b)

    # --- connections ------------------------------------------------------------------------------
    def _timed_out(self, side: _Side) -> bool:
        timeout_us = int(self.sim.sync_conf_value("connectionTimeout") * US)
        return self.sim.now_us - side.last_read_us > timeout_us

    def _maybe_connect(self, a: int, b: int) -> None:
        side = self.sides[(a, b)]
        if a < b or side.current is not None or side.connecting:
            return
        retry_us = int(self.sim.sync_conf_value("connectionRetryTime") * US)
        now = self.sim.now_us
        if side.last_attempt_us is not None and now - side.last_attempt_us < retry_us:
            return
        side.last_attempt_us = now
        side.connecting = True
        if self.is_cut(a, b):
            took_us = self.config.connect_timeout_us
        else:
            took_us = self._delay(self.links[(a, b)]) + self._delay(self.links[(b, a)])
        incarnation = self.sim.incarnation(a)
        self.sim.schedule(now + took_us, f"connect n{a}->n{b}", self._on_connect_done,
                          a, b, incarnation)

    def _on_connect_done(self, a: int, b: int, incarnation: int) -> None:
        if self.sim.incarnation(a) != incarnation or not self.sim.is_running(a):
            return
        if self.sim.is_paused(a):  # the process handles it when it runs again
            self.sim.schedule(self.sim.now_us + 10_000, f"connect n{a}->n{b}",
                              self._on_connect_done, a, b, incarnation)
            return
        self.sim.call_in_node(a, lambda: self._finish_connect(a, b))

    def _finish_connect(self, a: int, b: int) -> None:
        side = self.sides[(a, b)]
        side.connecting = False
        if self.is_cut(a, b) or not self.sim.host_accepts(b):
            self.sim.trace(f"connect n{a}->n{b} failed")
            return
        self._epoch += 1
        side.current = self._epoch
        side.open_epochs.add(self._epoch)
        side.last_read_us = self.sim.now_us
        self.sim.trace(f"connect n{a}->n{b} epoch {self._epoch}")
        self._enqueue(a, b, "hello", self._epoch)
        self.transports[a]._onNodeConnected(self.sim.node_obj(b))

    def _close(self, a: int, b: int, why: str, *, fin: bool = True) -> None:
        """Node a closes its current connection to b (pysyncobj's conn.disconnect())."""
        side = self.sides[(a, b)]
        epoch = side.current
        if epoch is None:
            return
        side.current = None
        side.open_epochs.discard(epoch)
        self.sim.trace(f"close n{a}->n{b} epoch {epoch} ({why})")
        if fin:
            self._enqueue(a, b, "fin", epoch)
        transport = self.transports.get(a)
        if transport is not None:
            transport._onNodeDisconnected(self.sim.node_obj(b))
        self._maybe_connect(a, b)

    # --- links ------------------------------------------------------------------------------------
    def _delay(self, link: _Link) -> int:
        jitter = int(self.rng.expovariate(1.0 / self.config.jitter_mean_us))
        return (link.base_delay_us + jitter) * link.slow_factor

    def _enqueue(self, a: int, b: int, kind: str, epoch: int, payload: bytes | None = None) -> None:
        link = self.links[(a, b)]
        self._seq += 1
        due = self.sim.now_us + self._delay(link)
        if not self.config.datagram:
            due = max(due, link.last_due_us.get(epoch, 0) + 1)
            link.last_due_us[epoch] = due
        if len(link.queue) >= LINK_QUEUE_MAX:
            raise RuntimeError(f"runaway simulation: {len(link.queue)} messages on n{a}->n{b}")
        bisect.insort(link.queue, Envelope(due, self._seq, kind, epoch, payload))
        self._wake_at(link, link.queue[0].due_us)

    def _wake_at(self, link: _Link, at_us: int) -> None:
        at_us = max(at_us, self.sim.now_us)
        if link.wake_us is not None and link.wake_us <= at_us:
            return
        link.wake_us = at_us
        self.sim.schedule(at_us, f"link n{link.src}->n{link.dst}", self._on_wake, link)

    def _blocked(self, link: _Link) -> bool:
        return self.sim.is_paused(link.dst) or (
            not self.config.datagram and self.is_cut(link.src, link.dst)
        )

    def _on_wake(self, link: _Link) -> None:
        if link.wake_us is not None and link.wake_us > self.sim.now_us:
            return  # superseded by an earlier wake
        link.wake_us = None
        now = self.sim.now_us
        while link.queue and link.queue[0].due_us <= now and not self._blocked(link):
            env = link.queue.pop(0)
            if self.config.datagram and self.is_cut(link.src, link.dst):
                self.counters["dropped"] += 1
                continue
            self._dispatch(link, env)
        if link.queue and not self._blocked(link):
            self._wake_at(link, link.queue[0].due_us)

    def _release(self, link: _Link, *, redeliver: bool) -> None:
        """A heal (redeliver: each waiting message needs a fresh trip) or a resume (it is there)."""
        if not link.queue or self._blocked(link):
            return
        if redeliver:
            # Each connection retransmits on its own timer: its first waiting message needs a
            # fresh trip plus a retransmission wait, and the rest follow it in order.
            floors: dict[int, int] = {}
            for env in link.queue:
                if env.epoch not in floors:
                    floors[env.epoch] = self.sim.now_us + self._delay(link) + \
                        self.rng.randint(0, RETRANSMIT_WAIT_US)
                env.due_us = max(env.due_us, floors[env.epoch])
                floors[env.epoch] = env.due_us + 1
                link.last_due_us[env.epoch] = max(link.last_due_us.get(env.epoch, 0), env.due_us)
            link.queue.sort()
        self._wake_at(link, link.queue[0].due_us)

    def _drop_epoch(self, link: _Link, epoch: int) -> None:
        before = len(link.queue)
        link.queue = [env for env in link.queue if env.epoch != epoch]
        self.counters["dropped"] += before - len(link.queue)

    def _dispatch(self, link: _Link, env: Envelope) -> None:
        a, b = link.src, link.dst
        if not self.sim.is_running(b):
            if env.kind in ("msg", "hello"):  # the host is up, the port closed: RST
                self._enqueue(b, a, "rst", env.epoch)
            self.counters["dropped"] += 1
            return
        self.sim.call_in_node(b, lambda: self._receive(b, a, env))

    def _receive(self, b: int, a: int, env: Envelope) -> None:
        side = self.sides[(b, a)]
        transport = self.transports[b]
        if env.kind == "hello":
            side.current = env.epoch
            side.open_epochs.add(env.epoch)
            side.last_read_us = self.sim.now_us
            transport._onNodeConnected(self.sim.node_obj(a))
        elif env.kind == "msg":
            if env.epoch not in side.open_epochs:
                self._enqueue(b, a, "rst", env.epoch)
                self.counters["dropped"] += 1
                return
            if env.epoch == side.current and self._timed_out(side):
                # pysyncobj checks the read timeout before it reads (__processConnection).
                self.counters["dropped"] += 1
                self._close(b, a, "timeout on read")
                return
            side.last_read_us = self.sim.now_us
            self.counters["delivered"] += 1
            assert env.payload is not None
            message = pickle.loads(env.payload)
            self.sim.trace(f"n{a}->n{b} {_describe(message)}")
            if message.get("type") == "next_node_idx" and not message.get("success"):
                self.sim.note_reject(a, message["next_node_idx"])
            for name in sorted(self.sim.config.workarounds):
                message = WORKAROUNDS[name](message)
            transport._onMessageReceived(self.sim.node_obj(a), message)
        elif env.epoch in side.open_epochs:  # fin or rst
            side.open_epochs.discard(env.epoch)
            if side.current == env.epoch:
                side.current = None
                self.sim.trace(f"n{b} sees {env.kind} from n{a} epoch {env.epoch}")
                transport._onNodeDisconnected(self.sim.node_obj(a))
                self._maybe_connect(b, a)



def _snapshot_commit(message: Any) -> Any:
    """KNOWN_BUGS["snapshot-commit"]: a snapshot chunk must not move the commit index.

    pysyncobj's follower runs its commit-index update after every append_entries, also after a
    snapshot chunk whose log it has not matched; it then applies its own uncommitted tail. With
    commit_index 0 the update does nothing; the next regular append_entries sets it.
    """
    if message.get("type") == "append_entries" and "serialized" in message:
        message = dict(message, commit_index=0)
    return message


#: Workarounds applied to a message as it arrives; "reject-pingpong" is applied as a follower
#: sends (SimTransport.keep_lowest_reject).
WORKAROUNDS: dict[str, Callable[[Any], Any]] = {
    "snapshot-commit": _snapshot_commit,
    "reject-pingpong": lambda message: message,
}


def _describe(message: Any) -> str:
    """A short, deterministic rendering of a pysyncobj message for the trace."""
    kind = message.get("type", "?")
    parts = [kind, f"term={message.get('term')}"] if "term" in message else [kind]
    if kind == "append_entries":
        entries = message.get("entries") or []
        first = entries[0][1] if entries else None
        parts += [f"prev={message.get('prevLogIdx')}/{message.get('prevLogTerm')}",
                  f"entries={len(entries)}@{first}", f"commit={message.get('commit_index')}"]
        if "serialized" in message:
            parts.append("snapshot")
        if "transmission" in message:
            parts.append(f"chunk={message['transmission']}")
    elif kind == "next_node_idx":
        parts += [f"next={message['next_node_idx']}", f"success={message['success']}",
                  f"reset={message['reset']}"]
    elif kind == "request_vote":
        parts += [f"last={message['last_log_index']}/{message['last_log_term']}"]
    elif kind == "apply_command_response":
        parts += [f"idx={message.get('log_idx')}", f"err={message.get('error')}"]
    return " ".join(parts)
