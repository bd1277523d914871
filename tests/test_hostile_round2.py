"""Hostile probes of the issue-23 fixes, round 2: the policy as an adversary of the sandbox and the parsers.

Each test is an attack as a model would write it. Those that broke the code they were written against
(each named in its docstring) now fail to exploit; the rest held and stay as cheap regression tests.

Broke, fixed here:

* a call's bytes reached the worker's heap, and so every later call's memory, by two routes the first fix
  missed: the **signal pipe** (descriptor 4, which the worker read with ``os.read``) and the **names of the
  files a call leaves in its scratch directory** (which the worker listed to remove them);
* a **result record nested deeper than ``json`` decodes** (``os.write(3, b"[" * 100000)``) raised
  ``RecursionError`` in the pool, which killed the worker and answered its concurrent calls ``internal``;
* the **draft scan** (``<think>`` with many tool-call blocks) was quadratic in the turn's length.

Broke, left (``xfail(strict=True)``: the day it holds, the marker must go):

* **abstract Unix socket names** of concurrent calls of one worker are visible in ``/proc/net/unix`` (the
  worker's network namespace is shared by its calls): a covert channel between calls that both cooperate;
* **call-chosen metadata** (an output's byte total, the exit code) passes through the worker's heap in its
  ``done`` frame to later calls: a channel of a few dozen bits per call, again between cooperating calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

import pytest

from tirl.protocol.config import ProtocolConfig
from tirl.protocol.formats import get_format
from tirl.protocol.parse import draft_spans, parse_tool_calls
from tirl.protocol.types import ToolCall, ToolCallError
from tirl.sandbox import ExecutionRequest, LocalSandbox

needs_mem = pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs /proc/self/mem")


def _scan_code() -> str:
    from test_sandbox_secrets import SCAN

    return SCAN


async def _scan(sb: LocalSandbox) -> list[str]:
    result = await sb.run(ExecutionRequest(_scan_code(), timeout_s=60))
    assert result.status == "ok", result.stderr
    return json.loads(result.stdout)


# ----- a call's bytes must not reach the worker (and so later calls) -----------------------------------------


@needs_mem
async def test_signal_pipe_bytes_never_reach_later_calls():
    """Broke: a call wrote ``QSIGN5555`` to descriptor 4 (the signal-note pipe, meant for the SIGABRT
    handler); the worker read it into its heap and the next call's memory scan printed ``["QSIGN5555"]``.
    ``os.abort()`` is still reported as SIGABRT."""
    async with LocalSandbox(workers=1, preload=()) as sb:
        wrote = await sb.run(ExecutionRequest("import os\nos.write(4, b'QSIG' + b'N5555')\nprint('w')"))
        assert wrote.status == "ok", wrote.stderr
        assert await _scan(sb) == []
        aborted = await sb.run(ExecutionRequest("import os\nos.abort()"))
        assert aborted.exit_code == -6 and "SIGABRT" in aborted.stderr, aborted
        noted = await sb.run(ExecutionRequest("import os, signal\nos.write(4, bytes([signal.SIGABRT]) * 64)"))
        assert noted.status == "ok" and noted.exit_code == 0, noted  # a note without a death names nothing


@needs_mem
async def test_scratch_file_names_never_reach_later_calls():
    """Broke: a call named 300 files (and two nested directories) after its data in its scratch directory; the
    worker listed them to remove them, and the next call's scan found ``QFILE0000``... in its memory. The
    directory is still removed (the next call starts in an empty one)."""
    code = (
        "import os\nfor i in range(300):\n    open('QFIL' + 'E%04d' % i + 'x' * 200, 'w').close()\n"
        "os.makedirs('QDIR' + 'A7777/QDIR' + 'B8888')\nprint(len(os.listdir('.')))"
    )
    async with LocalSandbox(workers=1, preload=()) as sb:
        made = await sb.run(ExecutionRequest(code))
        assert made.status == "ok" and made.stdout.strip() == "301", made
        assert await _scan(sb) == []
        fresh = await sb.run(ExecutionRequest("import os\nprint(os.listdir('.'))"))
        assert fresh.stdout.strip() == "[]", fresh


@pytest.mark.parametrize("use_rm", [True, False])
def test_scratch_removal_without_rm_or_with_it(tmp_path, monkeypatch, use_rm):
    """The remover of a non-empty scratch directory (``rm -rf``, or the worker's fork where ``rm`` is missing)
    removes nested, unreadable and link-holding trees, and never follows a link out of the directory."""
    from tirl.sandbox import worker

    if not use_rm:
        monkeypatch.setattr(worker, "_RM", None)
    elif worker._RM is None:
        pytest.skip("no rm on this machine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    scratch = tmp_path / "c1"
    deep = scratch.joinpath(*["d"] * 300)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    (scratch / "link").symlink_to(outside, target_is_directory=True)
    (scratch / "locked").mkdir()
    (scratch / "locked" / "g").write_text("x")
    os.chmod(scratch / "locked", 0)
    worker._remove_tree(str(scratch))
    assert not scratch.exists()
    assert (outside / "keep").read_text() == "x"
    empty = tmp_path / "c2"
    empty.mkdir()
    worker._remove_tree(str(empty))
    worker._remove_tree(str(empty))  # already gone: nothing to do, no error
    assert not empty.exists()


async def test_deep_result_record_fails_only_its_own_call():
    """Broke: ``os.write(3, b"[" * 100000)`` (the runner's result descriptor) made the pool's ``json`` raise
    ``RecursionError``; the pool treated it as a corrupt worker, killed it, and a concurrent call of the same
    worker was answered ``internal``. Now the record is ignored (as any record the code wrote itself)."""
    async with LocalSandbox(workers=1, slots_per_worker=2, preload=()) as sb:
        pids = sb.worker_pids()
        sibling = asyncio.ensure_future(
            sb.run(ExecutionRequest("import time\ntime.sleep(1.5)\nprint('sibling done')", timeout_s=30))
        )
        await asyncio.sleep(0.3)
        deep = await sb.run(ExecutionRequest("import os\nos.write(3, b'[' * 100000)\nos._exit(0)"))
        assert deep.status == "ok", deep.stderr
        done = await sibling
        assert done.status == "ok" and done.stdout == "sibling done\n", done
        assert sb.worker_pids() == pids


# ----- routes out of the call that held ---------------------------------------------------------------------

#: Every probe prints its name and what it got; the test asserts each was refused.
_ESCAPES = r"""
import ctypes, errno, json, os, socket
got = {"fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))[:-1]}  # the last: the listing's own
libc = ctypes.CDLL(None, use_errno=True)
def sys_(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    got[name] = "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
import platform
if platform.machine() == "x86_64":
    sys_("ptrace", 101, 0, 0, 0, 0)
    sys_("process_vm_readv", 310, 1, 0, 0, 0, 0, 0)
    sys_("io_uring_setup", 425, 8, ctypes.byref(ctypes.create_string_buffer(120)))
    sys_("unshare_user", 272, 0x10000000)
    sys_("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
    sys_("setns", 308, 0, 0)
    sys_("open_tree", 428, -100, ctypes.c_char_p(b"/"), 1)
    sys_("x32_socket", 0x40000000 | 41, 2, 1, 0)
    sys_("pidfd_getfd_of_init", 438, libc.syscall(434, 1, 0), 0, 0)  # pid 1 is the call itself: its fd 0
    got["pidfd_getfd_of_init"] = "own" if got["pidfd_getfd_of_init"] == "ok" else got["pidfd_getfd_of_init"]
for name, fam, ty in [("inet", socket.AF_INET, socket.SOCK_STREAM), ("inet6", socket.AF_INET6, socket.SOCK_DGRAM),
                      ("netlink", socket.AF_NETLINK, socket.SOCK_RAW), ("packet", socket.AF_PACKET, socket.SOCK_RAW),
                      ("vsock", socket.AF_VSOCK, socket.SOCK_STREAM), ("unix_dgram", socket.AF_UNIX, socket.SOCK_DGRAM),
                      ("unix_raw", socket.AF_UNIX, 3)]:
    try:
        socket.socket(fam, ty).close()
        got["socket_" + name] = "ok"
    except OSError as exc:
        got["socket_" + name] = errno.errorcode.get(exc.errno, str(exc.errno))
for name, ty in [("seqpacket", socket.SOCK_SEQPACKET), ("stream", socket.SOCK_STREAM)]:
    s = socket.socket(socket.AF_UNIX, ty)
    try:
        s.sendto(b"x", "/dev/log")  # an address without connect()
        got["sendto_" + name] = "ok"
    except OSError as exc:
        got["sendto_" + name] = errno.errorcode.get(exc.errno, str(exc.errno))
try:
    a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    a.bind("\0tirl-round2-own")
    a.listen(1)
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect("\0tirl-round2-own")
    got["connect_abstract"] = "ok"
except OSError as exc:
    got["connect_abstract"] = errno.errorcode.get(exc.errno, str(exc.errno))
for path in ("/proc/1/root/etc/hostname", "/etc/shadow", "/run", "/dev/shm/..", "/tmp"):
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
        got["read_" + path] = "ok"
    except OSError as exc:
        got["read_" + path] = errno.errorcode.get(exc.errno, str(exc.errno))
got["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps(got))
"""


async def test_escape_routes_are_refused():
    """Held: ptrace, ``process_vm_readv``, ``io_uring``, namespace calls, the new mount API, x32 syscalls,
    every socket family but local streams, ``sendto`` with an address, ``connect`` to an abstract socket
    (even the call's own), the host's root through ``/proc/1/root``; the call holds descriptors 0-4 only and
    sees only its own processes (``pidfd_getfd`` of PID 1 is the call's own descriptor)."""
    async with LocalSandbox(workers=1, preload=()) as sb:
        layers = {layer["name"]: layer["active"] for layer in await sb.layer_report()}
        result = await sb.run(ExecutionRequest(_ESCAPES, timeout_s=30))
    assert result.status == "ok", result.stderr
    got = json.loads(result.stdout)
    if layers.get("seccomp"):
        refused = {k: v for k, v in got.items() if k not in ("fds", "pids", "pidfd_getfd_of_init")}
        assert all(v != "ok" for v in refused.values()), got
    assert got["fds"] == [0, 1, 2, 3, 4], got
    if layers.get("private_proc"):
        assert got["pids"] == [1], got
    assert got.get("pidfd_getfd_of_init", "own") != "ok", got


async def test_odd_code_and_stdin_are_answered():
    """Held: 0-byte code, NUL bytes, lone surrogates in code and stdin, invalid UTF-8 printed, a 4 MiB stdin
    and 40 calls at once on one worker are each answered (never ``internal``), in order."""
    odd = [
        ExecutionRequest(""),
        ExecutionRequest("x = 1\x00\nprint(x)"),
        ExecutionRequest("print('\ud800')"),
        ExecutionRequest("\ud800"),
        ExecutionRequest("import sys\nprint(len(sys.stdin.read()))", stdin="a\ud800b\x00"),
        ExecutionRequest("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\x00ok')"),
        ExecutionRequest("import sys\nprint(len(sys.stdin.read()))", stdin="y" * (4 << 20)),
    ]
    async with LocalSandbox(workers=1, preload=()) as sb:
        results = await sb.run_batch(odd + [ExecutionRequest(f"print({i})") for i in range(40)])
    assert [r.status for r in results[:7]] == ["ok", "error", "error", "error", "ok", "ok", "ok"], results[:7]
    assert results[4].stdout == "4\n" and results[5].stdout == "\ufffd\ufffd\x00ok"
    assert results[6].stdout == f"{4 << 20}\n"
    assert [r.stdout for r in results[7:]] == [f"{i}\n" for i in range(40)]


_ABSTRACT_A = r"""
import socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0QABS" + "9999-secret-of-call-a")
s.listen(1)
deadline = time.monotonic() + 20
while time.monotonic() < deadline and "QACK" not in open("/proc/net/unix").read():
    time.sleep(0.02)
"""
_ABSTRACT_B = r"""
import socket, time
seen = ""
deadline = time.monotonic() + 15
while time.monotonic() < deadline and "QABS" not in seen:
    seen = open("/proc/net/unix").read()
    time.sleep(0.02)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0QACK")
print("secret-of-call-a" in seen)
time.sleep(0.3)
"""


@pytest.mark.xfail(
    strict=True,
    reason="calls of one worker share its network namespace: abstract socket names "
    "are visible to concurrent calls (docs/sandbox.md, What a call can read)",
)
async def test_abstract_socket_names_are_not_a_channel():
    """Broke, left: two concurrent calls of one worker; A binds an abstract socket named after its data, B
    reads ``/proc/net/unix`` and prints whether it saw it (it did). ``connect`` is refused, so nothing reaches
    the socket; the name alone is the channel (both calls must cooperate). A per-call network namespace
    would close it, at a cost measured here of about 1.8 ms of CPU per call (200 forks that exit: 0.75-0.95 ms
    each, with ``unshare(CLONE_NEWNET)`` 2.5-2.8 ms; load 22), a quarter of a trivial call, plus the
    kernel's deferred teardown of each namespace."""
    async with LocalSandbox(workers=1, slots_per_worker=2, preload=()) as sb:
        a = asyncio.ensure_future(sb.run(ExecutionRequest(_ABSTRACT_A, timeout_s=30)))
        b = await sb.run(ExecutionRequest(_ABSTRACT_B, timeout_s=30))
        await a
    assert b.status == "ok", b.stderr
    assert b.stdout.strip() == "False"


_SCAN_TOTALS = r"""
import re
found = set()
for line in open("/proc/self/maps").read().splitlines():
    parts = line.split()
    perms, path = parts[1], (parts[5] if len(parts) > 5 else "")
    if "r" not in perms or path in ("[vvar]", "[vsyscall]", "[vdso]", "[vvar_vclock]"):
        continue
    if path and not path.startswith("[") and "w" not in perms:
        continue
    lo, hi = (int(x, 16) for x in parts[0].split("-"))
    try:
        with open("/proc/self/mem", "rb", buffering=0) as mem:
            mem.seek(lo)
            found.update(int(x) for x in re.findall(rb'"out_total":(\d+)', mem.read(hi - lo)))
    except (OSError, OverflowError, ValueError):
        continue
print(987654 in found)
"""


@needs_mem
@pytest.mark.xfail(
    strict=True,
    reason="the done frame's metadata (byte totals, wait status) is built in the "
    "worker's heap, and a call chooses it (docs/sandbox.md, What a call can read)",
)
async def test_call_chosen_metadata_is_not_a_channel():
    """Broke, left: a call writes exactly 987654 bytes to stdout (past the cap: only the total is kept); the
    worker's ``done`` frame ``"out_total":987654`` stays in its freed heap, and the next call's scan finds
    the number. A channel of a few dozen bits per call (totals, exit code, duration) between calls that both
    cooperate; no reference or other call's data passes through it."""
    async with LocalSandbox(workers=1, preload=()) as sb:
        wrote = await sb.run(ExecutionRequest("import sys\nsys.stdout.write('z' * 987654)"))
        assert wrote.stdout_truncated
        found = await sb.run(ExecutionRequest(_SCAN_TOTALS, timeout_s=60))
    assert found.status == "ok", found.stderr
    assert found.stdout.strip() == "False"


# ----- the tool-call parsers ---------------------------------------------------------------------------------


class _CountingText(str):
    """A turn that counts the characters its ``find`` calls scan (the parsers' only long scans)."""

    scanned = 0

    def find(self, sub, start=None, end=None):  # noqa: D102 - str.find
        lo = 0 if start is None else max(0, start if start >= 0 else len(self) + start)
        hi = len(self) if end is None else min(len(self), end if end >= 0 else len(self) + end)
        at = str.find(self, sub, lo, hi)
        type(self).scanned += max(0, (at + len(sub) if at >= 0 else hi) - lo)
        return at


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_xml"])
def test_draft_scan_is_linear(fmt):
    """Broke: ``<think>``, 3000 tool-call blocks, then ``</think>`` far away: every block re-scanned the rest of
    the turn for ``</think>`` (and for the next ``<think>``), so the work grew with the square of the length
    (0.58 MB: 1.9 s). Counted as characters scanned by ``find``: now a small multiple of the length."""
    cfg = ProtocolConfig(tool_call_format=fmt)
    blocks = "<tool_call></tool_call>" * 3000
    for text in ("<think>" + blocks + "x" * 150_000 + "</think>", blocks + "y" * 150_000 + "<think>a</think>"):
        for run in (lambda t: parse_tool_calls(t, cfg), lambda t: draft_spans(t, cfg)):
            _CountingText.scanned = 0
            run(_CountingText(text))
            assert _CountingText.scanned < 12 * len(text), (_CountingText.scanned, len(text))
    spans = draft_spans("<think>" + blocks + "</think>tail<think>b</think>", cfg)
    assert spans == [(0, 7 + len(blocks) + 8), (7 + len(blocks) + 12, 7 + len(blocks) + 12 + 16)]


_FRAGMENTS = [
    "</parameter>",
    "<parameter=",
    "<parameter=code>",
    "</function>",
    "<function=",
    "</tool_call>",
    "<tool_call>",
    "<think>",
    "</think>",
    "\n",
    " ",
    "\t",
    "\u2028",
    "\x85",
    "\u3000",
    "\r",
    "x",
    ">",
    "<",
    "=",
    "code",
    "\x00",
    "\ud800",
    "</",
    "<answer>",
]


def test_qwen3_xml_hostile_values_read_back_or_are_refused():
    """Held: values made of the format's own tags, drafts' tags, Unicode whitespace (``\\u2028``, ``\\x85``,
    ``\\u3000``, which ``\\s`` matches), NUL and lone surrogates either are refused by ``render_call`` or read
    back exactly, with text before, after, a draft before and an abandoned call after."""
    cfg = ProtocolConfig(tool_call_format="qwen3_xml")
    fmt = get_format("qwen3_xml")
    rng = random.Random(23)
    written = 0
    for _ in range(3000):
        code = "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 8)))
        stdin = "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 4)))
        try:
            text = fmt.render_call(cfg.function_name, {"code": code, "input": stdin}, cfg)
        except ValueError:
            continue
        written += 1
        for before, after in (("", ""), ("so ", " then"), ("<think>a</think>", ""), ("", "<tool_call>")):
            items = parse_tool_calls(before + text + after, cfg)
            if code.strip():
                assert isinstance(items[0], ToolCall) and items[0].arguments == {"code": code, "input": stdin}, (
                    before,
                    code,
                    stdin,
                    items,
                )
            else:
                assert isinstance(items[0], ToolCallError) and items[0].kind == "empty_code", items
    assert written > 1000


def test_qwen3_xml_look_alikes_never_run():
    """Held: full-width brackets are no tag (no call), a Cyrillic ``с`` in ``code`` is another argument (so
    ``missing_code``), a zero-width space makes another function name, nested ``<function=`` in a block is
    ``unexpected_text``; a 2 MB value is read whole."""
    cfg = ProtocolConfig(tool_call_format="qwen3_xml")
    fn = cfg.function_name

    def call(body: str) -> str:
        return f"<tool_call>\n{body}\n</tool_call>"

    assert parse_tool_calls("\uff1ctool_call\uff1e<function=x></function>\uff1c/tool_call\uff1e", cfg) == []
    kinds = [
        parse_tool_calls(t, cfg)[0].kind
        for t in (
            call(f"<function={fn}>\n<parameter=\u0441ode>\nprint(1)\n</parameter>\n</function>"),
            call(f"<function={fn}\u200b>\n<parameter=code>\nprint(1)\n</parameter>\n</function>"),
            call(
                f"<function={fn}>\n<function={fn}>\n<parameter=code>\nprint(1)\n</parameter>\n</function>\n</function>"
            ),
        )
    ]
    assert kinds == ["missing_code", "unknown_function", "unexpected_text"]
    big = "x = 1\n" * 350_000
    items = parse_tool_calls(call(f"<function={fn}>\n<parameter=code>\n{big}\n</parameter>\n</function>"), cfg)
    assert isinstance(items[0], ToolCall) and items[0].arguments["code"] == big


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
