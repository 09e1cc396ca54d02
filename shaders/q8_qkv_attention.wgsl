// A transformer layer's in_proj (Q8_0, on the i8 dot products of q8_matvec_dot4.wgsl) and
// its self-attention over a short window in one dispatch: one workgroup of 256 threads per
// head. Moshi's depformer (16 heads of 64, 8 positions, no positional embedding) takes it,
// where the two dispatches it replaces waited on each other for little work each.
//
// Workgroup h: the RMSNorm of the input row is quantized into workgroup memory (as
// q8_matvec_dot4.wgsl's p.input 2 and 3 do it), then the head's 3 hd rows of in_proj
// (query rows h hd .., key rows dim + h hd .., value rows 2 dim + h hd ..) are computed by
// row groups of p.lanes threads, 4 rows a group, into workgroup memory; the head's new key
// and value go into the rings at slot frame.pos % ring (head 0 stamps the position ring),
// and the query attends over the window as rope_attention_small.wgsl does, unrotated.
//
//   quants, scales : in_proj [3 dim, dim] Q8_0 (q8_dot4_common.wgsl)
//   x      : u32 words. p.input 2: the raw row [dim], normed here with the gain alpha;
//            p.input 3: a row already times its gain then dim / 4 partial sums of its
//            squares (a NormedRow, as a residual add of q8_matvec_dot4.wgsl prepares it)
//   alpha  : [dim / 4] vec4 (p.input 2)
//   k_ring, v_ring : [ring, dim / 4] vec4    pos_ring : [ring]  (0xffffffff when empty)
//   out    : [dim / 4] vec4   the attention's output row
//
// dim must be a multiple of 32 and at most 2048 (128 units of 16), hd = dim / heads a
// multiple of 4 and at most 256, min(context, ring) at most 32 and min(context, ring) *
// hd / 4 at most 256. y = rsqrt(eps + mean(x^2)) * (W (x * alpha)), the RMSNorm's factor
// taken after the dot products, as q8_matvec_dot4.wgsl does.

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    context: u32,
    scale: f32,
    input: u32,
    lanes: u32,
    eps: f32,
}

struct Frame {
    pos: u32,
    first: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(2) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> alpha: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> k_ring: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> v_ring: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> pos_ring: array<u32>;
@group(0) @binding(7) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(8) var<uniform> p: Params;
@group(0) @binding(9) var<uniform> frame: Frame;

const WG: u32 = 256u;
const NEG: f32 = -3.0e38;

// the input's units: levels and scales, at most 128
var<workgroup> x_hi: array<vec4<u32>, 128>;
var<workgroup> x_lo: array<vec4<u32>, 128>;
var<workgroup> x_scale: array<f32, 128>;
// the squares' tree, then the dot products' parts of the attention
var<workgroup> sq: array<f32, 256>;
var<workgroup> dots: array<f32, 256>;
// the row groups' partial sums, then the attention's weighted values
var<workgroup> red: array<vec4<f32>, 256>;
// the head's query, key and value: vec4s [0, hd4), [hd4, 2 hd4), [2 hd4, 3 hd4)
var<workgroup> head: array<vec4<f32>, 192>;
var<workgroup> sc: array<vec4<f32>, 8>;

fn xf(i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(x[i]);
}

// Rows i .. i + 3 of in_proj against the input's unit u.
fn rows_dot(i: u32, u: u32) -> vec4<f32> {
    let hi = x_hi[u];
    let lo = x_lo[u];
    let s = x_scale[u];
    let k = p.dim;
    return vec4<f32>(row_unit_dot(i, k, u, hi, lo, s), row_unit_dot(i + 1u, k, u, hi, lo, s), row_unit_dot(i + 2u, k, u, hi, lo, s), row_unit_dot(i + 3u, k, u, hi, lo, s));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let dim = p.dim;
    let nu = dim / 16u;
    let hd = dim / p.heads;
    let hd4 = hd / 4u;
    let dim4 = dim / 4u;

    // 1. the input's units, quantized; the squares behind the norm
    var s2 = 0.0;
    if (lid < nu) {
        var v: array<vec4<f32>, 4>;
        for (var e = 0u; e < 4u; e++) {
            let a = xf(4u * lid + e);
            if (p.input == 2u) {
                s2 += dot(a, a);
                v[e] = a * alpha[4u * lid + e];
            } else {
                v[e] = a;
            }
        }
        if (p.input == 3u) {
            let q = xf(dim4 + lid);
            s2 = (q.x + q.y) + (q.z + q.w);
        }
        let l = levels(v[0], v[1], v[2], v[3]);
        x_hi[lid] = l.hi;
        x_lo[lid] = l.lo;
        x_scale[lid] = l.s;
    }
    sq[lid] = s2;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) {
            sq[lid] += sq[lid + st];
        }
        workgroupBarrier();
    }
    let f = inverseSqrt(p.eps + sq[0] / f32(dim));

    // 2. the head's 3 hd rows, 4 * (256 / lanes) a pass
    let lanes = p.lanes;
    let g = lid / lanes;
    let lane = lid % lanes;
    let per_pass = 4u * (WG / lanes);
    for (var r0 = 0u; r0 < 3u * hd; r0 += per_pass) {
        let rr = r0 + 4u * g;
        var acc = vec4<f32>(0.0);
        if (rr < 3u * hd) {
            let i = (rr / hd) * dim + h * hd + rr % hd;
            var u = lane;
            for (; u + lanes < nu; u += 2u * lanes) {
                acc += rows_dot(i, u) + rows_dot(i, u + lanes);
            }
            if (u < nu) {
                acc += rows_dot(i, u);
            }
        }
        red[lid] = acc;
        workgroupBarrier();
        for (var st = lanes / 2u; st > 0u; st = st >> 1u) {
            if (lane < st) {
                red[lid] += red[lid + st];
            }
            workgroupBarrier();
        }
        if (lane == 0u && rr < 3u * hd) {
            head[rr / 4u] = red[lid] * f;
        }
        workgroupBarrier();
    }

    // 3. push the new key and value, attend (rope_attention_small.wgsl without rotation)
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
        var k: vec4<f32>;
        if (pk == pos_q) {
            k = head[hd4 + c];
            v = head[2u * hd4 + c];
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
        d = dot(head[c], k);
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
    red[lid] = ev;
    workgroupBarrier();
    if (lid < hd4) {
        var o = vec4<f32>(0.0);
        for (var i = 0u; i < nk; i++) {
            o += red[i * hd4 + lid];
        }
        out[h * hd4 + lid] = o / den;
    }
}
