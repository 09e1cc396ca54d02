// rope_attention.wgsl for a short window (Moshi's depformer: 8 positions of 16 vec4s): one
// workgroup of 256 threads per head, a thread per (position, vec4 column) of the window. Each
// thread loads its column of the query, key and value in one go (the new position's from
// qkv, rotated, and pushes them into the rings at slot frame.pos % ring; head 0 stamps the
// position ring), so the kernel waits on memory once; then three barriers: the dot products'
// parts, the scores, the weighted values.
//
//   qkv      : [3 dim / 4] vec4   the in_proj output: q | k | v, heads of hd = dim / heads
//   k_ring, v_ring : [ring, dim / 4] vec4    pos_ring : [ring]  (0xffffffff when empty)
//   out      : [dim / 4] vec4
//
// min(context, ring) * hd / 4 must be at most 256 and min(context, ring) at most 32. Older
// positions are attended iff their slot still holds them and pos - pos_k < context, as
// rope_attention.wgsl; no thread reads the slot being written (the window never reaches back
// to the position it held before). With p.rope == 0 keys and queries go in unrotated.

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    context: u32,
    scale: f32,
    freq_coef: f32,
    rope: u32,
    // rope_attention.wgsl's row count, unread here (one new position)
    t: u32,
}

// after frame.wgsl (Frame) and rope.wgsl (rotate)
@group(0) @binding(0) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> k_ring: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> v_ring: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> pos_ring: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
var<workgroup> dots: array<f32, 256>;
var<workgroup> sc: array<vec4<f32>, 8>;
var<workgroup> part: array<vec4<f32>, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let hd4 = p.dim / p.heads / 4u;
    let dim4 = p.dim / 4u;
    let pos_q = frame.pos;
    let slot_q = pos_q % p.ring;
    let window = min(p.context, p.ring);
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;
    // position lo + j, column c of the head
    let j = lid / hd4;
    let c = lid % hd4;
    let col = h * hd4 + c;
    var v = vec4<f32>(0.0);
    var d = 0.0;
    var valid = false;
    if (j < nk) {
        let pk = lo + j;
        let q = rotate(qkv[col], 2u * c, pos_q);
        var k: vec4<f32>;
        if (pk == pos_q) {
            k = rotate(qkv[dim4 + col], 2u * c, pos_q);
            v = qkv[2u * dim4 + col];
            k_ring[slot_q * dim4 + col] = k;
            v_ring[slot_q * dim4 + col] = v;
            if (h == 0u && c == 0u) {
                pos_ring[slot_q] = pos_q;
            }
            valid = true;
        } else {
            let slot = pk % p.ring;
            valid = pos_ring[slot] == pk;
            k = k_ring[slot * dim4 + col];
            v = v_ring[slot * dim4 + col];
        }
        d = dot(q, k);
        // a position whose slot does not hold it is marked by NEG in its first column
        if (!valid) {
            d = select(0.0, NEG, c == 0u);
        }
    }
    dots[lid] = d;
    workgroupBarrier();
    // scores, four to a vec4, NEG past nk
    let n4 = (nk + 3u) / 4u;
    if (lid < 4u * n4) {
        var t = 0.0;
        if (lid < nk) {
            for (var e = 0u; e < hd4; e++) {
                t += dots[lid * hd4 + e];
            }
        }
        sc[lid / 4u][lid % 4u] = select(t * p.scale, NEG, lid >= nk || t < -1.0e38);
    }
    workgroupBarrier();
    var m = NEG;
    for (var i = 0u; i < n4; i++) {
        let s4 = sc[i];
        m = max(m, max(max(s4.x, s4.y), max(s4.z, s4.w)));
    }
    var den = 0.0;
    for (var i = 0u; i < n4; i++) {
        let s4 = sc[i];
        let e4 = select(vec4<f32>(0.0), exp(s4 - m), s4 > vec4<f32>(-1.0e38));
        den += e4.x + e4.y + e4.z + e4.w;
    }
    var ev = vec4<f32>(0.0);
    if (valid) {
        ev = exp(sc[j / 4u][j % 4u] - m) * v;
    }
    part[lid] = ev;
    workgroupBarrier();
    if (lid < hd4) {
        var o = vec4<f32>(0.0);
        for (var i = 0u; i < nk; i++) {
            o += part[i * hd4 + lid];
        }
        out[h * hd4 + lid] = o / den;
    }
}
