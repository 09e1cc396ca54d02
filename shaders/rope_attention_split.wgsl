// rope_attention.wgsl split over the window's positions (flash-decoding): one streaming step
// (t = 1) of causal windowed attention with its rotary embedding and KV push fused, where
// workgroup (s, h) takes positions [s chunk, (s + 1) chunk) of head h's window (counted from
// the oldest) and writes a partial: m, the largest of its scores, l = sum exp(score - m) and
// o = sum exp(score - m) v. attention_combine.wgsl merges a head's partials in a second
// dispatch; with one split (window <= chunk) the workgroup writes the output itself.
//
//   qkv      : [3 dim / 4] vec4   the in_proj output: q | k | v, heads of hd = dim / heads
//   k_ring, v_ring : [ring, dim / 4] vec4    pos_ring : [ring]  (0xffffffff when empty)
//   part     : [heads, splits, hd / 4 + 1] vec4   per split: o, then (m, l, 0, 0)
//   out      : [dim / 4] vec4   (written only with one split)
//
// splits = ceil(min(context, ring) / chunk), the dispatch's x; a split whose positions are not
// in the window yet writes nothing (the combine reads the first ceil(n / chunk) of the n
// positions in the window). The split that holds the new position rotates its key, pushes key
// and value into the rings at slot frame.pos % ring (that split of head 0 stamps the position
// ring) and attends it from workgroup memory: no other workgroup reads that slot,
// since the window never reaches back to the position it held before. Older positions are
// attended iff their slot still holds them and pos - pos_k < context, as rope_attention.wgsl.
//
// Scores: 256 / chunk threads per position (one if chunk > 256), each a strided part of the
// dot product. Weighted values: (vec4 column, position lane) pairs. hd must be a multiple of 4,
// at most 256; chunk at most 512.

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    context: u32,
    scale: f32,
    freq_coef: f32,
    rope: u32,
    chunk: u32,
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
@group(0) @binding(4) var<storage, read_write> part: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
const WG: u32 = 256u;
var<workgroup> qs: array<vec4<f32>, 64>;
var<workgroup> kn: array<vec4<f32>, 64>;
var<workgroup> vn: array<vec4<f32>, 64>;
// partial dot products [position, thread of the position], then the scores
var<workgroup> dots: array<f32, 512>;
var<workgroup> sc: array<f32, 512>;
var<workgroup> acc_part: array<vec4<f32>, 256>;
var<workgroup> l_part: array<f32, 256>;

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

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let s = wid.x;
    let h = wid.y;
    let hd4 = p.dim / p.heads / 4u;
    let dim4 = p.dim / 4u;
    let pos_q = frame.pos;
    let slot_q = pos_q % p.ring;
    let window = min(p.context, p.ring);
    let splits = (window + p.chunk - 1u) / p.chunk;
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;
    // this split's positions, lo + a + j for j < n (uniform: the same in every thread)
    let a = s * p.chunk;
    if (a >= nk) {
        return;
    }
    let n = min(p.chunk, nk - a);
    let has_new = a + n == nk;

    if (lid < hd4) {
        let col = h * hd4 + lid;
        qs[lid] = rotate(qkv[col], 2u * lid, pos_q);
        if (has_new) {
            let k = rotate(qkv[dim4 + col], 2u * lid, pos_q);
            let v = qkv[2u * dim4 + col];
            kn[lid] = k;
            vn[lid] = v;
            k_ring[slot_q * dim4 + col] = k;
            v_ring[slot_q * dim4 + col] = v;
            if (h == 0u && lid == 0u) {
                pos_ring[slot_q] = pos_q;
            }
        }
    }
    workgroupBarrier();

    // partial dots: tp threads per position, thread r takes vec4s r, r + tp, ...; a position
    // whose slot does not hold it is marked by NEG in its first part
    let tp = max(1u, WG / p.chunk);
    let r = lid % tp;
    for (var j = lid / tp; j < n; j += WG / tp) {
        let pk = lo + a + j;
        var d = 0.0;
        if (pk == pos_q) {
            for (var e = r; e < hd4; e += tp) {
                d += dot(qs[e], kn[e]);
            }
        } else {
            let slot = pk % p.ring;
            if (pos_ring[slot] == pk) {
                let ko = slot * dim4 + h * hd4;
                for (var e = r; e < hd4; e += tp) {
                    d += dot(qs[e], k_ring[ko + e]);
                }
            } else if (r == 0u) {
                d = NEG;
            }
        }
        dots[j * tp + r] = d;
    }
    workgroupBarrier();
    for (var j = lid; j < n; j += WG) {
        var t = 0.0;
        for (var i = 0u; i < tp; i++) {
            t += dots[j * tp + i];
        }
        sc[j] = select(t * p.scale, NEG, t < -1.0e38);
    }
    workgroupBarrier();

    var m = NEG;
    for (var j = 0u; j < n; j++) {
        m = max(m, sc[j]);
    }
    // weighted values: column c of position lanes g, g + groups, ...
    let groups = WG / hd4;
    let c = lid % hd4;
    let g = lid / hd4;
    var acc = vec4<f32>(0.0);
    var l = 0.0;
    if (g < groups) {
        for (var j = g; j < n; j += groups) {
            let sj = sc[j];
            if (sj > -1.0e38) {
                let w = exp(sj - m);
                let pk = lo + a + j;
                var v = vn[c];
                if (pk != pos_q) {
                    v = v_ring[(pk % p.ring) * dim4 + h * hd4 + c];
                }
                acc += w * v;
                l += w;
            }
        }
    }
    acc_part[lid] = acc;
    if (c == 0u) {
        l_part[g] = l;
    }
    workgroupBarrier();
    if (lid < hd4) {
        var o = vec4<f32>(0.0);
        var lt = 0.0;
        for (var i = 0u; i < groups; i++) {
            o += acc_part[i * hd4 + lid];
            lt += l_part[i];
        }
        if (splits == 1u) {
            out[h * hd4 + lid] = o / lt;
        } else {
            let base = (h * splits + s) * (hd4 + 1u);
            part[base + lid] = o;
            if (lid == 0u) {
                part[base + hd4] = vec4<f32>(m, lt, 0.0, 0.0);
            }
        }
    }
}
