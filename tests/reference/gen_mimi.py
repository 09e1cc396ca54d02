"""Generate the Mimi golden files in tests/golden/ from Kyutai's reference implementation.

What it does (the exact rules are in tests/reference/README.md):
  1. builds the reference Mimi with `moshi.models.loaders.get_mimi(None)` (moshi==0.2.13,
     real geometry, 8 codebooks) and overwrites every state-dict entry with deterministic
     synthetic values drawn from a seeded hash;
  2. makes a short speech clip from the ALSA sample recordings with sox
     (tests/golden/mimi_input.wav, a whole number of 1920-sample frames);
  3. fixes the 32 codebooks level by level from the statistics of the residual each level
     sees on that clip (tests/golden/mimi_codebook_stats.npy);
  4. runs the streaming encode and decode one frame at a time and saves codes, latents,
     SEANet encoder output and decoded audio as .npy, plus a sha256 per weight tensor.

Run by hand, CPU only (CI never runs it; the Rust tests only read its outputs):

    python3 -m venv v && v/bin/pip install moshi==0.2.13
    v/bin/python tests/reference/gen_mimi.py      # rewrites tests/golden/mimi_*

Requires `sox` and /usr/share/sounds/alsa/*.wav (alsa-utils).
"""

import fnmatch
import hashlib
import json
import math
import re
import subprocess
import tempfile
import time
import wave
from pathlib import Path

import numpy as np
import torch
from moshi.models.loaders import get_mimi

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
ALSA = Path("/usr/share/sounds/alsa")
CLIPS = ["Front_Left.wav", "Front_Right.wav", "Front_Center.wav"]

SEED = 20261129
FRAME = 1920  # samples per Mimi frame at 24 kHz (12.5 Hz)
DIM = 256  # codebook dimension
N_LEVELS = 32  # 1 level in rvq_first + 31 in rvq_rest
M64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
SQRT3 = math.sqrt(3.0)


# ----------------------------------------------------------------------------- the hash
def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def hash_u(name: str, n: int) -> np.ndarray:
    """u(name, i) for i in 0..n, as f64 (exact multiples of 2^-24 in [0, 1))."""
    z = np.arange(1, n + 1, dtype=np.uint64)  # i + 1
    with np.errstate(over="ignore"):
        z = np.uint64(fnv1a64(name.encode()) ^ SEED) + z * np.uint64(GOLDEN_GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float64) / float(1 << 24)


def hash_s(name: str, n: int) -> np.ndarray:
    return 2.0 * hash_u(name, n) - 1.0


def scalar_s(name: str, i: int) -> float:
    """Pure-Python s(name, i), straight from the README; used to check hash_s."""
    z = ((fnv1a64(name.encode()) ^ SEED) + (i + 1) * GOLDEN_GAMMA) & M64
    z = ((z ^ (z >> 30)) * MIX1) & M64
    z = ((z ^ (z >> 27)) * MIX2) & M64
    z ^= z >> 31
    return 2.0 * ((z >> 40) / 2.0**24) - 1.0


# ------------------------------------------------------------------ the synthetic weights
def codebook_level(name: str) -> int:
    m = re.match(r"quantizer\.rvq_(first|rest)\.vq\.layers\.(\d+)\._codebook\.", name)
    assert m, name
    return 0 if m.group(1) == "first" else 1 + int(m.group(2))


def usage_values(name: str, n: int) -> np.ndarray:
    return np.exp2(np.floor(4.0 * hash_u(name, n)) - 1.0).astype(np.float32)


def embedding_sum_values(name: str, shape, mu: np.ndarray, sigma: np.float32) -> np.ndarray:
    """f32(mu[c] + sigma * (s * sqrt 3)) * usage[b], mu/sigma being the stored f32 stats."""
    bins, dim = shape
    s = hash_s(name, bins * dim).reshape(bins, dim)
    emb = (mu.astype(np.float64)[None, :] + np.float64(sigma) * (s * SQRT3)).astype(np.float32)
    usage = usage_values(name.rsplit(".", 1)[0] + ".cluster_usage", bins)
    return emb * usage[:, None]


def tensor_values(name: str, shape) -> np.ndarray:
    """Every state-dict entry except `embedding_sum` (which needs the codebook stats)."""
    n = math.prod(shape)
    if fnmatch.fnmatchcase(name, "*._codebook._initialized"):
        v = np.ones(n)
    elif fnmatch.fnmatchcase(name, "*._codebook.cluster_usage"):
        v = usage_values(name, n)
    elif any(fnmatch.fnmatchcase(name, p) for p in ("*norm1.weight", "*norm2.weight")):
        v = 1.0 + 0.1 * hash_s(name, n)
    elif any(fnmatch.fnmatchcase(name, p) for p in ("*norm1.bias", "*norm2.bias")):
        v = 0.1 * hash_s(name, n)
    elif any(fnmatch.fnmatchcase(name, p) for p in ("*layer_scale_1.scale", "*layer_scale_2.scale")):
        v = 0.1 * (1.0 + 0.5 * hash_s(name, n))
    elif fnmatch.fnmatchcase(name, "*.bias"):
        v = 0.1 * hash_s(name, n)
    elif len(shape) >= 2:
        v = hash_s(name, n) * math.sqrt(3.0 / math.prod(shape[1:]))
    else:
        raise ValueError(f"no rule for tensor {name} {shape}")
    return v.astype(np.float32).reshape(shape)


def reset_codebook_caches(model) -> None:
    for mod in model.modules():
        if hasattr(mod, "embedding_sum") and hasattr(mod, "_embedding"):
            mod._embedding = None  # the `embedding` property recomputes it from the buffers


# -------------------------------------------------------------------------- the input clip
def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24000)
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return (pcm.astype(np.float32) / np.float32(32768.0)).astype(np.float32)


def make_clip(out: Path) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        full = Path(tmp) / "full.wav"
        for k in (2, 3):
            srcs = [str(ALSA / c) for c in CLIPS[:k]]
            subprocess.run(["sox", "-R", *srcs, "-r", "24000", "-c", "1", "-b", "16", str(full)], check=True)
            frames = len(read_wav(full)) // FRAME
            if frames >= 30:
                break
        subprocess.run(["sox", "-R", str(full), str(out), "trim", "0", f"{frames * FRAME}s"], check=True)
    audio = read_wav(out)
    assert len(audio) == frames * FRAME, (len(audio), frames)
    return audio


# ------------------------------------------------------------------------------- the model
def encode_latents(model, audio: np.ndarray):
    """Streaming encode, frame by frame: (latent [F, 512], SEANet output [2F, 512], codes [F, K])."""
    seanet, latent = [], []
    hooks = [
        model.encoder.register_forward_hook(lambda m, i, o: seanet.append(o.detach().clone())),
        model.downsample.register_forward_hook(lambda m, i, o: latent.append(o.detach().clone())),
    ]
    codes = []
    x = torch.from_numpy(audio).view(1, 1, -1)
    try:
        with torch.no_grad(), model.streaming(1):
            for t in range(x.shape[-1] // FRAME):
                codes.append(model.encode(x[:, :, t * FRAME:(t + 1) * FRAME]))
    finally:
        for h in hooks:
            h.remove()
    lat = torch.cat(latent, dim=-1)[0].T.contiguous().numpy()
    sea = torch.cat(seanet, dim=-1)[0].T.contiguous().numpy()
    cod = torch.cat(codes, dim=-1)[0].T.contiguous().numpy().astype(np.int64)
    return lat, sea, cod


def fix_codebooks(model, sd: dict, latent: np.ndarray) -> np.ndarray:
    """Sets the 32 codebooks level by level; returns the stats [32, 257] (mu then sigma)."""
    q = model.quantizer
    stats = np.zeros((N_LEVELS, DIM + 1), dtype=np.float32)
    lat = torch.from_numpy(latent).T.unsqueeze(0)  # [1, 512, F]
    with torch.no_grad():
        for rvq, first_level in ((q.rvq_first, 0), (q.rvq_rest, 1)):
            r = rvq.input_proj(lat)  # [1, 256, F]
            prefix = "quantizer.rvq_first" if first_level == 0 else "quantizer.rvq_rest"
            for j, layer in enumerate(rvq.vq.layers):
                level = first_level + j
                r64 = r[0].T.double().numpy()  # [F, 256]
                mu = r64.mean(axis=0)
                sigma = (r64 - mu).std()
                stats[level, :DIM], stats[level, DIM] = mu, sigma
                name = f"{prefix}.vq.layers.{j}._codebook.embedding_sum"
                assert codebook_level(name) == level
                emb_sum = embedding_sum_values(name, (2048, DIM), stats[level, :DIM], stats[level, DIM])
                sd[name] = torch.from_numpy(emb_sum)
                layer._codebook.embedding_sum.copy_(sd[name])
                layer._codebook._embedding = None
                r = r - layer.decode(layer.encode(r))
    return stats


def decode_codes(model, codes: np.ndarray) -> np.ndarray:
    c = torch.from_numpy(codes).T.unsqueeze(0)  # [1, K, F]
    out = []
    with torch.no_grad(), model.streaming(1):
        for t in range(c.shape[-1]):
            out.append(model.decode(c[:, :, t:t + 1]))
    return torch.cat(out, dim=-1).reshape(-1).numpy()


def self_check(sd: dict, stats: np.ndarray) -> None:
    """Recomputes a few values with the scalar hash and compares with the final state dict."""
    w = "encoder.model.0.conv.conv.weight"
    for i in (0, 1, 2, 447):
        assert np.float32(scalar_s(w, i) * math.sqrt(3.0 / 7)) == sd[w].view(-1)[i].item(), (w, i)
    n = "decoder_transformer.transformer.layers.5.norm2.weight"
    for i in (0, 511):
        assert np.float32(1.0 + 0.1 * scalar_s(n, i)) == sd[n][i].item(), (n, i)
    for j in (0, 6, 30):
        p = f"quantizer.rvq_rest.vq.layers.{j}._codebook."
        for b, c in ((0, 0), (1, 17), (2047, 255)):
            u = (scalar_s(p + "cluster_usage", b) + 1.0) / 2.0
            usage = np.float32(2.0 ** (math.floor(4.0 * u) - 1))
            assert usage == sd[p + "cluster_usage"][b].item(), (p, b)
            mu, sigma = float(stats[1 + j, c]), float(stats[1 + j, DIM])
            e = np.float32(mu + sigma * (scalar_s(p + "embedding_sum", b * DIM + c) * SQRT3))
            assert e * usage == sd[p + "embedding_sum"][b, c].item(), (p, b, c)


def main() -> None:
    t0 = time.time()
    torch.set_num_threads(2)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    audio = make_clip(GOLDEN / "mimi_input.wav")
    frames = len(audio) // FRAME

    model = get_mimi(None, device="cpu")  # calls set_num_codebooks(8)
    model.eval()
    sd = {}
    for name, t in model.state_dict().items():
        assert t.dtype == torch.float32, (name, t.dtype)
        if name.endswith("._codebook.embedding_sum"):
            sd[name] = torch.zeros(tuple(t.shape))  # fixed by fix_codebooks
        else:
            sd[name] = torch.from_numpy(tensor_values(name, tuple(t.shape)))
    model.load_state_dict(sd)
    reset_codebook_caches(model)
    print(f"weights set: {len(sd)} tensors ({time.time() - t0:.1f}s)")

    latent0, _, _ = encode_latents(model, audio)
    stats = fix_codebooks(model, sd, latent0)
    model.load_state_dict(sd)
    reset_codebook_caches(model)
    final = model.state_dict()
    assert list(final) == list(sd)
    for name, t in final.items():
        assert torch.equal(t, sd[name]), name
    self_check(final, stats)
    print(f"codebooks fixed ({time.time() - t0:.1f}s)")

    latent, seanet, codes = encode_latents(model, audio)
    assert np.array_equal(latent, latent0), "latent changed between the two encodes"
    assert latent.shape == (frames, 512) and seanet.shape == (2 * frames, 512)
    assert codes.shape == (frames, 8)
    decoded = decode_codes(model, codes)
    assert decoded.shape == (frames * FRAME,)

    np.save(GOLDEN / "mimi_codebook_stats.npy", stats)
    np.save(GOLDEN / "mimi_codes.npy", codes)
    np.save(GOLDEN / "mimi_latent.npy", latent.astype(np.float32))
    np.save(GOLDEN / "mimi_enc_seanet.npy", seanet.astype(np.float32))
    np.save(GOLDEN / "mimi_decoded.npy", decoded.astype(np.float32))
    entries = [
        {"name": name, "shape": list(t.shape),
         "sha256": hashlib.sha256(t.contiguous().numpy().astype("<f4").tobytes()).hexdigest()}
        for name, t in final.items()
    ]
    (GOLDEN / "mimi_tensors.json").write_text(json.dumps(entries, indent=1) + "\n")

    rms = lambda a: float(np.sqrt(np.mean(np.square(a.astype(np.float64)))))
    distinct = [len(np.unique(codes[:, k])) for k in range(codes.shape[1])]
    print(f"frames: {frames}")
    print(f"distinct codes per codebook: {distinct}")
    print(f"rms input {rms(audio):.5f}, decoded {rms(decoded):.5f}")
    print(f"total {time.time() - t0:.1f}s")
    assert distinct[0] > 1, "first codebook is constant across frames"


if __name__ == "__main__":
    main()
