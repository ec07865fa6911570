"""Golden scenario files (etcd-raft's datadriven style), shared by the controller's and the group
coordinator's scenario runners.

A file is blocks of: comment lines, a command line, ``----``, then the expected output up to a
blank line. :func:`check_golden` runs every command through a runner, renders the file as it would
be now and compares it with the file; with ``TIDELOG_REWRITE_GOLDEN=1`` it rewrites the file from
what the code does now instead (then review the diff).
"""

from __future__ import annotations

import difflib
import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

import pytest

REWRITE = os.environ.get("TIDELOG_REWRITE_GOLDEN") == "1"


@dataclass
class Block:
    preamble: list[str]  # comment lines before the command
    command: str
    expected: list[str]


def parse(text: str) -> list[Block]:
    blocks: list[Block] = []
    preamble: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip() or line.startswith("#"):
            if line.strip():
                preamble.append(line)
            index += 1
            continue
        if index + 1 >= len(lines) or lines[index + 1] != "----":
            raise ValueError(f"line {index + 2}: expected ---- after a command")
        index += 2
        expected = []
        while index < len(lines) and lines[index].strip():
            expected.append(lines[index])
            index += 1
        blocks.append(Block(preamble, line, expected))
        preamble = []
    return blocks


def render(blocks: list[Block], outputs: list[list[str]]) -> str:
    out: list[str] = []
    for block, output in zip(blocks, outputs, strict=True):
        out.extend([*block.preamble, block.command, "----", *output, ""])
    return "\n".join(out).rstrip("\n") + "\n"


def check_golden(path: pathlib.Path, run: Callable[[str], list[str]]) -> None:
    """Run every command of ``path`` with ``run`` (in order, one runner) and compare."""
    text = path.read_text()
    blocks = parse(text)
    actual = render(blocks, [run(block.command) for block in blocks])
    if REWRITE:
        path.write_text(actual)
        return
    if actual != text:
        diff = "".join(difflib.unified_diff(
            text.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"{path.name} (expected)", tofile=f"{path.name} (actual)"))
        pytest.fail(f"golden output differs (TIDELOG_REWRITE_GOLDEN=1 rewrites):\n{diff}")
