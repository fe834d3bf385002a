"""Headless Chromium (Debian's `chromium`) driven with Playwright, for the tests of the pages
attnkit writes (test_heatmap_page.py, test_heads_page.py). Without Chromium or Playwright a test
skips, saying why, unless ATTNKIT_TEST_BROWSER=1 (CI), where that is a failure."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_REQUIRED = os.environ.get("ATTNKIT_TEST_BROWSER") == "1"


def need(condition, why):
    """A skip that says why, or a failure when ATTNKIT_TEST_BROWSER=1 requires the browser."""
    if condition:
        return
    if BROWSER_REQUIRED:
        pytest.fail(f"{why} (ATTNKIT_TEST_BROWSER=1 requires it)")
    pytest.skip(why)


@pytest.fixture
def browser():
    need(CHROMIUM is not None, "chromium is not installed (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        need(False, "playwright is not installed (pip install playwright)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


def open_page(browser, path):
    """The page, with every console error, uncaught exception and request that leaves the file
    collected in page.errors."""
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.errors = []
    page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("request", lambda request: None if request.url.startswith(("file:", "data:", "about:")) else
            page.errors.append(f"network request: {request.url}"))  # fmt: skip
    page.goto(path.as_uri())
    return page


def hover_cell(page, i, j):
    """Points at the heatmap's cell (query i, key j); returns the info line and what it says it shows."""
    canvas = page.locator("#heatmap")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    cell, left, top = (float(x) for x in canvas.evaluate("c => [c.dataset.cell, c.dataset.left, c.dataset.top]"))
    page.mouse.move(box["x"] + left + (j + 0.5) * cell, box["y"] + top + (i + 0.5) * cell)
    info = page.locator("#info")
    return info.text_content(), {k: info.get_attribute(f"data-{k}") for k in ("query", "key", "weight")}


def external_urls(html):
    """The URLs a page names besides SVG's namespace name (an identifier, never fetched)."""
    import re

    return set(re.findall(r"https?://[^\s\"']*", html)) - {"http://www.w3.org/2000/svg"}
