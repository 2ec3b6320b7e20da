"""The Soft-RoCE lab: a throw-away VM (virtme-ng + qemu) with two rxe devices on a veth pair, and on
request (`--iwarp`) two Soft-iWARP devices on a second pair."""

# The lab's fixed topology, inside the VM only (the VM has no network device).
SERVER = {"rxe": "rxe0", "netdev": "veth0", "ipv4": "10.77.0.1", "ipv6": "fd77::1"}
CLIENT = {"rxe": "rxe1", "netdev": "veth1", "ipv4": "10.77.0.2", "ipv6": "fd77::2"}
# `rdmacli lab --iwarp`: siw0 and siw1 on their own veth pair and subnet, beside the rxe pair (a
# netdev carrying both would leave the CM to choose between two devices for one address).
IWARP_SERVER = {"siw": "siw0", "netdev": "veth2", "ipv4": "10.78.0.1"}
IWARP_CLIENT = {"siw": "siw1", "netdev": "veth3", "ipv4": "10.78.0.2"}

# `rdmacli lab --nodes N`: node k (1-based) is netdev nKK on one bridge, its own rxe device,
# 10.77.1.K, named nKK. All share one namespace (Soft-RoCE does not cross namespaces on 6.1).
# With --rails R, node k has R NICs: rail 0 as above, rail r netdev nKKr{r} on bridge labbr{r},
# rxe_nKKr{r}, 10.77.{1+r}.K (each rail its own bridge and subnet, as rails have their own leaf).
MAX_NODES = 64
MAX_RAILS = 4
NODES_BRIDGE = "labbr"
NODES_MAP = "/tmp/rdmacli-lab-nodes"  # rail 0 only: `NODE ADDRESS`
RAILS_MAP = "/tmp/rdmacli-lab-rails"  # every rail: `NODE ADDRESS0 ADDRESS1 ...`


def node(k: int, rail: int = 0) -> dict:
    tail = f"r{rail}" if rail else ""
    return {"name": f"n{k:02d}", "netdev": f"n{k:02d}{tail}", "port": f"n{k:02d}{tail}b",
            "rxe": f"rxe_n{k:02d}{tail}", "ipv4": f"10.77.{1 + rail}.{k}",
            "bridge": NODES_BRIDGE + (str(rail) if rail else "")}  # fmt: skip
