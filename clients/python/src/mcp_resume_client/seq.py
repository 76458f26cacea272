"""The reader's side of continuity: event ids, the seq check, the upgrade's echo.

Mirrors the Rust client (``crates/proto/src/seqcheck.rs``,
``crates/proto/src/upgrade.rs``) and the TypeScript one (``seq.ts``): a
reader accepts only ``last + 1``, and accepts an upgrade only when its echo
proves the replay covers everything after the reader's cursor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEQ = re.compile(r"(?:0|[1-9][0-9]{0,19})")
_U64_MAX = 2**64 - 1


def parse_seq(event_id: str) -> int | None:
    """A session-stream event id: decimal, no sign, no leading zero, a u64 (docs/protocol.md 2)."""
    if _SEQ.fullmatch(event_id) is None:
        return None
    n = int(event_id)
    return n if n <= _U64_MAX else None


def parse_request_id(event_id: str) -> tuple[int, int] | None:
    """A request-stream event id ``R/n`` as ``(R, n)``; ``R`` starts at 1 (docs/protocol.md 2)."""
    stream, slash, n = event_id.partition("/")
    if not slash:
        return None
    r = parse_seq(stream)
    k = parse_seq(n)
    if r is None or r == 0 or k is None:
        return None
    return r, k


@dataclass(frozen=True, slots=True)
class Gap:
    """A seq that is not the next one: the reader resumes from ``expected - 1``."""

    expected: int
    got: int
    why: str


class SeqChecker:
    """One reader's cursor; after an upgrade also the committed cursor ``C`` of the gate.

    Why a class: the same rules hold on SSE and over the WebSocket, before
    and after the ack, and a refused event must leave the cursor where it
    was, so that the resume asks for exactly what is missing.
    """

    __slots__ = ("last", "_replay_until")

    def __init__(self, cursor: int) -> None:
        self.last = cursor
        """The last seq accepted (the cursor to resume after)."""
        self._replay_until: int | None = None

    def expect_replay_until(self, committed: int) -> None:
        """After a ``101`` naming ``committed``: expect exactly ``last+1 ..= committed`` before the ack."""
        self._replay_until = committed

    def ack_due(self) -> int | None:
        """The cursor to ack once the replay is complete; None while it is not (or after the ack)."""
        c = self._replay_until
        return c if c is not None and self.last == c else None

    def acked(self) -> None:
        """The ack was sent: later events are live."""
        self._replay_until = None

    def on_event(self, seq: int) -> Gap | None:
        """Accepts ``seq``, or names the gap; a refused event leaves the cursor unchanged."""
        expected = self.last + 1
        if seq != expected:
            why = (
                f"duplicate seq {seq} after {self.last}"
                if seq <= self.last
                else f"gap: expected {expected}, got {seq}"
            )
            return Gap(expected, seq, why)
        if self._replay_until is not None and seq > self._replay_until:
            return Gap(
                expected,
                seq,
                f"event {seq} above the committed cursor {self._replay_until} before the ack (a gate breach)",
            )
        self.last = seq
        return None

    def on_heartbeat(self, head: int) -> Gap | None:
        """A heartbeat whose head is above the cursor means something was lost at the tail (5.3)."""
        if head > self.last:
            return Gap(self.last + 1, head, f"heartbeat head {head} above the cursor {self.last}")
        return None


@dataclass(frozen=True, slots=True)
class StartDecision:
    """What an upgrade's echo says: resumable from ``committed``, or not (``why``)."""

    committed: int | None
    why: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Whether the socket may be read."""
        return self.committed is not None


def decide_start(prior: int, echo: str | None) -> StartDecision:
    """The client's decision on a ``101`` (docs/protocol.md 5.6).

    Without an echo the socket may have started at "now", past events the
    reader never saw, so it is not resumable; an echo below ``prior`` means
    the server's head went back (the SSE resume from ``prior`` then gets the
    server's 409 ``ahead``).
    """
    committed = parse_seq(echo.strip()) if echo is not None else None
    if committed is None:
        return StartDecision(
            None,
            "missing-echo",
            f"the upgrade after {prior} carried no committed cursor ({echo!r})",
        )
    if committed < prior:
        return StartDecision(
            None,
            "echo-below-prior",
            f"the committed cursor {committed} is below the reader's cursor {prior}",
        )
    return StartDecision(committed)
