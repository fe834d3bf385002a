"""scripts/plot_performance.py draws docs/performance.png from docs/performance-data.json: it must
run on the committed data and write a PNG, and fold an `attnkit bench --json` run into a copy of the
data. Skipped, saying why, where matplotlib is not installed (it is not one of the package's needs)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "matplotlib", reason="matplotlib is not installed here: scripts/plot_performance.py needs it (pip install matplotlib)"
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "plot_performance.py"
DATA = REPO / "docs" / "performance-data.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_draws_the_committed_data_as_a_png(tmp_path):
    before = DATA.read_bytes()
    out = tmp_path / "performance.png"
    result = run_script("--data", DATA, "--out", out)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    assert DATA.read_bytes() == before  # drawing alone leaves the data file as it was


def test_adds_a_bench_run_to_a_copy_of_the_data(tmp_path):
    data = tmp_path / "data.json"
    shutil.copy(DATA, data)
    bench = tmp_path / "bench.jsonl"
    records = [
        {"kind": "ceilings", "name": "ceilings"},
        {"kind": "forward", "name": "fwd_f32_n256_d64", "threads": 1, "fraction_of_peak": 0.61234},
        {"kind": "forward", "name": "fwd_f32_n256_d64", "threads": 2, "fraction_of_peak": 0.5},
        {"kind": "decode", "name": "decode_f32_m4096_d128", "threads": 1, "fraction_of_peak": 0.1},
    ]
    bench.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "performance.png"
    result = run_script(
        "--data", data, "--out", out, "--add-bench", bench, "--machine", "zen3", "--date", "2000-01-01", "--commit", "abc1234"
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    added = [e for e in json.loads(data.read_text())["fraction_of_peak"] if e["date"] == "2000-01-01"]
    assert [(e["threads"], e["values"]) for e in added] == [(1, {"fwd_f32_n256_d64": 0.612}), (2, {"fwd_f32_n256_d64": 0.5})]
    assert all(e["commit"] == "abc1234" and e["machine"] == "zen3" for e in added)


def test_refuses_a_machine_the_data_does_not_name(tmp_path):
    data = tmp_path / "data.json"
    shutil.copy(DATA, data)
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"kind": "forward", "name": "fwd", "threads": 1, "fraction_of_peak": 0.5}) + "\n")
    result = run_script("--data", data, "--out", tmp_path / "x.png", "--add-bench", bench, "--machine", "nope", "--date", "2000-01-01")
    assert result.returncode != 0
    assert "nope" in result.stderr
    assert data.read_bytes() == DATA.read_bytes()
