"""Issue 73, part 3: `watch unit` writes only units that can start. Its sandbox (DynamicUser,
ProtectHome, PrivateTmp) hides a venv in /root or /tmp; such an install is refused with the fix,
a home directory others may read is mended with ProtectHome=read-only, and either is said."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rdmacli.watch.install import checked_unit, install_paths, reach, unit_text


@pytest.fixture
def tmp_path():
    """A directory every user can reach (pytest's own sits in a 0700 one): /tmp/XXXX, 0755."""
    path = Path(tempfile.mkdtemp(prefix="rdmacli-unit-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def tree(base, *modes):
    """base/d1/d2/.../rdmacli with the directories' modes given, the file 0755."""
    path = base
    for mode in modes:
        path = path / f"d{mode:o}"
        path.mkdir()
        path.chmod(mode)
    prog = path / "rdmacli"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    return prog


def test_a_directory_others_cannot_enter_blocks_the_unit(tmp_path):
    prog = tree(tmp_path, 0o755, 0o700, 0o755)
    seen = reach([str(prog)], homes=(), temps=())
    assert (
        len(seen.blocked) == 1
        and "d700 is mode 0700: the unit's dynamic user cannot enter it" in seen.blocked[0]
    )
    assert seen.directives() == {}
    unreadable = tree(tmp_path / "d755", 0o711)
    unreadable.chmod(0o700)
    assert "cannot read it" in reach([str(unreadable)], homes=(), temps=()).blocked[0]


def test_a_home_others_can_read_is_mended_and_private_tmp_is_not(tmp_path):
    prog = tree(tmp_path, 0o755, 0o755)
    home = reach([str(prog)], homes=(str(tmp_path),), temps=())
    assert home.blocked == () and f"under {tmp_path}, which the unit's ProtectHome=yes hides" in home.homes[0]
    assert home.directives() == {"ProtectHome": "read-only"}
    temp = reach([str(prog)], homes=(), temps=(str(tmp_path),))
    assert "PrivateTmp=yes replaces" in temp.blocked[0] and temp.directives() == {}
    # a link out of a readable place into a hidden one: where it leads counts
    link = tmp_path / "d755" / "link"
    link.symlink_to(prog)
    assert reach([str(link)], homes=(), temps=(str(tmp_path / "d755" / "d755"),)).blocked


def test_directives_replace_the_units_own_and_nothing_else():
    plain, mended = unit_text("/usr/bin/rdmacli"), unit_text("/usr/bin/rdmacli", {"ProtectHome": "read-only"})
    assert "\nProtectHome=yes\n" in plain and "\nProtectHome=read-only\n" in mended
    assert mended.replace("ProtectHome=read-only", "ProtectHome=yes") == plain
    assert "\nExecStart=/usr/bin/rdmacli watch run " in plain


def test_watch_unit_refuses_where_this_install_is_hidden_and_prints_with_force():
    """This checkout's own venv, as CI clones it (under /tmp, refused) or as a developer keeps it:
    the command's answer is what reach() says of its paths."""
    seen = reach(install_paths())
    r = subprocess.run([sys.executable, "-m", "rdmacli", "watch", "unit"], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    if seen.blocked:
        assert r.returncode == 3 and r.stdout == "", r
        assert "the unit would not start" in r.stderr and "/opt/rdmacli" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    else:
        assert r.returncode == 0 and "ExecStart=" in r.stdout, r.stderr
    argv = [sys.executable, "-m", "rdmacli", "watch", "unit", "--force"]
    forced = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert forced.returncode == 0 and "\nExecStart=" in forced.stdout
    assert ("printed anyway" in forced.stderr) == bool(seen.blocked), forced.stderr


def test_checked_unit_in_a_made_venv_under_a_hidden_place(tmp_path, monkeypatch):
    """The path a pipx or venv install gives: sys.prefix and the script under /tmp."""
    import rdmacli.watch.install as install

    prog = tree(tmp_path, 0o755)
    monkeypatch.setattr(install, "install_paths", lambda: [str(prog), str(tmp_path)])
    monkeypatch.setattr(install, "TEMPS", ())
    monkeypatch.setattr(install, "HOMES", (str(tmp_path),))
    text, said = checked_unit()
    assert "\nProtectHome=read-only\n" in text and "ProtectHome=read-only written" in said[0]
    assert os.path.isabs(text.split("\nExecStart=", 1)[1].split()[0])
