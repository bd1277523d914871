"""A seccomp-BPF filter that denies the system calls untrusted math code never needs.

Built as a classic BPF program by hand (no libseccomp) and installed with ``prctl(PR_SET_SECCOMP)``; the
process must have set no-new-privs first (or hold CAP_SYS_ADMIN). Policy (deny-list; everything else is
allowed):

- wrong architecture (for example 32-bit ``int 0x80`` calls on x86_64): the process is killed;
- x32 system calls on x86_64: EPERM;
- ``socket`` and ``socketpair``: allowed only for ``AF_UNIX`` stream and seqpacket sockets (asyncio's
  self-pipe and ``multiprocessing`` need local socketpairs; they cannot reach the network, which a new
  network namespace removes anyway); other families get EPERM, so ``socket.socket()`` raises
  ``PermissionError``, and so do ``AF_UNIX`` datagram sockets (``SOCK_DGRAM``, ``SOCK_RAW``: ``sendto`` or
  ``sendmsg`` with an address would reach any pathname datagram socket of the host, ``/dev/log`` or
  systemd's notify socket, without ``connect``);
- ``connect``: EPERM. A call holds only ``AF_UNIX`` sockets, so any ``connect`` names a pathname or an
  abstract socket, and Landlock (up to ABI 7) does not restrict connecting to pathname sockets: without
  this a call reached every world-writable socket of the host (X11, D-Bus, container runtimes, local
  model servers). A call's own listeners (``multiprocessing.Manager``, ``multiprocessing.connection``
  with an ``AF_UNIX`` address) are unusable for the same reason;
- ``clone`` with any namespace flag, ``unshare``, ``setns``: EPERM (no escape into fresh namespaces);
- ``clone3``: ENOSYS, so the C library falls back to ``clone`` whose flags the filter can inspect;
- ``ptrace``, ``process_vm_readv/writev``, ``mount`` and the new mount API, ``pivot_root``, ``chroot``,
  module loading, ``kexec``, ``bpf``, ``perf_event_open``, ``keyctl``, ``userfaultfd``, ``io_uring`` (its
  operations would bypass this filter), ``open_by_handle_at``, clock setting, ``reboot``, ``swapon``,
  ``syslog``, ``acct``, ``quotactl``, ``personality`` and similar: EPERM.

Supported architectures: x86_64 and aarch64 (see :data:`tirl.sandbox._linux.SYSCALL_TABLES`); elsewhere
:func:`build_filter` raises ``NotImplementedError`` and the layer is reported unavailable.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import struct

from tirl.sandbox import _linux

DENIED_SYSCALLS: tuple[str, ...] = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "swapon",
    "swapoff",
    "reboot",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "fanotify_init",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "acct",
    "quotactl",
    "vhangup",
    "lookup_dcookie",
    "uselib",
    "personality",
    "connect",
)

# Classic BPF opcodes.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_X32_SYSCALL_BIT = 0x40000000

# Offsets in struct seccomp_data (little-endian: the low 32 bits of args[0] come first).
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0 = 16
_OFF_ARG1 = 24


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def build_filter() -> bytes:
    """The filter program as packed ``struct sock_filter`` records (8 bytes each).

    Raises:
        NotImplementedError: the machine's architecture has no syscall table here.
    """
    table = _linux.syscall_table()
    if table is None:
        raise NotImplementedError(f"no seccomp syscall table for architecture {_linux.MACHINE!r}")
    arch, numbers = table
    # Instructions as (code, jt_label|int, jf_label|int, k); labels resolve to relative jumps below.
    prog: list[tuple[int, object, object, int]] = []
    labels: dict[str, int] = {}

    def emit(code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        prog.append((code, jt, jf, k))

    def label(name: str) -> None:
        labels[name] = len(prog)

    emit(_LD_W_ABS, _OFF_ARCH)
    emit(_JEQ_K, arch, 0, "kill")
    emit(_LD_W_ABS, _OFF_NR)
    if _linux.MACHINE == "x86_64":
        emit(_JGE_K, _X32_SYSCALL_BIT, "eperm", 0)
    emit(_JEQ_K, numbers["socket"], "socket", 0)
    emit(_JEQ_K, numbers["socketpair"], "socket", 0)
    emit(_JEQ_K, numbers["clone"], "clone", 0)
    emit(_JEQ_K, numbers["clone3"], "enosys", 0)
    for name in DENIED_SYSCALLS:
        if name in numbers:
            emit(_JEQ_K, numbers[name], "eperm", 0)
    label("allow")
    emit(_RET_K, _RET_ALLOW)
    label("socket")  # socket(family, type, ...) and socketpair(family, type, ...)
    emit(_LD_W_ABS, _OFF_ARG0)
    emit(_JEQ_K, socket.AF_UNIX, 0, "eperm")
    emit(_LD_W_ABS, _OFF_ARG1)
    # SOCK_DGRAM (2) and SOCK_RAW (3, a datagram socket for AF_UNIX) have bit 1 set; SOCK_STREAM (1) and
    # SOCK_SEQPACKET (5) do not, nor do the flags SOCK_NONBLOCK and SOCK_CLOEXEC.
    emit(_JSET_K, 0x2, "eperm", "allow_arg")
    label("clone")
    emit(_LD_W_ABS, _OFF_ARG0)
    emit(_JSET_K, _linux.CLONE_NAMESPACE_FLAGS, "eperm", "allow_arg")
    label("allow_arg")  # BPF jumps only forward, so the argument checks get their own allow
    emit(_RET_K, _RET_ALLOW)
    label("eperm")
    emit(_RET_K, _RET_ERRNO | errno.EPERM)
    label("enosys")
    emit(_RET_K, _RET_ERRNO | errno.ENOSYS)
    label("kill")
    emit(_RET_K, _RET_KILL_PROCESS)

    out = bytearray()
    for index, (code, jt, jf, k) in enumerate(prog):
        offsets = []
        for target in (jt, jf):
            if isinstance(target, str):
                rel = labels[target] - index - 1
                if not 0 <= rel <= 255:  # pragma: no cover - the program is far shorter
                    raise ValueError(f"jump to {target} out of range")
                offsets.append(rel)
            else:
                offsets.append(int(target))
        out += struct.pack("<HBBI", code, offsets[0], offsets[1], k)
    return bytes(out)


class PreparedFilter:
    """A filter program laid out in memory once (in the worker), installed by each call with :meth:`install`."""

    def __init__(self, program: bytes) -> None:
        count = len(program) // 8
        self._buffer = (_SockFilter * count).from_buffer_copy(program)
        self._fprog = _SockFprog(count, ctypes.cast(self._buffer, ctypes.POINTER(_SockFilter)))
        self._address = ctypes.addressof(self._fprog)

    def install(self) -> None:
        """Install the filter on the calling thread; irreversible.

        Raises:
            OSError: the kernel refused (EACCES without no-new-privs, EINVAL without seccomp support).
        """
        _linux.prctl(_linux.PR_SET_SECCOMP, _linux.SECCOMP_MODE_FILTER, self._address)
