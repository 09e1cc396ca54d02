// What the two i8 kernels of the Q8_0 linears share (q8_matvec_dot4.wgsl, whose workgroups
// quantize the input row into workgroup memory, and q8_matvec_dot4_inline.wgsl, whose row
// groups quantize the units they read themselves): the layout and parameters of
// q8_matvec.wgsl, the quantization of a unit of 16 inputs to two 8-bit levels
// (x ~ s (hi + lo / 254), s = max |x| / 127 over the unit: 15 to 16 bits of the unit's
// largest value), its dot product with 4 rows' weights by dot4I8Packed, and the end: the
// reduction over a row group's lanes and the output's modes.
//
//   quants, scales, x, alpha, y, norm_out, p: as in q8_matvec.wgsl (p.input 0 to 3 and
//   p.mode 0 to 2 mean the same; for p.input 2 the squares of the raw inputs, for
//   p.input 3 the row's partial sums, are summed in f32 as the units are quantized, the
//   thread of unit u taking partial vec4s u, u + k / 16, ..., and 1 / rms scales the dot
//   products at the end).
//
// k must be a multiple of 32 and n of 4.

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
// units of 16 inputs per chunk
const CHUNK: u32 = 256u;

var<workgroup> red: array<vec4<f32>, 256>;
var<workgroup> red_sq: array<f32, 256>;

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

struct Unit {
    hi: vec4<u32>,
    lo: vec4<u32>,
    s: f32,
}

// The 16 inputs v of a unit as two levels: hi = round(v / s), lo = round((v - s hi) * 254 / s).
fn quantize16(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>) -> Unit {
    let m4 = max(max(abs(a), abs(b)), max(abs(c), abs(d)));
    let m = max(max(m4.x, m4.y), max(m4.z, m4.w));
    let inv = select(0.0, 127.0 / m, m > 0.0);
    let s = m / 127.0;
    let ha = round(a * inv);
    let hb = round(b * inv);
    let hc = round(c * inv);
    let hd = round(d * inv);
    let inv_lo = 254.0 * inv;
    let hi = vec4<u32>(pack4xI8Clamp(vec4<i32>(ha)), pack4xI8Clamp(vec4<i32>(hb)), pack4xI8Clamp(vec4<i32>(hc)), pack4xI8Clamp(vec4<i32>(hd)));
    let lo = vec4<u32>(
        pack4xI8Clamp(vec4<i32>(round((a - ha * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((b - hb * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((c - hc * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((d - hd * s) * inv_lo))),
    );
    return Unit(hi, lo, s);
}

// Unit v of the input row at vec4 `row` as p.input makes it, quantized; its raw squares
// (p.input 2) or the row's partial sums behind it (p.input 3) added to *sq.
fn load_unit(row: u32, v: u32, sq: ptr<function, f32>) -> Unit {
    var s = 0.0;
    let a = input(row, 4u * v, &s);
    let b = input(row, 4u * v + 1u, &s);
    let c = input(row, 4u * v + 2u, &s);
    let d = input(row, 4u * v + 3u, &s);
    if (p.input == 3u) {
        // the partial sums of squares behind the row, vec4 v, v + k / 16, ...
        for (var j = v; j < p.parts / 4u; j += p.k / 16u) {
            let q = x[p.k / 4u + j];
            s += (q.x + q.y) + (q.z + q.w);
        }
    }
    *sq = s;
    return quantize16(a, b, c, d);
}

fn dot16(q: vec4<u32>, h: vec4<u32>) -> i32 {
    return (dot4I8Packed(q.x, h.x) + dot4I8Packed(q.y, h.y)) + (dot4I8Packed(q.z, h.z) + dot4I8Packed(q.w, h.w));
}

// Unit u of weight row i against the quantized input unit x, scaled.
fn unit_dot(i: u32, u: u32, xu: Unit) -> f32 {
    let q = quants[i * (p.k / 16u) + u];
    let v = f32(dot16(q, xu.hi)) + f32(dot16(q, xu.lo)) * (1.0 / 254.0);
    return scale_of(i * (p.k / 32u) + (u >> 1u)) * xu.s * v;
}

// The end of both kernels: each row group's sums (acc: its 4 rows; sq: the squares of
// p.input 2 and 3) reduced over its lanes, then its rows written as p.mode says. Every
// thread of the workgroup calls it (it has barriers).
fn finish(lid: u32, g: u32, lane: u32, lanes: u32, i0: u32, r: u32, valid: bool, acc: vec4<f32>, sq: f32) {
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
