"""Failures that name what failed, as a user meets them on a host without RDMA: a launcher's own
failure in its words (not a timeout), a group or a template field that does not exist, a watch
agent that is not there, what is installed. Run as a person types the commands (a subprocess)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from rdmacli.mesh.launched import launcher_failure

NO_RDMA = not (os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"))


def rdmacli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rdmacli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})  # fmt: skip


@pytest.fixture
def two_node_map(tmp_path):
    path = tmp_path / "two.map"
    path.write_text("n1 192.0.2.1\nn2 192.0.2.2\n")
    return str(path)


def test_version_names_the_data_path_and_the_libraries_the_loader_maps(tmp_path):
    r = rdmacli("--version")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[1].startswith("data path: native (") or lines[1].startswith("data path: python (")
    assert any(line.startswith("librdmacm: ") for line in lines)
    (tmp_path / "librdmacm.so.1").write_bytes(b"")  # an empty file is no library, whatever its name
    r = rdmacli("--version", env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert r.returncode == 0 and "librdmacm: not loadable (" in r.stdout, r.stdout
    r = rdmacli("--version", env={"RDMACLI_DATA_PATH": "python"})
    assert "data path: python (RDMACLI_DATA_PATH=python" in r.stdout


def test_a_pure_install_says_what_to_install_not_a_developers_command(monkeypatch, tmp_path):
    import rdmacli.native as N

    monkeypatch.setattr(N, "_extension_file", lambda: None)
    monkeypatch.delenv(N.ENV, raising=False)
    monkeypatch.delenv(N.MODULE_ENV, raising=False)
    monkeypatch.setattr(N.os.path, "exists", lambda p: False)  # not a checkout: an installed wheel
    kind, why = N.installed()
    assert kind == "python" and "libibverbs-dev" in why and "install rdmacli again" in why
    assert "make venv" not in why


def test_launcher_failure_words_are_the_launchers():
    names = ["n1", "n2"]
    err = launcher_failure("srun", names, set(), {"n1": 1, "n2": 1}, {"?": ["srun: fatal: no config"]})
    said = err.message
    assert "srun failed on all 2 node(s)" in said and "srun: fatal: no config" in said
    assert err.cause.value == "launcher" and int(err.exit_code) == 3 and "srun hostname" in err.hint
    assert launcher_failure("srun", names, {"n1"}, {"n1": 1, "n2": 1}, {}) is None  # an agent spoke
    assert launcher_failure("ssh", names, set(), {"n1": 255, "n2": None}, {}) is None  # one still running
    said = launcher_failure("ssh", names, set(), {"n1": 255, "n2": 255}, {"n1": ["ssh: no route"]}).message
    assert "n1: ssh: no route" in said and "exit 255" in said


@pytest.mark.skipif(not NO_RDMA, reason="this host has RDMA devices")
def test_a_launcher_that_fails_is_named_with_its_words_not_as_a_timeout(two_node_map):
    for args in (["--map", two_node_map], []):  # the run, and rail discovery before it
        r = rdmacli("mesh", "n1,n2", "--launcher", "exec", "--agent-command", "/nonexistent/rdmacli", *args)
        assert r.returncode == 3, r.stderr
        assert "exec failed on all 2 node(s) before any agent ran" in r.stderr, r.stderr
        assert "/nonexistent/rdmacli" in r.stderr and "within" not in r.stderr
    r = rdmacli("mesh", "n1,n2", "--launcher", "exec", "--agent-command", "/nonexistent/rdmacli", "--map",
                two_node_map, "--json")  # fmt: skip
    assert json.loads(r.stdout)["error"]["cause"] == "launcher"
    if shutil.which("srun"):  # outside an allocation srun says why itself
        r = rdmacli("mesh", "n1,n2", "--launcher", "srun")
        assert r.returncode == 3 and "srun failed on all 2 node(s)" in r.stderr, r.stderr


@pytest.mark.skipif(not NO_RDMA, reason="this host has RDMA devices")
def test_a_mesh_where_no_node_has_rdma_is_the_environments_fault(two_node_map):
    r = rdmacli("mesh", "n1,n2", "--launcher", "exec", "--map", two_node_map, "--round-time", "1", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 3 and doc["error"]["cause"] == "environment", doc["error"]
    assert "no node could run the test" in doc["error"]["message"]


def test_unknown_groups_and_template_fields_are_usage_errors_that_name_them(two_node_map):
    r = rdmacli("mesh", "@nogroup")
    assert r.returncode == 2 and "no such node group @nogroup" in r.stderr, r.stderr
    r = rdmacli("mesh", "n1,@nogroup,n2")
    assert r.returncode == 2 and "@nogroup" in r.stderr
    r = rdmacli("mesh", "n1,n2", "--address-template", "{host}-ib")
    assert r.returncode == 2 and "it names {host}" in r.stderr and "KeyError" not in r.stderr, r.stderr
    r = rdmacli("watch", "run", "--nodes", "n[1-2]", "--address-template", "{host}-ib", "--node", "n1",
                "--state-file", os.devnull)  # fmt: skip
    assert r.returncode == 2 and "it names {host}" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_json_and_json_lines_are_refused_alike_on_every_command_that_has_both():
    for args in (["connect", "h"], ["mesh", "n1,n2"], ["ping", "h"], ["bw", "h"]):
        r = rdmacli(*args, "--json", "--json-lines")
        assert r.returncode == 2 and "two formats: choose one" in r.stderr, (args, r.stderr)
        assert len(r.stdout.splitlines()) == 1 and json.loads(r.stdout)["error"]["cause"] == "usage"


def test_watch_show_without_a_state_file_is_this_hosts_state_in_one_line(tmp_path):
    r = rdmacli("watch", "show", "--state-file", str(tmp_path / "none.json"))
    assert r.returncode == 3, r.stderr
    [line] = r.stdout.splitlines()
    doc = json.loads(line)
    assert doc["error"]["cause"] == "environment" and "no watch state file" in doc["error"]["message"]
    assert "rdmacli watch run" in doc["error"]["hint"]


def test_watch_status_names_each_node_once_and_reads_watch_shows_own_error(tmp_path):
    mapfile = tmp_path / "three.map"
    mapfile.write_text("n1 192.0.2.1\nn2 192.0.2.2\nn3 192.0.2.3\n")
    common = ["watch", "status", "n[1-3]", "--map", str(mapfile), "--launcher", "exec"]
    r = rdmacli(*common, "--state-file", str(tmp_path / "{node}.json"), "--agent-command",
                f"{sys.executable} -m rdmacli")  # fmt: skip
    assert "no usable state from 3 node(s): n1, n2, n3\n" in r.stderr, r.stderr
    assert "refused from n1: watch show: no watch state file" in r.stdout, r.stdout
    assert "no answer from" not in r.stdout and "nothing named" not in r.stdout
    assert "see data.blame" not in r.stderr
    r = rdmacli(*common, "--agent-command", "/nonexistent/rdmacli")
    assert r.returncode == 3 and "exec failed on all 3 node(s) before `watch show` ran" in r.stderr, r.stderr


def test_a_bad_file_gets_one_error_style_whatever_is_wrong_with_it(tmp_path):
    """A directory and a device alike: rdmacli's `error:` words, exit 2, never click's usage."""
    for args in (["mesh", "n1,n2", "--map"], ["watch", "run", "--map"], ["mesh", "n1,n2", "--baseline"]):
        for bad in (str(tmp_path), os.devnull):
            r = rdmacli(*args, bad)
            assert r.returncode == 2 and r.stderr.startswith("error: "), (args, bad, r.stderr)
            assert "is not a regular file" in r.stderr and "Usage:" not in r.stderr


def test_a_watch_agent_whose_state_file_cannot_be_written_says_so_at_start(tmp_path):
    mapfile = tmp_path / "two.map"
    mapfile.write_text("n1 192.0.2.1\nn2 192.0.2.2\n")
    r = rdmacli("watch", "run", "--map", str(mapfile), "--node", "n1", "--state-file",
                str(tmp_path / "no" / "such" / "dir" / "x.json"), timeout=60)  # fmt: skip
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "cannot write the watch state file" in r.stderr and "--state-file" in r.stderr
    # the hint is about what is wrong (issue 75): a missing directory is named, a directory given
    # as the file is said to be one (not "create its directory")
    assert f"create {tmp_path}/no/such/dir" in r.stderr, r.stderr
    r = rdmacli("watch", "run", "--map", str(mapfile), "--node", "n1", "--state-file", str(tmp_path))
    assert r.returncode == 3 and "is a directory" in r.stderr and "not a directory" in r.stderr, r.stderr
    assert "create" not in r.stderr, r.stderr


def test_words_are_about_what_was_typed_a_file_given_a_key_path_that_cannot_be(tmp_path):
    """Issue 75: `watch show --state-file FILE` spoke of port 7590; `watch key /proc/nope/k`
    hinted that a key is never overwritten."""
    r = rdmacli("watch", "show", "--state-file", str(tmp_path / "none.json"))
    assert "port" not in r.stdout and "no agent writes" in r.stdout, r.stdout
    r = rdmacli("watch", "key", str(tmp_path / "nope" / "k"))
    assert r.returncode == 2 and "never overwritten" not in r.stderr and "directory that exists" in r.stderr
    (tmp_path / "k").write_text("x")
    r = rdmacli("watch", "key", str(tmp_path / "k"))
    assert r.returncode == 2 and "never overwritten" in r.stderr, r.stderr


def test_a_metrics_endpoint_that_cannot_open_is_said_at_start(tmp_path):
    """A web config without --metrics, a certificate that does not load, a port another process holds:
    each said in words before the agent probes, with its exit code (never a traceback)."""
    import socket

    mapfile = tmp_path / "two.map"
    mapfile.write_text("n1 192.0.2.1\nn2 192.0.2.2\n")
    base = ["watch", "run", "--map", str(mapfile), "--node", "n1", "--state-file", str(tmp_path / "s.json")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{s.getsockname()[1]}"
    r = rdmacli(*base, "--web-config-file", str(mapfile), timeout=60)
    assert r.returncode == 2 and "give --metrics too" in r.stderr, r.stderr
    webfile = tmp_path / "web.yml"
    webfile.write_text(f"tls_server_config:\n  cert_file: {mapfile}\n  key_file: {mapfile}\n")
    r = rdmacli(*base, "--metrics", free, "--web-config-file", str(webfile), timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--web-config-file" in r.stderr, r.stderr
    webfile.write_text(f"tls_server_config:\n  cert_file: none.pem\n  key_file: {mapfile}\n")
    r = rdmacli(*base, "--metrics", free, "--web-config-file", str(webfile), timeout=60)
    assert r.returncode == 2 and "none.pem: No such file or directory" in r.stderr, r.stderr
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        r = rdmacli(*base, "--metrics", f"127.0.0.1:{held.getsockname()[1]}", timeout=60)
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "Address already in use" in r.stderr and "another process may serve that port" in r.stderr


def test_a_watch_agent_on_a_host_without_its_rdma_devices_says_so_at_start(tmp_path):
    """This host has no RDMA device: the agent says why at start (exit 3), where it printed its
    banner and nothing else for as long as it ran (its state said bad, cause ENV, nowhere why)."""
    mapfile = tmp_path / "two.map"
    mapfile.write_text("n1 127.0.0.1\nn2 192.0.2.2\n")
    r = rdmacli("watch", "run", "--map", str(mapfile), "--node", "n1", "--state-file",
                str(tmp_path / "s.json"), timeout=60)  # fmt: skip
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "no rail of this node has an RDMA device: 127.0.0.1 is on lo, which no RDMA device has" in r.stderr
    assert "rdma link" in r.stderr


def test_a_rail_without_its_device_is_named_and_the_others_go_on():
    import io

    from rdmacli.watch.plan import WatchPlan
    from rdmacli.watch.service import preflight

    plan = WatchPlan(
        names=("n1", "n2"), addresses=(("10.0.0.1", "10.1.0.1"), ("10.0.0.2", "10.1.0.2")), rank=0
    )
    err = io.StringIO()
    ports = {"10.0.0.1": ("mlx5_0", 1)}
    preflight(plan, err, port_of=ports.get, netdev_of={"10.0.0.1": "ens1", "10.1.0.1": "ens2"}.get)
    assert err.getvalue().startswith("watch: rail 1: 10.1.0.1 is on ens2, which no RDMA device has;")
    with pytest.raises(Exception, match="10.0.0.1 is on no network interface of this host") as got:
        preflight(plan, err, port_of={}.get, netdev_of={"10.1.0.1": "ens2"}.get)
    assert got.value.exit_code == 3


def test_a_connection_that_counted_nothing_still_gets_its_line():
    """`listen --perftest` ended "internal error: KeyError: 'messages_received'": a server's line
    for a connection of a protocol whose words need counts it never made (a perftest control
    connection, a client gone at once) is said without them."""
    from rdmacli.events import Finished
    from rdmacli.render.events import served_words

    def line(protocol: str, **served) -> str | None:
        return served_words(
            Finished(conn=0, remote="r", state="done", protocol=protocol, role="server", served=served)
        )

    assert line("bw", op="write", size_bytes=65536) is None
    assert line("connect", messages_received=None, messages_sent=3) is None
    assert (
        line("bw", op="write", size_bytes=4096, messages_received=0)
        == "write of 4096 bytes, 0 sends received"
    )
    assert line("events") is None


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs filled up (root only: the unit suite runs as root in CI)."""
    where = tmp_path / "full"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)]).returncode != 0:
        pytest.fail("cannot mount a tmpfs: the unit suite runs as root")
    try:
        with open(where / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(bytes(4096))
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)])


def test_a_watch_agent_on_a_full_disk_refuses_at_start_where_it_made_an_empty_file_and_died_later(
    tmp_path, full_disk
):
    """Issue 70: on a full disk the start check (an empty temporary file made and removed) passed
    and the agent died at its first write. The check now writes for real: exit 3, in words."""
    mapfile = tmp_path / "two.map"
    mapfile.write_text("n1 192.0.2.1\nn2 192.0.2.2\n")
    r = rdmacli("watch", "run", "--map", str(mapfile), "--node", "n1", "--state-file",
                str(full_disk / "w.json"), timeout=60)  # fmt: skip
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "cannot write the watch state file" in r.stderr and "No space left on device" in r.stderr, r.stderr


def test_an_unresolvable_address_is_hinted_by_where_it_came_from(tmp_path):
    """Issue 75: a --map line with a bad address hinted "or --map FILE" to someone who gave one."""
    mapfile = tmp_path / "m"
    mapfile.write_text("n1 no-such-host.invalid\nn2 192.0.2.2\n")
    r = rdmacli("mesh", "n1,n2", "--map", str(mapfile), "--launcher", "exec")
    assert "cannot resolve n1 (no-such-host.invalid)" in r.stderr and f"in {mapfile}" in r.stderr, r.stderr
    assert "--map FILE" not in r.stderr
    r = rdmacli("mesh", "n1,n2", "--address-template", "{node}.invalid", "--launcher", "exec")
    assert "fix --address-template" in r.stderr, r.stderr


STAMP = """import sys, time
with open(sys.argv[1] + "/" + sys.argv[sys.argv.index("--node") + 1], "w") as f:
    f.write(f"{time.monotonic()} ")
    time.sleep(1.5)
    f.write(f"{time.monotonic()}")
"""


def test_watch_status_asks_at_most_fanout_nodes_at_once(tmp_path):
    """Each `watch show` is a Python start beside that node's agent: in the lab eight at once on
    two emulated CPUs named healthy NICs dead. --fanout N: waves of N (ClusterShell's own); the
    default, 64, is ClusterShell's. Each stand-in `watch show` stamps when it ran."""
    mapfile = tmp_path / "three.map"
    mapfile.write_text("n1 192.0.2.1\nn2 192.0.2.2\nn3 192.0.2.3\n")
    (tmp_path / "stamp.py").write_text(STAMP)

    def spans(fanout: str) -> list[tuple[float, float]]:
        out = tmp_path / f"f{fanout}"
        out.mkdir()
        rdmacli("watch", "status", "n[1-3]", "--map", str(mapfile), "--launcher", "exec", "--fanout", fanout,
                "--agent-command", f"{sys.executable} {tmp_path / 'stamp.py'} {out}")  # fmt: skip
        return sorted(tuple(map(float, (out / n).read_text().split())) for n in ("n1", "n2", "n3"))

    one = spans("1")
    assert all(a[1] <= b[0] for a, b in zip(one, one[1:])), one  # one after another
    three = spans("3")
    assert any(b[0] < a[1] for a, b in zip(three, three[1:])), three  # at once
