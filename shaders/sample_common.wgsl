// The parameters, bindings and helpers shared by the two sampling kernels (sample.wgsl,
// sample_radix8.wgsl; moshi.utils.sampling sample_token): the kernel table prepends
// frame.wgsl and this file to each.
//
//   logits : [..] f32, this draw's n values from p.offset   tokens : [slots] i32

struct Params {
    n: u32,
    top_k: u32,
    offset: u32,
    slot: u32,
    greedy: u32,
    inv_temp: f32,
    seed: u32,
    stream: u32,
    emb_dim: u32,
    emb_rows: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> tokens: array<i32>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> frame: Frame;
@group(0) @binding(4) var<storage, read> emb: array<f32>;
@group(0) @binding(5) var<storage, read_write> emb_out: array<f32>;

// With p.emb_dim > 0, row `token` of `emb` ([p.emb_rows, p.emb_dim]) is added into emb_out
// (the next depformer step's input, embed_sum.wgsl's add fused here); a token past the table
// (-1 when n == 0) adds nothing.
fn add_embedding(lid: u32, token: u32) {
    if (p.emb_dim == 0u || token >= p.emb_rows) {
        return;
    }
    for (var j = lid; j < p.emb_dim; j += 256u) {
        emb_out[j] += emb[token * p.emb_dim + j];
    }
}

// The order-preserving u32 of an f32's bits (sign set: ~bits, else bits | 2^31).
fn key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// PCG-style integer hash.
fn pcg(v: u32) -> u32 {
    let s = v * 747796405u + 2891336453u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (w >> 22u) ^ w;
}
