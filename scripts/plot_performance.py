#!/usr/bin/env python3
"""Draws docs/performance.png from the measured figures in docs/performance-data.json.

One column of panels per machine class. Top row: each other library's time over attnkit's on the
same case (above 1: attnkit is faster), one bar per library and case, a log scale, a line at 1 for
attnkit itself; a figure known only as a range over several cases is drawn as a hatched bar from its
lowest to its highest value. Bottom row: attnkit's own GFLOP/s as a fraction of the machine's FMA
peak (`attnkit bench`, column "of peak"), one colour per measurement (date and commit).

The data file holds measurements only (see docs/performance.md for where each comes from). To add a
machine's attnkit figures from a fresh run:

    attnkit bench --quick --json > bench.jsonl
    python3 scripts/plot_performance.py --add-bench bench.jsonl --machine zen3 \\
        --date 2026-12-06 --commit 98554bd --command "attnkit bench --quick --json"

which appends the run's forward cases ("fraction_of_peak" per case and thread count) to the data
file and redraws the picture. Needs matplotlib (pip install matplotlib).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / "docs" / "performance-data.json"
DEFAULT_OUT = REPO / "docs" / "performance.png"

PEER_COLOURS = {"torch": "#d95f02", "onnxruntime": "#7570b3", "openvino": "#1b9e77", "ggml": "#e7298a"}
PEER_NAMES = {"torch": "torch", "onnxruntime": "ONNX Runtime", "openvino": "OpenVINO", "ggml": "ggml"}
SOURCE_COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]


def short_case(name: str) -> str:
    """A short axis label for a case name of `python -m attnkit.bench` or `attnkit bench`."""
    label = name
    replacements = [
        ("prefill_", ""), ("fwd_", ""), ("_Hq32_Hkv8_E128", ""), ("decode_", "dec "),
        (" (of the bf16 dot peak)", " (dot)"), ("_causal", " c"),
    ]
    for old, new in replacements:
        label = label.replace(old, new)
    label = label.replace("_L", " ").replace("_E", "/").replace("_n", " n").replace("_d", "/").replace("_S", " ")
    for big, small in (("32768", "32k"), ("8192", "8k"), ("4096", "4k"), ("1024", "1k")):
        label = label.replace(big, small)
    return label


def load(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def add_bench(data: dict, jsonl: Path, machine: str, date: str, commit: str, command: str) -> int:
    """Appends the forward cases of an `attnkit bench --json` run to data["fraction_of_peak"], one
    entry per thread count; returns how many figures were added."""
    if machine not in {m["id"] for m in data["machines"]}:
        raise SystemExit(f"plot_performance.py: --machine {machine!r} is not in the data file's machines")
    per_threads: dict[int, dict[str, float]] = {}
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            record = json.loads(line)
            if record.get("kind") != "forward" or record.get("fraction_of_peak") is None:
                continue
            per_threads.setdefault(int(record["threads"]), {})[record["name"]] = round(record["fraction_of_peak"], 3)
    if not per_threads:
        raise SystemExit(f"plot_performance.py: {jsonl} has no forward case with a fraction_of_peak")
    for threads, values in sorted(per_threads.items()):
        data["fraction_of_peak"].append(
            {"machine": machine, "threads": threads, "date": date, "commit": commit, "command": command, "values": values}
        )
    return sum(len(v) for v in per_threads.values())


def _threads_match(entry_threads, threads: int) -> bool:
    if isinstance(entry_threads, int):
        return entry_threads == threads
    return str(threads) in str(entry_threads)  # "1 and 2": a range over both thread counts


def _source(entry: dict) -> str:
    return f"{entry.get('date') or 'date not recorded'}, {entry.get('commit') or 'commit not recorded'}"


def draw_comparisons(top, machine: dict, comparisons: list, threads: int, first_column: bool) -> None:
    """Each other library's time over attnkit's, per case: one bar per library that has a figure for
    the case, side by side; a range over several cases as a hatched bar from its lowest to its highest."""
    from matplotlib.patches import Patch

    cases: list[str] = []
    for c in comparisons:
        for name in list(c.get("values", {})) + list(c.get("ranges", {})):
            if name not in cases:
                cases.append(name)
    peers = [p for p in PEER_COLOURS if any(c["peer"] == p for c in comparisons)]
    slots = {
        name: [p for p in peers if any(c["peer"] == p and (name in c.get("values", {}) or name in c.get("ranges", {})) for c in comparisons)]
        for name in cases
    }
    highest = 1.0
    for c in comparisons:
        peer = c["peer"]
        figures = [(name, 0.0, value) for name, value in c.get("values", {}).items()]
        figures += [(name, low, high) for name, (low, high) in c.get("ranges", {}).items()]
        for name, low, high in figures:
            width = 0.8 / len(slots[name])
            x = cases.index(name) - 0.4 + width * (slots[name].index(peer) + 0.5)
            if low:
                top.bar(x, high - low, width, bottom=low, color=PEER_COLOURS[peer], hatch="///", edgecolor="white")
            else:
                top.bar(x, high, width, color=PEER_COLOURS[peer])
            highest = max(highest, high)
    top.axhline(1.0, color="black", linewidth=1)
    top.set_yscale("log")
    top.set_ylim(0.25, max(2.0, highest * 1.4))
    ticks = [t for t in (0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 40) if t <= highest * 1.4]
    top.set_yticks(ticks)
    top.set_yticklabels([f"{t:g}" for t in ticks])
    top.minorticks_off()
    top.set_xticks(range(len(cases)))
    top.set_xticklabels([short_case(c) for c in cases], rotation=60, ha="right", fontsize=7)
    top.set_xlim(-0.6, max(0.6, len(cases) - 0.4))
    top.set_title(machine["label"], fontsize=10)
    top.grid(axis="y", linewidth=0.3)
    if first_column:
        top.set_ylabel(f"other library's time / attnkit's\n({threads} thread{'s' if threads != 1 else ''}; > 1: attnkit faster)", fontsize=8)
    if not comparisons:
        top.text(0.5, 0.5, "no comparison measured", transform=top.transAxes, ha="center", fontsize=8)
    handles = [Patch(color=PEER_COLOURS[p], label=PEER_NAMES[p]) for p in peers]
    if any(c.get("ranges") for c in comparisons):
        handles.append(Patch(facecolor="grey", hatch="///", edgecolor="white", label="range over cases"))
    if handles:
        top.legend(handles=handles, fontsize=7, loc="upper left")


def draw_fraction_of_peak(bottom, entries: list, first_column: bool) -> None:
    """attnkit's own rate per case as a fraction of the FMA peak, one colour per measurement."""
    from matplotlib.patches import Patch

    names: list[str] = []
    for e in entries:
        names += [n for n in e["values"] if n not in names]
    for k, e in enumerate(entries):
        colour = SOURCE_COLOURS[k % len(SOURCE_COLOURS)]
        for name, value in e["values"].items():
            bottom.bar(names.index(name), value, 0.7, color=colour)
    bottom.set_ylim(0, 1.3)
    bottom.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    bottom.axhline(1.0, color="black", linewidth=1)
    bottom.set_xticks(range(len(names)))
    bottom.set_xticklabels([short_case(n) for n in names], rotation=60, ha="right", fontsize=7)
    bottom.set_xlim(-0.6, max(0.6, len(names) - 0.4))
    bottom.grid(axis="y", linewidth=0.3)
    if first_column:
        bottom.set_ylabel("attnkit: fraction of the FMA peak\n(attnkit bench, \"of peak\")", fontsize=8)
    if entries:
        bottom.legend(
            handles=[Patch(color=SOURCE_COLOURS[k % len(SOURCE_COLOURS)], label=_source(e)) for k, e in enumerate(entries)],
            fontsize=7,
            loc="upper left",
            ncol=2,
        )


def draw(data: dict, out: Path, threads: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machines = data["machines"]
    fig, axes = plt.subplots(
        2, len(machines), figsize=(4.2 * len(machines), 7.6), gridspec_kw={"height_ratios": [3, 2]}, squeeze=False
    )
    for column, machine in enumerate(machines):
        comparisons = [
            c for c in data["comparisons"] if c["machine"] == machine["id"] and _threads_match(c["threads"], threads)
        ]
        draw_comparisons(axes[0][column], machine, comparisons, threads, column == 0)
        entries = [e for e in data["fraction_of_peak"] if e["machine"] == machine["id"] and e["threads"] == threads]
        draw_fraction_of_peak(axes[1][column], entries, column == 0)
    fig.suptitle(
        "attnkit against other CPU attention kernels, and against the machine's peak (measured; see docs/performance.md)",
        fontsize=11,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=72)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the data file (default docs/performance-data.json)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the PNG to write (default docs/performance.png)")
    p.add_argument("--threads", type=int, default=1, help="which thread count's figures to draw (default 1)")
    p.add_argument("--add-bench", type=Path, help="an `attnkit bench --json` output whose forward cases to add")
    p.add_argument("--machine", help="with --add-bench: the machine id in the data file (e.g. zen3)")
    p.add_argument("--date", help="with --add-bench: the run's date, YYYY-MM-DD")
    p.add_argument("--commit", help="with --add-bench: the commit the run's binary was built from")
    p.add_argument("--command", default="attnkit bench --json", help="with --add-bench: the command that made it")
    args = p.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_performance.py: needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    data = load(args.data)
    if args.add_bench:
        if not (args.machine and args.date):
            p.error("--add-bench needs --machine and --date")
        added = add_bench(data, args.add_bench, args.machine, args.date, args.commit, args.command)
        with open(args.data, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        print(f"plot_performance.py: added {added} figures to {args.data}")
    draw(data, args.out, args.threads)
    print(f"plot_performance.py: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
