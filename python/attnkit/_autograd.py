"""The torch autograd Functions behind ``attnkit.torch``, whose docstring says what they compute.

``attnkit.scaled_dot_product_attention`` and ``attnkit.varlen_attention`` come here when a torch
input requires grad and grad mode is on. This module imports torch, so they import it inside the
call, once a torch tensor shows torch is there; it imports none of attnkit's Python front ends,
which import it.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from . import _core

__all__ = ["Attention", "attention", "VarlenAttention", "varlen_attention_function", "dropout_seed"]


class Attention(torch.autograd.Function):
    """One attention call (a prepared ``functional._Call``) as an autograd node: outputs
    (out, lse, probs), inputs (query, key, value, attn_mask, sinks). Use ``attention()``."""

    @staticmethod
    def forward(ctx, call, want_probs, query, key, value, attn_mask, sinks):
        """Runs the call's forward, keeping the output and log-sum-exp for the backward."""
        out, lse, probs = call.forward(lse=True, probs=want_probs)
        ctx.call = call
        ctx.save_for_backward(out, lse, probs)
        ctx.shapes = tuple(None if x is None else tuple(x.shape) for x in (query, key, value, attn_mask))
        ctx.dtypes = tuple(None if x is None else x.dtype for x in (query, key, value, attn_mask))
        ctx.sinks_dtype = None if sinks is None else sinks.dtype
        return out, lse, probs

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse, d_probs):
        """attnkit's backward kernel for q, k and v; the gradients through the log-sum-exp, the
        weights and a floating mask are added with torch operations when they are asked for."""
        call = ctx.call
        layout = call.layout
        out, lse, probs = ctx.saved_tensors
        q_shape, k_shape, v_shape, mask_shape = ctx.shapes
        dtype = ctx.dtypes[0]
        needs_mask, needs_sinks = ctx.needs_input_grad[5], ctx.needs_input_grad[6]

        out4, lse3 = call.out4(out), call.rows3(lse)
        d_out4 = call.out4(torch.zeros_like(out) if d_out is None else d_out)
        dq4 = torch.empty((layout.B, layout.Hq, layout.L, layout.E), dtype=dtype)
        dk4 = torch.empty((layout.B, layout.Hkv, layout.S, layout.E), dtype=dtype)
        dv4 = torch.empty((layout.B, layout.Hkv, layout.S, layout.Ev), dtype=dtype)
        d_sinks = torch.empty(layout.Hq, dtype=torch.float32) if needs_sinks else None
        _core.sdpa_backward(call.q4, call.k4, call.v4, out4, d_out4, lse3, dq4, dk4, dv4,
                            attn_mask=call.mask4, d_sinks=d_sinks, **call.options)  # fmt: skip

        d_mask = None
        extra_lse = d_lse is not None and bool(d_lse.any())
        extra_probs = d_probs is not None and bool(d_probs.any())
        weights_needed = (extra_lse or extra_probs or needs_mask) and dq4.numel() and dk4.numel()
        if weights_needed or (needs_sinks and extra_probs):  # the forward's weights, recomputed once
            weights = probs if probs is not None else call.forward(probs=True)[2]
        if needs_sinks and (extra_lse or extra_probs):
            d_sinks = d_sinks + _sink_gradients_through_extras(
                call, weights if extra_probs else None, lse3,
                call.rows3(d_lse) if extra_lse else None, call.scores4(d_probs) if extra_probs else None,
            )  # fmt: skip
        if weights_needed:
            dq4, dk4, d_scores = _weight_gradients(
                call, call.scores4(weights), out4, d_out4,
                call.rows3(d_lse) if extra_lse else None,
                call.scores4(d_probs) if extra_probs else None,
                dq4, dk4, needs_mask,
            )  # fmt: skip
            if needs_mask:
                d_mask = _sum_to(d_scores.reshape(layout.out_lead + (layout.L, layout.S)), mask_shape)
                d_mask = d_mask.to(ctx.dtypes[3])
        elif needs_mask:
            d_mask = torch.zeros(mask_shape, dtype=ctx.dtypes[3])

        heads_q = (layout.Hq,) if layout.has_heads else ()
        heads_kv = (layout.Hkv,) if layout.has_heads else ()
        dq = _sum_to(dq4.reshape(layout.batch + heads_q + (layout.L, layout.E)), q_shape)
        dk = _sum_to(dk4.reshape(layout.batch + heads_kv + (layout.S, layout.E)), k_shape)
        dv = _sum_to(dv4.reshape(layout.batch + heads_kv + (layout.S, layout.Ev)), v_shape)
        if d_sinks is not None:
            d_sinks = d_sinks.to(ctx.sinks_dtype)
        return None, None, dq, dk, dv, d_mask, d_sinks


def _sink_gradients_through_extras(call, probs, lse3, d_lse3, d_probs4):
    """∂L/∂sinks through the log-sum-exp and the weights, which the kernel does not see: with
    p_sink = e^(sink − lse), ∂lse/∂sink = p_sink and ∂P_ij/∂sink = −P_ij · p_sink, summed over each
    head's rows. float64 arithmetic, returned as float32 [Hq]."""
    sinks = torch.tensor(call.options["sinks"], dtype=torch.float64).reshape(1, -1, 1)
    p_sink = torch.exp(sinks - lse3.to(torch.float64))  # [B, Hq, L]
    total = torch.zeros_like(p_sink)
    if d_lse3 is not None:
        total += d_lse3.to(torch.float64) * p_sink
    if d_probs4 is not None:
        weights = call.scores4(probs).to(torch.float64)
        total -= (d_probs4.to(torch.float64) * weights).sum(-1) * p_sink
    return total.sum((0, 2)).to(torch.float32)


def _sum_to(grad, shape):
    """grad, of a tensor broadcast to grad's shape, summed back to `shape` (torch's rule)."""
    shape = tuple(shape)
    if tuple(grad.shape) == shape:
        return grad
    ones = 0  # leading size-1 dimensions beyond grad's rank (a mask may carry them)
    while len(shape) - ones > grad.dim() and shape[ones] == 1:
        ones += 1
    return grad.sum_to_size(shape[ones:]).reshape(shape)


def _weight_gradients(call, probs4, out4, d_out4, d_lse3, d_probs4, dq4, dk4, needs_mask):
    """The gradients through the weights P = softmax(s) that the kernel does not see: of the
    log-sum-exp (∂lse/∂s = P) and of P itself (∂L/∂s = P∘(dP − rowsum(dP∘P))), added to dq and dk
    through s = softcap(scale·q·kᵀ) − ALiBi + mask; and, when the mask needs its gradient, the
    whole ∂L/∂s, which is the mask's. Computed in float64 for float64 inputs, else float32."""
    layout = call.layout
    compute = torch.float64 if dq4.dtype == torch.float64 else torch.float32
    group = layout.Hq // layout.Hkv
    q = call.q4.to(compute)
    k = call.k4.to(compute).repeat_interleave(group, dim=1)
    p = probs4.to(compute)

    d_s = torch.zeros_like(p)  # ∂L/∂s through the extra outputs only
    if d_lse3 is not None:
        d_s += p * d_lse3.to(compute).unsqueeze(-1)
    if d_probs4 is not None:
        d_p = d_probs4.to(compute)
        d_s += p * (d_p - (d_p * p).sum(-1, keepdim=True))

    d_scores = None
    if needs_mask:
        # The kernel's share, P∘(dO·vᵀ − rowsum(dO∘O)), which it never writes out (no dropout here).
        v = call.v4.to(compute).repeat_interleave(group, dim=1)
        d_out = d_out4.to(compute)
        d_p = d_out @ v.transpose(-1, -2)
        rows = (d_out * out4.to(compute)).sum(-1, keepdim=True)
        d_scores = d_s + torch.where(p == 0, 0.0, p * (d_p - rows))

    if d_lse3 is not None or d_probs4 is not None:
        scale = call.options["scale"] or 1.0 / math.sqrt(layout.E)
        d_raw = d_s  # ∂L/∂(scale·q·kᵀ) through the extra outputs
        softcap = call.options["softcap"]
        if softcap:
            t = torch.tanh(scale * (q @ k.transpose(-1, -2)) / softcap)
            d_raw = torch.where(d_s == 0, 0.0, d_s * (1 - t * t))
        dq4 = (dq4.to(compute) + scale * (d_raw @ k)).to(dq4.dtype)
        d_k = scale * (d_raw.transpose(-1, -2) @ q)
        d_k = d_k.reshape(layout.B, layout.Hkv, group, layout.S, layout.E).sum(2)
        dk4 = (dk4.to(compute) + d_k).to(dk4.dtype)
    return dq4, dk4, d_scores


def dropout_seed(dropout_p):
    """A seed for attnkit's dropout stream drawn from torch's generator, so that torch.manual_seed
    makes a module's dropout repeatable; None without dropout."""
    return int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else None


def attention(call, query, key, value, attn_mask, alibi_slopes, sinks=None, *, probs=False):
    """Runs a prepared call through the autograd Function: (out, lse, probs or None)."""
    if not isinstance(sinks, torch.Tensor):
        sinks = None  # numbers or an array: constants
    if isinstance(alibi_slopes, torch.Tensor) and alibi_slopes.requires_grad:
        raise ValueError("alibi_slopes: attnkit computes no gradient for the slopes; pass them detached")
    mask_needs_grad = isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad
    if mask_needs_grad and call.options["dropout_p"] > 0:
        raise ValueError(
            "attn_mask: its gradient with dropout_p > 0 needs the dropout pattern, which attnkit's "
            "kernel does not expose; detach the mask or set dropout_p=0"
        )
    return Attention.apply(call, probs, query, key, value, attn_mask, sinks)


class VarlenAttention(torch.autograd.Function):
    """One packed variable-length call (a prepared ``varlen._VarlenCall``) as an autograd node:
    outputs (out, lse), inputs (q, k, v, sinks). lse is returned without a gradient, as
    FlashAttention's."""

    @staticmethod
    def forward(ctx, call, q, k, v, sinks):
        """Runs the packed forward, keeping the output and log-sum-exp for the backward."""
        out, lse = call.forward()
        ctx.call = call
        ctx.sinks_dtype = None if sinks is None else sinks.dtype
        ctx.save_for_backward(out, lse)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse):
        """attnkit's packed backward (``varlen_backward``), with the sinks' gradient when they need
        one; the lse takes no gradient."""
        out, lse = ctx.saved_tensors
        d_sinks = torch.empty(out.shape[1], dtype=torch.float32) if ctx.needs_input_grad[4] else None
        dq, dk, dv = ctx.call.backward(out, torch.zeros_like(out) if d_out is None else d_out, lse, d_sinks)
        return None, dq, dk, dv, None if d_sinks is None else d_sinks.to(ctx.sinks_dtype)


def varlen_attention_function(call, q, k, v, sinks=None):
    """Runs a prepared packed call through VarlenAttention: (out, lse)."""
    return VarlenAttention.apply(call, q, k, v, sinks)
