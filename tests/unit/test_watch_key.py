"""The fabric's probe key: made 0600 and never over another, refused in words when others may
read it or it is not one, and what it keys: the windows' run ids (no one without it derives
them) and the probes' tags (test_probe_wire, test_mesh_probe)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from rdmacli.errors import Cause, RdmacliError
from rdmacli.probe.siphash import PUBLIC_KEY
from rdmacli.watch.key import read_key, write_key
from rdmacli.watch.plan import WatchPlan


def rdmacli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rdmacli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_key_is_made_0600_read_back_and_never_made_over_another(tmp_path):
    path = tmp_path / "watch.key"
    r = rdmacli("watch", "key", str(path))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(read_key(str(path))) == 16
    first = path.read_text()
    r = rdmacli("watch", "key", str(path))
    assert r.returncode == 2 and "never overwritten" in r.stderr and "Traceback" not in r.stderr
    assert path.read_text() == first
    other = tmp_path / "other.key"
    write_key(str(other))
    assert read_key(str(other)) != read_key(str(path))


@pytest.mark.parametrize(
    "content, mode, words",
    [
        ("00112233445566778899aabbccddeeff\n", 0o644, "others may read it"),
        ("00112233445566778899aabbccddeeff\n", 0o640, "chmod 600"),
        ("not a key at all\n", 0o600, "not a key"),
        ("00112233", 0o600, "not a key"),
        ("00" * 200, 0o600, "not a key"),
        ("\xff\xfe" * 16, 0o600, "not a key"),
    ],
)
def test_a_key_file_others_may_read_or_that_is_no_key_is_refused_in_words(tmp_path, content, mode, words):
    path = tmp_path / "k"
    path.write_text(content, encoding="latin-1")
    os.chmod(path, mode)
    with pytest.raises(RdmacliError) as exc:
        read_key(str(path))
    assert exc.value.cause is Cause.USAGE and words in (exc.value.message + (exc.value.hint or "")), exc.value


def test_a_link_a_directory_or_nothing_is_refused(tmp_path):
    key = tmp_path / "k"
    write_key(str(key))
    (tmp_path / "link").symlink_to(key)
    for path in (tmp_path / "link", tmp_path, tmp_path / "none"):
        with pytest.raises(RdmacliError) as exc:
            read_key(str(path))
        assert exc.value.cause is Cause.USAGE and "--key-file" in exc.value.message


def test_watch_run_refuses_a_bad_key_at_start(tmp_path):
    mapfile = tmp_path / "two.map"
    mapfile.write_text("n1 192.0.2.1\nn2 192.0.2.2\n")
    key = tmp_path / "k"
    key.write_text("00112233445566778899aabbccddeeff\n")
    os.chmod(key, 0o644)
    r = rdmacli("watch", "run", "--map", str(mapfile), "--node", "n1", "--key-file", str(key),
                "--state-file", str(tmp_path / "s.json"))  # fmt: skip
    assert r.returncode == 2 and "others may read it" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_windows_run_ids_are_keyed_when_the_fabric_has_a_key():
    names, addrs = ("n0", "n1", "n2"), (("10.0.0.1",), ("10.0.0.2",), ("10.0.0.3",))
    public = WatchPlan(names, addrs, 0)
    assert not public.authenticated and public.probe_key == PUBLIC_KEY
    one = WatchPlan(names, addrs, 0, probe_key=b"k" * 16)
    other = WatchPlan(names, addrs, 1, probe_key=b"k" * 16)
    third = WatchPlan(names, addrs, 0, probe_key=b"j" * 16)
    assert one.authenticated and one.run_id(5) == other.run_id(5)  # every agent of the fabric
    assert len({public.run_id(5), one.run_id(5), third.run_id(5), one.run_id(6)}) == 4
    assert "k" * 16 not in repr(one)  # the key is never printed with the plan


def test_a_key_file_owned_by_another_user_is_refused(tmp_path):
    """Issue 70: a key file owned by another user was accepted (its owner can change it)."""
    key = tmp_path / "k"
    write_key(str(key))
    os.chown(key, 4242, 4242)
    with pytest.raises(RdmacliError) as exc:
        read_key(str(key))
    assert exc.value.cause is Cause.USAGE and "owned by uid 4242" in exc.value.message, exc.value
    os.chown(key, os.geteuid(), os.getegid())
    assert len(read_key(str(key))) == 16
