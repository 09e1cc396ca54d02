// A short window's attention for one new position (rope_attention_small.wgsl's, Moshi's
// depformer: 8 positions of 16 vec4s a head) and out_proj's columns of the heads it
// attended, in one dispatch: a transformer layer's self-attention and out_proj with no
// barrier between them. Workgroup (b, g) attends heads g G .. g G + G - 1 (G = p.group) of
// the window, a thread per (head, position, vec4 column) as in rope_attention_small, then
// dots its p.rows output rows b p.rows .. with those heads' G hd columns of out_proj's Q8_0
// weights (the layout of q8_blocks.wgsl), a thread per (row, unit of 16 columns): the
// head group's part of out_proj, written as partial row g. The rows that read the residual
// next add the partial rows in (q8_matvec_dot4.wgsl's p.partials).
//
//   quants, scales : out_proj's Q8_0 weights [dim, dim]
//   qkv      : [3 dim / 4] vec4   the in_proj output: q | k | v, heads of hd = dim / heads
//   k_ring, v_ring : [ring, dim / 4] vec4    pos_ring : [ring]  (0xffffffff when empty)
//   parts    : the residual row's buffer: partial row g at (1 + g) dim .. (2 + g) dim
//
// G * min(context, ring) * hd / 4 must be at most 256, p.rows * G * hd / 16 exactly 256,
// hd a multiple of 4 and G hd of 16. Every workgroup attends over the older positions from
// the rings and over the new one from qkv; workgroups (0, g) push the new key and value of
// their heads into slot frame.pos % ring, and (0, 0) stamps the position ring there. No
// workgroup reads that slot (the window never reaches back to the position it held), so the
// pushes race with nothing; the next dispatch that reads them comes after this one.

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    context: u32,
    scale: f32,
    freq_coef: f32,
    rope: u32,
    group: u32,
    rows: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// after frame.wgsl (Frame), q8_blocks.wgsl (quants, scales) and rope.wgsl (rotate)
@group(0) @binding(2) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> k_ring: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> v_ring: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> pos_ring: array<u32>;
@group(0) @binding(6) var<storage, read_write> parts: array<f32>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
const WG: u32 = 256u;
// the (head, position, column) parts of the dot products, then the rows' unit sums
var<workgroup> dots: array<f32, 256>;
// the window's values, (head, position, column)
var<workgroup> vals: array<vec4<f32>, 256>;
// the scores, (head, position)
var<workgroup> sc: array<f32, 256>;
// the attention output of the group's heads, (head, column)
var<workgroup> att: array<vec4<f32>, 64>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let g = wid.y;
    let hd4 = p.dim / p.heads / 4u;
    let dim4 = p.dim / 4u;
    // this thread's unit of out_proj: row i, unit u of the group's columns (its weights
    // load before the attention, so that their round trip overlaps it)
    let units = p.group * hd4 / 4u;
    let i = wid.x * p.rows + lid / units;
    let u = lid % units;
    let ug = g * units + u;
    let wq = quants[i * (p.dim / 16u) + ug];
    let ws = scale_of(i * (p.dim / 32u) + (ug >> 1u));

    let pos_q = frame.pos;
    let slot_q = pos_q % p.ring;
    let window = min(p.context, p.ring);
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;
    // head hl of the group, position lo + j, column c of the head
    let hl = lid / (window * hd4);
    let j = (lid / hd4) % window;
    let c = lid % hd4;
    let h = g * p.group + hl;
    let col = h * hd4 + c;
    var v = vec4<f32>(0.0);
    var d = 0.0;
    if (hl < p.group && j < nk) {
        let pk = lo + j;
        let q = rotate(qkv[col], 2u * c, pos_q);
        var k: vec4<f32>;
        var valid = true;
        if (pk == pos_q) {
            k = rotate(qkv[dim4 + col], 2u * c, pos_q);
            v = qkv[2u * dim4 + col];
            if (wid.x == 0u) {
                k_ring[slot_q * dim4 + col] = k;
                v_ring[slot_q * dim4 + col] = v;
                if (h == 0u && c == 0u) {
                    pos_ring[slot_q] = pos_q;
                }
            }
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
            v = vec4<f32>(0.0);
        }
    }
    dots[lid] = d;
    vals[lid] = v;
    workgroupBarrier();
    // scores of (head, position), NEG past nk
    if (lid < p.group * window) {
        let jj = lid % window;
        var t = 0.0;
        if (jj < nk) {
            for (var e = 0u; e < hd4; e++) {
                t += dots[lid * hd4 + e];
            }
        }
        sc[lid] = select(t * p.scale, NEG, jj >= nk || t < -1.0e38);
    }
    workgroupBarrier();
    // the attention output of (head, column): the new position always counts, so the
    // largest score is finite
    if (lid < p.group * hd4) {
        let hh = lid / hd4;
        let cc = lid % hd4;
        var m = NEG;
        for (var jj = 0u; jj < nk; jj++) {
            m = max(m, sc[hh * window + jj]);
        }
        var den = 0.0;
        var o = vec4<f32>(0.0);
        for (var jj = 0u; jj < nk; jj++) {
            let s = sc[hh * window + jj];
            let e = select(0.0, exp(s - m), s > -1.0e38);
            den += e;
            o += e * vals[(hh * window + jj) * hd4 + cc];
        }
        att[lid] = o / den;
    }
    workgroupBarrier();
    // row i's unit u against the attention output's 16 columns 16 u ..
    let x0 = att[4u * u];
    let x1 = att[4u * u + 1u];
    let x2 = att[4u * u + 2u];
    let x3 = att[4u * u + 3u];
    let dq = (dot(i8x4(wq.x), x0) + dot(i8x4(wq.y), x1)) + (dot(i8x4(wq.z), x2) + dot(i8x4(wq.w), x3));
    dots[lid] = ws * dq;
    workgroupBarrier();
    if (u == 0u) {
        var s = 0.0;
        for (var e = 0u; e < units; e++) {
            s += dots[lid + e];
        }
        parts[(1u + g) * p.dim + i] = s;
    }
}
