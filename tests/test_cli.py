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


def test_serve_passes_importable_packages_to_the_pool(monkeypatch):
    """``tirl sandbox serve --importable-packages`` reaches the pool's ``SandboxConfig`` (default: the sandbox's)."""
    from typer.testing import CliRunner

    import tirl.service.server as server
    from tirl.cli.main import app
    from tirl.sandbox.config import DEFAULT_IMPORTABLE

    seen = []

    async def fake_serve(config, routers=(), check_preload=None):
        seen.append(config.importable_packages)

    monkeypatch.setattr(server, "serve_local_sandbox", fake_serve)
    runner = CliRunner()
    assert runner.invoke(app, ["sandbox", "serve", "--port", "0"]).exit_code == 0
    result = runner.invoke(app, ["sandbox", "serve", "--port", "0", "--importable-packages", "numpy, networkx"])
    assert result.exit_code == 0, result.output
    assert seen == [DEFAULT_IMPORTABLE, ("numpy", "networkx")]
