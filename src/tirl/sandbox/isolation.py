"""Isolation layers: what a worker sets up once, what each call's process applies before running code.

A worker (see :mod:`tirl.sandbox.worker`) calls :func:`setup_worker` at start: parent-death signal, child
subreaper, and where the machine allows, a user namespace (only when not root), a network namespace (no
interfaces but a down loopback: nothing is reachable) and a mount namespace with a private, size-capped
tmpfs for scratch directories. It then calls :func:`probe_plan`, which forks a test process that applies
every per-call layer and checks that each works; a layer that fails is switched off with the reason, so
a machine without (say) Landlock still runs code, and ``tirl sandbox doctor`` says what is missing.

Each call's process then calls :func:`enter_call` with the resulting :class:`CallPlan`: its own cgroup
(memory and pids of all its processes together, see :mod:`tirl.sandbox.cgroup`), a fresh IPC namespace
(System V shared memory, semaphores, message queues and POSIX message queues die with the call's last
process instead of outliving it in the host's namespace), new session, resource
limits, scratch directory as cwd, allowlisted environment, no-new-privs, unprivileged user id (with all
capabilities dropped), parent-death signal, Landlock, seccomp. A layer that the probe accepted but that
fails for a call raises :class:`LayerError` (fail closed: the call is answered ``internal``).

PID namespaces are per call and handled by the worker (``setns`` back to its own namespace, then
``unshare(CLONE_NEWPID)`` before each fork), see :func:`new_pid_namespace_for_children`.

Where cgroups are absent or read-only, memory is limited only per process (RLIMIT_AS) and processes per
user (RLIMIT_NPROC), and the ``cgroup`` layer is reported missing with the reason.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import signal
import socket
import tempfile
from dataclasses import asdict, dataclass, field

from tirl.sandbox import _linux, cgroup, landlock, packages, seccomp, uids
from tirl.sandbox.config import LAYER_NAMES, THREAD_ENV_VARS


class LayerError(RuntimeError):
    """A per-call isolation layer could not be applied; ``layer`` names it."""

    def __init__(self, layer: str, message: str) -> None:
        super().__init__(f"{layer}: {message}")
        self.layer = layer


@dataclass
class LayerStatus:
    """Whether one isolation layer is active, and why (or why not)."""

    name: str
    active: bool
    detail: str


@dataclass
class CallPlan:
    """The per-call layers a worker applies, after probing (see :func:`probe_plan`).

    Attributes:
        pid_namespace: fork each call as PID 2 of a fresh PID namespace (the worker must keep its caps).
        ipc_namespace: the call process unshares a fresh IPC namespace (before dropping its capabilities).
        uid_mode: ``drop`` (run as ``uid``/``gid``), ``drop_keep_read`` (run as ``uid`` but keep
            CAP_DAC_READ_SEARCH, confined by Landlock, because the Python installation is not readable by
            that uid), ``capless`` (stay uid 0 with no capabilities) or ``none``.
        landlock_abi: Landlock ABI to use, 0 for off.
        seccomp: install the seccomp filter.
        rlimits: apply resource limits.
        cgroup: put each call in its own cgroup (the worker's :class:`~tirl.sandbox.cgroup.CgroupLayer`).
        uid_per_call: each call runs as a uid claimed for it (the worker's :class:`~tirl.sandbox.uids.UidAllocator`).
        private_proc: the call mounts a fresh ``/proc`` of its PID namespace (in its own mount namespace).
        private_shm: the call mounts a fresh tmpfs of ``shm_mb`` MiB / ``shm_inodes`` files on ``/dev/shm``.
        inherit_private_mounts: the worker's mount namespace already has private propagation (the
            ``mount_namespace`` layer), so a call's copy needs no ``MS_PRIVATE`` pass of its own.
        uid, gid: identity for ``drop`` modes (the shared one, and the one probed, without ``uid_per_call``).
        read_roots: trees whose files are readable and executable under Landlock (the Python installation
            and system trees with their package directories cut out, the allowed packages' entries, ...).
        list_roots: trees that may only be listed (the package directories and the trees above them).
        site_dirs: the package directories cut out of the read roots (empty when every package is readable).
        child_site_dir: the folder of the ``sitecustomize`` that guards a Python the call starts
            (:func:`tirl.sandbox.packages.write_child_site`); on the call's ``PYTHONPATH`` (:func:`call_env`).
        missing_packages: ``importable_packages`` that are not installed here (reported by the layer).
        nproc, nofile, fsize_mb: resource limits.
    """

    pid_namespace: bool = False
    ipc_namespace: bool = False
    uid_mode: str = "none"
    landlock_abi: int = 0
    seccomp: bool = False
    rlimits: bool = True
    cgroup: bool = False
    uid_per_call: bool = False
    private_proc: bool = False
    private_shm: bool = False
    inherit_private_mounts: bool = False
    shm_mb: int = 64
    shm_inodes: int = 4096
    uid: int = 65534
    gid: int = 65534
    read_roots: list[str] = field(default_factory=list)
    list_roots: list[str] = field(default_factory=list)
    site_dirs: list[str] = field(default_factory=list)
    child_site_dir: str | None = None
    missing_packages: list[str] = field(default_factory=list)
    nproc: int = 256
    nofile: int = 256
    fsize_mb: int = 64


@dataclass
class WorkerIsolation:
    """What :func:`setup_worker` achieved, plus the probed per-call plan.

    ``call_scratch_tmpfs``: the tmpfs mount options of each call's own scratch directory (``size=..m,
    nr_inodes=..,mode=0700``, from ``scratch_mb`` and ``scratch_inodes``), which the worker mounts before the
    call and unmounts after it (the ``mount_namespace`` layer); None where the worker has no mount namespace
    and a call's scratch is a plain directory under ``scratch_dir``.
    """

    layers: dict[str, LayerStatus]
    plan: CallPlan
    scratch_dir: str
    call_scratch_tmpfs: str | None = None
    self_pid_ns_fd: int | None = None
    seccomp_filter: seccomp.PreparedFilter | None = None
    landlock_rules: landlock.PreparedRules | None = None
    cgroups: cgroup.CgroupLayer | None = None
    uid_allocator: uids.UidAllocator | None = None
    shared_uid: tuple[int, int] = (65534, 65534)

    def report(self) -> list[dict]:
        """Layer statuses as dicts, in :data:`LAYER_NAMES` order."""
        return [asdict(self.layers[name]) for name in LAYER_NAMES if name in self.layers]


def scrubbed_env(passthrough: tuple[str, ...] = (), source: dict[str, str] | None = None) -> dict[str, str]:
    """The allowlisted environment a worker starts with: PATH, locale, thread counts = 1, no secrets.

    Args:
        passthrough: extra variable names to copy from ``source``.
        source: the environment to copy from (default ``os.environ``).
    """
    source = os.environ if source is None else source
    env = {
        "PATH": source.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "MPLBACKEND": "Agg",
    }
    env.update({name: "1" for name in THREAD_ENV_VARS})
    for name in passthrough:
        if name in source:
            env[name] = source[name]
    return env


#: ``USER`` and ``LOGNAME`` of every call: per-call uids have no ``/etc/passwd`` entry, and
#: ``getpass.getuser()`` (used by some libraries for cache paths) reads these first.
CALL_USER_NAME = "sandbox"


def call_env(worker_env: dict[str, str], scratch_dir: str, child_site_dir: str | None = None) -> dict[str, str]:
    """The environment of one call: the worker's allowlisted variables with HOME and TMPDIR = scratch, and
    USER = LOGNAME = :data:`CALL_USER_NAME`; with ``child_site_dir``, that folder first on ``PYTHONPATH`` (the
    import guard of a Python the call starts: :func:`tirl.sandbox.packages.write_child_site`)."""
    env = dict(worker_env)
    for key in ("HOME", "TMPDIR", "TMP", "TEMP", "MPLCONFIGDIR"):
        env[key] = scratch_dir
    env["USER"] = env["LOGNAME"] = CALL_USER_NAME
    if child_site_dir:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (child_site_dir, env.get("PYTHONPATH")) if p)
    return env


def _try(fn) -> str | None:
    try:
        fn()
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    except Exception as exc:  # pragma: no cover - unexpected ctypes failures
        return f"{type(exc).__name__}: {exc}"


def _enter_user_namespace() -> str | None:
    uid, gid = os.geteuid(), os.getegid()
    err = _try(lambda: _linux.unshare(_linux.CLONE_NEWUSER))
    if err:
        return err
    try:
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        with open("/proc/self/uid_map", "w") as fh:
            fh.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as fh:
            fh.write(f"0 {gid} 1")
    except OSError as exc:
        return f"uid/gid map: {exc.strerror}"
    return None


OFF = "switched off in the configuration"
"""The reason of a layer the configuration turns off."""


def _off(layers: dict[str, LayerStatus], name: str, detail: str = OFF) -> None:
    """Record layer ``name`` as inactive, for ``detail`` (default: turned off by the configuration)."""
    layers[name] = LayerStatus(name, False, detail)


@dataclass
class _Namespaces:
    """What :func:`_enter_worker_namespaces` made of the worker: whether it runs in a user namespace of its own
    (``note``: said after each namespace layer's detail), whether its mounts are private (its scratch a tmpfs),
    and the descriptor of its own PID namespace (None: no PID namespace per call)."""

    in_userns: bool
    note: str
    mounts_private: bool
    pid_ns_fd: int | None


def _enter_worker_namespaces(cfg: dict, scratch_dir: str, layers: dict[str, LayerStatus]) -> _Namespaces:
    """Move the worker into its namespaces, in this order: a user namespace (only when not root and some
    namespace is wanted), a network namespace (no interfaces, loopback down), a mount namespace with private
    mounts and a 16 MiB tmpfs on ``scratch_dir``, and the PID namespace its calls are forked into (the worker
    ``setns`` back to its own). Each layer's status goes into ``layers``; a refused one is switched off."""
    is_root = os.geteuid() == 0
    in_userns = False
    want_ns = cfg["network_namespace"] or cfg["mount_namespace"] or cfg["pid_namespace"]
    note = ""
    if not is_root and want_ns and cfg["user_namespace"]:
        err = _enter_user_namespace()
        in_userns = err is None
        note = " (in an unprivileged user namespace)" if in_userns else f" (user namespace refused: {err})"

    def ns_layer(name: str, enabled: bool, fn, what: str) -> bool:
        if not enabled:
            _off(layers, name)
            return False
        err = _try(fn)
        if err is None:
            layers[name] = LayerStatus(name, True, what + note)
            return True
        _off(layers, name, f"unshare refused: {err}{note}")
        return False

    ns_layer(
        "network_namespace",
        cfg["network_namespace"],
        lambda: _linux.unshare(_linux.CLONE_NEWNET),
        "new network namespace per worker: no interfaces, loopback down",
    )

    def mount_private() -> None:
        _linux.unshare(_linux.CLONE_NEWNS)
        _linux.mount(None, "/", None, _linux.MS_REC | _linux.MS_PRIVATE)
        # The worker's own tmpfs holds only the calls' mount points and the child site folder (calls cannot
        # write to it); each call's scratch is a tmpfs of its own on top (worker.py, _spawn), so no call can
        # fill the space or the inodes another call (or the next call's set-up) needs.
        _linux.mount("tmpfs", scratch_dir, "tmpfs", _linux.MS_NOSUID | _linux.MS_NODEV, "size=16m,mode=0711")

    scratch_mb, scratch_inodes = int(cfg["scratch_mb"]), int(cfg.get("scratch_inodes", 65536))
    mounts_private = ns_layer(
        "mount_namespace",
        cfg["mount_namespace"],
        mount_private,
        f"private mounts; each call's scratch on a tmpfs of its own ({scratch_mb} MiB, {scratch_inodes} files at "
        "most), unmounted after the call",
    )
    return _Namespaces(in_userns, note, mounts_private, _pid_namespace(cfg, layers, note))


def _pid_namespace(cfg: dict, layers: dict[str, LayerStatus], note: str) -> int | None:
    """Prepare a fresh PID namespace for the calls the worker forks (each call its init); returns the
    descriptor of the worker's own PID namespace, or None when the layer is off or refused (recorded in
    ``layers``; ``note`` says whether a user namespace was entered)."""
    if not cfg["pid_namespace"]:
        _off(layers, "pid_namespace")
        return None
    self_ns_fd = None
    try:
        self_ns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        new_pid_namespace_for_children(self_ns_fd)
        _linux.setns(self_ns_fd, _linux.CLONE_NEWPID)  # back: the next fork must not be an init
    except OSError as exc:
        if self_ns_fd is not None:
            os.close(self_ns_fd)
        _off(
            layers,
            "pid_namespace",
            f"{exc.strerror}{note}; calls are killed by process group and orphans by the subreaper worker",
        )
        return None
    layers["pid_namespace"] = LayerStatus(
        "pid_namespace",
        True,
        "fresh PID namespace per call with the call as its init: when it ends, every process it started dies",
    )
    return self_ns_fd


def _plan_identity(
    cfg: dict, plan: CallPlan, layers: dict[str, LayerStatus], host_uid: int, in_userns: bool
) -> uids.UidAllocator | None:
    """Decide who a call runs as: an IPC namespace per call (``plan.ipc_namespace``, probed later),
    ``plan.uid_mode`` (``drop``: root drops to the sandbox uid; ``capless``: in a user namespace, capabilities
    dropped; ``none``: the invoking user) and, as root, a uid of its own per call (the returned allocator; None
    when that layer is off, needs root, or its uid range or lock folder is unusable, the reason in ``layers``).
    ``host_uid`` is the worker's uid read before it entered a user namespace (inside one it is 0).
    """
    is_root = host_uid == 0
    # Per call, applied by the call process itself (unshare(CLONE_NEWIPC) takes effect at once, unlike
    # CLONE_NEWPID); whether the kernel allows it is decided by the probe (see probe_plan).
    plan.ipc_namespace = bool(cfg.get("ipc_namespace", False))
    if not plan.ipc_namespace:
        _off(layers, "ipc_namespace")
    not_root = f"not started as root: calls run as the invoking user (uid {host_uid})"
    if not cfg["unprivileged_user"]:
        _off(layers, "unprivileged_user")
        plan.uid_mode = "capless" if (is_root or in_userns) else "none"
    elif is_root and not in_userns:
        plan.uid_mode = "drop"
    else:
        plan.uid_mode = "capless" if in_userns else "none"
        _off(layers, "unprivileged_user", not_root)

    if not cfg.get("uid_per_call", False):
        _off(layers, "uid_per_call")
        return None
    if plan.uid_mode != "drop":
        _off(
            layers,
            "uid_per_call",
            "needs root (calls do not change user id); RLIMIT_NPROC, signals and files are shared by concurrent calls",
        )
        return None
    try:
        uids.prepare_lock_dir(cfg["uid_lock_dir"])
        allocator = uids.UidAllocator(int(cfg["call_uid_first"]), int(cfg["call_uid_count"]), cfg["uid_lock_dir"])
    except (uids.UidRangeError, ValueError) as exc:
        _off(layers, "uid_per_call", f"{exc}; calls share uid {plan.uid} (RLIMIT_NPROC, signals, files)")
        return None
    plan.uid_per_call = True
    plan.uid = plan.gid = int(cfg["call_uid_first"])  # what the probe checks (readability of Python)
    return allocator


def _plan_mounts(cfg: dict, plan: CallPlan, layers: dict[str, LayerStatus], mounts_private: bool) -> None:
    """Decide the per-call mounts: a private ``/proc`` (needs the PID namespace layer) and a private
    ``/dev/shm`` of ``shm_mb`` MiB (needs root or a user namespace). Per-call mounts need a mount namespace per
    call (CAP_SYS_ADMIN), which the probe checks."""
    plan.shm_mb, plan.shm_inodes = int(cfg.get("shm_mb", 64)), int(cfg.get("shm_inodes", 4096))
    plan.inherit_private_mounts = mounts_private
    if not cfg.get("private_proc", False):
        _off(layers, "private_proc")
    elif not plan.pid_namespace:
        _off(layers, "private_proc", "needs the pid_namespace layer; calls see the host's /proc")
    else:
        plan.private_proc = True
    if not cfg.get("private_shm", False):
        _off(layers, "private_shm")
    elif plan.uid_mode == "none":
        _off(layers, "private_shm", "needs root or a user namespace")
    else:
        plan.private_shm = True


def _plan_read_grants(cfg: dict, plan: CallPlan, scratch_dir: str, in_userns: bool) -> None:
    """Decide what a call may read (Landlock's trees, ``plan.read_roots``/``list_roots``) and import
    (``plan.site_dirs``): the installation and system trees minus their package directories, the allowed
    packages' files, ``extra_read_paths``, ``readable_packages``, and the import guard a Python the call starts
    gets (``plan.child_site_dir``, written into ``scratch_dir``)."""
    # A call that runs as the host's own (non-root) user could read /proc/<pid>/environ of that user's
    # processes, the pool's included; Landlock then keeps the host's /proc out of its readable trees (a
    # private /proc is granted by the call itself, see enter_call).
    same_user_as_host = plan.uid_mode == "none" or in_userns
    system_roots = [
        p for p in landlock.SYSTEM_READ_ROOTS if os.path.isdir(p) and not (same_user_as_host and p == "/proc")
    ]
    # the installation and system trees minus their package directories, plus the allowed packages' files
    # (tirl.sandbox.packages: packages ship data, such as training sets with their answers)
    grants = packages.call_read_grants(
        landlock.python_read_roots() + system_roots,
        cfg.get("importable_packages", packages.ALL_PACKAGES),
        cfg.get("preload", ()),
    )
    plan.list_roots, plan.site_dirs, plan.missing_packages = grants.list_roots, grants.site_dirs, grants.missing
    plan.read_roots = (
        grants.file_roots
        + [os.path.realpath(p) for p in cfg.get("extra_read_paths", ()) if os.path.isdir(p)]
        + package_dirs(cfg.get("readable_packages", ()))
    )
    if plan.site_dirs:
        # a Python the call starts gets the same import guard as the call (a sitecustomize on its PYTHONPATH)
        plan.child_site_dir = packages.write_child_site(scratch_dir, plan.site_dirs, plan.read_roots)
        plan.read_roots.append(plan.child_site_dir)


def _prepare_seccomp(cfg: dict, plan: CallPlan, layers: dict[str, LayerStatus]) -> seccomp.PreparedFilter | None:
    """The seccomp filter the calls install (built once per worker); None when off or not available here."""
    if not cfg["seccomp"]:
        _off(layers, "seccomp")
        return None
    try:
        seccomp_filter = seccomp.PreparedFilter(seccomp.build_filter())
    except NotImplementedError as exc:
        _off(layers, "seccomp", str(exc))
        return None
    plan.seccomp = True
    return seccomp_filter


def _prepare_landlock(cfg: dict, plan: CallPlan, layers: dict[str, LayerStatus]) -> landlock.PreparedRules | None:
    """The Landlock rules over ``plan.read_roots``/``list_roots`` the calls restrict themselves to (one
    ``O_PATH`` descriptor per path, held for the worker's life; the soft ``RLIMIT_NOFILE`` is raised to make room
    for them); None when off or refused by the kernel (``plan.landlock_abi`` 0)."""
    if not cfg["landlock"]:
        _off(layers, "landlock")
        return None
    try:
        plan.landlock_abi = landlock.abi_version()
        # one O_PATH descriptor per granted path, held for the worker's life: room for them under a low
        # soft limit (1024 on many systems; the hard limit is usually far above)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = landlock.PREPARED_FD_BASE + len(plan.read_roots) + len(plan.list_roots) + 64
        if soft != resource.RLIM_INFINITY and soft < want:
            raised = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        return landlock.PreparedRules(plan.read_roots, abi=plan.landlock_abi, list_roots=plan.list_roots)
    except OSError as exc:
        plan.landlock_abi = 0
        _off(layers, "landlock", f"kernel refused: {exc.strerror}")
        return None


def _prepare_cgroup(cfg: dict, plan: CallPlan, layers: dict[str, LayerStatus], note: str) -> cgroup.CgroupLayer | None:
    """The cgroup layer (a cgroup per call under ``cgroup_parent``, ``slots_per_worker`` kept ready); None when
    off or when cgroups are absent or read-only here (the reason in ``layers``)."""
    if not cfg.get("cgroup", False):
        _off(layers, "cgroup")
        return None
    try:
        cgroups = cgroup.CgroupLayer.setup(cfg.get("cgroup_parent"), max_free=int(cfg["slots_per_worker"]))
    except cgroup.CgroupError as exc:
        _off(layers, "cgroup", f"{exc}{note}")
        return None
    except OSError as exc:  # pragma: no cover - /proc unreadable
        _off(layers, "cgroup", f"cannot read the cgroup mounts: {exc}")
        return None
    plan.cgroup = True
    return cgroups


def setup_worker(cfg: dict, scratch_dir: str) -> WorkerIsolation:
    """Apply the worker-wide layers to the calling (worker) process and plan the per-call ones.

    The steps, in this order (each records its layers' statuses): parent-death signal and child subreaper,
    the namespaces (:func:`_enter_worker_namespaces`), who a call runs as (:func:`_plan_identity`), its mounts
    (:func:`_plan_mounts`), what it may read and import (:func:`_plan_read_grants`), then the seccomp filter,
    the Landlock rules and the cgroup layer prepared once for every call.

    Args:
        cfg: :meth:`SandboxConfig.to_worker_dict` output.
        scratch_dir: an empty directory for this worker's call scratch directories (created if missing).

    Returns:
        The statuses of worker-wide layers and an unprobed :class:`CallPlan`.
    """
    layers: dict[str, LayerStatus] = {}
    _linux.set_parent_death_signal(signal.SIGKILL)
    _linux.set_child_subreaper()
    os.makedirs(scratch_dir, mode=0o711, exist_ok=True)
    host_uid = os.geteuid()  # before the user namespace: inside it the worker is uid 0
    ns = _enter_worker_namespaces(cfg, scratch_dir, layers)
    plan = CallPlan(
        pid_namespace=ns.pid_ns_fd is not None,
        uid=int(cfg["sandbox_uid"]),
        gid=int(cfg["sandbox_gid"]),
        nproc=int(cfg["nproc_limit"]),
        nofile=int(cfg["nofile_limit"]),
        fsize_mb=int(cfg["fsize_mb"]),
    )
    allocator = _plan_identity(cfg, plan, layers, host_uid, ns.in_userns)
    _plan_mounts(cfg, plan, layers, ns.mounts_private)
    _plan_read_grants(cfg, plan, scratch_dir, ns.in_userns)
    seccomp_filter = _prepare_seccomp(cfg, plan, layers)
    rules = _prepare_landlock(cfg, plan, layers)
    cgroups = _prepare_cgroup(cfg, plan, layers, ns.note)
    scratch_mb, scratch_inodes = int(cfg["scratch_mb"]), int(cfg.get("scratch_inodes", 65536))
    return WorkerIsolation(
        layers=layers,
        plan=plan,
        scratch_dir=scratch_dir,
        self_pid_ns_fd=ns.pid_ns_fd,
        seccomp_filter=seccomp_filter,
        landlock_rules=rules,
        cgroups=cgroups,
        uid_allocator=allocator,
        shared_uid=(int(cfg["sandbox_uid"]), int(cfg["sandbox_gid"])),
        call_scratch_tmpfs=(f"size={scratch_mb}m,nr_inodes={scratch_inodes},mode=0700" if ns.mounts_private else None),
    )


def package_dirs(names) -> list[str]:
    """Real paths of the directories of the packages ``names`` (found without importing them; a name that
    is not a package on this ``sys.path`` is skipped)."""
    import importlib.util

    dirs: list[str] = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for path in (spec.submodule_search_locations or []) if spec is not None else []:
            if os.path.isdir(path) and os.path.realpath(path) not in dirs:
                dirs.append(os.path.realpath(path))
    return dirs


def new_pid_namespace_for_children(self_pid_ns_fd: int) -> None:
    """Make the next child of this process the init of a fresh PID namespace.

    ``unshare(CLONE_NEWPID)`` only works while the caller's namespace for children is its own, so the
    worker first ``setns`` back to its own namespace (open at ``self_pid_ns_fd``).

    Raises:
        OSError: missing CAP_SYS_ADMIN, or PID namespaces not supported.
    """
    _linux.setns(self_pid_ns_fd, _linux.CLONE_NEWPID)
    _linux.unshare(_linux.CLONE_NEWPID)


def _python_readable_by(uid: int, gid: int) -> bool:
    """True when a process with ``uid``/``gid`` (no capabilities) can read the interpreter's stdlib."""
    stdlib = os.path.dirname(os.__file__)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            os.listdir(stdlib)
            with open(os.__file__, "rb"):
                code = 0
        except BaseException:
            pass
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def enter_call(
    plan: CallPlan,
    scratch_dir: str,
    env: dict[str, str],
    timeout_s: float,
    memory_mb: int,
    seccomp_filter: seccomp.PreparedFilter | None = None,
    landlock_rules: landlock.PreparedRules | None = None,
    call_cgroup: cgroup.CallCgroup | None = None,
    uid: int | None = None,
) -> None:
    """Apply the per-call layers to the calling process (a freshly forked call process). Irreversible.

    Order: the call's cgroup (first, so that everything after is counted in it); a fresh IPC namespace and,
    for the private ``/proc`` and ``/dev/shm``, a fresh mount namespace with those two mounts (all need
    CAP_SYS_ADMIN, so before the capabilities are dropped; the kernel objects and the tmpfs pages are
    charged to the call's cgroup); new session; resource limits; cwd = scratch; environment; no-new-privs;
    user id and capabilities; parent-death signal; Landlock; the descriptor limit (after Landlock, whose
    ruleset needs a descriptor above the worker's prepared ones); seccomp (last, so the set-up itself may use
    any call, and the code may not: it denies ``mount``, ``unshare`` and ``setns``).

    Args:
        plan: the probed plan of the worker.
        scratch_dir: the call's private directory (already owned by ``plan.uid`` in ``drop`` modes).
        env: the complete environment of the call.
        timeout_s: wall-clock limit of the call; the CPU limit is ``ceil(timeout_s) + 1`` seconds.
        memory_mb: address-space limit in MiB (whole process, including the preloaded modules).
        seccomp_filter, landlock_rules: the worker's prepared filter and rules (used when the plan says so).
        call_cgroup: the cgroup the worker made for this call (required when ``plan.cgroup``).
        uid: the uid (and gid) claimed for this call (``plan.uid_per_call``); None means ``plan.uid``.

    Raises:
        LayerError: a planned layer failed.
    """
    if plan.cgroup:
        if call_cgroup is None:
            raise LayerError("cgroup", "no cgroup was made for the call")
        try:
            call_cgroup.enter()
        except OSError as exc:
            raise LayerError("cgroup", f"cannot enter the call's cgroup: {exc}") from exc
    if plan.ipc_namespace:
        try:
            _linux.unshare(_linux.CLONE_NEWIPC)
        except OSError as exc:
            raise LayerError("ipc_namespace", f"unshare refused: {exc.strerror or exc}") from exc
    if plan.private_proc or plan.private_shm:
        _private_mounts(plan)
    os.setsid()
    if plan.rlimits:
        cpu = int(math.ceil(timeout_s)) + 1
        limits = [
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (memory_mb * 1024 * 1024,) * 2),
            (resource.RLIMIT_NPROC, (plan.nproc,) * 2),
            (resource.RLIMIT_FSIZE, (plan.fsize_mb * 1024 * 1024,) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        for which, value in limits:
            try:
                resource.setrlimit(which, value)
            except (OSError, ValueError) as exc:
                raise LayerError("rlimits", f"setrlimit {which}: {exc}") from exc
    os.chdir(scratch_dir)
    os.umask(0o077)
    environ = os.environ
    for key in [k for k in environ if k not in env]:
        del environ[key]
    for key, value in env.items():
        if environ.get(key) != value:
            environ[key] = value

    try:
        # No-new-privs first: no later execve (setuid binaries, file capabilities, even uid 0 running a
        # binary) can gain a capability, which makes dropping the bounding set unnecessary.
        _linux.set_no_new_privs()
        if plan.uid_mode in ("drop", "drop_keep_read"):
            call_uid, call_gid = (uid, uid) if uid is not None else (plan.uid, plan.gid)
            os.setgroups([])
            if plan.uid_mode == "drop_keep_read":
                _linux.prctl(_linux.PR_SET_KEEPCAPS, 1)
            os.setresgid(call_gid, call_gid, call_gid)
            os.setresuid(call_uid, call_uid, call_uid)  # clears every capability (unless keep-caps)
            if plan.uid_mode == "drop_keep_read":
                _linux.capset((_linux.CAP_DAC_READ_SEARCH,))
        elif plan.uid_mode == "capless":
            _linux.capset(())
    except OSError as exc:
        raise LayerError("unprivileged_user", f"dropping privileges failed: {exc}") from exc
    _linux.set_parent_death_signal(signal.SIGKILL)  # after the uid change, which clears it

    if plan.landlock_abi:
        if landlock_rules is None:
            raise LayerError("landlock", "no prepared rules")
        try:
            landlock_rules.restrict(
                scratch_dir,
                writable_dirs=("/dev/shm",) if plan.private_shm else (),
                readable_dirs=("/proc",) if plan.private_proc else (),
            )
        except OSError as exc:
            raise LayerError("landlock", str(exc)) from exc
        # This process's copies of the prepared descriptors (hundreds once the package directories are cut
        # out) are of no use once it is restricted: closed here, so that the descriptor limit below leaves it
        # room whatever numbers they had (the worker's copies stay). A review found the layer probe, which
        # does not close descriptors itself, failing on EMFILE under a hard limit of 4096 and Landlock then
        # switched off: the package data readable again.
        landlock_rules.close()
    if plan.rlimits:
        # after Landlock: the call's ruleset needs a descriptor of its own while the prepared ones are open
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (plan.nofile,) * 2)
        except (OSError, ValueError) as exc:
            raise LayerError("rlimits", f"setrlimit RLIMIT_NOFILE: {exc}") from exc
    if plan.seccomp:
        if seccomp_filter is None:
            raise LayerError("seccomp", "no prepared filter")
        try:
            seccomp_filter.install()
        except OSError as exc:
            raise LayerError("seccomp", str(exc)) from exc


def _private_mounts(plan: CallPlan) -> None:
    """In a fresh mount namespace (private propagation: inherited from the worker's, else set here), mount a ``/proc``
    of the calling process's PID namespace and a bounded tmpfs on ``/dev/shm``. Both vanish with the call's
    last process (its mount namespace dies with it).

    Raises:
        LayerError: ``private_proc`` or ``private_shm``, whichever step failed.
    """
    first = "private_proc" if plan.private_proc else "private_shm"
    try:
        _linux.unshare(_linux.CLONE_NEWNS)
        if not plan.inherit_private_mounts:
            # Copied mounts keep the host's (shared) propagation: without this, the mounts below would appear
            # on the host's /proc and /dev/shm too.
            _linux.mount(None, "/", None, _linux.MS_REC | _linux.MS_PRIVATE)
    except OSError as exc:
        raise LayerError(first, f"unshare(CLONE_NEWNS) refused: {exc.strerror or exc}") from exc
    if plan.private_proc:
        try:
            _linux.mount("proc", "/proc", "proc", _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC)
        except OSError as exc:
            raise LayerError("private_proc", f"mount proc: {exc.strerror or exc}") from exc
    if plan.private_shm:
        try:
            _linux.mount(
                "tmpfs",
                "/dev/shm",
                "tmpfs",
                _linux.MS_NOSUID | _linux.MS_NODEV,
                f"size={plan.shm_mb}m,nr_inodes={plan.shm_inodes},mode=1777",
            )
        except OSError as exc:
            raise LayerError("private_shm", f"mount tmpfs on /dev/shm: {exc.strerror or exc}") from exc


#: The project's source tree that the worker put on its ``sys.path`` (calls must not read it).
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _probe_child(
    iso: WorkerIsolation,
    scratch_dir: str,
    outside_dir: str,
    fd: int,
    probe_cgroup: cgroup.CallCgroup | None = None,
    uid: int | None = None,
) -> None:
    """Body of the probe process: apply the plan, test each layer, write a JSON report to ``fd``."""
    report: dict = {"failed": None, "checks": {}}
    try:
        enter_call(
            iso.plan,
            scratch_dir,
            call_env(dict(os.environ), scratch_dir, iso.plan.child_site_dir),
            5.0,
            1 << 16,
            iso.seccomp_filter,
            iso.landlock_rules,
            probe_cgroup,
            uid,
        )
    except LayerError as exc:
        report["failed"] = [exc.layer, str(exc)]
    else:
        checks = report["checks"]
        checks["uid"] = os.getuid()
        checks["pid"] = os.getpid()
        checks["ipc_ns"] = _ns_inode("ipc")
        try:
            checks["proc_pids"] = sorted(int(e) for e in os.listdir("/proc") if e.isdigit())
        except OSError as exc:
            checks["proc_pids"] = str(exc)
        try:
            with open("/dev/shm/probe", "w") as fh:
                fh.write("x")
            checks["shm_write"] = True
        except OSError:
            checks["shm_write"] = False
        try:
            os.listdir(SOURCE_ROOT)
            checks["source_denied"] = False
        except OSError:
            checks["source_denied"] = True
        if probe_cgroup is not None:
            checks["cgroup_dirs"] = len(probe_cgroup.dirs)
        try:
            with open(os.path.join(scratch_dir, "probe"), "w") as fh:
                fh.write("x")
            checks["scratch_write"] = True
        except OSError:
            checks["scratch_write"] = False
        try:
            with open(os.path.join(outside_dir, "probe"), "w") as fh:
                fh.write("x")
            checks["outside_write_denied"] = False
        except OSError:
            checks["outside_write_denied"] = True
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
            checks["inet_socket_denied"] = False
        except OSError:
            checks["inet_socket_denied"] = True
        try:
            os.listdir(os.path.dirname(os.__file__))
            checks["stdlib_readable"] = True
        except OSError:
            checks["stdlib_readable"] = False
    os.write(fd, json.dumps(report).encode())


def _ns_inode(kind: str) -> int | None:
    """Inode of this process's namespace of ``kind`` (``/proc/self/ns/<kind>``), None when unreadable."""
    try:
        return os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None


def probe_plan(iso: WorkerIsolation) -> None:
    """Fork test processes that apply the plan; switch off each layer that fails, and record statuses.

    Mutates ``iso.plan`` and ``iso.layers``. Runs at most one probe per layer that can fail.
    """
    plan = iso.plan
    if plan.uid_mode == "drop" and not _python_readable_by(plan.uid, plan.gid):
        plan.uid_mode = "drop_keep_read"
    notes: dict[str, str] = {}
    for _attempt in range(8):
        scratch = tempfile.mkdtemp(prefix="probe-", dir=iso.scratch_dir)
        outside = tempfile.mkdtemp(prefix="outside-", dir=iso.scratch_dir)
        os.chmod(outside, 0o777)  # so that only Landlock, not file permissions, can deny the write
        if plan.uid_mode.startswith("drop"):
            os.chown(scratch, plan.uid, plan.gid)
        keep_read_needs = plan.uid_mode == "drop_keep_read" and not (plan.landlock_abi and plan.seccomp)
        if keep_read_needs:
            # Keeping CAP_DAC_READ_SEARCH is only safe when Landlock confines reads and seccomp denies
            # open_by_handle_at; without them, stay root without capabilities instead.
            plan.uid_mode = "capless"
            notes["unprivileged_user"] = (
                f"the Python installation is not readable by uid {plan.uid} and Landlock/seccomp are not "
                "both active; calls run as uid 0 with every capability dropped"
            )
        probe_cgroup = None
        if plan.cgroup and iso.cgroups is not None:
            try:
                probe_cgroup = iso.cgroups.create(f"probe{_attempt}", 256 << 20, plan.nproc)
            except OSError as exc:
                _switch_cgroup_off(iso, f"cannot create a call's cgroup: {exc}")
        probe_uid = None
        if plan.uid_per_call and iso.uid_allocator is not None and plan.uid_mode.startswith("drop"):
            try:
                probe_uid = iso.uid_allocator.claim()
                os.chown(scratch, probe_uid, probe_uid)
            except (uids.UidRangeError, OSError) as exc:
                _switch_uid_per_call_off(iso, f"cannot claim a uid: {exc}")
        r, w = os.pipe()
        in_new_pid_ns = False
        if plan.pid_namespace and iso.self_pid_ns_fd is not None:
            try:  # like a call: the init of a fresh PID namespace (for the private /proc check)
                new_pid_namespace_for_children(iso.self_pid_ns_fd)
                in_new_pid_ns = True
            except OSError:
                pass
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                os.close(r)
                try:
                    _probe_child(iso, scratch, outside, w, probe_cgroup, probe_uid)
                finally:
                    os._exit(0)
        finally:
            if in_new_pid_ns:
                _linux.setns(iso.self_pid_ns_fd, _linux.CLONE_NEWPID)
        os.close(w)
        chunks = []
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
        os.close(r)
        os.waitpid(pid, 0)
        if probe_uid is not None and iso.uid_allocator is not None:
            iso.uid_allocator.release(probe_uid)
        if probe_cgroup is not None and not probe_cgroup.remove():
            probe_cgroup.kill()
            probe_cgroup.remove()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)
        try:
            report = json.loads(b"".join(chunks) or b"{}")
        except ValueError:
            report = {"failed": ["rlimits", "probe process crashed"]}
        failed = report.get("failed")
        if not failed:
            _record_plan_layers(iso, report.get("checks", {}), notes)
            return
        layer, message = failed
        notes[layer] = f"probe failed: {message}"
        if layer == "landlock":
            plan.landlock_abi = 0
        elif layer == "seccomp":
            plan.seccomp = False
        elif layer == "unprivileged_user":
            plan.uid_mode = "capless" if plan.uid_mode != "capless" else "none"
        elif layer == "rlimits":
            plan.rlimits = False
        elif layer == "cgroup":
            _switch_cgroup_off(iso, f"probe failed: {message}")
        elif layer == "ipc_namespace":
            plan.ipc_namespace = False
        elif layer == "private_proc":
            plan.private_proc = False
            iso.layers["private_proc"] = LayerStatus("private_proc", False, f"probe failed: {message}")
        elif layer == "private_shm":
            plan.private_shm = False
            iso.layers["private_shm"] = LayerStatus("private_shm", False, f"probe failed: {message}")
    raise RuntimeError(f"isolation probe kept failing: {notes}")  # pragma: no cover


def _switch_cgroup_off(iso: WorkerIsolation, reason: str) -> None:
    iso.plan.cgroup = False
    if iso.cgroups is not None:
        iso.cgroups.close()
        iso.cgroups = None
    iso.layers["cgroup"] = LayerStatus("cgroup", False, reason)


def _switch_uid_per_call_off(iso: WorkerIsolation, reason: str) -> None:
    iso.plan.uid_per_call = False
    iso.plan.uid, iso.plan.gid = iso.shared_uid
    if iso.uid_allocator is not None:
        iso.uid_allocator.close()
        iso.uid_allocator = None
    iso.layers["uid_per_call"] = LayerStatus("uid_per_call", False, reason)


def _record_plan_layers(iso: WorkerIsolation, checks: dict, notes: dict[str, str]) -> None:
    plan, layers = iso.plan, iso.layers
    if plan.uid_per_call:
        if plan.uid_mode.startswith("drop") and iso.uid_allocator is not None:
            layers["uid_per_call"] = LayerStatus(
                "uid_per_call",
                True,
                f"each running call has its own uid/gid from {iso.uid_allocator.first} to "
                f"{iso.uid_allocator.first + iso.uid_allocator.count - 1} (lock files in "
                f"{iso.uid_allocator.lock_dir}): RLIMIT_NPROC, signals and files are per call",
            )
        else:
            _switch_uid_per_call_off(iso, f"calls do not change user id (mode {plan.uid_mode})")
    if plan.private_proc:
        pids = checks.get("proc_pids")
        if pids == [checks.get("pid")]:
            layers["private_proc"] = LayerStatus(
                "private_proc", True, "fresh /proc per call (its own PID namespace): it sees its own processes only"
            )
        else:
            plan.private_proc = False
            layers["private_proc"] = LayerStatus("private_proc", False, f"probe: /proc showed {str(pids)[:200]}")
    if plan.private_shm:
        if checks.get("shm_write"):
            layers["private_shm"] = LayerStatus(
                "private_shm",
                True,
                f"fresh tmpfs on /dev/shm per call ({plan.shm_mb} MiB, {plan.shm_inodes} files, "
                "charged to its cgroup), gone with its last process: multiprocessing works",
            )
        else:
            plan.private_shm = False
            layers["private_shm"] = LayerStatus("private_shm", False, "probe: /dev/shm was not writable")
    if plan.cgroup and iso.cgroups is not None:
        if checks.get("cgroup_dirs"):
            layers["cgroup"] = LayerStatus("cgroup", True, iso.cgroups.describe())
        else:
            _switch_cgroup_off(iso, f"probe: the call was not in its cgroup ({checks})")
    if plan.ipc_namespace:
        own, the_calls = _ns_inode("ipc"), checks.get("ipc_ns")
        if own is not None and own == the_calls:
            plan.ipc_namespace = False
            layers["ipc_namespace"] = LayerStatus(
                "ipc_namespace", False, "probe: the call stayed in the worker's IPC namespace"
            )
        else:
            layers["ipc_namespace"] = LayerStatus(
                "ipc_namespace",
                True,
                "fresh IPC namespace per call: System V shared memory, semaphores and message queues and POSIX "
                "message queues it creates die with its last process",
            )
    elif "ipc_namespace" not in layers:
        layers["ipc_namespace"] = LayerStatus("ipc_namespace", False, notes.get("ipc_namespace", "off"))
    layers["rlimits"] = LayerStatus(
        "rlimits",
        plan.rlimits,
        f"CPU s = ceil(timeout)+1, address space = memory_mb, nproc {plan.nproc}, fsize {plan.fsize_mb} MiB, "
        f"nofile {plan.nofile}, no core files"
        if plan.rlimits
        else notes.get("rlimits", "off"),
    )
    if "unprivileged_user" not in layers or plan.uid_mode.startswith("drop"):
        who = "a uid of their own (see uid_per_call)" if plan.uid_per_call else f"uid {plan.uid}"
        if plan.uid_mode == "drop":
            layers["unprivileged_user"] = LayerStatus("unprivileged_user", True, f"calls run as {who}")
        elif plan.uid_mode == "drop_keep_read":
            layers["unprivileged_user"] = LayerStatus(
                "unprivileged_user",
                True,
                f"calls run as {who}; the Python installation is not readable by that uid, so reads "
                "use CAP_DAC_READ_SEARCH confined by Landlock to the Python and system directories",
            )
        else:
            layers["unprivileged_user"] = LayerStatus(
                "unprivileged_user", False, notes.get("unprivileged_user", f"calls run as uid {checks.get('uid')}")
            )
    cap_active = plan.uid_mode in ("drop", "drop_keep_read", "capless")
    layers["capabilities_dropped"] = LayerStatus(
        "capabilities_dropped",
        cap_active,
        {
            "drop": "no capabilities; no-new-privs, so no execve can gain any",
            "drop_keep_read": "only CAP_DAC_READ_SEARCH kept (see unprivileged_user); no-new-privs",
            "capless": "uid 0 but no capabilities; no-new-privs",
        }.get(plan.uid_mode, "not root: nothing to drop"),
    )
    if plan.landlock_abi:
        ok = checks.get("outside_write_denied") and checks.get("scratch_write")
        if ok:
            layers["landlock"] = LayerStatus(
                "landlock",
                True,
                f"ABI {plan.landlock_abi}: writes only in the scratch dir"
                + (" and /dev/shm" if plan.private_shm else "")
                + ", reads only Python and system dirs"
                + (f" (not the project's source tree {SOURCE_ROOT})" if checks.get("source_denied") else "")
                + (
                    "; of the installed packages only importable_packages, the preload's and what they require"
                    + (f" (not installed: {', '.join(plan.missing_packages)})" if plan.missing_packages else "")
                    if plan.list_roots
                    else "; every installed package readable"
                )
                + ("; TCP denied" if plan.landlock_abi >= 4 else "")
                + ("; signals and abstract sockets scoped to the call" if plan.landlock_abi >= 6 else ""),
            )
        else:
            plan.landlock_abi = 0
            layers["landlock"] = LayerStatus("landlock", False, f"probe: writes not confined ({checks})")
    elif "landlock" not in layers:
        layers["landlock"] = LayerStatus("landlock", False, notes.get("landlock", "off"))
    if plan.seccomp:
        if checks.get("inet_socket_denied"):
            layers["seccomp"] = LayerStatus(
                "seccomp",
                True,
                f"BPF filter: {len(seccomp.DENIED_SYSCALLS)} calls denied, sockets AF_UNIX only, no namespace creation",
            )
        else:
            plan.seccomp = False
            layers["seccomp"] = LayerStatus("seccomp", False, "probe: an AF_INET socket was not denied")
    elif "seccomp" not in layers:
        layers["seccomp"] = LayerStatus("seccomp", False, notes.get("seccomp", "off"))
    layers["scratch_dir"] = LayerStatus(
        "scratch_dir",
        bool(checks.get("scratch_write")),
        "private directory per call as cwd/HOME/TMPDIR, removed after the call",
    )
    layers["env_scrub"] = LayerStatus("env_scrub", True, "allowlisted environment (PATH, LANG, HOME, *_NUM_THREADS)")
    layers["blas_threads"] = LayerStatus("blas_threads", True, "OMP/OpenBLAS/MKL/... threads = 1 per call")


def output_cap_status(max_bytes: int, kill: bool) -> LayerStatus:
    """Status line of the output cap (always active)."""
    return LayerStatus(
        "output_cap",
        True,
        f"stdout and stderr capped at {max_bytes} bytes each while streaming"
        + (" (the call is killed past it)" if kill else " (the rest is read and discarded)"),
    )
