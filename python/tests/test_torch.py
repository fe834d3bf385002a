"""Tests of attnkit with torch: gradients through attnkit.torch's autograd Function, and
attnkit.nn.MultiheadAttention against torch.nn.MultiheadAttention.

The gradient oracle is written here: the attention formula in torch operations (scores in
docs/semantics.md's order), differentiated by torch's autograd in float64; its own gradients are
checked by central finite differences. The naive kernel of the accuracy rule is the backward
formula in float32 on what attnkit's backward gets (the same rounded inputs, out and lse), as in
the C++ tests: attnkit's RMS error against the oracle is at most twice the naive one's plus a
floor of 1e-6·max(1, |reference|).

Inputs are random with a fresh seed per run, printed with a failing test's output;
ATTNKIT_TEST_SEED=<n> replays a run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import import_torch, test_seed

torch = import_torch()  # attnkit.torch and attnkit.nn need it

import attnkit  # noqa: E402
import attnkit.nn  # noqa: E402
import attnkit.torch  # noqa: E402

F = torch.nn.functional
@pytest.fixture
def gen(request):
    """A numpy generator and torch's, both seeded from conftest.py's per-test seed."""
    seed = test_seed(request)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


# ---- the oracle ---------------------------------------------------------------------------------


def logits(q, k, mask=None, causal="none", window=None, alibi=None, softcap=None, key_lengths=None, scale=None,
           dtype=torch.float64):  # fmt: skip
    """The final scores [B, Hq, L, S] in `dtype` (−inf where a key is not visible), and the tanh
    of the softcap (or None). Differentiable, the mask too when floating."""
    q, k = q.to(dtype), k.to(dtype)
    B, Hq, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    k = k.repeat_interleave(Hq // Hkv if Hkv else 1, 1)
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    t = None
    if softcap:
        t = torch.tanh(s / softcap)
        s = softcap * t
    i, j = torch.arange(L).view(L, 1), torch.arange(S).view(1, S)
    ip = i + (S - L) if causal == "bottom_right" else i
    if alibi is not None:
        slopes = torch.tensor(np.asarray(alibi, np.float32), dtype=dtype).view(1, Hq, 1, 1)
        s = s - slopes * (ip - j).abs().to(dtype)
    visible = torch.ones(B, Hq, L, S, dtype=torch.bool)
    if mask is not None:
        if mask.dtype == torch.bool:
            visible = visible & mask
        else:
            s = s + mask.to(dtype)
    if causal != "none":
        visible = visible & (j <= ip)
    if window is not None:
        left, right = window
        if left >= 0:
            visible = visible & (j >= ip - left)
        if right >= 0:
            visible = visible & (j <= ip + right)
    if key_lengths is not None:
        visible = visible & (j.view(1, 1, 1, S) < torch.tensor(key_lengths).view(B, 1, 1, 1))
    return s.masked_fill(~visible, -math.inf), t


def attention(q, k, v, mask=None, dtype=torch.float64, **options):
    """softmax(logits)·v on [B, Hq, L, E] / [B, Hkv, S, E] / [B, Hkv, S, Ev] in `dtype`,
    differentiable. Returns (out, lse, weights)."""
    s, _ = logits(q, k, mask, dtype=dtype, **options)
    v = v.to(dtype).repeat_interleave(q.shape[1] // v.shape[1] if v.shape[1] else 1, 1)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    total = p.sum(-1, keepdim=True)
    p = p / torch.where(total == 0, torch.ones_like(total), total)
    lse = (m + torch.log(total)).squeeze(-1)
    return p @ v, lse, p


def naive_backward(q, k, v, out, d_out, lse, mask=None, **options):
    """The naive float32 backward on what a fast backward gets (docs/semantics.md's rule; as
    tests/support/naive_f32.hpp): P = exp(z − lse) from the given lse, D = rowsum(dO∘O) from the
    given (rounded) out, dS = P∘(dO·vᵀ − D) through the softcap, then the three products."""
    f = torch.float32
    with torch.no_grad():
        z, t = logits(q, k, mask, dtype=f, **options)
        group = q.shape[1] // k.shape[1]
        qf, kf, vf = q.to(f), k.to(f).repeat_interleave(group, 1), v.to(f).repeat_interleave(group, 1)
        p = torch.where(torch.isinf(z), 0.0, torch.exp(z - lse.to(f).unsqueeze(-1)))
        d_out = d_out.to(f)
        d_s = p * (d_out @ vf.transpose(-1, -2) - (d_out * out.to(f)).sum(-1, keepdim=True))
        if t is not None:
            d_s = torch.where(p == 0, 0.0, d_s * (1 - t * t))
        scale = options.get("scale") or 1.0 / math.sqrt(q.shape[-1])
        B, Hkv, S = k.shape[0], k.shape[1], k.shape[2]
        dq = scale * (d_s @ kf)
        dk = (scale * (d_s.transpose(-1, -2) @ qf)).reshape(B, Hkv, group, S, -1).sum(2)
        dv = (p.transpose(-1, -2) @ d_out).reshape(B, Hkv, group, S, -1).sum(2)
    return dq, dk, dv


def rms(x):
    return float(x.double().pow(2).mean().sqrt()) if x.numel() else 0.0


def check_accurate(got, ref, naive, context):
    """RMS(got − ref) <= 2·RMS(naive − ref) + 1e-6·max(1, |ref|)."""
    assert got.shape == ref.shape, context
    if got.numel() == 0:
        return
    got, ref, naive = got.double(), ref.double(), naive.double()
    assert torch.isfinite(got).all(), f"{context}: non-finite gradient"
    err, naive_err = rms(got - ref), rms(naive - ref)
    floor = 1e-6 * max(1.0, float(ref.abs().max()))
    assert err <= 2 * naive_err + floor, f"{context}: RMS error {err:.3g} > 2 × naive {naive_err:.3g} + {floor:.3g}"


def grads(outputs, inputs, seeds):
    """∂(Σ seed·output)/∂inputs, with None for inputs the outputs do not reach."""
    total = sum((o.double() * g).sum() for o, g in zip(outputs, seeds, strict=True))
    return torch.autograd.grad(total, inputs, allow_unused=True, retain_graph=True)


def leaves(dtype, *shapes):
    return [torch.randn(s, dtype=torch.float64).to(dtype).requires_grad_(True) for s in shapes]


def test_the_oracle_passes_finite_differences(gen):
    q, k, v = leaves(torch.float64, (2, 4, 5, 6), (2, 2, 7, 6), (2, 2, 7, 3))
    mask = torch.randn(1, 4, 5, 7, dtype=torch.float64, requires_grad=True)

    def f(q, k, v, mask):
        out, lse, p = attention(q, k, v, mask, causal="bottom_right", softcap=3.0, alibi=[0.1, 0.2, 0.3, 0.4])
        return out, lse.masked_fill(torch.isinf(lse), 0), p

    assert torch.autograd.gradcheck(f, (q, k, v, mask))


# ---- gradients of scaled_dot_product_attention ----------------------------------------------------


def random_options(gen, B, Hq, L, S):
    """Every option at random, as (attnkit keyword arguments, oracle keyword arguments)."""
    call, oracle = {}, {}
    kind = gen.choice(["none", "bool", "float", "padding"])
    if kind == "bool":
        mask = torch.from_numpy(gen.random((B, Hq, L, S)) < 0.8)
    elif kind == "float":
        mask = torch.from_numpy(gen.standard_normal((L, S)).astype(np.float32))
    elif kind == "padding":
        mask = torch.from_numpy(gen.random((B, 1, 1, S)) < 0.8)
    if kind != "none":
        call["attn_mask"] = oracle["mask"] = mask
    causal = str(gen.choice(["none", "top_left", "bottom_right"]))
    if causal != "none":
        call["is_causal"], call["causal_alignment"], oracle["causal"] = True, causal, causal
    if gen.random() < 0.3:
        call["window"] = oracle["window"] = (int(gen.integers(-1, 12)), int(gen.integers(-1, 12)))
    if gen.random() < 0.3:
        call["alibi_slopes"] = oracle["alibi"] = [float(x) for x in gen.uniform(0, 0.5, Hq)]
    if gen.random() < 0.3:
        call["softcap"] = oracle["softcap"] = float(gen.uniform(1, 30))
    if gen.random() < 0.3:
        call["key_lengths"] = oracle["key_lengths"] = [int(x) for x in gen.integers(0, S + 1, B)]
    if gen.random() < 0.3:
        call["scale"] = oracle["scale"] = float(gen.uniform(0.05, 1.0))
    return call, oracle


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_gradients_match_the_oracle(gen, dtype):
    dt = getattr(torch, dtype)
    for case in range(12):
        B, Hkv, group = (int(x) for x in gen.integers(1, 4, 3))
        Hq = Hkv * group
        L, S = (int(x) for x in gen.integers(1, 50, 2))
        E, Ev = (int(x) for x in gen.integers(1, 40, 2))
        q, k, v = leaves(dt, (B, Hq, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev))
        if case % 2:  # [B, S, H, D] memory, as projections leave it
            q, k, v = (x.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(True) for x in (q, k, v))
        call, oracle = random_options(gen, B, Hq, L, S)
        context = f"case {case}: q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)} {dtype} {sorted(call)}"
        out, lse = attnkit.scaled_dot_product_attention(q, k, v, enable_gqa=group > 1, return_lse=True, **call)
        assert out.grad_fn is not None and out.dtype == dt, context
        d_out = torch.randn(out.shape, dtype=torch.float64)
        got = grads([out], [q, k, v], [d_out])
        # The oracle and the naive kernel differentiate copies of the (rounded) inputs, so that
        # their gradients are not rounded to a 16-bit dtype on the way out.
        wide = [x.detach().double().requires_grad_(True) for x in (q, k, v)]
        ref = grads([attention(*wide, **oracle)[0]], wide, [d_out])
        if dtype == "float64":
            for name, g, r in zip("qkv", got, ref, strict=True):
                bound = 1e-10 * max(1.0, float(r.abs().max())) if r.numel() else 0
                assert (g - r).abs().max() <= bound if g.numel() else True, f"{context}: d{name}"
            continue
        naive = naive_backward(q, k, v, out.detach(), d_out.to(dt), lse.detach(), **oracle)
        for name, g, r, n in zip("qkv", got, ref, naive, strict=True):
            assert g.dtype == dt and g.shape == r.shape, f"{context}: d{name}"
            check_accurate(g, r, n.to(dt), f"{context}: d{name}")


def case_with_visible_keys(gen, B, Hq, Hkv, L, S, E, Ev, dtype=torch.float64):
    """Inputs and a bool mask [B, 1, L, S] in which every query sees at least one key (torch's
    versions disagree on rows that see none)."""
    q, k, v = leaves(dtype, (B, Hq, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev))
    mask = torch.from_numpy(gen.random((B, 1, L, S)) < 0.7)
    mask[..., 0] = True
    return q, k, v, mask


@pytest.mark.parametrize("option", ["plain", "bool mask", "float mask", "causal", "scale", "gqa", "everything"])
def test_gradients_match_torch(gen, option):
    """Against torch's own scaled_dot_product_attention, differentiated by torch, in float64."""
    for case in range(3):
        B, Hkv = (int(x) for x in gen.integers(1, 4, 2))
        group = int(gen.integers(2, 4)) if option in ("gqa", "everything") else 1
        L, S = (int(x) for x in gen.integers(1, 40, 2))
        E, Ev = (int(x) for x in gen.integers(1, 50, 2))
        q, k, v, mask = case_with_visible_keys(gen, B, Hkv * group, Hkv, L, S, E, Ev)
        call = {}
        if option in ("bool mask", "everything"):
            call["attn_mask"] = mask
        if option == "float mask":
            call["attn_mask"] = torch.randn(L, S, dtype=torch.float64)
        if option == "causal":
            call["is_causal"] = True
            if L > S:  # top-left alignment: every row sees key 0
                pass
        if option in ("scale", "everything"):
            call["scale"] = float(gen.uniform(0.05, 1))
        if group > 1:
            call["enable_gqa"] = True
        ours = attnkit.scaled_dot_product_attention(q, k, v, **call)
        theirs = F.scaled_dot_product_attention(q, k, v, **call)
        d_out = torch.randn(ours.shape, dtype=torch.float64)
        for name, g, t in zip("qkv", grads([ours], [q, k, v], [d_out]), grads([theirs], [q, k, v], [d_out]), strict=True):
            bound = 1e-10 * max(1.0, float(t.abs().max())) if t.numel() else 0
            assert g.shape == t.shape and (g.numel() == 0 or (g - t).abs().max() <= bound), f"{option} {case}: d{name}"


def test_gradients_through_broadcast_and_ranks(gen):
    """Leading dimensions that broadcast get the summed gradient, as in torch; ranks 2, 3 and 5."""
    shapes = [
        ((2, 3, 5, 8), (1, 3, 7, 8), (2, 1, 7, 4)),   # key shared by the batch, value by the heads
        ((4, 5, 8), (4, 7, 8), (4, 7, 4)),             # 3-D: batch of one head
        ((5, 8), (7, 8), (7, 4)),                      # 2-D
        ((2, 2, 3, 5, 8), (2, 1, 3, 7, 8), (2, 1, 3, 7, 4)),  # 5-D
    ]
    for qs, ks, vs in shapes:
        q, k, v = leaves(torch.float64, qs, ks, vs)
        ours = attnkit.scaled_dot_product_attention(q, k, v, is_causal=True)
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        d_out = torch.randn(ours.shape, dtype=torch.float64)
        for g, t in zip(grads([ours], [q, k, v], [d_out]), grads([theirs], [q, k, v], [d_out]), strict=True):
            assert g.shape == t.shape and torch.allclose(g, t, rtol=1e-10, atol=1e-12), (qs, ks, vs)


def test_dropout_gradients_by_finite_differences(gen):
    """With a fixed seed the dropped weights are fixed, so the float64 call is a differentiable
    function: its gradient must match central differences (the backward regenerates the pattern)."""
    q, k, v = leaves(torch.float64, (1, 2, 6, 5), (1, 2, 9, 5), (1, 2, 9, 3))
    seed = int(gen.integers(2**63))

    def f(q, k, v):
        return attnkit.scaled_dot_product_attention(q, k, v, dropout_p=0.4, is_causal=True, seed=seed)

    out = f(q, k, v)
    assert not torch.equal(out, attnkit.scaled_dot_product_attention(q, k, v, is_causal=True))  # dropout is on
    assert torch.autograd.gradcheck(f, (q, k, v))
    # float32 runs the fast kernel: the same pattern, and its gradients agree with float64's.
    q32, k32, v32 = (x.detach().float().requires_grad_(True) for x in (q, k, v))
    out32 = attnkit.scaled_dot_product_attention(q32, k32, v32, dropout_p=0.4, is_causal=True, seed=seed)
    d_out = torch.randn(out.shape, dtype=torch.float64)
    for g32, g64 in zip(grads([out32], [q32, k32, v32], [d_out]), grads([out], [q, k, v], [d_out]), strict=True):
        assert torch.allclose(g32.double(), g64, rtol=1e-4, atol=1e-5)


def test_lse_weights_and_mask_gradients(gen):
    """The gradients the kernel does not produce: through the log-sum-exp, the weights, and a
    floating mask that requires grad (a learned bias), with softcap, ALiBi and GQA."""
    from attnkit import functional

    for dtype in (torch.float64, torch.float32):
        q, k, v = leaves(dtype, (2, 4, 9, 6), (2, 2, 11, 6), (2, 2, 11, 5))
        bias = torch.randn(1, 4, 9, 11, dtype=dtype, requires_grad=True)
        options = dict(softcap=4.0, alibi_slopes=[0.1, 0.2, 0.3, 0.4], is_causal=True, causal_alignment="bottom_right")
        call = functional._prepare(q, k, v, bias, 0.0, True, None, True, "bottom_right", None,
                                   options["alibi_slopes"], 4.0, None, None)  # fmt: skip
        out, lse, p = attnkit.torch.attention(call, q, k, v, bias, None, probs=True)
        ref_out, ref_lse, ref_p = attention(q, k, v, bias, causal="bottom_right", softcap=4.0, alibi=options["alibi_slopes"])
        seeds = [torch.randn(x.shape, dtype=torch.float64) for x in (ref_out, ref_lse, ref_p)]
        got = grads([out, lse, p], [q, k, v, bias], seeds)
        ref = grads([ref_out, ref_lse, ref_p], [q, k, v, bias], seeds)
        tol = 1e-7 if dtype == torch.float64 else 1e-4  # ALiBi slopes are float32 in both
        for name, g, r in zip(["q", "k", "v", "mask"], got, ref, strict=True):
            assert g.shape == r.shape and torch.allclose(g.double(), r.double(), rtol=tol, atol=tol), name
        # Through the public function, the lse alone.
        out, lse = attnkit.scaled_dot_product_attention(q, k, v, bias, return_lse=True, enable_gqa=True, **options)
        got = grads([lse], [q, k, bias], seeds[1:2])
        ref = grads([ref_lse], [q, k, bias], seeds[1:2])
        for g, r in zip(got, ref, strict=True):
            assert torch.allclose(g.double(), r.double(), rtol=tol, atol=tol)


def test_mask_gradient_broadcast_shapes(gen):
    q, k, v = leaves(torch.float64, (2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 4))
    for shape in [(5, 6), (1, 6), (2, 1, 5, 6), (1, 1, 1, 5, 6)]:
        mask = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        ours = attnkit.scaled_dot_product_attention(q, k, v, mask)
        theirs = F.scaled_dot_product_attention(q, k, v, mask if len(shape) < 5 else mask[0])
        d_out = torch.randn(ours.shape, dtype=torch.float64)
        (g,) = grads([ours], [mask], [d_out])
        (t,) = grads([theirs], [mask], [d_out])
        assert g.shape == mask.shape and torch.allclose(g, t, rtol=1e-10, atol=1e-12), shape


def test_rows_with_no_visible_key_give_zero_gradients(gen):
    q, k, v = leaves(torch.float32, (1, 2, 5, 4), (1, 2, 6, 4), (1, 2, 6, 4))
    mask = torch.ones(5, 6, dtype=torch.bool)
    mask[2] = False
    bias = torch.zeros(5, 6, requires_grad=True)
    out, lse = attnkit.scaled_dot_product_attention(q, k, v, mask, key_lengths=[6], return_lse=True)
    (out.sum() + lse.masked_fill(torch.isinf(lse), 0).sum()).backward()
    assert torch.all(q.grad[:, :, 2] == 0) and torch.isfinite(q.grad).all()
    assert torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()
    out = attnkit.scaled_dot_product_attention(q, k, v, bias + torch.where(mask, 0.0, -math.inf))
    out.sum().backward()
    assert torch.all(bias.grad[2] == 0) and torch.isfinite(bias.grad).all()


def test_autograd_bookkeeping(gen):
    q, k, v = leaves(torch.float32, (1, 2, 5, 4), (1, 2, 6, 4), (1, 2, 6, 4))
    with torch.no_grad():
        assert attnkit.scaled_dot_product_attention(q, k, v).grad_fn is None
    with torch.inference_mode():
        assert attnkit.scaled_dot_product_attention(q, k, v).grad_fn is None
    # Only what requires grad gets a gradient.
    kc = k.detach()
    attnkit.scaled_dot_product_attention(q, kc, v).sum().backward()
    assert q.grad is not None and v.grad is not None and kc.grad is None
    # Modifying the output in place before backward is caught, not silently wrong.
    out = attnkit.scaled_dot_product_attention(q, k, v)
    out.mul_(2)
    with pytest.raises(RuntimeError, match="inplace"):
        out.sum().backward()
    # Refused rather than silently detached.
    slopes = torch.tensor([0.1, 0.2], requires_grad=True)
    with pytest.raises(ValueError, match="alibi_slopes"):
        attnkit.scaled_dot_product_attention(q, k, v, alibi_slopes=slopes)
    bias = torch.zeros(5, 6, requires_grad=True)
    with pytest.raises(ValueError, match="attn_mask"):
        attnkit.scaled_dot_product_attention(q, k, v, bias, dropout_p=0.1)
    assert attnkit.torch.scaled_dot_product_attention is attnkit.scaled_dot_product_attention


# ---- attnkit.nn.MultiheadAttention ----------------------------------------------------------------

MODULE_CONFIGS = {
    "default": {},
    "batch_first": {"batch_first": True},
    "bias_kv": {"add_bias_kv": True},
    "zero_attn": {"add_zero_attn": True, "batch_first": True},
    "kdim_vdim": {"kdim": 12, "vdim": 20},
    "no_bias": {"bias": False},
}


def module_inputs(config, N, L, S, E, dtype, self_attention):
    shape = (lambda n, w: (N, n, w)) if config.get("batch_first") else (lambda n, w: (n, N, w))
    q = torch.randn(shape(L, E), dtype=dtype, requires_grad=True)
    if self_attention:
        return q, q, q
    k = torch.randn(shape(S, config.get("kdim", E)), dtype=dtype, requires_grad=True)
    v = torch.randn(shape(S, config.get("vdim", E)), dtype=dtype, requires_grad=True)
    return q, k, v


def module_masks(gen, kind, N, H, L, S, dtype):
    if kind == "none":
        return {}
    padding = torch.from_numpy(gen.random((N, S)) < 0.3)
    padding[:, 0] = False  # every query keeps a key
    causal = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1)
    causal[:, 0] = False
    if kind == "padding":
        return {"key_padding_mask": padding}
    if kind == "bool_2d":
        return {"attn_mask": causal}
    if kind == "float_3d":
        return {"attn_mask": torch.randn(N * H, L, S, dtype=dtype)}
    if kind == "both_float":
        return {"attn_mask": torch.randn(L, S, dtype=dtype),
                "key_padding_mask": torch.zeros(N, S, dtype=dtype).masked_fill(padding, -math.inf)}
    if kind == "both_bool":
        return {"attn_mask": causal, "key_padding_mask": padding}
    raise AssertionError(kind)


@pytest.mark.parametrize("config", list(MODULE_CONFIGS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_module_matches_torch(gen, config, dtype):
    """Outputs, weights and every gradient (inputs and parameters) against torch's module with the
    same state dict."""
    dt = getattr(torch, dtype)
    kwargs = MODULE_CONFIGS[config]
    E, H = 32, 4
    theirs = torch.nn.MultiheadAttention(E, H, dtype=dt, **kwargs)
    ours = attnkit.nn.MultiheadAttention.from_torch(theirs)
    assert isinstance(ours, torch.nn.MultiheadAttention)
    tol = 1e-10 if dtype == "float64" else 2e-5
    for case, masks in enumerate(["none", "padding", "bool_2d", "float_3d", "both_float", "both_bool"]):
        N, L, S = (int(x) for x in gen.integers(1, 9, 3))
        self_attention = case % 3 == 0 and "kdim" not in kwargs
        if self_attention:
            S = L
        q, k, v = module_inputs(kwargs, N, L, S, E, dt, self_attention)
        options = module_masks(gen, masks, N, H, L, S, dt)
        options["average_attn_weights"] = case % 2 == 0
        a_out, a_w = ours(q, k, v, **options)
        t_out, t_w = theirs(q, k, v, **options)
        context = f"{config} {masks} N={N} L={L} S={S}"
        scale = max(1.0, float(t_out.detach().abs().max()))
        assert a_out.shape == t_out.shape and torch.allclose(a_out, t_out, rtol=tol, atol=tol * scale), context
        assert a_w.shape == t_w.shape and torch.allclose(a_w, t_w, rtol=tol, atol=tol), context
        seeds = [torch.randn(t_out.shape, dtype=torch.float64), torch.randn(t_w.shape, dtype=torch.float64)]
        inputs = list({id(x): x for x in (q, k, v)}.values())
        got = grads([a_out, a_w], inputs + list(ours.parameters()), seeds)
        ref = grads([t_out, t_w], inputs + list(theirs.parameters()), seeds)
        for i, (g, r) in enumerate(zip(got, ref, strict=True)):
            bound = tol * max(1.0, float(r.abs().max()))
            assert g.shape == r.shape and (g - r).abs().max() <= bound, f"{context}: gradient {i}"


def test_module_state_dict_and_forms(gen):
    E, H, N, L = 16, 2, 3, 5
    theirs = torch.nn.MultiheadAttention(E, H, kdim=8, vdim=8, add_bias_kv=True)
    ours = attnkit.nn.MultiheadAttention(E, H, kdim=8, vdim=8, add_bias_kv=True)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert all(ours.state_dict()[n].shape == t.shape for n, t in theirs.state_dict().items())
    ours.load_state_dict(theirs.state_dict())
    theirs.eval(), ours.eval()
    q, k = torch.randn(L, N, E), torch.randn(7, N, 8)
    with torch.no_grad():
        a, aw = ours(q, k, k)
        t, tw = theirs(q, k, k)
        assert torch.allclose(a, t, atol=2e-6) and torch.allclose(aw, tw, atol=2e-6)
        # Unbatched inputs, and need_weights=False.
        a, aw = ours(q[:, 0], k[:, 0], k[:, 0], need_weights=False)
        t, _ = theirs(q[:, 0], k[:, 0], k[:, 0], need_weights=False)
        assert aw is None and a.shape == t.shape and torch.allclose(a, t, atol=2e-6)
    # is_causal without a mask is causal attention (torch insists on the mask); with one, a hint.
    x = torch.randn(N, L, E)
    causal = torch.triu(torch.full((L, L), -math.inf), diagonal=1)
    m1 = attnkit.nn.MultiheadAttention(E, H, batch_first=True).eval()
    t1 = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    t1.load_state_dict(m1.state_dict())
    with torch.no_grad():
        expected, _ = t1(x, x, x, attn_mask=causal, need_weights=False)
        got, _ = m1(x, x, x, is_causal=True, need_weights=False)
        assert torch.allclose(got, expected, atol=2e-6)
        got, _ = m1(x, x, x, attn_mask=causal, is_causal=True, need_weights=False)
        assert torch.allclose(got, expected, atol=2e-6)


def test_module_fully_masked_rows_and_dropout(gen):
    E, H, N, L = 16, 4, 2, 6
    m = attnkit.nn.MultiheadAttention(E, H, dropout=0.5, batch_first=True)
    x = torch.randn(N, L, E)
    padding = torch.zeros(N, L, dtype=torch.bool)
    padding[1] = True  # sequence 1 is all padding: torch gives NaN there, attnkit zeros
    m.eval()
    out, w = m(x, x, x, key_padding_mask=padding)
    assert torch.isfinite(out).all() and torch.all(w[1] == 0)
    assert torch.allclose(out[1], m.out_proj.bias.expand(L, E))  # zero attention, then out_proj
    # Training: dropout on, repeatable under torch.manual_seed, off again in eval.
    m.train()
    torch.manual_seed(5)
    a, _ = m(x, x, x, need_weights=False)
    torch.manual_seed(5)
    b, _ = m(x, x, x, need_weights=False)
    c, _ = m(x, x, x, need_weights=False)
    assert torch.equal(a, b) and not torch.equal(a, c)
    m.eval()
    assert torch.equal(m(x, x, x, need_weights=False)[0], m(x, x, x, need_weights=False)[0])


def test_module_inside_a_transformer_layer(gen):
    """Swapped into torch.nn.TransformerEncoderLayer (training mode), the layer's output and
    gradients stay torch's."""
    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True,
                                             dtype=torch.float64)  # fmt: skip
    swapped = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True,
                                               dtype=torch.float64)  # fmt: skip
    swapped.load_state_dict(layer.state_dict())
    swapped.self_attn = attnkit.nn.MultiheadAttention.from_torch(layer.self_attn)
    x = torch.randn(3, 10, 32, dtype=torch.float64, requires_grad=True)
    padding = torch.zeros(3, 10, dtype=torch.bool)
    padding[0, 7:] = True
    a = swapped(x, src_key_padding_mask=padding, is_causal=False)
    t = layer(x, src_key_padding_mask=padding, is_causal=False)
    assert torch.allclose(a, t, rtol=1e-10, atol=1e-10)
    d = torch.randn(a.shape, dtype=torch.float64)
    ga = grads([a], [x] + list(swapped.parameters()), [d])
    gt = grads([t], [x] + list(layer.parameters()), [d])
    assert all(torch.allclose(g, r, rtol=1e-9, atol=1e-10) for g, r in zip(ga, gt, strict=True))


@pytest.mark.parametrize(
    "name,call,error,names",
    [
        ("embed dim", lambda m: m(torch.randn(5, 2, 8), torch.randn(5, 2, 8), torch.randn(5, 2, 8)), ValueError, "embed_dim"),
        ("ranks", lambda m: m(torch.randn(5, 2, 16), torch.randn(5, 16), torch.randn(5, 16)), ValueError, "query, key, value"),
        ("mask shape", lambda m: m(*[torch.randn(5, 2, 16)] * 3, attn_mask=torch.zeros(4, 5)), ValueError, "attn_mask"),
        ("padding shape", lambda m: m(*[torch.randn(5, 2, 16)] * 3, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool)),
         ValueError, "key_padding_mask"),
        ("mask dtype", lambda m: m(*[torch.randn(5, 2, 16)] * 3, attn_mask=torch.zeros(5, 5, dtype=torch.int32)),
         TypeError, "attn_mask"),
        ("numpy", lambda m: m(np.zeros((5, 2, 16), np.float32), *[torch.randn(5, 2, 16)] * 2), TypeError, "query"),
        ("batches differ", lambda m: m(torch.randn(5, 2, 16), torch.randn(5, 3, 16), torch.randn(5, 3, 16)),
         ValueError, "key, value"),
    ],
)
def test_module_bad_input_raises(name, call, error, names):
    m = attnkit.nn.MultiheadAttention(16, 2)
    with pytest.raises(error) as raised:
        call(m)
    assert names in str(raised.value), str(raised.value)


# ---- attnkit.nn.MultiheadAttention decoding over a KVCache ---------------------------------------


def causal_rows(module, x):
    """torch's own module (same weights) over one whole sequence x [T, E], causal: the oracle for
    forward_cached, in float64."""
    theirs = torch.nn.MultiheadAttention(module.embed_dim, module.num_heads, dtype=torch.float64)
    theirs.load_state_dict({k: v.double() for k, v in module.state_dict().items()})
    T = x.shape[0]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    out, _ = theirs(*[x.double().unsqueeze(1)] * 3, attn_mask=mask, need_weights=False)
    return out.squeeze(1)


def rel_rms(got, want):
    return float(rms(got.double() - want.double()) / rms(want.double()))


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_forward_cached_is_the_causal_forward(gen, layout, batch_first):
    """A prefill then single-token steps, for sequences of different lengths in one batch, give each
    token torch's causal self-attention output over its sequence so far (float64 oracle)."""
    E, H = 64, 4
    m = attnkit.nn.MultiheadAttention(E, H, batch_first=batch_first).eval()
    cache = m.make_cache(40, max_sequences=2, layout=layout)
    a, b = cache.add_sequence(), cache.add_sequence()
    xa, xb = torch.randn(30, E), torch.randn(21, E)
    got_a = [m.forward_cached(xa[:9], cache, a)]  # a alone first: unbatched [t, E], one id
    got_b = []
    pairs = [(9, 13, 0, 4)] + [(i, i + 1, i - 9, i - 8) for i in range(13, 30)]  # then both, together
    for a0, a1, b0, b1 in pairs:
        x = torch.stack([xa[a0:a1], xb[b0:b1]])  # [2, t, E]
        out = m.forward_cached(x if batch_first else x.transpose(0, 1), cache, [a, b])
        out = out if batch_first else out.transpose(0, 1)
        assert not out.requires_grad
        got_a.append(out[0])
        got_b.append(out[1])
    assert (cache.length(a), cache.length(b)) == (30, 21)
    for got, x in ((torch.cat(got_a), xa), (torch.cat(got_b), xb)):
        want = causal_rows(m, x)
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype, bound", [("int8", 0.02), ("int4", 0.3)])
def test_forward_cached_over_a_quantized_cache(gen, dtype, bound):
    """Over an int8 or int4 cache the steps stay within the quantisation's error of the float32
    cache's (the C++ module test measured 0.7% and 11%; docs/kv-cache.md has the figures)."""
    E, H = 256, 4  # head_dim 64: two blocks of 32
    m = attnkit.nn.MultiheadAttention(E, H, batch_first=True).eval()
    f32, quantized = m.make_cache(48), m.make_cache(48, dtype=dtype)
    assert quantized.dtype == dtype
    s, t = f32.add_sequence(), quantized.add_sequence()
    x = torch.randn(1, 40, E)
    steps = [(0, 32)] + [(i, i + 1) for i in range(32, 40)]
    want = torch.cat([m.forward_cached(x[:, i:j], f32, [s]) for i, j in steps], dim=1)
    got = torch.cat([m.forward_cached(x[:, i:j], quantized, [t]) for i, j in steps], dim=1)
    error = rel_rms(got, want)
    print(f"{dtype}: output rms error relative to the float32 cache's {error:.4f}")
    assert 0 < error < bound


@pytest.mark.parametrize(
    "name, make, call, error, names",
    [
        ("cache heads", lambda m: attnkit.KVCache(1, 16, 8), lambda m, c, s: m.forward_cached(torch.randn(1, 3, 32), c, [s]),
         ValueError, "cache"),
        ("cache width", lambda m: attnkit.KVCache(2, 32, 8), lambda m, c, s: m.forward_cached(torch.randn(1, 3, 32), c, [s]),
         ValueError, "cache"),
        ("cache value_dim", lambda m: attnkit.KVCache(2, 16, 8, value_dim=32),
         lambda m, c, s: m.forward_cached(torch.randn(1, 3, 32), c, [s]), ValueError, "cache"),
        ("x width", lambda m: m.make_cache(8), lambda m, c, s: m.forward_cached(torch.randn(1, 3, 16), c, [s]),
         ValueError, "x"),
        ("x rank", lambda m: m.make_cache(8), lambda m, c, s: m.forward_cached(torch.randn(3, 32), c, [s]),
         ValueError, "sequences"),
        ("ids", lambda m: m.make_cache(8), lambda m, c, s: m.forward_cached(torch.randn(2, 3, 32), c, [s]),
         ValueError, "sequences"),
        ("not a cache", lambda m: m.make_cache(8), lambda m, c, s: m.forward_cached(torch.randn(1, 3, 32), {}, [s]),
         TypeError, "cache"),
        ("full", lambda m: m.make_cache(2), lambda m, c, s: m.forward_cached(torch.randn(1, 3, 32), c, [s]),
         ValueError, "limit"),
    ],
)
def test_forward_cached_bad_input_raises(name, make, call, error, names):
    m = attnkit.nn.MultiheadAttention(32, 2, batch_first=True)  # 2 heads of head_dim 16
    cache = make(m)
    s = cache.add_sequence()
    with pytest.raises(error) as raised:
        call(m, cache, s)
    assert names in str(raised.value), str(raised.value)
    assert cache.length(s) == 0  # nothing appended


@pytest.mark.parametrize("kwargs", [{"add_bias_kv": True}, {"add_zero_attn": True}, {"kdim": 8, "vdim": 8}])
def test_forward_cached_refuses_cross_attention_modules(kwargs):
    m = attnkit.nn.MultiheadAttention(32, 2, batch_first=True, **kwargs)
    cache = m.make_cache(8)
    with pytest.raises(ValueError, match="self-attention only"):
        m.forward_cached(torch.randn(1, 2, 32), cache, [cache.add_sequence()])
