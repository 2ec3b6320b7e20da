"""What the engine needs to know of a protocol: its row's type (`Spec`). The rows themselves,
one per C tool, are protocols/table.py's; the engine reads a row, never the table."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    """A protocol's row; every row below names its fields (a dozen positional numbers read as
    none). Not kw_only: that needs Python 3.10, and rdmacli runs on 3.9."""

    name: str  # rdmacli's name for it: connect, ping, ud, mcast
    c_tool: str  # the C utility it is wire-compatible with
    transport: str  # "RC" or "UD"
    default_port: int | None  # None: the protocol has no port (multicast joins a group)
    port_spaces: tuple[str, ...]  # the first is the default
    default_count: int | None  # None: until interrupted
    default_size: int
    min_size: int
    max_size: int  # the largest SIZE a server of ours accepts by default
    selftest_port: int | None  # apart from the tools' defaults, so a running server is not hit
    client: str  # "module:Class"
    server: str
    hello_kind: int | None = None  # its number in rdmacli's hello (protocols/hello.py); None: none sent
    # `listen --NAME`'s words (its row's fields in braces): what that flag serves; None: no flag
    # (connect, the default, and protocols listen does not serve)
    serves: str | None = None

    def serves_words(self) -> str:
        return (self.serves or "").format_map(vars(self))

    @property
    def default_port_space(self) -> str:
        return self.port_spaces[0]

    @property
    def transport_needs(self) -> tuple[str, ...]:
        """What its transport must have (rdmacli.transports): datagrams for UD, multicast to join
        a group (iWARP has neither)."""
        from rdmacli.transports import DATAGRAMS, MULTICAST

        return ((DATAGRAMS,) if self.transport == "UD" else ()) + ((MULTICAST,) if self.joins_group else ())

    @property
    def joins_group(self) -> bool:
        """A multicast protocol: it joins a group instead of connecting to a port (no port)."""
        return self.default_port is None

    def client_class(self):
        return _load(self.client)

    def server_class(self):
        return _load(self.server)

    def check_size(self, size: int) -> str | None:
        """A reason SIZE is out of range, in the C tool's words where it has some."""
        if self.min_size <= size <= self.max_size:
            return None
        from rdmacli.units import bytes_words

        low = size < self.min_size
        bound = bytes_words(self.min_size if low else self.max_size)
        span = f"{bytes_words(self.min_size)} to {bytes_words(self.max_size)}"
        side, most = ("less", "least") if low else ("more", "most")
        return f"'{size}' is {side} than {bound}, the {most} for {self.name} ({span})"


def _load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)
