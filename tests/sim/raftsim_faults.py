"""The fault schedule of a simulation run: what breaks, when, and for how long.

Faults arrive at exponentially distributed intervals (mean ``SimConfig.fault_interval_s``),
drawn from the run's "faults" stream, so the schedule depends only on the seed and on what the
cluster looks like when a fault fires (half of the node-level faults aim at the node that
currently thinks it is leader). Every fault but a compaction undoes itself after a random span;
``end`` undoes whatever is still in force when the fault phase ends.

- partition: isolate one node, split the cluster, a bridge (two groups that only one node can
  reach both of: a non-transitive partition), or one link; healed after 0.3-10 s.
- crash / restart: kill -9 of one node (its journal and dump file survive), restarted after
  0.05-10 s; at most ``down_max`` nodes are down (crashed or paused) at once.
- crash_all: every node at once (a whole-cluster restart, as in DESIGN.md section 10).
- pause / resume: SIGSTOP for 0.05-5 s; the node's timers have all expired when it resumes.
- reset: the network resets one connection (both ends get an RST; data in flight is lost).
- slow: one direction of one link gets 5-300 times slower for 0.5-8 s.
- compact: ``forceLogCompaction()`` on one node (only with snapshots enabled).
- power_loss / power_loss_all: one node's machine, or every one at once, loses power: its
  journal keeps only what reached the disk (SimJournal.power_loss), restarted after 0.05-10 s
  (0.05-3 s for all); only where the weights ask for it (``power_loss=True``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftsim_net import US

if TYPE_CHECKING:
    from raftsim import Simulation, _Node

FAULT_KINDS = ("partition", "crash", "crash_all", "pause", "reset", "slow", "compact",
               "power_loss", "power_loss_all")
PARTITION_SPAN_S = (0.3, 10.0)
CRASH_SPAN_S = (0.05, 10.0)
CRASH_ALL_SPAN_S = (0.05, 3.0)
PAUSE_SPAN_S = (0.05, 5.0)
SLOW_SPAN_S = (0.5, 8.0)
SLOW_FACTORS = (5, 20, 100, 300)
#: Share of node-level faults aimed at a node that thinks it is leader.
AIM_AT_LEADER = 0.5


class FaultInjector:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.rng = sim.rng_for("faults")
        self.on = True
        self.counts = dict.fromkeys(FAULT_KINDS, 0)
        self._cuts: list[tuple[int, int]] = []

    def on_fault(self) -> None:
        config = self.sim.config
        gap_us = int(self.rng.expovariate(1.0 / config.fault_interval_s) * US)
        self.sim.schedule(self.sim.now_us + gap_us, "fault", self.on_fault)
        if not self.on:
            return
        kinds, weights = zip(*config.fault_weights, strict=True)
        kind = self.rng.choices(kinds, weights=weights)[0]
        getattr(self, f"_{kind}")()

    def end(self) -> None:
        """Undo every fault in force: heal, restore links, resume and restart nodes."""
        self.on = False
        self._heal(list(self._cuts))
        net = self.sim.net
        for a, b in net.links:
            net.set_slow(a, b, 1)
        for node in self.sim.nodes:
            if not node.running:
                self.sim.start(node.index)
            elif node.paused:
                self.sim.resume(node.index, node.incarnation)

    # --- helpers ----------------------------------------------------------------------------------
    def _later(self, span_s: tuple[float, float]) -> int:
        return self.sim.now_us + int(self.rng.uniform(*span_s) * US)

    def _pick(self, candidates: list[_Node]) -> _Node | None:
        if not candidates:
            return None
        leaders = [n for n in candidates if n.so is not None and n.so._isLeader()]
        if leaders and self.rng.random() < AIM_AT_LEADER:
            return self.rng.choice(leaders)
        return self.rng.choice(candidates)

    def _up(self) -> list[_Node]:
        return [n for n in self.sim.nodes if n.running and not n.paused]

    def _down_budget(self) -> int:
        config = self.sim.config
        down_max = (config.nodes - 1) // 2 if config.down_max is None else config.down_max
        return down_max - (config.nodes - len(self._up()))

    # --- faults -----------------------------------------------------------------------------------
    def _partition(self) -> None:
        n = self.sim.config.nodes
        shape = self.rng.choice(["isolate", "split", "bridge", "link"])
        nodes = list(range(n))
        self.rng.shuffle(nodes)
        if shape == "link":
            pairs = [(nodes[0], nodes[1])]
        elif shape == "bridge":  # nodes[0] reaches both groups; the groups do not reach each other
            middle = 2 + (n - 3) // 2
            pairs = [(a, b) for a in nodes[1:middle] for b in nodes[middle:]]
        else:
            size = 1 if shape == "isolate" else self.rng.randint(1, n // 2)
            pairs = [(a, b) for a in nodes[:size] for b in nodes[size:]]
        for a, b in pairs:
            self.sim.net.cut(a, b)
        self._cuts.extend(pairs)
        self.counts["partition"] += 1
        self.sim.trace(f"fault partition {shape} {sorted(pairs)}")
        self.sim.schedule(self._later(PARTITION_SPAN_S), "heal", self._heal, pairs)

    def _heal(self, pairs: list[tuple[int, int]]) -> None:
        healed = [pair for pair in pairs if pair in self._cuts]
        for a, b in healed:
            self._cuts.remove((a, b))
            self.sim.net.heal(a, b)
        if healed:
            self.sim.trace(f"heal {sorted(healed)}")

    def _crash(self, *, power_loss: bool = False) -> None:
        node = self._pick(self._up()) if self._down_budget() > 0 else None
        if node is None:
            return
        self.counts["power_loss" if power_loss else "crash"] += 1
        self.sim.crash(node.index, power_loss=power_loss)
        self.sim.schedule(self._later(CRASH_SPAN_S), "restart", self._restart, node.index)

    def _crash_all(self, *, power_loss: bool = False) -> None:
        if any(not n.running for n in self.sim.nodes):
            return
        self.counts["power_loss_all" if power_loss else "crash_all"] += 1
        for node in self.sim.nodes:
            self.sim.crash(node.index, power_loss=power_loss)
        for node in self.sim.nodes:
            self.sim.schedule(self._later(CRASH_ALL_SPAN_S), "restart", self._restart,
                              node.index)

    def _power_loss(self) -> None:
        self._crash(power_loss=True)

    def _power_loss_all(self) -> None:
        self._crash_all(power_loss=True)

    def _restart(self, i: int) -> None:
        if not self.sim.nodes[i].running:
            self.sim.start(i)

    def _pause(self) -> None:
        node = self._pick(self._up()) if self._down_budget() > 0 else None
        if node is None:
            return
        self.counts["pause"] += 1
        self.sim.pause(node.index)
        self.sim.schedule(self._later(PAUSE_SPAN_S), "resume", self.sim.resume, node.index,
                          node.incarnation)

    def _reset(self) -> None:
        a, b = self.rng.sample(range(self.sim.config.nodes), 2)
        self.counts["reset"] += 1
        self.sim.trace(f"fault reset n{a}-n{b}")
        self.sim.net.reset(a, b)

    def _slow(self) -> None:
        a, b = self.rng.sample(range(self.sim.config.nodes), 2)
        factor = self.rng.choice(SLOW_FACTORS)
        self.counts["slow"] += 1
        self.sim.trace(f"fault slow n{a}->n{b} x{factor}")
        self.sim.net.set_slow(a, b, factor)
        self.sim.schedule(self._later(SLOW_SPAN_S), "unslow", self.sim.net.set_slow, a, b, 1)

    def _compact(self) -> None:
        node = self._pick(self._up())
        if node is not None:
            self.counts["compact"] += 1
            self.sim.trace(f"fault compact n{node.index}")
            node.so.forceLogCompaction()


def fault_weights(*, snapshots: bool, power_loss: bool = False,
                  ) -> tuple[tuple[str, float], ...]:
    weights = {"partition": 3.0, "crash": 2.0, "crash_all": 0.15, "pause": 2.0, "reset": 1.0,
               "slow": 1.0, "compact": 1.0 if snapshots else 0.0,
               "power_loss": 2.0 if power_loss else 0.0,
               "power_loss_all": 0.15 if power_loss else 0.0}
    return tuple((kind, weight) for kind, weight in weights.items() if weight > 0)

