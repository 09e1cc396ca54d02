// Causal windowed attention of t new queries over a KV ring, one workgroup per (row, head).
//
//   q        : [t, dim]       k_ring, v_ring : [ring, dim]     pos_ring : [ring]
//   scores   : [t, heads, ring]  scratch
//   out      : [t, dim]
//
// A slot is attended iff it holds a position (not 0xffffffff) with
// 0 <= pos_q - pos_k < context, as the reference masks it (StreamingMultiheadAttention with
// RingKVCache). softmax(q.k * scale) . v, the max subtracted first.

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

    var lmax = NEG;
    for (var j = lid; j < p.ring; j += 64u) {
        let pk = pos_ring[j];
        var s = NEG;
        if (pk != 0xffffffffu && pk <= pos_q && pos_q - pk < p.context) {
            let ko = j * p.dim + h * hd;
            var acc = 0.0;
            for (var i = 0u; i < hd; i++) {
                acc += q[qo + i] * k_ring[ko + i];
            }
            s = acc * p.scale;
        }
        scores[so + j] = s;
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
    for (var j = lid; j < p.ring; j += 64u) {
        let s = scores[so + j];
        var e = 0.0;
        if (s > -1.0e38) {
            e = exp(s - gmax);
        }
        scores[so + j] = e;
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
        for (var j = 0u; j < p.ring; j++) {
            acc += scores[so + j] * v_ring[j * p.dim + h * hd + d];
        }
        out[r * p.dim + h * hd + d] = acc / den;
    }
}
