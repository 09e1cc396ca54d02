// One streaming step (t = 1) of causal windowed attention with its rotary embedding and KV
// push fused (rope_kv then attention, for one new position): one workgroup of 256 threads
// per head. The head's query and key are rotated (interleaved pairs, as rope_kv.wgsl does it,
// moshi.modules.rope.apply_rope), its key and value written into the rings at slot
// frame.pos % ring, then the query attends over the window as attention.wgsl does.
//
//   qkv      : [3 dim / 4] vec4   the in_proj output: q | k | v, heads of hd = dim / heads
//   k_ring, v_ring : [ring, dim / 4] vec4    pos_ring : [ring]  (0xffffffff when empty)
//   scores   : [heads, ring]  scratch
//   out      : [dim / 4] vec4
//
// hd must be a multiple of 4, at most 256. The new key is attended without reading the
// position ring (the first workgroup stamps it; other heads may not see that yet); older
// positions are attended iff their slot still holds them and pos - pos_k < context. With
// p.rope == 0 keys and queries go in unrotated (Moshi's depformer).

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    context: u32,
    scale: f32,
    freq_coef: f32,
    rope: u32,
    _pad0: u32,
}

struct Frame {
    pos: u32,
    first: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> k_ring: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> v_ring: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> pos_ring: array<u32>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;
var<workgroup> qs: array<vec4<f32>, 64>;
var<workgroup> part: array<vec4<f32>, 256>;

// Rotate the pairs (a.x, a.y) and (a.z, a.w), pair indices j0 and j0 + 1 of the head.
fn rotate(a: vec4<f32>, j0: u32, pos: u32) -> vec4<f32> {
    if (p.rope == 0u) {
        return a;
    }
    let f0 = exp(f32(j0) * p.freq_coef);
    let f1 = exp(f32(j0 + 1u) * p.freq_coef);
    let a0 = f0 * f32(pos);
    let a1 = f1 * f32(pos);
    let c0 = cos(a0);
    let s0 = sin(a0);
    let c1 = cos(a1);
    let s1 = sin(a1);
    return vec4<f32>(a.x * c0 - a.y * s0, a.x * s0 + a.y * c0, a.z * c1 - a.w * s1, a.z * s1 + a.w * c1);
}

fn reduce_max(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    return m;
}

fn reduce_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    return m;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let hd4 = p.dim / p.heads / 4u;
    let dim4 = p.dim / 4u;
    let pos_q = frame.pos;
    let slot_q = pos_q % p.ring;
    let so = h * p.ring;
    if (lid < hd4) {
        let col = h * hd4 + lid;
        qs[lid] = rotate(qkv[col], 2u * lid, pos_q);
        k_ring[slot_q * dim4 + col] = rotate(qkv[dim4 + col], 2u * lid, pos_q);
        v_ring[slot_q * dim4 + col] = qkv[2u * dim4 + col];
        if (h == 0u && lid == 0u) {
            pos_ring[slot_q] = pos_q;
        }
    }
    storageBarrier();
    workgroupBarrier();
    let window = min(p.context, p.ring);
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;

    var lmax = NEG;
    for (var i = lid; i < nk; i += WG) {
        let pk = lo + i;
        let slot = pk % p.ring;
        var s = NEG;
        if (pk == pos_q || pos_ring[slot] == pk) {
            let ko = slot * dim4 + h * hd4;
            var acc = vec4<f32>(0.0);
            for (var e = 0u; e < hd4; e++) {
                acc += qs[e] * k_ring[ko + e];
            }
            s = (acc.x + acc.y + acc.z + acc.w) * p.scale;
        }
        scores[so + i] = s;
        lmax = max(lmax, s);
    }
    let gmax = reduce_max(lid, lmax);

    var lsum = 0.0;
    for (var i = lid; i < nk; i += WG) {
        let s = scores[so + i];
        var e = 0.0;
        if (s > -1.0e38) {
            e = exp(s - gmax);
        }
        scores[so + i] = e;
        lsum += e;
    }
    let den = reduce_sum(lid, lsum);
    storageBarrier();
    workgroupBarrier();

    let lanes = WG / hd4;
    let c = lid % hd4;
    let kl = lid / hd4;
    var acc = vec4<f32>(0.0);
    if (kl < lanes) {
        for (var i = kl; i < nk; i += lanes) {
            acc += scores[so + i] * v_ring[((lo + i) % p.ring) * dim4 + h * hd4 + c];
        }
    }
    part[lid] = acc;
    workgroupBarrier();
    if (lid < hd4) {
        var sum = vec4<f32>(0.0);
        for (var l = 0u; l < lanes; l++) {
            sum += part[l * hd4 + lid];
        }
        out[h * hd4 + lid] = sum / den;
    }
}
