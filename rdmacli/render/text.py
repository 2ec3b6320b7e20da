"""Text that came from elsewhere (agents, peers, files), made safe for a terminal."""

from __future__ import annotations

_CONTROL = {i: f"\\x{i:02x}" for i in [*range(32), *range(127, 160)]}  # C0, DEL, C1
_CONTROL.update({9: "\\t", 10: "\\n", 13: "\\r"})


def printable(text) -> str:
    """Control characters shown, not sent: an escape sequence in an agent's or a peer's words
    must not move the cursor, set the title or clear the screen."""
    return str(text).translate(_CONTROL)
