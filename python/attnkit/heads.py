"""The head viewer: what every attention head of a real model does on a piece of text.

    python -m attnkit.heads --model DIR --text "The animal didn't cross the street because it was too tired" \\
        --out heads.html --png heads.png

loads a Hugging Face model from the folder DIR (offline: nothing is downloaded) with attnkit as its
attention (``attn_implementation="attnkit"``), runs the text through it asking for the attention
weights, and draws every layer x head with attnkit's heatmap code (the pictures of
``attnkit heatmap``): a PNG with one small panel per head, layers as rows, and a self-contained page
where a reader picks a layer and a head, points at a word to see where it attends, and sees all heads
of a layer as small multiples.

Beside each head it prints and draws a few measured statistics (``head_statistics``): the mean
attention weight on the previous token, on the token itself, on each special token of the text
([CLS], [SEP], ...) and the mean entropy of a query's weights in bits. "Head 4 of layer 2 is a
previous-token head" is then a measured statement: the heads with the highest share of each are
listed. Needs transformers 5 and torch (``pip install attnkit[transformers]``).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import _core

DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"

__all__ = ["DEFAULT_TEXT", "HeadWeights", "attention_weights", "head_statistics", "strongest_links", "draw", "main"]


@dataclass
class HeadWeights:
    """The attention weights of every layer and head of a model on one text."""

    model: str  # the model folder's name
    tokens: list[str]  # n tokens, as the tokenizer splits the text (special tokens included)
    special: list[str]  # the special tokens of the model's tokenizer that the text contains, in order
    weights: np.ndarray  # float32 [layers, heads, n, n]: row = query, column = key, rows sum to 1


def attention_weights(model_dir, text: str = DEFAULT_TEXT) -> HeadWeights:
    """Runs ``text`` through the model in ``model_dir`` with attnkit as its attention and returns
    every layer's weights. Raises ValueError when the folder holds no model transformers can load
    offline, or an encoder-decoder model (whose decoder attends to two sequences)."""
    import torch

    import transformers

    from .integrations import transformers as attnkit_transformers

    path = Path(model_dir)
    if not path.is_dir():
        raise ValueError(f"--model {model_dir}: not a folder (give the folder with the model's config.json)")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = transformers.AutoModel.from_pretrained(
            path, attn_implementation=attnkit_transformers.NAME, local_files_only=True
        ).eval()
    except (OSError, ValueError) as error:
        raise ValueError(f"--model {model_dir}: transformers cannot load a model from it offline ({error})") from error
    if model.config.is_encoder_decoder:
        raise ValueError(f"--model {model_dir}: an encoder-decoder model ({type(model).__name__}); the viewer draws "
                         "self-attention, of an encoder or a decoder model")  # fmt: skip
    if model.config._attn_implementation != attnkit_transformers.NAME:
        raise ValueError(f"--model {model_dir}: the model runs {model.config._attn_implementation!r} attention, not "
                         "attnkit's; the viewer shows only what attnkit computed")  # fmt: skip
    batch = tokenizer(text, return_tensors="pt")  # one text: no padding
    with torch.no_grad():  # only the ids: a decoder takes no token types, an encoder defaults them to 0
        outputs = model(input_ids=batch["input_ids"], output_attentions=True)
    if not outputs.attentions:
        raise ValueError(f"--model {model_dir}: {type(model).__name__} returned no attention weights")
    weights = torch.stack([layer[0] for layer in outputs.attentions]).float().numpy()
    ids = batch["input_ids"][0].tolist()
    tokens = tokenizer.convert_ids_to_tokens(ids)
    special_ids = set(tokenizer.all_special_ids)
    special = list(dict.fromkeys(t for i, t in zip(ids, tokens) if i in special_ids))  # in order, once each
    return HeadWeights(path.name, tokens, special, np.ascontiguousarray(weights))


def head_statistics(weights: np.ndarray, tokens: list[str], special: list[str] = ()) -> tuple[list[str], np.ndarray]:
    """Per head, averaged over the queries (float64): the weight on the previous token (queries 1
    onwards), on the token itself, on each token in ``special`` (summed over its occurrences), and
    the entropy of the query's weights in bits. ``weights`` is [..., n, n]; returns the statistics'
    names and an array [..., number of names]."""
    w = np.asarray(weights, dtype=np.float64)
    n = w.shape[-1]
    if w.shape[-2] != n or len(tokens) != n:
        raise ValueError(f"head_statistics: weights {w.shape} are not [..., n, n] for {len(tokens)} tokens")
    names, columns = [], []
    names.append("previous token")
    columns.append(np.diagonal(w, offset=-1, axis1=-2, axis2=-1).mean(-1) if n > 1 else np.full(w.shape[:-2], np.nan))
    names.append("itself")
    columns.append(np.diagonal(w, axis1=-2, axis2=-1).mean(-1) if n > 0 else np.full(w.shape[:-2], np.nan))
    for token in special:
        on = np.array([t == token for t in tokens])
        names.append(token)
        columns.append(w[..., on].sum(-1).mean(-1) if n > 0 else np.full(w.shape[:-2], np.nan))
    names.append("entropy (bits)")
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(w > 0, -w * np.log2(np.where(w > 0, w, 1.0)), 0.0)
    columns.append(terms.sum(-1).mean(-1) if n > 0 else np.full(w.shape[:-2], np.nan))
    return names, np.stack(columns, axis=-1)


STAT_NOTE = ("Each statistic is a mean over the text's tokens as queries: the attention weight on the token just "
             "before (from the second token on), on the token itself, on each special token, and the entropy of "
             "the query's weights in bits (0: all on one key; log2 of the number of keys: uniform).")  # fmt: skip

_NO_DRAWING = ("this attnkit was built without its drawing layer: install Cairo and fontconfig (Debian: "
               "libcairo2-dev libfontconfig-dev) and reinstall attnkit")  # fmt: skip

# Short names for the PNG's captions, where a panel is about 200 pixels wide.
_SHORT = {"previous token": "prev", "itself": "self", "entropy (bits)": "H"}


def _captions(names, values):
    def pair(a, b):
        return " \u00b7 ".join(f"{_SHORT.get(names[k], names[k])} {values[k]:.2f}" for k in (a, b) if k is not None)

    special = [k for k in range(2, len(names) - 1)]
    lines = [pair(0, 1)]
    for start in range(0, len(special), 2):
        lines.append(pair(special[start], special[start + 1] if start + 1 < len(special) else None))
    lines.append(f"entropy {values[-1]:.2f} bits")
    return lines


def stage(html: str | None = None, png: str | None = None):
    """The page and the picture, checked before any work (a directory, a path that cannot be written,
    both naming one file: ValueError naming the flag and the path), to be written all or nothing."""
    staged = _core.StagedOutputs()
    try:
        if html is not None:
            staged.add(str(html), "--out")
        if png is not None:
            staged.add(str(png), "--png")
    except BaseException:
        staged.discard()  # now, not when the traceback that holds it is collected
        raise
    return staged


def _write(staged, path, write):
    """staged.write(path, write), with an error naming ``path`` rather than its temporary file."""

    def call(file):
        try:
            write(file)
        except ValueError as error:
            raise ValueError(str(error).replace(file, str(path))) from None

    staged.write(str(path), call)


def draw(heads: HeadWeights, html: str | None = None, png: str | None = None, layers=None, title: str | None = None,
         staged=None):
    """Writes the page and/or the PNG for ``heads`` (every layer, or those in ``layers``), both or
    neither (``staged``: what ``stage(html, png)`` returned, else staged here); returns the statistics
    as (names, values [layers, heads, k]) for the layers drawn and the PNG's size."""
    if not _core.has_drawing:
        raise RuntimeError(_NO_DRAWING)
    if staged is None:
        staged = stage(html, png)
    try:
        return _draw_staged(heads, html, png, layers, title, staged)
    finally:
        staged.discard()  # after a failure, the temporary files go now; after the commit, nothing is left


def _draw_staged(heads, html, png, layers, title, staged):
    count, head_count, n, _ = heads.weights.shape
    chosen = _layers_drawn(count, layers)
    for layer in chosen:
        if not 0 <= layer < count:
            raise ValueError(f"--layers: {layer} is not a layer of {heads.model} (it has {count}, numbered from 0)")
    weights = np.ascontiguousarray(heads.weights[chosen].reshape(len(chosen) * head_count, n, n), dtype=np.float32)
    names, values = head_statistics(heads.weights[chosen], heads.tokens, heads.special)
    flat = values.reshape(-1, len(names))
    head_numbers = [h for _ in chosen for h in range(head_count)]
    layer_numbers = [layer for layer in chosen for _ in range(head_count)]
    title = title or f"{heads.model}: every head's attention weights"
    if html is not None:
        total = weights.size
        if total > _core.max_html_weights:
            raise ValueError(f"the page would hold {total} weights ({len(chosen)} layers x {head_count} heads x {n} x {n} "
                             f"tokens), more than a page shows well ({_core.max_html_weights}): pick layers with "
                             "--layers, or a shorter --text")  # fmt: skip
        _write(staged, html, lambda file: _core.heatmap_html(weights, file, head_numbers, layer_numbers, title,
                                                             heads.tokens, [], names, flat.tolist(), STAT_NOTE))
    size = None
    if png is not None:
        panel_titles = [f"layer {layer} \u00b7 head {h}" for layer, h in zip(layer_numbers, head_numbers)]
        captions = [_captions(names, row) for row in flat]
        source = f"{heads.model} on \u201c{' '.join(heads.tokens)}\u201d \u00b7 computed by attnkit"
        sizes = []
        _write(staged, png, lambda file: sizes.append(_core.heatmap_png(
            weights, file, head_numbers, title, source, heads.tokens, panel_titles, captions, head_count,
            14 * max(n, 1), True, 1.0, format_name=str(png))))  # fmt: skip
        size = sizes[0]
    staged.commit()
    return names, values, size


def _layers_drawn(count, layers):
    """The layers `draw` draws: all `count`, or those asked for."""
    return list(range(count)) if layers is None else list(layers)


def _layer_list(text):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of layer numbers") from None


def _notable(names, values, chosen, top=3):
    """Lines naming the heads with the highest mean of each statistic but entropy, and the most
    focused (lowest entropy) heads."""
    flat = values.reshape(-1, len(names))
    heads = values.shape[1]

    def where(index):
        return f"layer {chosen[index // heads]} head {index % heads}"

    lines = []
    for k, name in enumerate(names[:-1]):
        order = np.argsort(-flat[:, k], kind="stable")[:top]
        lines.append(f"  most on {name}: " + ", ".join(f"{where(i)} ({flat[i, k]:.2f})" for i in order))
    order = np.argsort(flat[:, -1], kind="stable")[:top]
    lines.append("  most focused (lowest entropy): " + ", ".join(f"{where(i)} ({flat[i, -1]:.2f} bits)" for i in order))
    return lines


def strongest_links(heads: HeadWeights, token: str, to: str | None = None, top: int = 3):
    """The heads where ``token`` (its first occurrence, as a query) puts the most weight on one other
    word of the text (not itself, not a special token), or on the word ``to`` when given: a list of
    (layer, head, word, weight), largest first. Raises ValueError naming the argument when the text
    has no such token."""
    for flag, word in (("--token", token), ("--to", to)):
        if word is not None and word not in heads.tokens:
            raise ValueError(f"{flag} {word!r} is not one of the text's tokens: {' '.join(heads.tokens)}")
    i = heads.tokens.index(token)
    if to is not None:
        others = [heads.tokens.index(to)]
    else:
        others = [j for j, t in enumerate(heads.tokens) if j != i and t not in heads.special]
    if not others:
        return []
    rows = heads.weights[:, :, i, :][..., others]  # [layers, heads, candidates]
    best = rows.argmax(-1)
    links = [(layer, h, heads.tokens[others[best[layer, h]]], float(rows[layer, h, best[layer, h]]))
             for layer in range(rows.shape[0]) for h in range(rows.shape[1])]  # fmt: skip
    links.sort(key=lambda link: -link[3])
    return links[:top]


def main(argv=None) -> int:
    """The command line ``python -m attnkit.heads`` (``argv`` without the program name; default
    ``sys.argv[1:]``): draws the heads of ``--model`` on ``--text`` into ``--out`` and/or ``--png``
    and prints the heads that measure highest. Returns the exit code: 0, or 1 on an error, which is
    printed and leaves nothing written (bad flags exit with argparse's 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m attnkit.heads",
        description="Draws every attention head of a Hugging Face model on a text, computed through attnkit, with "
                    "per-head statistics (weight on the previous token, on itself, on special tokens, entropy).",
        epilog="Example: python -m attnkit.heads --model path/to/all-MiniLM-L6-v2 --out heads.html --png heads.png",
    )  # fmt: skip
    parser.add_argument("--model", required=True, help="folder of a transformers model (config.json, weights, tokenizer)")
    parser.add_argument("--text", default=DEFAULT_TEXT, help=f"the text (default: {DEFAULT_TEXT!r})")
    parser.add_argument("--out", help="the interactive page to write (self-contained HTML)")
    parser.add_argument("--png", help="the picture to write: every layer x head as small panels (a PNG; "
                        "a name ending in .pdf gives a vector file)")
    parser.add_argument("--layers", type=_layer_list, help="which layers, e.g. 0,3 (default: all)")
    parser.add_argument("--title", help="the title (default: the model's name)")
    parser.add_argument("--token", help="also print the heads where this token attends most to one other word")
    parser.add_argument("--to", help="with --token: the heads where it attends most to this word")
    args = parser.parse_args(argv)
    if args.out is None and args.png is None:
        parser.error("give --out heads.html and/or --png heads.png")
    if args.to is not None and args.token is None:
        parser.error("--to goes with --token (the word that attends)")
    if not _core.has_drawing:  # before loading a model for nothing
        print(f"python -m attnkit.heads: {_NO_DRAWING}", file=sys.stderr)
        return 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder; never the network
    try:
        import transformers  # noqa: F401
    except ImportError as error:
        print(f"python -m attnkit.heads: needs transformers and torch ({error}); pip install attnkit[transformers]",
              file=sys.stderr)  # fmt: skip
        return 1
    staged = None
    try:
        staged = stage(args.out, args.png)  # before the model is loaded
        heads = attention_weights(args.model, args.text)
        links = strongest_links(heads, args.token, args.to) if args.token is not None else None
        names, values, size = draw(heads, args.out, args.png, args.layers, args.title, staged)
    except (ValueError, RuntimeError, OSError) as error:
        if staged is not None:
            staged.discard()
        print(f"python -m attnkit.heads: {error}", file=sys.stderr)
        return 1
    count, head_count, n, _ = heads.weights.shape
    chosen = _layers_drawn(count, args.layers)
    print(f"{args.title or heads.model}: {count} layers x {head_count} heads, {n} tokens: {' '.join(heads.tokens)}")
    print("The heads that measure highest (mean over the tokens as queries):")
    print("\n".join(_notable(names, values, chosen)))
    if links is not None:
        target = f"\u201c{args.to}\u201d" if args.to else "one other word (not itself or a special token)"
        print(f"The heads where \u201c{args.token}\u201d attends most to {target}:")
        for layer, h, word, weight in links:
            print(f"  layer {layer} head {h}: \u201c{word}\u201d {weight:.2f}")
    if args.out:
        print(f"wrote {args.out} (a self-contained page: pick a layer and a head, point at a word)")
    if args.png:
        print(f"wrote {args.png} ({size[0]} x {size[1]} pixels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
