"""A sandbox worker process: imports the preload modules once, then runs each call in a fresh fork.

Started by the pool as ``python -I -m tirl.sandbox.worker`` with two pipes: frames (see
:mod:`tirl.sandbox.wire`) arrive on stdin and results leave on stdout. The first frame is the
configuration; the worker then sets up its isolation (:func:`tirl.sandbox.isolation.setup_worker`),
imports the preload modules, probes the per-call layers, and answers ``ready`` with the layer report.

**The worker never holds a call's data** (code, stdin, outputs) in its own memory, because every later
call is a fork of that memory: a ``run`` frame's JSON carries only the metadata, its code and stdin follow
as raw bytes that the worker moves from the control pipe into the call's memory files with ``splice``
(kernel to kernel), the call process reads its own code, and the call's outputs are spliced from their
pipes into memory files and from there to the pool, which assembles the result
(:mod:`tirl.sandbox.outcome`). A call therefore inherits the worker's post-import image and metadata
(ids, limits; byte totals and exit statuses, which calls choose) of other calls, nothing else: the signal
pipe's bytes and the names a call leaves in its scratch directory never enter this process either.

For each ``run`` frame it (single-threaded, with a ``selectors`` loop over all its calls):

1. creates the call's scratch directory (a tmpfs of its own, its quota of files and bytes, where the worker has a
   mount namespace), its cgroup (when the cgroup layer is active: memory and pids of all
   the call's processes together, see :mod:`tirl.sandbox.cgroup`), memory files for its code and stdin
   (filled from the control pipe) and for its outputs, and pipes for stdout, stderr, the runner's result
   record and signal notes;
2. with PID namespaces: points its children's PID namespace to a fresh one, so the call process it forks
   next is that namespace's init (PID 1): when it exits or is killed, the kernel kills every process the
   call started, and it can be reaped only once they are all gone;
3. forks the call process, which applies the per-call layers and runs :func:`tirl.sandbox.runner.execute`;
4. moves the outputs as they stream into their memory files, at most ``max_output_bytes`` of each (the
   rest to ``/dev/null``, counted);
5. when the call process exits (or at the deadline, when it is killed), kills the rest of the call's
   processes, drains the pipes, reads the OOM kills of its cgroup, removes the cgroup and the scratch
   directory and sends a ``done`` frame (what it observed) followed by the kept output bytes.

The worker is a child subreaper and reaps every child it gets, so no zombies accumulate. It does not
queue requests (the pool never sends more than ``slots_per_worker`` at once) and keeps no state between
calls beyond its preloaded modules.
"""

from __future__ import annotations

import errno
import gc
import importlib
import os
import selectors
import shutil
import signal
import sys
import time
import traceback
from dataclasses import asdict
from typing import NoReturn

from tirl.sandbox import _linux, cgroup, isolation, landlock, packages, runner, wire
from tirl.sandbox.isolation import LayerError, WorkerIsolation
from tirl.sandbox.outcome import ABORT_NOTE as _ABORT_NOTE
from tirl.sandbox.outcome import SETUP_FAILED as _SETUP_FAILED
from tirl.sandbox.outcome import SETUP_OK as _SETUP_OK

_READ_CHUNK = 1 << 16
_RESULT_RECORD_SLACK = 1 << 20
_SPLICE_NONBLOCK = getattr(os, "SPLICE_F_NONBLOCK", 2)
#: The call process's descriptor for signal notes (its C-level SIGABRT handler writes the signal number).
_SIGNAL_FD = 4


def _memfd(name: str) -> int:
    return os.memfd_create(name, os.MFD_CLOEXEC)


class _Stream:
    """One output pipe of a call, moved unread into a memory file: ``kept`` bytes up to ``cap`` (the rest to
    ``/dev/null``), the ``total`` seen, and EOF."""

    __slots__ = ("fd", "cap", "mem", "kept", "total", "eof")

    def __init__(self, fd: int, cap: int) -> None:
        self.fd = fd
        self.cap = cap
        self.mem = _memfd("out")
        self.kept = 0
        self.total = 0
        self.eof = False

    @property
    def truncated(self) -> bool:
        return self.total > self.cap


class _Call:
    __slots__ = (
        "id",
        "timeout_s",
        "memory_mb",
        "pid",
        "scratch",
        "out",
        "err",
        "res",
        "sig_r",
        "started",
        "deadline",
        "exited_at",
        "wait_status",
        "kill_reason",
        "no_pid_namespace",
        "cgroup",
        "oom_kills",
        "uid",
        "scratch_mounted",
        "scratch_full",
    )

    def __init__(self, cid: int, msg: dict) -> None:
        self.id = cid
        self.sig_r = -1
        self.timeout_s = float(msg["timeout_s"])
        self.memory_mb = int(msg["memory_mb"])
        self.pid = 0
        self.scratch = ""
        self.out: _Stream | None = None
        self.err: _Stream | None = None
        self.res: _Stream | None = None
        self.started = 0.0
        self.deadline = 0.0
        self.exited_at: float | None = None
        self.wait_status: int | None = None
        self.kill_reason: str | None = None
        self.no_pid_namespace = False
        self.cgroup: cgroup.CallCgroup | None = None
        self.oom_kills = 0
        self.uid: int | None = None  # claimed for this call (uid_per_call), released in Worker._cleanup
        self.scratch_mounted = False  # the scratch is a tmpfs of the call's own (unmounted in _cleanup)
        self.scratch_full = False  # that tmpfs had no free inode or byte left when the call ended

    def streams(self) -> list[_Stream]:
        return [s for s in (self.out, self.err, self.res) if s is not None]


class Worker:
    """The event loop of one worker process (see the module docstring)."""

    def __init__(self, cfg: dict, iso: WorkerIsolation, ctl_in: int, ctl_out: int) -> None:
        self.cfg = cfg
        self.iso = iso
        self.ctl_in = ctl_in
        self.ctl_out = ctl_out
        self.inbox = bytearray()  # the frame being read: its length prefix, then its JSON (metadata only)
        self.inbox_want = wire.HEADER.size
        self.inbox_json = False
        self.body: tuple[dict, list[list[int]]] | None = None  # a run frame's raw payload being spliced
        self.env = dict(os.environ)
        self.calls: dict[int, _Call] = {}
        self.by_pid: dict[int, _Call] = {}
        self.devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        self._note_buf = bytearray(64)  # the signal pipe's bytes land here only (see _read_signal_note)
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        os.set_blocking(self.ctl_in, False)
        self.sel.register(self.ctl_in, selectors.EVENT_READ, None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.closing = False
        self.max_out = int(cfg["max_output_bytes"])
        self.scan_orphans = not iso.plan.pid_namespace
        self.stale_cgroups: list[cgroup.CallCgroup] = []  # not removable yet (processes left); retried
        # The call's sys.path under Landlock: only entries it may read (not the project's source tree), and the
        # package directories it may list (it imports the allowed packages from them).
        plan = iso.plan
        self.call_sys_path = (
            [
                p
                for p in sys.path
                if p and (landlock.readable(p, plan.read_roots) or landlock.readable(p, plan.list_roots))
            ]
            if plan.landlock_abi
            else None
        )
        # installed packages the call may not read import as "not installed" (tirl.sandbox.packages)
        self.import_guard = (
            packages.UnreadablePackageGuard(plan.site_dirs, plan.read_roots)
            if plan.landlock_abi and plan.site_dirs
            else None
        )

    # ----- messages ---------------------------------------------------------------------------------
    def send(self, message: dict) -> None:
        data = wire.encode(message)
        view = memoryview(data)
        while view:
            n = os.write(self.ctl_out, view)
            view = view[n:]

    def _on_ctl(self, max_steps: int = 64) -> None:
        """Read the control pipe exactly: never a byte of a run frame's payload into this process's memory.

        A frame is a length prefix and a JSON object (read into ``inbox``); a ``run`` frame's object names
        ``code_bytes`` and ``stdin_bytes``, which follow it raw and are spliced into the call's memory files.
        """
        for _ in range(max_steps):
            if self.body is not None:
                if not self._splice_body():
                    return
                continue
            try:
                data = os.read(self.ctl_in, self.inbox_want - len(self.inbox))
            except BlockingIOError:
                return
            if not data:
                self.closing = True  # the pool is gone
                return
            self.inbox += data
            if len(self.inbox) < self.inbox_want:
                continue
            if not self.inbox_json:
                (length,) = wire.HEADER.unpack(self.inbox)
                if not 0 < length <= wire.MAX_FRAME_BYTES:
                    raise ValueError(f"control frame of {length} bytes")
                self.inbox_json, self.inbox_want, self.inbox = True, length, bytearray()
                continue
            msg = wire.decode_body(bytes(self.inbox))
            self.inbox_json, self.inbox_want, self.inbox = False, wire.HEADER.size, bytearray()
            op = msg.get("op")
            if op == "run":
                parts = [[_memfd("code"), int(msg["code_bytes"])], [_memfd("stdin"), int(msg["stdin_bytes"])]]
                self.body = (msg, parts)
            elif op == "shutdown":
                self.closing = True
                return

    def _splice_body(self) -> bool:
        """Move what has arrived of the current run frame's payload into its memory files; start the call
        once all of it is there. False when the pipe has nothing more now (or closed)."""
        assert self.body is not None
        msg, parts = self.body
        for part in parts:
            while part[1] > 0:
                try:
                    n = os.splice(self.ctl_in, part[0], min(part[1], 1 << 20), flags=_SPLICE_NONBLOCK)
                except BlockingIOError:
                    return False
                if n == 0:
                    self.closing = True
                    return False
                part[1] -= n
        self.body = None
        self.start_call(msg, parts[0][0], parts[1][0])
        return True

    # ----- starting a call --------------------------------------------------------------------------
    def start_call(self, msg: dict, code_fd: int, stdin_fd: int) -> None:
        """Start the call of a ``run`` frame whose code and stdin are in the memory files ``code_fd`` and
        ``stdin_fd`` (closed here)."""
        call = _Call(int(msg["id"]), msg)
        try:
            self._spawn(call, code_fd, stdin_fd)
        except Exception as exc:  # noqa: BLE001 - any set-up failure is tirl's, answered as internal
            self._cleanup(call)
            self._close_memory(call)
            self.send(
                {
                    "op": "result",
                    "id": call.id,
                    "result": {"status": "internal", "stderr": f"tirl-sandbox: could not start the call: {exc}"},
                }
            )

    def _spawn(self, call: _Call, code_fd: int, stdin_fd: int) -> None:
        plan = self.iso.plan
        opened = [code_fd, stdin_fd]  # closed here on failure; once forked, the child's ends are closed below
        try:
            call.scratch = os.path.join(self.iso.scratch_dir, f"c{call.id}")
            os.mkdir(call.scratch, 0o700)
            if self.iso.call_scratch_tmpfs is not None:
                # A tmpfs per call: its bytes and inodes are the call's quota, and filling it fails only this
                # call (a shared one, full, made the next call's set-up fail: "internal", masked from the loss).
                _linux.mount(
                    "tmpfs", call.scratch, "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV, self.iso.call_scratch_tmpfs
                )
                call.scratch_mounted = True
            if plan.uid_per_call and self.iso.uid_allocator is not None:
                call.uid = self.iso.uid_allocator.claim()
                os.chown(call.scratch, call.uid, call.uid)
            elif plan.uid_mode.startswith("drop"):
                os.chown(call.scratch, plan.uid, plan.gid)
            if plan.cgroup and self.iso.cgroups is not None:
                call.cgroup = self.iso.cgroups.acquire(call.memory_mb * 1024 * 1024, plan.nproc)
            os.lseek(stdin_fd, 0, os.SEEK_SET)
            for _ in range(4):
                opened.extend(os.pipe())
        except BaseException:
            for fd in opened:
                os.close(fd)
            raise
        _, _, out_r, out_w, err_r, err_w, res_r, res_w, call.sig_r, sig_w = opened
        os.set_blocking(call.sig_r, False)
        child_fds = (stdin_fd, out_w, err_w, res_w, sig_w, code_fd)
        ns_fd = self.iso.self_pid_ns_fd
        try:
            if plan.pid_namespace and ns_fd is not None:
                try:
                    isolation.new_pid_namespace_for_children(ns_fd)
                except OSError:
                    call.no_pid_namespace = True  # this call is killed by process group instead
            call.started = time.monotonic()
            call.deadline = call.started + call.timeout_s
            try:
                pid = os.fork()
                if pid == 0:  # pragma: no cover - runs in the call process, which must never return here
                    try:
                        self._call_process(call, child_fds)
                    finally:
                        os._exit(70)
            finally:
                if plan.pid_namespace and ns_fd is not None and not call.no_pid_namespace:
                    _linux.setns(ns_fd, _linux.CLONE_NEWPID)  # later forks (probes) stay in our namespace
            call.pid = pid
        finally:
            for fd in child_fds:
                os.close(fd)
        self.calls[call.id] = call
        self.by_pid[pid] = call
        call.out = _Stream(out_r, self.max_out)
        call.err = _Stream(err_r, self.max_out)
        call.res = _Stream(res_r, 4 * self.max_out + _RESULT_RECORD_SLACK)
        for stream in call.streams():
            os.set_blocking(stream.fd, False)
            self.sel.register(stream.fd, selectors.EVENT_READ, (call, stream))

    def _call_process(self, call: _Call, fds: tuple[int, ...]) -> NoReturn:
        stdin_fd, out_w, err_w, res_w, sig_w, code_fd = fds
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            code = _read_file(code_fd).decode("utf-8", "surrogatepass")  # the call's own code, in its memory
            os.dup2(stdin_fd, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.dup2(res_w, 3, inheritable=False)
            os.dup2(sig_w, _SIGNAL_FD, inheritable=False)
            # As its PID namespace's init the call ignores its own SIGABRT without a handler, and abort() then
            # ends it by SIGSEGV: a handler makes the signal's C-level part write its number to the signal
            # pipe (the wake-up descriptor), so the result can name SIGABRT.
            os.set_blocking(_SIGNAL_FD, False)
            signal.signal(signal.SIGABRT, _ignore_signal)
            signal.set_wakeup_fd(_SIGNAL_FD, warn_on_full_buffer=False)
            isolation.enter_call(
                self.iso.plan,
                call.scratch,
                isolation.call_env(self.env, call.scratch, self.iso.plan.child_site_dir),
                call.timeout_s,
                call.memory_mb,
                self.iso.seccomp_filter,
                self.iso.landlock_rules,
                call.cgroup,
                call.uid,
            )
            if self.call_sys_path is not None:
                sys.path[:] = self.call_sys_path  # without the worker's own entries (the source tree)
            if self.import_guard is not None:
                sys.meta_path.insert(0, self.import_guard)
            os.closerange(_SIGNAL_FD + 1, 1 << 20)  # after Landlock, which uses the worker's prepared path descriptors
            # The first byte of the result pipe says whether set-up succeeded. It is written before the
            # user's code runs, so that code cannot pass its own failure off as tirl's (``internal``).
            os.write(3, _SETUP_OK)
        except BaseException as exc:  # noqa: BLE001 - fail closed, report to the worker
            message = (
                f"isolation set-up failed: {exc}"
                if isinstance(exc, LayerError)
                else f"call set-up failed: {type(exc).__name__}: {exc}"
            )
            try:
                os.write(3, _SETUP_FAILED + message.encode("utf-8", "replace")[:4000])
            finally:
                os._exit(70)
        runner.execute(code, 3, self.max_out)

    # ----- supervising ------------------------------------------------------------------------------
    def _on_stream(self, call: _Call, stream: _Stream, max_chunks: int = 16) -> None:
        # At most max_chunks reads per event, so a flooding writer cannot keep the loop from its deadlines.
        # splice: the bytes go from the pipe to the memory file (or /dev/null past the cap), never through
        # this process's memory.
        for _ in range(max_chunks):
            room = stream.cap - stream.kept
            try:
                if room > 0:
                    n = os.splice(stream.fd, stream.mem, min(room, _READ_CHUNK), flags=_SPLICE_NONBLOCK)
                else:
                    n = os.splice(stream.fd, self.devnull, _READ_CHUNK, flags=_SPLICE_NONBLOCK)
            except BlockingIOError:
                return
            except OSError:
                n = 0
            if not n:
                stream.eof = True
                self.sel.unregister(stream.fd)
                return
            if room > 0:
                stream.kept += n
            stream.total += n
            if stream.truncated and stream is not call.res and self.cfg["kill_on_output_overflow"]:
                self.kill_call(call, "output")
                return

    def kill_call(self, call: _Call, reason: str | None) -> None:
        """SIGKILL every process of ``call``: the call process (its namespace's init, so all of them go with
        it) and its process group (what is left of the call when there is no PID namespace)."""
        if reason and call.kill_reason is None and call.wait_status is None:
            call.kill_reason = reason
        if not call.pid:
            return
        try:
            os.killpg(call.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if call.wait_status is None:
            try:
                os.kill(call.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if call.cgroup is not None and (call.no_pid_namespace or not self.iso.plan.pid_namespace):
            call.cgroup.kill()  # processes that left the group (setsid) but not the cgroup

    def reap(self) -> None:
        """Collect every exited child: call processes and adopted orphans."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            call = self.by_pid.pop(pid, None)
            if call is not None:
                call.wait_status = status
                call.exited_at = time.monotonic()
                self.kill_call(call, None)  # without a PID namespace, the rest of its group goes with it

    def _kill_orphans(self, rounds: int = 50) -> None:
        """Without PID namespaces, descendants that escaped their group re-parent to this subreaper: kill
        them, reap them, and look again (their own children re-parent here in turn), until none is left."""
        for _ in range(rounds):
            known = set(self.by_pid)
            try:
                with open(f"/proc/self/task/{os.getpid()}/children") as fh:
                    orphans = [int(p) for p in fh.read().split() if int(p) not in known]
            except OSError:
                return
            if not orphans:
                return
            for pid in orphans:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.001)
            self.reap()

    def _check_timers(self, now: float) -> None:
        for call in list(self.calls.values()):
            if call.wait_status is None and now >= call.deadline and call.kill_reason is None:
                self.kill_call(call, "timeout")
            if call.wait_status is not None:
                # Done when every process of the call is gone: with a PID namespace the call process is
                # reaped only after all of them died; the outputs reach EOF when no process holds them.
                settled = all(s.eof for s in call.streams())
                if settled or now >= (call.exited_at or now) + float(self.cfg["drain_grace_s"]):
                    self._finish(call)

    def _next_timeout(self, now: float) -> float:
        wake = now + 1.0
        for call in self.calls.values():
            if call.wait_status is None and call.kill_reason is None:
                wake = min(wake, call.deadline)
            elif call.exited_at is not None:
                wake = min(wake, call.exited_at + float(self.cfg["drain_grace_s"]))
        return max(0.0, wake - now)

    def _cleanup(self, call: _Call) -> None:
        for stream in call.streams():
            if not stream.eof:
                try:
                    self.sel.unregister(stream.fd)
                except (KeyError, ValueError):
                    pass
            try:
                os.close(stream.fd)
            except OSError:
                pass
        if call.sig_r >= 0:
            try:
                os.close(call.sig_r)
            except OSError:
                pass
            call.sig_r = -1
        if call.scratch_mounted:
            call.scratch_full = _tmpfs_full(call.scratch)
            try:
                # Lazily: a process of the call that is still exiting keeps it until it is gone. The files'
                # names are never read (see _remove_tree), and the kernel frees them all at once.
                _linux.umount(call.scratch, _linux.MNT_DETACH)
                call.scratch_mounted = False
            except OSError as exc:
                print(f"tirl-sandbox worker: could not unmount a call's scratch: {exc}", file=sys.stderr)
        if call.scratch and not call.scratch_mounted:
            _remove_tree(call.scratch)
        # With a PID namespace nothing of the call is left once its init was reaped (or never forked).
        empty = call.pid == 0 or (
            call.wait_status is not None and self.iso.plan.pid_namespace and not call.no_pid_namespace
        )
        if call.uid is not None and self.iso.uid_allocator is not None:
            # Not empty: processes of the call may still run as its uid; the next claimer checks first.
            self.iso.uid_allocator.release(call.uid, clean=empty)
            call.uid = None
        if call.cgroup is not None and self.iso.cgroups is not None:
            cg, call.cgroup = call.cgroup, None
            if not self.iso.cgroups.release(cg, empty):  # processes left: only without a PID namespace
                cg.kill()
                self.reap()
                if not cg.remove():
                    self.stale_cgroups.append(cg)

    def _retry_stale_cgroups(self) -> None:
        """Remove the cgroups of finished calls whose last processes were still exiting."""
        left = []
        for cg in self.stale_cgroups:
            if not cg.remove():
                cg.kill()
                left.append(cg)
        self.stale_cgroups = left

    def _finish(self, call: _Call) -> None:
        for stream in call.streams():
            if not stream.eof:
                self._on_stream(call, stream, max_chunks=64)
        self.calls.pop(call.id, None)
        if call.cgroup is not None:
            call.oom_kills = call.cgroup.oom_kills()
        note = self._read_signal_note(call)
        self._cleanup(call)
        if self.scan_orphans or call.no_pid_namespace:
            self._kill_orphans()
        try:
            self.send_done(call, note)
        finally:
            self._close_memory(call)

    def _read_signal_note(self, call: _Call) -> bytes:
        """``ABORT_NOTE`` when the call's signal pipe says SIGABRT, else ``b""``.

        The pipe's bytes are the call's to choose (its code holds the write end, descriptor 4), so they are
        read into one fixed buffer that is cleared at once, never into a new object whose freed copy a later
        call (a fork of this process) would inherit: only the one bit "SIGABRT seen" leaves it.
        """
        buf = self._note_buf
        seen = False
        try:
            for _ in range(1024):  # a full pipe (64 KiB) at most; no process of the call is left to refill it
                n = os.readv(call.sig_r, [buf])
                if n <= 0:
                    break
                seen = seen or buf.find(_ABORT_NOTE, 0, n) >= 0
                buf[:n] = bytes(n)
        except OSError:
            pass
        return _ABORT_NOTE if seen else b""

    def send_done(self, call: _Call, signal_note: bytes) -> None:
        """The ``done`` frame (what the worker observed; :func:`tirl.sandbox.outcome.assemble` builds the
        result from it on the host), then the kept bytes of stdout, stderr and the result record, spliced
        from their memory files."""
        assert call.out is not None and call.err is not None and call.res is not None
        end = call.exited_at if call.exited_at is not None else time.monotonic()
        self.send(
            {
                "op": "done",
                "id": call.id,
                "wait_status": call.wait_status,
                "duration_s": end - call.started,
                "kill_reason": call.kill_reason,
                "oom_kills": call.oom_kills,
                "scratch_full": call.scratch_full,
                "scratch_mb": int(self.cfg["scratch_mb"]),
                "scratch_inodes": int(self.cfg["scratch_inodes"]),
                "timeout_s": call.timeout_s,
                "memory_mb": call.memory_mb,
                "max_output_bytes": self.max_out,
                "out_total": call.out.total,
                "err_total": call.err.total,
                "res_total": call.res.total,
                "res_cap": call.res.cap,
                "out_bytes": call.out.kept,
                "err_bytes": call.err.kept,
                "res_bytes": call.res.kept,
                "signal_note": signal_note.decode("latin-1"),
            }
        )
        for stream in (call.out, call.err, call.res):
            offset = 0
            while offset < stream.kept:
                try:
                    n = os.splice(stream.mem, self.ctl_out, stream.kept - offset, offset_src=offset)
                except OSError as exc:  # splice needs a pipe: the pool's end may be a socket
                    if exc.errno != errno.EINVAL:
                        raise
                    n = os.sendfile(self.ctl_out, stream.mem, offset, stream.kept - offset)
                if n <= 0:
                    raise OSError("the memory file of a call's output ended early")
                offset += n

    @staticmethod
    def _close_memory(call: _Call) -> None:
        for stream in call.streams():
            if stream.mem >= 0:
                os.close(stream.mem)
                stream.mem = -1

    # ----- loop -------------------------------------------------------------------------------------
    def loop(self) -> None:
        """Serve until the pool sends ``shutdown`` or closes the pipe; kill every call on the way out."""
        while not self.closing:
            now = time.monotonic()
            for key, _ in self.sel.select(self._next_timeout(now)):
                if key.fd == self.ctl_in:
                    self._on_ctl()
                elif key.fd == self.wake_r:
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                else:
                    call, stream = key.data
                    if call.id in self.calls and not stream.eof:
                        self._on_stream(call, stream)
            self.reap()
            self._check_timers(time.monotonic())
            if self.scan_orphans and not self.calls:
                self._kill_orphans()
            if self.stale_cgroups:
                self._retry_stale_cgroups()
        for call in list(self.calls.values()):
            self.kill_call(call, "shutdown")
        deadline = time.monotonic() + 2.0
        while self.by_pid and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.01)
        for call in list(self.calls.values()):
            self._cleanup(call)
            self._close_memory(call)
        self._retry_stale_cgroups()


def _ignore_signal(signum: int, frame: object) -> None:
    """The call process's SIGABRT handler: its C-level part has written the note; nothing else to do."""


def _read_exactly(fd: int, n: int) -> bytes | None:
    """``n`` bytes from the blocking descriptor ``fd``, or None at end of file."""
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read_file(fd: int) -> bytes:
    """All bytes of the memory file ``fd`` (from offset 0), which is then closed."""
    try:
        size = os.fstat(fd).st_size
        chunks = []
        offset = 0
        while offset < size:
            chunk = os.pread(fd, size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _tmpfs_full(path: str) -> bool:
    """Whether the file system at ``path`` (a call's scratch tmpfs) has no free inode or no free byte left
    (the call used its whole quota); False when it cannot be asked."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_ffree == 0 or st.f_bavail == 0


#: ``rm`` for scratch directories that are not empty (see :func:`_remove_tree`); None: the fork only.
_RM = shutil.which("rm", path="/usr/bin:/bin")
_RM_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


def _remove_tree(path: str) -> None:
    """Remove a call's scratch directory, whatever the code left in it; never raises.

    An empty directory is removed here. One with entries is removed by another process: the entries' names
    are the call's own bytes (a call that named 300 files after its data found them in the next call's
    memory scan when the worker listed the directory itself), so only a process that ends at once may read
    them: ``rm -rf`` (spawned), or where that is missing or fails, a short-lived fork of the worker running
    :func:`_remove_tree_iter`. Iterative and descriptor-relative (``shutil.rmtree``
    recurses once per level in Python, so a call that nests a few thousand directories would crash the
    worker with ``RecursionError``, and paths that deep pass ``PATH_MAX``). Directories the code took
    permissions away from are given them back. What cannot be removed stays on the worker's scratch tmpfs,
    which dies with the worker.
    """
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass  # not empty
    if _RM is not None:  # rm -rf (vfork and exec: far cheaper than a fork of this process); else, or if it
        try:  # failed (a directory the code made unreadable to a worker that is not root), the fork
            pid = os.posix_spawn(_RM, [_RM, "-rf", "--", path], _RM_ENV)
            os.waitpid(pid, 0)
            if not os.path.lexists(path):
                return
        except OSError:
            pass
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the remover process, which must never return here
            code = 1
            try:
                _remove_tree_iter(path)
                code = 0
            except BaseException as exc:  # noqa: BLE001 - reported by the exit code; names stay here
                try:
                    print(f"tirl-sandbox worker: could not remove {path}: {type(exc).__name__}", file=sys.stderr)
                except BaseException:  # noqa: BLE001
                    pass
            finally:
                os._exit(code)
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
                continue
    except Exception as exc:  # noqa: BLE001 - a left-over directory must never kill the worker
        try:
            print(f"tirl-sandbox worker: could not remove {path}: {type(exc).__name__}: {exc}", file=sys.stderr)
        except Exception:  # noqa: BLE001
            pass


def _remove_tree_iter(path: str) -> None:
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.chmod(path, 0o700)
        fd = os.open(path, dir_flags)
    except FileNotFoundError:
        return
    names: list[str] = []  # the directories entered below ``path``; only the current one is open
    try:
        while True:
            sub = None
            with os.scandir(fd) as entries:  # scandir works on a duplicate of fd
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        sub = entry.name
                        break
                    try:
                        os.unlink(entry.name, dir_fd=fd)
                    except FileNotFoundError:
                        pass
            if sub is not None:
                try:
                    os.chmod(sub, 0o700, dir_fd=fd)  # a real directory (checked above), not a link
                except OSError:
                    pass
                child = os.open(sub, dir_flags, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(sub)
                continue
            if not names:
                break
            parent = os.open("..", dir_flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _preload(modules: tuple[str, ...] | list[str]) -> dict[str, str]:
    report = {}
    for name in modules:
        try:
            importlib.import_module(name)
            report[name] = "ok"
        except BaseException as exc:  # noqa: BLE001 - a broken module must not stop the worker
            report[name] = f"{type(exc).__name__}: {exc}"
    return report


def main() -> None:
    """Entry point of ``python -m tirl.sandbox.worker``."""
    ctl_in = os.dup(0)
    ctl_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints of imported modules go to stderr, never into the frame pipe
    os.close(devnull)
    sys.stdout = sys.stderr
    header = _read_exactly(ctl_in, wire.HEADER.size)  # exactly one frame: what follows is the Worker's
    if header is None:
        return
    body = _read_exactly(ctl_in, wire.HEADER.unpack(header)[0])
    if body is None:
        return
    cfg = wire.decode_body(body)
    iso: WorkerIsolation | None = None
    try:
        iso = isolation.setup_worker(cfg, cfg["scratch_dir"])
        preload = _preload(cfg["preload"])
        warmup_errors = []
        for source in cfg.get("warmups", []):
            try:
                exec(compile(source, "<warmup>", "exec", dont_inherit=True), {"__name__": "__warmup__"})
            except BaseException as exc:  # noqa: BLE001 - a failing warm-up costs speed, not correctness
                warmup_errors.append(f"{type(exc).__name__}: {exc}")
        runner.warm_up()
        isolation.probe_plan(iso)
        iso.layers["output_cap"] = isolation.output_cap_status(cfg["max_output_bytes"], cfg["kill_on_output_overflow"])
        missing = [name for name in cfg["required_layers"] if not iso.layers[name].active]
        if missing:
            detail = "; ".join(f"{name}: {iso.layers[name].detail}" for name in missing)
            wire_msg = {
                "op": "fatal",
                "error": f"required isolation layers are not available: {detail}",
                "layers": iso.report(),
            }
            os.write(ctl_out, wire.encode(wire_msg))
            if iso.cgroups is not None:
                iso.cgroups.close()
            return
        import threading

        gc.collect()
        gc.freeze()  # keep the preloaded objects out of the children's collections (fewer copied pages)
        ready = {
            "op": "ready",
            "pid": os.getpid(),
            "layers": iso.report(),
            "preload": preload,
            "warmup_errors": warmup_errors,
            "threads": threading.active_count(),
            "plan": asdict(iso.plan),
            "python": sys.version.split()[0],
        }
        worker = Worker(cfg, iso, ctl_in, ctl_out)
        worker.send(ready)
    except BaseException:  # noqa: BLE001 - report why the worker could not start
        try:
            os.write(ctl_out, wire.encode({"op": "fatal", "error": traceback.format_exc()}))
        finally:
            if iso is not None and iso.cgroups is not None:
                iso.cgroups.close()
            raise
    try:
        worker.loop()
    finally:
        shutil.rmtree(iso.scratch_dir, ignore_errors=True)
        if iso.cgroups is not None:
            iso.cgroups.close()
        if iso.uid_allocator is not None:
            iso.uid_allocator.close()  # each call's uid was released by its clean-up; this closes the files


if __name__ == "__main__":
    main()
