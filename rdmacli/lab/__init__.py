"""The Soft-RoCE lab: a throw-away VM (virtme-ng + qemu) with two rxe devices on a veth pair."""

# The lab's fixed topology, inside the VM only (the VM has no network device).
SERVER = {"rxe": "rxe0", "netdev": "veth0", "ipv4": "10.77.0.1", "ipv6": "fd77::1"}
CLIENT = {"rxe": "rxe1", "netdev": "veth1", "ipv4": "10.77.0.2", "ipv6": "fd77::2"}

# `rdmacli lab --nodes N`: node k (1-based) is netdev nK on one bridge, its own rxe device,
# 10.77.1.K, named nKK. All share one namespace (Soft-RoCE does not cross namespaces on 6.1).
MAX_NODES = 64
NODES_BRIDGE = "labbr"
NODES_MAP = "/tmp/rdmacli-lab-nodes"


def node(k: int) -> dict:
    return {"name": f"n{k:02d}", "netdev": f"n{k:02d}", "port": f"n{k:02d}b", "rxe": f"rxe_n{k:02d}",
            "ipv4": f"10.77.1.{k}"}  # fmt: skip
