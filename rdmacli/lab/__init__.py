"""The Soft-RoCE lab: a throw-away VM (virtme-ng + qemu) with two rxe devices on a veth pair."""

# The lab's fixed topology, inside the VM only (the VM has no network device).
SERVER = {"rxe": "rxe0", "netdev": "veth0", "ipv4": "10.77.0.1", "ipv6": "fd77::1"}
CLIENT = {"rxe": "rxe1", "netdev": "veth1", "ipv4": "10.77.0.2", "ipv6": "fd77::2"}
