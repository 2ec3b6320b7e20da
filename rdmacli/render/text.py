"""Text that came from elsewhere (agents, peers, files), made safe for a terminal."""

from __future__ import annotations

_CONTROL = {i: f"\\x{i:02x}" for i in [*range(32), *range(127, 160)]}  # C0, DEL, C1
_CONTROL.update({9: "\\t", 10: "\\n", 13: "\\r"})


def printable(text) -> str:
    """Control characters shown, not sent: an escape sequence in an agent's or a peer's words
    must not move the cursor, set the title or clear the screen."""
    return str(text).translate(_CONTROL)


def plain(text) -> str:
    """Words from elsewhere inside a line printed with rich markup on: control characters shown
    (printable) and rich's own markup escaped (a `[link=...]` or `[/]` in a counter's or a
    device's name is text, not a style)."""
    from rich.markup import escape

    return escape(printable(text))
