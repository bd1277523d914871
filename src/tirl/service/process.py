"""Starting ``tirl sandbox serve`` as a child process and stopping it (single-node runs, scripts, tests).

:class:`ServiceProcess` launches the server in its own session (process group), waits for its ready line to
learn the URL (port 0 picks a free port), and stops it: ``stop()`` asks for a graceful shutdown (SIGTERM),
``kill()`` kills the whole group at once (the server and its sandbox workers) the way a crashed node would
disappear. It does not restart servers; the client's re-probing brings a restarted server back into rotation.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence

from tirl.service.server import parse_ready_line


def child_pids(pid: int) -> list[int]:
    """Process ids whose parent is ``pid``, read from ``/proc`` (Linux); empty when none or not Linux."""
    children = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # Field 4 is the parent pid; the command name (field 2) may hold spaces, so split after its ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            children.append(int(entry))
    return sorted(children)


class ServiceStartError(RuntimeError):
    """The server process exited or did not print its ready line in time; the message holds its output."""


class ServiceProcess:
    """One ``tirl sandbox serve`` child process.

    Args:
        workers: sandbox worker processes of the server.
        host: interface to bind.
        port: TCP port (0: a free one).
        extra_args: more ``serve`` options (``["--max-code-kb", "64"]``).
        python: interpreter; the current one by default.
        env: environment of the child (the current one by default).

    Attributes:
        url: base URL once started.
        proc: the ``subprocess.Popen`` object once started.
    """

    def __init__(
        self,
        workers: int = 2,
        host: str = "127.0.0.1",
        port: int = 0,
        extra_args: Sequence[str] = (),
        python: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = [
            python or sys.executable,
            "-m",
            "tirl.cli.main",
            "sandbox",
            "serve",
            "--host",
            host,
            "--port",
            str(port),
            "--workers",
            str(workers),
            *extra_args,
        ]
        self.env = env
        self.url: str | None = None
        self.proc: subprocess.Popen[str] | None = None
        self._output: deque[str] = deque(maxlen=200)
        self._reader: threading.Thread | None = None

    def start(self, timeout_s: float = 120.0) -> str:
        """Launch and wait for the ready line. Returns the URL.

        Raises:
            ServiceStartError: the process exited or printed no ready line within ``timeout_s``.
        """
        self.proc = subprocess.Popen(
            self.args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
            start_new_session=True,
        )
        ready = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self._output.append(line.rstrip("\n"))
                url = parse_ready_line(line.strip())
                if url is not None and self.url is None:
                    self.url = url
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        end = time.monotonic() + timeout_s
        while not ready.wait(0.05):
            if time.monotonic() > end:
                self.kill()
                raise ServiceStartError(f"server printed no ready line in {timeout_s} s:\n{self.output()}")
        if self.url is None:
            self.kill()
            raise ServiceStartError(f"server exited with code {self.proc.poll()} before it was ready:\n{self.output()}")
        return self.url

    @property
    def pid(self) -> int:
        """Process id of the server (the leader of its process group)."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    def worker_pids(self) -> list[int]:
        """Process ids of the server's direct children (its sandbox worker processes); Linux ``/proc``."""
        return child_pids(self.pid)

    def output(self) -> str:
        """The last lines the server printed."""
        return "\n".join(self._output)

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the server's whole process group (the server and its workers) and reap it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (graceful drain), then :meth:`kill` if it has not exited within ``timeout_s``."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.kill()  # reap leftovers of the group
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def __enter__(self) -> ServiceProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
