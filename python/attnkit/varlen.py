"""attnkit.varlen: attention over packed variable-length batches, FlashAttention's varlen API.

B sequences of different lengths travel in one call without padding: their queries are stacked
along the first dimension of ``q`` and their keys and values along that of ``k`` and ``v``;
``cu_seqlens_q`` and ``cu_seqlens_k`` (``[B + 1]``, from 0, non-decreasing, ending at the totals)
say where each sequence starts. Each sequence attends only to its own keys.

The checks and shapes are made here; one C++ call (``attnkit._core.varlen``) runs the kernel
with the GIL released. With torch tensors that require grad, the call goes through an autograd
Function whose backward runs attnkit's backward kernel (``attnkit.torch``).
"""

from __future__ import annotations

import numpy as np

from . import _core
from ._args import _alibi_slopes, _float, _float_arrays, _float_or_none, _seed, _sinks, _to_numpy, _type_name, _window

__all__ = ["varlen_attention"]


def _offsets(kind, offsets, name, total, side):
    """cu_seqlens as the array the kernel reads (int32 or int64, rank 1), and the sequences' lengths
    for the checks made here."""
    if kind.owns(offsets):
        if kind.dtype_name(offsets) not in ("int32", "int64"):
            raise TypeError(f"{name}: expected int32 or int64 offsets, got dtype {kind.dtype_name(offsets)}")
        array = kind.prepare(offsets, name)
    else:
        try:
            array = np.asarray(offsets)
        except (TypeError, ValueError):
            raise TypeError(f"{name}: expected a sequence of ints, got {_type_name(offsets)}") from None
        if array.size and array.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected ints, got dtype {array.dtype}")
        array = np.ascontiguousarray(array, dtype=np.int64)
    host = _to_numpy(array).astype(np.int64, copy=False)
    if host.ndim != 1 or host.size == 0:
        raise ValueError(f"{name}: expected [B + 1] offsets (at least the leading 0), got shape {list(host.shape)}")
    # The library checks the offsets again and names the offending index; these checks come first
    # because the lengths are needed here (max_seqlen, the alignment rule below).
    lengths = np.diff(host)
    if host[0] != 0:
        raise ValueError(f"{name}[0]: the first offset must be 0, got {int(host[0])}")
    if (lengths < 0).any():
        b = int(np.argmax(lengths < 0)) + 1
        raise ValueError(f"{name}[{b}]: {int(host[b])} is less than {name}[{b - 1}] = {int(host[b - 1])} (offsets are non-decreasing)")
    if int(host[-1]) != total:
        raise ValueError(f"{name}[{host.size - 1}]: the last offset, {int(host[-1])}, must be the total, {side}'s {total} packed rows")
    return array, lengths


def _check_max_seqlen(given, lengths, name):
    """max_seqlen is only a hint in FlashAttention (it sizes the GPU grid); here it is checked."""
    actual = int(lengths.max()) if lengths.size else 0
    if given is not None and int(given) < actual:
        raise ValueError(f"{name}: {int(given)} is shorter than the longest sequence, {actual}")


def _mask4(kind, mask):
    """attn_mask broadcastable to [B, Hq, max_n, max_m] as the library's rank-4 form."""
    if not kind.owns(mask):
        raise TypeError(f"attn_mask: expected a {kind.name} like q, got {_type_name(mask)}")
    if not kind.is_bool(mask) and kind.dtype_name(mask) not in kind.float_dtypes:
        raise TypeError(f"attn_mask: dtype {kind.dtype_name(mask)} is neither bool (True = take part) nor floating (added)")
    shape = tuple(int(d) for d in mask.shape)
    if len(shape) > 4:
        raise ValueError(f"attn_mask: expected at most 4 dimensions [B, Hq, max_n, max_m], got shape {list(shape)}")
    mask = kind.prepare(mask, "attn_mask")
    return kind.reshape(mask, (1,) * (4 - len(shape)) + shape)  # the library checks the broadcast


class _VarlenCall:
    """One packed call, checked: what the forward needs, and what the backward needs to run it again."""

    def __init__(self, kind, q, k, v, cu_q, cu_k, mask4, options):
        self.kind, self.q, self.k, self.v, self.cu_q, self.cu_k, self.mask4 = kind, q, k, v, cu_q, cu_k, mask4
        self.options = options  # keyword arguments of _core.varlen and _core.varlen_backward

    def forward(self):
        """(out [total_q, Hq, d_v], lse [Hq, total_q] float32)."""
        kind, q = self.kind, self.q
        out = kind.empty((q.shape[0], q.shape[1], self.v.shape[2]), like=q)
        lse = kind.empty_float32((q.shape[1], q.shape[0]), like=q)
        _core.varlen(q, self.k, self.v, self.cu_q, self.cu_k, out, lse=lse, attn_mask=self.mask4, **self.options)
        return out, lse

    def backward(self, out, d_out, lse, d_sinks=None):
        """(dq, dk, dv) of the packed inputs' shapes; d_sinks [Hq] float32, if given, gets the sinks'
        gradient."""
        kind = self.kind
        dq, dk, dv = (kind.empty(tuple(x.shape), like=x) for x in (self.q, self.k, self.v))
        _core.varlen_backward(self.q, self.k, self.v, self.cu_q, self.cu_k, out, d_out, lse, dq, dk, dv,
                              attn_mask=self.mask4, d_sinks=d_sinks, **self.options)  # fmt: skip
        return dq, dk, dv


def _prepare(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
             window_size, alibi_slopes, softcap, attn_mask, seed, *, flash_alignment=True, sinks=None):
    """Checks a packed call. causal: "none", "top_left" or "bottom_right". flash_alignment: the
    caller means FlashAttention's window and ALiBi, aligned bottom-right even without causal."""
    kind, (q, k, v) = _float_arrays({"q": q, "k": k, "v": v}, one_dtype=True)
    for name, x, layout in (("q", q, "[total_q, Hq, d]"), ("k", k, "[total_k, Hkv, d]"), ("v", v, "[total_k, Hkv, d_v]")):
        if x.ndim != 3:
            raise ValueError(f"{name}: expected 3 dimensions {layout} (packed sequences), got shape {list(x.shape)}")
    cu_q, q_lengths = _offsets(kind, cu_seqlens_q, "cu_seqlens_q", int(q.shape[0]), "q")
    cu_k, k_lengths = _offsets(kind, cu_seqlens_k, "cu_seqlens_k", int(k.shape[0]), "k")
    if q_lengths.size != k_lengths.size:
        raise ValueError(f"cu_seqlens_q, cu_seqlens_k: {q_lengths.size + 1} and {k_lengths.size + 1} offsets; both list B + 1")
    _check_max_seqlen(max_seqlen_q, q_lengths, "max_seqlen_q")
    _check_max_seqlen(max_seqlen_k, k_lengths, "max_seqlen_k")

    left, right = _window(window_size)
    slopes = _alibi_slopes(alibi_slopes, int(q.shape[1]))
    if flash_alignment and causal == "none" and (left >= 0 or right >= 0 or slopes) and (q_lengths != k_lengths).any():
        # FlashAttention places the window and ALiBi around i + seqlen_k − seqlen_q even without
        # causal; attnkit aligns them bottom-right only with causal. They agree when each sequence
        # has as many queries as keys; otherwise refuse rather than answer differently.
        b = int(np.argmax(q_lengths != k_lengths))
        raise ValueError(
            f"window_size, alibi_slopes: with causal=False, sequence {b} has {int(q_lengths[b])} queries but "
            f"{int(k_lengths[b])} keys; FlashAttention aligns the window and ALiBi bottom-right there and attnkit "
            "only with causal=True (equal lengths agree)"
        )
    dropout_p = _float(dropout_p, "dropout_p")
    mask4 = None if attn_mask is None else _mask4(kind, attn_mask)
    options = dict(
        scale=_float_or_none(softmax_scale, "softmax_scale"), causal=causal, window_left=left, window_right=right,
        alibi_slopes=slopes, softcap=_float_or_none(softcap, "softcap") or 0.0, dropout_p=dropout_p,
        seed=_seed(seed, dropout_p), sinks=_sinks(sinks, int(q.shape[1])),
    )  # fmt: skip
    return _VarlenCall(kind, q, k, v, cu_q, cu_k, mask4, options)


def varlen_attention(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q=None,
    max_seqlen_k=None,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    alibi_slopes=None,
    softcap=0.0,
    return_lse=False,
    *,
    attn_mask=None,
    seed=None,
    sinks=None,
):
    """Attention of each packed sequence over its own keys: ``flash_attn_varlen_func``'s arguments.

    Shapes: ``q [total_q, Hq, d]``, ``k [total_k, Hkv, d]``, ``v [total_k, Hkv, d_v]`` → output
    ``[total_q, Hq, d_v]``; sequence b's queries are rows ``cu_seqlens_q[b] : cu_seqlens_q[b + 1]``
    of q, its keys and values rows ``cu_seqlens_k[b] : cu_seqlens_k[b + 1]`` of k and v. Hq must be
    a multiple of Hkv (GQA, MQA). numpy arrays or torch CPU tensors (not mixed), any strides, read
    in place; float32, float16, bfloat16 (torch) run the fast kernel, float64 the reference.

    Args (FlashAttention's names and meanings):
        cu_seqlens_q, cu_seqlens_k: ``[B + 1]`` int32 or int64 offsets (arrays, tensors or lists),
            from 0, non-decreasing, ending at total_q and total_k. A sequence may be empty on either
            side: no keys gives its queries zero output and lse −inf.
        max_seqlen_q, max_seqlen_k: the longest sequence's lengths; optional (computed from the
            offsets), and an error when shorter than the longest.
        dropout_p: probability of dropping each attention weight, in [0, 1); kept ones are scaled
            by 1/(1 − dropout_p). Sequence b's dropout depends on the seed, b and its own positions,
            never on what else is packed with it.
        softmax_scale: the factor on q·kᵀ; default 1/sqrt(d).
        causal: key j is visible to query i when j ≤ i + seqlen_k − seqlen_q, per sequence
            (bottom-right alignment, FlashAttention ≥ 2.1).
        window_size: ``(left, right)``: keys within [i' − left, i' + right] of the aligned position
            i' stay visible; −1 is unbounded.
        alibi_slopes: one slope per query head: subtracts ``slope·|i' − j|``.
        softcap: ``softcap·tanh(s/softcap)`` on the scaled scores; 0 is off.
        return_lse: also return the log-sum-exp of each row, float32 ``[Hq, total_q]``.

    Keyword-only extras:
        attn_mask: per sequence and padded, broadcastable to ``[B, Hq, max_seqlen_q,
            max_seqlen_k]``: bool (True = take part) or floating (added to the scores).
        seed: the dropout stream; ``None`` draws a fresh one when dropout is on.
        sinks: learned attention sinks, one logit per query head: each joins its head's softmax
            denominator (and lse) and weights no value. A torch tensor that requires grad gets its
            gradient.

    With causal=False, FlashAttention aligns window_size and alibi_slopes bottom-right too; attnkit
    does so only with causal=True, so a call that would differ (a sequence with unequal query and
    key counts) raises ValueError instead.

    Returns ``out``, or ``(out, lse)`` with return_lse. With torch tensors that require grad (grad
    mode on), ``backward()`` runs attnkit's backward kernel; the lse it returns takes no gradient.
    """
    call = _prepare(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                    "bottom_right" if causal else "none", window_size, alibi_slopes, softcap, attn_mask, seed,
                    sinks=sinks)  # fmt: skip
    return _run(call, q, k, v, attn_mask, alibi_slopes, return_lse, sinks)


def _run(call, q, k, v, attn_mask, alibi_slopes, return_lse, sinks=None):
    """Runs a prepared call, through autograd when a torch input (the sinks included) requires grad."""
    kind = call.kind
    torch = getattr(kind, "torch", None)
    if torch is not None:
        for name, x in (("attn_mask", attn_mask), ("alibi_slopes", alibi_slopes)):
            if isinstance(x, torch.Tensor) and x.requires_grad:
                raise ValueError(f"{name}: varlen_attention computes no gradient for it; pass it detached")
    trained = [x for x in (q, k, v, sinks) if torch is not None and isinstance(x, torch.Tensor)]
    if torch is not None and torch.is_grad_enabled() and any(x.requires_grad for x in trained):
        # Imported here, not at the top, so that `import attnkit` works without torch: _autograd
        # imports torch, which the caller has already (the inputs are torch tensors).
        from . import _autograd

        out, lse = _autograd.varlen_attention_function(call, q, k, v, sinks if isinstance(sinks, torch.Tensor) else None)
    else:
        out, lse = call.forward()
    return (out, lse) if return_lse else out


# ---- torch nested tensors (jagged layout) through scaled_dot_product_attention ------------------


def jagged_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal_alignment, window,
                     alibi_slopes, softcap, key_lengths, seed, return_lse):
    """scaled_dot_product_attention on torch nested tensors of layout torch.jagged, [B, H, j, D]
    (ragged dimension 2, as torch's SDPA takes them): each sequence attends to its own keys, run as
    one packed call on the tensors' values. Returns nested tensors of the same layout."""
    import torch  # the caller has it: query is a torch tensor

    for name, x in (("query", query), ("key", key), ("value", value)):
        if not (isinstance(x, torch.Tensor) and x.is_nested and x.layout == torch.jagged):
            raise TypeError(f"{name}: with a nested query, every input is a nested tensor of layout torch.jagged, "
                            f"got {_type_name(x)}" + (f" of layout {x.layout}" if isinstance(x, torch.Tensor) else ""))
        if x.dim() != 4 or x._ragged_idx != 2:
            raise ValueError(f"{name}: expected a jagged nested tensor [B, H, j, D] with the ragged dimension 2 (as "
                             f"torch's SDPA takes them: nt.transpose(1, 2) of [B, j, H, D]), got shape {list(x.shape)}")
    if attn_mask is not None:
        raise ValueError("attn_mask: not taken with nested tensors (torch's SDPA refuses it too); each sequence's "
                         "own length already masks the others")
    if key_lengths is not None:
        raise ValueError("key_lengths: not taken with nested tensors; each sequence carries its own length")
    if key.offsets() is not value.offsets() and not torch.equal(key.offsets(), value.offsets()):
        raise ValueError("key, value: their sequences must have the same lengths (offsets)")
    if query.size(0) != key.size(0):
        raise ValueError(f"query, key: {query.size(0)} and {key.size(0)} sequences; each query sequence attends to one key sequence")
    if causal_alignment not in ("top_left", "bottom_right"):
        raise ValueError(f'causal_alignment: expected "top_left" or "bottom_right", got {causal_alignment!r}')
    if not is_causal and causal_alignment != "top_left":
        raise ValueError("causal_alignment: applies with is_causal=True only")
    Hq, Hk, Hv = query.size(1), key.size(1), value.size(1)
    if Hk != Hv:
        raise ValueError(f"key, value: {Hk} and {Hv} heads; key and value have the same heads")
    if not enable_gqa and Hq != Hk:
        raise ValueError(f"key: {Hk} heads do not match query's {Hq} heads; pass enable_gqa=True for grouped-query attention")

    # values() of a [B, H, j, D] nested tensor is [H, total, D]: its transpose is the packed layout.
    q, k, v = (x.values().transpose(0, 1) for x in (query, key, value))
    call = _prepare(q, k, v, query.offsets(), key.offsets(), None, None, dropout_p, scale,
                    causal_alignment if is_causal else "none", window, alibi_slopes, softcap or 0.0, None, seed,
                    flash_alignment=False)  # fmt: skip
    out, lse = _run(call, q, k, v, None, alibi_slopes, True)
    out = torch.nested.nested_tensor_from_jagged(out, query.offsets()).transpose(1, 2)
    if not return_lse:
        return out
    return out, torch.nested.nested_tensor_from_jagged(lse.transpose(0, 1), query.offsets()).transpose(1, 2)
