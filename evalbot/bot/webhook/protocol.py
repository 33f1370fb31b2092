"""uvicorn's h11 protocol with the limits the webhook needs against slow or stalled clients.

uvicorn times out only idle keep-alive connections: a client that opens a connection and sends half a
request is kept forever, and enough of them exhaust the process's file descriptors (asyncio then
logs every failed accept). Here every connection must deliver a complete request within
`request_timeout` seconds of its first byte (or of being opened), and when `max_connections` are
open the oldest connection that has not delivered a request is closed to make room, so a flood of
stalled clients never locks out GitHub or /healthz.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("evalbot.service")
_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR)  # the client has sent all it will send


class GuardedH11Protocol(H11Protocol):
    request_timeout: float = 10.0
    max_connections: int = 256
    on_close: Callable[[str], None] = staticmethod(lambda reason: None)  # the service's metrics

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._opened = self.loop.time()
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._make_room()
        self._arm()

    def _waiting(self) -> bool:
        """True while this connection owes us (the rest of) a request."""
        return self.conn.their_state not in _RECEIVED

    def _make_room(self) -> None:
        stalled = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol) and c._waiting()]
        victim = min(stalled, key=lambda c: c._opened, default=None)
        if victim is None:  # every other connection is being served: this one has to go
            victim = self
        victim._close("too many connections")

    def _arm(self) -> None:
        if self._deadline is None and not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.request_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self._waiting():
            self._close("no complete request in time")

    def _close(self, reason: str) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.on_close(reason)
            log.debug("closing a connection from %s: %s", self.client, reason)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in _RECEIVED:
            self._disarm()  # the whole request is here: the app's answer is not the client's to delay
        else:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def guarded_protocol(request_timeout: float, max_connections: int, on_close: Callable[[str], None]) -> type[H11Protocol]:
    """A protocol class for `uvicorn.Config(http=...)` with these limits."""
    return type("EvalbotH11Protocol", (GuardedH11Protocol,), {
        "request_timeout": request_timeout, "max_connections": max_connections, "on_close": staticmethod(on_close),
    })
