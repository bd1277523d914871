"""Thin ctypes wrappers of the Linux system calls the sandbox needs and Python 3.11 lacks.

Covers: ``unshare``, ``setns``, ``mount``, ``umount2``, ``prctl`` (no-new-privs, parent-death signal, child subreaper,
seccomp, capability bounding set, keep-caps), ``capset``, the raw ``syscall`` entry (for Landlock) and the
syscall numbers of the architectures the seccomp filter supports. Every wrapper raises ``OSError`` with the
errno on failure. It does not decide policy; see :mod:`tirl.sandbox.isolation`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
#: Namespace flags of clone(2); the seccomp filter refuses a clone that sets any of them.
CLONE_NAMESPACE_FLAGS = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)

MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_KEEPCAPS = 8
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

MACHINE = platform.machine()

# Syscall numbers (from the kernel's unistd tables) of the calls the seccomp filter and Landlock use.
_X86_64 = {
    "socket": 41,
    "socketpair": 53,
    "connect": 42,
    "ptrace": 101,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "sethostname": 170,
    "setdomainname": 171,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "quotactl": 179,
    "acct": 163,
    "settimeofday": 164,
    "clock_settime": 227,
    "clock_adjtime": 305,
    "adjtimex": 159,
    "chroot": 161,
    "pivot_root": 155,
    "syslog": 103,
    "unshare": 272,
    "setns": 308,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "bpf": 321,
    "perf_event_open": 298,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "userfaultfd": 323,
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "fanotify_init": 300,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "clone": 56,
    "clone3": 435,
    "vhangup": 153,
    "lookup_dcookie": 212,
    "uselib": 134,
    "personality": 135,
    "landlock_create_ruleset": 444,
    "landlock_add_rule": 445,
    "landlock_restrict_self": 446,
}
_GENERIC = {  # aarch64 and the other architectures of asm-generic/unistd.h
    "socket": 198,
    "socketpair": 199,
    "connect": 203,
    "ptrace": 117,
    "mount": 40,
    "umount2": 39,
    "swapon": 224,
    "swapoff": 225,
    "reboot": 142,
    "sethostname": 161,
    "setdomainname": 162,
    "init_module": 105,
    "finit_module": 273,
    "delete_module": 106,
    "quotactl": 60,
    "acct": 89,
    "settimeofday": 170,
    "clock_settime": 112,
    "clock_adjtime": 266,
    "adjtimex": 171,
    "chroot": 51,
    "pivot_root": 41,
    "syslog": 116,
    "unshare": 97,
    "setns": 268,
    "kexec_load": 104,
    "kexec_file_load": 294,
    "bpf": 280,
    "perf_event_open": 241,
    "keyctl": 219,
    "add_key": 217,
    "request_key": 218,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "userfaultfd": 282,
    "open_by_handle_at": 265,
    "name_to_handle_at": 264,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "fanotify_init": 262,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "clone": 220,
    "clone3": 435,
    "vhangup": 58,
    "lookup_dcookie": 18,
    "personality": 92,
    "landlock_create_ruleset": 444,
    "landlock_add_rule": 445,
    "landlock_restrict_self": 446,
}
#: (audit arch constant, syscall table) per supported ``platform.machine()``.
SYSCALL_TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, _X86_64),
    "aarch64": (0xC00000B7, _GENERIC),
}


def syscall_table() -> tuple[int, dict[str, int]] | None:
    """(AUDIT_ARCH value, name -> number) for this machine, or None when the architecture is unsupported."""
    return SYSCALL_TABLES.get(MACHINE)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def syscall(number: int, *args: object) -> int:
    """Raw ``syscall(2)``; returns the result or raises ``OSError``."""
    return _check(_libc.syscall(ctypes.c_long(number), *args), f"syscall {number}")


def unshare(flags: int) -> None:
    """``unshare(2)``. Raises OSError (EPERM without CAP_SYS_ADMIN, EINVAL for a second CLONE_NEWPID...)."""
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    """``setns(2)`` into the namespace open at ``fd``."""
    _check(_libc.setns(fd, nstype), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """``mount(2)``."""
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    """``umount2(2)`` (``MNT_DETACH``: lazily, once no process uses the mount any more)."""
    _check(_libc.umount2(target.encode(), flags), f"umount {target}")


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """``prctl(2)`` with integer arguments."""
    return _check(_libc.prctl(option, arg2, arg3, arg4, arg5), f"prctl {option}")


def set_no_new_privs() -> None:
    """Forbid gaining privileges through execve (setuid bits, file capabilities) for this process tree."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_parent_death_signal(sig: int) -> None:
    """Deliver ``sig`` to this process when its parent thread dies. Cleared by credential changes."""
    prctl(PR_SET_PDEATHSIG, sig)


def set_child_subreaper() -> None:
    """Make orphaned descendants re-parent to this process instead of the system init."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capset(keep: tuple[int, ...] = ()) -> None:
    """Set this thread's effective and permitted capabilities to exactly ``keep`` (inheritable empty)."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for cap in keep:
        data[cap // 32].effective |= 1 << (cap % 32)
        data[cap // 32].permitted |= 1 << (cap % 32)
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
