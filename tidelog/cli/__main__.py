"""``python -m tidelog.cli …``: the same program as the ``tidelog`` console script."""

from tidelog.cli import main

main()
