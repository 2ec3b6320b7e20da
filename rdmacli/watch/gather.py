"""`watch status`'s gathering: `rdmacli watch show` on each node through ClusterShell (ssh, or
exec for agents on this machine), every answer checked (statefile.StateDoc.parse), then one blame
(`judged`, which knows nothing of launchers)."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh.watchfindings import Freshness, StatusReport, StatusTotals
from rdmacli.outcome import Outcome
from rdmacli.watch import FANOUT
from rdmacli.watch import status as S

STATUS_OPTIONS = frozenset({"--agent-command"})  # of the launcher hints' options, watch status's
WAITING_S = 5.0  # how long `watch status` waits before it says whom for, and how often again


def _stderr(words: str) -> None:
    import sys

    print(words, file=sys.stderr, flush=True)


def gather(nodes_spec: str, map_path: str, launcher: str, port: int, state_file: str | None, timeout: float,
           agent_command: str, params: dict, pairs: str = "all", progress=_stderr, fanout: int = FANOUT
           ) -> Outcome:  # fmt: skip
    from rdmacli.mesh import nodes as N
    from rdmacli.mesh.inputs import groups_of, parse_pairs, read_map, split_args
    from rdmacli.mesh.launch import ClusterShellLauncher
    from rdmacli.mesh.launched import launcher_failure
    from rdmacli.watch.service import map_names
    from rdmacli.watch.statefile import max_line

    asked = N.expand(nodes_spec)
    m = read_map(map_path) if map_path else None
    names = map_names(m) if m is not None else asked  # the agents' nodes: the map's, else these
    unknown = [x for x in asked if x not in names]
    if unknown:
        raise RdmacliError(f"not in {map_path}: {', '.join(unknown[:8])}", cause=Cause.USAGE)
    rails = len(m.addresses[names[0]]) if m and m.addresses else 1  # without addresses: one rail, resolved
    kind, k = parse_pairs(pairs)
    groups = groups_of(names, m, map_path, needed=kind != "all")
    g = S.Gathered(names, rails, partners=S.partner_counts(groups, names, kind, k))
    base = split_args("--agent-command", agent_command) or ["rdmacli"]
    commands = {}
    for node in asked:
        cmd = [*base, "watch", "show", "--node", node, "--port", str(port)]
        commands[node] = cmd + (["--state-file", state_file] if state_file else [])
    answers: dict[str, list[str]] = {}
    said: dict[str, str] = {}  # node -> the last line its launch printed on stderr (ssh's words)
    exits: dict[str, int | None] = {}

    def on_line(node, line, is_err):
        if node not in commands or len(line) > limit:
            return
        if is_err:
            said[node] = line.strip()[:300] or said.get(node, "")
        else:  # one line is an answer; a second says it is not one: no more is kept of a node
            kept = answers.setdefault(node, [])
            if len(kept) < 2:
                kept.append(line)

    def on_exit(node, rc):
        exits[node] = rc

    limit = max_line(len(names), rails)  # a bound that follows the fleet's size
    t0 = time.monotonic()
    end = t0 + timeout
    said_at = [t0]

    def tick():  # who it still waits for, every WAITING_S once it has waited that long
        now = time.monotonic()
        if now - said_at[0] >= WAITING_S:
            said_at[0] = now
            waiting = [n for n in asked if n not in exits]
            if waiting:
                who = ", ".join(waiting[:8]) + (f" and {len(waiting) - 8} more" if len(waiting) > 8 else "")
                progress(f"watch status: waiting for {len(waiting)} node(s): {who} "
                         f"({now - t0:.0f} s of {timeout:g})")  # fmt: skip

    shell = ClusterShellLauncher(launcher, line_limit=limit, fanout=fanout, waves=True)
    shell.run(commands, b"", on_line, on_exit, timeout, end_at=lambda: end, tick=tick)
    failed = launcher_failure(launcher, asked, set(answers), exits, {n: [w] for n, w in said.items()},
                              before="`watch show` ran", options=STATUS_OPTIONS)  # fmt: skip
    if failed is not None:  # no node answered and every launch failed: the launcher's own error
        raise failed
    for node in asked:
        lines = answers.get(node, [])
        try:
            doc = json.loads(lines[0]) if len(lines) == 1 else None
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict) and doc.get("type") == "summary":  # `watch show`'s own error, said
            g.refused[node] = f"watch show: {_said_error(doc)}"
        elif doc is not None:
            g.take(node, doc)
        elif lines:
            g.refused[node] = "not one JSON line"
        elif exits.get(node) not in (None, 0):  # the launch itself failed there: its words
            g.refused[node] = f"{launcher}: {said.get(node) or 'no words'} (exit {exits[node]})"
    return judged(g, asked, params)


def _said_error(doc: dict) -> str:
    """A node's `watch show` summary, in words: its error's message (a string, bounded), or why not."""
    error = doc.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        return "a summary without an error message"
    return message[:300]


def judged(g: S.Gathered, asked: list[str], params: dict) -> Outcome:
    """The outcome of what was gathered from the nodes asked: one blame, its counts and each
    agent's freshness. A function of the docs alone (the lab test reads the state files with it,
    where a poll through the launcher would be eight Python starts a second)."""
    from rdmacli.mesh.blame import LIARS

    rails = g.rails
    verdict = S.blame(g)
    verdict = replace(
        verdict, missing=tuple(x for x in verdict.missing if x in asked)
    )  # only the nodes asked
    error = None
    if verdict.named:
        who = ", ".join(verdict.names(rails))
        error = RdmacliError(f"the agents name {verdict.named} fault(s): {who}",
                             hint="see the blame (data.blame in JSON): a NIC or node fails with most "
                             "partners, a link alone",
                             cause=Cause.CHECK_FAILED)  # fmt: skip
    elif verdict.missing or verdict.refused:
        quiet = list(dict.fromkeys([*verdict.missing, *verdict.refused]))  # each node once
        error = RdmacliError(f"no usable state from {len(quiet)} node(s): {', '.join(quiet[:8])}",
                             hint="is `rdmacli watch run` running there (systemctl status rdmacli-watch)?",
                             cause=Cause.MISSING)  # fmt: skip
    docs = g.docs.values()
    totals = StatusTotals(nodes=len(asked), answered=len(g.docs), rails=rails,
                          bad_nodes=len(verdict.nodes), bad_nics=len(verdict.nics),
                          bad_links=len(verdict.links), disputed=len(verdict.disputed),
                          windows_min=min((d.windows for d in docs), default=0))  # fmt: skip
    # when each agent wrote what it said (its last window): how fresh the verdict is, per node
    agents = {
        node: Freshness(doc.time, doc.window, doc.windows, doc.skipped, doc.host_wait, doc.starved)
        for node, doc in g.docs.items()
    }
    warnings = []
    if verdict.fabric_slow:
        warnings.append("most NICs that answered are slower than their own recent past at once: the hosts or "
                        "the whole fabric, not one NIC or link; nobody is blamed for it")  # fmt: skip
    return Outcome("watch status", params, error=error, counts=totals.to_json(), warnings=warnings,
                   report=StatusReport(verdict, agents, LIARS, totals))  # fmt: skip
