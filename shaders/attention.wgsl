// Causal windowed attention of t new queries over a KV ring, one workgroup of 256 threads per
// (row, head): a thread per key for the scores, then (column vec4, key lane) pairs for the
// weighted sum of values. hd = dim / heads must be a multiple of 4, at most 256.
//
//   q        : [t, dim / 4] vec4   k_ring, v_ring : [ring, dim / 4] vec4   pos_ring : [ring]
//   scores   : [t, heads, ring]  scratch
//   out      : [t, dim / 4] vec4
//
// Position pos_k is attended iff its slot (pos_k % ring) still holds it and
// 0 <= pos_q - pos_k < context, as the reference masks it (StreamingMultiheadAttention with
// RingKVCache). softmax(q.k * scale) . v, the max subtracted first. Scores are indexed by
// key position from the oldest in the window.

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    t: u32,
    context: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

// after frame.wgsl (Frame)
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k_ring: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v_ring: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> pos_ring: array<u32>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;
var<workgroup> qs: array<vec4<f32>, 64>;
var<workgroup> part: array<vec4<f32>, 256>;

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
    let r = wid.x;
    let h = wid.y;
    let hd4 = p.dim / p.heads / 4u;
    let dim4 = p.dim / 4u;
    let pos_q = frame.pos + r;
    let so = (r * p.heads + h) * p.ring;
    if (lid < hd4) {
        qs[lid] = q[r * dim4 + h * hd4 + lid];
    }
    workgroupBarrier();
    // Only positions inside the window can be attended: walk those (oldest first) instead of
    // every slot, so the cost follows the keys present, not the ring's capacity.
    let window = min(p.context, p.ring);
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;

    var lmax = NEG;
    for (var i = lid; i < nk; i += WG) {
        let pk = lo + i;
        let slot = pk % p.ring;
        var s = NEG;
        if (pos_ring[slot] == pk) {
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

    // Thread (key lane kl, column c) sums keys kl, kl + lanes, ... of column vec4 c.
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
        out[r * dim4 + h * hd4 + lid] = sum / den;
    }
}
