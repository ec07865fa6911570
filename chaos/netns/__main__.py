"""``python -m tidelog.chaos.netns cleanup [RUN_ID]``: remove the namespaces (and kill the
processes in them) that netns-mode runs left behind, of one run or of every run; prints what it
removed."""

from __future__ import annotations

import sys

from tidelog.chaos.netns.shell import NetnsError, cleanup


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "cleanup" or len(argv) > 2:
        print("usage: python -m tidelog.chaos.netns cleanup [RUN_ID]", file=sys.stderr)
        return 2
    try:
        removed = cleanup(argv[1] if len(argv) == 2 else None)
    except NetnsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(f"removed {ns}" for ns in removed) or "nothing to remove")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
