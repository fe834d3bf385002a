"""Other CPU attention libraries, timed beside attnkit and torch by `python -m attnkit.bench --peers`.

Each peer runs the same forward case on the same float32 inputs, the way a user of that library
would ask for fused attention, with the same thread count:
  - onnxruntime: a one-node ONNX graph of the standard `Attention` operator (opset 23, which takes
    grouped-query K/V and `is_causal` itself), in an InferenceSession on the CPU provider;
  - openvino: a model of opset13's `ScaledDotProductAttention` compiled for the CPU plugin with
    f32 inference precision. (Its default on CPUs with AVX512_BF16 is bf16, which would compare a
    bf16 kernel with attnkit's f32 one.) Grouped queries are reshaped to [B, Hkv, G, L, E] over K and
    V of [B, Hkv, 1, S, E], which the operator broadcasts.
Both align the causal mask top-left, as torch's is_causal does; the bench's causal cases are square.

On the cache_decode cases OpenVINO decodes from its own KV cache, as its LLM pipelines do: a stateful
model whose past K and V are variables (ReadValue, Gather by beam index, Concat with the new token,
Assign) feeding ScaledDotProductAttention, which its CPU plugin fuses into one node that keeps the
cache in the precision KV_CACHE_PRECISION names (u8 for int8, f16, bf16). The state is set to the
case's first S - 1 tokens, and each call appends the last one and attends over all S (so each timed
call also grows its cache by one token). Its bf16 cache needs bf16 inference precision: at f32 the
plugin keeps an f32 cache whatever KV_CACHE_PRECISION says.
A peer that does not run a case says why in its column.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple


class PeerUnavailable(Exception):
    """A peer asked for by --peers that cannot be imported."""


class Peer(NamedTuple):
    """A loaded peer library: its ``name``, its ``version``, ``build``, which prepares its call on a
    case's float32 inputs, and ``why_not``, which says why it does not run a case (None if it does)."""

    name: str
    version: str
    # (case, q, k, v as float32 numpy arrays [B, H, rows, E], threads) -> a call returning the output
    # as a numpy array [B, Hq, L, E]
    build: Callable
    why_not: Callable  # case -> str or None


def why_not(case):
    """Why a peer of the float32 forward cases only does not run this case, or None if it does."""
    if case.kind != "forward":
        return "forward only"
    if case.dtype != "float32":
        return "float32 only"
    return None


# A cache_decode case's storage -> OpenVINO's KV cache precision. u4 is left out: setting a u4 cache's
# state crashes OpenVINO 2026.4, and filling it by prefill takes minutes at S = 32768.
OPENVINO_CACHE_PRECISION = {"bfloat16": "bf16", "float16": "f16", "int8": "u8"}


def _openvino_why_not(case):
    if case.kind == "cache_decode":  # int4 is the one storage left
        return None if case.dtype in OPENVINO_CACHE_PRECISION else "u4 state cannot be set"
    return why_not(case)


def _onnxruntime():
    import onnxruntime
    from onnx import TensorProto, helper  # the graph is built with onnx's helpers

    def build(case, q, k, v, threads):
        def tensor(name, heads, rows):
            return helper.make_tensor_value_info(name, TensorProto.FLOAT, [case.batch, heads, rows, case.E])

        node = helper.make_node("Attention", ["q", "k", "v"], ["out"], is_causal=int(case.causal))
        graph = helper.make_graph(
            [node],
            "attention",
            [tensor("q", case.q_heads, case.L), tensor("k", case.kv_heads, case.S), tensor("v", case.kv_heads, case.S)],
            [tensor("out", case.q_heads, case.L)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Its threads otherwise spin after each call, on the cores the next library's call needs
        # (what OMP_WAIT_POLICY=PASSIVE stops for torch's).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        feeds = {"q": q, "k": k, "v": v}
        return lambda: session.run(None, feeds)[0]

    return Peer("onnxruntime", onnxruntime.__version__, build, why_not)


def _openvino():
    # oneTBB loads its hwloc binding with RTLD_DEEPBIND, so under a preloaded allocator (the jemalloc
    # torch is run with) hwloc frees with glibc what glibc allocated with jemalloc, and compiling a
    # model aborts ("free(): invalid pointer"). TBB_ENABLE_SANITIZERS=1 makes it load the binding
    # without that flag (oneTBB issue #1636). Set before openvino loads TBB; a caller's value stays.
    os.environ.setdefault("TBB_ENABLE_SANITIZERS", "1")
    import numpy
    import openvino
    import openvino.opset13 as ops

    def compile_for_cpu(model, threads, **config):
        options = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
        return openvino.Core().compile_model(model, "CPU", {**options, **config})

    def build_cache_decode(case, q, k, v, threads):
        import openvino.opset3 as ops3
        import openvino.opset6 as ops6
        from openvino.op.util import Variable, VariableInfo

        batch, group, E = case.batch, case.q_heads // case.kv_heads, case.E
        q_in = ops.parameter([batch, case.q_heads, 1, E], numpy.float32, name="q")
        beam = ops.parameter([batch], numpy.int32, name="beam_idx")
        inputs, assigns = [], []

        def present(name):  # the past rows of K or V with the new token's appended
            new = ops.parameter([batch, case.kv_heads, -1, E], numpy.float32, name=name)
            info = VariableInfo()
            info.data_shape = openvino.PartialShape([-1, case.kv_heads, -1, E])
            info.data_type = openvino.Type.f32
            info.variable_id = "past_" + name
            variable = Variable(info)
            empty = ops.broadcast(
                ops.constant(numpy.float32(0)),
                ops.concat([ops.gather(ops.shape_of(new), ops.constant([0]), 0),
                            ops.constant(numpy.array([case.kv_heads, 0, E], numpy.int64))], 0),
            )  # fmt: skip
            rows = ops.concat([ops.gather(ops6.read_value(empty, variable), beam, 0), new], 2)
            inputs.append(new)
            assigns.append(ops6.assign(rows, variable))
            # Each KV head serves its group of query heads: [B, Hkv, S, E] -> [B, Hq, S, E].
            widened = ops3.broadcast(ops.unsqueeze(rows, 2), ops.constant(numpy.array([1, 1, group, 1, 1], numpy.int64)),
                                     broadcast_spec="BIDIRECTIONAL")  # fmt: skip
            return ops.reshape(widened, ops.constant(numpy.array([batch, case.q_heads, -1, E], numpy.int64)), False)

        k_all, v_all = present("k"), present("v")
        out = ops.scaled_dot_product_attention(q_in, k_all, v_all, causal=False)
        model = openvino.Model([ops.result(out)], assigns, [q_in, *inputs, beam])
        precision = OPENVINO_CACHE_PRECISION[case.dtype]
        compiled = compile_for_cpu(
            model, threads, INFERENCE_PRECISION_HINT="bf16" if precision == "bf16" else "f32", KV_CACHE_PRECISION=precision
        )
        layers = {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()}
        if "ScaledDotProductAttention" not in layers or "MatMul" in layers:
            raise RuntimeError(f"OpenVINO did not fuse the KV cache into its attention node (layers: {sorted(layers)})")
        request = compiled.create_infer_request()
        for state in request.query_state():
            past = k if state.name == "past_k" else v
            state.state = openvino.Tensor(numpy.ascontiguousarray(past[:, :, : case.S - 1]))
        step = [q, k[:, :, case.S - 1 :].copy(), v[:, :, case.S - 1 :].copy(), numpy.arange(batch, dtype=numpy.int32)]
        return lambda: request.infer(step)[0]

    def build(case, q, k, v, threads):
        if case.kind == "cache_decode":
            return build_cache_decode(case, q, k, v, threads)
        group = case.q_heads // case.kv_heads
        q_in = ops.parameter(list(q.shape), numpy.float32, name="q")
        k_in = ops.parameter(list(k.shape), numpy.float32, name="k")
        v_in = ops.parameter(list(v.shape), numpy.float32, name="v")
        grouped = ops.reshape(q_in, [case.batch, case.kv_heads, group, case.L, case.E], False)
        out = ops.scaled_dot_product_attention(
            grouped, ops.unsqueeze(k_in, 2), ops.unsqueeze(v_in, 2), causal=case.causal
        )
        out = ops.reshape(out, list(q.shape), False)
        compiled = compile_for_cpu(openvino.Model([out], [q_in, k_in, v_in]), threads, INFERENCE_PRECISION_HINT="f32")
        request = compiled.create_infer_request()
        inputs = [q, k, v]
        return lambda: request.infer(inputs)[0]

    return Peer("openvino", openvino.__version__, build, _openvino_why_not)


PEERS = {"onnxruntime": (_onnxruntime, "pip install onnxruntime onnx"), "openvino": (_openvino, "pip install openvino")}


def load(names):
    """The peers named, in order; PeerUnavailable names one that is unknown or not installed."""
    peers = []
    for name in names:
        if name not in PEERS:
            raise PeerUnavailable(f"--peers: unknown peer {name!r} (known: {', '.join(PEERS)})")
        make, install = PEERS[name]
        try:
            peers.append(make())
        except ImportError as error:
            raise PeerUnavailable(f"--peers: {name} is not installed ({error}); install it with: {install}") from error
    return peers
