"""CM events as they happen: a rich live table on a terminal, plain lines otherwise, or JSON lines.

Receives the engine's records through a callback (httpx _main.py style); knows nothing of C.
"""

from __future__ import annotations

import string
import sys

from rdmacli import events as E
from rdmacli.outcome import dumps
from rdmacli.units import duration

COLUMNS = ("time", "conn", "event", "status", "details")
# what a server's connection line says it served, by protocol
SERVED = {
    "connect": "{messages_received} received, {messages_sent} sent",
    "ping": "{pings_served} pings served",
    "ud": "{datagrams_received} datagrams received, {datagrams_sent} sent",
    "bw": "{op} of {size_bytes} bytes, {messages_received} sends received",
    "lat": "{op}, {iterations_answered} iterations answered",
}


def served_words(rec: E.Finished) -> str | None:
    """What a server's connection served, in its protocol's words; None for a connection that
    ended before it counted what the words need (a perftest control connection, a client gone at
    once): a KeyError here ended `listen --perftest` as an internal error."""
    served = SERVED.get(rec.protocol or "")
    if served is None:
        return None
    needed = [name for _, name, _, _ in string.Formatter().parse(served) if name]
    return served.format(**rec.served) if all(rec.served.get(n) is not None for n in needed) else None


DETAILS = (  # a CM event's data as the table shows it: its name there, its format
    ("private_data_len", "pdata", "{}"),
    ("responder_resources", "resp_res", "{}"),
    ("initiator_depth", "init_depth", "{}"),
    ("retry_count", "retry", "{}"),
    ("rnr_retry_count", "rnr", "{}"),
    ("qp_num", "qp_num", "{}"),
    ("qkey", "qkey", "{:#x}"),
)


def _details(data: dict) -> str:
    return " ".join(f"{short}={form.format(data[k])}" for k, short, form in DETAILS if k in data)


def _row(rec: E.CmEventRecord) -> tuple[str, ...]:
    conn = "" if rec.conn is None else str(rec.conn)
    return (f"{duration(rec.t_us or 0):>9}", conn, rec.event, rec.status_text, _details(rec.data))


class EventView:
    def __init__(self, app, *, show_events: bool):
        self.app = app
        self.show = show_events
        self.live = None
        self.table = None

    @property
    def detailed(self) -> bool:
        """Whether the engine need make a record per CM event and step (engine.flow)."""
        return self.show or self.app.json_lines

    def __enter__(self):
        if self.show and self.app.live:
            from rich.live import Live
            from rich.table import Table

            self.table = Table(title="CM events", title_justify="left")
            for col in COLUMNS:
                self.table.add_column(col, no_wrap=col != "details")
            self.live = Live(self.table, console=self.app.err, refresh_per_second=12, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.live = None

    def __call__(self, rec: E.Event) -> None:
        if self.app.json_lines:
            sys.stdout.write(dumps(rec.to_dict(), separators=(",", ":")) + "\n")
            sys.stdout.flush()
            return
        if self.app.machine:
            return
        if isinstance(rec, E.Ready):
            self.app.info(f"listening on {rec.address}:{rec.port}")
        elif isinstance(rec, E.Joined):
            j = rec.info
            self.app.info(
                f"joined dgid: {j.mgid} mlid {j.mlid:#x} sl {j.sl} (group {j.group}, qp {rec.conn})"
            )
        elif isinstance(rec, E.Request) and self.show:
            if self.table is not None:
                self.table.add_row(
                    f"{duration(rec.t_us or 0):>9}",
                    str(rec.conn),
                    "(request)",
                    "",
                    f"from {rec.remote} on {rec.device}",
                )
            else:
                text = f"connection {rec.conn}: request from {rec.remote} on {rec.device}"
                self.app.err.print(text, markup=False, highlight=False)
        elif isinstance(rec, E.Waiting):
            self.app.info(
                f"nothing is listening at {rec.remote} yet: asking again for up to {rec.until_s:g} s"
            )
        elif isinstance(rec, E.Rejected):
            self.app.info(f"rejected connection {rec.conn} from {rec.remote}: {rec.reason}")
        elif isinstance(rec, E.Finished) and not self.app.quiet:
            self._connection_line(rec)
        elif isinstance(rec, E.CmEventRecord) and self.show:
            if self.table is not None:
                self.table.add_row(*_row(rec))
            else:
                self.app.err.print("  ".join(_row(rec)), highlight=False, markup=False)

    def _connection_line(self, rec: E.Finished) -> None:
        text = f"connection {rec.conn} from {rec.remote}: {rec.state}"
        served = served_words(rec)
        if served:
            text += f" ({served})"
        if rec.error:
            text += f": {rec.error.message}"
        self.app.err.print(text, markup=False, highlight=False)
