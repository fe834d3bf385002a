"""The page `python -m attnkit.heads` writes for all-MiniLM-L6-v2, in headless Chromium (browser.py):
a layer picker and a head picker, all heads of the chosen layer as small multiples (clicking one
chooses it), the hovered cell's weight, the text shaded by where the word under the pointer attends,
and each head's statistics, all equal to what transformers' eager attention gives, with no console
error and no request leaving the file."""

from __future__ import annotations

import os

import numpy as np
import pytest
from browser import browser, external_urls, hover_cell, open_page  # noqa: F401 (browser is a fixture)

from conftest import eager_attention_weights, import_transformers, minilm_path

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = import_transformers()

import attnkit.heads as heads  # noqa: E402


def test_head_viewer_page(tmp_path, browser):
    path = minilm_path()
    page_path = tmp_path / "heads.html"
    assert heads.main(["--model", str(path), "--out", str(page_path)]) == 0
    assert external_urls(page_path.read_text()) == set()
    expected = eager_attention_weights(path, heads.DEFAULT_TEXT)
    got = heads.attention_weights(path)
    names, stats = heads.head_statistics(expected, got.tokens, got.special)

    page = open_page(browser, page_path)
    assert page.locator("#layer-label").is_visible()
    assert page.locator("#layer option").all_text_contents() == [f"layer {layer}" for layer in range(6)]
    for layer, head, cells in ((0, 2, ((3, 2), (0, 0), (9, 8))), (5, 11, ((10, 2), (10, 10), (14, 0)))):
        page.select_option("#layer", str(layer))
        assert page.locator("#head option").count() == 12
        assert page.locator(".multiple").count() == 12
        assert page.locator("#multiples-title").text_content().startswith(f"All heads of layer {layer}")
        # Panels are numbered layer-major: panel 12 * layer + head. Choose the head by its small multiple.
        panel = 12 * layer + head
        page.locator(f".multiple[data-panel='{panel}']").click()
        assert page.locator("#head").input_value() == str(panel)
        for i, j in cells:
            text, shown = hover_cell(page, i, j)
            assert (shown["query"], shown["key"]) == (str(i), str(j)), text
            assert float(shown["weight"]) == pytest.approx(float(expected[layer, head, i, j]), abs=1e-5), text
            assert f"head {head}" in text and f"\u201c{got.tokens[j]}\u201d" in text
        # The statistics beside the head, and under its small multiple.
        shown = page.evaluate("() => Object.fromEntries([...document.querySelectorAll('#stats td[data-stat]')]"
                              ".map(td => [td.dataset.stat, Number(td.dataset.value)]))")  # fmt: skip
        assert list(shown) == names
        np.testing.assert_allclose([shown[name] for name in names], stats[layer, head], atol=1e-5)
        caption = page.locator(f".multiple[data-panel='{panel}'] figcaption").text_content()
        assert f"previous token {stats[layer, head, 0]:.3f}" in caption
        # Point at "it": the text is shaded by its weights, and the line names where it attends most.
        it = got.tokens.index("it")
        page.locator(f"#text span[data-index='{it}']").hover()
        shaded = page.evaluate("() => [...document.querySelectorAll('#text span')].map(s => Number(s.dataset.weight))")
        np.testing.assert_allclose(shaded, expected[layer, head, it], atol=1e-5)
        top = int(np.argmax(expected[layer, head, it]))
        info = page.locator("#info").text_content()
        assert info.startswith(f"head {head}: \u201cit\u201d attends to \u201c{got.tokens[top]}\u201d")
    assert page.errors == []
