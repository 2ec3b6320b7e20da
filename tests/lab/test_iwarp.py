"""iWARP on real Soft-iWARP (siw, `rdmacli lab --iwarp`): every connected protocol against its C tool
both ways (rping, ucmatose, perftest's -R exchange) and against rdmacli itself; what iWARP has not
(datagrams, multicast, immediate data) refused in words, exit 3; a port nobody listens on
said as such (iWARP's rdma_connect refuses at once) and waited out under --wait; selftest, doctor
and devices speaking of the transport, not of GIDs it does not have."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from conftest import Flows, expect, summary, validate
from test_perftest_interop import perftest_bw, perftest_lat


@pytest.fixture(scope="module")
def iw(lab):
    """The lab with its addresses on siw0 (server) and siw1 (client)."""
    server, client = os.environ.get("RDMACLI_LAB_IWARP_SERVER"), os.environ.get("RDMACLI_LAB_IWARP_CLIENT")
    if not server or not client:
        if not os.environ.get("RDMACLI_LAB"):
            pytest.skip("no iWARP port here (RDMACLI_LAB_IWARP_SERVER / RDMACLI_LAB_IWARP_CLIENT unset)")
        pytest.fail(
            "no iWARP addresses: `make lab-test` boots the lab with --iwarp "
            "(or set RDMACLI_LAB_IWARP_SERVER / RDMACLI_LAB_IWARP_CLIENT on an iWARP host)"
        )
    got = copy.copy(lab)
    got.server, got.client = server, client
    return got


@pytest.fixture
def iflows(iw, servers, c_tool) -> Flows:
    return Flows(iw, servers, c_tool)


def refused(r: subprocess.CompletedProcess, *words: str) -> dict:
    """A refusal of what the transport has not: exit 3, cause transport_unsupported, in words."""
    assert r.returncode == 3, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["error"]["cause"] == "transport_unsupported", doc["error"]
    for w in ("iWARP", *words):
        assert w in doc["error"]["message"] + doc["error"]["hint"], doc["error"]
    assert "GID" not in doc["error"]["message"], doc["error"]
    return doc


# -- rping -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size,count", [(64, 100), (65535, 5)])
def test_ping_against_rping_server_on_iwarp(iw, iflows, size, count):
    srv = iflows.c_serve("rping", "-s", "-a", iw.server, "-S", size, "-V", port=7174)
    doc = expect(
        iflows.run("ping", iw.server, "-I", iw.client, "-C", count, "-S", size, "-V"), connections_passed=1
    )
    assert doc["connections"][0]["pings_validated"] == count
    assert doc["connections"][0]["device"] == "siw1"
    assert "data mismatch" not in iflows.done(srv)[1]


def test_rping_client_against_listen_ping_on_iwarp(iw, iflows):
    srv = iflows.serve("listen", "--ping", "-S", 4096)
    out = iflows.c_run("rping", "-c", "-a", iw.server, "-I", iw.client, "-C", 50, "-S", 4096, "-V", "-v")
    assert len([ln for ln in out.splitlines() if ln.startswith("ping data: ")]) == 50
    doc = expect(iflows.done(srv)[0], connections_passed=1)
    assert doc["connections"][0]["pings_served"] == 50 and doc["connections"][0]["device"] == "siw0"


# -- ucmatose ----------------------------------------------------------------------------------


def test_ucmatose_client_against_listen_on_iwarp(iw, iflows):
    srv = iflows.serve("listen", "-c", 4, "-C", 10, "-S", 1024)
    out = iflows.c_run("ucmatose", "-s", iw.server, "-b", iw.client, "-c", 4, "-C", 10, "-S", 1024)
    assert "data transfers complete" in out and "return status 0" in out
    expect(iflows.done(srv)[0], connections_passed=4, messages_received=40, bytes_received=40 * 1024)


def test_connect_to_ucmatose_server_on_iwarp(iw, iflows):
    srv = iflows.c_serve("ucmatose", "-b", iw.server, "-c", 16, "-C", 10, "-S", 64, port=7471)
    doc = iflows.run("connect", iw.server, "-b", iw.client, "-c", 16, "-C", 10, "-S", 64)
    expect(doc, connections_passed=16, messages_received=160, messages_sent=160)
    assert "return status 0" in iflows.done(srv)[1]


# -- perftest (-R: rdma_cm) --------------------------------------------------------------------

PORT = 18699
PERF = ["-R", "-F", "-p", str(PORT)]


@pytest.mark.parametrize(
    "tool,cmd,op",
    [("ib_write_bw", "bw", "write"), ("ib_read_bw", "bw", "read"), ("ib_send_lat", "lat", "send")],
)
def test_rdmacli_faces_a_perftest_server_on_iwarp(iw, iflows, tool, cmd, op):
    size = ["-s", "4096", "-n", "500"] if cmd == "bw" else ["-s", "8", "-n", "500"]
    srv = iflows.c_serve(tool, *PERF, "-d", "siw0", "--source_ip", iw.server, *size, port=PORT)
    doc = iflows.run(
        cmd, iw.server, "-I", iw.client, "-p", PORT, "--op", op, "--perftest", "-S", size[1], "-C", 500
    )
    [c] = [c for c in doc["connections"] if c.get("op") == op]
    _, out = iflows.done(srv)
    if cmd == "bw":
        assert c["messages_sent"] == 500 and perftest_bw(out) > 0, (c, out)
    else:
        assert c["iterations"] == 500 and perftest_lat(out)[0] == 500, (c, out)


@pytest.mark.parametrize("tool,cmd,op", [("ib_write_bw", "bw", "write"), ("ib_send_lat", "lat", "send")])
def test_a_perftest_client_faces_rdmacli_listen_on_iwarp(iw, iflows, tool, cmd, op):
    n = ["-s", "4096", "-n", "500"] if cmd == "bw" else ["-s", "8", "-n", "500"]
    srv = iflows.serve("listen", "-p", PORT, "--perftest", f"{op}_{cmd}", "-S", n[1], "-C", 500)
    out = iflows.c_run(tool, *PERF, "-d", "siw1", "--source_ip", iw.client, *n, iw.server)
    sdoc, _ = iflows.done(srv)
    assert sdoc["result"] == "pass", sdoc
    if cmd == "bw":
        assert perftest_bw(out) > 0
    else:
        assert perftest_lat(out)[0] == 500, out


# -- rdmacli against itself --------------------------------------------------------------------


@pytest.mark.parametrize("op", ["write", "read", "send"])
def test_bw_against_itself_on_iwarp(iw, iflows, op):
    srv = iflows.serve("listen", "--bw", "-p", 18515)
    doc = expect(
        iflows.run("bw", iw.server, "-I", iw.client, "-p", 18515, "--op", op, "-S", 65536, "-C", 200)
    )
    c = doc["connections"][0]
    assert c["bytes_sent"] == 200 * 65536 and c["gbps"] > 0, c
    expect(iflows.done(srv)[0])


def test_lat_send_against_itself_on_iwarp(iw, iflows):
    srv = iflows.serve("listen", "--lat", "-p", 18516)
    doc = expect(iflows.run("lat", iw.server, "-I", iw.client, "-p", 18516, "--op", "send", "-C", 300))
    assert doc["connections"][0]["iterations"] == 300
    expect(iflows.done(srv)[0])


# -- what iWARP has not, refused up front ------------------------------------------------------


def test_ud_and_multicast_are_refused_on_iwarp(iw):
    refused(iw.run("connect", "--ud", iw.server, "-b", iw.client, "--json"), "datagrams", "connect")
    refused(iw.run("listen", "--ud", "-b", iw.server, "--json", "--timeout", "20"), "datagrams")
    refused(iw.run("mcast", "239.1.1.7", "-b", iw.client, "--json", "--timeout", "20"), "multicast")


def test_immediate_data_is_refused_on_iwarp(iw):
    refused(iw.run("lat", iw.server, "-I", iw.client, "--op", "write", "--json"), "immediate", "--op send")
    refused(iw.run("bw", iw.server, "-I", iw.client, "--bidir", "--json"), "immediate", "--bidir")


# -- nobody listening, as on RoCE ------------------------------------------------------------


def test_nothing_listening_on_iwarp_is_said_as_on_roce(iw):
    r = iw.run("events", iw.server, "-b", iw.client, "-p", "7806", "--json")
    assert r.returncode == 5, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["cause"] == "nobody_listening" and "nothing is listening" in err["message"], err
    assert "GID" not in err["message"], err


def test_a_client_waits_for_a_late_server_on_iwarp(iw, servers):
    client = iw.spawn("connect", iw.server, "-b", iw.client, "-p", "7807", "--wait", "60", "--json-lines")
    seen = []
    for line in client.stdout:  # up to the client's `waiting` record: it was refused, and waits
        seen.append(line)
        if json.loads(line)["type"] == "waiting":
            break
    assert seen and json.loads(seen[-1])["type"] == "waiting", seen
    servers([*iw.rdmacli, "listen", "-b", iw.server, "-p", "7807", "--json-lines"], ready=True)
    out, err = client.communicate(timeout=120)
    assert client.returncode == 0, out + err
    expect(summary(out), connections_passed=1)


# -- selftest, doctor, devices -----------------------------------------------------------------


def test_selftest_on_iwarp_marks_datagrams_not_applicable(iw):
    r = iw.run("selftest", "--server-address", iw.server, "--json", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    verdicts = {row["protocol"]: row["verdict"] for row in doc["data"]["rows"]}
    assert verdicts == {"connect": "pass", "ping": "pass", "ud": "n/a", "mcast": "n/a"}, doc["data"]
    assert doc["data"]["client_address"] == iw.client and doc["totals"]["protocols_passed"] == 2


def test_doctor_and_devices_name_the_transport(iw):
    r = iw.run("doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    checks = {c["check"]: c for c in json.loads(r.stdout)["data"]["checks"]}
    assert "iWARP (no unreliable datagrams" in checks["port siw0/1"]["detail"], checks["port siw0/1"]
    assert "RoCE over Ethernet" in checks["port rxe0/1"]["detail"], checks["port rxe0/1"]
    assert not [n for n in checks if n.startswith("gid 10.78.")], checks  # no RoCE GID asked of iWARP
    r = iw.run("devices", "--json")
    ports = {d["name"]: d["ports"][0] for d in json.loads(r.stdout)["data"]["devices"]}
    assert ports["siw0"]["transport"] == "iWARP" and ports["siw0"]["netdev"] == "veth2", ports["siw0"]
    assert all(g["ip"] is None for g in ports["siw0"]["gids"]), ports["siw0"]
    assert ports["rxe0"]["transport"] == "RoCE", ports["rxe0"]


def test_each_ports_gids_as_the_device_answers_are_what_sysfs_lists(iw):
    """ibv_query_gid_table (one call a device) stands for sysfs's GID table (a read an entry,
    1024 a Soft-RoCE port): the same entries, types and netdevs on RoCE; on iWARP, whose kernel
    keeps no GID cache, sysfs's entry is what port_gids gives."""
    from rdmacli.diag.devices import SYSFS, listdir, port_gids, queried_gids, sysfs_gids

    seen = set()
    for device in listdir(SYSFS):
        for port in listdir(os.path.join(SYSFS, device, "ports")):
            pdir = os.path.join(SYSFS, device, "ports", port)
            listed, asked = sysfs_gids(pdir), queried_gids(pdir)
            assert listed, (device, port)  # a link-local GID at least; siw: its MAC
            assert [(g.index, g.gid, g.type, g.netdev) for g in port_gids(pdir)] == listed, (device, asked)
            if device.startswith("rxe"):
                assert asked == listed and any(kind == "RoCE v2" for _, _, kind, _ in asked), (device, asked)
            seen.add(device[:3])
    assert seen == {"rxe", "siw"}, seen


# -- a mesh of iWARP nodes ---------------------------------------------------------------------

IW_NODES = 4


@pytest.fixture(scope="module")
def iwarp_mesh(iw, tmp_path_factory):
    """Four nodes i01..i04, each a veth on one bridge with its own siw device, 10.79.0.K; the
    map file. Made here, in the rdma suite's boot, and removed again after."""
    ip = ["link add iwbr type bridge", "link set iwbr up"]
    rdma, keys = [], []
    for k in range(1, IW_NODES + 1):
        nd = f"iw{k:02d}"
        ip += [f"link add {nd} type veth peer name {nd}b", f"link set {nd}b master iwbr up",
               f"addr add 10.79.0.{k}/24 dev {nd}", f"link set {nd} up"]  # fmt: skip
        keys += [f"net.ipv4.conf.{nd}.accept_local=1", f"net.ipv4.conf.{nd}.rp_filter=0"]
        rdma.append(f"link add siw_{nd} type siw netdev {nd}")
    subprocess.run(["ip", "-batch", "-"], input="\n".join(ip) + "\n", text=True, check=True)
    subprocess.run(["sysctl", "-qw", *keys], check=True)
    subprocess.run(["rdma", "-b", "-"], input="\n".join(rdma) + "\n", text=True, check=True)
    mapfile = tmp_path_factory.mktemp("iwmesh") / "map"
    mapfile.write_text("".join(f"i{k:02d} 10.79.0.{k}\n" for k in range(1, IW_NODES + 1)))
    yield str(mapfile)
    for k in range(1, IW_NODES + 1):
        subprocess.run(["rdma", "link", "delete", f"siw_iw{k:02d}"], capture_output=True)
        subprocess.run(["ip", "link", "delete", f"iw{k:02d}"], capture_output=True)
    subprocess.run(["ip", "link", "delete", "iwbr"], capture_output=True)


def iw_mesh(mapfile: str, nodes: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-m", "rdmacli", "mesh", nodes, "--launcher", "exec", "--map", mapfile,
           "--launch-timeout", "180", "--round-time", "6", "--count", "10", "--json", *args]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        return r, validate(json.loads(r.stdout))
    except ValueError:
        pytest.fail(f"no JSON summary (exit {r.returncode}): {r.stderr[-3000:]}")


def test_a_mesh_of_iwarp_nodes_names_a_node_whose_port_is_down(iwarp_mesh):
    """--test ping on four siw nodes, i03's netdev down: its three pairs fail DOWN, said by i03,
    i03 alone is blamed, and the three pairs among the others pass."""
    subprocess.run(["ip", "link", "set", "iw03", "down"], check=True)
    try:
        r, doc = iw_mesh(iwarp_mesh, "i[01-04]", "--test", "ping")
    finally:
        subprocess.run(["ip", "link", "set", "iw03", "up"], check=True)
    assert r.returncode == 1, doc["error"]
    pairs = doc["data"]["pairs"]
    dead = [p for p in pairs if "i03" in (p["a"], p["b"])]
    assert len(dead) == 3 and all(p["result"] == "fail" and p["cause"] == "DOWN" for p in dead), dead
    assert all(p["result"] == "pass" and p["rtt_p50_us"] > 0 for p in pairs if p not in dead), pairs
    assert [b["node"] for b in doc["data"]["blame"]["nodes"]] == ["i03"], doc["data"]["blame"]
    assert not doc["data"]["blame"]["links"] and not doc["data"]["blame"]["nics"], doc["data"]["blame"]


@pytest.mark.parametrize("test", ["rping", "connect"])
def test_connection_tests_pass_on_an_iwarp_mesh(iwarp_mesh, test):
    r, doc = iw_mesh(iwarp_mesh, "i[01-02]", "--test", test)
    assert r.returncode == 0 and doc["totals"]["pairs_passed"] == 1, doc["error"] or doc["data"]["pairs"]


@pytest.mark.parametrize("test,lacks", [("probe", "datagrams"), ("bw", "immediate data")])
def test_what_iwarp_has_not_is_refused_on_an_iwarp_mesh_in_words(iwarp_mesh, test, lacks):
    """--test probe (UD) and --test bw (both ways at once: immediate data): every node says its
    transport has not what the test needs, before round 1, as its own environment (ENV); no link
    and no NIC is blamed for what the transport cannot do."""
    r, doc = iw_mesh(iwarp_mesh, "i[01-02]", "--test", test)
    assert r.returncode != 0
    text = json.dumps(doc)
    assert "iWARP" in text and lacks in text and "mesh --test ping" in text, text[-2000:]
    assert all(p["cause"] == "ENV" for p in doc["data"]["pairs"]), doc["data"]["pairs"]
    assert not doc["data"]["blame"]["links"], doc["data"]["blame"]


def test_devices_table_shows_each_ports_transport(iw):
    r = iw.run("devices", env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    ports = r.stdout.split("GIDs")[0]  # the first table: one row a port
    rows = {ln.split()[1]: ln for ln in ports.splitlines() if ln.startswith("│ ") and "/1 " in ln}
    assert "iWARP" in rows["siw0/1"] and "veth2" in rows["siw0/1"], r.stdout
    assert "RoCE" in rows["rxe0/1"] and "veth0" in rows["rxe0/1"], r.stdout
