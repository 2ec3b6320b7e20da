"""What each transport has, read from sysfs as the kernel lays it out for siw (iWARP) and rxe (RoCE),
and what follows from it: refusals in words before a QP is made, no IP read out of a GID that is a
MAC, an rdma_connect refused at once said as nothing listening (and waited out under --wait), and
the lab's Soft-iWARP set-up. The lab's tests/lab/test_iwarp.py proves the same on real siw."""

from __future__ import annotations

import errno
from dataclasses import replace

import pytest
from fakerdma import FakeBackend
from test_engine import CLIENT, FAST, GROUP, SERVER, client, run
from test_local_sysfs import make_rxe

from rdmacli import transports as T
from rdmacli.diag import devices as D
from rdmacli.diag.local import local_cause
from rdmacli.engine.mcast import McastFlow
from rdmacli.engine.server import ServerFlow
from rdmacli.errors import Cause, ExitCode
from rdmacli.outcome import State
from rdmacli.protocols.cmatose import CmatoseClient
from rdmacli.protocols.mckey import McastReceiver
from rdmacli.protocols.udaddy import UdServer
from rdmacli.rdma.cm import RdmaCallError


def make_siw(root, net, name: str, netdev: str, mac: str, ip: str | None = None):
    """siw as 6.1 lays it out: node_type RNIC, one GID (the MAC, zero-padded), gid_attrs/ndevs
    unreadable (EINVAL: a directory here), no parent, no bus device."""
    pdir = root / name / "ports" / "1"
    (pdir / "gids").mkdir(parents=True)
    (root / name / "node_type").write_text("4: RNIC\n")
    (pdir / "link_layer").write_text("Ethernet\n")
    (pdir / "state").write_text("4: ACTIVE\n")
    (pdir / "phys_state").write_text("5: LinkUp\n")
    raw = mac.replace(":", "")
    (pdir / "gids" / "0").write_text(f"{raw[0:4]}:{raw[4:8]}:{raw[8:12]}:0000:0000:0000:0000:0000\n")
    (net / netdev).mkdir(parents=True)
    (net / netdev / "address").write_text(mac + "\n")


def test_transport_of_a_port_follows_node_type_and_link_layer():
    assert T.of("4: RNIC", "Ethernet") is T.IWARP
    assert T.of("1: CA", "Ethernet") is T.ROCE
    assert T.of("1: CA", "InfiniBand") is T.INFINIBAND
    assert T.of(None, None) is None and T.of("1: CA", None) is None


def test_iwarp_lacks_datagrams_multicast_and_immediate_and_says_what_works():
    assert T.IWARP.lacks((T.DATAGRAMS, T.MULTICAST, T.IMMEDIATE)) == [T.DATAGRAMS, T.MULTICAST, T.IMMEDIATE]
    assert T.ROCE.lacks((T.DATAGRAMS, T.MULTICAST, T.IMMEDIATE)) == []
    err = T.refusal(T.IWARP, "siw0", (T.DATAGRAMS,))
    assert err.message == "siw0 is iWARP (RDMA over TCP), which has no unreliable datagrams (UD QPs)"
    assert "mesh --test ping" in err.hint and "connect" in err.hint
    assert err.cause is Cause.TRANSPORT and err.exit_code == ExitCode.ENVIRONMENT
    assert T.describe(T.IWARP, "Ethernet").startswith("iWARP (no unreliable datagrams (UD QPs), no multicast")
    assert T.describe(T.ROCE, "Ethernet") == "RoCE over Ethernet" and T.describe(None, "X") == "X"
    assert T.refusal(T.ROCE, "rxe0", (T.DATAGRAMS, T.MULTICAST)) is None


def test_an_iwarp_port_is_found_by_its_mac_and_shows_no_address_in_its_gid(tmp_path, monkeypatch):
    sysfs, net = tmp_path / "ib", tmp_path / "net"
    make_siw(sysfs, net, "siw0", "veth2", "72:ef:80:20:a3:ac")
    (net / "other").mkdir()
    (net / "other" / "address").write_text("02:00:00:00:00:01\n")
    monkeypatch.setattr(D, "NET", str(net))
    assert D.mac_netdev(str(sysfs / "siw0" / "ports" / "1")) == "veth2"
    [dev] = D.list_devices(str(sysfs), use_pyverbs=False)
    port = dev.ports[0]
    assert port.transport == "iWARP" and port.netdev == "veth2", port
    assert [g.ip for g in port.gids] == [None]  # 72ef:8020:a3ac:: is a MAC, not an address


def test_an_iwarp_port_is_not_blamed_for_a_gid_it_never_had(tmp_path, monkeypatch):
    sysfs, net = tmp_path / "ib", tmp_path / "net"
    make_siw(sysfs, net, "siw1", "veth3", "d6:17:68:02:4e:1b")
    monkeypatch.setattr(D, "NET", str(net))
    import rdmacli.diag.local as L

    monkeypatch.setattr(L, "netdev_of", lambda ip: "veth3" if ip == "10.78.0.2" else None)
    assert local_cause("siw1", 1, "10.78.0.2", sysfs=str(sysfs)) is None
    gone = local_cause("siw1", 1, "10.78.0.9", sysfs=str(sysfs))
    assert gone is not None and gone.cause is Cause.LOCAL_ADDRESS_GONE and "GID" not in gone.text, gone
    # a RoCE port still is, for the GID its address makes
    make_rxe(sysfs, "rxe0", "veth0", ["10.77.0.1"])
    (sysfs / "rxe0" / "node_type").write_text("1: CA\n")
    (sysfs / "rxe0" / "ports" / "1" / "link_layer").write_text("Ethernet\n")
    roce = local_cause("rxe0", 1, "10.77.0.9", sysfs=str(sysfs))
    assert roce is not None and "has no GID for 10.77.0.9" in roce.text


# -- the engine: refused before a QP, on the device the cm_id landed on --------------------------


def test_a_ud_server_on_iwarp_is_refused_before_it_is_ready():
    backend = FakeBackend()
    backend.transport_row = T.IWARP
    flow = ServerFlow(bind=SERVER, make_protocol=lambda: UdServer(), timeouts=FAST, backend=backend,
                      needs=(T.DATAGRAMS,), max_clients=1)  # fmt: skip
    with pytest.raises(Exception) as got:
        flow.run()
    flow.close()
    assert getattr(got.value, "cause", None) is Cause.TRANSPORT, got.value
    assert "fake0 is iWARP" in str(got.value) and not [c for c in backend.log if c[0] == "create qp"]


def test_a_multicast_member_on_iwarp_fails_in_words_with_exit_3():
    backend = FakeBackend()
    backend.transport_row = T.IWARP
    flow = McastFlow(group=GROUP, src=CLIENT, make_protocol=lambda: McastReceiver(3, 64), backend=backend,
                     timeouts=replace(FAST, overall_s=5.0), needs=(T.DATAGRAMS, T.MULTICAST))  # fmt: skip
    out = run(flow)
    [c] = out.connections
    assert c.error.cause is Cause.TRANSPORT and c.error.exit_code == ExitCode.ENVIRONMENT, c.error
    assert "unreliable datagrams (UD QPs) and multicast" in c.error.message
    assert not [x for x in backend.log if x[0] == "create qp"]


def test_a_connected_test_on_iwarp_runs_as_on_roce():
    backend = FakeBackend()
    backend.transport_row = T.IWARP
    flow = client(backend, needs=())
    from test_engine import cmatose_peer

    cmatose_peer(backend, flow)
    assert run(flow).connections[0].state is State.DONE


def test_rdma_connect_refused_at_once_is_nothing_listening_and_is_waited_out():
    def refuse(cm, param):
        raise RdmaCallError("rdma_connect", errno.ECONNREFUSED)

    backend = FakeBackend()
    backend.script["connect"] = refuse
    out = run(client(backend, make_protocol=lambda: CmatoseClient(3, 64)))
    err = out.connections[0].error
    assert err.cause is Cause.NOBODY_LISTENING and err.exit_code == ExitCode.REJECTED, err
    assert "nothing is listening at" in err.message and "ECONNREFUSED" in err.message

    tries = []

    def refuse_twice(cm, param):
        tries.append(cm)
        if len(tries) <= 2:
            raise RdmaCallError("rdma_connect", errno.ECONNREFUSED)
        return []  # then a server is there: its answer is left to the deadline here

    backend = FakeBackend()
    backend.script["connect"] = refuse_twice
    flow = client(backend, timeouts=replace(FAST, wait_s=5.0))
    flow.RETRY_S = 0.01
    run(flow)
    assert len(tries) == 3  # asked again while --wait lasted, as after REJECTED reason 8


# -- the lab ------------------------------------------------------------------------------------


def test_the_lab_sets_up_siw_on_its_own_veth_pair():
    from rdmacli.lab import IWARP_CLIENT, IWARP_SERVER
    from rdmacli.lab.guest import iwarp_setup

    steps = iwarp_setup("/cache/siw.ko")
    argv = [s[0] for s in steps]
    assert argv[0] == ["modprobe", "-a", "ib_core", "libcrc32c"] and argv[1] == ["insmod", "/cache/siw.ko"]
    rdma = steps[-1][1]
    assert f"link add {IWARP_SERVER['siw']} type siw netdev {IWARP_SERVER['netdev']}" in rdma
    assert f"link add {IWARP_CLIENT['siw']} type siw netdev {IWARP_CLIENT['netdev']}" in rdma
    assert iwarp_setup("modprobe")[0][0] == ["modprobe", "-a", "siw"]


def test_building_siw_without_the_kernel_sources_names_the_packages(tmp_path, monkeypatch):
    from rdmacli.errors import EnvironmentProblem
    from rdmacli.lab import siw

    monkeypatch.setattr(siw, "in_tree", lambda v: False)
    monkeypatch.setattr(siw, "source_tarball", lambda v: None)
    with pytest.raises(EnvironmentProblem) as got:
        siw.module("9.9.0-1-amd64", str(tmp_path))
    assert "linux-source" in str(got.value) and "linux-headers-9.9.0-1-amd64" in str(got.value)
    assert "apt-get install" in got.value.hint


def test_watch_refuses_an_iwarp_rail_at_start_and_says_what_works():
    from rdmacli.watch.plan import WatchPlan
    from rdmacli.watch.service import refuse_transport

    plan = WatchPlan(
        names=("n1", "n2"), addresses=(("10.0.0.1", "10.1.0.1"), ("10.0.0.2", "10.1.0.2")), rank=0
    )
    ports = {"10.0.0.1": ("mlx5_0", 1), "10.1.0.1": ("siw0", 1)}
    rows = {"mlx5_0": T.ROCE, "siw0": T.IWARP}
    with pytest.raises(Exception) as got:
        refuse_transport(plan, port_of=ports.get, transport_of=lambda d, p: rows[d])
    assert got.value.cause is Cause.TRANSPORT and got.value.exit_code == ExitCode.ENVIRONMENT
    assert "rail 1 (10.1.0.1): siw0 is iWARP" in str(got.value) and "mesh --test ping" in got.value.hint
    rows["siw0"] = T.ROCE
    refuse_transport(plan, port_of=ports.get, transport_of=lambda d, p: rows[d])  # RoCE: nothing said


def test_the_mesh_calls_an_iwarp_node_its_own_environment_not_a_bad_link():
    from rdmacli.mesh.report import CODE_OF

    assert CODE_OF[Cause.TRANSPORT] == "ENV"


def test_an_iwarp_port_is_a_rail_with_its_netdevs_address(tmp_path, monkeypatch):
    from rdmacli.mesh import rails

    sysfs, net = tmp_path / "ib", tmp_path / "net"
    make_siw(sysfs, net, "siw0", "veth2", "72:ef:80:20:a3:ac")
    monkeypatch.setattr(D, "NET", str(net))
    monkeypatch.setattr(rails, "netdev_address", lambda netdev, family: {4: "10.78.0.1", 6: None}[family])
    assert [(r.device, r.address, r.netdev) for r in rails.discover(4, sysfs=str(sysfs))] == [
        ("siw0", "10.78.0.1", "veth2")
    ]
    assert rails.discover(6, sysfs=str(sysfs)) == []  # not the MAC read as an IPv6 address


@pytest.mark.parametrize("op,remote_write", [("read", True), ("write", False), ("send", False)])
def test_a_read_sink_is_registered_for_remote_write_as_iwarp_requires(op, remote_write):
    """iWARP places READ responses as tagged writes into the reader's buffer: its sink needs
    remote write (rping.c registers its sink so; siw itself checks only local write, hardware
    RNICs check the STag's rights). The other ops' client buffers stay closed to the peer."""
    from test_protocol_handlers import SLOW

    from rdmacli.engine.client import ClientFlow
    from rdmacli.protocols.bw import BwClient
    from rdmacli.rdma import constants as C

    backend = FakeBackend()
    backend.script["connect"] = lambda cm, param: []  # stop before any answer: the buffers exist
    flow = ClientFlow(dst=SERVER, src=CLIENT, make_protocol=lambda: BwClient(op, 4096, 10), timeouts=SLOW,
                      backend=backend)  # fmt: skip
    flow.loop.call_later(0.5, flow.stop)
    try:
        flow.run()
    except Exception:
        pass
    conn = flow.all_conns[0]
    data = next(m for m in conn.mrs if m.length == 4096)
    assert bool(data.access & C.ACCESS_REMOTE_WRITE) is remote_write, (op, data.access)
    flow.close()


def test_the_mesh_tests_need_of_their_transport_what_their_wire_uses():
    from rdmacli.mesh.kinds import PAIR_CHECKS
    from rdmacli.probe.kinds import KINDS as PROBE_KINDS

    needs = {name: c.pair_kind().transport_needs() for name, c in PAIR_CHECKS.items()}
    assert needs == {"ping": (), "rping": (), "connect": (), "ud": (T.DATAGRAMS,), "bw": (T.IMMEDIATE,)}
    assert all(k.needs == (T.DATAGRAMS,) for k in PROBE_KINDS.values())
