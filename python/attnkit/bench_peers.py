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
A peer runs the float32 forward cases only; on the others its column says why not.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple


class PeerUnavailable(Exception):
    """A peer asked for by --peers that cannot be imported."""


class Peer(NamedTuple):
    """A loaded peer library: its ``name``, its ``version`` and ``build``, which prepares its call on
    a case's float32 inputs."""

    name: str
    version: str
    # (case, q, k, v as float32 numpy arrays [B, H, rows, E], threads) -> a call returning the output
    # as a numpy array [B, Hq, L, E]
    build: Callable


def why_not(case):
    """Why a peer does not run this case, or None if it does."""
    if case.kind != "forward":
        return "forward only"
    if case.dtype != "float32":
        return "float32 only"
    return None


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

    return Peer("onnxruntime", onnxruntime.__version__, build)


def _openvino():
    # oneTBB loads its hwloc binding with RTLD_DEEPBIND, so under a preloaded allocator (the jemalloc
    # torch is run with) hwloc frees with glibc what glibc allocated with jemalloc, and compiling a
    # model aborts ("free(): invalid pointer"). TBB_ENABLE_SANITIZERS=1 makes it load the binding
    # without that flag (oneTBB issue #1636). Set before openvino loads TBB; a caller's value stays.
    os.environ.setdefault("TBB_ENABLE_SANITIZERS", "1")
    import numpy
    import openvino
    import openvino.opset13 as ops

    def build(case, q, k, v, threads):
        group = case.q_heads // case.kv_heads
        q_in = ops.parameter(list(q.shape), numpy.float32, name="q")
        k_in = ops.parameter(list(k.shape), numpy.float32, name="k")
        v_in = ops.parameter(list(v.shape), numpy.float32, name="v")
        grouped = ops.reshape(q_in, [case.batch, case.kv_heads, group, case.L, case.E], False)
        out = ops.scaled_dot_product_attention(
            grouped, ops.unsqueeze(k_in, 2), ops.unsqueeze(v_in, 2), causal=case.causal
        )
        out = ops.reshape(out, list(q.shape), False)
        compiled = openvino.Core().compile_model(
            openvino.Model([out], [q_in, k_in, v_in]),
            "CPU",
            {
                "INFERENCE_PRECISION_HINT": "f32",
                "INFERENCE_NUM_THREADS": threads,
                "NUM_STREAMS": 1,
                "PERFORMANCE_HINT": "LATENCY",
            },
        )
        request = compiled.create_infer_request()
        inputs = [q, k, v]
        return lambda: request.infer(inputs)[0]

    return Peer("openvino", openvino.__version__, build)


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
