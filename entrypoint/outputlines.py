"""A training command's raw output, split into lines for the launcher to read (pure: bytes in).

The launcher relays the command's output unchanged (kubectl logs and the kept log show it as the
command wrote it) and reads it line by line on the way (the tracker, the group-break detector,
the crash fingerprint). A progress bar (tqdm, Keras' Progbar) redraws itself with `\\r` and
writes no newline for minutes, so `\\r` ends a line here as `\\n` does: each redraw is a line.

Bytes are relayed up to the last line end seen; an unfinished line waits for its end (or the
end of the output), so a launcher line printed meanwhile never lands inside a line of the
command's. A line longer than LINE_CAP is relayed whole, at once, and read only up to the cap
(`cut` counts those), so the launcher's memory per line is bounded whatever the command writes.
"""

from __future__ import annotations

import re

LINE_CAP = 64 * 1024  # bytes of one line the launcher reads (the relay is never cut)
_END = re.compile(rb"\r\n|\r|\n")


class OutputLines:
    """Fed one attempt's output chunk by chunk (`feed`), then `finish` at its end: each returns
    (the bytes to relay now, the lines ended meanwhile as text, empty ones left out)."""

    def __init__(self, cap: int = LINE_CAP):
        self.cap = cap
        self.cut = 0  # lines longer than the cap, read only up to it
        self._tail = bytearray()  # the unfinished line, not relayed yet
        self._skipping = False  # the rest of a line already cut at the cap: relayed, not read

    def feed(self, chunk: bytes) -> tuple[bytes, list[str]]:
        self._tail += chunk
        end = max(self._tail.rfind(b"\n"), self._tail.rfind(b"\r")) + 1
        if end == 0:
            if len(self._tail) <= self.cap:
                return b"", []
            end = len(self._tail)  # a line past the cap: relay it now, read its first cap bytes
        relay = bytes(self._tail[:end])
        del self._tail[:end]
        return relay, self._lines(relay)

    def finish(self) -> tuple[bytes, list[str]]:
        """The output ended: what is left of an unfinished line."""
        relay = bytes(self._tail)
        self._tail.clear()
        return relay, self._lines(relay + b"\n") if relay else []

    def _lines(self, relay: bytes) -> list[str]:
        pieces = _END.split(relay)
        unfinished = pieces.pop()  # b"" when the relay ends with a line end
        lines = []
        for piece in pieces:
            if self._skipping:  # the end of a line cut at the cap: read already
                self._skipping = False
                continue
            lines.append(self._read(piece))
        if unfinished and not self._skipping:
            lines.append(self._read(unfinished))
            self._skipping = True
        return [line for line in lines if line]

    def _read(self, piece: bytes) -> str:
        if len(piece) > self.cap:
            self.cut += 1
            piece = piece[: self.cap]
        return piece.decode(errors="replace")
