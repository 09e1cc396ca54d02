// Linear layer with Q8_0 weights (the layout and parameters of q8_matvec.wgsl) whose dot
// products run on packed 8-bit integers: each workgroup first quantizes the input row into
// workgroup memory, 4096 inputs at a time, as two 8-bit levels per unit of 16 inputs
// (x ~ s (hi + lo / 254), s = max |x| / 127 over the unit: 15 to 16 bits of the unit's
// largest value), and the weights' i8 quants meet them in dot4I8Packed, four products and
// their sum per instruction. An f32 kernel has to turn every weight byte into a float
// first, which costs the H200 more than loading it.
//
// A workgroup of 256 threads is 256 / p.lanes row groups of p.lanes threads; a row group
// computes 4 consecutive output rows of one input row, its lanes taking units l,
// l + lanes, ... of the chunk (two per iteration, for more loads in flight); then a tree
// reduction per row over the group's lanes. Workgroup w computes input row
// w / ceil(n / rows) and its rows (w % ceil(n / rows)) * rows, ... (rows = 4 * 256 / lanes).
//
//   quants, scales, x, alpha, y, norm_out, p: as in q8_matvec.wgsl (p.input 0 to 3 and
//   p.mode 0 to 2 mean the same; for p.input 2 the squares of the raw inputs, for
//   p.input 3 the row's partial sums, are summed in f32 as the units are quantized, the
//   thread of unit u taking partial vec4s u, u + k / 16, ..., and 1 / rms scales the dot
//   products at the end).
//
// k must be a multiple of 32 and n of 4.
//
// A second entry point, `main_attention` (end of the file), forms its input row in
// workgroup memory from a short causal attention before the same quantization and dot
// products: a transformer layer's self-attention and out_proj in one dispatch.

struct Params {
    n: u32,
    k: u32,
    t: u32,
    mode: u32,
    x_offset: u32,
    y_offset: u32,
    y_stride: u32,
    input: u32,
    lanes: u32,
    eps: f32,
    parts: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> quants: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> alpha: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<storage, read_write> norm_out: array<f32>;

const WG: u32 = 256u;
const RT: u32 = 4u;
// units of 16 inputs quantized per chunk: one per thread
const CHUNK: u32 = 256u;

// the chunk's input units: high and low 8-bit levels, the scale s, and (p.input 2) the
// sum of the raw inputs' squares
var<workgroup> x_hi: array<vec4<u32>, 256>;
var<workgroup> x_lo: array<vec4<u32>, 256>;
var<workgroup> x_scale: array<f32, 256>;
var<workgroup> x_sq: array<f32, 256>;
var<workgroup> red: array<vec4<f32>, 256>;
var<workgroup> red_sq: array<f32, 256>;

// set by main_attention only: the input row is the attention output held in `red`
var<private> from_attention: bool;

// f16 bits -> f32 by hand: unpack2x16float would need a capability some backends lack.
fn f16_to_f32(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    var v: f32;
    if (e == 0u) {
        v = f32(m) * 5.9604644775390625e-8;
    } else {
        v = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
    }
    return select(v, -v, (h & 0x8000u) != 0u);
}

fn scale_of(block: u32) -> f32 {
    let word = scales[block >> 1u];
    return f16_to_f32(select(word & 0xffffu, word >> 16u, (block & 1u) == 1u));
}

// Input vec4 v of the row at vec4 `row` as p.input makes it (for p.input 2 before the
// 1 / rms factor); adds the raw squares to *sq for p.input 2.
fn input(row: u32, v: u32, sq: ptr<function, f32>) -> vec4<f32> {
    if (from_attention) {
        return red[v];
    }
    let a = x[row + v];
    if (p.input == 1u) {
        let u = x[row + p.k / 4u + v];
        return a / (vec4<f32>(1.0) + exp(-a)) * u;
    }
    if (p.input == 2u) {
        *sq += dot(a, a);
        return a * alpha[v];
    }
    return a;
}

// The 16 inputs v of a unit as two levels: hi = round(v / s), lo = round((v - s hi) * 254 / s).
fn quantize_unit(slot: u32, a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>) {
    let m4 = max(max(abs(a), abs(b)), max(abs(c), abs(d)));
    let m = max(max(m4.x, m4.y), max(m4.z, m4.w));
    let inv = select(0.0, 127.0 / m, m > 0.0);
    let s = m / 127.0;
    let ha = round(a * inv);
    let hb = round(b * inv);
    let hc = round(c * inv);
    let hd = round(d * inv);
    let inv_lo = 254.0 * inv;
    x_hi[slot] = vec4<u32>(pack4xI8Clamp(vec4<i32>(ha)), pack4xI8Clamp(vec4<i32>(hb)), pack4xI8Clamp(vec4<i32>(hc)), pack4xI8Clamp(vec4<i32>(hd)));
    x_lo[slot] = vec4<u32>(
        pack4xI8Clamp(vec4<i32>(round((a - ha * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((b - hb * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((c - hc * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((d - hd * s) * inv_lo))),
    );
    x_scale[slot] = s;
}

fn dot16(q: vec4<u32>, h: vec4<u32>) -> i32 {
    return (dot4I8Packed(q.x, h.x) + dot4I8Packed(q.y, h.y)) + (dot4I8Packed(q.z, h.z) + dot4I8Packed(q.w, h.w));
}

// Unit u (global) of weight row i against the chunk's unit slot, scaled.
fn unit_dot(i: u32, u: u32, slot: u32) -> f32 {
    let q = quants[i * (p.k / 16u) + u];
    let v = f32(dot16(q, x_hi[slot])) + f32(dot16(q, x_lo[slot])) * (1.0 / 254.0);
    return scale_of(i * (p.k / 32u) + (u >> 1u)) * x_scale[slot] * v;
}

// The linear of both entry points, workgroup wid of nwg, thread lid3.
fn linear(wid: vec3<u32>, nwg: vec3<u32>, lid3: vec3<u32>) {
    let lid = lid3.x;
    let lanes = p.lanes;
    let g = lid / lanes;
    let lane = lid % lanes;
    let rows = (WG / lanes) * RT;
    let per_row = (p.n + rows - 1u) / rows;
    let w = wid.x + wid.y * nwg.x;
    // every workgroup of the grid reaches the barriers below; those past the last input row
    // quantize and compute nothing
    let r = w / per_row;
    let i0 = (w % per_row) * rows + g * RT;
    let live = r < p.t;
    let valid = live && i0 < p.n;
    let nu = p.k / 16u;
    let width = select(p.k, 2u * p.k, p.input == 1u);
    let xrow = (p.x_offset + r * width) / 4u;

    var acc = vec4<f32>(0.0);
    var sq = 0.0;
    for (var c0 = 0u; c0 < nu; c0 += CHUNK) {
        let units = min(CHUNK, nu - c0);
        workgroupBarrier();
        if (live && lid < units) {
            let u = c0 + lid;
            var s = 0.0;
            let a = input(xrow, 4u * u, &s);
            let b = input(xrow, 4u * u + 1u, &s);
            let c = input(xrow, 4u * u + 2u, &s);
            let d = input(xrow, 4u * u + 3u, &s);
            quantize_unit(lid, a, b, c, d);
            if (p.input == 3u) {
                // the partial sums of squares behind the row, vec4 u, u + nu, ...
                for (var j = u; j < p.parts / 4u; j += nu) {
                    let q = x[p.k / 4u + j];
                    s += (q.x + q.y) + (q.z + q.w);
                }
            }
            x_sq[lid] = s;
        }
        workgroupBarrier();
        if (valid) {
            var j = lane;
            for (; j + lanes < units; j += 2u * lanes) {
                let j1 = j + lanes;
                let u = c0 + j;
                let u1 = c0 + j1;
                acc.x += unit_dot(i0, u, j) + unit_dot(i0, u1, j1);
                acc.y += unit_dot(i0 + 1u, u, j) + unit_dot(i0 + 1u, u1, j1);
                acc.z += unit_dot(i0 + 2u, u, j) + unit_dot(i0 + 2u, u1, j1);
                acc.w += unit_dot(i0 + 3u, u, j) + unit_dot(i0 + 3u, u1, j1);
                if (p.input == 2u || p.input == 3u) {
                    sq += x_sq[j] + x_sq[j1];
                }
            }
            if (j < units) {
                let u = c0 + j;
                acc.x += unit_dot(i0, u, j);
                acc.y += unit_dot(i0 + 1u, u, j);
                acc.z += unit_dot(i0 + 2u, u, j);
                acc.w += unit_dot(i0 + 3u, u, j);
                if (p.input == 2u || p.input == 3u) {
                    sq += x_sq[j];
                }
            }
        }
    }
    red[lid] = acc;
    red_sq[lid] = sq;
    workgroupBarrier();
    for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
            red_sq[lid] += red_sq[lid + s];
        }
        workgroupBarrier();
    }
    var sq_row = 0.0;
    if (lane < RT && valid) {
        let i = i0 + lane;
        var v = red[g * lanes][lane];
        if (p.input >= 2u) {
            v *= inverseSqrt(p.eps + red_sq[g * lanes] / f32(p.k));
        }
        let yo = p.y_offset + r * p.y_stride + i;
        if (p.mode == 0u) {
            y[yo] = v;
        } else {
            let yn = y[yo] + v;
            y[yo] = yn;
            if (p.mode == 2u) {
                norm_out[i] = yn * alpha[i / 4u][i % 4u];
                sq_row = yn * yn;
            }
        }
    }
    if (p.mode == 2u) {
        // the group's 4 squares summed by its lane 0 (red_sq is free again: the rows above
        // read it before this barrier)
        workgroupBarrier();
        red_sq[lid] = sq_row;
        workgroupBarrier();
        if (lane == 0u && valid) {
            norm_out[p.n + i0 / RT] = (red_sq[lid] + red_sq[lid + 1u]) + (red_sq[lid + 2u] + red_sq[lid + 3u]);
        }
    }
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    linear(wid, nwg, lid3);
}

// main_attention: the linear above (p.t = 1, p.input 0, p.k = att.dim) whose input row is
// the output of rope_attention_small.wgsl for the new position frame.pos, without rotation
// (att.rope must be 0: Moshi's depformer), formed by every workgroup in `red` before the
// quantization:
//
//   x              : the in_proj output q | k | v [3 dim / 4] vec4, heads of hd = dim / heads
//   k_ring, v_ring : [ring, dim / 4] vec4    pos_ring : [ring]  (0xffffffff when empty)
//   att            : rope_attention_small's Params    frame : its Frame
//
// The window is that of rope_attention_small: positions lo = max(0, pos + 1 - window) ..=
// pos, window = min(context, ring); an older one attends iff pos_ring stamps its slot
// pos_k % ring with pos_k. The new key and value are read from x; workgroup 0 alone writes
// them into slot pos % ring of the rings and stamps pos_ring there. No workgroup of the
// dispatch reads that slot, so there is no race: the older positions lo .. pos - 1 are at
// most window - 1 <= ring - 1 behind pos, so their slots all differ from pos % ring
// (threads read them only for pos_k < pos, and the new position only from x); the next
// dispatch that reads the slot comes after this one.
//
// Scores: s threads per (head, position) pair (s the largest power of two with
// s * heads * window <= 256 and s <= hd / 4), each summing q.k over every s-th vec4 of the
// head into red_sq; an invalid position is marked by NEG in its first part. Values: thread
// c < dim / 4 loads column c of every position of the window before the barrier, then
// takes the softmax of its head's scores and writes its vec4 of the output into red (the
// linear's first barrier orders it before the quantization, which reads red and is done
// before red holds the row sums).
//
// Needs dim a multiple of 32 and at most 1024 (red holds the row), hd a multiple of 4,
// window at most 8 and heads * window at most 256.

struct Attention {
    dim: u32,
    heads: u32,
    ring: u32,
    context: u32,
    scale: f32,
    freq_coef: f32,
    rope: u32,
    t: u32,
}

struct Frame {
    pos: u32,
    first: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(7) var<storage, read_write> k_ring: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> v_ring: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> pos_ring: array<u32>;
@group(0) @binding(10) var<uniform> att: Attention;
@group(0) @binding(11) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
const MAX_WINDOW: u32 = 8u;

@compute @workgroup_size(256)
fn main_attention(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let dim4 = att.dim / 4u;
    let hd4 = dim4 / att.heads;
    let pos_q = frame.pos;
    let slot_q = pos_q % att.ring;
    let window = min(att.context, att.ring);
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;
    if (wid.x + wid.y * nwg.x == 0u && lid < dim4) {
        k_ring[slot_q * dim4 + lid] = x[dim4 + lid];
        v_ring[slot_q * dim4 + lid] = x[2u * dim4 + lid];
        if (lid == 0u) {
            pos_ring[slot_q] = pos_q;
        }
    }
    // part `part` of the score of head h, position pk
    let pairs = att.heads * window;
    var s = 1u;
    while (2u * s * pairs <= WG && 2u * s <= hd4) {
        s *= 2u;
    }
    let part = lid % s;
    let h = (lid / s) / window;
    let pk = lo + (lid / s) % window;
    var d = 0.0;
    if (h < att.heads && pk <= pos_q) {
        let slot = pk % att.ring;
        let valid = pk == pos_q || pos_ring[slot] == pk;
        var acc = vec4<f32>(0.0);
        // hd / 4 / s <= 2 window <= 16 vec4s a part
        for (var i = 0u; i < 16u; i++) {
            let e = part + i * s;
            if (e < hd4) {
                let col = h * hd4 + e;
                var k: vec4<f32>;
                if (pk == pos_q) {
                    k = x[dim4 + col];
                } else {
                    k = k_ring[slot * dim4 + col];
                }
                acc += x[col] * k;
            }
        }
        d = (acc.x + acc.y) + (acc.z + acc.w);
        if (!valid) {
            d = select(0.0, NEG, part == 0u);
        }
    }
    red_sq[lid] = d;
    // column lid of the values of the window
    var vals: array<vec4<f32>, MAX_WINDOW>;
    for (var j = 0u; j < MAX_WINDOW; j++) {
        vals[j] = vec4<f32>(0.0);
        let pj = lo + j;
        if (lid < dim4 && j < nk) {
            if (pj == pos_q) {
                vals[j] = x[2u * dim4 + lid];
            } else {
                vals[j] = v_ring[(pj % att.ring) * dim4 + lid];
            }
        }
    }
    workgroupBarrier();
    if (lid < dim4) {
        let hc = lid / hd4;
        var sc: array<f32, MAX_WINDOW>;
        var m = NEG;
        for (var j = 0u; j < MAX_WINDOW; j++) {
            sc[j] = NEG;
            if (j < nk) {
                var t = 0.0;
                for (var i = 0u; i < s; i++) {
                    t += red_sq[(hc * window + j) * s + i];
                }
                sc[j] = select(t * att.scale, NEG, t < -1.0e38);
                m = max(m, sc[j]);
            }
        }
        var den = 0.0;
        var o = vec4<f32>(0.0);
        for (var j = 0u; j < MAX_WINDOW; j++) {
            if (sc[j] > -1.0e38) {
                let e = exp(sc[j] - m);
                den += e;
                o += e * vals[j];
            }
        }
        red[lid] = o / den;
    }
    from_attention = true;
    linear(wid, nwg, lid3);
}
