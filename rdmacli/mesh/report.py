"""From the agents' records to a verdict: pairs merged from both ends, short causes, blame.

Each pair is reported by both of its nodes (the listener and the connector). A pair passes when
both ends say so; otherwise its cause is taken from the end that knows most (a local cause such
as a port that went down beats the peer's deadline). Blame then tells a bad node (it fails with
most of its partners) from a bad link (a pair that fails while both its nodes pass elsewhere).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rdmacli.diag import counters as ctr
from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh.contract import CONNECT, LISTEN, side_of
from rdmacli.mesh.findings import FIGURES, ErrorDoc, NicRow, NodeRow, PairError, PairResult, Slow, Tally
from rdmacli.mesh.meshreport import Change
from rdmacli.mesh.records import RATES, PairRecord

if TYPE_CHECKING:
    from rdmacli.mesh.inputs import BaselinePair

# The matrix's short codes, most specific first (when the two ends of a pair disagree, the
# first wins): (code, the typed causes it stands for, words). One table; any other cause is FAIL.
CODES = (
    ("DOWN", (Cause.LOCAL_PORT_DOWN, Cause.LOCAL_ADDRESS_GONE, Cause.DEVICE_REMOVED),
     "a local port or netdev is down (the node's own RDMA link)"),
    ("BUSY", (Cause.PORT_IN_USE,),
     "the mesh port was held on the node (another mesh run or server listens there)"),
    ("ENV", (Cause.ENVIRONMENT, Cause.MEMLOCK, Cause.DEVICE_LIMIT, Cause.TRANSPORT),
     "the node's RDMA environment (no device, memlock, permissions, a transport without UD: iWARP)"),
    ("AGENT", (Cause.AGENT,),
     "the node's agent did not run, died, or missed its slot (launcher, install, --round-time)"),
    ("LINK", (Cause.LINK_ERRORS,),
     "the NIC's link counters moved (link downed, symbol or port errors) during the pair"),
    ("LOSS", (Cause.PACKET_LOSS,),
     "packet loss: the NICs retransmitted or saw sequence errors during the pair (counters)"),
    ("RNR", (Cause.RNR,), "receiver not ready: RNR NAKs during the pair (a slow or overloaded peer)"),
    ("ADDR", (Cause.ADDRESS,), "address resolution failed (ADDR_ERROR: no route/ARP to the partner)"),
    ("ROUTE", (Cause.ROUTE,), "route resolution failed (ROUTE_ERROR)"),
    ("UNR", (Cause.UNREACHABLE,), "the partner was unreachable (UNREACHABLE: no answer to the CM request)"),
    ("REJ", (Cause.REJECTED,), "the partner rejected the connection (reason in the error)"),
    ("FAIL", (), "the data exchange failed (work completion error, loss, early disconnect)"),
    ("NOLSN", (Cause.NOBODY_LISTENING,), "nothing listened at the partner (its agent was late or elsewhere)"),
    ("OVER", (Cause.OVERRUN,),
     "the pair was still running when its slot ended (torn down there; the step is named)"),
    ("TMO", (Cause.DEADLINE,), "a deadline expired (the partner never came, or stopped answering)"),
    ("SILENT", (Cause.SILENT,),
     "one end reported the pair, the other never did (its agent skipped or hid it)"),
    ("MISS", (Cause.MISSING,), "no report from either end (the run ended first)"),
    ("SLOW", (Cause.SLOW,),
     "passed, but slower than the fabric's best comparable pair (--slow-factor, --slow-fraction)"),
)  # fmt: skip
CAUSES = {code: words for code, _, words in CODES}
LOCAL = ("DOWN", "BUSY", "ENV", "AGENT")  # a node's own fault, said by itself
# what one end's failure says of the pair, contradicted when the other end passed it cleanly
# (blame: disputed, counted against neither NIC): every code but a node's own, an end's silence
# or absence, and an overrun of its own slot
UNDISPUTABLE = (*LOCAL, "SILENT", "MISS", "OVER")
PRIORITY = [code for code, _, _ in CODES]
CODE_OF = {cause: code for code, causes, _ in CODES for cause in causes}


# `--test bw`: which end received each direction, and gave its rate (records.PairRecord)
RECEIVED_BY = {"gbps_ab": CONNECT, "gbps_ba": LISTEN}
# `--test probe`: round trips each end measured of its own probes (Pair.metric takes the calmer)
PROBED_AT_EACH_END = ("rtt_p50_us", "rtt_p99_us", "rtt_min_us", "host_rtt_p50_us")
# a direction's rate as it arrived and as it was sent (the same messages in nearly the same time)
# further apart than this factor is two ends' words that cannot both be true
RATES_AGREE = 2.0

# A failed transfer (RETRY_EXC) or an early end is what lost packets do to a live partner; the
# agent that saw it alone cannot tell that from a partner that died (counters.EXPLAINED).
EXPLAINED_WITH_BOTH = (Cause.TRANSFER.value, Cause.PEER_ENDED.value)


def _moved(r: PairRecord):
    """(kind, counter, delta) of the trouble counters that moved on one end's ports."""
    for port in r.counters:
        for kind, names in port.kinds().items():
            if kind in ctr.TROUBLE:
                yield from ((kind, name, v) for name, v in names.items())


def _kinds(r: PairRecord) -> set[str]:
    return {kind for kind, _, _ in _moved(r)}


def cause_of(error: ErrorDoc | None) -> str | None:
    """The matrix's short code for an error dict (RdmacliError.to_dict): from its typed
    cause alone, never from its words. An unknown or malformed cause is FAIL."""
    if not error:
        return None
    try:
        return CODE_OF.get(Cause(error.cause), "FAIL")
    except (ValueError, TypeError):
        return "FAIL"


def code_of(error: RdmacliError | None) -> str | None:
    """cause_of for an error in hand (a probe's end, before it is a record)."""
    if error is None:
        return None
    return CODE_OF.get(error.cause, "FAIL") if error.cause is not None else "FAIL"


@dataclass
class Pair:
    """One test of two NICs: rail ra of node a (the lower rank, it listens) and rail rb of b."""

    a: int
    b: int
    round: int
    reports: dict[str, PairRecord] = field(default_factory=dict)  # by side (contract.side_of)
    ra: int = 0
    rb: int = 0
    first: Pair | None = None  # a re-test's first attempt
    slow: Slow | None = None  # passed, but slow: the figure, its value, the best, the limit

    @property
    def key(self) -> tuple[int, int, int, int]:
        return (self.a, self.ra, self.b, self.rb)

    @property
    def result(self) -> str:
        if not self.reports:
            return "missing"
        return "pass" if all(r.result == "pass" for r in self.reports.values()) else "fail"

    def error(self) -> PairError | None:
        """The most telling error of the two ends, with its cause code and which end said it."""
        errs = [
            PairError(r.error, cause_of(r.error) or "FAIL", r.rank, side)
            for side, r in self.reports.items()
            if r.result != "pass" and r.error
        ]
        if not errs:
            if self.result == "missing":
                missing = RdmacliError("neither node reported this pair", cause=Cause.MISSING)
                return PairError(ErrorDoc.of(missing.to_dict()), "MISS")
            return None
        e = min(errs, key=lambda e: PRIORITY.index(e.code))
        kind = self._explaining_kind(e)
        if kind is not None:
            e = replace(e, code=CODE_OF[ctr.CAUSE_OF_KIND[kind]], reported_code=e.code)
        return e

    def _explaining_kind(self, e: PairError) -> str | None:
        """The trouble kind (loss, rnr, link) that explains a failed transfer or an early end,
        when both ends reported the pair: the partner was alive, so the NIC's retransmits were
        the fabric's, not a dead peer's (one agent alone cannot tell the two; the mesh can)."""
        if e.code != "FAIL" or e.cause not in EXPLAINED_WITH_BOTH or len(self.reports) < 2:
            return None
        seen = {kind for r in self.reports.values() for kind in _kinds(r)}
        return next((k for k in ctr.TROUBLE if k in seen), None)

    @property
    def cause(self) -> str | None:
        e = self.error()
        return e.code if e else None

    def trouble(self, side: str | None = None) -> dict[str, int]:
        """The trouble counters (loss, rnr, link, errors) that moved on one end's port during
        the pair, or on both ends' (summed)."""
        out: dict[str, int] = {}
        for s, r in self.reports.items():
            if side is not None and s != side:
                continue
            for _, name, v in _moved(r):
                out[name] = out.get(name, 0) + v
        return out

    def lost(self) -> int:
        """`--test probe`: probes neither end had answered (each end counts its own)."""
        return sum(r.probes_sent - r.probes_answered for r in self.reports.values()
                   if r.probes_sent is not None and r.probes_answered is not None)  # fmt: skip

    def probes(self) -> tuple[int, int]:
        """`--test probe`: (probes sent, answered), both ends' together."""
        sent = sum(r.probes_sent or 0 for r in self.reports.values())
        return sent, sent - self.lost()

    @property
    def lossy(self) -> bool:
        """Trouble counters moved during the pair, or probes of a passing probe were lost."""
        return bool(self.trouble()) or self.lost() > 0

    @property
    def bad(self) -> bool:
        """Failed, or passed slow or while its NICs' trouble counters moved: blame looks at all."""
        return self.result == "fail" or (self.result == "pass" and (self.lossy or self.slow is not None))

    @property
    def ever_bad(self) -> bool:
        """Bad now, or failed (or lossy) in its first attempt: a NIC that failed and then passed
        its re-test is still evidence against that NIC (a lossy one passes now and then); a
        slowness that went away is not (jitter), and a link is blamed only on what stayed bad."""
        first = self.first
        return self.bad or (first is not None and (first.result == "fail" or first.lossy))

    @property
    def disputed(self) -> int | None:
        """The rank of the end whose failure of the pair its partner's clean pass contradicts,
        or None. A pair is one exchange both NICs took part in: RC completes a send only once
        the partner's NIC has it, and each probe crosses the wire both ways, so an end that
        passed with its own port quiet and its own probes all answered saw the wire work. One
        end's failure against that, with no counter of either port moved, is its own word (a
        liar's, or its host's), never evidence against the other NIC: blame counts it against
        neither and lists it apart. A failure with counters moved (retransmits on a lossy link
        whose last answer came after one end's slot) is weighed as before."""
        if len(self.reports) != 2:
            return None
        failing = [(s, r) for s, r in self.reports.items() if r.result != "pass"]
        if len(failing) != 1 or cause_of(failing[0][1].error) in UNDISPUTABLE:
            return None
        side = next(s for s in self.reports if s != failing[0][0])
        clean = self.reports[side]
        if self.trouble() or (clean.probes_sent or 0) != (clean.probes_answered or 0):
            return None  # a port's counters moved (either end's): the wire's evidence, weighed
        return failing[0][1].rank

    @property
    def telling(self) -> bool:
        """Evidence for the minority rule (blame.common_ends, a NIC named on a few of its pairs):
        bad now, or lossy in its first attempt. A first attempt that failed with no counter
        moving and passed when tested again says nothing of the wire (a listener up late, a host
        too busy to resolve in its slot: the lab saw both on an overloaded host), and two such
        pairs at one NIC are not a bad NIC."""
        first = self.first
        return self.bad or (first is not None and first.lossy)

    @property
    def symptom(self) -> str:
        """What a bad pair shows, for telling one fault from several: "loss" when packets were
        lost (counters moved or probes unanswered, in either attempt: a lossy NIC's pairs pass
        or fail by chance), else "slow" for a pair that passed slow, else "failed"."""
        first = self.first
        if self.lossy or (first is not None and first.lossy):
            return "loss"
        return "slow" if self.result == "pass" and self.slow is not None else "failed"

    def metric(self, key: str):
        """A figure of the pair: a direction's rate from the end it came to, every other figure
        from the connector's report (None when it has none). A probed pair's round trips were
        measured at both ends, each of its own probes: the calmer end's figure is the pair's.
        Every probe, whoever sent it, crosses the wire both ways, so a slow wire or NIC slows
        both ends' round trips alike; a prober whose host was busy slows only its own (in the
        lab one starved agent of 32 made two healthy pairs look slow)."""
        if key in PROBED_AT_EACH_END:
            probed = [getattr(r, key) for r in self.reports.values() if r.probes_sent is not None]
            if len(probed) == 2 and None not in probed:
                return min(probed)
        r = self.reports.get(RECEIVED_BY.get(key, CONNECT))
        return getattr(r, key) if r is not None else None

    def disagreement(self) -> str | None:
        """Why the two ends' words about a passing `--test bw` pair cannot both be true, or
        None: each direction's messages received at one end are the messages its sender's
        completions counted at the other (RC: a send completes when the receiver's NIC has
        placed it, and the stream ends only once all have), and its rate as it arrived is the
        rate it was sent at, within RATES_AGREE."""
        a, b = self.reports.get(LISTEN), self.reports.get(CONNECT)
        if self.result != "pass" or a is None or b is None:
            return None
        for key, sender, receiver in (("gbps_ab", a, b), ("gbps_ba", b, a)):
            sent, got = sender.messages_sent, receiver.messages_received
            if sent is not None and got is not None and sent != got:
                return f"{key[-2:]}: {got} messages received, {sent} sent"
            sent_at, got_at = sender.gbps_sent, getattr(receiver, key)
            if sent_at and got_at and not 1 / RATES_AGREE <= got_at / sent_at <= RATES_AGREE:
                return f"{key[-2:]}: {got_at:g} Gb/s as it arrived, {sent_at:g} Gb/s as it was sent"
        return None

    def set_rates_aside(self) -> None:
        """Its ends' words contradict each other: no rate of theirs stands for this pair."""
        blank: dict[str, Any] = dict.fromkeys(RATES)
        for side, r in self.reports.items():
            self.reports[side] = replace(r, **blank)

    def side_of(self, rank: int) -> str:
        """Which end of this pair a node is."""
        return side_of(rank, self.b if rank == self.a else self.a)

    def judged(self, names: Sequence[str], devices: Sequence[Sequence[Any]] | None = None) -> PairResult:
        """The pair as the run reports it (findings.PairResult), from both ends' records."""
        probed = any(r.probes_sent is not None for r in self.reports.values())
        return PairResult(
            a=names[self.a], b=names[self.b], a_rank=self.a, b_rank=self.b, rail_a=self.ra, rail_b=self.rb,
            device_a=device_of(devices, self.a, self.ra), device_b=device_of(devices, self.b, self.rb),
            round=self.round, result=self.result,
            cause=self.cause or ("SLOW" if self.slow else "LOSS" if self.lost() else None),
            error=self.error(), slow=self.slow, figures=tuple(self.metric(key) for key in FIGURES),
            steps_us=self.metric("steps_us"), gbps_ab=self.metric("gbps_ab"), gbps_ba=self.metric("gbps_ba"),
            probes=self.probes() if probed else None,
            counters={side: t for side in (LISTEN, CONNECT) if (t := self.trouble(side))} or None,
        )  # fmt: skip


def device_of(devices: Sequence[Sequence[Any]] | None, rank: int, rail: int) -> str | None:
    try:
        return devices[rank][rail] if devices else None
    except (IndexError, TypeError):
        return None


def node_table(n: int, pairs: list[Pair], names: Sequence[str], addresses: Sequence[Sequence[str]],
               healthy=None) -> list[NodeRow]:  # fmt: skip
    """Per node: pairs passed, failed and slow, and the median of its pairs' p99 latency
    (`healthy`: the probe's healthy pairs, as columns, counted in)."""
    of: list[list[Pair]] = [[] for _ in range(n)]
    for p in pairs:
        of[p.a].append(p)
        of[p.b].append(p)
    more = healthy.per_node_p99() if healthy is not None else {}
    rows = []
    for x in range(n):
        mine = of[x]
        p99s = [p.metric("rtt_p99_us") for p in mine if p.result == "pass" and p.metric("rtt_p99_us")]
        p99s += more.get(x, ())
        p99 = round(statistics.median(p99s), 1) if p99s else None
        rows.append(NodeRow(names[x], x, tuple(addresses[x]), _tally(mine, len(more.get(x, ()))), p99))
    return rows


def _tally(pairs: list[Pair], healthy: int = 0) -> Tally:
    return Tally(
        passed=sum(p.result == "pass" for p in pairs) + healthy,
        failed=sum(p.result == "fail" for p in pairs),
        missing=sum(p.result == "missing" for p in pairs),
        slow=sum(p.slow is not None for p in pairs),
    )


def nic_table(n: int, rails: int, pairs: list[Pair], names: Sequence[str], addresses: Sequence[Sequence[str]],
              devices: Sequence[Sequence[Any]] | None = None, healthy=None) -> list[NicRow]:  # fmt: skip
    """Per NIC (node, rail): the same counts and the median p50 of its passing pairs."""
    of: dict[tuple[int, int], list[Pair]] = {(x, k): [] for x in range(n) for k in range(rails)}
    for p in pairs:
        of[(p.a, p.ra)].append(p)
        of[(p.b, p.rb)].append(p)
    more = healthy.per_nic() if healthy is not None else {}
    rows = []
    for (x, k), mine in of.items():
        p50s = [p.metric("rtt_p50_us") for p in mine if p.result == "pass" and p.metric("rtt_p50_us")]
        extra = more.pop(x * rails + k, ())
        p50s += extra
        p50 = round(statistics.median(p50s), 1) if p50s else None
        rows.append(
            NicRow(names[x], x, k, device_of(devices, x, k), addresses[x][k], _tally(mine, len(extra)), p50)
        )
    return rows


def compare(baseline: Sequence[BaselinePair], pairs: Sequence[PairResult], slower_by: float = 1.5
            ) -> list[Change]:  # fmt: skip
    """Pairs that started failing or got slower than in an earlier run's summary (its pairs
    read and checked at its edge, inputs.read_baseline)."""
    before = {p.nics(): p for p in baseline}
    flagged = []
    for q in pairs:
        old = before.get(q.nics())
        if old is None:
            continue
        if q.result == "fail" and old.result == "pass":
            flagged.append(Change(q.a, q.b, "now failing", q.cause))
            continue
        for key in ("rtt_p50_us", "rtt_p99_us", "setup_us"):
            new_v: Any = q.figure(key)
            old_v: Any = getattr(old, key)
            numbers = isinstance(new_v, (int, float)) and isinstance(old_v, (int, float))
            if numbers and old_v > 0 and new_v > old_v * slower_by:
                flagged.append(Change(q.a, q.b, f"{key} {old_v:g} -> {new_v:g}"))
                break
    return flagged
