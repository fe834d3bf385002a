"""attnkit.functional: scaled dot-product attention on numpy arrays and torch CPU tensors.

The arguments are checked and shaped here, in Python: leading dimensions broadcast and are
flattened into attnkit's [B, H, n, d] views (without a copy whenever their strides allow it), the
mask is brought to attnkit's rank-4 broadcasting form, the outputs are allocated in the caller's
framework. Then one C++ call (``attnkit._core.sdpa``) runs the kernel with the GIL released.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from . import _core
from ._args import (
    _Torch, _alibi_slopes, _float, _float_arrays, _float_or_none, _key_lengths, _seed, _sinks, _type_name, _window,
)  # fmt: skip
from .varlen import jagged_attention

__all__ = ["scaled_dot_product_attention"]


# ---- shapes ------------------------------------------------------------------------------------


def _broadcast(shapes, what):
    if all(s == shapes[0] for s in shapes):  # the common case, without numpy's machinery
        return tuple(shapes[0])
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = ", ".join(str(list(s)) for s in shapes)
        raise ValueError(f"{what}: {listed} do not broadcast (each dimension must match or be 1)") from None


class _Shapes:
    """The inputs' shapes, as an error message shows them."""

    def __init__(self, q, k, v):
        self.q, self.k, self.v = q.shape, k.shape, v.shape

    def __str__(self):
        return f"(query {list(self.q)}, key {list(self.k)}, value {list(self.v)})"


class _Layout:
    """How the caller's [..., L, E] arrays map onto attnkit's [B, H, n, d].

    Dimensions before the last two broadcast against each other as in torch (whose math path
    uses matmul). For rank >= 4, dimension -3 is the heads and the dimensions before it are the
    batch, flattened into B. A 3-D input [N, L, E] is N batch entries of one head, except with
    enable_gqa, where torch groups over dimension -3 and so it counts heads (B = 1). A 2-D input
    [L, E] is one batch entry of one head."""

    def __init__(self, q, k, v, enable_gqa):
        for name, x in (("query", q), ("key", k), ("value", v)):
            if x.ndim < 2:
                raise ValueError(f"{name}: expected at least 2 dimensions [..., L, E], got shape {list(x.shape)}")
        shapes = _Shapes(q, k, v)  # formatted only into an error message
        self.L, self.E = int(q.shape[-2]), int(q.shape[-1])
        self.S, Ek = int(k.shape[-2]), int(k.shape[-1])
        Sv, self.Ev = int(v.shape[-2]), int(v.shape[-1])
        if Ek != self.E:
            raise ValueError(f"key: embedding size {Ek} does not match query's E = {self.E} {shapes}")
        if Sv != self.S:
            raise ValueError(f"value: {Sv} positions, but key has S = {self.S} {shapes}")

        rank = max(q.ndim, k.ndim, v.ndim)
        lead = [(1,) * (rank - x.ndim) + tuple(int(d) for d in x.shape[:-2]) for x in (q, k, v)]
        self.has_heads = rank >= 4 or (rank == 3 and enable_gqa)
        if self.has_heads:
            self.batch = _broadcast([ld[:-1] for ld in lead], "query, key, value: batch dimensions")
            Hq, Hk, Hv = (ld[-1] for ld in lead)
        else:
            self.batch = _broadcast(lead, "query, key, value: batch dimensions")
            Hq = Hk = Hv = 1

        if enable_gqa:
            if Hk != Hv:
                raise ValueError(
                    f"key, value: enable_gqa needs as many key heads as value heads, got {Hk} and {Hv} {shapes}"
                )
            if (Hk == 0 and Hq != 0) or (Hk != 0 and Hq % Hk != 0):
                raise ValueError(f"query: {Hq} heads is not a multiple of key's {Hk} heads (enable_gqa=True) {shapes}")
            self.Hq, self.Hkv = Hq, Hk
        else:
            heads = {Hq, Hk, Hv} - {1}
            if len(heads) > 1:
                raise ValueError(
                    f"key: {Hk} heads do not match query's {Hq} heads; pass enable_gqa=True for "
                    f"grouped-query attention {shapes}"
                )
            self.Hq = heads.pop() if heads else 1
            # Equal key and value heads stay as they are: one shared head is attnkit's MQA.
            self.Hkv = Hk if Hk == Hv else self.Hq
        self.B = math.prod(self.batch)
        self.out_lead = self.batch + ((self.Hq,) if self.has_heads else ())

    def to4(self, kind, x, heads, rows, width):
        """x [..., rows, width] as [B, heads, rows, width], broadcasting its leading dimensions."""
        target = (self.B, heads, rows, width)
        if tuple(x.shape) == target:  # already attnkit's form: no view to make
            return x
        full = self.batch + ((heads,) if self.has_heads else ()) + (rows, width)
        x = kind.reshape(x, (1,) * (len(full) - x.ndim) + tuple(x.shape))
        x = kind.broadcast_to(x, full)
        return kind.reshape(x, target)

    def mask4(self, kind, mask):
        """attn_mask broadcastable to [..., L, S] as attnkit's [B|1, Hq|1, L|1, S|1]."""
        target = self.out_lead + (self.L, self.S)
        shape = tuple(int(d) for d in mask.shape)
        extra = len(shape) - len(target)
        if extra > 0 and all(d == 1 for d in shape[:extra]):
            shape = shape[extra:]
        padded = (1,) * (len(target) - len(shape)) + shape
        if len(padded) != len(target) or any(m not in (1, t) for m, t in zip(padded, target, strict=True)):
            raise ValueError(
                f"attn_mask: shape {list(mask.shape)} does not broadcast to the attention scores' "
                f"shape {list(target)} = [..., L, S] (each dimension must match or be 1)"
            )
        mask = kind.reshape(mask, padded)
        n_batch = len(self.batch)
        heads = padded[n_batch] if self.has_heads else 1
        rows, cols = padded[-2], padded[-1]
        if all(d == 1 for d in padded[:n_batch]):
            return kind.reshape(mask, (1, heads, rows, cols))
        full = self.batch + ((heads,) if self.has_heads else ()) + (rows, cols)
        return kind.reshape(kind.broadcast_to(mask, full), (self.B, heads, rows, cols))


# ---- one call, prepared ------------------------------------------------------------------------


class _Call:
    """One attention call, checked and brought to attnkit's [B, H, n, d] views: what the forward
    kernel needs, and what the backward (attnkit.torch) needs to run the same call again."""

    def __init__(self, kind, layout, q4, k4, v4, mask4, options):
        self.kind, self.layout = kind, layout
        self.q4, self.k4, self.v4, self.mask4 = q4, k4, v4, mask4
        self.options = options  # keyword arguments of _core.sdpa and _core.sdpa_backward

    def forward(self, *, lse=False, probs=False):
        """Runs the kernel. Returns the caller-shaped (out [..., Hq, L, Ev], lse [..., Hq, L] float32
        or None, probs [..., Hq, L, S] or None): probs are the weights before dropout, float64 for
        float64 inputs, else float32. Each is allocated in the caller's shape, and the kernel writes
        a [B, H, ...] view of it, so what is returned owns its memory."""
        kind, layout = self.kind, self.layout
        out = kind.empty(layout.out_lead + (layout.L, layout.Ev), like=self.q4)
        lse_rows = kind.empty_float32(layout.out_lead + (layout.L,), like=self.q4) if lse else None
        weights = None
        if probs:
            shape = layout.out_lead + (layout.L, layout.S)
            f64 = kind.dtype_name(self.q4) == "float64"
            weights = kind.empty(shape, like=self.q4) if f64 else kind.empty_float32(shape, like=self.q4)
        _core.sdpa(
            self.q4, self.k4, self.v4, self.out4(out),
            lse=None if lse_rows is None else self.rows3(lse_rows),
            probs=None if weights is None else self.scores4(weights),
            attn_mask=self.mask4, **self.options,
        )  # fmt: skip
        return out, lse_rows, weights

    # Caller-shaped outputs (and their gradients) as attnkit's [B, H, ...] views.
    def out4(self, out):
        layout = self.layout
        return self.kind.reshape(out, (layout.B, layout.Hq, layout.L, layout.Ev))

    def rows3(self, rows):
        layout = self.layout
        return self.kind.reshape(rows, (layout.B, layout.Hq, layout.L))

    def scores4(self, scores):
        layout = self.layout
        return self.kind.reshape(scores, (layout.B, layout.Hq, layout.L, layout.S))


def _prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal_alignment,
             window, alibi_slopes, softcap, key_lengths, seed, sinks=None):
    """Checks every argument of scaled_dot_product_attention and returns its _Call."""
    kind, (query, key, value) = _float_arrays({"query": query, "key": key, "value": value}, one_dtype=True)

    if causal_alignment not in ("top_left", "bottom_right"):
        raise ValueError(f'causal_alignment: expected "top_left" or "bottom_right", got {causal_alignment!r}')
    if not is_causal and causal_alignment != "top_left":
        raise ValueError("causal_alignment: applies with is_causal=True only")
    causal = causal_alignment if is_causal else "none"
    dropout_p = _float(dropout_p, "dropout_p")
    scale = _float_or_none(scale, "scale")
    softcap = _float_or_none(softcap, "softcap") or 0.0
    window_left, window_right = _window(window)
    seed = _seed(seed, dropout_p)

    layout = _Layout(query, key, value, bool(enable_gqa))
    q4 = layout.to4(kind, query, layout.Hq, layout.L, layout.E)
    k4 = layout.to4(kind, key, layout.Hkv, layout.S, layout.E)
    v4 = layout.to4(kind, value, layout.Hkv, layout.S, layout.Ev)

    mask4 = None
    if attn_mask is not None:
        if not kind.owns(attn_mask):
            raise TypeError(f"attn_mask: expected a {kind.name} like query, got {_type_name(attn_mask)}")
        if not kind.is_bool(attn_mask) and kind.dtype_name(attn_mask) not in kind.float_dtypes:
            raise TypeError(
                f"attn_mask: dtype {kind.dtype_name(attn_mask)} is neither bool (True = take part in "
                "attention) nor floating (added to the scores)"
            )
        mask4 = layout.mask4(kind, kind.prepare(attn_mask, "attn_mask"))

    alibi = _alibi_slopes(alibi_slopes, layout.Hq)
    lengths = _key_lengths(key_lengths, layout.B)

    options = dict(
        scale=scale, causal=causal, window_left=window_left, window_right=window_right, alibi_slopes=alibi,
        softcap=softcap, key_lengths=lengths, dropout_p=dropout_p, seed=seed, sinks=_sinks(sinks, layout.Hq),
    )  # fmt: skip
    return _Call(kind, layout, q4, k4, v4, mask4, options)


# ---- the function ------------------------------------------------------------------------------


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    causal_alignment="top_left",
    window=None,
    alibi_slopes=None,
    softcap=None,
    key_lengths=None,
    seed=None,
    sinks=None,
    return_lse=False,
):
    """Exact scaled dot-product attention, ``softmax(query·keyᵀ·scale + bias)·value``.

    The positional signature and meaning of ``torch.nn.functional.scaled_dot_product_attention``,
    plus attnkit's extras as keyword arguments. Takes numpy arrays or torch CPU tensors (not mixed)
    of any strides, read in place without a copy, and returns the same kind: a new contiguous array
    or tensor of the query's dtype.

    Shapes (leading dimensions broadcast, as in torch):
        query ``[..., Hq, L, E]``, key ``[..., Hkv, S, E]``, value ``[..., Hkv, S, Ev]``
        → output ``[..., Hq, L, Ev]``.
    For rank ≥ 4, dimension −3 holds the heads and the dimensions before it the batch. A 3-D
    input ``[N, L, E]`` is N batch entries of one head (with ``enable_gqa``, N counts heads, as
    torch groups over dimension −3); a 2-D input ``[L, E]`` is one sequence.

    Dtypes: float32, float16 and bfloat16 (torch only: numpy has no bfloat16) run attnkit's fast
    kernel, which computes in float32 and rounds the output once; float64 runs the float64
    reference kernel. query, key and value share one dtype.

    Args:
        query, key, value: the inputs, all numpy arrays or all torch CPU tensors. When a torch
            input (or a floating attn_mask) requires grad and grad mode is on, the call goes through
            attnkit.torch's autograd Function: ``backward()`` runs attnkit's backward kernel.
        attn_mask: broadcastable to ``[..., L, S]``: bool, where True means the key takes part in
            attention (torch's meaning), or floating (any float dtype), added to the scores.
            ``-inf`` masks a key outright.
        dropout_p: probability of dropping each attention weight, in [0, 1); kept weights are
            scaled by 1/(1 − dropout_p). Dropout is applied whenever ``dropout_p > 0``, as in torch.
        is_causal: key j is visible to query i when j ≤ i (``causal_alignment="top_left"``, torch's
            meaning) or j ≤ i + S − L (``"bottom_right"``). May be combined with ``attn_mask``.
        scale: the factor applied to ``query·keyᵀ``; default ``1/sqrt(E)``; must be finite and > 0.
        enable_gqa: grouped-query attention: Hq must be a multiple of Hkv, and query head h reads
            key/value head ``h // (Hq // Hkv)``. Without it, head counts must match or be 1.

    Keyword-only extras:
        causal_alignment: ``"top_left"`` (default) or ``"bottom_right"`` (FlashAttention ≥ 2.1,
            KV-cache decoding; with L > S the first L − S rows see no key). Only with
            ``is_causal=True``; it also sets the aligned position i' that ``window`` and
            ``alibi_slopes`` use: i' = i + S − L under bottom-right alignment, i otherwise.
        window: ``(left, right)``: keys ``i' − left ≤ j ≤ i' + right`` stay visible; a side of
            ``-1`` or ``None`` is unbounded.
        alibi_slopes: one float per query head (Hq of them; 1 when there is no head dimension):
            subtracts ``slope_h·|i' − j|`` from the scores. Used as float32.
        softcap: ``softcap·tanh(s/softcap)`` on the scaled scores; ``None`` or 0 is off.
        key_lengths: one int per batch entry (the batch dimensions flattened, C order, or an
            array of the batch shape): keys at and after ``key_lengths[b]`` are padding.
        seed: the dropout stream (an int in [0, 2**64)): the same seed keeps the same weights, on
            any thread count. ``None`` (the default) draws a fresh seed from ``os.urandom`` on every
            call, like torch's unseeded dropout. attnkit's generator (Philox, keyed by seed, batch,
            head, query and key) is not torch's: the same seed does not give torch's mask.
        sinks: learned attention sinks, one logit per query head (gpt-oss's ``s_aux``): each
            joins its head's softmax denominator (and lse) and weights no value, so a row's weights
            sum to less than 1. A torch tensor that requires grad gets its gradient. Used as
            float32; not taken with nested tensors.
        return_lse: also return the log-sum-exp of each row's final scores, float32
            ``[..., Hq, L]`` (−inf for a row with no visible key, or its sink): returns
            ``(output, lse)``.

    The scores are built in this order: ``s = query·keyᵀ·scale``; softcap; − ALiBi; + float mask;
    −inf where the key is not visible (bool mask False, causal, window, key_lengths).

    Nested tensors: torch nested tensors of layout ``torch.jagged``, ``[B, H, j, D]`` (ragged
    dimension 2, as torch's SDPA takes them), run as one packed call (``attnkit.varlen_attention``):
    each sequence attends to its own keys, with every option applied per sequence; the output (and
    lse) are nested tensors of the same layout. attn_mask and key_lengths are not taken then.

    Where attnkit differs from torch, on purpose:
        * A row with no visible key (fully masked, ``key_lengths[b] = 0``, S = 0, early rows under
          bottom-right alignment) gives zeros (and lse −inf), never NaN. torch gives NaN there
          before version 2.5 and zeros since.
        * A masked key contributes nothing, not even through NaN or inf in its key or value
          vectors, where torch's ``0·NaN`` makes the row NaN. Masking a key gives exactly the
          result of removing it.
        * ``attn_mask`` and ``is_causal`` may be given together (torch refuses); ``scale`` must be
          > 0 and ``dropout_p`` < 1 (torch takes any scale and dropout_p = 1).

    Raises:
        TypeError: an argument of the wrong type or dtype; ValueError: wrong shapes or option
        values. Messages name the argument; errors from the C++ library keep its message and carry
        its code in ``.code`` (e.g. ``"invalid_argument"``).

    The GIL is released while the kernel runs; ``attnkit.set_num_threads`` sets its threads.
    """
    if _is_nested(query):
        if sinks is not None:
            raise ValueError("sinks: not taken with nested tensors; attnkit.varlen_attention takes them on the packed values")
        # packed sequences: one varlen call
        return jagged_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal_alignment,
                                window, alibi_slopes, softcap, key_lengths, seed, return_lse)  # fmt: skip
    call = _prepare(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal_alignment, window,
        alibi_slopes, softcap, key_lengths, seed, sinks,
    )  # fmt: skip
    out, lse, _ = _run(call, query, key, value, attn_mask, alibi_slopes, sinks, lse=return_lse)
    return (out, lse) if return_lse else out


def _run(call, query, key, value, attn_mask=None, alibi_slopes=None, sinks=None, *, lse=False, probs=False):
    """Runs a prepared call: through attnkit.torch's autograd Function when autograd records it (a
    torch input that requires grad, grad mode on), else the kernel alone. Returns (out, lse or None,
    probs or None); the autograd path always gives lse."""
    if _needs_grad(call.kind, (query, key, value, attn_mask, alibi_slopes, sinks)):
        # Imported here, not at the top, so that `import attnkit` works without torch: _autograd
        # imports torch, which the caller has already (the inputs are torch tensors).
        from . import _autograd

        return _autograd.attention(call, query, key, value, attn_mask, alibi_slopes, sinks, probs=probs)
    return call.forward(lse=lse, probs=probs)


def _is_nested(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and x.is_nested


def _needs_grad(kind, tensors):
    """Whether autograd records this call: torch tensors, grad mode on, and one requires grad."""
    if not isinstance(kind, _Torch) or not kind.torch.is_grad_enabled():
        return False
    return any(isinstance(x, kind.torch.Tensor) and x.requires_grad for x in tensors)
