"""Landlock rules for a call: writes only inside its scratch directory, reads only where Python needs them.

Landlock (Linux 5.13+) lets an unprivileged process restrict its own file access; the restriction holds for
the process and everything it starts, whatever its user id or capabilities. This module talks to the
kernel with raw ``syscall(2)`` numbers 444-446 (``landlock_create_ruleset``, ``landlock_add_rule``,
``landlock_restrict_self``) through ctypes.

Policy of :func:`restrict`:

- *handled* rights: every write right (write, truncate, create, remove, rename across directories, make
  nodes), read-file, read-dir and execute. A handled right is denied everywhere except beneath the rules;
- the scratch directory gets all handled rights;
- the read roots (the Python installation and the ``sys.path`` entries inside it, ``/usr``, ``/lib*``, ``/bin``,
  ``/proc``, ``/sys``, a few files of ``/etc`` and ``/dev``) get read and execute, except the package
  directories, of which only the allowed packages' files are granted and the rest may only be listed
  (:mod:`tirl.sandbox.packages`); ``/dev/null`` also write;
- ABI 4+: TCP bind and connect are denied (a second network barrier);
- ABI 6+: abstract unix sockets and signals are scoped: the call cannot signal processes outside it.

It does not restrict ``stat`` or path traversal (Landlock does not cover them), nor ioctl.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct
import sys
from collections.abc import Iterable

from tirl.sandbox import _linux

_NR_CREATE, _NR_ADD_RULE, _NR_RESTRICT = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE

PREPARED_FD_BASE = 4096
"""Lowest descriptor number of :class:`PreparedRules`' descriptors when it holds many: above a call's
``nofile_limit`` (256), so that a call, whose limit is set after Landlock, keeps its low numbers free."""

#: Read-only roots every call may read and execute from (besides the Python installation and sys.path).
SYSTEM_READ_ROOTS: tuple[str, ...] = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/proc",
    "/sys",
    "/etc/fonts",
)
#: Single files readable by every call.
SYSTEM_READ_FILES: tuple[str, ...] = (
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/mime.types",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
)
#: Files writable by every call (besides its scratch directory).
SYSTEM_WRITE_FILES: tuple[str, ...] = ("/dev/null", "/dev/zero", "/dev/full")


def abi_version() -> int:
    """The kernel's Landlock ABI version (1, 2, ...).

    Raises:
        OSError: Landlock is not built in (ENOSYS) or disabled at boot (EOPNOTSUPP).
    """
    return _linux.syscall(_NR_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))


def python_read_roots() -> list[str]:
    """Directories of the Python installation: its prefixes, the interpreter's directory, and the ``sys.path``
    entries inside one of them (real paths, deduplicated, ``/`` never).

    ``sys.path`` entries outside the installation (the project's source tree that the worker or an editable
    install put there, the current directory) are left out: calls must not read them (issue 13).
    """
    prefixes: list[str] = []
    for path in (
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ):
        if path and os.path.isdir(path):
            real = os.path.realpath(path)
            if real not in prefixes and real != "/":
                prefixes.append(real)
    roots = list(prefixes)
    for path in sys.path:
        if path and os.path.isdir(path):
            real = os.path.realpath(path)
            if real not in roots and real != "/" and any(_beneath(real, p) for p in prefixes):
                roots.append(real)
    return roots


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def readable(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` (a real path) lies beneath one of ``roots`` (what :func:`restrict` lets a call read)."""
    return any(_beneath(os.path.realpath(path), root) for root in roots)


def _handled_fs(abi: int) -> int:
    rights = (
        EXECUTE
        | WRITE_FILE
        | READ_FILE
        | READ_DIR
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM
    )
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


class PreparedRules:
    """Landlock rules for the read-only paths, opened and packed once (in the worker) and applied by each
    call with :meth:`restrict`, which only adds the call's scratch directory. Holds ``O_PATH`` descriptors
    (close-on-exec) for the worker's lifetime.

    ``read_roots`` (directories or single files) are granted read and execute; ``list_roots`` only the listing
    of the directories beneath them (:mod:`tirl.sandbox.packages`: package directories whose names a call may
    see, not their contents)."""

    def __init__(
        self,
        read_roots: Iterable[str],
        read_files: Iterable[str] = SYSTEM_READ_FILES,
        write_files: Iterable[str] = SYSTEM_WRITE_FILES,
        abi: int | None = None,
        list_roots: Iterable[str] = (),
    ) -> None:
        self.abi = abi_version() if abi is None else abi
        self.handled = _handled_fs(self.abi)
        if self.abi >= 6:
            attr = struct.pack(
                "<QQQ", self.handled, NET_BIND_TCP | NET_CONNECT_TCP, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            )
        elif self.abi >= 4:
            attr = struct.pack("<QQ", self.handled, NET_BIND_TCP | NET_CONNECT_TCP)
        else:
            attr = struct.pack("<Q", self.handled)
        self._ruleset_attr = ctypes.create_string_buffer(attr, len(attr))
        self._fds: list[int] = []
        self._rules: list[ctypes.Array] = []
        read_exec = READ_FILE | READ_DIR | EXECUTE
        write = WRITE_FILE | (TRUNCATE if self.abi >= 3 else 0)
        grants: dict[str, int] = {}
        for root in read_roots:
            grants[root] = grants.get(root, 0) | read_exec
        for root in list_roots:  # names only: the files beneath need a read root of their own
            grants[root] = grants.get(root, 0) | READ_DIR
        for path in read_files:
            grants[path] = grants.get(path, 0) | READ_FILE
        for path in write_files:
            grants[path] = grants.get(path, 0) | write
        for path, access in grants.items():
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except (FileNotFoundError, NotADirectoryError):
                continue  # a missing path is simply not granted
            except OSError as exc:  # EMFILE and the like: a grant must not go missing without a word
                self.close()
                raise OSError(exc.errno, f"cannot open {path} for a Landlock rule: {exc.strerror}") from exc
            if len(grants) > 64:
                # Many descriptors (package directories cut out: tirl.sandbox.packages): keep them above
                # PREPARED_FD_BASE, so that a call whose descriptor limit is lower still has every low number
                # free for its own files; the call closes them all once it is restricted.
                try:
                    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, PREPARED_FD_BASE)
                except OSError:
                    high = fd  # the soft limit leaves no room up there: keep the low number
                if high != fd:
                    os.close(fd)
                    fd = high
            if not os.path.isdir(path):
                access &= _FILE_RIGHTS
            self._fds.append(fd)
            packed = struct.pack("<Qi", access & self.handled, fd)
            self._rules.append(ctypes.create_string_buffer(packed, len(packed)))

    def restrict(self, scratch_dir: str, writable_dirs: Iterable[str] = (), readable_dirs: Iterable[str] = ()) -> None:
        """Restrict the calling process to the prepared rules plus full access beneath ``scratch_dir`` and
        ``writable_dirs``, and read access beneath ``readable_dirs``.

        The extra directories are opened here, in the calling process, so they may be mounts it made itself
        (a call's private ``/dev/shm`` and ``/proc``: Landlock rules hold on inodes, and a new mount has new ones).

        Raises:
            OSError: the kernel refused; the process is unchanged unless the final step succeeded.
        """
        ruleset_fd = _linux.syscall(
            _NR_CREATE, self._ruleset_attr, ctypes.c_size_t(len(self._ruleset_attr)), ctypes.c_uint32(0)
        )
        try:
            grants = (
                [(scratch_dir, self.handled)]
                + [(d, self.handled) for d in writable_dirs]
                + [(d, (READ_FILE | READ_DIR | EXECUTE) & self.handled) for d in readable_dirs]
            )
            for path, access in grants:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                try:
                    packed = struct.pack("<Qi", access, fd)
                    _linux.syscall(
                        _NR_ADD_RULE,
                        ctypes.c_int(ruleset_fd),
                        ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.create_string_buffer(packed, len(packed)),
                        ctypes.c_uint32(0),
                    )
                finally:
                    os.close(fd)
            rs = ctypes.c_int(ruleset_fd)
            kind = ctypes.c_int(_RULE_PATH_BENEATH)
            flags = ctypes.c_uint32(0)
            for rule in self._rules:
                _linux.syscall(_NR_ADD_RULE, rs, kind, rule, flags)
            _linux.set_no_new_privs()
            _linux.syscall(_NR_RESTRICT, rs, flags)
        finally:
            os.close(ruleset_fd)

    def close(self) -> None:
        """Close the prepared descriptors."""
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def restrict(
    scratch_dir: str,
    read_roots: Iterable[str],
    read_files: Iterable[str] = SYSTEM_READ_FILES,
    write_files: Iterable[str] = SYSTEM_WRITE_FILES,
    abi: int | None = None,
) -> int:
    """Restrict the calling process (and its future children) to the policy in the module docstring.

    Args:
        scratch_dir: the only directory tree where files can be created, written or removed.
        read_roots: directory trees readable and executable.
        read_files, write_files: single files readable (resp. writable).
        abi: the kernel's ABI version if already known.

    Returns:
        The ABI version used.

    Raises:
        OSError: Landlock unavailable, or a rule or the restriction was refused. The caller must treat a
            failure as "not isolated" (the process is unchanged unless ``restrict_self`` succeeded).
    """
    prepared = PreparedRules(read_roots, read_files, write_files, abi)
    try:
        prepared.restrict(scratch_dir)
    finally:
        prepared.close()
    return prepared.abi
