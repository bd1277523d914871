"""The isolation layers on their own (seccomp filter, Landlock rules, layer report), the runner's pure
helpers, and ``tirl sandbox doctor``."""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import tempfile
import traceback

import pytest
from typer.testing import CliRunner

from tirl.sandbox import LAYER_NAMES, LocalSandbox, _linux, isolation, landlock, runner, seccomp


def run_in_child(body) -> dict:
    """Fork, run ``body()`` (returning a JSON-able dict) in the child, return that dict."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        try:
            out = body()
        except BaseException as exc:  # noqa: BLE001
            out = {"crash": f"{type(exc).__name__}: {exc}", "tb": traceback.format_exc()}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def errno_of(fn) -> int:
    try:
        fn()
    except OSError as exc:
        return exc.errno
    return 0


def test_seccomp_program_is_well_formed():
    if _linux.syscall_table() is None:
        pytest.skip("no syscall table for this architecture")
    program = seccomp.build_filter()
    assert len(program) % 8 == 0 and len(program) // 8 < 256
    code, jt, jf, k = struct.unpack_from("<HBBI", program, 0)
    assert (code, k) == (0x20, 4)  # first instruction loads seccomp_data.arch
    last = struct.unpack_from("<HBBI", program, len(program) - 8)
    assert last[3] == 0x80000000  # the wrong-architecture exit kills the process


def test_seccomp_filter_policy_in_a_child():
    if _linux.syscall_table() is None:
        pytest.skip("no syscall table for this architecture")
    program = seccomp.build_filter()

    def body():
        _linux.set_no_new_privs()
        seccomp.PreparedFilter(program).install()
        import subprocess

        a, b = socket.socketpair()
        a.close(), b.close()
        return {
            "inet": errno_of(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
            "inet6": errno_of(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)),
            "unix": errno_of(lambda: socket.socket(socket.AF_UNIX).close()),
            "unshare": errno_of(lambda: _linux.unshare(_linux.CLONE_NEWUSER)),
            "unshare_ipc": errno_of(lambda: _linux.unshare(_linux.CLONE_NEWIPC)),
            "mount": errno_of(lambda: _linux.mount("tmpfs", "/mnt", "tmpfs", 0)),
            "subprocess": subprocess.run(["true"]).returncode,  # clone3 falls back to a plain clone
        }

    out = run_in_child(body)
    assert "crash" not in out, out
    assert out == {
        "inet": errno.EPERM,
        "inet6": errno.EPERM,
        "unix": 0,
        "unshare": errno.EPERM,
        "unshare_ipc": errno.EPERM,
        "mount": errno.EPERM,
        "subprocess": 0,
    }


def test_landlock_confines_writes_and_reads_in_a_child():
    try:
        abi = landlock.abi_version()
    except OSError:
        pytest.skip("Landlock is not available on this kernel")
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as other:
        with open(os.path.join(other, "secret"), "w") as fh:
            fh.write("s")

        def body():
            landlock.restrict(scratch, landlock.python_read_roots(), abi=abi)
            with open(os.path.join(scratch, "ok.txt"), "w") as fh:
                fh.write("fine")
            import json as _json  # noqa: F401 - imports still work

            return {
                "write_other": errno_of(lambda: open(os.path.join(other, "new"), "w")),
                "read_other": errno_of(lambda: open(os.path.join(other, "secret")).read()),
                "read_scratch": open(os.path.join(scratch, "ok.txt")).read(),
                "devnull": errno_of(lambda: open(os.devnull, "w").write("x")),
            }

        out = run_in_child(body)
        assert out == {"write_other": errno.EACCES, "read_other": errno.EACCES, "read_scratch": "fine", "devnull": 0}
        assert not os.path.exists(os.path.join(other, "new"))


@pytest.mark.parametrize("refused", [False, True])
def test_ipc_namespace_probe_degrades_with_the_reason(tmp_path, monkeypatch, refused):
    real_unshare = _linux.unshare

    def unshare(flags: int) -> None:
        if refused and flags & _linux.CLONE_NEWIPC:
            raise OSError(errno.EPERM, "unshare: Operation not permitted")
        real_unshare(flags)

    monkeypatch.setattr(_linux, "unshare", unshare)  # inherited by the probe's fork
    iso = isolation.WorkerIsolation(layers={}, plan=isolation.CallPlan(ipc_namespace=True), scratch_dir=str(tmp_path))
    isolation.probe_plan(iso)  # applies the plan in a forked probe process, as a worker does
    layer = iso.layers["ipc_namespace"]
    if refused:
        assert (iso.plan.ipc_namespace, layer.active) == (False, False)
        assert "probe failed" in layer.detail and "unshare refused" in layer.detail, layer
    elif os.geteuid() != 0:
        pytest.skip("unshare(CLONE_NEWIPC) needs CAP_SYS_ADMIN")
    else:
        assert (iso.plan.ipc_namespace, layer.active) == (True, True), layer
    assert iso.layers["rlimits"].active  # the other layers are unaffected


def test_a_worker_in_a_user_namespace_names_the_uid_it_was_started_as(tmp_path):
    """A worker started as a user (uid 1000 here, faked) that enters a user namespace is uid 0 inside it; who
    a call runs as, and the layer report's line, are decided by the uid it was started as."""
    from tirl.sandbox.config import SandboxConfig

    def body() -> dict:
        euid = {"now": 1000}

        def enter_user_namespace() -> None:
            euid["now"] = 0  # what geteuid answers inside the namespace (uid_map "0 <uid> 1")

        os.geteuid = lambda: euid["now"]  # in this forked child only
        isolation._enter_user_namespace = enter_user_namespace
        cfg = SandboxConfig(workers=1, preload=(), cgroup=False).to_worker_dict()
        iso = isolation.setup_worker(cfg, str(tmp_path / "scratch"))
        return {"mode": iso.plan.uid_mode, "detail": iso.layers["unprivileged_user"].detail}

    out = run_in_child(body)
    assert out.get("mode") == "capless", out
    assert "calls run as the invoking user (uid 1000)" in out["detail"], out


async def test_layer_report_names_every_layer_with_a_reason():
    async with LocalSandbox(workers=1, preload=()) as sb:
        layers = await sb.layer_report()
    assert [layer["name"] for layer in layers] == list(LAYER_NAMES)
    assert all(isinstance(layer["active"], bool) and layer["detail"] for layer in layers)


async def test_layers_switched_off_are_reported_and_others_stay_on():
    async with LocalSandbox(workers=1, preload=(), seccomp=False, landlock=False) as sb:
        layers = {layer["name"]: layer for layer in await sb.layer_report()}
    assert layers["seccomp"] == {"name": "seccomp", "active": False, "detail": "switched off in the configuration"}
    assert layers["landlock"]["active"] is False
    assert layers["output_cap"]["active"] and layers["env_scrub"]["active"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the full set of layers needs root (as on tirl's machines)")
async def test_all_layers_active_when_root_and_kernel_allow():
    async with LocalSandbox(workers=1, preload=()) as sb:
        info = await sb.worker_info()
    missing = {layer["name"]: layer["detail"] for layer in info["layers"] if not layer["active"]}
    # On a root machine only a kernel without Landlock/seccomp/namespaces, or cgroups that are absent or
    # read-only (containers), can explain a missing layer (test_sandbox_cgroup checks the cgroup case).
    allowed = {"landlock", "seccomp", "network_namespace", "pid_namespace", "mount_namespace", "cgroup"}
    assert set(missing) <= allowed, missing


# ----- runner helpers (no processes) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "silent"),
    [
        ("x;", True),
        ("x ;  # c", True),
        ("x", False),
        ("x  # ;", False),
        ("s = ';'\ns", False),
        ("f(\n  1);", True),
        ("print(1)\n\n", False),
        ("x = (1;", False),
    ],
)
def test_ends_with_semicolon(code, silent):
    assert runner.ends_with_semicolon(code) is silent


def test_format_user_traceback_drops_library_frames():
    src = "import json\ndef f():\n    json.loads('{')\nf()"
    try:
        exec(compile(src, runner.FILENAME, "exec"), {})
    except ValueError as exc:
        text = runner.format_user_traceback(exc)
    lines = text.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert [line.strip() for line in lines if line.strip().startswith("File")] == [
        'File "<code>", line 4, in <module>',
        'File "<code>", line 3, in f',
    ]
    assert lines[-1].startswith("json.decoder.JSONDecodeError: Expecting property name")


def test_format_user_traceback_cuts_the_middle_of_huge_messages():
    try:
        exec(compile("raise ValueError('v' * 100000)", runner.FILENAME, "exec"), {})
    except ValueError as exc:
        text = runner.format_user_traceback(exc)
    assert len(text) < runner.MAX_TRACEBACK_CHARS + 100
    assert "characters cut" in text and text.startswith("Traceback")


def test_doctor_cli_reports_layers_and_probes_as_json():
    from tirl.cli.main import app

    result = CliRunner().invoke(app, ["sandbox", "doctor", "--json", "--trivial-calls", "0", "--preload", ""])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [layer["name"] for layer in report["layers"]] == list(LAYER_NAMES)
    probes = {p["name"]: p for p in report["probes"]}
    assert len(probes) == 13 and all(p["detail"] for p in probes.values())
    active = {layer["name"] for layer in report["layers"] if layer["active"]}
    if "seccomp" in active or "network_namespace" in active:
        assert probes["tcp connect to 127.0.0.1"]["held"]
    assert probes["read a host environment variable"]["held"]
    if "pid_namespace" in active:
        assert probes["double-fork ignoring SIGTERM past the deadline"]["held"]
    if "cgroup" in active:
        assert probes["4 processes of 128 MiB under memory_mb=384"]["held"], probes
    if "ipc_namespace" in active:
        assert probes["System V shm segment left by a call"]["held"], probes
    for layer, probe in (
        ("private_proc", "list /proc (only the call's own pids)"),
        ("landlock", "read the project's source"),
        ("landlock", "read an installed package outside importable_packages"),
        ("private_shm", "ProcessPoolExecutor (needs /dev/shm)"),
        ("uid_per_call", "two concurrent calls run as different uids"),
        ("seccomp", "connect to a host Unix socket"),
    ):
        if layer in active:
            assert probes[probe]["held"], (probe, probes[probe])
    assert probes["memory scan for the previous call's code, stdin, output"]["held"], probes  # no layer needed
    assert report["all_active"] == (
        all(layer["active"] for layer in report["layers"]) and all(p["held"] for p in report["probes"])
    )
