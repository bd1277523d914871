"""``tirl sandbox doctor``: which isolation layers are active on this machine, and do they hold?

Starts a one-worker :class:`~tirl.sandbox.pool.LocalSandbox`, reads the layer report of its worker (each
layer active, or why not), then runs a few hostile probes through it and checks the outcome: a TCP
connect to 127.0.0.1, a write outside the scratch directory, reading a secret from the host environment,
a double-forked child that ignores SIGTERM and outlives the deadline, four processes that together pass
the call's memory limit (killed only by the ``cgroup`` layer), a System V shared memory segment that must
not outlive the call (gone only with the ``ipc_namespace`` layer; a leftover is reported, then removed),
a listing of ``/proc`` (only the call's own pid with ``private_proc``), a read of tirl's own source (denied
by Landlock), a read of a module of an installed package that ``importable_packages`` does not allow
(denied by Landlock: packages ship data), ``ProcessPoolExecutor`` (needs ``private_shm``), two concurrent
calls' uids (different with
``uid_per_call``), a connect to a world-writable listening Unix socket of the host (denied by ``seccomp``)
and a scan of a call's own memory for the code, stdin and output of the call before it (nothing found: the
worker never holds a call's data).
It also times trivial calls. It does not change any setting; it only reports.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field

from tirl.sandbox import isolation, packages
from tirl.sandbox.config import SandboxConfig
from tirl.sandbox.pool import LocalSandbox
from tirl.sandbox.types import ExecutionRequest


@dataclass
class ProbeOutcome:
    """One hostile probe: what was tried, whether the sandbox held, and what it answered."""

    name: str
    held: bool
    detail: str


@dataclass
class DoctorReport:
    """Everything ``tirl sandbox doctor`` prints."""

    layers: list[dict]
    probes: list[ProbeOutcome]
    preload: dict[str, str]
    python: str
    trivial_p50_ms: float | None
    error: str | None = None
    plan: dict = field(default_factory=dict)

    @property
    def all_active(self) -> bool:
        """True when every layer is active and every probe held."""
        return self.error is None and all(layer["active"] for layer in self.layers) and all(p.held for p in self.probes)

    def to_dict(self) -> dict:
        """JSON-serialisable form."""
        data = asdict(self)
        data["all_active"] = self.all_active
        return data


def _process_with_marker(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (scans /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def host_shm_ids(key: int) -> list[int]:
    """Ids of the System V shared memory segments with ``key`` in this process's IPC namespace."""
    try:
        with open("/proc/sysvipc/shm") as fh:
            rows = [line.split() for line in fh.readlines()[1:]]
    except OSError:
        return []
    return [int(row[1]) for row in rows if len(row) > 1 and int(row[0]) == key]


def _remove_shm(shmid: int) -> None:
    """``shmctl(shmid, IPC_RMID)``: delete a segment a call left behind (best effort)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmctl(ctypes.c_int(shmid), ctypes.c_int(0), None)


#: Code of the IPC probe: a 1 MiB System V shared memory segment with key ``{key}``, created and left.
SHM_PROBE = (
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]\n"
    "shmid = libc.shmget({key}, 1 << 20, 0o1000 | 0o600)\n"
    "print('created' if shmid >= 0 else 'refused', ctypes.get_errno())"
)


#: The process-pool snippet of issue 13 (fails with PermissionError without a writable /dev/shm).
PROCESS_POOL_PROBE = (
    "from concurrent.futures import ProcessPoolExecutor\ndef inc(v): return v + 1\n"
    "if __name__ == '__main__':\n    with ProcessPoolExecutor(max_workers=2) as ex:\n"
    "        print(list(ex.map(inc, [10, 20, 30])))"
)


#: Scans the call's own readable anonymous, [heap], [stack] and writable mappings (``/proc/self/maps`` and
#: ``/proc/self/mem``) for ``TIRLDOC`` and 12 hex digits; prints how many distinct such markers it found.
MEMORY_SCAN_PROBE = r"""
import re
pattern = re.compile(rb"TIRLDOC[0-9a-f]{12}")
found = set()
with open("/proc/self/maps") as fh:
    maps = fh.read().splitlines()
with open("/proc/self/mem", "rb", buffering=0) as mem:
    for line in maps:
        parts = line.split()
        perms, path = parts[1], (parts[5] if len(parts) > 5 else "")
        if "r" not in perms or path in ("[vvar]", "[vsyscall]", "[vdso]", "[vvar_vclock]"):
            continue
        if path and not path.startswith("[") and "w" not in perms:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        try:
            mem.seek(lo)
            found.update(pattern.findall(mem.read(hi - lo)))
        except (OSError, OverflowError, ValueError):
            continue
print(len(found))
"""


async def _secrets_probe(sb: LocalSandbox) -> ProbeOutcome:
    """A call with a marker in its code, its stdin and its output, then a memory scan by the next call."""
    marker = "TIRLDOC" + uuid.uuid4().hex[:12]
    half = len(marker) // 2
    code = f"x = {marker!r}\ny = input()\nprint({marker[:half]!r} + {marker[half:]!r}, len(x + y))"
    first = await sb.run(ExecutionRequest(code, stdin=marker + "\n", timeout_s=10))
    scans = [await sb.run(ExecutionRequest(MEMORY_SCAN_PROBE, timeout_s=30)) for _ in range(2)]
    held = first.status == "ok" and all(r.status == "ok" and r.stdout.strip() == "0" for r in scans)
    return ProbeOutcome(
        "memory scan for the previous call's code, stdin, output",
        held,
        "markers found: " + ", ".join(r.stdout.strip() or r.status for r in scans),
    )


async def _unix_socket_probe(sb: LocalSandbox) -> ProbeOutcome:
    """A connect from a call to a world-writable listening Unix socket of the host (in a temporary directory)."""
    root = tempfile.mkdtemp(prefix="tirl-doctor-")
    path = os.path.join(root, "host.sock")
    listener = socket.socket(socket.AF_UNIX)
    try:
        os.chmod(root, 0o755)
        listener.bind(path)
        os.chmod(path, 0o777)
        listener.listen(1)
        listener.setblocking(False)
        code = (
            f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(2)\ns.connect({path!r})\n"
            "print('connected')"
        )
        result = await sb.run(ExecutionRequest(code, timeout_s=10))
        try:
            listener.accept()[0].close()
            reached = True
        except BlockingIOError:
            reached = False
    finally:
        listener.close()
        shutil.rmtree(root, ignore_errors=True)
    return ProbeOutcome(
        "connect to a host Unix socket",
        result.status == "error" and not reached,
        f"{result.status}: {result.error_type or result.stdout.strip()}; host socket reached: {reached}",
    )


def _installed_package_outcome(importable: tuple[str, ...], path: str | None, result) -> ProbeOutcome:
    name = "read an installed package outside importable_packages"
    if packages.ALL_PACKAGES in importable:
        return ProbeOutcome(name, False, "importable_packages is '*': every installed package (and its data) readable")
    if path is None:
        return ProbeOutcome(name, True, "every installed package is allowed: nothing to probe")
    held = result.status == "error" and result.error_type == "PermissionError"
    return ProbeOutcome(name, held, f"{result.status}: {result.error_type or result.stdout.strip()[:60]} ({path})")


async def _probes(sb: LocalSandbox, secret_name: str) -> list[ProbeOutcome]:
    outside = f"/tmp/tirl-doctor-{uuid.uuid4().hex}"
    marker = str(900_000_000 + uuid.uuid4().int % 99_999_999)
    shm_key = 0x71000000 + uuid.uuid4().int % 0x00FFFFFF
    escape = (
        "import os, signal, time, subprocess\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"        subprocess.Popen(['sleep', '{marker}'])\n"
        "        time.sleep(1000)\n"
        "    os._exit(0)\n"
        "time.sleep(1000)\n"
    )
    requests = [
        ExecutionRequest("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)", timeout_s=5),
        ExecutionRequest(f"open({outside!r}, 'w').write('x')", timeout_s=5),
        ExecutionRequest(f"import os\nprint(os.environ.get({secret_name!r}))", timeout_s=5),
        ExecutionRequest(escape, timeout_s=1.5),
        # Four processes of 128 MiB each, 512 MiB together; each stays under its 384 MiB of address space
        # (a worker with numpy, scipy and sympy preloaded has about 190 MiB).
        ExecutionRequest(
            "import os, time\nkids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
            "        block = b'x' * (128 << 20)\n        time.sleep(0.5)\n        os._exit(0)\n"
            "    kids.append(pid)\nfor pid in kids:\n    os.waitpid(pid, 0)",
            timeout_s=10,
            memory_mb=384,
        ),
        ExecutionRequest(SHM_PROBE.format(key=shm_key), timeout_s=5),
    ]
    net, write, env, kill, memory, shm = await sb.run_batch(requests)
    await asyncio.sleep(0.2)
    survivors = _process_with_marker(marker)
    shm_left = host_shm_ids(shm_key)
    for shmid in shm_left:
        _remove_shm(shmid)
    written = os.path.exists(outside)
    if written:
        os.unlink(outside)
    source = os.path.abspath(isolation.__file__)
    # a module of an installed package that the pool's importable_packages do not allow (packages ship data:
    # training sets with their answers, tirl.sandbox.packages)
    installed = packages.unreadable_sample(sb.config.importable_packages, sb.config.preload)
    uid_code = "import os, time\ntime.sleep(0.3)\nprint(os.getuid())"
    proc, src, pool, pkg = await sb.run_batch(
        [
            ExecutionRequest(
                "import os\nprint(sorted(int(e) for e in os.listdir('/proc') if e.isdigit()))", timeout_s=5
            ),
            ExecutionRequest(f"print(open({source!r}).read(40))", timeout_s=5),
            ExecutionRequest(PROCESS_POOL_PROBE, timeout_s=30),
            ExecutionRequest(f"print(open({installed!r}).read(40))" if installed else "print('none')", timeout_s=5),
        ]
    )
    # Alone in the pool, so that both run at once (a worker runs at least 2 calls at a time by default).
    uid_a, uid_b = await sb.run_batch([ExecutionRequest(uid_code, timeout_s=5)] * 2)
    unix = await _unix_socket_probe(sb)
    secrets = await _secrets_probe(sb)
    return [
        ProbeOutcome(
            "tcp connect to 127.0.0.1",
            net.status == "error",
            f"{net.status}: {net.error_type or ''} {(net.traceback or '').strip().splitlines()[-1:]}",
        ),
        ProbeOutcome(
            "write outside the scratch dir",
            write.status == "error" and not written,
            f"{write.status}: {write.error_type}; file created on host: {written}",
        ),
        ProbeOutcome(
            "read a host environment variable",
            env.status == "ok" and env.stdout.strip() == "None",
            f"{env.status}: printed {env.stdout.strip()!r}",
        ),
        ProbeOutcome(
            "double-fork ignoring SIGTERM past the deadline",
            kill.status == "timeout" and not survivors,
            f"{kill.status}; processes left on the host: {survivors or 'none'}",
        ),
        ProbeOutcome(
            "4 processes of 128 MiB under memory_mb=384",
            memory.status == "killed" and "memory cgroup" in memory.stderr,
            f"{memory.status}: {(memory.stderr.strip().splitlines() or [''])[-1]}",
        ),
        ProbeOutcome(
            "System V shm segment left by a call",
            shm.status == "ok" and not shm_left,
            f"{shm.status}: {shm.stdout.strip() or shm.stderr.strip()[-200:]}; segments left on the host: "
            f"{len(shm_left) or 'none'}" + (" (removed)" if shm_left else ""),
        ),
        ProbeOutcome(
            "list /proc (only the call's own pids)",
            proc.status == "ok" and proc.stdout == "[1]\n",
            f"{proc.status}: {proc.stdout.strip()[:120] or proc.stderr.strip()[-120:]}",
        ),
        ProbeOutcome(
            "read the project's source",
            src.status == "error" and src.error_type == "PermissionError",
            f"{src.status}: {src.error_type or src.stdout.strip()[:60]}",
        ),
        _installed_package_outcome(sb.config.importable_packages, installed, pkg),
        ProbeOutcome(
            "ProcessPoolExecutor (needs /dev/shm)",
            pool.status == "ok" and pool.stdout == "[11, 21, 31]\n",
            f"{pool.status}: {pool.stdout.strip() or (pool.error_type or '') + ' ' + pool.stderr.strip()[-120:]}",
        ),
        ProbeOutcome(
            "two concurrent calls run as different uids",
            uid_a.status == uid_b.status == "ok" and uid_a.stdout != uid_b.stdout,
            f"uids {uid_a.stdout.strip() or uid_a.status} and {uid_b.stdout.strip() or uid_b.status}",
        ),
        unix,
        secrets,
    ]


async def collect_report(config: SandboxConfig | None = None, trivial_calls: int = 20) -> DoctorReport:
    """Start a one-worker pool with ``config``, probe it, and return the report (never raises).

    Args:
        config: pool settings (default: :class:`SandboxConfig` defaults); ``workers`` is forced to 1.
        trivial_calls: how many ``print(1)`` calls to time for the latency line (0 to skip).
    """
    secret_name = "TIRL_DOCTOR_SECRET"
    os.environ[secret_name] = uuid.uuid4().hex
    sb = LocalSandbox(workers=1, config=config or SandboxConfig())
    try:
        try:
            info = await sb.worker_info()
        except RuntimeError as exc:
            return DoctorReport(layers=[], probes=[], preload={}, python="", trivial_p50_ms=None, error=str(exc))
        probes = await _probes(sb, secret_name)
        p50 = None
        if trivial_calls > 0:
            times = []
            for _ in range(trivial_calls):
                t0 = time.perf_counter()
                await sb.run(ExecutionRequest("print(1)"))
                times.append(time.perf_counter() - t0)
            p50 = round(statistics.median(times) * 1000, 2)
        return DoctorReport(
            layers=info.get("layers", []),
            probes=probes,
            preload=info.get("preload", {}),
            python=info.get("python", ""),
            trivial_p50_ms=p50,
            plan=info.get("plan", {}),
        )
    finally:
        os.environ.pop(secret_name, None)
        await sb.aclose()


def render(report: DoctorReport) -> None:
    """Print ``report`` as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if report.error:
        console.print(f"[bold red]The sandbox could not start:[/] {report.error}")
        return
    layers = Table(title="Isolation layers", show_lines=False)
    layers.add_column("layer")
    layers.add_column("state")
    layers.add_column("detail", overflow="fold")
    for layer in report.layers:
        state = "[green]active[/]" if layer["active"] else "[yellow]missing[/]"
        layers.add_row(layer["name"], state, layer["detail"])
    console.print(layers)
    probes = Table(title="Hostile probes")
    probes.add_column("probe")
    probes.add_column("held")
    probes.add_column("answer", overflow="fold")
    for probe in report.probes:
        probes.add_row(probe.name, "[green]yes[/]" if probe.held else "[red]NO[/]", probe.detail)
    console.print(probes)
    preload = ", ".join(f"{k} ({'ok' if v == 'ok' else v})" for k, v in report.preload.items()) or "none"
    console.print(f"Python {report.python}; preloaded: {preload}")
    if report.trivial_p50_ms is not None:
        console.print(f"print(1) latency p50: {report.trivial_p50_ms} ms (one worker, sequential)")
    verdict = (
        "[green]all layers active, all probes held[/]"
        if report.all_active
        else "[yellow]some layers are missing or a probe did not hold (see above)[/]"
    )
    console.print(verdict)
