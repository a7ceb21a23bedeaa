"""Headless Chromium for the tests that load pages in a browser (the records site, the
documentation site).

``chromium()`` finds Debian's ``chromium``. Without it the test skips, unless
``ASSAY_REQUIRE_CHROMIUM=1`` (CI sets it after installing the package: there a missing browser
is a failure, not a skip) or ``ASSAY_INSTALL_CHROMIUM=1`` (the test may apt-get install it).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

NAMES = ("chromium", "chromium-browser")


def _found() -> str | None:
    return next((shutil.which(name) for name in NAMES if shutil.which(name)), None)


def chromium() -> str:
    """The path of a headless-capable Chromium, or skip (or fail) the calling test."""
    found = _found()
    if (
        found is None
        and os.environ.get("ASSAY_INSTALL_CHROMIUM") == "1"
        and shutil.which("apt-get")
    ):
        subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
            capture_output=True,
            timeout=600,
            check=False,
        )
        found = _found()
    if found is not None:
        return found
    if os.environ.get("ASSAY_REQUIRE_CHROMIUM") == "1":
        pytest.fail("ASSAY_REQUIRE_CHROMIUM=1 and no chromium on PATH (apt-get install chromium)")
    pytest.skip(
        "headless Chromium is absent (Debian package `chromium`; ASSAY_INSTALL_CHROMIUM=1 lets "
        "the test apt-get install it)"
    )


def headless(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run (``--dump-dom URL``, ``--screenshot=PATH URL``, ...)."""
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": os.environ.get("HOME", "/tmp")},
    )
