"""Generates man/*.1 and completions/* from the click tree (`make docs`); build time only.

OPTIONS and SYNOPSIS come from the commands themselves, so they cannot drift (tests/unit/
test_docs.py regenerates and compares); the hand-written parts (examples, notes) live here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import click
from benchpage import benchmarks_page
from mdgen import GENERATED, md_cell

from rdmacli import __version__
from rdmacli.cli import COMMANDS, cli
from rdmacli.cli.examples import EXAMPLES
from rdmacli.mesh.contract import SPEC_FIELDS
from rdmacli.mesh.records import described
from rdmacli.protocols.table import PROTOCOLS

DATE = "2026-11-22"
SEE_ALSO = ["rdma_cm(7)", "rping(1)", "ucmatose(1)", "udaddy(1)", "mckey(1)", "rdma(8)"]
EXIT_STATUS = [
    ("0", "Success: every connection, message and check passed."),
    ("1", "The test ran and failed: loss, data mismatch, a peer that ended early."),
    ("2", "Usage error: bad option or value (also a UD size above the active MTU)."),
    (
        "3",
        "Local environment: no RDMA device, permissions, locked-memory limit, missing tools, a "
        "launcher (srun, ssh) that could not start the agents.",
    ),
    ("4", "Address or route resolution failed (ADDR_ERROR, ROUTE_ERROR)."),
    ("5", "Rejected or unreachable (REJECTED, UNREACHABLE, CONNECT_ERROR)."),
    ("6", "rdmacli's own deadline expired."),
    (
        "128+N",
        "Stopped by signal N: 130 Ctrl-C (SIGINT), 129 SIGHUP, 143 SIGTERM; everything is "
        "torn down and the summary (JSON too) is still printed. Events that had already arrived "
        "(a client's disconnect) are handled first, so a finished client counts as passed; a "
        "signal during teardown, after the run ended, leaves its result as it was. ping and lat "
        "follow ping(8): a deadline or a signal after answered pings is a normal end (exit 0), "
        "no answer at all exit 1.",
    ),
]
ENVIRONMENT = [
    ("NO_COLOR", "Disables colour and the live event table."),
    ("RDMACLI_DEBUG", "Show the Python traceback of an internal error instead of a summary."),
    (
        "RDMACLI_DATA_PATH",
        "python: measure with the Python loops even where the native data path is built "
        "(the summary's data_path says which loop measured).",
    ),
    (
        "RDMACLI_CM_PATH",
        "python: connect's and events' client connections, and the connections listen serves "
        "for connect's exchange, run on the Python engine (the reference) even where the "
        "extension is built. Unset: they run in C (native/cmrun.c, cmserve.c: the CM events read, "
        "the QPs made, the exchange posted and reaped, each step stamped at its event's read; a "
        "server's requests still decided by Python) where the extension is built and the run "
        "needs nothing only Python does (--wait, --tos, --ack-timeout, --busy-poll, "
        "--persistent); the summary's data_path says which ran.",
    ),
    (
        "RDMACLI_NIC_CLOCK",
        "off: lat's client never asks for the NIC's completion timestamps (the summary's "
        "timestamps says which clock measured, timestamps_why why not the NIC's). ex: a CQ made "
        "as an ibv_cq_ex without them (a test of that poll path on a device that has none).",
    ),
]
# what a run looked like in the lab, for the man page (captured by hand; see the README)
LOSSY_NODE_CAPTURE = (Path(__file__).parent / "captures" / "mesh-lossy-node.txt").read_text().rstrip()
TWO_RAILS_CAPTURE = (Path(__file__).parent / "captures" / "mesh-two-rails.txt").read_text().rstrip()


def watch_metrics() -> str:
    """`rdmacli watch`'s series, each with its type and help, read from its registry (one
    source: what an agent serves is what the manual lists)."""
    from prometheus_client import Counter

    from rdmacli.watch.metrics import WatchMetrics

    out = []
    for c in WatchMetrics("doc").registry._collector_to_names:
        name = getattr(c, "_name", None)
        if name is None:
            continue
        name += "_total" if isinstance(c, Counter) else ""
        out.append(f"{name} ({c._type}: {c._documentation[0].lower()}{c._documentation[1:]})")
    return "; ".join(out)


EXTRA = {
    "rdmacli": {
        "description": "Each subcommand speaks the wire protocol of one librdmacm utility, so it "
        "can face that tool from either side. Human output goes to standard "
        "error; summaries and JSON go to standard output.",
    },
    "connect": {
        "notes": "Against an rdmacli server the count and size travel in the connection "
        "request's private data; ucmatose and udaddy ignore it. Client parameters "
        "follow cmatose.c: responder_resources 1, initiator_depth 1, retry_count 5, "
        "rnr_retry_count 0.",
    },
    "listen": {
        "notes": "Without --persistent the server exits after -c connections have finished. "
        "Requests whose parameters exceed --max-size are rejected with the reason in "
        "the reject's private data (IB CM reason 28); a run in which every client was rejected "
        "fails (exit status 1). Waiting: the server waits for its first client without a "
        "deadline, as people start clients minutes later (bound it with --wait or --timeout); "
        "once a client has arrived, --connect-timeout covers the accept and --idle-timeout the "
        "data. A client that is sending while the server's ESTABLISHED has still not come halfway "
        "through --connect-timeout (its RTU lost) is taken as connected: the server tells the CM "
        "so (rdma_notify(3), IBV_EVENT_COMM_EST). "
        "A deadline is judged after what has already arrived is handled: a busy server is not "
        "a silent client. With --ping the buffer follows the client: an rdmacli client's request, a C "
        "rping client's first advert, up to --max-size.",
    },
    "ping": {
        "notes": "Unlike rping(1), whose manual says the default size is 100, the default "
        "size here and in rping's code is 64 bytes. Without -C the test runs until "
        "Ctrl-C, then prints the statistics.",
    },
    "mcast": {
        "notes": "Start receivers before senders: datagrams sent before a receiver joined "
        "are lost. A receiver waits for its sender's first datagram without a deadline "
        "(bound it with --wait or --timeout); the --idle-timeout deadline starts with the "
        "first datagram. Soft-RoCE cannot block multicast loopback; --no-loopback then "
        "fails with exit status 3.",
    },
    "events": {},
    "devices": {},
    "doctor": {
        "notes": "Checks run cheapest first. Memlock below 8 MiB is a failure, or a warning "
        "for a process with CAP_IPC_LOCK (root), which the limit does not bind.",
    },
    "check": {
        "notes": "The counters are judged against a baseline kept in --state-dir between checks: "
        "the first check (or the first after a boot, or --rebaseline) takes it and judges no "
        "counter; any increase of link_downed, rnr_nak_retry_err or excessive_buffer_overrun_errors "
        "fails, symbol_error and port_rcv_errors fail above 120 an hour (counted over an hour at "
        "least); the baseline rolls forward an hour after it was taken. A port the baseline has and "
        "sysfs has not fails until it is back, the host reboots or --rebaseline. The fabric's word is "
        "the local watch agent's verdict on its NICs (bad, clearing or flapping fail); a missing or "
        "stale state file (older than three watch periods, or 600 s) is said and not judged. "
        "Memlock and the data path are said, never failed: `rdmacli doctor` judges them. The guide "
        '"In your scheduler" shows Slurm, NHC and node-problem-detector set-ups.',
    },
    "selftest": {
        "notes": "The server side listens on ports "
        + ", ".join(f"{s.selftest_port} ({s.name})" for s in PROTOCOLS.values() if s.selftest_port)
        + ", and the multicast row uses group 239.255.71.71, so the C tools' default ports stay "
        "free. The path: across two RDMA devices when this host has two whose ports reach each "
        "other (a connection request to port 17470 is answered), else one device to itself; "
        "two local ports reach each other only with net.ipv4.conf.*.accept_local=1 and "
        'rp_filter=0, which `rdmacli doctor` checks ("local ports").',
    },
    "bw": {
        "notes": "rdmacli to rdmacli (not perftest's wire exchange): the client's hello names the "
        "operation and size, the server registers one buffer of that size per connection (up to "
        "`listen --max-size`, 64 MiB by default) and advertises it in its accept; the client never "
        "writes or reads past what it asked for and the server confirmed. Reported per QP and "
        "overall: Gb/s, messages/s and, from the port's sysfs `rate`, the fraction of line rate "
        "(data.bw in JSON). --depth above the device's max_qp_wr is an error (exit 3), never "
        "silently lowered. --bidir: the client's hello asks the server to send too; the client "
        "advertises its own buffer in a SEND with immediate data (ADVERT), which starts the "
        "server's stream, stops it with another (DONE) when its own run ends, and the server "
        "answers with its messages and seconds (RESULT) before the client disconnects; the "
        "client checks that report (a count or time no run can have, or a rate above its own "
        "hardware port's line rate, is a protocol violation) "
        "and prints both directions and their sum (data.bw reverse_gbps, total_gbps). With --op "
        "send each end also counts and times what arrives (messages_received, gbps_received: the "
        "receiving end's own measure of the other's stream), and keeps four receives posted for "
        "each send the other may have in flight (perftest's rx_depth over tx_depth), so a receiver "
        "that reposts late meets no RNR. -a (perftest's): every power of two from 2 B to 8 MiB, -C "
        "messages each, one connection per size against rdmacli's server (each hello announces "
        "the sweep, so a `listen -c 1` server waits for the next size, --connect-timeout at most), one "
        "table by size (data.sweep); not with -D, --qps or --bidir; it stops at the first size "
        "that fails. --perftest speaks perftest's own exchange to an ib_write_bw, ib_read_bw or "
        "ib_send_bw -R server (with -a: all sizes on one QP, as perftest does).",
    },
    "lat": {
        "notes": "Figures as perftest prints them (one way, half the round trip: t_min, t_typical "
        "= median, t_avg, p99, p99.9, t_max) in JSON latency_us, with rtt_us (the round trip the "
        "client measured) and network_rtt_us (each round trip minus the hold time the server "
        "measured on its own clock, from its receive polled to its reply posted, carried in the "
        "first 8 bytes of the reply: R-Pingmesh's correction). A hold the server reports that is "
        "longer than the round trip itself is ignored. --op write uses RDMA WRITE with immediate "
        "(the responder learns of each message from its completion); with --perftest, "
        "ib_write_lat's own: a WRITE whose last byte counts, seen by polling memory. -a: every "
        "power of two the server takes (8 B, 16 B with --op write, to 1 MiB; with --perftest "
        "perftest's 2 B to 8 MiB on one QP), -C iterations each, one table by size (data.sweep). "
        "Where the client's device has completion timestamps (ibv_query_device_ex's "
        "completion_timestamp_mask and hca_core_clock; mlx5 has them, rxe has not) and the "
        "native data path measures, its CQ is made with them (ibv_create_cq_ex) and the NIC "
        "times each answer's completion: nic_latency_us is half the NIC's period from one answer "
        "to the next within a native slice (rc_pingpong --ts's measure, halved as perftest halves "
        "its own), beside the host's figures, and timestamps says nic; elsewhere timestamps says host and "
        "timestamps_why says why (the device's mask and clock, or the data path).",
    },
    "mesh": {
        "captures": [
            (
                "A lossy node in the lab (netem 5 % loss on n05's netdev and bridge port; captured, "
                "abridged, lines cut at 100 columns)",
                LOSSY_NODE_CAPTURE,
            ),
            (
                "Two rails in the lab (rdmacli lab --nodes 8 --rails 2): rail 1 of n03 down, n05 "
                "delayed 40 ms on both rails by netem; captured, abridged, lines cut at 100 columns",
                TWO_RAILS_CAPTURE,
            ),
        ],
        "notes": "Tests: ping (the default) is the latency probe of `rdmacli lat`, a SEND/RECV "
        "ping-pong of --count 64-byte messages whose figures are network round trips: the "
        "listener's own hold time, from its receive polled to its reply posted, is measured on its "
        "clock, carried back and taken out (rtt_p50_us, rtt_p99_us; host_rtt_p50_us is the round "
        "trip as the connector's host saw it); rping is rping's cycle (SEND, READ, SEND, WRITE per "
        "ping) for those who want that protocol's figure; connect and ud are ucmatose's and "
        "udaddy's exchanges; bw is `rdmacli bw --op send --bidir` (SENDs of 64 KiB, 16 in flight) "
        "for a quarter of the slot (0.5 to 10 s): both directions at once, each measured by the "
        "end it came to (its receive completions, counted and timed there: the listener's gbps_ba, "
        "the connector's gbps_ab), the matrix showing the slower. Each end also says what it sent "
        "(messages_sent, gbps_sent); a passing pair whose receiver counted other than its sender, "
        "or whose rate as it arrived is more than 2x off the rate it was sent at, has its rates set "
        "aside and both ends counted against (a node at odds with three or more partners is named: "
        "inconsistent reports). probe is connectionless: each NIC opens one UD QP and, in one "
        "phase with no rounds, probes every partner NIC at once with --count timestamped datagrams "
        "(the partner's QP number from SIDR, udaddy's exchange) while answering its partners' "
        "probes; the responder's hold is taken out of the round trip, each end reports "
        "probes_sent and probes_answered, a pair that lost any probe passes with cause LOSS and "
        "counts against its NICs, one whose SIDR never answered is UNR; the phase is as long as the "
        "busiest NIC needs (5 s of SIDR, probes at 0.1 s a partner or 250 a second a NIC, 3 s "
        "for the last replies; --round-time is a floor) and there are no re-test rounds. "
        "Schedule: with N nodes (N+1 if odd) every agent computes the "
        "same circle-method "
        "round robin, N-1 rounds of disjoint pairs; --quick runs about log2(N) of them, spread out. "
        "With --pairs group the circle runs inside each group of the map's group=NAME column, "
        "all groups at once; --pairs sample:K adds K node pairs between every two groups (a walk "
        "through all of them in windows of K that move with --rotation, so consecutive rotations "
        "cover every pair between groups of a and b nodes in ceil(a*b/K) runs), packed into "
        "rounds where no node is in two tests. "
        "Rounds are time slots of --round-time seconds; round 1 starts two seconds after the last "
        "agent reported itself ready (its device opened, its address and port bound and held for "
        "the run), at the latest --launch-timeout after launch, so a dead or slow node costs only "
        "its own pairs one slot each; agents' clocks must agree to well under a slot (NTP). A slot "
        "is a wall: a pair still running at its end is torn down there without waiting on the "
        "peer and reported as OVER with the step it was in; agents measure how long each pair "
        "took, and a slot too short is said once with the round time that would leave room. The "
        "coordinator ends at the schedule's end plus a grace of 10 s (or a round, if longer): an "
        "agent still running then is stopped (SIGTERM, SIGKILL 5 s later) and named late. "
        "Rails: a node's NICs. With --map (several addresses on a line: NODE ADDR0 ADDR1 ...) or "
        "--address-template the addresses given are the rails; otherwise --rails auto (the default) "
        "or --rails DEVICES first has every node's agent report its rails (one launch): its "
        "ACTIVE ports with an address of the family (-6: IPv6), a RoCE port's from its GID table "
        "(RoCE v2 entries first), an InfiniBand port's from its IPoIB netdev; rail k is the k-th in "
        "natural device order (mlx5_2 before mlx5_10), then port, or in the order --rails names "
        "the devices ({node} in a name stands for the node's name). Every node must have as many "
        "rails as most do (exit 2 names those that do not). Rail-aligned by default: rail k of a "
        "node meets rail k of its partner, all rails of the pair at once (rail k listens on "
        "--port + k), in the same rounds, so the run takes no more rounds with rails. --cross-rail "
        "makes each node round R sub-rounds, rail k of the lower rank meeting rail (k+s) mod R of "
        "the higher in sub-round s: every rail pair once, R times the rounds, no NIC in two tests "
        "at once. When every cross-rail pair of the first node round fails to reach its partner "
        "(ADDR, ROUTE, UNR) while rail-aligned pairs pass, the rails are separate networks (as in "
        "the lab): the run stops there, refused with exit 2. "
        "Slow: a passing pair is slow when its p50 exceeds --slow-factor (2.0) times the best "
        "comparable pair's (same test; rail-aligned and cross-rail apart; the best that stands "
        "without any one node's word, so that one liar cannot set it) and also the median p99 "
        "of those pairs (the fabric's own tail: a busy or emulated fabric cannot tell a slow pair "
        "from jitter below it), and, where the pair says its fastest round trip (rtt_min_us), "
        "that too is above --slow-factor times the fastest pair's and above the pairs' median "
        "p50 (a slow wire is slow every time; hosts waiting for a CPU make only some round trips "
        "slow, and that is the hosts', not the fabric's), or, for --test bw, when a direction's "
        "Gb/s is below --slow-fraction (0.9) of the best; at least three comparable pairs are needed. JSON "
        "pairs carry slow (figure, value, best, limit) and data.slow_reference the bests. "
        "Re-tests: once every pair is in (3 s after the schedule at the latest), the coordinator "
        "sends every agent, through the launcher as it sends the go line, up to --retest-rounds "
        "(2) extra rounds in which no NIC is in two tests: the pairs that failed, were slow or "
        "passed while a loss counter moved (one retransmit on a busy host must not blame a link), "
        "except those whose node said the fault is its own (DOWN, BUSY, ENV, AGENT: a re-test "
        "would say it again), pairs of a NIC that fails with most partners last. A re-tested pair "
        "counts by its second result (judged by the first round's best): confirmed if it failed, "
        "was slow or lossy again, transient if not (named in a warning). A NIC's failures in the first "
        "attempt still count against it in the blame (a lossy NIC passes now and then), a "
        "slowness that went away does not (jitter), and only confirmed pairs make bad links. JSON "
        "pairs carry retest (round, verdict, and the first result, cause, error and slow). Agents "
        "check the rounds they are sent and wait for them a round plus 10 s at most. "
        "Counters: each pair reads its port's counters/ and hw_counters/ before and after; a pair "
        "that failed while retransmit, sequence-error or timeout counters moved is LOSS (RNR, LINK "
        "for those counters; a failed transfer or an early disconnect only when both ends "
        "reported the pair, since a dead partner makes the NIC retransmit too), and blame "
        "counts a pair that passed while they moved against its NICs too: a node "
        "retransmitting with most partners is named with its counter deltas, a "
        "lossy pair between clean nodes is a lossy link. In each pair the lower rank listens on "
        "--port and the higher connects, asking again every 0.5 s until the slot ends; the run "
        "id, round and ranks "
        "travel in the request's private data and a stale or foreign request is rejected with "
        "words. Causes in the matrix: DOWN (the node's own port or netdev), BUSY (its mesh port was "
        "held by another run or server), ENV, AGENT (its agent "
        "never ran, or was late), LINK, LOSS and RNR (its NIC's counters moved), ADDR, ROUTE, UNR "
        "(unreachable), REJ, NOLSN (nothing listened), OVER (still running at its slot's end), TMO "
        "(a deadline), "
        "FAIL (the data exchange), SILENT (one end never reported), MISS (neither did); a slow "
        "pair's figure is marked ! (SLOW in the blame). Blame, at three levels: a NIC (node, "
        "rail, device) that reports a local cause, or fails or is slow with more than half of its "
        "partners, or is the end common to bad pairs that are its partners' only ones (one fault "
        "explains them better than as many links), is a bad NIC, but from partners on more than "
        "f = 2 other nodes only (a node's rails one witness; data.liars_tolerated), and more "
        "than an eighth of its tested pairs (data.liars_share: the cabal tolerated grows with "
        "the fleet): two agents lying together cannot name anyone, and a real fault only two "
        "partner nodes see is left as links; "
        "a node whose every rail is a bad NIC is a bad "
        "node (with one rail, a bad NIC is its node); a pair of NICs that fails while both pass "
        "elsewhere is a bad link. A pair one end failed (for a cause not its own node's) while the "
        "other passed it cleanly (its own probes all answered, no counter of either port moved) is "
        "disputed: counted against neither NIC, listed with the end that failed it, and that end "
        "counted against for inconsistent reports. The report shows a table per node and rail, and "
        "the matrix of "
        "one rail (--rail K; default the worst). --prometheus FILE writes, atomically "
        "(prometheus_client's "
        "write_to_textfile), per pair of NICs (labels a, b, rail_a, rail_b) rdmacli_mesh_pair_up, "
        "_pair_failed{cause}, _pair_slow, _pair_transient, _pair_rtt_seconds{quantile}, "
        "_pair_setup_seconds, _pair_bandwidth_gbps{direction}, per node _node_pairs_passed, "
        "_node_pairs_failed, _node_bad, per NIC (node, rail, device, address) _nic_pairs_passed, "
        "_nic_pairs_failed, _nic_pairs_slow, _nic_rtt_p50_seconds, _nic_bad, per bad link "
        "_link_bad, and the "
        "run's _run_pairs{result}, _run_exit_code, _run_elapsed_seconds, _run_timestamp_seconds, "
        "in the Prometheus text exposition format, the one node_exporter's textfile collector "
        "documents (*.prom files). JSON: the summary's data holds run_id, "
        "rails, cross_rail, nodes, nics, pairs (a, b, rail_a, rail_b, device_a, device_b, result, "
        "cause, error, slow, retest, setup_us, rtt_p50_us, rtt_p99_us, rtt_min_us, host_rtt_p50_us, gbps_ab, "
        "gbps_ba, probes_sent, probes_answered, steps_us; every pair of a run of up to 2000 pairs, "
        "only those with trouble "
        "(failed, missing, slow, lossy, re-tested) above: pairs_listed says all or trouble, and "
        "the totals count every pair; with --test probe, pairs_compact counts the pairs both ends "
        "said healthy in compact records; --matrix FILE has every pair, gzip-compressed JSON lines; "
        "Prometheus's per-pair series follow the same list), slow_reference, "
        "blame (nodes, nics, links, unexplained, disputed), liars_tolerated (f), liars_share and, with "
        "--baseline, the pairs that started failing or "
        "got 1.5 times slower. Launchers: ssh and exec are ClusterShell workers with the fanout "
        "raised to N (agents are long-lived); ssh agents end when their ssh session does; srun runs "
        "one step of N tasks, each agent taking its rank from SLURM_PROCID.",
        "security": "The mesh is run as root across many nodes, so it trusts little. Node names "
        "(from the command line, group files, Slurm), address templates, map and baseline files "
        "and the free-text options are input: a node name must be a host name, a Slurm node name "
        "or an IP literal (never starting with '-'), a template may name {node} and {rank} only, "
        "map and baseline files must be regular UTF-8 files under 64 MiB of the documented "
        "shape, and all of it is checked before any agent starts (exit 2 with the first bad "
        "item named). Nothing read reaches a shell as code: commands are shell-quoted and every "
        "'%' is doubled for ClusterShell's workers, which expand %h and %n. Each agent is trusted "
        "for its own node only: a record counts only if the launcher read it from that node "
        "(ClusterShell's node, srun's task label), is of this run, has the documented types, "
        "ranges and sizes (a line over 64 KiB is dropped as it is read, never held whole) and "
        "names a pair the schedule has; figures are bounded by what hardware measures (round "
        "trips from 0.5 us, a median under its p99, the network's under the host's; rates at "
        "most 1.1 x the sender's own port's line rate, reported per rail by hardware ports); "
        "anything else is a violation of the sender, named in warnings and data.nodes, never "
        "used. A rate above the partner's port contradicts the two nodes' words: it is set "
        "aside, and a node at odds with three or more partners, or at the end of three or more pairs "
        "4 x faster than the fabric's best, is named (inconsistent reports, exit 1). A pair "
        "passes only when both ends report pass; an end that stays silent is its "
        "own cause (SILENT). The run id is public (every agent and its launcher's logs see it), so a "
        "listener admits only its scheduled partner's address with the right round and ranks, "
        "and its refusals say what was wrong with a request without echoing what it expects. "
        "What agents and peers say is printed with control characters escaped. Counters an agent "
        "reports are checked (at most 8 ports of 256 counters, names and non-negative integers) "
        "and their kinds derived again. An agent claims its address and port with a lock file in "
        "/run/lock (no links followed, mode 0600, its pid and run id inside): a local user who "
        "holds it can make a run say BUSY, nothing more. Not defended: a "
        "peer that can spoof its partner's IP address on the fabric, and a launcher (ssh, srun) "
        "that is itself compromised.",
    },
    "mesh-agent": {
        "notes": "Not for people: `rdmacli mesh` starts it through its launcher (hidden from "
        "`rdmacli --help`). Its command line carries only its rank; the run spec comes as the first "
        "line of its stdin (a spec of 10 000 nodes is megabytes: never argv), JSON with "
        '"v": 1 and these fields: '
        + "; ".join(f"{f.name} ({f.words}, default {json.dumps(f.default)})" for f in SPEC_FIELDS)
        + '. A spec over 64 KiB comes compressed ({"v": 1, "zlib": base64 of the zlib\'d JSON}). '
        "Later lines on stdin are the coordinator's go line and re-test rounds. An agent with no spec "
        "within 120 s says so and ends. Prints one JSON record per line: "
        + "; ".join(f"{t} ({what})" for t, what in described().items())
        + ".",
    },
    "watch": {
        "notes": "One agent per node (rdmacli/watch/rdmacli-watch.service in the package: Type=notify, "
        "SIGHUP re-reads the map, SIGTERM stops it at the window's next turn). Its nodes come "
        "from --map (mesh's map: names, rails' addresses, groups), from --nodes (a ClusterShell "
        "node set, @groups too: the names, their addresses from the map, from --address-template "
        "or their names resolved, one rail each), or both (the set's names, the map's addresses);"
        " SIGHUP reads them again. Every agent computes the same plan from the same nodes: time "
        "in windows of --window seconds on the wall clock (window k begins at k x WINDOW; clocks "
        "agree through NTP or PTP), window k holding --partners rounds of mesh's schedule "
        "(default: every partner, within 100 probes a second a NIC), so both ends of a pair probe"
        " each other in the same window (with --pairs group or sample:K and the map's group=NAME "
        "column: every pair inside each group a period, and K pairs between every two groups, the"
        " next K each period), with mesh's connectionless probe (UD, SIDR for the QP number, the "
        "responder's hold taken out; each NIC's QP stays open from window to window, and a "
        "partner that answered is probed again without SIDR until it answers nothing or its "
        "probes come from another QP). Each window's pair is judged DEAD (nothing answered), LOSS"
        " (two probes or more lost), SLOW (its typical and fastest round trips above twice this "
        "NIC's recent best and beyond its recent windows' own spread) or good, and fed to a "
        "verdict over time per pair and per NIC: suspect after one bad window, bad (named) after "
        "--raise-after of the last --raise-window, cleared after --clear-after good windows in a "
        "row, flapping at onset number --flap-count (a bad window after good ones) within "
        "--flap-window windows (said once, held until quiet that long). A NIC is named by its own"
        " agent when one cause shows on more than f = 2 of its partners in a window and they are "
        "more than a third of them (two thirds for slow), when its probes lost over all its "
        "partners are 5 % and more than a third of them, and more than two, lost some, or its "
        "port says the fault is its own; "
        "a port whose link went down in the window (its link_downed counter moved, or it was "
        "down) is a fact, named at once as DOWN, and each such drop is an onset, so a flapping "
        "cable is named at its first drop and flapping at onset number --flap-count. After each "
        "window the verdicts go to the state file, atomically (what is not OK only); `watch "
        "status` runs `rdmacli watch show` on each node through ClusterShell (ssh, or exec for "
        "agents on this machine), checks every answer as untrusted input, and blames as mesh "
        "does: a NIC its agent names, or named by most of its partners, on more than f = 2 nodes "
        "(the plan's partners: give watch status the agents' --pairs; data.liars_tolerated); "
        "a node whose every rail is bad; a pair named from "
        "both ends whose NICs are not bad is a link; a pair one end names alone is disputed, "
        "never blamed. Metrics (--metrics ADDRESS:PORT, prometheus_client's server, off by "
        f"default): {watch_metrics()}, and the process collector's. The package ships Prometheus "
        "alert rules (rdmacli/watch/monitoring/alerts.yml, checked and unit-tested with promtool)"
        " and a Grafana dashboard (grafana-dashboard.json).",
    },
    "lab": {
        "notes": "Needs qemu-system-x86, a kernel package that ships rdma_rxe "
        "(linux-image-amd64) and virtme-ng. KVM is used when it really works, TCG "
        "otherwise (slower). Set RDMACLI_LAB_ACCEL=kvm or tcg to skip the probe.",
    },
}


def esc(text: str, wrap: bool = True) -> str:
    """roff-escape text, wrapped to stay under 80 bytes; a leading dot or quote is escaped."""
    lines = []
    for raw in text.split("\n"):
        for line in (textwrap.wrap(raw, 70, break_on_hyphens=False) or [""]) if wrap else [raw]:
            line = line.replace("\\", "\\e").replace("-", "\\-")
            line = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in line)
            lines.append("\\&" + line if line[:1] in (".", "'") else line)
    return "\n".join(lines)


def _paragraphs(text: str) -> list[str]:
    text = text.replace("\b\n", "")
    return [" ".join(p.split()) for p in text.strip().split("\n\n") if p.strip()]


def command_context(name: str, cmd: click.Command) -> click.Context:
    """A context as on the command line (so -h is inherited from the group everywhere)."""
    root = cli.make_context("rdmacli", [], resilient_parsing=True)
    if name == "rdmacli":
        return root
    return cmd.make_context(name, [], parent=root, resilient_parsing=True)


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli, info_name="rdmacli")
    out = [("rdmacli", cli)]
    for name in COMMANDS:
        out.append((name, cli.get_command(ctx, name)))
    return out


def _option_rows(cmd: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    rows = []
    for p in cmd.get_params(ctx):
        if isinstance(p, click.Option) and not p.hidden:
            rec = p.get_help_record(ctx)
            if rec:
                rows.append(rec)
    return rows


def _subcommands(cmd: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    if not isinstance(cmd, click.Group):
        return []
    # the whole one-line summary, never cut mid-phrase: the root's from its command table
    return [
        (n, COMMANDS[n][1] if cmd is cli else cmd.get_command(ctx, n).get_short_help_str(10**6))
        for n in cmd.list_commands(ctx)
    ]


def _subcommand_contexts(cmd: click.Command, ctx: click.Context):
    """(name, command, context) of a group's subcommands, as the command line makes them."""
    if not isinstance(cmd, click.Group):
        return []
    out = []
    for n in cmd.list_commands(ctx):
        sub = cmd.get_command(ctx, n)
        out.append((n, sub, sub.make_context(n, [], parent=ctx, resilient_parsing=True)))
    return out


def all_examples(name: str, cmd: click.Command) -> list[tuple[str, str]]:
    """A command's examples, then its subcommands' (rdmacli/cli/examples.py, said once)."""
    rows = list(EXAMPLES.get(name, []))
    if isinstance(cmd, click.Group) and name != "rdmacli":
        for sub in cmd.list_commands(click.Context(cmd)):
            rows += EXAMPLES.get(f"{name} {sub}", [])
    return rows


def protocols_section() -> list[str]:
    """The protocol table (rdmacli.protocols.table), as the man page shows it."""
    from rdmacli.protocols.table import PROTOCOLS

    out = [".SH PROTOCOLS", "Each protocol is declared once; these are its defaults."]
    for s in PROTOCOLS.values():
        port = f"port {s.default_port}" if s.default_port else "no port (a multicast group)"
        count = f"count {s.default_count}" if s.default_count is not None else "count: until Ctrl-C"
        out += [
            ".TP",
            f".B {esc(s.name)}",
            esc(
                f"{s.c_tool}: {s.transport}, {port}, port space {' or '.join(s.port_spaces)}, "
                f"{count}, size {s.default_size} ({s.min_size} to {s.max_size})."
            ),
        ]
    return out


def json_section() -> list[str]:
    from rdmacli.schema import RECORD_TYPES, SUMMARY_KEYS

    out = [
        ".SH JSON OUTPUT",
        esc(
            "--json prints one summary document on standard output when the run ends (also on "
            "failure, usage errors and signals); --json-lines streams one object per event "
            f"({', '.join(t for t in RECORD_TYPES if t != 'summary')}) and ends "
            "with the same summary. Every command's summary has these keys, in this order; units "
            "are in the key names (_us, _ms, _bytes, _s)."
        ),
    ]
    for key, kind, text in SUMMARY_KEYS:
        out += [".TP", f".B {esc(key)}", esc(f"({kind}) {text}")]
    return out


def man_page(name: str, cmd: click.Command) -> str:
    full = "rdmacli" if name == "rdmacli" else f"rdmacli {name}"
    page = "rdmacli" if name == "rdmacli" else f"rdmacli-{name}"
    ctx = command_context(name, cmd)
    extra = EXTRA.get(name, {})
    summary = COMMANDS[name][1] if name in COMMANDS else "RDMA connectivity toolkit"
    out = [
        f'.TH {page.upper()} 1 "{DATE}" "rdmacli {__version__}" "rdmacli manual"',
        ".SH NAME",
        esc(f"{page} - {summary.rstrip('.')}"),
        ".SH SYNOPSIS",
        f".B {esc(full)}",
        esc(" ".join(cmd.collect_usage_pieces(ctx))),
        ".SH DESCRIPTION",
    ]
    help_text = (cmd.help or "").split("\f")[0]
    for i, para in enumerate(_paragraphs(help_text)):
        if i:
            out.append(".PP")
        out.append(esc(para))
    if extra.get("description"):
        out += [".PP", esc(extra["description"])]
    subs = _subcommands(cmd, ctx)
    if subs:
        out.append(".SH COMMANDS")
        for sub, text in subs:
            see = f" See rdmacli-{sub}(1)." if name == "rdmacli" else ""
            out += [".TP", f".B {esc(sub)}", esc(text + see)]
    out.append(".SH OPTIONS")
    for opts, text in _option_rows(cmd, ctx):
        out += [".TP", f".B {esc(opts)}", esc(" ".join(text.split()))]
    for sub, sub_cmd, sub_ctx in _subcommand_contexts(cmd, ctx) if name != "rdmacli" else []:
        out += [f'.SS "OPTIONS OF {esc(sub.upper())}"', ".B " + esc(f"{full} {sub}"),
                esc(" ".join(sub_cmd.collect_usage_pieces(sub_ctx))), ".PP",
                esc(_paragraphs((sub_cmd.help or "").split("\f")[0])[0])]  # fmt: skip
        for opts, text in _option_rows(sub_cmd, sub_ctx):
            out += [".TP", f".B {esc(opts)}", esc(" ".join(text.split()))]
    if extra.get("notes"):
        out += [".SH NOTES", esc(extra["notes"])]
    if extra.get("security"):
        out += [".SH SECURITY", esc(extra["security"])]
    if name == "rdmacli":
        out += protocols_section() + json_section()
    out.append(".SH EXIT STATUS")
    for code, text in EXIT_STATUS:
        out += [".TP", f".B {code}", esc(text)]
    out.append(".SH ENVIRONMENT")
    for var, text in ENVIRONMENT:
        out += [".TP", f".B {var}", esc(text)]
    examples = all_examples(name, cmd) + extra.get("captures", [])
    if examples:
        out.append(".SH EXAMPLES")
        for i, (title, cmdline) in enumerate(examples):
            out += ([".PP"] if i else []) + [
                esc(title) + ":",
                ".PP",
                ".RS 4",
                ".nf",
                esc(cmdline, wrap=False),
                ".fi",
                ".RE",
            ]
    see = ["rdmacli(1)"] if name != "rdmacli" else [f"rdmacli-{n}(1)" for n in COMMANDS]
    out += [".SH SEE ALSO", esc(", ".join([*see, *SEE_ALSO]).replace("\\-", "-"))]
    return "\n".join(out) + "\n"


def completion_script(shell: str) -> str:
    env = dict(os.environ, _RDMACLI_COMPLETE=f"{shell}_source")
    return subprocess.run(
        [sys.executable, "-m", "rdmacli"], env=env, capture_output=True, text=True, check=True
    ).stdout


# --- the docs site's generated pages (Markdown): one source with the man pages ---------------


def _md_paragraphs(text: str) -> list[str]:
    return _paragraphs((text or "").split("\f")[0])


def _command_tree():
    """(path, command, context) of every documented command, subcommands after their group."""
    for name, cmd in _commands():
        if name in HIDDEN_FROM_REFERENCE:
            continue
        ctx = command_context(name, cmd)
        path = "rdmacli" if name == "rdmacli" else f"rdmacli {name}"
        yield path, name, cmd, ctx
        if name == "rdmacli":  # the root's commands come each in its own turn: documented once
            continue
        for sub, sub_cmd, sub_ctx in _subcommand_contexts(cmd, ctx):
            yield f"{path} {sub}", f"{name} {sub}", sub_cmd, sub_ctx


HIDDEN_FROM_REFERENCE: set[str] = set()


def cli_reference() -> str:
    """docs/reference/cli.md: every command, its usage, options and examples, from the click tree."""
    out = [
        "# CLI reference\n",
        GENERATED,
        "Every command and option, generated from the commands themselves; `rdmacli COMMAND --help` "
        "says the same, and each command has a man page (`man rdmacli-ping`). Exit status: "
        "[exit status](exit-status.md); JSON: [the summary](json.md).\n",
    ]
    for path, key, cmd, ctx in _command_tree():
        level = "###" if path.count(" ") == 2 else "##"
        out.append(f"{level} {path}\n")
        if key in COMMANDS:
            out.append(f"{COMMANDS[key][1]}\n")
        usage = " ".join(cmd.collect_usage_pieces(ctx))
        out.append(f"```\n{path} {usage}\n```\n")
        for para in _md_paragraphs(cmd.help or ""):
            out.append(para + "\n")
        subs = _subcommands(cmd, ctx)
        if subs and key != "rdmacli":
            out.append("Commands: " + ", ".join(f"`{s}` ({md_cell(h)})" for s, h in subs) + "\n")
        rows = _option_rows(cmd, ctx)
        if rows:
            out.append("| option | what it does |\n|---|---|")
            # in a code span a pipe splits no cell (Python-Markdown), and an escape would show
            out += [f"| `{' '.join(opts.split())}` | {md_cell(text)} |" for opts, text in rows]
            out.append("")
        examples = EXAMPLES.get(key if key != "rdmacli" else "rdmacli", [])
        if examples:
            out.append("Examples:\n")
            for title, cmdline in examples:
                out.append(
                    f"- {title}:\n\n    ```sh\n"
                    + "".join(f"    {line}\n" for line in cmdline.split("\n"))
                    + "    ```\n"
                )
        notes = EXTRA.get(key, {}).get("notes")
        if notes:
            out.append("Notes: " + notes + "\n")
    return "\n".join(out).rstrip() + "\n"


def troubleshooting() -> str:
    """docs/troubleshooting.md, from the causes table (rdmacli.errors.CAUSES)."""
    from rdmacli.errors import CAUSES, EXIT_OF

    out = [
        "# Troubleshooting\n",
        GENERATED,
        "Every failure rdmacli reports carries a **cause**, set where the error is born (a CM event "
        "and its status, a call's errno, this host's sysfs, a deadline, a peer's protocol "
        "violation). The cause decides the exit status; the message and the hint printed with it "
        "are for people and name the device, the addresses and the option at hand. A person reads "
        "the cause on the error's last line (`cause: environment`: its row below); scripts read "
        "`error.cause` in the JSON summary, never the words, which may change between releases.\n",
        "Before blaming the peer, a failure or a deadline looks at this host (a removed device, a "
        "port gone down with its netdev, a vanished GID, the locked-memory limit, a queue above "
        "the device's limits) and at the port's counters: a test that failed while retransmit "
        "counters moved says `packet_loss`, not `deadline`. `rdmacli doctor [PEER]` runs the same "
        "checks on demand.\n",
        "| cause | exit | what it means | what to do |",
        "|---|---|---|---|",
    ]
    for cause, (meaning, advice) in CAUSES.items():
        out.append(f"| `{cause.value}` | {int(EXIT_OF[cause])} | {md_cell(meaning)} | {md_cell(advice)} |")
    out.append("")
    out.append("The exit codes themselves: [Exit status](reference/exit-status.md).")
    out += ["", *messages_section()]
    return "\n".join(out) + "\n"


def messages_section() -> list[str]:
    """Each cause's messages as the code raises them (scripts/messages.py), and the C calls."""
    sys.path.insert(0, str(Path(__file__).parent))
    import messages

    from rdmacli.engine.status import CALL_CAUSE
    from rdmacli.errors import Cause

    root = Path(__file__).resolve().parent.parent / "rdmacli"
    found = messages.messages_by_cause(root)
    out = [
        "## The messages, by cause\n",
        "What each cause's errors say, as the code raises them (`…` is a name, a number or words "
        "filled in at the time; messages put together elsewhere are not listed). Search this page "
        "for a few words of the message you got.\n",
    ]
    for cause in Cause:
        said = found.get(cause.name)
        if not said:
            continue
        out.append(f"### `{cause.value}`\n")
        out += [f"- {md_cell(m)}" for m in said]
        out.append("")
    calls = messages.c_calls(root)
    out += [
        "## A failed C call\n",
        "A librdmacm or verbs call that fails is said as `STEP: CALL: ERRNO (its words) [where]`, "
        "with advice for the errno where there is some. Its cause is `call_failed`, except "
        + ", ".join(f"`{c}` (`{k.value}`)" for c, k in sorted(CALL_CAUSE.items()))
        + "; a call that ran out of locked memory is `memlock`, and this host's own state (a "
        "removed device, a port gone down) is said first when it explains the failure. The calls "
        "rdmacli names: " + ", ".join(f"`{c}`" for c in calls) + ".",
    ]
    return out


TRANSPORT_TESTED = {
    "InfiniBand": "not in the lab (no software InfiniBand exists): the same code paths as RoCE, "
    "with the subnet manager's checks in `doctor`",
    "RoCE": "Soft-RoCE (rdma_rxe) in every lab boot: every protocol against its C tool both ways, "
    "mesh and watch on 16 nodes x 2 rails",
    "iWARP": "Soft-iWARP (siw, `rdmacli lab --iwarp`) in the rdma suite's boot: rping, ucmatose and "
    "perftest's `-R` exchange against rdmacli both ways, rdmacli against itself, every refusal; a "
    "mesh of four siw nodes (`--test ping` naming a node whose port is down, `rping`, `connect`; "
    "`probe` and `bw` refused) (tests/lab/test_iwarp.py)",
}


def transports_page() -> str:
    """docs/reference/transports.md, from the transport rows (rdmacli.transports)."""
    from rdmacli.transports import INSTEAD, NEED_WORDS, TRANSPORTS

    yes = lambda b: "yes" if b else "**no**"  # noqa: E731
    out = [
        "# Transports\n",
        GENERATED,
        "rdmacli reads each port's transport from sysfs (`node_type` RNIC is iWARP; a CA is "
        "InfiniBand or RoCE by its port's `link_layer`), says it in `rdmacli devices` and "
        "`rdmacli doctor`, and refuses up front, exit 3 and cause `transport_unsupported`, a test "
        "whose transport lacks what it needs, naming what works there instead.\n",
        "| | " + " | ".join(TRANSPORTS) + " |",
        "|---|" + "---|" * len(TRANSPORTS),
    ]
    rows = [
        ("UD: `connect --ud`, `listen --ud`, `mesh --test probe` and `ud`, `watch`", "datagrams"),
        ("multicast: `mcast`", "multicast"),
        ("immediate data: `lat --op write`, `bw --bidir`, `mesh --test bw`", "immediate"),
        ("atomics", "atomics"),
        ("GIDs made from the IP addresses", "ip_gids"),
    ]
    for words, field in rows:
        out.append(f"| {words} | " + " | ".join(yes(getattr(t, field)) for t in TRANSPORTS.values()) + " |")
    private = " | ".join(str(t.private_data) for t in TRANSPORTS.values())
    out.append(f"| private data of a connection request (bytes) | {private} |")
    every = " | ".join("yes" for _ in TRANSPORTS)
    out.append(f"| connected tests: `connect`, `listen`, `ping`, `bw`, `lat --op send`, `events`, "
               f"`mesh --test ping/rping/connect` | {every} |")  # fmt: skip
    tested = " | ".join(md_cell(TRANSPORT_TESTED[n]) for n in TRANSPORTS)
    out.append(f"| how it was tested | {tested} |")
    out += [
        "",
        "What to run instead, as the refusals say it:\n",
        *(f"- without {NEED_WORDS[need]}: {INSTEAD[need]}" for need in NEED_WORDS),
        "",
        "## What differs on iWARP\n",
        "- **No datagrams, no multicast.** iWARP is RDMA over TCP (MPA, DDP and RDMAP): it has "
        "connected QPs only. udaddy and mckey do not run there either.",
        "- **Nothing listening is said at once.** iWARP's `rdma_connect` opens the TCP connection "
        "itself, and a port nobody listens on refuses it with a reset: the call fails with "
        "ECONNREFUSED where RoCE's CM answers REJECTED reason 8 later. rdmacli says both the same "
        "way (cause `nobody_listening`, exit 5), and `--wait` waits out both.",
        "- **The GID is the port's MAC.** No address is read out of it: the device behind an "
        "address is found by its netdev (siw has no parent device in sysfs: the netdev whose MAC "
        "is the GID), and a vanished address is looked for on the netdev, not in the GID table.",
        "- **An RDMA READ's sink needs remote write.** The peer's READ responses are placed as "
        "tagged writes into the reader's buffer, so the buffer a READ lands in is registered "
        "with remote-write access (rping.c does the same for its sink); `bw --op read` does. siw itself "
        "checks only local write, so the lab cannot show the refusal a hardware RNIC makes: a unit "
        "test holds the flags.",
        "- **No immediate data.** RDMAP has no immediate field: siw accepts a SEND or WRITE with "
        "immediate as a work request, then fails the QP when it comes to send it. `lat --op write` "
        "(each message a WRITE with immediate) and `bw --bidir` (its control messages carry their "
        "kind as immediate data) are refused; `lat --op send`, one-way `bw` and every "
        "`--perftest` exchange run.",
        "- **Private data up to 256 bytes** (MPA) against InfiniBand's 56 in a connection request: "
        "every rdmacli hello fits in 56.",
        "",
        "The lab brings up Soft-iWARP with `rdmacli lab run --iwarp -- CMD` (siw0 on veth2, "
        "10.78.0.1; siw1 on veth3, 10.78.0.2). Debian 12's kernel has no siw module; the lab builds "
        "it once from `linux-source` and the matching `linux-headers`, which `make deps` installs, "
        "and caches it under `~/.cache/rdmacli/siw/`.",
    ]
    return "\n".join(out) + "\n"


def json_reference() -> str:
    """docs/reference/json.md: the summary's keys, the record types and the causes, from the code."""
    from rdmacli.outcome import SCHEMA
    from rdmacli.schema import RECORD_TYPES, SUMMARY_KEYS, SUMMARY_SCHEMA

    out = [
        "# JSON output\n",
        GENERATED,
        "`--json` prints one summary document on standard output when the run ends (also on "
        "failure, usage errors and signals); `--json-lines` streams one object per event and ends "
        "with the same summary. `--json` and `--json-lines` are two formats: every command refuses "
        "both at once with the same usage error. Every command's summary has these keys, in this "
        f"order (`schema` is `{SCHEMA}`); its JSON Schema is `rdmacli.schema.SUMMARY_SCHEMA`, and "
        "the tests validate every document against it. Keys are snake_case with units in their "
        "names (`_us`, `_ms`, `_bytes`, `_s`).\n",
        "| key | type | what it holds |",
        "|---|---|---|",
    ]
    out += [f"| `{key}` | {kind} | {md_cell(text)} |" for key, kind, text in SUMMARY_KEYS]
    out += [
        "",
        "## Records of --json-lines\n",
        "A run's records (rdmacli/events.py) also carry `t_us`, the µs since the run began (a CM "
        "event's: when it was read), and `side` (client or server).\n",
        "| type | what it is |",
        "|---|---|",
    ]
    out += [f"| `{t}` | {md_cell(what)} |" for t, what in RECORD_TYPES.items()]
    out += [
        "",
        "## The JSON Schema\n",
        "`rdmacli.schema.SUMMARY_SCHEMA`, which every test validates each summary against:\n",
        "```json\n" + json.dumps(SUMMARY_SCHEMA, indent=1) + "\n```\n",
    ]
    out += ["", "## An example\n", JSON_EXAMPLE.strip() + "\n",
            "Scripts decide from `error.cause`: every cause, its exit code and what to do are on "
            "the [Troubleshooting](../troubleshooting.md) page. A mesh agent's records (what it "
            "prints for its coordinator) are in rdmacli-mesh-agent(1)."]  # fmt: skip
    return "\n".join(out) + "\n"


# a connect to a port nobody listens on, as --json printed it in the lab (abridged)
JSON_EXAMPLE = (Path(__file__).parent / "captures" / "json-summary.md").read_text()


DOCS_PAGES = {
    "docs/reference/cli.md": cli_reference,
    "docs/troubleshooting.md": troubleshooting,
    "docs/reference/json.md": json_reference,
    "docs/benchmarks.md": benchmarks_page,
    "docs/reference/transports.md": transports_page,
}


COMPLETION_FILES = {"bash": "rdmacli.bash", "zsh": "_rdmacli", "fish": "rdmacli.fish"}


def generate() -> dict[str, str]:
    """{relative path: content} for every generated file."""
    files = {}
    for name, cmd in _commands():
        page = "rdmacli" if name == "rdmacli" else f"rdmacli-{name}"
        files[f"man/{page}.1"] = man_page(name, cmd)
    for shell, fname in COMPLETION_FILES.items():
        files[f"completions/{fname}"] = completion_script(shell)
    for rel, make in DOCS_PAGES.items():
        files[rel] = make()
    return files


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for rel, text in generate().items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        sys.stdout.write(f"wrote {rel}\n")


if __name__ == "__main__":
    main()
