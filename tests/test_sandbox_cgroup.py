"""The per-call cgroup layer (issue 3): one call's processes together cannot pass its memory or pids limit.

Parsing and the cgroup v2 paths run on texts and a fake cgroup tree (no kernel needed); the rest runs real
pools and adapts where the machine has no writable memory controller (the layer is then reported missing,
which is checked too).
"""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from sandbox_helpers import assert_follow_up_ok, no_descendants_soon
from tirl.sandbox import ExecutionRequest, LocalSandbox, cgroup

LIGHT = {"preload": ()}  # workers without numpy/scipy/sympy start in a fraction of a second

V1_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_PROC_CGROUP = "8:pids:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n"


def expect_active() -> str | None:
    """Why the cgroup layer must be active here (root, a memory controller we can write), or None."""
    if os.geteuid() != 0:
        return None
    try:
        hierarchies = cgroup.locate()
    except (cgroup.CgroupError, OSError):
        return None
    memory = next(h for h in hierarchies if "memory" in h.controllers)
    if memory.version != 1 or not os.access(memory.base, os.W_OK):
        return None  # v2 needs a delegated cgroup (cgroup_parent); not set up by the tests
    return memory.base


def call_cgroup_dirs(proc_cgroup_text: str) -> list[str]:
    """Host directories of the cgroups a call printed from its /proc/self/cgroup."""
    own_v1, _ = cgroup.parse_proc_cgroup(proc_cgroup_text)
    with open("/proc/self/mountinfo") as fh:
        mounts = cgroup.parse_mountinfo(fh.read())
    dirs = []
    for mountpoint, root, fstype, opts in mounts:
        for name in ("memory", "pids"):
            if fstype == "cgroup" and name in opts and "/tirl-w" in own_v1.get(name, ""):
                dirs.append(cgroup._join(mountpoint, root, own_v1[name]))
    return dirs


needs_layer = pytest.mark.skipif(
    expect_active() is None, reason="no writable cgroup v1 memory controller as root on this machine"
)

# ----- parsing and the v2 paths (no kernel) -----------------------------------------------------------


def test_parse_mountinfo_and_proc_cgroup():
    mounts = cgroup.parse_mountinfo(V1_MOUNTINFO + "50 31 0:40 / /mnt/a\\040b rw - cgroup cgroup rw,cpu\n")
    assert ("/sys/fs/cgroup/memory", "/", "cgroup", {"rw", "memory"}) in mounts
    assert ("/mnt/a b", "/", "cgroup", {"rw", "cpu"}) in mounts  # octal escapes undone
    assert all(m[2] != "tmpfs" for m in mounts)
    v1, v2 = cgroup.parse_proc_cgroup(V1_PROC_CGROUP + "3:cpu,cpuacct:/x\n")
    assert v1["memory"] == "/process_api/abc" and v1["pids"] == "/" and v1["cpuacct"] == "/x"
    assert v2 == "/"


def test_locate_v1_uses_the_own_cgroup_or_the_configured_parent():
    hs = cgroup.locate(None, V1_MOUNTINFO, V1_PROC_CGROUP)
    assert [(h.version, h.controllers, h.base) for h in hs] == [
        (1, ("memory",), "/sys/fs/cgroup/memory/process_api/abc"),
        (1, ("pids",), "/sys/fs/cgroup/pids"),
    ]
    hs = cgroup.locate("tirl/", V1_MOUNTINFO, V1_PROC_CGROUP)
    assert [h.base for h in hs] == ["/sys/fs/cgroup/memory/tirl", "/sys/fs/cgroup/pids/tirl"]
    comounted = "35 31 0:32 / /sys/fs/cgroup/memory,pids rw - cgroup cgroup rw,memory,pids\n"
    hs = cgroup.locate(None, comounted, "4:memory,pids:/a\n")
    assert [(h.controllers, h.base) for h in hs] == [(("memory", "pids"), "/sys/fs/cgroup/memory,pids/a")]


def test_locate_without_a_usable_memory_controller_says_why():
    with pytest.raises(cgroup.CgroupError, match="no memory controller"):
        cgroup.locate(None, "39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n", "8:pids:/\n")
    # A container's mount that shows another part of the hierarchy than the process's cgroup.
    foreign = "35 31 0:32 /docker/x /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    with pytest.raises(cgroup.CgroupError):
        cgroup.locate(None, foreign, "4:memory:/other\n")
    assert cgroup._join("/m", "/docker/x", "/docker/x/sub") == "/m/sub"


V2_FILES = {
    "cgroup.procs": "",
    "cgroup.controllers": "memory pids",
    "cgroup.subtree_control": "",
    "memory.max": "max",
    "memory.swap.max": "max",
    "memory.events": "oom 0\noom_kill 0\n",
    "pids.max": "max",
    "memory.current": "0",
}


@pytest.fixture
def fake_v2(tmp_path, monkeypatch):
    """A cgroup2 'mount' at tmp_path: mkdir creates the kernel's files, rmdir removes them (as cgroupfs)."""
    real_mkdir, real_rmdir = os.mkdir, os.rmdir

    def mkdir(path, mode=0o777, *a, **kw):
        real_mkdir(path, mode, *a, **kw)
        if str(path).startswith(str(tmp_path)):
            for name, text in V2_FILES.items():
                (tmp_path / path / name).write_text(text)

    def rmdir(path, *a, **kw):
        if str(path).startswith(str(tmp_path)) and not kw:
            if any(os.path.isdir(os.path.join(path, n)) for n in os.listdir(path)):
                raise OSError(errno.EBUSY, "busy")
            shutil.rmtree(path)
        else:
            real_rmdir(path, *a, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "rmdir", rmdir)
    for name, text in V2_FILES.items():
        (tmp_path / name).write_text(text)
    mountinfo = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n"
    return tmp_path, mountinfo


def test_v2_layer_enables_controllers_sets_limits_and_counts_oom_kills(fake_v2):
    root, mountinfo = fake_v2
    layer = cgroup.CgroupLayer.setup(None, mountinfo=mountinfo, proc_cgroup="0::/\n")
    (h,) = layer.hierarchies
    assert (h.version, h.controllers, h.base) == (2, ("memory", "pids"), str(root))
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids"  # children get the controllers
    assert os.path.basename(h.root).startswith("tirl-w")
    assert "v2 memory = memory_mb, no swap" in layer.describe()
    call = layer.create("c1", 300 << 20, 64)
    cdir = os.path.join(h.root, "c1")
    assert call.dirs == [cdir]
    assert open(os.path.join(cdir, "memory.max")).read() == str(300 << 20)
    assert open(os.path.join(cdir, "memory.swap.max")).read() == "0"
    assert open(os.path.join(cdir, "pids.max")).read() == "64"
    assert call.oom_kills() == 0
    with open(os.path.join(cdir, "memory.events"), "w") as fh:
        fh.write("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert call.oom_kills() == 2
    # Given back empty and with little charged: the next call reuses it, with its own limit and OOM count.
    assert layer.release(call, empty=True) and os.path.isdir(cdir)
    again = layer.acquire(200 << 20, 64)
    assert again is call and again.oom_kills() == 0
    assert open(os.path.join(cdir, "memory.max")).read() == str(200 << 20)
    with open(os.path.join(cdir, "memory.current"), "w") as fh:
        fh.write(str(64 << 20))  # e.g. a SysV shared memory segment the call left behind
    assert layer.release(again, empty=True) and not os.path.exists(cdir)  # removed, not reused
    fresh = layer.acquire(100 << 20, 64)
    (fresh_dir,) = fresh.dirs
    assert fresh_dir != cdir
    assert layer.release(fresh, empty=False) and not os.path.exists(fresh_dir)  # processes may be left: removed
    layer.close()
    assert not os.path.exists(h.root)


def test_v2_cgroup_holding_processes_is_reported_with_the_remedy(fake_v2, monkeypatch):
    root, mountinfo = fake_v2
    real_write = cgroup._write

    def write(path, value):
        if path.endswith("cgroup.subtree_control"):
            raise OSError(errno.EBUSY, "Device or resource busy")
        real_write(path, value)

    monkeypatch.setattr(cgroup, "_write", write)
    with pytest.raises(cgroup.CgroupError, match="no-internal-process rule.*cgroup_parent"):
        cgroup.CgroupLayer.setup(None, mountinfo=mountinfo, proc_cgroup="0::/\n")
    assert [p.name for p in root.iterdir() if p.is_dir()] == []  # nothing left behind


def test_pids_hierarchy_that_cannot_be_used_is_left_out_with_the_reason(tmp_path, monkeypatch):
    # Hybrid machine: memory on v1 (here a plain directory standing in for it), pids on a v2 tree whose
    # cgroup holds processes. The layer keeps memory and says why pids is missing.
    mem = tmp_path / "memory"
    (mem / "a").mkdir(parents=True)
    for name in ("memory.limit_in_bytes", "memory.oom_control", "memory.usage_in_bytes", "cgroup.procs"):
        (mem / "a" / name).write_text("")
    unified = tmp_path / "unified"
    (unified / "a").mkdir(parents=True)
    (unified / "a" / "cgroup.controllers").write_text("pids")
    (unified / "a" / "cgroup.subtree_control").write_text("")
    real_write = cgroup._write

    def write(path, value):
        if path.endswith("cgroup.subtree_control"):
            raise OSError(errno.EBUSY, "Device or resource busy")
        real_write(path, value)

    monkeypatch.setattr(cgroup, "_write", write)
    mountinfo = f"35 31 0:32 / {mem} rw - cgroup cgroup rw,memory\n41 31 0:38 / {unified} rw - cgroup2 cgroup2 rw\n"
    layer = cgroup.CgroupLayer.setup(None, mountinfo=mountinfo, proc_cgroup="4:memory:/a\n0::/a\n")
    assert [(h.version, h.controllers) for h in layer.hierarchies] == [(1, ("memory",))]
    text = layer.describe()
    assert "no pids controller" in text and "pids not used: cgroup v2" in text and "no-internal-process" in text
    layer.close()
    assert sorted(p.name for p in (mem / "a").iterdir() if p.is_dir()) == []


# ----- real pools -------------------------------------------------------------------------------------

PRINT_CGROUP = "print(open('/proc/self/cgroup').read(), flush=True)\n"


def procs_in(dirs: list[str]) -> list[str]:
    out = []
    for d in dirs:
        with open(os.path.join(d, "cgroup.procs")) as fh:
            out += fh.read().split()
    return out


@needs_layer
async def test_call_runs_in_its_own_cgroup_with_the_request_limits_emptied_after_it():
    code = PRINT_CGROUP + (
        "import re\ntext = open('/proc/self/cgroup').read()\n"
        "mem = re.search(r':memory:(.*)', text).group(1)\npids = re.search(r':pids:(.*)', text).group(1)\n"
        "print(open('/sys/fs/cgroup/memory' + mem + '/memory.limit_in_bytes').read().strip())\n"
        "print(open('/sys/fs/cgroup/pids' + pids + '/pids.max').read().strip())"
    )
    async with LocalSandbox(workers=1, slots_per_worker=2, nproc_limit=48, **LIGHT) as sb:
        layers = {layer["name"]: layer for layer in await sb.layer_report()}
        assert layers["cgroup"]["active"], layers["cgroup"]
        assert "memory+swap = memory_mb" in layers["cgroup"]["detail"]
        # Two at once: two cgroups. Then one after another, lowering and raising the limit of a reused one.
        r1, r2 = await sb.run_batch([ExecutionRequest(code, memory_mb=300), ExecutionRequest(code, memory_mb=200)])
        r3 = await sb.run(ExecutionRequest(code, memory_mb=100))
        r4 = await sb.run(ExecutionRequest(code, memory_mb=400))
        results = [r1, r2, r3, r4]
        assert all(r.status == "ok" for r in results), results
        limits = [int(r.stdout.split()[-2]) >> 20 for r in results]
        assert limits == [300, 200, 100, 400] and {r.stdout.split()[-1] for r in results} == {"48"}
        dirs = [call_cgroup_dirs(r.stdout) for r in results]
        assert all(len(d) == 2 for d in dirs)  # memory and pids
        assert set(dirs[0]).isdisjoint(dirs[1])  # concurrent calls never share one
        assert dirs[3] in dirs[:3]  # an emptied cgroup is reused
        assert all(procs_in(d) == [] for d in dirs)  # nothing of a call is left in it once answered
        worker_dirs = {os.path.dirname(d) for d in dirs[0]}
    assert not any(os.path.exists(d) for d in worker_dirs)  # removed with the worker


@needs_layer
async def test_processes_that_together_pass_the_memory_limit_are_killed_and_the_host_is_unaffected():
    # Eight processes of 64 MiB each: every one is far under RLIMIT_AS (256 MiB), their sum is not.
    code = PRINT_CGROUP + (
        "import os, time\nkids = []\nfor _ in range(8):\n    pid = os.fork()\n    if pid == 0:\n"
        "        block = b'\\x01' * (64 << 20)\n        time.sleep(1)\n        os._exit(0)\n    kids.append(pid)\n"
        "print([os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids])"
    )
    async with LocalSandbox(workers=1, slots_per_worker=1, **LIGHT) as sb:
        pids = sb.worker_pids()
        r = await sb.run(ExecutionRequest(code, memory_mb=256, timeout_s=20))
        assert r.status == "killed", r
        assert "memory limit (256 MiB, memory cgroup)" in r.stderr and "OOM killer ended" in r.stderr, r.stderr
        assert r.stderr.rstrip().splitlines()[-1].startswith("tirl-sandbox: killed:")
        statuses = eval(r.stdout.strip().splitlines()[-1])  # the parent outlived its killed children
        assert -9 in statuses and len(statuses) == 8
        assert sb.worker_pids() == pids
        assert await no_descendants_soon(sb) == []
        await assert_follow_up_ok(sb)
        assert procs_in(call_cgroup_dirs(r.stdout)) == []
        # The same processes under a limit that fits their sum, in the same (reused) cgroup: the earlier OOM
        # kills are not counted again.
        ok = await sb.run(ExecutionRequest(code.replace("range(8)", "range(2)"), memory_mb=512, timeout_s=20))
        assert ok.status == "ok" and "[0, 0]" in ok.stdout, ok
        assert call_cgroup_dirs(ok.stdout) == call_cgroup_dirs(r.stdout)


async def test_switched_off_layer_is_reported_and_calls_run_outside_any_call_cgroup():
    async with LocalSandbox(workers=1, cgroup=False, **LIGHT) as sb:
        layers = {layer["name"]: layer for layer in await sb.layer_report()}
        r = await sb.run(ExecutionRequest(PRINT_CGROUP))
    assert layers["cgroup"] == {"name": "cgroup", "active": False, "detail": "switched off in the configuration"}
    assert r.status == "ok" and "tirl-w" not in r.stdout


async def test_unusable_cgroup_parent_degrades_with_the_reason():
    async with LocalSandbox(workers=1, cgroup_parent="tirl-test-absent/below", **LIGHT) as sb:
        layers = {layer["name"]: layer for layer in await sb.layer_report()}
        r = await sb.run(ExecutionRequest("print(6 * 7)"))
    assert not layers["cgroup"]["active"]
    assert layers["cgroup"]["detail"]  # the reason: no such directory, read-only, no memory controller...
    if expect_active():
        detail = layers["cgroup"]["detail"]
        assert "cannot create a cgroup in" in detail and "tirl-test-absent" in detail
    assert (r.status, r.stdout) == ("ok", "42\n")


@needs_layer
def test_directories_of_a_killed_worker_are_removed_by_the_next_one():
    base = expect_active()
    stale_pid = os.fork()
    if stale_pid == 0:  # pragma: no cover - child
        os._exit(0)
    os.waitpid(stale_pid, 0)  # a pid that no longer runs: a worker killed before its clean-up
    stale = os.path.join(base, f"{cgroup._worker_prefix()}{stale_pid}")
    os.makedirs(os.path.join(stale, "c7"))
    layer = cgroup.CgroupLayer.setup()
    try:
        assert not os.path.exists(stale)
        assert all(os.path.isdir(h.root) for h in layer.hierarchies)
    finally:
        layer.close()
    assert not any(os.path.exists(h.root) for h in layer.hierarchies)
