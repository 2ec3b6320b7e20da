"""`rdmacli devices` against the kernel's own view (`rdma -j link`) and `ibv_devinfo -v`."""

from __future__ import annotations

import json
import re
import subprocess


def _rdma_links() -> list[dict]:
    return json.loads(
        subprocess.run(["rdma", "-j", "link"], capture_output=True, text=True, check=True).stdout
    )


def test_devices_json_matches_rdma_link(lab):
    r = lab.run("devices", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "rdmacli/1" and doc["exit_code"] == 0
    ours = {(d["name"], p["port"]): (d, p) for d in doc["data"]["devices"] for p in d["ports"]}
    links = _rdma_links()
    assert links, "the lab has rxe devices"
    for link in links:
        dev, port = ours[(link["ifname"], link["port"])]
        assert port["state"] == link["state"]
        assert port["phys_state"] == link["physical_state"]
        assert port["netdev"] == link["netdev"]
        assert link["netdev"] in dev["netdevs"]


def test_devices_json_matches_ibv_devinfo(lab):
    doc = json.loads(lab.run("devices", "--json").stdout)
    for dev in doc["data"]["devices"]:
        info = subprocess.run(
            ["ibv_devinfo", "-v", "-d", dev["name"]], capture_output=True, text=True, check=True
        ).stdout
        mtu = int(re.search(r"active_mtu:\s+(\d+)", info).group(1))
        layer = re.search(r"link_layer:\s+(\S+)", info).group(1)
        port = dev["ports"][0]
        assert port["active_mtu"] == mtu
        assert port["link_layer"] == layer
        transport = re.search(r"transport:\s+(\S+)", info).group(1)  # InfiniBand (IB and RoCE) or iWARP
        assert (port["transport"] == "iWARP") == (transport == "iWARP"), (port, transport)
        devinfo_gids = {g.lower() for g in re.findall(r"GID\[\s*\d+\]:\s+([0-9a-f:.]+)", info)}
        ours = {g["gid"] for g in port["gids"]}
        if transport == "iWARP":  # its GID is its MAC, which ibv_devinfo does not list: never an address
            assert ours and all(g["ip"] is None for g in port["gids"]), port
            continue
        assert ours and ours <= {_norm(g) for g in devinfo_gids}
        assert lab.server in {g["ip"] for d in doc["data"]["devices"] for p in d["ports"] for g in p["gids"]}


def _norm(gid: str) -> str:
    from rdmacli.diag.devices import format_gid

    return format_gid(gid)


def test_devices_table(lab):
    r = lab.run("devices", env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "rxe0" in r.stdout and "RoCE v2" in r.stdout and lab.server in r.stdout
