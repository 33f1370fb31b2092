"""uvicorn's h11 protocol with the limits the webhook needs against slow or stalled clients.

uvicorn times out only idle keep-alive connections: a client that opens a connection and sends half a
request is kept forever, and enough of them exhaust the process's file descriptors (asyncio then
logs every failed accept). Here every connection must deliver a complete request within
`request_timeout` seconds of its first byte (or of being opened), and when `max_connections` are
open the oldest connection that has not delivered a request is closed to make room, so a flood of
stalled clients never locks out GitHub or /healthz.

That eviction frees a descriptor a loop turn or two after asyncio accepted the connection that caused
it, and asyncio accepts a whole batch per turn: a fast flood could still run the process out of
descriptors (asyncio then logs "accept() out of system resource" and stops listening for a second).
`GatedListener` closes that gap at the door: it never accepts while fewer than `margin` descriptors
are free; a connection that arrives then is closed at once, and counted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
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


def open_descriptors() -> int | None:
    """How many descriptors this process has open (None where the system does not list them)."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing)) - 1  # less the one that listed them
        except OSError:
            continue
    return None


class GatedListener(socket.socket):
    """A listening socket whose accept() keeps `margin` descriptors free. asyncio calls accept() up to
    a backlog's worth of times per loop turn; each call here first counts the free descriptors, and
    while fewer than `margin` are free it accepts and closes what is waiting (at most `shed_batch` a
    call, so a flood never holds the loop), then answers "nothing to accept" for this turn."""

    margin: int = 32
    shed_batch: int = 32
    on_shed: Callable[[], None] = staticmethod(lambda: None)

    def _room(self) -> bool:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        used = open_descriptors()
        return soft == resource.RLIM_INFINITY or used is None or soft - used >= self.margin

    def accept(self):  # type: ignore[override]
        for _ in range(self.shed_batch):
            if self._room():
                return super().accept()
            conn, _ = super().accept()  # BlockingIOError when nothing waits: asyncio ends the batch
            conn.close()
            self.on_shed()
            log.debug("closed a new connection at the door: fewer than %d descriptors free", self.margin)
        raise BlockingIOError("descriptors nearly exhausted; the rest waits for the next loop turn")


def gated_listener(host: str, port: int, backlog: int, margin: int, on_shed: Callable[[], None]) -> GatedListener:
    """A bound, listening TCP socket for `uvicorn.Server.run(sockets=[...])` (OSError when the address
    cannot be bound)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = GatedListener(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.margin, sock.on_shed = margin, on_shed
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
