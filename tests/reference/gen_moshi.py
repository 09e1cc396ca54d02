"""Generate the Moshi LM golden files in tests/golden/ from Kyutai's reference implementation.

What it does (the exact rules are in tests/reference/MOSHI.md):
  1. writes a reduced-geometry LM config (Kyutai's `_lm_kwargs` keys, the real structure,
     small sizes) to tests/golden/moshi_config.json;
  2. draws deterministic synthetic weights from the seeded hash of tests/reference/README.md,
     named as in Kyutai's released `model.safetensors` (stacked attention projections), and
     makes every linear weight exactly representable in Q8_0;
  3. saves them as an f32 safetensors checkpoint (not committed: too large; its per-tensor
     sha256 go to tests/golden/moshi_tensors.json) and loads that file back through
     `moshi.models.loaders.get_moshi_lm`, which must accept the released naming;
  4. runs `LMGen(model, use_sampling=False)` (greedy) in streaming mode on deterministic user
     audio codes and saves every output frame plus debugging dumps as .npy.

Run by hand, CPU only, eager mode (CI never runs it; the Rust tests only read its outputs):

    python3 -m venv v && v/bin/pip install moshi==0.2.13
    v/bin/python tests/reference/gen_moshi.py                # rewrites tests/golden/moshi_*
    v/bin/python tests/reference/gen_moshi.py --checkpoint /tmp/moshi_small.safetensors
                                                             # also keeps the checkpoint
"""

import os

os.environ["NO_TORCH_COMPILE"] = "1"  # eager mode: must be set before moshi is imported

import argparse
import fnmatch
import hashlib
import json
import math
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_mimi import hash_s, hash_u, scalar_s  # noqa: E402  (the shared seeded hash)

from moshi.models.lm import LMGen  # noqa: E402
from moshi.models.loaders import _lm_kwargs, get_moshi_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

FRAMES = 64  # input frames fed to LMGen.step
DEBUG_STEPS = 3  # steps whose logits are dumped
QK = 32  # Q8_0 block size

# Kyutai's `_lm_kwargs` (moshi/models/loaders.py), same keys in the same order, small sizes.
CONFIG = {
    "dim": 128,
    "text_card": 96,
    "existing_text_padding_id": 3,
    "n_q": 16,
    "dep_q": 8,
    "card": 64,
    "num_heads": 4,
    "num_layers": 2,
    "hidden_scale": 4.125,
    "causal": True,
    "layer_scale": None,
    "context": 24,
    "max_period": 10000,
    "gating": "silu",
    "norm": "rms_norm_f32",
    "positional_embedding": "rope",
    "depformer_dim": 128,
    "depformer_dim_feedforward": int(4.125 * 128),
    "depformer_num_heads": 4,
    "depformer_num_layers": 2,
    "depformer_layer_scale": None,
    "depformer_multi_linear": True,
    "depformer_context": 8,
    "depformer_max_period": 10000,
    "depformer_gating": "silu",
    "depformer_pos_emb": "none",
    "depformer_weights_per_step": True,
    "delays": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],
}
assert list(CONFIG) == list(_lm_kwargs), "config keys differ from Kyutai's _lm_kwargs"

EMBEDDINGS = ("emb.*.weight", "text_emb.weight", "depformer_emb.*.weight", "depformer_text_emb.weight")


# ------------------------------------------------------------------------------- Q8_0
def q8_0_roundtrip(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q8_0_ref then dequantize, per row, blocks of 32 along the last dim.

    amax = max|x| (f32), d = amax / 127 (f32), id = 1 / d or 0 (f32), v = x * id (f32),
    q = round half away from zero (C roundf), clamp to [-127, 127], value = f32(q) * f32(f16(d)).
    """
    assert x.dtype == np.float32 and x.ndim == 2 and x.shape[1] % QK == 0, (x.dtype, x.shape)
    b = x.reshape(x.shape[0], x.shape[1] // QK, QK)
    amax = np.max(np.abs(b), axis=-1)
    d = amax / np.float32(127.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    v = b * inv[..., None]
    assert v.dtype == np.float32
    # roundf: floor(|v| + 0.5) with the sum done in f64, where it is exact (in f32 it is not:
    # 0.49999997f + 0.5f rounds up to 1.0f).
    q = np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)
    # + 0.0 turns -0.0 (np.sign of a small negative times 0) into +0.0: ggml's q is an
    # integer, so a zero quant dequantizes to +0.0.
    q = np.clip(q, -127.0, 127.0).astype(np.float32) + np.float32(0.0)
    d16 = d.astype(np.float16).astype(np.float32)
    assert np.array_equal(d16, torch.from_numpy(d).half().float().numpy()), "f16 rounding differs"
    out = q * d16[..., None]
    assert out.dtype == np.float32
    return out.reshape(x.shape)


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f16(x: float) -> float:
    return struct.unpack("<e", struct.pack("<e", x))[0]


def scalar_q8_0_block(block) -> list:
    """The same rule on one block, with Python floats (f64 then rounded: exact for / and *)."""
    amax = max(abs(float(t)) for t in block)
    d = f32(amax / 127.0)
    inv = f32(1.0 / d) if d != 0.0 else 0.0
    out = []
    for t in block:
        v = f32(float(t) * inv)
        q = math.copysign(math.floor(abs(v) + 0.5), v)
        q = max(-127.0, min(127.0, q))
        out.append(f32(q * f16(d)))
    return out


# ------------------------------------------------------------------ the synthetic weights
def is_embedding(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in EMBEDDINGS)


def tensor_values(name: str, shape) -> np.ndarray:
    """Value of one tensor of the checkpoint, by its name in the released naming."""
    n = math.prod(shape)
    if fnmatch.fnmatchcase(name, "*.alpha"):  # RMSNorm gains, [1, 1, dim]
        return (1.0 + 0.1 * hash_s(name, n)).astype(np.float32).reshape(shape)
    if is_embedding(name):
        return hash_s(name, n).astype(np.float32).reshape(shape)
    if len(shape) == 2:  # every linear weight [out, in]: run as Q8_0
        v = (hash_s(name, n) * math.sqrt(3.0 / math.prod(shape[1:]))).astype(np.float32)
        return q8_0_roundtrip(v.reshape(shape))
    raise ValueError(f"no rule for tensor {name} {shape}")


def released_shapes(model) -> dict:
    """The model's state-dict shapes under the released checkpoint names: the per-step
    `self_attn.in_projs.N.weight` / `self_attn.out_projs.N.weight` become one
    `self_attn.in_proj_weight` / `self_attn.out_proj.weight`, steps stacked along dim 0 (the
    inverse of StreamingMultiheadAttention._load_hook)."""
    out = {}
    for name, t in model.state_dict().items():
        assert t.dtype == torch.float32, (name, t.dtype)
        for split, stacked in ((".self_attn.in_projs.", ".self_attn.in_proj_weight"),
                               (".self_attn.out_projs.", ".self_attn.out_proj.weight")):
            if split in name:
                prefix, rest = name.split(split)
                step = int(rest.split(".")[0])
                key = prefix + stacked
                rows, cols = t.shape
                if step == 0:
                    assert key not in out
                    out[key] = [rows, cols]
                else:
                    assert out[key] == [step * rows, cols], (name, out[key])
                    out[key][0] += rows
                break
        else:
            out[name] = list(t.shape)
    return {k: tuple(v) for k, v in out.items()}


def split_state(released: dict, model) -> dict:
    """The state dict the package should hold after loading the released names."""
    sd = {}
    for name, t in model.state_dict().items():
        for split, stacked in ((".self_attn.in_projs.", ".self_attn.in_proj_weight"),
                               (".self_attn.out_projs.", ".self_attn.out_proj.weight")):
            if split in name:
                prefix, rest = name.split(split)
                step = int(rest.split(".")[0])
                rows = t.shape[0]
                sd[name] = released[prefix + stacked][step * rows:(step + 1) * rows]
                break
        else:
            sd[name] = released[name]
    return sd


def self_check(w: dict) -> None:
    """Recomputes a few values from the README's scalar hash and the scalar Q8_0 rule."""
    n = "transformer.layers.1.norm2.alpha"
    for i in (0, 127):
        assert np.float32(1.0 + 0.1 * scalar_s(n, i)) == w[n].reshape(-1)[i], (n, i)
    for n in ("emb.9.weight", "depformer_text_emb.weight"):
        for i in (0, 1, 64 * 128 + 5):
            assert np.float32(scalar_s(n, i)) == w[n].reshape(-1)[i], (n, i)
    for n, row, blk in (("text_linear.weight", 95, 3),
                        ("transformer.layers.0.gating.linear_out.weight", 7, 10),
                        ("depformer.layers.1.self_attn.in_proj_weight", 7 * 384 + 100, 2),
                        ("depformer.layers.0.self_attn.out_proj.weight", 3 * 128 + 1, 0),
                        ("linears.7.weight", 63, 3)):
        cols = w[n].shape[1]
        scale = math.sqrt(3.0 / cols)
        raw = [np.float32(scalar_s(n, row * cols + blk * QK + j) * scale) for j in range(QK)]
        got = w[n][row, blk * QK:(blk + 1) * QK]
        assert scalar_q8_0_block(raw) == [float(t) for t in got], (n, row, blk)
    for n, t in w.items():  # Q8_0 weights requantize to themselves
        if t.ndim == 2 and not is_embedding(n):
            assert np.array_equal(q8_0_roundtrip(t), t), n


# ---------------------------------------------------------------------------- the run
def user_codes(frames: int, card: int) -> np.ndarray:
    """u("user_codes", t * 8 + k) -> floor(u * card): i64 [frames, 8]."""
    u = hash_u("user_codes", frames * 8)
    return np.floor(u * card).astype(np.int64).reshape(frames, 8)


def run_greedy(model, codes: np.ndarray) -> dict:
    """Greedy LMGen, one frame per step; records outputs and internals."""
    rec = {"inputs": [], "text_logits": [], "tr_out": [], "dep_logits": [], "dep_tokens": []}
    orig_text, orig_dep = model.forward_text, model.forward_depformer

    def forward_text(seq, *args):
        rec["inputs"].append(seq[0, :, 0].clone())
        out, logits = orig_text(seq, *args)
        rec["tr_out"].append(out[0, 0].clone())
        rec["text_logits"].append(logits[0, 0, 0].clone())
        rec["dep_logits"].append([])
        return out, logits

    def forward_depformer(cb, seq, tr_out):
        logits = orig_dep(cb, seq, tr_out)
        rec["dep_logits"][-1].append(logits[0, 0, 0].clone())
        return logits

    model.forward_text, model.forward_depformer = forward_text, forward_depformer
    gen = LMGen(model, use_sampling=False)
    outs, frames_out = [], []
    try:
        with torch.no_grad(), gen.streaming(1):
            for t in range(codes.shape[0]):
                tok = gen.step(torch.from_numpy(codes[t]).view(1, 8, 1))
                if tok is not None:
                    assert tok.shape == (1, 1 + model.dep_q, 1), tok.shape
                    outs.append(tok[0, :, 0].clone())
                    frames_out.append(t)
    finally:
        del model.forward_text, model.forward_depformer  # back to the class methods
    text_logits = torch.stack(rec["text_logits"]).numpy()
    dep_logits = torch.stack([torch.stack(r) for r in rec["dep_logits"]]).numpy()
    return {
        "tokens": torch.stack(outs).numpy().astype(np.int64),
        "frames": np.array(frames_out, dtype=np.int64),
        "inputs": torch.stack(rec["inputs"]).numpy().astype(np.int64),
        "tr_out": torch.stack(rec["tr_out"]).numpy(),
        "text_logits": text_logits,
        "dep_logits": dep_logits,
    }


def spec_forward(w: dict, inputs: np.ndarray, generated: np.ndarray):
    """MOSHI.md's forward pass in plain numpy (f64), teacher-forced with the recorded step
    inputs and chosen tokens: (text logits [F, text_card], depformer logits [F, dep_q, card])."""
    c = CONFIG
    w = {k: v.astype(np.float64) for k, v in w.items()}

    def rms(x, alpha):
        return x * (alpha.reshape(-1) / np.sqrt(1e-8 + np.mean(x * x)))

    def rope(x, pos):  # x [heads, head_dim], pairs (2j, 2j + 1) rotated by pos * freq_j
        hd = x.shape[1]
        ang = pos * np.exp(-math.log(c["max_period"]) * 2.0 * np.arange(hd // 2) / hd)
        re, im = x[:, 0::2], x[:, 1::2]
        out = np.empty_like(x)
        out[:, 0::2] = re * np.cos(ang) - im * np.sin(ang)
        out[:, 1::2] = re * np.sin(ang) + im * np.cos(ang)
        return out

    def layer(x, p, step, heads, cache, pos, window, use_rope):
        """One pre-norm layer; `step` selects the stacked rows (0 for the temporal one)."""
        d = x.shape[0]
        hd = d // heads
        wi = w[p + "self_attn.in_proj_weight"][step * 3 * d:(step + 1) * 3 * d]
        wo = w[p + "self_attn.out_proj.weight"][step * d:(step + 1) * d]
        qkv = wi @ rms(x, w[p + "norm1.alpha"])
        q, k, v = (qkv[i * d:(i + 1) * d].reshape(heads, hd) for i in range(3))
        if use_rope:
            q, k = rope(q, pos), rope(k, pos)
        cache.append((pos, k, v))
        keys = [(kk, vv) for (pp, kk, vv) in cache if pos - window < pp <= pos]
        kk = np.stack([t[0] for t in keys], 1)  # [heads, n, hd]
        vv = np.stack([t[1] for t in keys], 1)
        s = np.einsum("hd,hnd->hn", q, kk) / math.sqrt(hd)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        x = x + wo @ np.einsum("hn,hnd->hd", a, vv).reshape(d)
        g = p + ("gating.%d." % step if p.startswith("depformer.") else "gating.")
        h = w[g + "linear_in.weight"] @ rms(x, w[p + "norm2.alpha"])
        a, b = np.split(h, 2)
        return x + w[g + "linear_out.weight"] @ (a / (1.0 + np.exp(-a)) * b)

    caches = [[] for _ in range(c["num_layers"])]
    text_logits, dep_logits = [], []
    for t, tok in enumerate(inputs):
        x = sum(w["emb.%d.weight" % k][tok[1 + k]] for k in range(c["n_q"]))
        x = x + w["text_emb.weight"][tok[0]]
        for i in range(c["num_layers"]):
            x = layer(x, "transformer.layers.%d." % i, 0, c["num_heads"], caches[i], t,
                      c["context"], True)
        z = rms(x, w["out_norm.alpha"])
        text_logits.append(w["text_linear.weight"] @ z)
        dcaches = [[] for _ in range(c["depformer_num_layers"])]
        row = []
        for k in range(c["dep_q"]):
            emb = (w["depformer_text_emb.weight"][generated[t, 0]] if k == 0
                   else w["depformer_emb.%d.weight" % (k - 1)][generated[t, k]])
            y = w["depformer_in.%d.weight" % k] @ z + emb
            for i in range(c["depformer_num_layers"]):
                y = layer(y, "depformer.layers.%d." % i, k, c["depformer_num_heads"], dcaches[i],
                          k, c["dep_q"], False)
            row.append(w["linears.%d.weight" % k] @ y)
        dep_logits.append(np.stack(row))
    return np.stack(text_logits), np.stack(dep_logits)


def top2_margin(logits: np.ndarray) -> np.ndarray:
    s = np.sort(logits.astype(np.float32), axis=-1)
    return s[..., -1] - s[..., -2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", type=Path, help="also keep the f32 checkpoint at this path")
    args = ap.parse_args()

    t0 = time.time()
    torch.set_num_threads(2)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    (GOLDEN / "moshi_config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")

    # Shapes from the package itself, then values under the released names.
    skeleton = get_moshi_lm(None, lm_kwargs=CONFIG, device="cpu", dtype=torch.float32)
    shapes = released_shapes(skeleton)
    weights = {name: tensor_values(name, shape) for name, shape in shapes.items()}
    self_check(weights)
    n_params = sum(t.size for t in weights.values())
    print(f"weights: {len(weights)} tensors, {n_params} params ({time.time() - t0:.1f}s)")

    with tempfile.TemporaryDirectory() as tmp:
        path = args.checkpoint or Path(tmp) / "moshi_small.safetensors"
        save_file({k: torch.from_numpy(v) for k, v in weights.items()}, str(path))
        size = path.stat().st_size
        model = get_moshi_lm(path, lm_kwargs=CONFIG, device="cpu", dtype=torch.float32)
    expected = split_state(weights, skeleton)
    loaded = model.state_dict()
    assert list(loaded) == list(expected)
    for name, t in loaded.items():
        assert t.dtype == torch.float32 and np.array_equal(t.numpy(), expected[name]), name
    print(f"checkpoint: {size} bytes, loaded back by get_moshi_lm ({time.time() - t0:.1f}s)")

    hidden = skeleton.transformer.layers[0].gating.linear_out.weight.shape[1]
    dep_hidden = skeleton.depformer.layers[0].gating[0].linear_out.weight.shape[1]
    assert hidden % QK == 0 and dep_hidden % QK == 0, (hidden, dep_hidden)
    assert skeleton.depformer.layers[0].self_attn.context is None  # depformer_context is unused

    codes = user_codes(FRAMES, CONFIG["card"])
    t1 = time.time()
    res = run_greedy(model, codes)
    t_run = time.time() - t1

    # The first frame's user codes are never read (every stream gets its initial token at
    # step 0, the delayed ones again at step 1): changing them changes nothing.
    alt = codes.copy()
    alt[0] = (alt[0] + 1) % CONFIG["card"]
    assert np.array_equal(run_greedy(model, alt)["tokens"], res["tokens"])

    tokens, inputs = res["tokens"], res["inputs"]
    gen_text = res["text_logits"].argmax(-1)  # token chosen at each step
    gen_audio = res["dep_logits"].argmax(-1)  # [frames, 8]
    generated = np.concatenate([gen_text[:, None], gen_audio], axis=1).astype(np.int64)
    # Output row for step t (t >= 1): text and semantic chosen at step t - 1, acoustic at step t.
    assert np.array_equal(res["frames"], np.arange(1, FRAMES))
    assert np.array_equal(tokens[:, :2], generated[:-1, :2])
    assert np.array_equal(tokens[:, 2:], generated[1:, 2:])
    spec_text, spec_dep = spec_forward(weights, inputs, generated)
    err_text = np.abs(spec_text - res["text_logits"]).max()
    err_dep = np.abs(spec_dep - res["dep_logits"]).max()
    print(f"MOSHI.md forward in numpy f64 vs reference: max |logit diff| text {err_text:.3g}, "
          f"depformer {err_dep:.3g}")
    assert err_text < 1e-3 and err_dep < 1e-3
    margins = np.concatenate([top2_margin(res["text_logits"])[:, None],
                              top2_margin(res["dep_logits"])], axis=1)

    np.save(GOLDEN / "moshi_user_codes.npy", codes)
    np.save(GOLDEN / "moshi_greedy_tokens.npy", tokens)
    np.save(GOLDEN / "moshi_greedy_frames.npy", res["frames"])
    np.save(GOLDEN / "moshi_generated.npy", generated)
    np.save(GOLDEN / "moshi_step_inputs.npy", inputs)
    np.save(GOLDEN / "moshi_margins.npy", margins.astype(np.float32))
    np.save(GOLDEN / "moshi_text_logits.npy", res["text_logits"][:DEBUG_STEPS].astype(np.float32))
    np.save(GOLDEN / "moshi_dep_logits.npy", res["dep_logits"][:DEBUG_STEPS].astype(np.float32))
    np.save(GOLDEN / "moshi_transformer_out.npy", res["tr_out"][:DEBUG_STEPS].astype(np.float32))
    entries = [{"name": name, "shape": list(t.shape),
                "sha256": hashlib.sha256(t.astype("<f4").tobytes()).hexdigest()}
               for name, t in weights.items()]
    (GOLDEN / "moshi_tensors.json").write_text(json.dumps(entries, indent=1) + "\n")

    distinct_text = len(np.unique(tokens[:, 0]))
    distinct_audio = [len(np.unique(tokens[:, 1 + k])) for k in range(CONFIG["dep_q"])]
    print("config:", json.dumps(CONFIG))
    print(f"params: {n_params}; FFN hidden {hidden} (temporal), {dep_hidden} (depformer)")
    print(f"frames: {FRAMES} in, {len(tokens)} out (input frames {res['frames'][0]}..{res['frames'][-1]})")
    print(f"distinct text tokens: {distinct_text}")
    print(f"distinct audio tokens per codebook: {distinct_audio}")
    print(f"min top-2 logit margin: text {margins[:, 0].min():.4g}, audio {margins[:, 1:].min():.4g}")
    print("first rows (text, audio 0..7):")
    for r in tokens[:3]:
        print("  ", r.tolist())
    print("first step inputs:")
    for r in inputs[:3]:
        print("  ", r.tolist())
    print(f"LMGen run {t_run:.2f}s ({1000 * t_run / FRAMES:.1f} ms/frame); total {time.time() - t0:.1f}s")
    assert distinct_text > 1, "text tokens are constant"
    assert min(distinct_audio) > 1, "an audio codebook is constant"


if __name__ == "__main__":
    main()
