"""The table of `scripts/side-by-side.sh run`: this project's native benchmarks, the same
wasm build on WebGPU through Dawn, and Kyutai's PyTorch reference, measured on one GPU in
one call, per 80 ms frame, with the ratios and issue 6's goals.

    python3 scripts/side-by-side.py OUT_DIR

Reads from OUT_DIR what is there of native-mimi.json (`inferencelayer bench --json`),
native-lm.json (`bench-lm --mimi --json`), native-lm-window.json (`bench-lm --json` after a
full window of untimed frames), dawn.json (scripts/bench-dawn.mjs) and reference.json
(tests/reference/bench_reference.py); prints a Markdown table (a missing report leaves
its columns empty).
"""

import json
import sys
from pathlib import Path

# Goals of issue 6 on the H200, per 80 ms frame at the p50 (ms), and Dawn's ratio to native.
GOALS = {"lm": 3.0, "mimi": 1.0, "frame": 4.0, "dawn": 1.3}


def load(out, name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None


def get(report, *keys):
    for k in keys:
        if not isinstance(report, dict):
            return None
        report = report.get(k)
    return report if isinstance(report, dict) and "p50" in report else None


def three(s):
    return f"{s['p50']:.2f} / {s['p95']:.2f} / {s['p99']:.2f}" if s else "-"


def ratio(a, b):
    return f"{a['p50'] / b['p50']:.2f}" if a and b and b["p50"] > 0 else "-"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 scripts/side-by-side.py OUT_DIR")
    out = Path(sys.argv[1])
    mimi, lm, window = load(out, "native-mimi.json"), load(out, "native-lm.json"), load(out, "native-lm-window.json")
    dawn, ref = load(out, "dawn.json") or {}, load(out, "reference.json") or {}
    env = (out / "env.txt").read_text().strip().splitlines() if (out / "env.txt").exists() else []

    # the reference times encode and decode apart: their p50s summed
    ref_sum = None
    if get(ref, "mimi_encode_ms") and get(ref, "mimi_decode_ms"):
        ref_sum = {"p50": ref["mimi_encode_ms"]["p50"] + ref["mimi_decode_ms"]["p50"]}
    rows = [
        ("Mimi encode (8 codebooks)", get(mimi, "encode_ms"), get(dawn, "mimi", "encode_ms"), get(ref, "mimi_encode_ms")),
        ("Mimi decode", get(mimi, "decode_ms"), get(dawn, "mimi", "decode_ms"), get(ref, "mimi_decode_ms")),
        ("Mimi encode + decode", get(mimi, "encode_decode_ms"), get(dawn, "mimi", "encode_decode_ms"), ref_sum),
        ("Moshi 7B LM step", get(lm, "step_ms"), get(dawn, "lm", "step_ms"), get(ref, "lmgen_step_ms")),
        ("  of which the CPU's part", get(lm, "cpu_encode_submit_ms"), get(dawn, "lm", "cpu_encode_submit_ms"), None),
        ("  temporal, timed apart", get(lm, "temporal_ms"), get(dawn, "lm", "temporal_ms"), None),
        ("  depformer, timed apart", get(lm, "depformer_ms"), get(dawn, "lm", "depformer_ms"), None),
        (f"LM step at a full window ({(window or {}).get('warmup', '-')} frames in)", get(window, "step_ms"), None,
         get(ref, "lmgen_step_window_ms")),
        ("whole full-duplex frame", get(lm, "full_duplex_frame_ms"), get(dawn, "lm", "full_duplex_frame_ms"), get(ref, "full_duplex_frame_ms")),
    ]
    print("# Side by side, per 80 ms frame (ms)\n")
    for line in env:
        print(f"- {line}")
    native = lm or mimi
    if native:
        print(f"- native: adapter \"{native.get('adapter')}\", Q8_0 kernel {native.get('q8_kernel')}")
    if dawn.get("dawnAdapter"):
        a = dawn["dawnAdapter"]
        print(f"- wasm on Dawn: adapter {a.get('vendor')} {a.get('architecture')} {a.get('device')} \"{a.get('description')}\"")
    if ref.get("device"):
        print(f"- Kyutai's reference: {ref['device']}, torch {ref.get('torch')}, moshi 0.2.13")
    if lm:
        print(f"- {lm.get('frames')} timed frames after {lm.get('warmup')} warm-up; LM dispatches per frame "
              f"{lm['dispatches_per_frame']['total']}, submits {lm.get('submits_per_frame')}; weights stream at "
              f"{lm.get('achieved_gbs', 0):.0f} GB/s at the step's p50 (copy kernel {lm.get('copy_bandwidth_gbs') or 0:.0f}); "
              f"GPU memory {lm['gpu_bytes']['total'] / 1e9:.2f} GB")
    print()
    print("| stage | native p50 / p95 / p99 | wasm on Dawn p50 / p95 / p99 | reference p50 / p95 / p99 | reference / native | Dawn / native |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, n, w, r in rows:
        if not (n or w or r):
            continue
        rtxt = three(r) if r is not ref_sum else f"{r['p50']:.2f} (sum of p50s)"
        print(f"| {name} | {three(n)} | {three(w)} | {rtxt} | {ratio(r, n)} | {ratio(w, n)} |")
    print()

    def goal(what, s, limit):
        if not s:
            return f"- {what}: not measured"
        met = "met" if s["p50"] <= limit else "not met"
        return f"- {what}: {s['p50']:.2f} ms at the p50 against {limit:g} ms: {met}"

    print("Goals (issue 6):")
    print(goal("LM step", get(lm, "step_ms"), GOALS["lm"]))
    print(goal("Mimi encode + decode", get(mimi, "encode_decode_ms"), GOALS["mimi"]))
    print(goal("whole full-duplex frame", get(lm, "full_duplex_frame_ms"), GOALS["frame"]))
    worst = [(name, w["p50"] / n["p50"]) for name, n, w, _ in rows if n and w and not name.startswith("  ")]
    if worst:
        name, q = max(worst, key=lambda x: x[1])
        met = "met" if q <= GOALS["dawn"] else "not met"
        print(f"- wasm on Dawn within {GOALS['dawn']}x of native at the p50: {met} (largest: {name}, {q:.2f}x)")


if __name__ == "__main__":
    main()
