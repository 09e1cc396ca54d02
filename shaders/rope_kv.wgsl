// Rotary embedding (interleaved pairs, moshi.modules.rope.apply_rope) on the queries and keys
// of t new positions, and the push of the keys and values into the KV ring.
//
//   qkv      : [t, 3 * dim]   the in_proj output: q | k | v, heads of hd = dim / heads each
//   q        : [t, dim]       rotated queries
//   k_ring   : [ring, dim]    rotated keys, slot = position % ring
//   v_ring   : [ring, dim]
//   pos_ring : [ring]         absolute position held by each slot, 0xffffffff when empty
//
// Position of row r: frame.pos + r. One thread per (row, head, pair). With p.rope == 0 the
// keys and queries are pushed unrotated (Moshi's depformer has no positional embedding).
// rotation: (a, b) -> (a cos - b sin, a sin + b cos), angle = pos * exp(j * p.freq_coef),
// freq_coef = -ln(max_period) * 2 / hd (computed on the CPU in f64, as the reference's
// Python float, then rounded to f32).

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    t: u32,
    freq_coef: f32,
    rope: u32,
    _pad1: u32,
    _pad2: u32,
}

// after frame.wgsl (Frame)
@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k_ring: array<f32>;
@group(0) @binding(3) var<storage, read_write> v_ring: array<f32>;
@group(0) @binding(4) var<storage, read_write> pos_ring: array<u32>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<uniform> frame: Frame;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let half_dim = p.dim / 2u;
    let idx = gid.x;
    if (idx >= p.t * half_dim) {
        return;
    }
    let r = idx / half_dim;
    let pair = idx % half_dim;
    let hd = p.dim / p.heads;
    let h = pair / (hd / 2u);
    let j = pair % (hd / 2u);
    let pos = frame.pos + r;
    let slot = pos % p.ring;
    let freq = exp(f32(j) * p.freq_coef);
    let angle = freq * f32(pos);
    var cs = cos(angle);
    var sn = sin(angle);
    if (p.rope == 0u) {
        cs = 1.0;
        sn = 0.0;
    }
    let col = h * hd + 2u * j;
    let src = r * 3u * p.dim + col;
    let qa = qkv[src];
    let qb = qkv[src + 1u];
    q[r * p.dim + col] = qa * cs - qb * sn;
    q[r * p.dim + col + 1u] = qa * sn + qb * cs;
    let ka = qkv[src + p.dim];
    let kb = qkv[src + p.dim + 1u];
    let dst = slot * p.dim + col;
    k_ring[dst] = ka * cs - kb * sn;
    k_ring[dst + 1u] = ka * sn + kb * cs;
    v_ring[dst] = qkv[src + 2u * p.dim];
    v_ring[dst + 1u] = qkv[src + 2u * p.dim + 1u];
    if (pair == 0u) {
        pos_ring[slot] = pos;
    }
}
