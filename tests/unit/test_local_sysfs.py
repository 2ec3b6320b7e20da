"""This host's side of a failure, read from a sysfs tree laid out as the kernel lays out rxe's:
a 1024-entry GID table, mostly empty. The lab's tests/lab/test_local_causes.py proves the same
against real devices; these pin which files are read."""

from __future__ import annotations

import builtins
import os

import pytest

from rdmacli.diag.local import cause_for_address, local_cause

EMPTY = "0000:0000:0000:0000:0000:0000:0000:0000"


def v4_gid(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def make_rxe(root, name: str, netdev: str, ips: list[str], state: str = "4: ACTIVE"):
    ddir = root / name
    pdir = ddir / "ports" / "1"
    (pdir / "gids").mkdir(parents=True)
    (pdir / "gid_attrs" / "ndevs").mkdir(parents=True)
    (ddir / "parent").write_text(netdev + "\n")
    (pdir / "state").write_text(state + "\n")
    (pdir / "phys_state").write_text("5: LinkUp\n")
    gids = ["fe80:0000:0000:0000:0000:00ff:fe00:0001", *(v4_gid(ip) for ip in ips)]
    for i in range(1024):
        (pdir / "gids" / str(i)).write_text((gids[i] if i < len(gids) else EMPTY) + "\n")
    return ddir


@pytest.fixture
def opened(monkeypatch):
    """The paths opened (open() and os.open: read_sysfs's), so a test can say how much was read."""
    paths = []
    real, real_os = builtins.open, os.open

    def spy(path, *a, **kw):
        paths.append(str(path))
        return real(path, *a, **kw)

    def spy_os(path, *a, **kw):
        paths.append(str(path))
        return real_os(path, *a, **kw)

    monkeypatch.setattr(builtins, "open", spy)
    monkeypatch.setattr(os, "open", spy_os)
    return paths


def test_a_healthy_port_reads_a_handful_of_files(tmp_path, opened):
    make_rxe(tmp_path, "rxe_n01", "n01", ["10.77.1.1"])
    make_rxe(tmp_path, "rxe_n02", "n02", ["10.77.1.2"])
    assert local_cause("rxe_n02", 1, "10.77.1.2", sysfs=str(tmp_path)) is None
    assert len(opened) < 10, opened  # not the 1024-entry table


def test_a_whole_gid_table_is_read_and_devices_not_asked_for_are_not(tmp_path, opened):
    """A tree that is not this host's sysfs is never asked of a device (ibv_query_gid_table):
    its GID table read from files, whole; `names` leaves the other devices unread."""
    from rdmacli.diag.devices import list_devices, port_gids, queried_gids

    make_rxe(tmp_path, "rxe_n01", "n01", ["10.77.1.1"])
    make_rxe(tmp_path, "rxe_n02", "n02", ["10.77.1.2"])
    pdir = str(tmp_path / "rxe_n02" / "ports" / "1")
    assert queried_gids(pdir) is None
    assert [(g.index, g.ip) for g in port_gids(pdir)] == [(0, None), (1, "10.77.1.2")]
    assert len([p for p in opened if "/gids/" in p]) == 1024
    opened.clear()
    [dev] = list_devices(str(tmp_path), use_pyverbs=False, names={"rxe_n01"})
    assert dev.name == "rxe_n01" and [g.ip for g in dev.ports[0].gids] == [None, "10.77.1.1"]
    assert opened and not [p for p in opened if "rxe_n02" in p], opened


def test_a_port_that_is_down_names_it(tmp_path):
    make_rxe(tmp_path, "rxe_n04", "n04", [], state="1: DOWN")
    cause = local_cause("rxe_n04", 1, "10.77.1.4", sysfs=str(tmp_path))
    assert cause is not None and "rxe_n04 port 1 is DOWN" in cause.text


def test_an_address_that_left_the_gid_table(tmp_path):
    make_rxe(tmp_path, "rxe_n03", "n03", ["10.77.1.9"])
    cause = local_cause("rxe_n03", 1, "10.77.1.3", sysfs=str(tmp_path))
    assert cause is not None and "no GID for 10.77.1.3" in cause.text and "netdev n03" in cause.text


def test_a_removed_device(tmp_path):
    cause = local_cause("rxe_gone", 1, None, sysfs=str(tmp_path))
    assert cause is not None and "was removed" in cause.text


def test_an_address_on_no_interface_is_said_so(tmp_path):
    cause = cause_for_address("192.0.2.77", sysfs=str(tmp_path))  # TEST-NET-1: on no interface here
    assert cause is not None and "no interface of this host holds 192.0.2.77" in cause.text


def test_a_rate_bounds_measures_only_on_hardware(tmp_path, monkeypatch):
    """A hardware port's line rate bounds every rate measured through it; software RDMA's
    (rxe, siw: no bus device under it) is made up from its netdev, so it bounds nothing."""
    from rdmacli.diag import devices

    for name, hardware in (("mlx5_0", True), ("rxe0", False)):
        port = tmp_path / name / "ports" / "1"
        port.mkdir(parents=True)
        (port / "rate").write_text("100 Gb/sec (4X EDR)\n")
        if hardware:
            (tmp_path / name / "device").mkdir()
    monkeypatch.setattr(devices, "SYSFS", str(tmp_path))
    assert devices.rate_bound_gbps("mlx5_0", 1) == 100.0
    assert devices.rate_bound_gbps("rxe0", 1) is None and devices.port_rate_gbps("rxe0", 1) == 100.0
    assert devices.rate_bound_gbps("../etc", 1) is None
