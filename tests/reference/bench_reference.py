"""Kyutai's PyTorch reference on the GPU at hand, for the benchmark tables in README.md.

Times `LMGen.step` of Moshi 7B (`moshi==0.2.13`, random weights, bf16, the package's own
CUDA graphs) with Kyutai's default sampling, and Mimi's streaming encode and decode (fp32),
per 80 ms frame, after warm-up, and the whole full-duplex frame (Mimi encode of the user's
audio, `LMGen.step`, Mimi decode of its output when it yields); prints p50/p95/p99/mean ms,
frames over 80 ms and the device. With `--window N`, `LMGen.step` is timed again once the
stream has taken N steps (the temporal transformer's full window at N = its context, 3000):
the reference attends over its whole KV ring (`RingKVCache.complete` returns every slot), so
its step costs the same at any position. Run next to `inferencelayer bench-lm` /
`inferencelayer bench` on the same GPU (`scripts/side-by-side.sh` runs all of them):

    python3 tests/reference/bench_reference.py --frames 200 --window 3000
"""

import argparse
import json
import math
import time

import torch

from moshi.models import loaders
from moshi.models.lm import LMGen


def stats(ms):
    ms = sorted(ms)
    rank = lambda q: ms[min(len(ms), max(1, math.ceil(q * len(ms)))) - 1]
    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99), "mean": sum(ms) / len(ms),
            "over_80ms": sum(1 for m in ms if m > 80.0)}


def timed(fn, frames, warmup):
    out = []
    for i in range(warmup + frames):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(i)
        torch.cuda.synchronize()
        if i >= warmup:
            out.append((time.perf_counter() - t0) * 1e3)
    return stats(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--skip-lm", action="store_true")
    ap.add_argument("--window", type=int, default=0,
                    help="also time LMGen.step after this many steps of the stream (0: not)")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}

    mimi = loaders.get_mimi(None, device=dev)
    pcm = torch.randn(1, 1, 1920, device=dev) * 0.1
    with torch.no_grad(), mimi.streaming(1):
        result["mimi_encode_ms"] = timed(lambda i: mimi.encode(pcm), args.frames, args.warmup)
    codes = torch.randint(0, 2048, (1, 8, 1), device=dev)
    with torch.no_grad(), mimi.streaming(1):
        result["mimi_decode_ms"] = timed(lambda i: mimi.decode(codes), args.frames, args.warmup)

    if not args.skip_lm:
        lm = loaders.get_moshi_lm(None, device=dev, dtype=torch.bfloat16)
        gen = LMGen(lm, temp=0.8, temp_text=0.7, top_k=250, top_k_text=25)
        user = torch.randint(0, 2048, (1, 8, 1), device=dev)
        with torch.no_grad(), gen.streaming(1):
            result["lmgen_step_ms"] = timed(lambda i: gen.step(user), args.frames, args.warmup)
            if args.window > 0:
                # on the same stream: untimed steps up to `window`, then the frames again
                done = args.frames + args.warmup
                fill = max(0, args.window - done)
                result["lmgen_step_window_ms"] = timed(lambda i: gen.step(user), args.frames, fill)
                result["window_position"] = done + fill

        def frame(i):
            user_codes = mimi.encode(pcm)
            out = gen.step(user_codes)
            if out is not None:
                mimi.decode(out[:, 1:])

        try:
            with torch.no_grad(), gen.streaming(1), mimi.streaming(1):
                result["full_duplex_frame_ms"] = timed(frame, args.frames, args.warmup)
        except Exception as e:  # keep the figures above if the combined frame fails
            result["full_duplex_frame_error"] = repr(e)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
