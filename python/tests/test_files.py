"""attnkit.read_safetensors: files built byte by byte here (the format is simple), every dtype the
reader takes, any rank, metadata, and the errors."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import attnkit


def safetensors_bytes(tensors, metadata=None):
    """(name, dtype tag, shape, raw little-endian bytes) → the file's bytes."""
    header, data = {}, b""
    for name, tag, shape, raw in tensors:
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def test_every_dtype_and_rank(tmp_path, rng):
    f64 = rng.standard_normal((2, 3))
    f32 = rng.standard_normal((4,)).astype(np.float32)
    f16 = rng.standard_normal((1, 2, 3)).astype(np.float16)
    bf16_of = rng.standard_normal((5,)).astype(np.float32)
    bf16_bits = (bf16_of.view(np.uint32) >> 16).astype(np.uint16)  # truncated: exact bf16 values
    i64 = rng.integers(-(2**40), 2**40, (3,))
    i32 = rng.integers(-1000, 1000, (2, 2)).astype(np.int32)
    flags = np.array([True, False, True])
    path = tmp_path / "all.safetensors"
    path.write_bytes(safetensors_bytes([
        ("a.f64", "F64", f64.shape, f64.astype("<f8").tobytes()),
        ("b.f32", "F32", f32.shape, f32.astype("<f4").tobytes()),
        ("c.f16", "F16", f16.shape, f16.astype("<f2").tobytes()),
        ("d.bf16", "BF16", bf16_bits.shape, bf16_bits.astype("<u2").tobytes()),
        ("e.i64", "I64", i64.shape, i64.astype("<i8").tobytes()),
        ("f.i32", "I32", i32.shape, i32.astype("<i4").tobytes()),
        ("g.bool", "BOOL", flags.shape, flags.astype(np.uint8).tobytes()),
        ("h.scalar", "F32", (), np.float32(2.5).tobytes()),
    ], metadata={"format": "pt"}))  # fmt: skip
    tensors, metadata = attnkit.read_safetensors(path, metadata=True)
    assert metadata == {"format": "pt"}
    assert list(tensors) == ["a.f64", "b.f32", "c.f16", "d.bf16", "e.i64", "f.i32", "g.bool", "h.scalar"]
    want = {"a.f64": f64, "b.f32": f32, "c.f16": f16, "e.i64": i64, "f.i32": i32, "g.bool": flags,
            "h.scalar": np.float32(2.5)}  # fmt: skip
    for name, w in want.items():
        got = tensors[name]
        assert got.dtype == np.asarray(w).dtype and got.shape == np.shape(w), name
        assert np.array_equal(got, w), name
    bf16 = tensors["d.bf16"]  # numpy has no bfloat16: float32, exactly
    assert bf16.dtype == np.float32
    assert np.array_equal(bf16, (bf16_bits.astype(np.uint32) << 16).view(np.float32))
    assert attnkit.read_safetensors(str(path))["b.f32"].flags.writeable  # owns its memory


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("truncated", lambda: safetensors_bytes([("x", "F32", (4,), b"\0" * 16)])[:-4], "data"),
        ("bad json", lambda: struct.pack("<Q", 8) + b"{not js}", "JSON"),
        ("unknown dtype", lambda: safetensors_bytes([("x", "F8_E4M3", (4,), b"\0" * 4)]), "F8_E4M3"),
        ("huge header", lambda: struct.pack("<Q", 2**40) + b"{}", "header"),
    ],
)
def test_bad_files_raise_naming_the_problem(tmp_path, name, content, words):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content())
    with pytest.raises(ValueError) as raised:
        attnkit.read_safetensors(path)
    assert raised.value.code == "format_error"
    assert words in str(raised.value) and "bad.safetensors" in str(raised.value), str(raised.value)


def test_a_missing_file_raises(tmp_path):
    with pytest.raises(ValueError) as raised:
        attnkit.read_safetensors(tmp_path / "missing.safetensors")
    assert raised.value.code == "io_error"
