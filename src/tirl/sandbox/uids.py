"""Per-call user ids: each running call gets a uid (and the gid of the same number) that no other call on the
machine holds at that moment, in this pool or any other.

Why: RLIMIT_NPROC, signal permissions and file ownership are per uid. With one shared sandbox uid, one call
that forks or starts many threads made unrelated concurrent calls fail with ``BlockingIOError`` (issue 13:
a fork bomb next to ``subprocess.run(['true'])`` calls broke 1-3 of them in 3 of 3 trials).

How (the scheme of isolate's box ids, with kernel file locks instead of a lock directory per box):

- the range is ``first .. first + count - 1`` (default :data:`DEFAULT_FIRST_UID`, inside the range systemd
  leaves unassigned, 1879048192-2147483647, so it meets no real user, no DynamicUser and no container range);
- a uid is held by an exclusive ``flock`` on ``<lock_dir>/<uid>`` (a root-owned 0700 directory). A lock is
  released by the kernel when its holder's descriptor closes, so a worker that crashes or is SIGKILLed
  releases its uids without any clean-up code;
- the holder writes its pid into the file when it claims and empties the file when it releases cleanly.
  A claimer that finds a non-empty file takes over from a holder that died with a call still running: it
  uses that uid only once no process runs as it any more (a scan of ``/proc/*/status``), since the dead
  call's processes may still be exiting.

The worker claims before it forks a call and releases after it reaped the call (with a PID namespace, every
process of the call is gone by then). It does not limit how many uids a process may hold.
"""

from __future__ import annotations

import fcntl
import os
import random
import stat

#: First uid of the default range (systemd's unassigned range starts at 1879048192).
DEFAULT_FIRST_UID = 1_900_000_000
#: Size of the default range: more than any machine runs calls at once.
DEFAULT_UID_COUNT = 4096
#: Default lock directory (root-owned; /run is a tmpfs on most systems, so stale files vanish at boot).
DEFAULT_LOCK_DIR = "/run/tirl-sandbox/uids"
_MAX_OPEN_LOCK_FILES = 64


class UidRangeError(RuntimeError):
    """The uid range cannot be used on this machine (lock directory unusable, or every uid is held)."""


def prepare_lock_dir(path: str) -> None:
    """Create ``path`` (mode 0700) if missing and check that only root can change it.

    Raises:
        UidRangeError: it cannot be created, or it (or a parent) is not a root-owned directory writable by
            root only: another user could then create or remove lock files and claim uids in use.
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise UidRangeError(f"cannot create the uid lock directory {path}: {exc.strerror or exc}") from exc
    current = os.path.realpath(path)
    while True:
        try:
            st = os.lstat(current)
        except OSError as exc:
            raise UidRangeError(f"cannot stat {current}: {exc.strerror or exc}") from exc
        sticky_ok = current != os.path.realpath(path) and st.st_mode & stat.S_ISVTX
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or (st.st_mode & 0o022 and not sticky_ok):
            raise UidRangeError(
                f"the uid lock directory {path} is unsafe: {current} is not a root-owned "
                "directory that only root can write"
            )
        if current == "/":
            return
        current = os.path.dirname(current)


def uid_in_use(uid: int) -> bool:
    """Whether any process on the machine (visible in this ``/proc``) runs with real, effective or saved
    user id ``uid``. Costs a read of every ``/proc/<pid>/status``; used only after a crash (see module)."""
    needle = str(uid)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        if needle in line.decode().split()[1:4]:
                            return True
                        break
        except OSError:
            continue
    return False


class UidAllocator:
    """Claims and releases uids of one range for the calls of one process (a worker). Not thread-safe.

    Args:
        first: first uid of the range (gid = uid).
        count: number of uids in the range (>= 1).
        lock_dir: the lock directory (see :func:`prepare_lock_dir`, which the caller runs once).
        rng: random source for the first uid tried (spreads concurrent workers over the range).

    Attributes:
        held: the uids this allocator holds now.
    """

    def __init__(self, first: int, count: int, lock_dir: str, rng: random.Random | None = None) -> None:
        if count < 1 or first < 1 or first + count - 1 > 0xFFFF_FFFE:
            raise ValueError(f"bad uid range: first={first}, count={count}")
        self.first = first
        self.count = count
        self.lock_dir = lock_dir
        self.held: set[int] = set()
        self._fds: dict[int, int] = {}  # open lock files, kept for reuse (locked only while held)
        # Every claim scans from the same random start, so a worker keeps reusing the same few uids (and
        # lock files) while concurrent workers, starting elsewhere, rarely meet.
        self._cursor = (rng or random.Random()).randrange(count)

    def _fd(self, uid: int) -> int:
        fd = self._fds.get(uid)
        if fd is None:
            if len(self._fds) >= _MAX_OPEN_LOCK_FILES:
                for other in [u for u in self._fds if u not in self.held]:
                    os.close(self._fds.pop(other))
            fd = os.open(
                os.path.join(self.lock_dir, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
            )
            self._fds[uid] = fd
        return fd

    def claim(self) -> int:
        """Hold a uid no other call holds and return it.

        Raises:
            UidRangeError: every uid of the range is held (more calls at once than ``count``) or still used
                by the processes of a crashed holder; or a lock file cannot be opened.
        """
        for step in range(self.count):
            uid = self.first + (self._cursor + step) % self.count
            if uid in self.held:
                continue
            try:
                fd = self._fd(uid)
            except OSError as exc:
                raise UidRangeError(f"cannot open the lock file of uid {uid}: {exc.strerror or exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            if os.pread(fd, 32, 0) and uid_in_use(uid):
                fcntl.flock(fd, fcntl.LOCK_UN)  # a crashed holder's processes are still exiting: skip it
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self.held.add(uid)
            return uid
        raise UidRangeError(f"all {self.count} uids from {self.first} are held by running calls")

    def release(self, uid: int, clean: bool = True) -> None:
        """Stop holding ``uid``. ``clean=False`` when processes of the call may still run as it: the file
        keeps the holder's pid, so the next claimer waits until no process uses the uid. Never raises."""
        if uid not in self.held:
            return
        self.held.discard(uid)
        fd = self._fds.get(uid)
        if fd is None:  # pragma: no cover - held implies an open file
            return
        try:
            if clean:
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            self._fds.pop(uid, None)
            os.close(fd)  # closing releases the lock too

    def close(self) -> None:
        """Release every held uid (clean) and close the lock files."""
        for uid in list(self.held):
            self.release(uid)
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
