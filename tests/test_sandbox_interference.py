"""Calls isolated from each other and from the host (issue 13).

- Interference: a fork bomb, a thread bomb and a memory bomb, each running next to 50 ordinary calls
  (a thread, a subprocess, numpy) in the same pool and 50 more in a second pool in another process: every
  ordinary call answers ``ok`` with its own right output. With one shared uid, RLIMIT_NPROC (per uid) made
  the bomb's neighbours fail with BlockingIOError / "can't start new thread".
- A uid per running call (distinct for concurrent calls, from the configured range), released when the
  worker holding it is SIGKILLed.
- A private ``/proc`` (the call sees its own processes only), the project's source unreadable, a private
  bounded ``/dev/shm`` on which ``multiprocessing`` and ``ProcessPoolExecutor`` work.

Ordinary calls get generous timeouts: they must answer ok, not fast (the machine may be busy).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys

import pytest
import pytest_asyncio

from sandbox_helpers import layer_active
from tirl.sandbox import ExecutionRequest, LocalSandbox, isolation, uids

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="per-call uids and mounts need root (as on tirl's machines)"),
]

NPROC = 64
ORDINARY_TIMEOUT_S = 60.0
POOL_OPTIONS = dict(preload=("numpy",), nproc_limit=NPROC)

#: (code, expected stdout) of ordinary call ``i``: a thread, a subprocess, numpy.
ORDINARY = (
    (
        "import threading\nr = []\nt = threading.Thread(target=lambda: r.append({i} * 2))\nt.start(); t.join()\n"
        "print('thread', r[0])",
        "thread {twice}\n",
    ),
    (
        "import subprocess\nprint(subprocess.run(['echo', 'sub', '{i}'], capture_output=True, text=True, check=True)"
        ".stdout.strip())",
        "sub {i}\n",
    ),
    ("import numpy as np\nprint('numpy', int(np.arange({i} + 1).sum()))", "numpy {tri}\n"),
)


def ordinary(i: int) -> tuple[ExecutionRequest, str]:
    code, expected = ORDINARY[i % len(ORDINARY)]
    fields = {"i": i, "twice": 2 * i, "tri": i * (i + 1) // 2}
    return ExecutionRequest(code.format(**fields), timeout_s=ORDINARY_TIMEOUT_S), expected.format(**fields)


BOMBS = {
    "fork": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", 256),
    "thread": (
        "import threading, time\nwhile True:\n    try:\n"
        "        threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n"
        "    except RuntimeError:\n        pass",
        2048,
    ),  # room for the threads' stacks (address space)
    # The call's init keeps 4 processes allocating until the call's memory cgroup (or their address-space
    # limit) ends them, and replaces each one that dies, until the deadline.
    "memory": (
        "import os, time\ndef hog():\n    held = []\n    while True:\n        try:\n"
        "            held.append(bytearray(16 << 20))\n        except MemoryError:\n"
        "            time.sleep(0.01)\n"
        "kids = 0\nwhile True:\n    while kids < 4:\n        if os.fork() == 0:\n            hog()\n"
        "        kids += 1\n"
        "    os.wait()\n    kids -= 1",
        256,
    ),
}

#: The second pool: another process, same machine, same uid range. Prints "ready", then for every "go"
#: line runs 50 ordinary calls and prints their (status, stdout, expected) as one JSON line.
SECOND_POOL = """
import asyncio, json, sys
sys.path.insert(0, {tests!r})
from test_sandbox_interference import POOL_OPTIONS, ordinary
from tirl.sandbox import LocalSandbox

async def main():
    async with LocalSandbox(workers=1, slots_per_worker=4, **POOL_OPTIONS) as sb:
        await sb.start()
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "go":
            pairs = [ordinary(1000 + i) for i in range(50)]
            results = await sb.run_batch([p[0] for p in pairs])
            print(json.dumps([[r.status, r.stdout, p[1], r.stderr[-300:]] for r, p in zip(results, pairs)]),
                  flush=True)

asyncio.run(main())
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb():
    sandbox = LocalSandbox(workers=2, slots_per_worker=4, **POOL_OPTIONS)
    await sandbox.start()
    yield sandbox
    await sandbox.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def layers(sb):
    return await sb.layer_report()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def second_pool():
    src = isolation.SOURCE_ROOT
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SECOND_POOL.format(tests=os.path.dirname(os.path.abspath(__file__))),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": src},
    )
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert line.strip() == b"ready", line
    yield proc
    proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 20)
    except TimeoutError:
        proc.kill()
        await proc.wait()


@pytest.mark.parametrize("bomb", list(BOMBS))
async def test_ordinary_calls_next_to_a_bomb_all_answer_ok(sb, second_pool, layers, bomb):
    if not layer_active(layers, "uid_per_call"):
        pytest.skip("the uid_per_call layer is missing here (see tirl sandbox doctor)")
    code, memory_mb = BOMBS[bomb]
    bomb_task = asyncio.ensure_future(sb.run(ExecutionRequest(code, timeout_s=5, memory_mb=memory_mb)))
    await asyncio.sleep(1.0)  # the bomb is at its limits now
    assert not bomb_task.done(), bomb_task.result()
    second_pool.stdin.write(b"go\n")
    pairs = [ordinary(i) for i in range(50)]
    here = await sb.run_batch([p[0] for p in pairs])
    there = json.loads(await asyncio.wait_for(second_pool.stdout.readline(), 120))
    overlapped = not bomb_task.done()
    bomb_result = await bomb_task
    bad = [
        (r.status, r.stdout, want, r.stderr[-300:])
        for r, (_, want) in zip(here, pairs)
        if (r.status, r.stdout) != ("ok", want)
    ]
    bad += [row for row in there if (row[0], row[1]) != ("ok", row[2])]
    assert not bad, f"{len(bad)} of 100 ordinary calls failed next to the {bomb} bomb: {bad[:3]}"
    assert len(there) == 50
    assert bomb_result.status in ("timeout", "killed"), bomb_result
    assert overlapped or bomb_result.duration_s >= 4.5, "the ordinary calls did not run next to the bomb"


async def test_concurrent_calls_run_as_distinct_uids_of_the_range(sb, layers):
    if not layer_active(layers, "uid_per_call"):
        pytest.skip("the uid_per_call layer is missing here")
    code = "import os, time\ntime.sleep(0.5)\nprint(os.getuid(), os.getgid(), os.stat('.').st_uid)"
    results = await sb.run_batch([ExecutionRequest(code, timeout_s=30)] * 6)
    ids = [tuple(map(int, r.stdout.split())) for r in results]
    assert all(r.status == "ok" for r in results), results
    assert all(u == g == owner for u, g, owner in ids), ids  # its scratch dir is its own
    in_flight = [u for u, _, _ in ids]
    assert len(set(in_flight)) == 6, in_flight
    cfg = sb.config
    assert all(cfg.call_uid_first <= u < cfg.call_uid_first + cfg.call_uid_count for u in in_flight)


async def test_a_call_cannot_signal_a_concurrent_call(sb, layers):
    if not layer_active(layers, "uid_per_call"):
        pytest.skip("the uid_per_call layer is missing here")
    victim = ExecutionRequest("import time\ntime.sleep(1.5)\nprint('survived')", timeout_s=30)
    # Without a shared /proc or uid, the attacker can neither see nor signal the victim; try every pid.
    attacker = ExecutionRequest(
        "import os\nhits = 0\nfor pid in range(2, 5000):\n    try:\n        os.kill(pid, 9)\n        hits += 1\n"
        "    except OSError:\n        pass\nprint('hits', hits)",
        timeout_s=30,
    )
    victim_task = asyncio.ensure_future(sb.run(victim))
    await asyncio.sleep(0.3)
    att = await sb.run(attacker)
    vic = await victim_task
    assert (vic.status, vic.stdout) == ("ok", "survived\n"), vic
    assert (att.status, att.stdout) == ("ok", "hits 0\n"), att


def _held_by(pid: int) -> list[int]:
    """uids whose lock file names ``pid`` and is locked now."""
    held = []
    lock_dir = uids.DEFAULT_LOCK_DIR
    for name in os.listdir(lock_dir):
        path = os.path.join(lock_dir, name)
        try:
            with open(path) as fh:
                if fh.read().strip() != str(pid):
                    continue
        except OSError:
            continue
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            held.append(int(name))
        finally:
            os.close(fd)
    return held


async def test_a_killed_worker_releases_the_uids_of_its_calls():
    async with LocalSandbox(workers=1, preload=(), slots_per_worker=2) as pool:
        layers = await pool.layer_report()
        if not layer_active(layers, "uid_per_call") or pool.config.uid_lock_dir != uids.DEFAULT_LOCK_DIR:
            pytest.skip("the uid_per_call layer is missing here")
        worker = pool.worker_pids()[0]
        tasks = [
            asyncio.ensure_future(pool.run(ExecutionRequest("import time\ntime.sleep(60)", timeout_s=90)))
            for _ in range(2)
        ]
        for _ in range(200):
            held = _held_by(worker)
            if len(held) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(held) == 2, held
        os.kill(worker, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert [r.status for r in results] == ["internal", "internal"]
        # Each uid can be claimed again (after its dead call processes are gone: the file still names the
        # killed worker, so the claimer first checks that no process runs as the uid).
        freed = []
        for uid in held:
            alloc = uids.UidAllocator(uid, 1, uids.DEFAULT_LOCK_DIR)
            for _ in range(100):
                try:
                    freed.append(alloc.claim())
                    break
                except uids.UidRangeError:
                    await asyncio.sleep(0.05)
            alloc.close()
        assert freed == held
        assert (await pool.run(ExecutionRequest("print('next')", timeout_s=60))).stdout == "next\n"


async def test_proc_lists_only_the_calls_own_processes(sb, layers):
    if not layer_active(layers, "private_proc"):
        pytest.skip("the private_proc layer is missing here")
    code = (
        "import os, subprocess\np = subprocess.Popen(['sleep', '30'])\n"
        "pids = sorted(int(e) for e in os.listdir('/proc') if e.isdigit())\n"
        "print(pids == sorted([1, p.pid]), open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0] != b'')\n"
        "p.kill()"
    )
    r = await sb.run(ExecutionRequest(code, timeout_s=30))
    assert (r.status, r.stdout) == ("ok", "True True\n"), r
    host_pid = os.getpid()
    r = await sb.run(ExecutionRequest(f"import os\nprint(os.path.exists('/proc/{host_pid}'))", timeout_s=30))
    assert r.stdout == "False\n" or host_pid < 8, r


async def test_the_projects_source_is_not_readable(sb, layers):
    if not layer_active(layers, "landlock"):
        pytest.skip("the landlock layer is missing here")
    source = os.path.abspath(isolation.__file__)
    this_test = os.path.abspath(__file__)
    code = (
        "import os\nfor path in {paths!r}:\n    try:\n        open(path).read(1)\n        print('read', path)\n"
        "    except OSError as exc:\n        print('denied', exc.errno)\n"
        "try:\n    os.listdir({root!r})\n    print('listed')\n"
        "except OSError as exc:\n    print('denied', exc.errno)\n"
        "import sys\nprint(any(p.startswith({root!r}) for p in sys.path))"
    )
    r = await sb.run(ExecutionRequest(code.format(paths=[source, this_test], root=isolation.SOURCE_ROOT), timeout_s=30))
    assert r.status == "ok", r
    assert r.stdout == f"denied {errno.EACCES}\n" * 3 + "False\n", r.stdout
    # while the Python installation stays readable
    r = await sb.run(ExecutionRequest("import json, os\nprint(len(open(json.__file__).read()) > 0)", timeout_s=30))
    assert (r.status, r.stdout) == ("ok", "True\n"), r


PROCESS_POOL_SNIPPET = """from concurrent.futures import ProcessPoolExecutor
def inc(v): return v + 1
if __name__ == '__main__':
    with ProcessPoolExecutor(max_workers=2) as ex:
        print(list(ex.map(inc, [10, 20, 30])))   # expected: [11, 21, 31]
"""

MULTIPROCESSING = """import multiprocessing as mp
def square(v): return v * v
def put(q, lock, sem):
    with lock, sem:
        q.put('from child')
if __name__ == '__main__':
    q, lock, sem = mp.Queue(), mp.Lock(), mp.Semaphore(2)
    with mp.Pool(2) as pool:
        print(pool.map(square, range(5)))
    p = mp.Process(target=put, args=(q, lock, sem))
    p.start()
    print(q.get(timeout=20))
    p.join()
    print(p.exitcode)
"""


async def test_the_process_pool_snippet_prints_its_result(sb, layers):
    if not layer_active(layers, "private_shm"):
        pytest.skip("the private_shm layer is missing here")
    r = await sb.run(ExecutionRequest(PROCESS_POOL_SNIPPET, timeout_s=ORDINARY_TIMEOUT_S))
    assert (r.status, r.stdout) == ("ok", "[11, 21, 31]\n"), r


async def test_multiprocessing_pool_lock_queue_semaphore_work(sb, layers):
    if not layer_active(layers, "private_shm"):
        pytest.skip("the private_shm layer is missing here")
    r = await sb.run(ExecutionRequest(MULTIPROCESSING, timeout_s=ORDINARY_TIMEOUT_S))
    assert (r.status, r.stdout) == ("ok", "[0, 1, 4, 9, 16]\nfrom child\n0\n"), r


async def test_dev_shm_is_private_to_the_call_and_gone_after_it(sb, layers):
    if not layer_active(layers, "private_shm"):
        pytest.skip("the private_shm layer is missing here")
    name = f"tirl-test-{os.getpid()}"
    writer = ExecutionRequest(
        f"import time\nopen('/dev/shm/{name}', 'w').write('x')\ntime.sleep(1)\n"
        "import os\nprint(os.listdir('/dev/shm'))",
        timeout_s=30,
    )
    reader = ExecutionRequest("import os, time\ntime.sleep(0.3)\nprint(os.listdir('/dev/shm'))", timeout_s=30)
    w, r = await sb.run_batch([writer, reader])
    assert (w.status, w.stdout) == ("ok", f"['{name}']\n"), w
    assert (r.status, r.stdout) == ("ok", "[]\n"), r
    assert not os.path.exists(f"/dev/shm/{name}")  # not the host's /dev/shm
    again = await sb.run(ExecutionRequest("import os\nprint(os.listdir('/dev/shm'))", timeout_s=30))
    assert again.stdout == "[]\n", again


async def test_dev_shm_is_bounded(sb, layers):
    if not layer_active(layers, "private_shm"):
        pytest.skip("the private_shm layer is missing here")
    # Files of 8 MiB (under RLIMIT_FSIZE) until the tmpfs is full: at most shm_mb MiB in all.
    code = (
        "import errno\nn = 0\ntry:\n    for i in range(40):\n        with open(f'/dev/shm/f{{i}}', 'wb') as fh:\n"
        "            for _ in range(8):\n                fh.write(b'x' * (1 << 20))\n                fh.flush()\n"
        "                n += 1\nexcept OSError as exc:\n    print(errno.errorcode[exc.errno], n <= {mb})"
    )
    r = await sb.run(ExecutionRequest(code.format(mb=sb.config.shm_mb), timeout_s=30, memory_mb=1024))
    assert (r.status, r.stdout) == ("ok", "ENOSPC True\n"), r


async def test_getpass_works_for_a_uid_without_a_passwd_entry(sb):
    r = await sb.run(
        ExecutionRequest(
            "import getpass, os, pathlib\nprint(getpass.getuser(), pathlib.Path.home() == pathlib.Path(os.getcwd()))",
            timeout_s=30,
        )
    )
    assert (r.status, r.stdout) == ("ok", f"{isolation.CALL_USER_NAME} True\n"), r


async def test_the_answer_checker_still_imports_in_a_pool_that_did_not_preload_it(sb, layers):
    """``readable_packages`` (default tirl.reward, tirl.protocol) stay importable; the rest of tirl does not."""
    if not layer_active(layers, "landlock"):
        pytest.skip("the landlock layer is missing here")
    code = (
        "from tirl.reward.worker import main\nprint('imported', callable(main))\n"
        "import tirl.sandbox.pool as p\ntry:\n    open(p.__file__).read(1)\n"
        "except PermissionError:\n    print('denied')"
    )
    r = await sb.run(ExecutionRequest(code, timeout_s=ORDINARY_TIMEOUT_S))
    assert (r.status, r.stdout) == ("ok", "imported True\ndenied\n"), r


async def test_a_calls_mounts_never_reach_the_host_without_the_workers_mount_namespace(tmp_path):
    """Without the worker's private mount namespace, the call's copy of the host mounts must still be made
    private: a /proc or /dev/shm mounted there must not propagate to the host's. (It can only fail on a host
    whose mounts are shared, as under systemd; the development machines' are private already.)"""
    marker = f"/dev/shm/tirl-host-marker-{os.getpid()}"
    open(marker, "w").close()
    try:
        async with LocalSandbox(workers=1, preload=(), mount_namespace=False) as pool:
            layers = await pool.layer_report()
            if not (layer_active(layers, "private_proc") and layer_active(layers, "private_shm")):
                pytest.skip("the private_proc/private_shm layers are missing here")
            task = asyncio.ensure_future(
                pool.run(
                    ExecutionRequest(
                        "import os, time\nprint(os.listdir('/dev/shm'), sorted(int(p) for p in os.listdir('/proc') if "
                        "p.isdigit()))\ntime.sleep(1.5)",
                        timeout_s=30,
                    )
                )
            )
            await asyncio.sleep(0.8)  # the call is sleeping with its mounts in place
            host_view = (os.path.exists(marker), os.path.exists(f"/proc/{os.getpid()}"))
            r = await task
        assert host_view == (True, True)
        assert (r.status, r.stdout) == ("ok", "[] [1]\n"), r
    finally:
        os.unlink(marker)


async def test_more_calls_than_uids_answers_the_extra_call_internal_with_the_reason(tmp_path):
    """A range smaller than the calls running at once: the call that finds no free uid is not run as a
    shared uid (that would bring the interference back) but answered ``internal``, saying why."""
    os.chmod(tmp_path, 0o755)
    first = 1_950_000_000 + os.getpid() % 100_000  # a range no other pool uses
    async with LocalSandbox(
        workers=1,
        preload=(),
        slots_per_worker=2,
        call_uid_first=first,
        call_uid_count=1,
        uid_lock_dir=str(tmp_path / "uids"),
    ) as pool:
        if not layer_active(await pool.layer_report(), "uid_per_call"):
            pytest.skip("the uid_per_call layer is missing here")
        results = await pool.run_batch(
            [ExecutionRequest("import os, time\ntime.sleep(1)\nprint(os.getuid())", timeout_s=30)] * 2
        )
        after = await pool.run(ExecutionRequest("import os\nprint(os.getuid())", timeout_s=30))
    statuses = sorted(r.status for r in results)
    assert statuses == ["internal", "ok"], results
    failed = next(r for r in results if r.status == "internal")
    assert f"all 1 uids from {first} are held" in failed.stderr, failed.stderr
    assert next(r for r in results if r.status == "ok").stdout == f"{first}\n"
    assert (after.status, after.stdout) == ("ok", f"{first}\n")  # released and reused
