"""Files a root process opens for the mesh: what people name (--map, --baseline, --spec,
--prometheus) and what agents make (the lock per address and port). Nothing through a link,
nothing that blocks, nothing but a regular file replaced, no file's content echoed."""

from __future__ import annotations

import os
import threading

import pytest

from rdmacli.errors import RdmacliError
from rdmacli.mesh import inputs


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("read", [inputs.read_map, inputs.read_baseline])
def test_a_fifo_a_link_or_a_device_is_refused_without_blocking(tmp_path, fifo, read):
    real = tmp_path / "real"
    real.write_text("n1 10.0.0.1\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    done = threading.Event()
    for path, words in (
        (fifo, "not a regular file"),
        (link, "symbolic link"),
        ("/dev/null", "not a regular file"),
    ):
        t = threading.Thread(target=lambda p=path: (pytest.raises(RdmacliError, read, str(p)), done.set()))
        done.clear()
        t.start()
        assert done.wait(5), f"{path} blocked"
        with pytest.raises(RdmacliError, match=words) as exc:
            read(str(path))
        assert exc.value.exit_code == 2


def test_a_map_error_names_the_line_not_its_content(tmp_path):
    secret = tmp_path / "map"
    secret.write_text("root:$6$secrethash:19000:0:99999:7:::\n")
    with pytest.raises(RdmacliError) as exc:
        inputs.read_map(str(secret))
    assert "secrethash" not in exc.value.message and ":1:" in exc.value.message


@pytest.mark.parametrize("planted", ["symlink", "fifo", "hardlink", "other owner"])
def test_a_planted_lock_path_is_refused_and_left_alone(tmp_path, monkeypatch, planted):
    """The agent's lock per address and port, in a shared directory: what someone planted
    there is neither written through nor truncated, and the agent says so (ENV for its pairs)."""
    from rdmacli.mesh import lock

    monkeypatch.setattr(lock, "LOCK_DIRS", (str(tmp_path),))
    path = tmp_path / "rdmacli-mesh-10.0.0.1-7490.lock"
    victim = tmp_path / "victim"
    victim.write_text("precious")
    if planted == "symlink":
        path.symlink_to(victim)
    elif planted == "fifo":
        os.mkfifo(path)
    elif planted == "hardlink":
        os.link(victim, path)
    else:
        path.write_text("someone's")
        if os.geteuid() != 0:
            pytest.skip("chown needs root")  # CI runs as root
        os.chown(path, 65534, 65534)
    fd, problem = lock.hold_port("ab" * 8, "10.0.0.1", 7490)
    assert fd is None and problem is not None and problem.cause.value == "environment", problem
    assert victim.read_text() == "precious"
    held, problem = lock.hold_port("ab" * 8, "10.0.0.2", 7490)  # a path of its own: made and held
    assert held is not None and problem is None
    held.release()
    assert not (tmp_path / "rdmacli-mesh-10.0.0.2-7490.lock").exists()  # no lock file left behind
    assert path.exists() or path.is_symlink()  # what was planted is left alone


def test_a_lock_let_go_leaves_no_file_and_one_opened_before_it_went_is_taken_afresh(tmp_path, monkeypatch):
    """An agent removes its lock file as it lets go, still holding it; another that opened the
    old file just before and locks it after finds it gone from its path and takes the path's
    own: two agents never both think they hold one port."""
    import fcntl

    from rdmacli.mesh import lock

    monkeypatch.setattr(lock, "LOCK_DIRS", (str(tmp_path),))
    path = tmp_path / "rdmacli-mesh-10.0.0.1-7490.lock"
    first, _ = lock.hold_port("ab" * 8, "10.0.0.1", 7490)
    late = os.open(path, os.O_RDWR)  # another agent opened the file, then...
    second, problem = lock.hold_port("cd" * 8, "10.0.0.1", 7490)
    assert second is None and "pid" in problem.message  # held: said who holds it
    first.release()
    assert not path.exists()
    fcntl.flock(late, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ...locks the removed file: not the path's
    assert not lock._same(late, str(path))
    os.close(late)
    third, problem = lock.hold_port("ef" * 8, "10.0.0.1", 7490)
    assert third is not None and problem is None and lock._same(third.fd, str(path))
    third.release()


def test_prometheus_replaces_only_a_regular_file_and_says_so_before_the_run(tmp_path, fifo):
    from rdmacli.render import prometheus

    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "mesh.prom"
    link.symlink_to(victim)
    for path in ("/dev/null", str(fifo), str(link), str(tmp_path)):
        with pytest.raises(OSError):
            prometheus.check(path)
        with pytest.raises(OSError):
            prometheus.replace(path, b"x 1\n")
    assert victim.read_text() == "precious" and os.path.exists("/dev/null") and fifo.is_fifo()
    good = tmp_path / "good.prom"
    good.write_text("old")
    prometheus.check(str(good))
    prometheus.replace(str(good), b"rdmacli_mesh_run_exit_code 0\n")
    assert good.read_text() == "rdmacli_mesh_run_exit_code 0\n" and (good.stat().st_mode & 0o777) == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".rdmacli")] == []  # no temporary left


def test_a_spec_file_given_by_hand_is_a_regular_file_or_refused(tmp_path, fifo):
    from click.testing import CliRunner

    from rdmacli.cli import cli

    for path in (str(fifo), "/dev/zero"):
        r = CliRunner().invoke(cli, ["mesh-agent", "--rank", "0", "--spec", path])
        assert r.exit_code == 2 and "not a regular file" in r.output, r.output


def test_a_node_set_beyond_the_maximum_is_refused_up_front(monkeypatch):
    """Refused from its text: ClusterShell never expands it (1e8 names would be GBs)."""
    import ClusterShell.NodeSet

    from rdmacli.mesh import nodes

    def never(*a, **kw):
        raise AssertionError("the node set was expanded")

    monkeypatch.setattr(ClusterShell.NodeSet, "NodeSet", never)
    with pytest.raises(RdmacliError, match="at most 10000") as exc:
        nodes.expand("n[1-100000000]")
    assert exc.value.exit_code == 2


def test_names_resolve_in_parallel_under_one_deadline(monkeypatch):
    """Eight lookups are under way at once (a barrier only they can pass together), and one that
    never answers is given up at the deadline: the run never waits on DNS name by name."""
    import threading

    from rdmacli.mesh import nodes

    together, never = threading.Barrier(8), threading.Event()

    def lookup(host):
        if host == "stuck":
            never.wait(60)
            return "10.9.9.8"
        together.wait(30)  # broken (an error) unless eight run at once
        return "10.9.9.9"

    monkeypatch.setattr(nodes, "resolve", lookup)
    got = nodes.resolve_all({f"h{i}" for i in range(8)} | {"stuck", "10.0.0.1"}, deadline_s=2)
    never.set()
    assert got["stuck"] is None and got["10.0.0.1"] == "10.0.0.1"
    assert all(got[f"h{i}"] == "10.9.9.9" for i in range(8))
