"""The C tools' side of each protocol, played on the scripted RDMA stack (tests/unit/fakerdma),
and the result of one command run through click."""

from __future__ import annotations

import json

from fakerdma import FakeBackend

from rdmacli.rdma import constants as C
from rdmacli.schema import SUMMARY_SCHEMA


class Result:
    def __init__(self, r):
        self.exit_code, self.stdout, self.stderr = r.exit_code, r.stdout, r.stderr
        self.exception = r.exception

    @property
    def doc(self) -> dict:
        """The summary (the last JSON document on stdout), validated against the schema."""
        import jsonschema

        text = self.stdout
        if text.lstrip().startswith("{\n"):  # --json: one indented document
            doc = json.loads(text)
        else:  # --json-lines: the last line
            doc = json.loads([line for line in text.splitlines() if line.startswith("{")][-1])
        jsonschema.validate(doc, SUMMARY_SCHEMA)
        return doc

    def records(self, kind: str) -> list[dict]:
        return [r for r in map(json.loads, self.stdout.splitlines()) if r.get("type") == kind]


# -- the C tools' side of each protocol --------------------------------------------------------


def ucmatose_server(backend: FakeBackend, count: int = 10, size: int = 100) -> None:
    """ucmatose -s: sends COUNT messages once connected; disconnects after the echo."""
    echoed: dict = {}

    def on_connect(cm, param):
        backend.then(lambda: [backend.deliver(cm, b"m" * size) for _ in range(count)])
        return [backend.event(cm, C.ESTABLISHED)]

    def on_send(cm, wr):
        echoed[cm.key] = echoed.get(cm.key, 0) + 1
        if echoed[cm.key] == count:
            backend.peer_disconnects(cm)

    backend.script["connect"] = on_connect
    backend.on_send = on_send


def c_clients(backend: FakeBackend, n: int = 1, ps: int = C.PS_TCP) -> None:
    """n clients ask as soon as the server listens; each echoes what it gets (ucmatose -c)."""
    backend.script["listen"] = lambda cm: [backend.request(ps=ps) for _ in range(n)][:0]
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])


def rping_server(
    backend: FakeBackend, hang_up_after: int | None = None, mute_after: int | None = None, then=None
) -> None:
    """rping -s: a go-ahead for each advert; with hang_up_after, it goes away after that many
    pings (killed, or its own -C); with mute_after, it stops answering after that many (its
    connection stays up); `then(n)` is called after each ping it answered."""
    adverts: dict = {}

    def on_send(cm, wr):
        if cm.peer_gone:
            return  # it went away: nothing answers any more
        if mute_after is not None and adverts.get(cm.key, 0) >= 2 * mute_after:
            return
        adverts[cm.key] = adverts.get(cm.key, 0) + 1
        if then is not None and adverts[cm.key] % 2 == 0:
            then(adverts[cm.key] // 2)
        backend.deliver(cm, bytes(16))
        if hang_up_after is not None and adverts[cm.key] == 2 * hang_up_after:
            backend.peer_disconnects(cm)

    backend.on_send = on_send


def mckey_sender(backend: FakeBackend, count: int = 10, size: int = 100) -> None:
    """mckey -s: COUNT datagrams to the group once the receiver has joined."""

    def join(cm, sa):
        backend.then(lambda: [backend.deliver(cm, b"d" * (size + 40), imm=9) for _ in range(count)])
        return backend.default_reaction(cm, "join")

    backend.script["join"] = join
