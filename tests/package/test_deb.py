"""The Debian package as an admin meets it (`make deb-test`, after `make deb`): lintian-clean, what
it holds (the native data path, a man page per command, the completions, the agent's unit with an
absolute ExecStart, examples), and, as root on a host where it is not installed yet, installed,
upgraded and purged with apt: `rdmacli --version` then says `data path: native`, man finds its
pages, the unit is in place and hardened but not enabled, and a purge leaves no file behind.
"""

from __future__ import annotations

import glob
import io
import os
import pathlib
import re
import shutil
import subprocess
import tarfile

import pytest

pytestmark = pytest.mark.package

ROOT = pathlib.Path(__file__).parents[2]
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # the admin's shell, not this venv's
UNIT = "/lib/systemd/system/rdmacli-watch.service"
APT_WAIT = ("-o", "DPkg::Lock::Timeout=900")  # another lane may hold dpkg's lock (bootstrap, build-dep)


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=SYSTEM_PATH, DEBIAN_FRONTEND="noninteractive")
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{argv}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


@pytest.fixture(scope="module")
def deb() -> pathlib.Path:
    found = sorted(glob.glob(str(ROOT / "build/deb/rdmacli_*_*.deb")))
    assert found, "no package: `make deb` first (make deb-test does)"
    return pathlib.Path(found[-1])


def test_lintian_finds_no_error_and_no_warning(deb):
    r = sh("lintian", "--fail-on", "error,warning", str(deb), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not re.search(r"^[EW]: ", r.stdout, re.M), r.stdout


def test_the_package_holds_what_a_fleet_needs(deb):
    files = {line.split()[-1].lstrip(".") for line in sh("dpkg-deb", "-c", str(deb)).stdout.splitlines()}
    pages = {f"/usr/share/man/man1/{p.name}.gz" for p in (ROOT / "man").glob("*.1")}
    assert pages and pages <= files, sorted(pages - files)
    needed = ["/usr/bin/rdmacli", UNIT, "/usr/share/bash-completion/completions/rdmacli",
              "/usr/share/zsh/site-functions/_rdmacli", "/usr/share/fish/vendor_completions.d/rdmacli.fish",
              "/usr/share/doc/rdmacli/examples/rdmacli.nhc", "/usr/share/doc/rdmacli/copyright"]  # fmt: skip
    assert not [p for p in needed if p not in files]
    assert any(re.search(r"/rdmacli/native/_datapath\..*\.so$", f) for f in files)
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as fs:
        member = fs.extractfile(f".{UNIT}")
        assert member is not None
        out = member.read().decode()
    assert "\nExecStart=/usr/bin/rdmacli watch run " in out and "\nDynamicUser=yes\n" in out


@pytest.fixture(scope="module")
def upgraded(deb, tmp_path_factory):
    """The package with a later version: its own files, its maintainer scripts, its version bumped."""
    tmp = tmp_path_factory.mktemp("upgrade")
    tree = tmp / "tree"
    sh("dpkg-deb", "-R", str(deb), str(tree))
    control = tree / "DEBIAN" / "control"
    text = control.read_text()
    version = re.search(r"^Version: (.+)$", text, re.M).group(1)
    control.write_text(text.replace(f"Version: {version}", f"Version: {version}+up1"))
    out = tmp / f"rdmacli_{version}+up1_amd64.deb"
    sh("dpkg-deb", "--root-owner-group", "-b", str(tree), str(out))
    return out, version


def test_installs_upgrades_and_purges_cleanly(deb, upgraded):
    if os.geteuid() != 0:
        pytest.skip("apt-get install needs root")
    if sh("dpkg-query", "-W", "-f", "${Status}", "rdmacli", check=False).stdout.startswith("install ok"):
        pytest.skip("rdmacli's package is installed on this host already: not touched")
    later, version = upgraded
    try:
        sh("apt-get", *APT_WAIT, "install", "-y", "-q", str(deb))
        r = sh("/usr/bin/rdmacli", "--version")
        assert f"version {version}" in r.stdout and "data path: native" in r.stdout, r.stdout
        assert sh("man", "-w", "rdmacli-ping").stdout.strip().startswith("/usr/share/man/man1/")
        assert os.path.exists(UNIT)
        assert not glob.glob("/etc/systemd/system/*.wants/rdmacli-watch.service"), "enabled on install"
        if shutil.which("systemd-analyze"):
            r = sh("systemd-analyze", "security", "--offline=true", UNIT, check=False)
            level = re.search(r"Overall exposure level for rdmacli-watch.service: ([0-9.]+)", r.stdout)
            assert level and float(level.group(1)) <= 3.0, r.stdout[-2000:]
        sh("/usr/bin/rdmacli", "check", "--print-config", "nhc")
        sh("apt-get", *APT_WAIT, "install", "-y", "-q", str(later))
        assert sh("dpkg-query", "-W", "-f", "${Version}", "rdmacli").stdout == f"{version}+up1"
        assert "data path: native" in sh("/usr/bin/rdmacli", "--version").stdout
    finally:
        sh("apt-get", *APT_WAIT, "purge", "-y", "-q", "rdmacli", check=False)
    assert sh("dpkg-query", "-W", "rdmacli", check=False).returncode != 0
    owned = ("/usr/bin/rdmacli", UNIT, "/usr/lib/python3/dist-packages/rdmacli", "/usr/share/doc/rdmacli")
    left = [p for p in owned if os.path.lexists(p)]
    assert not left, left
