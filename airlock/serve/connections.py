"""What a connection may hold of the service before it has asked for anything.

uvicorn alone keeps a connection that never sends a request open for ever, and counts it against
limit_concurrency: 256 idle sockets, no token needed, and every client got a plain-text 503
(issue 26). The protocol here is uvicorn's own h11 protocol with three rules on top:

* a connection that has not sent a complete request head within `head_timeout` seconds of
  opening, or of its last answer, is closed (a request in progress is never cut);
* idle connections (none of their requests in progress) are bounded per client address: the
  oldest idle one of that address is closed when a new one would exceed `per_client`;
* all connections are bounded by `max_connections` the same way, the oldest idle first.

So a flood of idle sockets costs its sender its own oldest sockets, never another client's
request. How many requests run at once is the Guard's limit (airlock.serve.security), which
answers with the service's JSON error and headers.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT = 5.0  # seconds for a request head (uvicorn keeps an idle keep-alive 5 s too)
PER_CLIENT = 32  # idle connections one client address may hold
MAX_CONNECTIONS = 1024  # connections in all


def protocol(head_timeout: float = HEAD_TIMEOUT, per_client: int = PER_CLIENT,
             max_connections: int = MAX_CONNECTIONS) -> type[asyncio.Protocol]:
    """uvicorn's `http` protocol class with these bounds."""

    class Bounded(_Bounded):
        pass

    Bounded.head_timeout = head_timeout
    Bounded.per_client = per_client
    Bounded.max_connections = max_connections
    return Bounded


class _Bounded(H11Protocol):
    head_timeout = HEAD_TIMEOUT
    per_client = PER_CLIENT
    max_connections = MAX_CONNECTIONS

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.opened = self.loop.time()
        self.head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()
        self._bound()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.opened = self.loop.time()  # idle again: the oldest idle is the longest idle
        self._arm()

    def busy(self) -> bool:
        """A request of this connection is in progress (its head has come)."""
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.head_timer = self.loop.call_later(self.head_timeout, self._head_timeout)

    def _disarm(self) -> None:
        timer = getattr(self, "head_timer", None)
        if timer is not None:
            timer.cancel()
            self.head_timer = None

    def _head_timeout(self) -> None:
        self.head_timer = None
        if not self.busy():  # no complete head since the connection opened or last answered
            self.transport.close()

    def _bound(self) -> None:
        host = self.client[0] if self.client else None
        idle = [c for c in self.connections if isinstance(c, _Bounded) and not c.busy()]
        mine = [c for c in idle if c.client and c.client[0] == host]
        if len(mine) > self.per_client:
            _close_oldest(mine, len(mine) - self.per_client, self)
        if len(self.connections) > self.max_connections:
            _close_oldest(idle, len(self.connections) - self.max_connections, self)


def _close_oldest(conns: list[_Bounded], count: int, newest: _Bounded) -> None:
    for conn in sorted((c for c in conns if c is not newest), key=lambda c: c.opened)[:count]:
        conn.transport.close()
        conn.connections.discard(conn)  # counted out now, whenever the loop reports it lost
