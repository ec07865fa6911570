"""``python -m tidelog.chaos.multihost [--workdir DIR]`` (``make deploy-demo``): see the package
doc.

Outside (the caller's namespace) it checks the machine can make namespaces (exit 2 with one
line when it cannot: not root, no ``ip``), creates them and runs itself again inside the client
namespace; inside, it runs the steps and prints the report as its last line. Exit 0 when every
check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tidelog.chaos.multihost.hosts import HOSTS
from tidelog.chaos.netns import session

EXIT_CANNOT = 2


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.chaos.multihost")
    parser.add_argument("--workdir", help="where the rendered files, data and logs go "
                                          "(default: a new temporary directory, kept)")
    args = parser.parse_args(argv)
    plan = session.plan_from_env()
    if plan is None:
        workdir = args.workdir or tempfile.mkdtemp(prefix="tidelog-multihost-")
        outcome = session.run_outside(HOSTS, ["--workdir", workdir], netem=False,
                                      module="tidelog.chaos.multihost")
        if isinstance(outcome, str):
            print(f"cannot run here: {outcome}", file=sys.stderr)
            return EXIT_CANNOT
        return outcome
    from tidelog.chaos.multihost.run import dump, run

    workdir_path = Path(args.workdir or tempfile.mkdtemp(prefix="tidelog-multihost-"))
    report = run(plan, workdir_path)
    print(f"files, data and logs: {workdir_path}")
    for failure in report.get("failures", []):
        print(f"FAILED: {failure}")
    print(dump(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
