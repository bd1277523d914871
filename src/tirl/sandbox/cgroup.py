"""Per-call control groups: the memory and the process count of all of a call's processes together.

RLIMIT_AS bounds each process and RLIMIT_NPROC each user id, so without this layer a call's 256 processes
of 2 GiB each could exhaust the host. With it, each call (its PID-namespace init and every descendant) runs
in a cgroup of its own whose memory limit is the request's ``memory_mb`` (memory + swap on cgroup v1 with
swap accounting, no swap at all on v2) and whose ``pids.max`` is ``nproc_limit``. When the kernel's OOM
killer ends a process of the call, the worker reads it from the cgroup (``oom_kill`` of
``memory.oom_control`` on v1, of ``memory.events`` on v2) and answers ``killed``.

Layout. For each hierarchy that holds the ``memory`` or ``pids`` controller (one per controller on cgroup v1
unless co-mounted; the unified hierarchy on v2), in the worker's own cgroup (or
``SandboxConfig.cgroup_parent``, relative to where the hierarchy is mounted), the worker creates
``tirl-w<pidns>-<pid>`` at start, and below it the calls' cgroups ``c<n>``. A call's cgroup is handed out
before its fork with the call's limit; after the call (when its last process is gone) it is kept for the
worker's next call when nothing is left in it but a few MiB of charges (page cache), else removed. Reuse
costs one limit write; a new directory per call cost about 1 ms of CPU more (the numbers are in
docs/sandbox.md). The call process moves itself in (writes ``0`` to ``cgroup.procs``) before it drops
its privileges. Directories a killed worker left behind are removed by the next worker that starts there.

cgroup v2 allows a cgroup with controllers for its children to hold no process (except the root), so on a
v2 machine the layer works when the worker's cgroup is the root or ``cgroup_parent`` names a delegated,
empty cgroup; otherwise it is reported missing with that reason. This module only manages directories and
files; :mod:`tirl.sandbox.isolation` decides when to use it, :mod:`tirl.sandbox.worker` when to create,
read and remove a call's cgroup.
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
from dataclasses import dataclass

#: Controllers this layer uses. ``memory`` is required for the layer to be active; ``pids`` is used when present.
CONTROLLERS: tuple[str, ...] = ("memory", "pids")
WORKER_PREFIX = "tirl-w"


class CgroupError(RuntimeError):
    """The cgroup layer cannot be used here; the message says why (for the layer report)."""


@dataclass
class Hierarchy:
    """One mounted cgroup hierarchy the layer uses.

    Attributes:
        version: 1 or 2.
        controllers: which of :data:`CONTROLLERS` it provides to the calls.
        base: the directory under which the worker creates its own (the worker's cgroup there, or
            ``cgroup_parent``).
        root: the worker's directory, ``base/tirl-w<pidns>-<pid>`` ("" until :meth:`CgroupLayer.setup`).
    """

    version: int
    controllers: tuple[str, ...]
    base: str
    root: str = ""


def _unescape(field: str) -> str:
    """Undo the octal escapes (``\\040`` for a space...) of /proc/self/mountinfo."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and len(field[i + 1 : i + 4]) == 3 and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[tuple[str, str, str, set[str]]]:
    """The cgroup mounts of a /proc/<pid>/mountinfo text: ``(mount point, root, fstype, super options)``."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append((_unescape(fields[4]), _unescape(fields[3]), rest[0], set(rest[2].split(","))))
    return mounts


def parse_proc_cgroup(text: str) -> tuple[dict[str, str], str | None]:
    """A /proc/<pid>/cgroup text as (v1 controller -> path, the v2 path or None)."""
    v1: dict[str, str] = {}
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, names, path = parts
        if hid == "0" and names == "":
            v2 = path
        else:
            for name in names.split(","):
                v1[name] = path
    return v1, v2


def _join(mountpoint: str, mount_root: str, path: str) -> str | None:
    """The directory of cgroup ``path`` (as /proc/self/cgroup shows it) under a mount of ``mount_root``."""
    root = mount_root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None  # the mount shows another part of the hierarchy
    rel = path[len(root) :].lstrip("/")
    return os.path.join(mountpoint, rel) if rel else mountpoint


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)  # O_TRUNC as `echo >` does; for plain files too
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def locate(parent: str | None = None, mountinfo: str | None = None, proc_cgroup: str | None = None) -> list[Hierarchy]:
    """Find the hierarchies of the memory and pids controllers and the base directory in each.

    Args:
        parent: ``cgroup_parent`` (a path relative to each hierarchy's mount point); None means the
            calling process's own cgroup.
        mountinfo, proc_cgroup: texts of /proc/self/mountinfo and /proc/self/cgroup (read when None).

    Raises:
        CgroupError: no memory controller is mounted, or the process's cgroup is not visible.
    """
    mountinfo = _read("/proc/self/mountinfo") if mountinfo is None else mountinfo
    proc_cgroup = _read("/proc/self/cgroup") if proc_cgroup is None else proc_cgroup
    mounts = parse_mountinfo(mountinfo)
    own_v1, own_v2 = parse_proc_cgroup(proc_cgroup)
    found: dict[str, Hierarchy] = {}
    wanted = list(CONTROLLERS)
    for name in CONTROLLERS:
        for mountpoint, root, fstype, opts in mounts:
            if fstype == "cgroup" and name in opts:
                own = own_v1.get(name)
                base = (
                    os.path.join(mountpoint, parent.strip("/"))
                    if parent
                    else (_join(mountpoint, root, own) if own is not None else None)
                )
                if base is None:
                    continue
                found.setdefault(mountpoint, Hierarchy(1, (), base)).controllers += (name,)
                wanted.remove(name)
                break
    if wanted:
        for mountpoint, root, fstype, _opts in mounts:
            if fstype != "cgroup2":
                continue
            base = (
                os.path.join(mountpoint, parent.strip("/"))
                if parent
                else (_join(mountpoint, root, own_v2) if own_v2 is not None else None)
            )
            if base is None:
                continue
            try:
                available = set(_read(os.path.join(base, "cgroup.controllers")).split())
            except OSError:
                continue
            names = tuple(n for n in wanted if n in available)
            if names:
                found[mountpoint] = Hierarchy(2, names, base)
                for n in names:
                    wanted.remove(n)
                break
    if not any("memory" in h.controllers for h in found.values()):
        raise CgroupError(
            "no memory controller is mounted (neither cgroup v1 nor available in the cgroup v2 "
            "hierarchy of this process)"
        )
    return list(found.values())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_worker_dir(root: str) -> None:
    """Remove a worker's directory and its (empty) call directories; what is still in use stays."""
    try:
        entries = os.listdir(root)
    except OSError:
        return
    for name in entries:
        path = os.path.join(root, name)
        if os.path.isdir(path):
            try:
                os.rmdir(path)
            except OSError:
                pass
    try:
        os.rmdir(root)
    except OSError:
        pass


class CallCgroup:
    """The cgroup directories (one per hierarchy) a call runs in.

    The worker gets one from :meth:`CgroupLayer.acquire`, the call process :meth:`enter`\\ s it, the worker
    reads :meth:`oom_kills` after the call and gives it back with :meth:`CgroupLayer.release` (which empties
    it for the next call of the worker, or removes it).
    """

    __slots__ = ("dirs", "oom_files", "limit_files", "swap_file", "usage_file", "memory_bytes", "oom_base")

    def __init__(
        self,
        dirs: list[str],
        oom_files: list[str],
        limit_files: list[str],
        swap_file: str | None,
        usage_file: str | None,
    ) -> None:
        self.dirs = dirs
        self.oom_files = oom_files
        self.limit_files = limit_files  # v1: memory.limit_in_bytes, memory.memsw.limit_in_bytes; v2: memory.max
        self.swap_file = swap_file  # v2: memory.swap.max, set to 0 once
        self.usage_file = usage_file
        self.memory_bytes = 0
        self.oom_base = 0

    def set_memory(self, memory_bytes: int) -> None:
        """Set the memory limit (memory + swap on v1 when accounted, swap 0 on v2) for the next call.

        Raises:
            OSError: the kernel refused (for example EBUSY: more is charged than the new limit and cannot be
                reclaimed).
        """
        if memory_bytes == self.memory_bytes:
            return
        files = self.limit_files
        if self.memory_bytes and memory_bytes > self.memory_bytes:  # v1: memsw >= memory at every step
            files = files[::-1]
        for path in files:
            _write(path, str(memory_bytes))
        if self.swap_file and not self.memory_bytes:
            _write(self.swap_file, "0")
        self.memory_bytes = memory_bytes

    def enter(self) -> None:
        """Move the calling process into the cgroups (needs write access: before dropping root).

        Raises:
            OSError: the kernel refused.
        """
        for path in self.dirs:
            _write(os.path.join(path, "cgroup.procs"), "0")

    def oom_total(self) -> int:
        """OOM kills counted in the cgroup since it was made (0 when the kernel does not count them)."""
        total = 0
        for path in self.oom_files:
            try:
                text = _read(path)
            except OSError:
                continue
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill" and value.strip().isdigit():
                    total += int(value)
        return total

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended since the cgroup was last handed out (the current call)."""
        return max(0, self.oom_total() - self.oom_base)

    def usage(self) -> int | None:
        """Bytes charged to the cgroup now (page cache and kernel memory left by earlier calls included)."""
        if not self.usage_file:
            return None
        try:
            return int(_read(self.usage_file).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def members(self) -> list[int]:
        """Pids (in the worker's PID namespace) of the processes still in the cgroups."""
        pids: set[int] = set()
        for path in self.dirs:
            try:
                pids.update(int(p) for p in _read(os.path.join(path, "cgroup.procs")).split())
            except (OSError, ValueError):
                continue
        return sorted(pids)

    def kill(self) -> None:
        """SIGKILL every process in the cgroups (``cgroup.kill`` on v2 where the kernel has it)."""
        for path in self.dirs:
            try:
                _write(os.path.join(path, "cgroup.kill"), "1")
                return
            except OSError:
                pass
        for pid in self.members():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def remove(self) -> bool:
        """Remove the directories; True when all are gone (False: some process is left in one)."""
        left = []
        for path in self.dirs:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(path)
        self.dirs = left
        return not left


class CgroupLayer:
    """The worker's cgroup directories and the cgroups of its calls (see the module docstring).

    A call's cgroup is reused by a later call of the same worker once it is empty (no process left: with a
    PID namespace, true as soon as the call's init was reaped) and holds at most :attr:`reuse_max_bytes` of
    charges (page cache, kernel objects) from earlier calls; otherwise it is removed and the next call gets a
    new one. Reuse saves about 1 ms of CPU per call over a new directory per call (docs/sandbox.md).
    """

    #: A cgroup with more charged than this after a call is removed instead of reused.
    reuse_max_bytes: int = 16 << 20

    def __init__(self, hierarchies: list[Hierarchy], max_free: int = 2) -> None:
        self.hierarchies = hierarchies
        self.memory_v1_memsw = False
        self.memory_v2_swap = False
        self.max_free = max_free
        self.free: list[CallCgroup] = []
        self.notes: list[str] = []  # controllers left out, and why
        self._names = itertools.count()

    @classmethod
    def setup(
        cls,
        parent: str | None = None,
        *,
        max_free: int = 2,
        mountinfo: str | None = None,
        proc_cgroup: str | None = None,
    ) -> CgroupLayer:
        """Locate the hierarchies and create this worker's directory in each.

        Args:
            parent: ``SandboxConfig.cgroup_parent``.
            max_free: empty cgroups kept for reuse (the worker's ``slots_per_worker``).
            mountinfo, proc_cgroup: see :func:`locate`.

        Raises:
            CgroupError: with the reason (no memory controller, a read-only or foreign cgroup tree, the
                v2 no-internal-process rule...).
        """
        hierarchies = locate(parent, mountinfo, proc_cgroup)
        layer = cls(hierarchies, max_free)
        name = f"{_worker_prefix()}{os.getpid()}"
        try:
            for h in list(hierarchies):
                try:
                    _make_worker_dir(h, name)
                except CgroupError as exc:
                    if "memory" in h.controllers:
                        raise
                    if h.root:
                        _remove_worker_dir(h.root)
                    hierarchies.remove(h)  # pids alone is optional: run without it, and say why
                    layer.notes.append(f"{'/'.join(h.controllers)} not used: {exc}")
                    continue
                if "memory" in h.controllers:
                    if h.version == 1:
                        layer.memory_v1_memsw = os.path.exists(os.path.join(h.root, "memory.memsw.limit_in_bytes"))
                    else:
                        layer.memory_v2_swap = os.path.exists(os.path.join(h.root, "memory.swap.max"))
        except BaseException:
            layer.close()
            raise
        return layer

    def describe(self) -> str:
        """One line for the layer report: versions, directories and limits."""
        parts = []
        for h in self.hierarchies:
            what = []
            if "memory" in h.controllers:
                if h.version == 1:
                    what.append("memory" + ("+swap" if self.memory_v1_memsw else "") + " = memory_mb")
                else:
                    what.append("memory = memory_mb" + (", no swap" if self.memory_v2_swap else ""))
            if "pids" in h.controllers:
                what.append("pids = nproc_limit")
            parts.append(f"v{h.version} {'; '.join(what)} (in {h.root or h.base})")
        if not any("pids" in h.controllers for h in self.hierarchies):
            parts.append("no pids controller: processes bounded only by RLIMIT_NPROC")
        parts += self.notes
        return "cgroup per call, all its processes together: " + "; ".join(parts) + "; OOM kills reported as killed"

    def create(self, name: str, memory_bytes: int, pids_max: int) -> CallCgroup:
        """Make a new cgroup ``name`` with its limits.

        Raises:
            OSError: the kernel refused (the caller answers the call ``internal``).
        """
        dirs: list[str] = []
        cg = CallCgroup(dirs, [], [], None, None)
        try:
            for h in self.hierarchies:
                path = os.path.join(h.root, name)
                os.mkdir(path, 0o755)
                dirs.append(path)
                if "memory" in h.controllers:
                    if h.version == 1:
                        cg.limit_files.append(os.path.join(path, "memory.limit_in_bytes"))
                        if self.memory_v1_memsw:
                            cg.limit_files.append(os.path.join(path, "memory.memsw.limit_in_bytes"))
                        cg.oom_files.append(os.path.join(path, "memory.oom_control"))
                        cg.usage_file = os.path.join(path, "memory.usage_in_bytes")
                    else:
                        cg.limit_files.append(os.path.join(path, "memory.max"))
                        if self.memory_v2_swap:
                            cg.swap_file = os.path.join(path, "memory.swap.max")
                        cg.oom_files.append(os.path.join(path, "memory.events"))
                        cg.usage_file = os.path.join(path, "memory.current")
                if "pids" in h.controllers:
                    _write(os.path.join(path, "pids.max"), str(pids_max))
            cg.set_memory(memory_bytes)
        except BaseException:
            cg.remove()
            raise
        return cg

    def acquire(self, memory_bytes: int, pids_max: int) -> CallCgroup:
        """A cgroup for the next call, limited to ``memory_bytes``: an emptied one of an earlier call, or new.

        Raises:
            OSError: the kernel refused to make one.
        """
        while self.free:
            cg = self.free.pop()
            try:
                cg.set_memory(memory_bytes)
            except OSError:  # more charged than the new limit, and not reclaimable: start afresh
                if not cg.remove():
                    cg.kill()
                continue
            cg.oom_base = cg.oom_total()
            return cg
        return self.create(f"c{next(self._names)}", memory_bytes, pids_max)

    def release(self, cg: CallCgroup, empty: bool) -> bool:
        """Take back the cgroup of a finished call: keep it for reuse when ``empty`` (the caller knows that no
        process is left) and little is charged to it, else remove it.

        Returns:
            False when it could not be removed (processes left): the caller kills them and removes it later.
        """
        if empty and len(self.free) < self.max_free:
            usage = cg.usage()
            if usage is not None and usage <= self.reuse_max_bytes:
                self.free.append(cg)
                return True
        return cg.remove()

    def close(self) -> None:
        """Remove the worker's directories (cgroups still in use stay)."""
        for cg in self.free:
            cg.remove()
        self.free = []
        for h in self.hierarchies:
            if h.root:
                _remove_worker_dir(h.root)


def _make_worker_dir(h: Hierarchy, name: str) -> None:
    """Create the worker's directory ``h.base/name`` (v2: with the controllers for its children) as ``h.root``.

    Raises:
        CgroupError: with the reason.
    """
    _clean_stale(h.base)
    if h.version == 2:
        _enable_v2_controllers(h.base, h.controllers)
    h.root = os.path.join(h.base, name)
    try:
        os.mkdir(h.root, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        h.root = ""
        raise CgroupError(
            f"cgroup v{h.version} {', '.join(h.controllers)}: cannot create a cgroup in {h.base}: {exc.strerror}"
        ) from exc
    if h.version == 2:
        _enable_v2_controllers(h.root, h.controllers)


def _enable_v2_controllers(path: str, controllers: tuple[str, ...]) -> None:
    """Make ``controllers`` available to the children of v2 cgroup ``path``."""
    control = os.path.join(path, "cgroup.subtree_control")
    try:
        enabled = set(_read(control).split())
    except OSError as exc:
        raise CgroupError(f"cgroup v2: cannot read {control}: {exc.strerror}") from exc
    missing = [c for c in controllers if c not in enabled]
    if not missing:
        return
    try:
        _write(control, " ".join(f"+{c}" for c in missing))
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise CgroupError(
                f"cgroup v2: {path} holds processes, so its children cannot get the {'/'.join(missing)} "
                "controller (no-internal-process rule); set SandboxConfig.cgroup_parent to a delegated, "
                "empty cgroup"
            ) from exc
        raise CgroupError(f"cgroup v2: cannot enable {'/'.join(missing)} in {control}: {exc.strerror}") from exc


def _worker_prefix() -> str:
    """``tirl-w<PID namespace inode>-``: the pids in the names are those of this PID namespace, so only
    directories of the same namespace are checked for stale ones."""
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return f"{WORKER_PREFIX}{ns}-"


def _clean_stale(base: str) -> None:
    """Remove the directories of workers (of this PID namespace) that no longer exist: workers killed before
    their clean-up leave empty cgroups behind."""
    prefix = _worker_prefix()
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        suffix = name[len(prefix) :]
        if name.startswith(prefix) and suffix.isdigit() and not _pid_alive(int(suffix)):
            _remove_worker_dir(os.path.join(base, name))
