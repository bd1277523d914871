"""A headless Chromium for tests that look at pages as a person would (Selenium + Debian's chromium-driver).

Chromium comes from Debian (``apt-get install chromium chromium-driver``; ``make test`` installs both when they
are missing and it runs as root, see the README). Nothing is downloaded by Selenium: the driver path is given.
When either binary is absent the tests that need it are skipped with a reason saying so (``make test`` prints
skip reasons), never passed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
_CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
_DRIVER = ("chromedriver",)


def _which(names: tuple[str, ...]) -> str | None:
    for name in names:
        debian = Path(f"/usr/lib/chromium/{name}")
        path = shutil.which(name) or (str(debian) if debian.exists() else None)
        if path:
            return path
    return None


def browser():
    """A headless Selenium Chrome driver on the system Chromium, or ``pytest.skip`` saying what is missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (it is in tirl's [dev] extra: pip install -e '.[dev]')")
    chrome, driver = _which(_CHROMIUM), _which(_DRIVER)
    if chrome is None or driver is None:
        pytest.skip(
            "Chromium or chromedriver is not installed: browser test NOT run. Install Debian's packages "
            "(apt-get install chromium chromium-driver) or run `make test` as root, which does it"
        )
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--allow-file-access-from-files",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=opts)


def console_errors(driver) -> list[dict]:
    """Console entries of level SEVERE since the last call (JavaScript errors, failed loads)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
