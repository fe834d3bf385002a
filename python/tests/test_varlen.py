"""attnkit.varlen_attention (FlashAttention's varlen API) and scaled_dot_product_attention on torch
nested tensors: packed sequences against calls on each sequence alone (attnkit's own, bit for bit;
torch's, to float32 accuracy), gradients through autograd, and the errors that name their argument.

Inputs are random with a fresh seed per run (conftest.py); ATTNKIT_TEST_SEED=<n> replays a run.
"""

from __future__ import annotations

import numpy as np
import pytest

import attnkit


def random_packing(rng, sequences, max_len=40, empty=True):
    """Offsets [B + 1] of q and k for random lengths (some empty when `empty`)."""
    low = 0 if empty else 1
    n = rng.integers(low, max_len, sequences)
    m = rng.integers(low, max_len, sequences)
    return np.concatenate([[0], np.cumsum(n)]), np.concatenate([[0], np.cumsum(m)])


def alone(fn, q, k, v, cu_q, cu_k, b, **kwargs):
    """fn (attnkit's or torch's sdpa) on sequence b alone, as [1, H, n, d] views, back in packed rows."""
    s, e, ks, ke = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]

    def heads_first(x):
        return x.transpose(1, 0, 2)[None] if isinstance(x, np.ndarray) else x.transpose(0, 1)[None]

    out = fn(heads_first(q[s:e]), heads_first(k[ks:ke]), heads_first(v[ks:ke]), **kwargs)
    return out[0].transpose(1, 0, 2) if isinstance(out, np.ndarray) else out[0].transpose(0, 1)


# ---- numpy --------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("offsets_dtype", [np.int32, np.int64])
def test_each_sequence_is_bitwise_a_call_on_it_alone(rng, causal, offsets_dtype):
    cu_q, cu_k = random_packing(rng, 5)
    q = rng.standard_normal((cu_q[-1], 4, 24)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], 2, 24)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], 2, 20)).astype(np.float32)
    slopes = [0.5, 0.25, 0.125, 0.0625]
    out, lse = attnkit.varlen_attention(q, k, v, cu_q.astype(offsets_dtype), cu_k.astype(offsets_dtype), causal=causal,
                                        window_size=(7, 3) if causal else (-1, -1), alibi_slopes=slopes if causal else None,
                                        softcap=20.0, return_lse=True)  # fmt: skip
    assert out.shape == (cu_q[-1], 4, 20) and out.dtype == np.float32
    assert lse.shape == (4, cu_q[-1]) and lse.dtype == np.float32
    for b in range(len(cu_q) - 1):
        kwargs = dict(enable_gqa=True, softcap=20.0)
        if causal:
            kwargs.update(is_causal=True, causal_alignment="bottom_right", window=(7, 3), alibi_slopes=slopes)
        want = alone(attnkit.scaled_dot_product_attention, q, k, v, cu_q, cu_k, b, **kwargs)
        np.testing.assert_array_equal(out[cu_q[b] : cu_q[b + 1]], want, err_msg=f"sequence {b}")
        if cu_k[b + 1] == cu_k[b]:  # no keys: empty rows
            assert np.all(lse[:, cu_q[b] : cu_q[b + 1]] == -np.inf)
            assert np.all(out[cu_q[b] : cu_q[b + 1]] == 0)


def test_offsets_may_be_lists_and_max_seqlen_is_checked(rng):
    q = rng.standard_normal((7, 2, 8))
    k = rng.standard_normal((5, 2, 8))
    out = attnkit.varlen_attention(q, k, k, [0, 3, 7], [0, 2, 5], max_seqlen_q=4, max_seqlen_k=3)
    assert out.dtype == np.float64 and out.shape == (7, 2, 8)
    with pytest.raises(ValueError, match=r"max_seqlen_q: 3 is shorter than the longest sequence, 4"):
        attnkit.varlen_attention(q, k, k, [0, 3, 7], [0, 2, 5], max_seqlen_q=3)


@pytest.mark.parametrize(
    "cu_q, cu_k, message",
    [
        ([1, 3, 7], [0, 2, 5], r"cu_seqlens_q\[0\]: the first offset must be 0, got 1"),
        ([0, 3, 2, 7], [0, 2, 5, 5], r"cu_seqlens_q\[2\]: 2 is less than cu_seqlens_q\[1\] = 3"),
        ([0, 3, 7], [0, 2, 9], r"cu_seqlens_k\[2\]: the last offset, 9, must be the total, k's 5 packed rows"),
        ([0, 3, 7], [0, 5], r"cu_seqlens_q, cu_seqlens_k: 3 and 2 offsets"),
        ([], [0, 5], r"cu_seqlens_q: expected \[B \+ 1\] offsets"),
    ],
)
def test_bad_offsets_name_the_argument_and_index(rng, cu_q, cu_k, message):
    q = rng.standard_normal((7, 2, 8)).astype(np.float32)
    k = rng.standard_normal((5, 2, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=message):
        attnkit.varlen_attention(q, k, k, cu_q, cu_k)


def test_bad_arguments_are_refused(rng):
    q = rng.standard_normal((7, 2, 8)).astype(np.float32)
    k = rng.standard_normal((5, 2, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=r"q: expected 3 dimensions \[total_q, Hq, d\]"):
        attnkit.varlen_attention(q[None], k, k, [0, 7], [0, 5])
    with pytest.raises(TypeError, match=r"cu_seqlens_q: expected ints"):
        attnkit.varlen_attention(q, k, k, [0.0, 7.0], [0, 5])
    with pytest.raises(TypeError, match=r"cu_seqlens_k: expected int32 or int64 offsets, got dtype float32"):
        attnkit.varlen_attention(q, k, k, [0, 7], np.array([0, 5], dtype=np.float32))
    # FlashAttention aligns the window bottom-right even without causal; attnkit would not: refused.
    with pytest.raises(ValueError, match=r"window_size, alibi_slopes: with causal=False, sequence 0 has 7 queries but 5 keys"):
        attnkit.varlen_attention(q, k, k, [0, 7], [0, 5], window_size=(2, 2))
    # The library's own checks come through with their message and code.
    with pytest.raises(ValueError, match=r"k: key dimension 6 does not match q's 8") as error:
        attnkit.varlen_attention(q, k[:, :, :6], k, [0, 7], [0, 5])
    assert error.value.code == "invalid_shape"


def test_per_sequence_mask_and_dropout(rng):
    cu_q, cu_k = np.array([0, 4, 9]), np.array([0, 6, 8])
    q = rng.standard_normal((9, 2, 8)).astype(np.float32)
    k = rng.standard_normal((8, 2, 8)).astype(np.float32)
    mask = rng.random((2, 1, 5, 6)) < 0.7  # [B, 1, max_n, max_m]: each sequence's own
    out = attnkit.varlen_attention(q, k, k, cu_q, cu_k, attn_mask=mask)
    for b in range(2):
        n, m = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        want = alone(attnkit.scaled_dot_product_attention, q, k, k, cu_q, cu_k, b, attn_mask=mask[b : b + 1, :, :n, :m])
        np.testing.assert_array_equal(out[cu_q[b] : cu_q[b + 1]], want)
    first = attnkit.varlen_attention(q, k, k, cu_q, cu_k, dropout_p=0.4, seed=3)
    np.testing.assert_array_equal(first, attnkit.varlen_attention(q, k, k, cu_q, cu_k, dropout_p=0.4, seed=3))
    assert not np.array_equal(first, attnkit.varlen_attention(q, k, k, cu_q, cu_k, dropout_p=0.4, seed=4))


# ---- torch --------------------------------------------------------------------------------------


def torch_alone(torch, q, k, v, cu_q, cu_k, causal):
    """torch's SDPA on each sequence alone (bottom-right causal as a mask), packed again."""
    F = torch.nn.functional
    outs = []
    for b in range(len(cu_q) - 1):
        n, m = int(cu_q[b + 1] - cu_q[b]), int(cu_k[b + 1] - cu_k[b])
        mask = torch.ones(n, m, dtype=torch.bool).tril(m - n) if causal else None
        if causal and n > m:  # rows with no visible key: torch gives NaN or 0 by version; attnkit 0
            mask[: n - m, 0] = True
        out = alone(F.scaled_dot_product_attention, q, k, v, cu_q, cu_k, b, attn_mask=mask, enable_gqa=True)
        if causal and n > m:
            out = torch.cat([torch.zeros_like(out[: n - m]), out[n - m :]])
        outs.append(out)
    return torch.cat(outs)


@pytest.mark.parametrize("causal", [False, True])
def test_torch_matches_torch_per_sequence_with_gradients(torch, rng, causal):
    cu_q, cu_k = random_packing(rng, 4, empty=False)
    if causal:  # at least as many keys as queries, so that every row sees a key in both
        cu_k = np.concatenate([[0], np.cumsum(np.maximum(np.diff(cu_q), np.diff(cu_k)))])
    make = lambda *shape: torch.tensor(rng.standard_normal(shape), dtype=torch.float32, requires_grad=True)  # noqa: E731
    q, k, v = make(cu_q[-1], 4, 16), make(cu_k[-1], 2, 16), make(cu_k[-1], 2, 12)
    d_out = torch.tensor(rng.standard_normal((cu_q[-1], 4, 12)), dtype=torch.float32)
    out = attnkit.varlen_attention(q, k, v, torch.tensor(cu_q), torch.tensor(cu_k, dtype=torch.int32), causal=causal)
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    want = torch_alone(torch, q, k, v, cu_q, cu_k, causal)
    want_grads = torch.autograd.grad(want, (q, k, v), d_out)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    for name, got, expected in zip("qkv", grads, want_grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"d{name}: {m}")


def test_torch_bfloat16_and_lse_without_gradient(torch, rng):
    cu = torch.tensor([0, 5, 12])
    q = torch.tensor(rng.standard_normal((12, 2, 16)), dtype=torch.bfloat16, requires_grad=True)
    out, lse = attnkit.varlen_attention(q, q, q, cu, cu, causal=True, return_lse=True)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32 and not lse.requires_grad
    out.float().sum().backward()
    assert q.grad is not None and q.grad.dtype == torch.bfloat16
    want = torch_alone(torch, q.detach().float(), q.detach().float(), q.detach().float(), cu, cu, True)
    torch.testing.assert_close(out.detach().float(), want, rtol=2e-2, atol=2e-2)


def nested(torch, parts, requires_grad=False):
    """A jagged nested tensor [B, H, j, D] from [j_b, H, D] parts (as torch's SDPA takes it)."""
    nt = torch.nested.nested_tensor(parts, layout=torch.jagged, requires_grad=requires_grad)
    return nt, nt.transpose(1, 2)


def test_nested_tensors_match_torchs_sdpa_on_them(torch, rng):
    parts = [torch.tensor(rng.standard_normal((n, 2, 8)), dtype=torch.float32) for n in (3, 1, 6)]
    _, x = nested(torch, parts)
    out = attnkit.scaled_dot_product_attention(x, x, x)
    assert out.is_nested and out.shape[:2] == x.shape[:2]
    want = torch.nn.functional.scaled_dot_product_attention(x, x, x)  # torch's CPU path for jagged inputs
    torch.testing.assert_close(out.values(), want.values(), rtol=1e-5, atol=1e-5)


def test_nested_tensors_causal_with_gradients_and_lse(torch, rng):
    parts = [torch.tensor(rng.standard_normal((n, 4, 8)), dtype=torch.float32) for n in (5, 2, 7)]
    kv_parts = [torch.tensor(rng.standard_normal((n, 2, 8)), dtype=torch.float32) for n in (5, 2, 7)]
    q_nt, q = nested(torch, parts, requires_grad=True)
    kv_nt, kv = nested(torch, kv_parts, requires_grad=True)
    out, lse = attnkit.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True, return_lse=True)
    assert lse.is_nested and lse.shape[1] == 4
    out.values().sum().backward()
    cu = torch.tensor([0, 5, 7, 14])
    q_flat = torch.cat(parts).requires_grad_()
    kv_flat = torch.cat(kv_parts).requires_grad_()
    want = torch_alone(torch, q_flat, kv_flat, kv_flat, cu, cu, True)
    torch.testing.assert_close(out.transpose(1, 2).values(), want, rtol=1e-5, atol=1e-5)
    want.sum().backward()
    torch.testing.assert_close(q_nt.grad.values(), q_flat.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(kv_nt.grad.values(), kv_flat.grad, rtol=1e-4, atol=1e-4)


def test_nested_tensor_errors(torch, rng):
    _, x = nested(torch, [torch.randn(3, 2, 8), torch.randn(4, 2, 8)])
    with pytest.raises(ValueError, match="attn_mask: not taken with nested tensors"):
        attnkit.scaled_dot_product_attention(x, x, x, attn_mask=torch.ones(1, dtype=torch.bool))
    with pytest.raises(TypeError, match="key: with a nested query, every input is a nested tensor"):
        attnkit.scaled_dot_product_attention(x, torch.randn(2, 2, 4, 8), x)
    flat, _ = nested(torch, [torch.randn(3, 2, 8), torch.randn(4, 2, 8)])
    with pytest.raises(ValueError, match=r"query: expected a jagged nested tensor \[B, H, j, D\] with the ragged dimension 2"):
        attnkit.scaled_dot_product_attention(flat, flat, flat)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_sinks_per_sequence_with_their_gradient(torch, rng, dtype):
    """Sinks in a packed call equal each sequence's own scaled_dot_product_attention with the same
    sinks; their gradient sums over the sequences."""
    Hq, Hkv, d = 4, 2, 16
    cu_q, cu_k = [0, 3, 8, 8], [0, 7, 12, 16]  # the last sequence has keys but no queries
    tdtype = getattr(torch, dtype)
    q, k, v = (torch.tensor(rng.standard_normal(shape), dtype=tdtype, requires_grad=True)
               for shape in ((cu_q[-1], Hq, d), (cu_k[-1], Hkv, d), (cu_k[-1], Hkv, d)))  # fmt: skip
    sinks = torch.tensor(rng.normal(0.0, 2.0, Hq), dtype=torch.float32, requires_grad=True)
    d_out = torch.tensor(rng.standard_normal((cu_q[-1], Hq, d)), dtype=tdtype)
    out = attnkit.varlen_attention(q, k, v, cu_q, cu_k, causal=True, sinks=sinks)
    ours = torch.autograd.grad((out * d_out).sum(), (q, k, v, sinks))

    q2, k2, v2, sinks2 = (x.detach().clone().requires_grad_(True) for x in (q, k, v, sinks))
    pieces = []
    for b in range(len(cu_q) - 1):
        rows = lambda x, cu: x[cu[b] : cu[b + 1]].transpose(0, 1)[None]  # noqa: E731  [1, H, rows, d]
        pieces.append(attnkit.scaled_dot_product_attention(
            rows(q2, cu_q), rows(k2, cu_k), rows(v2, cu_k), is_causal=True, causal_alignment="bottom_right",
            enable_gqa=True, sinks=sinks2)[0].transpose(0, 1))  # fmt: skip
    want = torch.cat(pieces)
    ref = torch.autograd.grad((want * d_out).sum(), (q2, k2, v2, sinks2))
    tol = 1e-12 if dtype == "float64" else 1e-5
    torch.testing.assert_close(out, want, rtol=0, atol=tol)
    for name, got, exp in zip(("dq", "dk", "dv", "d_sinks"), ours, ref, strict=True):
        torch.testing.assert_close(got, exp, rtol=1e-5 if name == "d_sinks" else 0, atol=tol, msg=name)
    assert bool(ours[3].abs().min() > 0), "every head's sink has a gradient"
