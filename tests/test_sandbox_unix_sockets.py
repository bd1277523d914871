"""Calls reach no Unix socket outside themselves (issue 23, item 3).

The exploit: with a world-writable listening socket on the host (``/tmp/...``; on a real host: X11, D-Bus,
container runtimes, local model servers), ``socket.socket(socket.AF_UNIX).connect(path)`` from a call
connected. Now the seccomp filter denies ``connect`` (a call holds only ``AF_UNIX`` sockets, so every connect
would name a path or an abstract address) and datagram ``AF_UNIX`` sockets (``sendto``/``sendmsg`` with an
address would reach a host socket without ``connect``); socket pairs, which asyncio and ``multiprocessing``
use, still work.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading

import pytest

from sandbox_helpers import layer_active
from tirl.sandbox import ExecutionRequest, LocalSandbox

PROBE = r"""
import json, socket
out = {{}}
for name, family, kind, address in [("stream", socket.AF_UNIX, socket.SOCK_STREAM, {path!r}),
                                    ("seqpacket", socket.AF_UNIX, socket.SOCK_SEQPACKET, {seq!r}),
                                    ("abstract", socket.AF_UNIX, socket.SOCK_STREAM, {abstract!r}),
                                    ("dgram", socket.AF_UNIX, socket.SOCK_DGRAM, {dgram!r})]:
    try:
        s = socket.socket(family, kind)
        if kind == socket.SOCK_DGRAM:
            s.sendto(b"hi", address)
        else:
            s.settimeout(2)
            s.connect(address)
            s.sendall(b"hi")
        out[name] = "reached"
    except OSError as exc:
        out[name] = type(exc).__name__
try:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"hi", {dgram!r})
    out["socketpair_dgram"] = "reached"
except OSError as exc:
    out["socketpair_dgram"] = type(exc).__name__
a, b = socket.socketpair()
a.sendall(b"pair")
out["socketpair"] = b.recv(4).decode()
print(json.dumps(out))
"""


class Listeners:
    """Listening host sockets: pathname stream and seqpacket, abstract stream, pathname datagram; each
    records whether anything reached it."""

    def __init__(self, root: str) -> None:
        self.reached: list[str] = []
        self.path = os.path.join(root, "host.sock")
        self.seq = os.path.join(root, "host-seq.sock")
        self.dgram = os.path.join(root, "host-dgram.sock")
        self.abstract = "\0tirl-test-" + os.path.basename(root)
        self.socks = []
        for name, kind, address in (
            ("stream", socket.SOCK_STREAM, self.path),
            ("seqpacket", socket.SOCK_SEQPACKET, self.seq),
            ("abstract", socket.SOCK_STREAM, self.abstract),
            ("dgram", socket.SOCK_DGRAM, self.dgram),
        ):
            s = socket.socket(socket.AF_UNIX, kind)
            s.bind(address)
            if not address.startswith("\0"):
                os.chmod(address, 0o777)  # world-writable: any uid may connect
            if kind != socket.SOCK_DGRAM:
                s.listen(8)
            s.settimeout(0.2)
            self.socks.append((name, kind, s))
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop:
            for name, kind, s in self.socks:
                try:
                    if kind == socket.SOCK_DGRAM:
                        s.recv(16)
                    else:
                        s.accept()[0].close()
                    self.reached.append(name)
                except (TimeoutError, OSError):
                    pass

    def close(self) -> None:
        self.stop = True
        self.thread.join(5)
        for _, _, s in self.socks:
            s.close()


@pytest.fixture
def listeners():
    root = tempfile.mkdtemp(prefix="tirl-unix-", dir="/tmp")
    os.chmod(root, 0o755)
    ls = Listeners(root)
    try:
        yield ls
    finally:
        ls.close()
        for name in os.listdir(root):
            os.unlink(os.path.join(root, name))
        os.rmdir(root)


async def test_calls_reach_no_host_unix_socket(listeners: Listeners) -> None:
    async with LocalSandbox(workers=1, preload=()) as sb:
        if not layer_active(await sb.layer_report(), "seccomp"):
            pytest.skip("needs the seccomp layer")
        code = PROBE.format(path=listeners.path, seq=listeners.seq, abstract=listeners.abstract, dgram=listeners.dgram)
        result = await sb.run(ExecutionRequest(code, timeout_s=30))
    assert result.status == "ok", result.stderr
    out = json.loads(result.stdout)
    assert out["socketpair"] == "pair"  # what asyncio and multiprocessing use still works
    assert {k: v for k, v in out.items() if v == "reached"} == {}, out
    assert listeners.reached == []


async def test_asyncio_and_multiprocessing_still_work() -> None:
    code = (
        "import asyncio, multiprocessing as mp\n"
        "async def main():\n    await asyncio.sleep(0)\n    return 5\n"
        "print(asyncio.run(main()))\n"
        "with mp.Pool(2) as p:\n    print(sum(p.map(abs, [-1, -2, 3])))\n"
        "a, b = mp.Pipe()\na.send([1, 2])\nprint(b.recv())"
    )
    async with LocalSandbox(workers=1, preload=()) as sb:
        result = await sb.run(ExecutionRequest(code, timeout_s=60))
    assert result.status == "ok", result.stderr
    assert result.stdout == "5\n6\n[1, 2]\n"
