"""The client's view of its servers: health state, least-outstanding-requests choice, re-probing.

A :class:`ServerPool` holds one :class:`ServerState` per base URL. Servers start as *up* (nothing is known
until the first call or :meth:`ServerPool.probe_all`). :meth:`ServerPool.pick` returns the up server with the
fewest outstanding items (ties go round-robin). A server that fails is marked *down*; a background task then
probes its ``GET /healthz`` every ``probe_interval_s`` and puts it back in rotation on the first 200.

This module does not send execution requests and does not decide when a failure is the server's fault;
:mod:`tirl.service.client` does both.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

from tirl.service.transport import HttpTransport, TransportError

log = logging.getLogger(__name__)


@dataclass
class ServerState:
    """What the client knows about one server.

    Attributes:
        url: base URL without a trailing slash (``http://10.0.0.5:8088``).
        up: in rotation.
        outstanding: items sent to it and not yet answered.
        last_error: why it was last marked down ('' if never).
        boot_id: the server's ``boot_id`` from its last good health probe (None before one).
        limits: the server's ``limits`` object from its last good health probe.
        marked_down: how many times it was taken out of rotation.
    """

    url: str
    up: bool = True
    outstanding: int = 0
    last_error: str = ""
    boot_id: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    marked_down: int = 0


def normalize_url(url: str) -> str:
    """``url`` without trailing slashes; ``http://`` is added when no scheme is given.

    Raises:
        ValueError: an empty URL.
    """
    url = url.strip().rstrip("/")
    if not url:
        raise ValueError("empty server URL")
    if "://" not in url:
        url = "http://" + url
    return url


class ServerPool:
    """Health-aware set of servers with least-outstanding-requests selection.

    Args:
        urls: base URLs of the servers (at least one; duplicates removed).
        http: the client's HTTP transport, used for health probes.
        probe_interval_s: seconds between probes of a down server.
        probe_timeout_s: timeout of one health probe.

    Raises:
        ValueError: no URL given.
    """

    def __init__(
        self,
        urls: list[str],
        http: HttpTransport,
        probe_interval_s: float = 0.5,
        probe_timeout_s: float = 2.0,
    ) -> None:
        unique = list(dict.fromkeys(normalize_url(u) for u in urls))
        if not unique:
            raise ValueError("SandboxClient needs at least one server URL")
        self.servers = [ServerState(u) for u in unique]
        self.http = http
        self.probe_interval_s = probe_interval_s
        self.probe_timeout_s = probe_timeout_s
        self._rr = itertools.count()
        self._probers: dict[str, asyncio.Task[None]] = {}
        self._changed = asyncio.Event()

    @property
    def up_count(self) -> int:
        """Servers in rotation now."""
        return sum(s.up for s in self.servers)

    def pick(self, prefer: ServerState | None = None) -> ServerState | None:
        """The server for the next batch: ``prefer`` if it is up, else the up server with the fewest
        outstanding items (ties round-robin); None when every server is down."""
        if prefer is not None and prefer.up:
            return prefer
        up = [s for s in self.servers if s.up]
        if not up:
            return None
        start = next(self._rr) % len(up)
        rotated = up[start:] + up[:start]
        return min(rotated, key=lambda s: s.outstanding)

    async def probe(self, server: ServerState) -> bool:
        """One ``GET /healthz``; True on a 200 with a JSON body (then ``boot_id``/``limits`` are updated)."""
        try:
            resp = await self.http.request(
                "GET",
                server.url + "/healthz",
                read_timeout_s=self.probe_timeout_s,
                connect_timeout_s=self.probe_timeout_s,
            )
            if resp.status != 200:
                server.last_error = f"healthz answered {resp.status}"
                return False
            body = resp.json()
        except TransportError as exc:
            server.last_error = f"healthz failed: {exc}"
            return False
        except ValueError as exc:
            server.last_error = f"healthz answered a body that is not JSON: {exc}"
            return False
        if isinstance(body, dict):
            server.boot_id = body.get("boot_id", server.boot_id)
            if isinstance(body.get("limits"), dict):
                server.limits = body["limits"]
        return True

    async def probe_all(self) -> dict[str, bool]:
        """Probe every server now; mark each up or down accordingly. Returns ``{url: healthy}``."""
        results = await asyncio.gather(*(self.probe(s) for s in self.servers))
        for server, ok in zip(self.servers, results):
            if ok:
                self.mark_up(server)
            else:
                self.mark_down(server, server.last_error)
        return {s.url: ok for s, ok in zip(self.servers, results)}

    def mark_up(self, server: ServerState) -> None:
        """Put ``server`` (back) in rotation and wake batches waiting for a server."""
        if not server.up:
            log.info("sandbox server %s is back in rotation", server.url)
        server.up = True
        self._changed.set()
        self._changed = asyncio.Event()

    def mark_down(self, server: ServerState, reason: str) -> None:
        """Take ``server`` out of rotation and start re-probing it in the background."""
        if server.up:
            server.marked_down += 1
            log.warning("sandbox server %s taken out of rotation: %s", server.url, reason)
        server.up = False
        server.last_error = reason
        task = self._probers.get(server.url)
        if task is None or task.done():
            self._probers[server.url] = asyncio.ensure_future(self._reprobe(server))

    async def wait_for_up(self, timeout_s: float) -> bool:
        """Wait until at least one server is up, at most ``timeout_s`` seconds. True if one is."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self.up_count == 0:
            remaining = end - loop.time()
            if remaining <= 0:
                return False
            event = self._changed
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return self.up_count > 0
        return True

    async def _reprobe(self, server: ServerState) -> None:
        while not server.up:
            await asyncio.sleep(self.probe_interval_s)
            if await self.probe(server):
                self.mark_up(server)
                return

    async def aclose(self) -> None:
        """Stop the background probes."""
        tasks = [t for t in self._probers.values() if not t.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._probers.clear()

    def describe(self) -> str:
        """One line per server: URL, up/down, outstanding, last error."""
        return "; ".join(
            f"{s.url} {'up' if s.up else 'down'} outstanding={s.outstanding}"
            + (f" ({s.last_error})" if s.last_error and not s.up else "")
            for s in self.servers
        )
