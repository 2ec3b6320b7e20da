"""The Soft-RoCE lab: a throw-away VM (virtme-ng + qemu) with two rxe devices on a veth pair."""

# The lab's fixed topology, inside the VM only (the VM has no network device).
SERVER = {"rxe": "rxe0", "netdev": "veth0", "ipv4": "10.77.0.1", "ipv6": "fd77::1"}
CLIENT = {"rxe": "rxe1", "netdev": "veth1", "ipv4": "10.77.0.2", "ipv6": "fd77::2"}

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
