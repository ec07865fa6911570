"""Runs one chaos scenario end to end and writes its report: ``tidelog chaos run``.

    outcome = run_scenario(RunOptions(scenarios.get("kill-leader"), seed=7, duration_s=20))
    outcome.valid, outcome.run_dir          # history.jsonl, result.json, summary.txt, ...

The steps, each bounded:

1. the cluster: by default a new local one under the run's directory (3 controllers + 3
   brokers, :data:`OVERRIDES` for fast failure detection), its links routed through
   Toxiproxy-compatible proxies when the scenario has link faults (chaos/nemesis/network.py),
   or with ``network="netns"`` each node in its own network namespace and link faults made
   with tc (chaos/netns/: the run must then be inside the plan's client namespace, which
   ``tidelog chaos run --network netns`` arranges); or an existing ``tidelog cluster up``
   cluster (``cluster_dir``), which gets process faults only: a scenario with link faults
   is refused (:class:`UsageError`);
2. the run's topic (RF 3, the scenario's partitions and min.insync.replicas, its topic
   configs), and for ``kill-member`` the extra member process (chaos/runner_member.py);
3. the queue workload (chaos/workload) for ``duration_s`` while the main thread applies the
   schedule (chaos/scenarios.py's :func:`~chaos.scenarios.plan`): each fault is built when it
   starts (chaos/runner_faults.py), recorded in the history as nemesis ``start``/``stop``
   operations (``info`` with the error when a start or heal raised), and healed at its time;
4. whatever is still active is healed, every node must be ready again, the workload stops,
   the final drain reads the topic back, every replica must be in sync, the brokers are
   killed and their replicas dumped (an existing cluster's brokers are started again);
5. the checkers under the scenario's promise, the recovery figures (chaos/report.py), and the
   report files: ``history.jsonl``, ``result.json`` (with the promise, so ``tidelog chaos
   check`` re-checks the history as the run did), ``summary.txt``, ``timeline.png``.

What the cluster did wrong is a finding, not a crash of the runner: a heal that fails, a node
not ready again, replicas that never get in sync are written into the result (``notes``) and
the run goes on to its verdict. Every process the runner starts (nodes, the member, the
Toxiproxy server) is stopped by pid on the way out, also on Ctrl-C or an error; an existing
cluster is left running, its faults healed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tidelog.chaos import proxies
from tidelog.chaos.checkers import HistoryCheck, Promise, check_history
from tidelog.chaos.history import Acks, Fault, HistoryWriter, Op, read_history
from tidelog.chaos.nemesis import Fault as NemesisFault
from tidelog.chaos.nemesis import ProxiedNetwork, routed_overrides
from tidelog.chaos.netns import NetnsNetwork, NetnsPlan
from tidelog.chaos.netns.shell import inside
from tidelog.chaos.report import fault_windows, recovery, summary_lines, timeline
from tidelog.chaos.runner_faults import Targets, build_fault
from tidelog.chaos.runner_member import MemberProcess
from tidelog.chaos.scenarios import DURATION_S_DEFAULT, FaultSpec, Scenario, Schedule, plan
from tidelog.chaos.workload import (
    ClientSettings,
    ProducerSpec,
    QueueWorkload,
    QueueWorkloadConfig,
    RunContext,
    drain,
    dump_replicas,
    wait_for_replicas_in_sync,
)
from tidelog.client import Admin, NewTopic
from tidelog.local_cluster import LocalCluster

__all__ = ["OVERRIDES", "RUNS_DIR", "RunOptions", "RunOutcome", "UsageError", "run_scenario"]

#: Where runs go without --dir (relative to the working directory; in .gitignore).
RUNS_DIR: Final = Path("chaos-runs")
#: The runner's own clusters detect failures within seconds, so a 20 s run sees them.
OVERRIDES: Final[dict[str, dict[str, Any]]] = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
    "broker": {"heartbeat_interval_ms": 500, "replica_lag_time_max_ms": 2_000,
               "replica_fetch_wait_max_ms": 200, "offsets_topic_num_partitions": 3,
               "group_consumer_heartbeat_interval_ms": 200,
               "group_consumer_session_timeout_ms": 6_000},
}
#: The runner's own cluster (the netns mode plans a namespace for each of its nodes).
CONTROLLERS: Final = 3
BROKERS: Final = 3
CLIENT: Final = ClientSettings(request_timeout_ms=5_000, delivery_timeout_ms=10_000,
                               close_timeout_ms=5_000)
#: Bounds of the phases after the workload.
READY_TIMEOUT_S: Final = 60.0
SETUP_TIMEOUT_S: Final = 60.0
DRAIN_TIMEOUT_S: Final = 60.0
IN_SYNC_TIMEOUT_S: Final = 60.0
FINISH_TIMEOUT_S: Final = 20.0
PROGRESS_EVERY_S: Final = 1.0


class UsageError(ValueError):
    """The run cannot be made as asked (exit 2): a scenario too long for the duration, link
    faults against an existing cluster, a run directory already used."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    scenario: Scenario
    seed: int = 0
    duration_s: float = DURATION_S_DEFAULT
    #: None: the scenario's own
    acks: Acks | None = None
    run_dir: Path | None = None
    cluster_dir: Path | None = None
    #: Called with a progress line (about once a second while the workload runs).
    progress: Callable[[str], None] = field(default=lambda line: None)
    #: "proxy" (links through Toxiproxy-compatible proxies) or "netns" (every node in a
    #: namespace of ``netns_plan``, whose client namespace this process must run in).
    network: str = "proxy"
    netns_plan: NetnsPlan | None = None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_dir: Path
    check: HistoryCheck
    result: dict[str, Any]
    summary: list[str]

    @property
    def valid(self) -> bool:
        return self.check.valid


@dataclass
class _Env:
    """What the run works on: the cluster, its routed network, the topic, the group."""

    cluster: LocalCluster
    net: ProxiedNetwork | NetnsNetwork | None
    own: bool
    topic: str
    group: str
    member: MemberProcess | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap


class _CountingWriter(HistoryWriter):
    """The history writer, counting operations for the progress line."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.counts: Counter[tuple[str, str]] = Counter()

    def write(self, op: Op) -> int:
        line = super().write(op)
        self.counts[(op.f, op.type)] += 1
        return line


def run_scenario(options: RunOptions) -> RunOutcome:
    """Run ``options.scenario`` (see the module docstring). UsageError before anything starts
    when the run cannot be made as asked."""
    scenario = options.scenario.with_acks(options.acks) if options.acks else options.scenario
    try:
        schedule = plan(scenario, options.seed, options.duration_s)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if options.cluster_dir is not None and scenario.needs_links:
        raise UsageError(f"scenario {scenario.name} needs the cluster's links routed through "
                         f"proxies, which only a cluster the runner starts has; run it "
                         f"without --cluster-dir (an existing cluster gets process faults "
                         f"only)")
    _check_network(options)
    if options.cluster_dir is not None and not (options.cluster_dir / "cluster.json").is_file():
        raise UsageError(f"no cluster at {options.cluster_dir} (start one with `tidelog "
                         f"cluster up --dir DIR`)")
    run_dir = _run_dir(options, scenario)
    started = time.monotonic()
    with _log_to(run_dir / "runner.log"), _environment(options, scenario, run_dir) as env:
        outcome = _run(options, scenario, schedule, env, run_dir, started)
    return outcome


def _check_network(options: RunOptions) -> None:
    if options.network not in ("proxy", "netns"):
        raise UsageError(f"network must be proxy or netns, not {options.network!r}")
    if options.network != "netns":
        return
    if options.cluster_dir is not None:
        raise UsageError("--network netns puts the nodes of a cluster the runner starts in "
                         "namespaces; it cannot run against --cluster-dir")
    plan = options.netns_plan
    if plan is None or not inside(plan.client):
        raise UsageError("the netns mode runs inside its client namespace: start it with "
                         "`tidelog chaos run SCENARIO --network netns`")


@contextlib.contextmanager
def _log_to(path: Path) -> Iterator[None]:
    """The clients' and the runner's log records go to the run's runner.log, not the terminal
    (a broken cluster makes the clients warn a lot, which would bury the progress line)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


def _run_dir(options: RunOptions, scenario: Scenario) -> Path:
    if options.run_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = RUNS_DIR / f"{stamp}-{scenario.name}-seed{options.seed}"
    else:
        path = options.run_dir
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{path} already exists and is not an empty directory; pick another "
                         f"--dir")
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


@contextlib.contextmanager
def _environment(options: RunOptions, scenario: Scenario, run_dir: Path) -> Iterator[_Env]:
    """The cluster, up and with the run's topic; everything the runner started is stopped on
    exit, whatever happened."""
    stamp = run_dir.name.replace(".", "-")[:60]
    with contextlib.ExitStack() as stack:
        if options.cluster_dir is None:
            netns = options.network == "netns"
            proxied = scenario.needs_links and not netns
            options.progress("starting a local cluster (3 controllers, 3 brokers"
                             + (", each in its network namespace)" if netns else
                                ", links through proxies)" if proxied else ")"))
            overrides = routed_overrides(OVERRIDES) if proxied else OVERRIDES
            cluster = LocalCluster.create(run_dir / "cluster", controllers=CONTROLLERS,
                                          brokers=BROKERS, overrides=overrides)
            net: ProxiedNetwork | NetnsNetwork | None = None
            if netns and options.netns_plan is not None:
                net = stack.enter_context(NetnsNetwork.placed(cluster, options.netns_plan))
            elif proxied:
                stack.enter_context(proxies.toxiproxy())
                net = stack.enter_context(ProxiedNetwork.wired(cluster))
            stack.callback(_kill_all, cluster)
            cluster.start_all()
            env = _Env(cluster, net, True, "queue", "chaos-queue")
        else:
            try:
                cluster = LocalCluster.load(options.cluster_dir)
            except (OSError, ValueError, KeyError) as e:
                raise UsageError(f"no cluster at {options.cluster_dir} (start one with "
                                 f"`tidelog cluster up --dir DIR`): {e}") from None
            stopped = [n for n in cluster.nodes if not cluster.is_running(n)]
            if stopped:
                raise UsageError(f"the cluster at {options.cluster_dir} is not running "
                                 f"({', '.join(stopped)} stopped): `tidelog cluster up` it")
            env = _Env(cluster, None, False, f"chaos-{stamp}", f"chaos-{stamp}")
        cluster.wait_ready(timeout_s=READY_TIMEOUT_S)
        options.progress(f"creating topic {env.topic}")
        _create_topic(env, scenario)
        if any(f.kind == "kill-member" for f in scenario.faults):
            env.member = MemberProcess(env.bootstrap, env.group, env.topic,
                                       run_dir / "member.log")
            stack.callback(env.member.stop)
        yield env


def _kill_all(cluster: LocalCluster) -> None:
    """kill -9 every node of the runner's own cluster (a paused one too), by pid."""
    for name in cluster.nodes:
        if cluster.is_running(name):
            with contextlib.suppress(ProcessLookupError):
                cluster.kill(name)


def _create_topic(env: _Env, scenario: Scenario) -> None:
    configs = {"min.insync.replicas": str(scenario.min_insync_replicas),
               **dict(scenario.topic_configs)}
    deadline = time.monotonic() + SETUP_TIMEOUT_S
    with Admin(env.bootstrap, request_timeout_ms=5_000) as admin:
        # Bounded: the brokers register and unfence within seconds of being ready.
        while True:
            try:
                admin.create_topics([NewTopic(env.topic, scenario.partitions, 3, configs)],
                                    timeout_ms=10_000).all()
                break
            except Exception as e:
                if "already exists" in str(e).lower() or "TOPIC_ALREADY_EXISTS" in str(e):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cannot create topic {env.topic}: {e}") from e
                time.sleep(0.5)
    wait_for_replicas_in_sync(env.bootstrap, [env.topic], timeout_s=SETUP_TIMEOUT_S)


def _producers(scenario: Scenario) -> tuple[ProducerSpec, ...]:
    if scenario.producer_acks:
        return tuple(ProducerSpec(acks, False) for acks in scenario.producer_acks)
    if scenario.acks == "all":  # idempotence on and off
        return (ProducerSpec("all", True), ProducerSpec("all", False))
    return (ProducerSpec(scenario.acks, False), ProducerSpec(scenario.acks, False))


def _run(options: RunOptions, scenario: Scenario, schedule: Schedule, env: _Env,
         run_dir: Path, started: float) -> RunOutcome:
    history_path = run_dir / "history.jsonl"
    config = QueueWorkloadConfig(
        env.bootstrap, env.topic, duration_s=schedule.duration_s,
        producers=_producers(scenario), assign_consumers=scenario.assign_consumers,
        group_consumers=scenario.group_consumers, group_id=env.group,
        rate_per_s=scenario.rate_per_s, finish_timeout_s=FINISH_TIMEOUT_S, client=CLIENT)
    writer = _CountingWriter(history_path)
    with writer:
        ctx = RunContext(writer)
        if env.member is not None:
            env.member.start()
        workload = QueueWorkload(config, ctx)
        workload.start()
        try:
            _apply_schedule(options, schedule, env, ctx, writer)
        except BaseException:  # an error or Ctrl-C: the workers stop before the file closes
            ctx.stop.set()
            with contextlib.suppress(Exception):
                workload.join()
            raise
        options.progress("waiting for the workload to stop")
        result = workload.join()
        _wait_ready(env)
        options.progress("draining the topic")
        drained = drain(ctx, bootstrap=env.bootstrap, topic=env.topic, timeout_s=DRAIN_TIMEOUT_S,
                        client=CLIENT)
    options.progress("dumping the replicas")
    dumps, hws = _dump(env)
    history = read_history(history_path)
    check = check_history(history, scenario.promise, replicas=dumps, high_watermarks=hws)
    windows = fault_windows(history)
    line = timeline(history)
    recoveries = recovery(history, windows, line)
    elapsed = time.monotonic() - started
    extra = {"run": f"{elapsed:.0f} s in all, workload {schedule.duration_s:g} s, acks="
                    f"{scenario.acks_label}, topic {env.topic} ({scenario.partitions} partitions)"}
    for note in env.notes:
        extra.setdefault("notes", "")
        extra["notes"] = (extra["notes"] + "; " if extra["notes"] else "") + note
    summary = summary_lines(scenario=scenario.name, seed=schedule.seed, run_dir=str(run_dir),
                            check=check, windows=windows, recoveries=recoveries, extra=extra)
    out: dict[str, Any] = {
        "scenario": scenario.name, "description": scenario.description,
        "seed": schedule.seed, "duration_s": schedule.duration_s,
        "acks": scenario.acks_label,
        "topic": env.topic, "partitions": scenario.partitions,
        "cluster": "own" if env.own else str(env.cluster.base_dir),
        "promise": scenario.promise.to_json(), "valid": check.valid,
        "elapsed_s": round(elapsed, 1),
        "schedule": [{"kind": f.spec.kind, "target": f.spec.target, "shape": f.spec.shape,
                      "start_s": f.start_s, "heal_s": f.heal_s} for f in schedule.faults],
        "faults": [w.to_json() for w in windows],
        "recovery": [r.to_json() for r in recoveries],
        "workload": result.to_json(),
        "drain": {"complete": drained.complete, "polls": drained.polls,
                  "records": drained.records, "error": drained.error},
        "notes": env.notes, "check": check.to_json(),
    }
    _draw(line, windows, run_dir, scenario, schedule, env)
    (run_dir / "result.json").write_text(json.dumps(out, indent=1) + "\n")
    (run_dir / "summary.txt").write_text("\n".join(summary) + "\n")
    return RunOutcome(run_dir, check, out, summary)


def _apply_schedule(options: RunOptions, schedule: Schedule, env: _Env, ctx: RunContext,
                    writer: _CountingWriter) -> None:
    """Start and heal each fault at its time, then wait out the workload; whatever is still
    active when this ends (an error, Ctrl-C) is healed."""
    t0 = time.monotonic()
    targets = Targets(env.cluster, env.bootstrap, env.topic, env.group)
    active: dict[int, NemesisFault] = {}
    try:
        for at_s, what, index in schedule.events():
            _wait_until(options, t0 + at_s, t0, schedule, writer, active)
            if what == "start":
                targets.avoid = frozenset(t for f in active.values() for t in f.targets)
                planned = schedule.faults[index]
                rng = random.Random(schedule.seed * 1_000 + index)

                def build(spec: FaultSpec = planned.spec,
                          rng: random.Random = rng) -> NemesisFault:
                    return build_fault(spec, cluster=env.cluster, net=env.net,
                                       targets=targets, member=env.member, rng=rng)

                fault = _start_fault(ctx, env, build, planned.spec.describe())
                if fault is not None:
                    active[index] = fault
            elif index in active:
                _heal_fault(ctx, env, active.pop(index))
        _wait_until(options, t0 + schedule.duration_s, t0, schedule, writer, active)
    finally:
        for index in sorted(active):
            _heal_fault(ctx, env, active.pop(index))


def _wait_until(options: RunOptions, until: float, t0: float, schedule: Schedule,
                writer: _CountingWriter, active: dict[int, NemesisFault]) -> None:
    # Bounded: ends at ``until`` (a point of the schedule, at most the run's duration).
    while True:
        now = time.monotonic()
        c = writer.counts
        sends = sum(n for (f, t), n in c.items() if f == "send" and t != "invoke")
        options.progress(
            f"[{now - t0:5.1f}/{schedule.duration_s:g} s] sends {sends} (ok "
            f"{c[('send', 'ok')]}, fail {c[('send', 'fail')]}, info {c[('send', 'info')]}), "
            f"polls {c[('poll', 'ok')]} ok | faults: "
            + (", ".join(f.name for f in active.values()) or "none"))
        if now >= until:
            return
        time.sleep(min(PROGRESS_EVERY_S, until - now))


def _start_fault(ctx: RunContext, env: _Env, build: Callable[[], NemesisFault],
                 what: str) -> NemesisFault | None:
    """Build and start a fault, recorded; a fault whose start raised is kept (its heal undoes
    what was done); one that could not even be built is recorded and skipped."""
    try:
        fault = build()
    except Exception as e:
        name = what.split(" for ")[0].replace(" ", "-")
        ctx.write(Fault("invoke", "start", ctx.now_ns(), name))
        ctx.write(Fault("info", "start", ctx.now_ns(), name, error=_error(e)))
        env.notes.append(f"{name} not started: {_error(e)}")
        return None
    ctx.write(Fault("invoke", "start", ctx.now_ns(), fault.name))
    try:
        fault.start()
    except Exception as e:
        ctx.write(Fault("info", "start", ctx.now_ns(), fault.name, fault.targets, _error(e)))
        env.notes.append(f"{fault.name}: start failed: {_error(e)}")
        return fault
    ctx.write(Fault("ok", "start", ctx.now_ns(), fault.name, fault.targets))
    return fault


def _heal_fault(ctx: RunContext, env: _Env, fault: NemesisFault) -> None:
    ctx.write(Fault("invoke", "stop", ctx.now_ns(), fault.name, fault.targets))
    try:
        fault.heal()
    except Exception as e:
        ctx.write(Fault("info", "stop", ctx.now_ns(), fault.name, fault.targets, _error(e)))
        env.notes.append(f"{fault.name}: heal failed: {_error(e)}")
        return
    ctx.write(Fault("ok", "stop", ctx.now_ns(), fault.name, fault.targets))


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def _wait_ready(env: _Env) -> None:
    """Every node running and ready again (a heal that failed is retried once here)."""
    for name in env.cluster.nodes:
        if not env.cluster.is_running(name):
            env.notes.append(f"{name} was not running after the heals: started again")
            env.cluster.start(name)
    try:
        env.cluster.wait_ready(list(env.cluster.nodes), timeout_s=READY_TIMEOUT_S)
    except TimeoutError as e:
        env.notes.append(f"not every node ready after heal: {str(e).splitlines()[0]}")


def _dump(env: _Env) -> tuple[Any, Any]:
    """The replica dumps and HWs (None, None when the replicas never got in sync: noted)."""
    try:
        in_sync = wait_for_replicas_in_sync(env.bootstrap, [env.topic],
                                            timeout_s=IN_SYNC_TIMEOUT_S)
    except TimeoutError as e:
        env.notes.append(str(e).splitlines()[0][:500])
        return None, None
    brokers = env.cluster.brokers()
    for spec in brokers:
        if env.cluster.is_running(spec.name):
            env.cluster.kill(spec.name)
    try:
        dumps = dump_replicas({b.node_id: env.cluster.data_dir(b.name) for b in brokers},
                              in_sync.topic_ids)
    finally:
        if not env.own:  # leave the user's cluster as it was found
            for spec in brokers:
                env.cluster.start(spec.name)
            with contextlib.suppress(TimeoutError):
                env.cluster.wait_ready([b.name for b in brokers], timeout_s=READY_TIMEOUT_S)
    return dumps, in_sync.high_watermarks


def _draw(line: Any, windows: Any, run_dir: Path, scenario: Scenario, schedule: Schedule,
          env: _Env) -> None:
    from tidelog.chaos.report_png import draw_timeline

    try:
        draw_timeline(line, windows, run_dir / "timeline.png",
                      title=f"{scenario.name} (seed {schedule.seed}, "
                            f"acks={scenario.acks_label})")
    except ImportError as e:  # matplotlib is a dependency; a broken install still reports
        env.notes.append(f"no timeline.png: {e}")


def promise_of(result: dict[str, Any]) -> Promise:
    """The promise a result.json names (for ``tidelog chaos check``)."""
    p = result["promise"]
    return Promise(int(p["replication_factor"]), int(p["min_insync_replicas"]),
                   bool(p["unclean_leader_election"]))
