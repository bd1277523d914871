"""The ``ExecutionResult`` fields of a finished call, assembled on the host from what its worker moved.

The worker never reads a call's outputs into its own memory (a later call, a fork of that memory, could
read them: docs/sandbox.md "What a call can read"). It moves the bytes of stdout, stderr and the runner's
result record from the call's pipes into memory files with ``splice`` and forwards them to the pool
unread, with what it observed from outside: the wait status, a kill reason, OOM kills, byte totals. This
module turns both into the result: status, notes appended to stderr, display, traceback. It runs in the
pool's process, which no call is forked from.
"""

from __future__ import annotations

import codecs
import math
import os
import signal

from tirl.sandbox import wire

#: First byte of the result record: the call's set-up succeeded (written before any user code runs) ...
SETUP_OK = b"S"
#: ... or failed (followed by the reason).
SETUP_FAILED = b"F"
#: A byte the call process's C-level SIGABRT handler writes to the signal pipe (``os.abort()``: the call is
#: its PID namespace's init, which ignores its own SIGABRT, so the process then dies by SIGSEGV from
#: glibc's abort instruction; this byte says which signal it really received).
ABORT_NOTE = bytes([signal.SIGABRT])
SIGNAL_NAMES = {int(s): s.name for s in signal.Signals}  # canonical names (SIGABRT, not its alias SIGIOT)


def sanitize(text: str | None) -> str | None:
    """Replace lone surrogates so the text is valid UTF-8 on any wire."""
    if text is None:
        return None
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def decode_output(data: bytes, truncated: bool) -> str:
    """UTF-8 with replacement; a multi-byte character cut by the cap (``truncated``) is dropped."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    return decoder.decode(data, final=not truncated)


def assemble(meta: dict, out: bytes, err: bytes, res: bytes) -> dict:
    """The ``ExecutionResult`` fields (without ``request_id``) of one finished call.

    Args:
        meta: the worker's ``done`` frame: ``wait_status`` (``os.waitpid`` status or None), ``duration_s``,
            ``kill_reason`` (``timeout``, ``output``, ``shutdown`` or None), ``oom_kills``, ``timeout_s``,
            ``memory_mb``, ``max_output_bytes``, ``out_total``/``err_total``/``res_total`` (bytes the call
            wrote to each pipe, of which the first ``max_output_bytes`` (record: its cap) were kept),
            ``res_cap``, ``signal_note`` (bytes the call's signal handler reported, as latin-1 text),
            ``scratch_full`` (the call's own scratch tmpfs had no free inode or byte left at its end) with the
            quota ``scratch_inodes`` (files) and ``scratch_mb`` (MiB).
        out, err, res: the kept bytes of stdout, stderr and the result record.
    """
    max_out = int(meta["max_output_bytes"])
    out_truncated = int(meta["out_total"]) > max_out
    err_truncated = int(meta["err_total"]) > max_out
    res_truncated = int(meta["res_total"]) > int(meta["res_cap"])
    wait_status = meta.get("wait_status")
    kill_reason = meta.get("kill_reason")
    timeout_s = float(meta["timeout_s"])
    memory_mb = int(meta["memory_mb"])
    oom_kills = int(meta.get("oom_kills") or 0)
    status_code = _exit_code(wait_status) if wait_status is not None else None
    record: dict = {}
    setup = res[:1]
    setup_error = None
    if setup == SETUP_FAILED:
        setup_error = res[1:].decode("utf-8", "replace") or "call set-up failed"
    elif setup == SETUP_OK and len(res) > 1 and not res_truncated:
        try:
            record = wire.decode_body(res[1:])
        except (ValueError, RecursionError):  # RecursionError: a record nested deeper than json decodes
            record = {}  # the code wrote to the result descriptor itself; it loses display/traceback
    elif wait_status is not None and not kill_reason and not setup:
        setup_error = "the call process ended before its set-up finished"
    stdout = decode_output(out, out_truncated)
    stderr = decode_output(err, err_truncated)
    result: dict = {
        "status": "ok",
        "stdout": stdout,
        "stderr": stderr,
        "display": None,
        "error_type": None,
        "traceback": None,
        "exit_code": status_code,
        "duration_s": round(float(meta["duration_s"]), 6),
        "stdout_truncated": out_truncated,
        "stderr_truncated": err_truncated,
    }
    note = None
    if kill_reason == "timeout":
        result["status"] = "timeout"
        note = f"timeout: the code ran past its {timeout_s:g} s limit and was killed"
    elif kill_reason == "output":
        result["status"] = "killed"
        note = f"killed: output passed the {max_out}-byte cap"
    elif setup_error is not None:
        result["status"] = "internal"
        note = setup_error
    elif oom_kills:
        # The memory cgroup's OOM killer ended the call or some of its processes: its processes together
        # passed memory_mb. Reported even when the call itself finished (its children's work was lost).
        if record.get("error_type"):
            result["error_type"] = sanitize(str(record["error_type"]))
            result["traceback"] = sanitize(str(record.get("traceback") or record["error_type"]))
        result["status"] = "killed"
        procs = "process" if oom_kills == 1 else "processes"
        note = (
            f"killed: the call's processes together passed its memory limit ({memory_mb} MiB, "
            f"memory cgroup); the kernel's OOM killer ended {oom_kills} {procs} of the call"
        )
    elif status_code is not None and status_code < 0:
        sig = -status_code
        if sig == signal.SIGSEGV and ABORT_NOTE in str(meta.get("signal_note") or "").encode("latin-1"):
            sig = signal.SIGABRT  # abort(): SIGABRT first (ignored by a namespace init), then SIGSEGV
            result["exit_code"] = -sig
        name = SIGNAL_NAMES.get(sig, f"signal {sig}")
        if sig == signal.SIGXCPU:
            result["status"] = "timeout"
            note = f"timeout: CPU time limit ({int(math.ceil(timeout_s)) + 1} s) reached"
        elif sig in (signal.SIGKILL, signal.SIGXFSZ):
            result["status"] = "killed"
            note = f"killed by {name} (a resource limit: memory, file size or processes)"
        else:
            result["status"] = "error"
            note = f"the process was terminated by {name}"
    else:
        if record.get("error_type"):
            result["error_type"] = sanitize(str(record["error_type"]))
            result["traceback"] = sanitize(str(record.get("traceback") or record["error_type"]))
        if record.get("memory_error"):
            result["status"] = "killed"
            note = f"killed: memory limit ({memory_mb} MiB of address space) reached"
        elif result["error_type"] or (status_code or 0) != 0:
            result["status"] = "error"
    if meta.get("scratch_full") and result["status"] != "internal":
        # The call used its whole scratch quota (its own tmpfs: no other call shares it). The model's doing,
        # so its error, never tirl's, even when the code caught the OSError and exited 0.
        if result["status"] == "ok":
            result["status"] = "error"
        quota = (
            f"scratch space quota exceeded: {int(meta.get('scratch_inodes') or 0)} files / "
            f"{int(meta.get('scratch_mb') or 0) * 1024 * 1024} bytes per call"
        )
        note = f"{note}\ntirl-sandbox: {quota}" if note else quota
    display = record.get("display")
    if isinstance(display, str) and int(meta["out_total"]) == 0 and result["status"] in ("ok",):
        result["display"] = sanitize(display)
        if record.get("display_truncated"):
            result["stdout_truncated"] = True
    if note:
        sep = "" if not stderr or stderr.endswith("\n") else "\n"
        result["stderr"] = f"{stderr}{sep}tirl-sandbox: {note}\n"
    return result


def _exit_code(wait_status: int) -> int:
    return os.waitstatus_to_exitcode(wait_status)
