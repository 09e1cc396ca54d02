// Causal windowed attention of t new queries over a KV ring, one workgroup per (row, head).
//
//   q        : [t, dim]       k_ring, v_ring : [ring, dim]     pos_ring : [ring]
//   scores   : [t, heads, ring]  scratch
//   out      : [t, dim]
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

struct Frame {
    pos: u32,
    first: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_ring: array<f32>;
@group(0) @binding(2) var<storage, read> v_ring: array<f32>;
@group(0) @binding(3) var<storage, read> pos_ring: array<u32>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let r = wid.x;
    let h = wid.y;
    let hd = p.dim / p.heads;
    let pos_q = frame.pos + r;
    let qo = r * p.dim + h * hd;
    let so = (r * p.heads + h) * p.ring;
    // Only positions inside the window can be attended: walk those (oldest first) instead of
    // every slot, so the cost follows the keys present, not the ring's capacity.
    let window = min(p.context, p.ring);
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;

    var lmax = NEG;
    for (var i = lid; i < nk; i += 64u) {
        let pk = lo + i;
        let slot = pk % p.ring;
        var s = NEG;
        if (pos_ring[slot] == pk) {
            let ko = slot * p.dim + h * hd;
            var acc = 0.0;
            for (var e = 0u; e < hd; e++) {
                acc += q[qo + e] * k_ring[ko + e];
            }
            s = acc * p.scale;
        }
        scores[so + i] = s;
        lmax = max(lmax, s);
    }
    red[lid] = lmax;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let gmax = red[0];
    workgroupBarrier();

    var lsum = 0.0;
    for (var i = lid; i < nk; i += 64u) {
        let s = scores[so + i];
        var e = 0.0;
        if (s > -1.0e38) {
            e = exp(s - gmax);
        }
        scores[so + i] = e;
        lsum += e;
    }
    red[lid] = lsum;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let den = red[0];
    storageBarrier();
    workgroupBarrier();

    for (var d = lid; d < hd; d += 64u) {
        var acc = 0.0;
        for (var i = 0u; i < nk; i++) {
            acc += scores[so + i] * v_ring[((lo + i) % p.ring) * p.dim + h * hd + d];
        }
        out[r * p.dim + h * hd + d] = acc / den;
    }
}
