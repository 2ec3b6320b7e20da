"""Each command's examples, said once: its `--help` epilog, its man page's EXAMPLES and the docs
site's CLI reference read them (scripts/gendocs.py). Keys are command paths ("watch status").

Every example names only options its command has: tests/unit/test_help_truth.py parses each one
with the command's own parser.
"""

from __future__ import annotations

EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "rdmacli": [
        ("Serve on one host, connect from another", "rdmacli listen\nrdmacli connect 192.0.2.1"),
        ("Everything in a throw-away Soft-RoCE VM", "rdmacli lab run -- rdmacli devices"),
    ],
    "connect": [
        ("Eight connections, 100 messages of 4 KiB each way", "rdmacli connect 192.0.2.1 -c 8 -C 100 -S 4K"),
        ("Against udaddy -b 192.0.2.1, with JSON for a script", "rdmacli connect 192.0.2.1 --ud --json"),
        ("Watch every CM event", "rdmacli connect 192.0.2.1 --events"),
        ("A server that starts later: ask again for up to 30 s", "rdmacli connect 192.0.2.1 --wait 30"),
    ],
    "listen": [
        ("A ucmatose-compatible server for one client", "rdmacli listen"),
        ("An rping -s replacement that serves clients until Ctrl-C", "rdmacli listen --ping --persistent"),
        ("A udaddy server on one address", "rdmacli listen --ud -b 192.0.2.1"),
        ("The server of `rdmacli bw`", "rdmacli listen --bw"),
        ("The server of perftest's own client (ib_write_bw -R HOST)", "rdmacli listen --perftest write_bw"),
    ],
    "ping": [
        ("Ten validated pings", "rdmacli ping 192.0.2.1 -C 10 -V"),
        (
            "Against rping -s -a 192.0.2.1, with JSON lines per ping",
            "rdmacli ping 192.0.2.1 -C 1000 --json-lines",
        ),
    ],
    "mcast": [
        ("Receive 10 datagrams", "rdmacli mcast 239.1.1.1 -b 192.0.2.1 -C 10"),
        ("Send to mckey receivers", "rdmacli mcast 239.1.1.1 --send"),
    ],
    "events": [
        ("Time the connection steps of 32 connections", "rdmacli events 192.0.2.1 -c 32"),
        ("The passive side", "rdmacli events --listen"),
    ],
    "devices": [("Every device and port", "rdmacli devices"), ("For scripts", "rdmacli devices --json")],
    "doctor": [
        ("This host only", "rdmacli doctor"),
        (
            "The path to a server, and whether anything listens on its port",
            "rdmacli doctor 192.0.2.1 -p 7471 --json",
        ),
    ],
    "check": [
        ("This node's health, every port", "rdmacli check"),
        (
            "Two 400 Gb/s rails, one line for node-problem-detector",
            "rdmacli check --expect mlx5_0:1=400 --expect mlx5_1:1=400 --format npd",
        ),
        ("Install the NHC check", "rdmacli check --print-config nhc > /etc/nhc/scripts/rdmacli.nhc"),
        (
            "As Slurm's HealthCheckProgram: drain this node, resume it when healthy (its own drains only)",
            "rdmacli check --slurm --format line",
        ),
    ],
    "selftest": [
        ("A CI smoke test", "rdmacli selftest --json"),
        (
            "Only the datagram protocols, with larger messages",
            "rdmacli selftest --protocol ud --protocol mcast -S 1024",
        ),
    ],
    "bw": [
        ("The server side (another host)", "rdmacli listen --bw"),
        ("RDMA WRITE bandwidth for 10 s, 64 KiB messages", "rdmacli bw 10.0.0.1 --duration 10"),
        ("Four QPs of RDMA READ, 1 MiB each, JSON", "rdmacli bw 10.0.0.1 --op read -S 1M --qps 4 --json"),
        ("Both ways at once (ib_write_bw -b)", "rdmacli bw 10.0.0.1 --bidir"),
        ("Every size, 2 B to 8 MiB, 5000 messages each (ib_write_bw -a)", "rdmacli bw 10.0.0.1 -a"),
        ("Against perftest's own server (ib_write_bw -R -a)", "rdmacli bw 10.0.0.1 --perftest -a"),
    ],
    "lat": [
        ("The server side (another host)", "rdmacli listen --lat"),
        ("SEND/RECV latency, 10000 iterations of 64 bytes", "rdmacli lat 10.0.0.1 -C 10000"),
        ("RDMA WRITE with immediate", "rdmacli lat 10.0.0.1 --op write -S 64"),
        ("Every size from 8 B to 1 MiB (ib_send_lat -a)", "rdmacli lat 10.0.0.1 -a"),
        ("Against perftest's own server (ib_send_lat -R)", "rdmacli lat 10.0.0.1 --perftest"),
    ],
    "mesh": [
        (
            "Every pair of 128 nodes over ssh, tested through their -ib names",
            "rdmacli mesh 'node[001-128]' --address-template '{node}-ib'",
        ),
        (
            "Inside a Slurm allocation, a quick sweep, JSON for a script",
            'rdmacli mesh "$SLURM_JOB_NODELIST" --launcher srun --quick --json > mesh.json',
        ),
        ("Compare with last week's run", "rdmacli mesh @rack3 --baseline mesh-last-week.json"),
        ("Bandwidth of every pair, both ways", "rdmacli mesh @rack3 --test bw --round-time 6"),
        ("The latency-and-loss matrix of every NIC pair in one phase", "rdmacli mesh @gpu --test probe"),
        (
            "Inside Slurm, drain the nodes it blames (none if over 2 %), resume those it cleared",
            'rdmacli mesh "$SLURM_JOB_NODELIST" --launcher srun --slurm-drain --max-drain 2%',
        ),
        (
            "Every NIC of every node, named devices, every rail pair",
            "rdmacli mesh @gpu --rails mlx5_0,mlx5_3 --cross-rail",
        ),
        (
            "Eight lab nodes, agents on this machine",
            'rdmacli lab --nodes 8 run -- sh -c \'rdmacli mesh "$RDMACLI_LAB_NODES" --launcher exec '
            '--map "$RDMACLI_LAB_NODES_MAP"\'',
        ),
    ],
    "mesh-agent": [
        (
            "What a launcher runs on node 3 of 8 (by hand, to debug one node): the run spec "
            "is one JSON line, on stdin or in a file",
            "rdmacli mesh-agent --rank 2 --spec run.json",
        ),
        (
            "A spec of two nodes, written by hand",
            'echo \'{"v":1,"run_id":"0123456789abcdef","names":["n1","n2"],'
            '"addresses":[["10.0.0.1"],["10.0.0.2"]],"start_at":1790000000}\' '
            "| rdmacli mesh-agent --rank 0",
        ),
    ],
    "watch": [
        (
            "This node's agent, its metrics on the management address (as the unit runs it)",
            "rdmacli watch run --map /etc/rdmacli/watch.map --metrics 192.168.0.5:9590",
        ),
        ("Reload the map (nodes added or removed): SIGHUP", "systemctl reload rdmacli-watch"),
        (
            "What every agent names now, as one blame",
            "rdmacli watch status 'n[001-128]' --map /etc/rdmacli/watch.map --json",
        ),
    ],
    "watch run": [
        ("The agent as the unit runs it", "rdmacli watch run --map /etc/rdmacli/watch.map"),
        (
            "Nodes from a ClusterShell group, one rail each, metrics on the management address",
            "rdmacli watch run --nodes @rdma --address-template '{node}-ib' --metrics 192.168.0.5:9590",
        ),
    ],
    "watch key": [
        ("A key for the fabric", "rdmacli watch key /etc/rdmacli/watch.key"),
        (
            "On every node, as the agent's credential",
            "clush -w @rdma --copy /etc/rdmacli/watch.key --dest /etc/rdmacli/",
        ),
    ],
    "watch unit": [
        ("Install the agent's unit", "rdmacli watch unit > /etc/systemd/system/rdmacli-watch.service"),
        ("Then enable it", "systemctl daemon-reload && systemctl enable --now rdmacli-watch"),
        (
            "/metrics with TLS and basic auth (systemctl edit rdmacli-watch)",
            "LoadCredential=web.yml:/etc/rdmacli/web.yml (and each file it names); "
            'Environment="RDMACLI_WATCH_ARGS=--metrics 192.168.0.5:9590 '
            '--web-config-file /run/credentials/rdmacli-watch.service/web.yml"',
        ),
    ],
    "watch daemonset": [
        (
            "The agent on every RDMA node of a Kubernetes cluster",
            "rdmacli watch daemonset > rdmacli-watch.yaml",
        ),
        ("Then, the map and the secrets made", "kubectl apply -f rdmacli-watch.yaml"),
    ],
    "watch show": [
        ("This node's agent's verdicts, one JSON line", "rdmacli watch show"),
        ("An agent on another port", "rdmacli watch show -p 7900"),
    ],
    "watch status": [
        ("Every node of the map, over ssh", "rdmacli watch status 'n[001-128]' --map /etc/rdmacli/watch.map"),
        (
            "Agents run with --pairs group: say so, and get JSON",
            "rdmacli watch status @gpu --map /etc/rdmacli/watch.map --pairs group --json",
        ),
        (
            "Drain in Slurm the nodes they blame (at most 2 % of them), resume those they cleared",
            "rdmacli watch status @gpu --map /etc/rdmacli/watch.map --slurm-drain --max-drain 2%",
        ),
    ],
    "lab": [
        ("A shell with rxe0 and rxe1", "rdmacli lab shell"),
        ("The test suite on real Soft-RoCE", "rdmacli lab run -- python -m pytest -m rdma"),
        ("Eight nodes of two rails each", "rdmacli lab --nodes 8 --rails 2 shell"),
    ],
    "lab run": [
        ("One command in the VM, exiting with its status", "rdmacli lab run -- rdmacli selftest"),
        (
            "A mesh of eight lab nodes",
            'rdmacli lab run --nodes 8 -- sh -c \'rdmacli mesh "$RDMACLI_LAB_NODES" --launcher exec '
            '--map "$RDMACLI_LAB_NODES_MAP"\'',
        ),
    ],
    "lab shell": [
        ("A terminal inside the VM (Ctrl-] ends it)", "rdmacli lab shell"),
        ("Four nodes of two rails each", "rdmacli lab shell --nodes 4 --rails 2"),
    ],
}


def epilog(path: str) -> str | None:
    """The Examples section of `path`'s --help, or None; `\\b` keeps click from rewrapping."""
    rows = EXAMPLES.get(path)
    if not rows:
        return None
    lines = ["\b", "Examples:"]
    for title, cmdline in rows:
        lines.append(f"  {title}:")
        lines.extend(f"    $ {line}" for line in cmdline.split("\n"))
    return "\n".join(lines)
