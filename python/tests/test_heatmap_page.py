"""The page `attnkit heatmap --html` writes, loaded in headless Chromium (Debian's `chromium`) and
driven with Playwright: it loads without console errors, a scripted hover shows the weight that
`attnkit run --probs` computes for that cell with its two tokens, the head selector switches heads,
and the lines view draws a line for every weight of at least 1% of the query pointed at.

Run by scripts/check-python.sh with ATTNKIT_BIN set to the built `attnkit`. Without the tool,
Chromium or Playwright it skips, saying why, unless ATTNKIT_TEST_BROWSER=1 (CI), where that is a
failure (browser.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from browser import browser, external_urls, hover_cell, need, open_page  # noqa: F401 (browser is a fixture)

@pytest.fixture
def attnkit_bin():
    path = os.environ.get("ATTNKIT_BIN", str(Path(__file__).resolve().parents[2] / "build" / "bin" / "attnkit"))
    need(Path(path).is_file(), f"no attnkit binary at {path} (build first, or set ATTNKIT_BIN)")
    return path


def run(*args):
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{args}: {result.stderr}"
    return result


def test_page_shows_the_weights(tmp_path, attnkit_bin, browser, rng):
    H, n, d = 3, 9, 16
    q, k, v = (rng.standard_normal((1, H, n, d)).astype(np.float32) * 2 for _ in range(3))
    for name, x in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", x)
    tokens = ["The", "cat", "sat", "on", "the", "<mat>", "</script>", "&", "end"]
    (tmp_path / "tokens.txt").write_text("\n".join(tokens) + "\n")
    run(attnkit_bin, "run", "--q", str(tmp_path / "q.npy"), "--k", str(tmp_path / "k.npy"), "--v",
        str(tmp_path / "v.npy"), "--out", str(tmp_path / "o.npy"), "--probs", str(tmp_path / "p.npy"),
        "--causal", "top-left")  # fmt: skip
    probs = np.load(tmp_path / "p.npy")[0]
    page_path = tmp_path / "page.html"
    run(attnkit_bin, "heatmap", "--q", str(tmp_path / "q.npy"), "--k", str(tmp_path / "k.npy"), "--causal",
        "top-left", "--tokens", str(tmp_path / "tokens.txt"), "--html", str(page_path), "--title", "a </b> test")
    html = page_path.read_text()
    # No external asset (open_page also fails on any request that leaves the file).
    assert external_urls(html) == set()

    page = open_page(browser, page_path)
    assert page.locator("#title").text_content() == "a </b> test"
    assert page.locator("#head option").count() == H
    for head in (0, 2, 1):
        page.select_option("#head", str(head))
        for i, j in ((0, 0), (5, 3), (8, 6), (2, 7)):
            text, shown = hover_cell(page, i, j)
            assert (shown["query"], shown["key"]) == (str(i), str(j)), text
            assert float(shown["weight"]) == pytest.approx(float(probs[head, i, j]), rel=1e-6, abs=1e-12), text
            assert f"head {head}" in text and f"\u201c{tokens[i]}\u201d" in text and f"\u201c{tokens[j]}\u201d" in text
            if j > i:
                assert float(shown["weight"]) == 0  # causal: a later key has no weight

    # No layers: no layer picker, every head as a small multiple; clicking one chooses it.
    assert page.locator("#layer-label").is_hidden() and page.locator("#stats-box").is_hidden()
    assert page.locator(".multiple").count() == H
    page.locator(".multiple[data-panel='2']").click()
    assert page.locator("#head").input_value() == "2"
    assert page.locator(".multiple.selected").get_attribute("data-panel") == "2"
    # Self-attention with labels: the text's tokens are shaded by the weights of the one pointed at.
    page.locator("#text span[data-index='6']").hover()
    shaded = page.evaluate("() => [...document.querySelectorAll('#text span')].map(s => Number(s.dataset.weight))")
    np.testing.assert_allclose(shaded, probs[2, 6], rtol=1e-6, atol=1e-12)

    page.check("input[value=lines]")
    assert page.locator("#heatmap").is_hidden() and page.locator("#lines").is_visible()
    page.select_option("#head", "1")
    page.hover("#lines text[data-query='4']")
    # Lines shown (not display:none; a thin horizontal line has no area, so not Playwright's :visible).
    shown = page.evaluate(
        "() => [...document.querySelectorAll('#lines line')].filter(l => l.style.display !== 'none')"
        ".map(l => [Number(l.dataset.query), Number(l.dataset.key), Number(l.getAttribute('stroke-width'))])"
    )
    expected = [(4, j) for j in range(n) if probs[1, 4, j] >= 0.01]
    assert [(i, j) for i, j, _ in shown] == expected
    for _, j, width in shown:  # width ∝ weight
        assert width == pytest.approx(8 * probs[1, 4, j], abs=1e-3)
    assert page.errors == []


def test_demo_page_and_refusals(tmp_path, attnkit_bin, browser):
    page_path = tmp_path / "demo.html"
    run(attnkit_bin, "heatmap", "--demo", "--html", str(page_path), "--out", str(tmp_path / "demo.png"))
    page = open_page(browser, page_path)
    assert page.locator("#head option").count() >= 4
    text, shown = hover_cell(page, 1, 0)
    assert shown["weight"] is not None and "head" in text
    assert page.errors == []
