"""``tidelog chaos check HISTORY``: exit 0 when the promise held, 1 when an anomaly it forbids
was found, 2 for a usage error or a history that cannot be read; always one error line, never
a traceback. Without the chaos extra, every chaos command says in one line what to install.

How: histories are written with chaos_testkit.Builder into tmp_path, and the command runs
through ``tidelog.cli.main``, the console script's own entry point (its error handler included),
with stdout and stderr captured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from chaos_testkit import Builder

from tidelog.cli import main
from tidelog.cli.chaos import CHAOS_EXTRA


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(["chaos", "check", *args])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, b: Builder) -> str:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(b.lines()) + "\n")
    return str(path)


def lossy() -> Builder:
    b = Builder()
    b.send(0, 1, offset=0)
    b.send(0, 2, offset=1)
    b.poll(9, 0, [(0, 1, 2)], drain=True)
    return b


def test_a_clean_history_exits_0_with_a_summary(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    b = Builder()
    b.send(0, 1, offset=0)
    b.poll(9, 0, [(0, 0, 1)], drain=True)
    code, out, err = run(capsys, write(tmp_path, b))
    assert (code, err) == (0, "")
    assert "verdict: the promise held" in out
    assert "lost-write             0      0" in out


def test_a_forbidden_anomaly_exits_1_and_names_its_lines(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    code, out, err = run(capsys, write(tmp_path, lossy()))
    assert code == 1
    assert "lost-write (FORBIDDEN): value 1 acknowledged at t-0@0" in out
    assert "  line 2: " in out and "  line 6: " in out
    assert err == "error: the promise was broken: lost-write (1)\n"


def test_the_promise_comes_from_the_options(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, write(tmp_path, lossy()), "--min-insync-replicas", "1")
    assert code == 0 and "lost-write (allowed)" in out
    code, out, _ = run(capsys, write(tmp_path, lossy()), "--unclean-leader-election",
                       "--format", "json")
    result = json.loads(out)
    assert code == 0 and result["valid"] is True
    assert result["promise"]["durable"] is False
    assert result["anomalies"]["lost-write"]["examples"][0]["ops"][0]["line"] == 2


def test_json_output_holds_the_verdict_and_the_operations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, write(tmp_path, lossy()), "--format", "json")
    result = json.loads(out)
    assert code == 1
    assert result["valid"] is False and result["forbidden_kinds"] == ["lost-write"]
    example = result["anomalies"]["lost-write"]["examples"][0]
    assert example["value"] == 1 and example["forbidden"] is True
    assert example["ops"][0]["op"] == {"type": "ok", "f": "send", "process": 0,
                                       "time_ns": 2000, "topic": "t", "value": 1,
                                       "acks": "all", "idempotent": True, "partition": 0,
                                       "offset": 0}
    assert result["ops"]["send"]["ok"] == 2


@pytest.mark.parametrize(("content", "args", "message"), [
    ('{"type": "invoke"}\n', (), "invalid history {path}: line 1: f must be one of"),
    (None, (), "cannot read history {path}: No such file or directory"),
    ("", ("--min-insync-replicas", "4"), "invalid promise: min.insync.replicas must be"),
    ("", ("--acks", "all"), "No such option '--acks'"),
])
def test_bad_input_exits_2_with_one_error_line(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               content: str | None, args: tuple[str, ...],
                                               message: str) -> None:
    path = tmp_path / "history.jsonl"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, str(path), *args)
    assert code == 2 and out == ""
    assert err.startswith("error: " + message.format(path=path)), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_directory_is_not_a_history(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2 and "is a directory" in err


@pytest.mark.parametrize("blocked", [("toxiproxy",), ("matplotlib", "aiohttp")])
def test_without_the_chaos_extra_one_line_says_what_to_install(
    blocked: tuple[str, ...], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A client install has no chaos extra: every ``tidelog chaos`` command says so in one
    line, naming what is missing (the modules are blocked here as if not installed)."""
    for module in blocked:
        monkeypatch.setitem(sys.modules, module, None)
    for command in (["chaos", "list"], ["chaos", "check", "history.jsonl"]):
        with pytest.raises(SystemExit) as exited:
            main(command)
        out, err = capsys.readouterr()
        assert exited.value.code == 2 and out == ""
        missing = ", ".join(CHAOS_EXTRA[m] for m in CHAOS_EXTRA if m in blocked)
        assert err == (f"error: tidelog chaos needs the chaos extra ({missing} not installed): "
                       f"pip install 'tidelog[chaos]'\n")
