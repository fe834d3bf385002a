#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: fuzz/corpus/<target>/ (Python standard library only).

    python3 fuzz/make_seeds.py        # rewrites every seed; the files are committed

Seeds are small, meaningful inputs from which the fuzzer mutates: valid files of each dtype and
format version next to a few malformed ones, typical command-line values, and attention calls in
the byte encoding that fuzz/fuzz_validation.cpp decodes (its header comment gives the order).
"""

import json
import pathlib
import struct

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"


def write_all(target, seeds):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for name, data in seeds.items():
        (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())


# ---- .npy ----------------------------------------------------------------------------------------

def npy(dict_text, data=b"", major=1, alignment=64):
    """A file whose header is `dict_text` padded with spaces and a newline, as numpy writes it."""
    width = 2 if major == 1 else 4
    header = dict_text.encode()
    unpadded = 6 + 2 + width + len(header) + 1
    header += b" " * ((alignment - unpadded % alignment) % alignment) + b"\n"
    return b"\x93NUMPY" + bytes([major, 0]) + len(header).to_bytes(width, "little") + header + data


def npy_dict(descr, shape, fortran="False"):
    return "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)


def npy_seeds():
    f32 = struct.pack("<6f", 1.5, -2.0, 3.25, 0.0, 1e-30, -7.0)
    return {
        "f4_2x3_v1.npy": npy(npy_dict("<f4", "(2, 3)"), f32),
        "f8_rank0_v1.npy": npy(npy_dict("<f8", "()"), struct.pack("<d", 0.1)),
        "f2_4_v2.npy": npy(npy_dict("<f2", "(4,)"), struct.pack("<4H", 0x3C00, 0x7C00, 0xFC00, 0x7E00), major=2),
        "b1_3_v3_loose.npy": npy("{ 'shape' : ( 3 , ) ,\t'fortran_order':False,'descr':\"|b1\" , }", b"\x01\x00\x07", 3),
        "i4_2x0x3_align16.npy": npy(npy_dict("<i4", "(2, 0, 3,)"), alignment=16),
        "i8_2x2_v2_double_quotes.npy": npy('{"descr": "<i8", "fortran_order": False, "shape": (2, 2)}',
                                           struct.pack("<4q", 1, -2, 1 << 62, -(1 << 40)), major=2),
        "f8_py2_longs.npy": npy(npy_dict("<f8", "(2L, 1L)"), struct.pack("<2d", 1.0, 2.0)),
        "f4_rank5.npy": npy(npy_dict("<f4", "(1, 1, 2, 1, 1)"), struct.pack("<2f", 4.0, 5.0)),
        "bad_big_endian.npy": npy(npy_dict(">f4", "(1,)"), b"\x3f\x80\x00\x00"),
        "bad_fortran.npy": npy(npy_dict("<f4", "(2,)", "True"), struct.pack("<2f", 1, 2)),
        "bad_object.npy": npy(npy_dict("|O", "(1,)"), b"\0" * 8),
        "bad_huge_shape.npy": npy(npy_dict("<f4", "(1099511627776, 1099511627776)")),
        "bad_truncated_data.npy": npy(npy_dict("<f4", "(2, 3)"), f32[:-1]),
        "bad_trailing_byte.npy": npy(npy_dict("<f4", "(2, 3)"), f32 + b"x"),
        "bad_no_newline.npy": b"\x93NUMPY\x01\x00" + (10).to_bytes(2, "little") + b"{'descr': ",
        "bad_npz_magic.npy": b"PK\x03\x04" + b"\0" * 26,
        "bad_version_4.npy": b"\x93NUMPY\x04\x00" + npy(npy_dict("<f4", "(1,)"), b"\0" * 4)[8:],
    }


# ---- .safetensors --------------------------------------------------------------------------------

def safetensors(header, data=b"", pad=True):
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    raw = text.encode()
    if pad:
        raw += b" " * ((8 - len(raw) % 8) % 8)
    return len(raw).to_bytes(8, "little") + raw + data


def tensors(*items, metadata=None):
    """A header and data buffer for (name, dtype, shape, bytes) items laid out one after another."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in items:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    return header, data


def safetensors_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    several = tensors(("weight", "F32", [2, 2], f32), ("bias", "F16", [2], struct.pack("<2H", 0x3C00, 0xBC00)),
                      ("mask", "BOOL", [3], b"\x01\x00\x05"), ("ids", "I64", [1], struct.pack("<q", -9)),
                      ("scale", "BF16", [], struct.pack("<H", 0x3F80)),
                      ("count", "I32", [2, 0], b""), ("exact", "F64", [1], struct.pack("<d", 0.1)),
                      metadata={"format": "pt", "note": "caf\u00e9"})
    one_header, one_data = tensors(("x", "F32", [4], f32))
    reversed_header = {"b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                       "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}
    return {
        "several_dtypes_metadata.safetensors": safetensors(*several),
        "one_f32.safetensors": safetensors(one_header, one_data),
        "empty.safetensors": safetensors({}),
        "unpadded_escaped_name.safetensors": safetensors('{"t\\u00e9\\n\\"x":{"dtype":"F32","shape":[1],'
                                                         '"data_offsets":[0,4]}}', f32[:4], pad=False),
        "offsets_not_in_name_order.safetensors": safetensors(reversed_header, f32[:8]),
        "bad_overlap.safetensors": safetensors({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                                "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32[:4]),
        "bad_gap.safetensors": safetensors({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32[:8]),
        "bad_dtype_u8.safetensors": safetensors({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"\0\0"),
        "bad_shape_overflow.safetensors": safetensors({"a": {"dtype": "F32", "shape": [4294967296, 4294967296],
                                                             "data_offsets": [0, 4]}}, f32[:4]),
        "bad_header_length.safetensors": (1 << 40).to_bytes(8, "little") + b"{}",
        "bad_json.safetensors": safetensors('{"a": {"dtype": "F32", "shape": [1,], "data_offsets": [0, 4]}}', f32[:4]),
        "bad_truncated.safetensors": safetensors(one_header, one_data)[:-3],
    }


# ---- command-line values -------------------------------------------------------------------------

def cli_seeds():
    minus = "\u2212"  # the typeset minus sign the parsers accept
    return {
        "list.txt": "1,2,3",
        "typeset_minus_list.txt": minus + "1,4",
        "matrix.txt": "1,0;0,1",
        "matrix_spaces.txt": " 0.5, 0.3 ,-0.2; 1e-3,2.5e+2,inf",
        "number.txt": "-0.2",
        "integer_edge.txt": "9223372036854775807",
        "unsigned.txt": "18446744073709551615",
        "window_causal.txt": "--window -1,4 --causal bottom_right",
        "window_int64_max.txt": "--window -1,9223372036854775807 --causal bottom-right",
        "run_flags.txt": "--q q.npy --k k.npy --v v.npy --out o.npy --scale 0.125 --causal top-left --window 128,0 "
                         "--key-lengths 3,4 --alibi 0.5,0.25 --softcap 30 --dropout 0.1 --seed 42 --dtype bf16 "
                         "--kernel reference --threads 2",
        "inline_values.txt": "--scale=nan --dropout=0.999 --kernel=fast --dtype=f16 -- --positional",
        "bad_flag.txt": "--window 1,2,3 --bogus",
    }


# ---- attention calls (fuzz/fuzz_validation.cpp's encoding) --------------------------------------

FORWARD, BACKWARD, ATTEND = 0, 1, 2
DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "f64": 3}
KERNELS = {"automatic": 0, "reference": 1, "fast": 2}
# Indices into fuzz_validation.cpp's tables.
SCALE_DEFAULT, SCALE_HALF, SCALE_ZERO, SCALE_NAN = 0, 6, 9, 11
WINDOW_UNBOUNDED, WINDOW_2, WINDOW_INT64_MIN, WINDOW_2_31, WINDOW_INT64_MAX_1, WINDOW_INT64_MAX = 0, 7, 11, 12, 14, 15
SOFTCAP_OFF, SOFTCAP_30 = 0, 9
DROPOUT_OFF, DROPOUT_HALF = 0, 9
CONTIGUOUS, ORDER, PADDED, BROADCAST, REVERSED, STRIDES = 0, 3, 4, 5, 6, 7
ABSURD_2_62 = 0xF7  # a decode_size byte: kAbsurdSizes[7]


def setup(dtype="f32", kernel="automatic", two_threads=False):
    return bytes([(1 if two_threads else 0) | DTYPES[dtype] << 1 | KERNELS[kernel] << 3])


def view(layout=CONTIGUOUS, extra=b"", dtype_byte=0, shape_byte=0):
    """FuzzView::decode: dtype byte, shape byte, layout byte and its operands, null-pointer byte."""
    return bytes([dtype_byte, shape_byte, layout]) + extra + b"\0"


def options(scale=SCALE_DEFAULT, causal=0, window=(WINDOW_UNBOUNDED, WINDOW_UNBOUNDED), softcap=SOFTCAP_OFF,
            dropout=DROPOUT_OFF, seed=0, key_lengths=None, slopes=None, mask=b"\0"):
    out = bytes([scale, causal, window[0], window[1], softcap, dropout, seed])
    out += bytes([2]) + bytes(key_lengths) if key_lengths is not None else b"\0"
    out += bytes([2]) + bytes(slopes) if slopes is not None else b"\0"
    return out + mask


def forward(dims, opts=None, views=None, extras=0, extra_views=b"", tail=b"\0\0", **kw):
    views = views if views is not None else view() * 4
    return bytes([FORWARD]) + setup(**kw) + bytes(dims) + b"\x07" + (opts or options()) + views + bytes([extras]) + \
        extra_views + tail


def backward(dims, opts=None, views=None, **kw):
    views = views if views is not None else view() * 9
    return bytes([BACKWARD]) + setup(**kw) + bytes(dims) + b"\x05" + (opts or options()) + views + b"\0\0"


def attend(config, cache_ops, ids, group_and_n, opts=None, **kw):
    return bytes([ATTEND]) + setup(**kw) + bytes(config) + b"\x03" + bytes(cache_ops) + bytes([len(ids)]) + \
        bytes(ids) + bytes(group_and_n) + (opts or options()) + view() * 2 + b"\0" + b"\0\0"


def validation_seeds():
    # dims: B, Hkv, Hq/Hkv, n, m, d_k, d_v
    gqa = [2, 2, 2, 3, 5, 6, 7]
    return {
        "forward_plain": forward([1, 1, 1, 4, 4, 8, 8]),
        "forward_gqa_lse_probs": forward(gqa, extras=3, extra_views=view() * 2),
        "forward_causal_window_f16": forward(gqa, options(causal=2, window=(WINDOW_2, WINDOW_UNBOUNDED)), dtype="f16"),
        "forward_every_option_bf16": forward(
            [2, 1, 2, 5, 9, 4, 3],
            options(scale=SCALE_HALF, causal=1, softcap=SOFTCAP_30, dropout=DROPOUT_HALF, seed=9,
                    key_lengths=[3, 9], slopes=[1, 3], mask=bytes([5, 0b0010]) + view() + b"\x40"),
            dtype="bf16", two_threads=True),
        "forward_bool_mask_rank2_reference": forward(gqa, options(mask=bytes([6, 0]) + view() + b"\x80"),
                                                     kernel="reference"),
        "forward_f64_strided": forward(gqa, views=view(ORDER, b"\x02") + view(PADDED, b"\x01\x03") +
                                       view(REVERSED, b"\x0f") + view(ORDER, b"\x05"), dtype="f64"),
        "forward_broadcast_kv": forward(gqa, views=view() + view(BROADCAST, b"\x04") * 2 + view()),
        "forward_empty": forward([0, 1, 1, 0, 0, 8, 8]),
        "forward_huge_sizes": forward([1, 1, 1, ABSURD_2_62, 4, 8, 8]),
        "forward_huge_strides": forward(gqa, views=view(STRIDES, bytes([0xF5, 1, 0xF6, 9])) + view() * 3),
        "forward_bad_options": forward(gqa, options(scale=SCALE_NAN, window=(WINDOW_INT64_MIN, WINDOW_2))),
        "forward_zero_scale": forward(gqa, options(scale=SCALE_ZERO)),
        "forward_window_int64_max": forward(gqa, options(causal=2, window=(WINDOW_INT64_MAX, WINDOW_INT64_MAX_1))),
        "forward_window_2_31_reference": forward(gqa, options(window=(WINDOW_2, WINDOW_2_31)), kernel="reference"),
        "backward_window_int64_max": backward(gqa, options(causal=1, window=(WINDOW_INT64_MAX_1, WINDOW_INT64_MAX))),
        "backward_plain": backward([1, 2, 1, 3, 4, 5, 5]),
        "backward_causal_dropout_f16": backward(gqa, options(causal=2, dropout=DROPOUT_HALF, seed=3), dtype="f16"),
        "backward_mask_reference": backward(gqa, options(mask=bytes([4, 0b0101]) + view() + b"\x30"),
                                            kernel="reference"),
        # config: Hkv, head_dim, value_dim, sequences, length, layout, block size, blocks, dtype (table indices)
        "attend_contiguous": attend([2, 3, 0, 2, 3, 0, 0, 0, 0], [2, 5, 0, 7, 0, 0], [0, 1], [1, 1]),
        "attend_paged_bf16": attend([1, 7, 5, 3, 3, 1, 2, 6, 3], [3, 9, 2, 4, 1, 11, 0, 0], [2, 0], [2, 2],
                                    options(causal=0, window=(WINDOW_2, WINDOW_UNBOUNDED), slopes=[1, 0]),
                                    dtype="bf16"),
        "attend_window_int64_max": attend([2, 3, 0, 2, 3, 0, 0, 0, 0], [2, 5, 0, 7, 0, 0], [0, 1], [1, 1],
                                          options(causal=0, window=(WINDOW_INT64_MAX, WINDOW_2))),
        "attend_unknown_sequence": attend([0, 3, 0, 0, 0, 0, 0, 0, 0], [1, 4, 0, 0], [0xF1], [0, 1]),
        # head_dim and value_dim bytes with the top bit set: 32 or 64 features (whole quantisation blocks)
        "attend_paged_int8": attend([1, 0x80, 0, 3, 3, 1, 2, 6, 8], [3, 9, 2, 4, 1, 11, 0, 0], [2, 0], [2, 2]),
        "attend_contiguous_int4": attend([2, 0x81, 0x80, 2, 3, 0, 0, 0, 9], [2, 5, 0, 7, 0, 0], [0, 1], [1, 1]),
    }


# ---- main ----------------------------------------------------------------------------------------

if __name__ == "__main__":
    write_all("npy", npy_seeds())
    write_all("safetensors", safetensors_seeds())
    write_all("cli_args", cli_seeds())
    write_all("validation", validation_seeds())
    for target in sorted(p.name for p in CORPUS.iterdir()):
        files = list((CORPUS / target).iterdir())
        print(f"{target}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")
