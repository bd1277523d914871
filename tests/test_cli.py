"""The console entry point."""

import subprocess
import sys

from tirl import __version__


def test_version():
    out = subprocess.run([sys.executable, "-m", "tirl.cli.main", "--version"], capture_output=True, text=True)
    assert out.returncode == 0
    assert __version__ in out.stdout


def test_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "tirl.cli.main", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "demo" in out.stdout


def test_serve_preload_covers_the_verifier_modules():
    from tirl.cli.sandbox import SERVE_PRELOAD
    from tirl.reward import PRELOAD_MODULES

    preloaded = SERVE_PRELOAD.split(",")
    assert {"numpy", "scipy", "sympy"} <= set(preloaded)
    assert set(PRELOAD_MODULES) <= set(preloaded)
