"""The systemd units: the committed templates are what tidelog/deploy/systemd.py writes, and
``systemd-analyze verify`` accepts every unit (rendered and template) without a warning.

verify checks the unit's syntax and values, and that ExecStart's binary exists: the units are
rendered with this venv as the install prefix, so its real ``tidelog`` is the one checked.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.deploy.systemd import TEMPLATE_ROLES, template_text
from tidelog.deploy.writer import render_to

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
VENV = Path(sys.executable).parent.parent

needs_verify = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                  reason="systemd-analyze is not installed (Debian: systemd)")


@pytest.mark.parametrize("name", sorted(TEMPLATE_ROLES))
def test_committed_templates_are_the_generated_ones(name: str) -> None:
    assert (SYSTEMD / name).read_text() == template_text(TEMPLATE_ROLES[name]), \
        f"deploy/systemd/{name} is stale: regenerate it from tidelog/deploy/systemd.py"


def verify(unit: Path) -> str:
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)
    # verify exits 0 on unknown keys and bad values, only warning: any output about our unit
    # is a failure.
    ours = [line for line in (done.stdout + done.stderr).splitlines()
            if str(unit.parent) in line]
    assert done.returncode == 0 and not ours, f"{unit.name}: {done.stdout}{done.stderr}"
    return done.stderr


@needs_verify
def test_rendered_units_verify(tmp_path: Path) -> None:
    example = (ROOT / "deploy/inventory.example.toml").read_text()
    inv_file = tmp_path / "inventory.toml"
    inv_file.write_text(example.replace('install_prefix = "/opt/tidelog"',
                                        f'install_prefix = "{VENV}"'))
    render_to(inv_file, tmp_path / "out")
    units = sorted((tmp_path / "out/hosts").glob("*/etc/systemd/system/*.service"))
    assert len(units) == 6
    for unit in units:
        text = unit.read_text()
        assert f"ExecStart={VENV}/bin/tidelog server --config /etc/tidelog/" in text
        assert "KillSignal=SIGTERM" in text and "Restart=on-failure" in text
        verify(unit)


@needs_verify
@pytest.mark.parametrize("name", sorted(TEMPLATE_ROLES))
def test_template_instances_verify(tmp_path: Path, name: str) -> None:
    text = (SYSTEMD / name).read_text().replace("/opt/tidelog/bin/tidelog",
                                                f"{VENV}/bin/tidelog")
    (tmp_path / name).write_text(text)
    verify(tmp_path / name.replace("@", "@7"))


def test_a_bad_unit_would_be_caught(tmp_path: Path) -> None:
    """The check itself: a misspelt key makes verify print a warning, which fails."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "tidelog-broker-1.service"
    unit.write_text(template_text("broker").replace("%i", "1")
                    .replace("/opt/tidelog/bin/tidelog", f"{VENV}/bin/tidelog")
                    .replace("ProtectSystem=", "ProtectSystm="))
    with pytest.raises(AssertionError, match="Unknown key 'ProtectSystm'"):
        verify(unit)
