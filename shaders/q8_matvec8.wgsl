// Linear layer with Q8_0 weights, 8 rows per row group: `shaders/q8_matvec.wgsl` (same
// bindings, layouts, parameters and results) with each load of a unit's 16 inputs serving
// 8 weight rows instead of 4, so that the input loads (from the L1, as many bytes as the
// weights at 4 rows) are half as many per weight; and a cheaper unpack: the i8 weights
// become f32 by the exponent trick (byte ^ 0x80 under the bits of 2^23, minus 2^23 + 128:
// exact, no int-to-float conversion, which NVIDIA runs at a quarter of the FMA rate). A
// workgroup of 256 threads is 256 / p.lanes row groups of p.lanes threads (a power of
// two, 8 to 256); a row group computes 8 consecutive output rows: its lanes stream the
// rows in units of 16 weights (one vec4<u32>, half a block), lane l taking units l,
// l + lanes, ..., two units per iteration. Then a tree reduction per row over the
// group's lanes.
//
//   quants, scales, x, alpha, y, norm_out: as in q8_matvec.wgsl (p.input 0 to 3; p.mode 2
//   writes the partial sums of squares one per 4 rows, as q8_matvec does)
//
// W[i, j] = q * scale(block j / 32); v = sum_j W[i, j] in[r, j];
// y = v (p.mode 0), y += v (p.mode 1 and 2). k must be a multiple of 32 and n of 8.

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
const RT: u32 = 8u;

// RT rows and the RMSNorm statistic per thread: 9 KiB.
var<workgroup> red: array<f32, 2304>;

// f16 bits -> f32 by hand: unpack2x16float needs naga's SHADER_FLOAT16_IN_FLOAT32
// capability, which not every backend has (a scale is decoded once per 16 weights).
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

// The four signed bytes of w, lowest first: each byte plus 128 (w ^ 0x80808080) as the
// low mantissa bits of 2^23, minus 2^23 + 128 (exact in f32).
fn i8x4(w: u32) -> vec4<f32> {
    let b = w ^ 0x80808080u;
    let m = vec4<u32>(b & 0xffu, (b >> 8u) & 0xffu, (b >> 16u) & 0xffu, b >> 24u) | vec4<u32>(0x4b000000u);
    return bitcast<vec4<f32>>(m) - vec4<f32>(8388736.0);
}

// The 16 inputs of unit u of the row starting at vec4 `row` (for p.input 2 before the
// 1 / rms factor, which the caller applies to the sums).
struct Unit {
    a: vec4<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
    d: vec4<f32>,
}

// Input vec4 v; for p.input 2 adds the squares of the raw values to *ss (the RMSNorm's
// statistic).
fn input(row: u32, v: u32, ss: ptr<function, f32>) -> vec4<f32> {
    let a = x[row + v];
    if (p.input == 1u) {
        let u = x[row + p.k / 4u + v];
        return a / (vec4<f32>(1.0) + exp(-a)) * u;
    }
    if (p.input == 2u) {
        *ss += dot(a, a);
        return a * alpha[v];
    }
    return a;
}

fn load_unit(row: u32, u: u32, ss: ptr<function, f32>) -> Unit {
    let a = input(row, 4u * u, ss);
    let b = input(row, 4u * u + 1u, ss);
    let c = input(row, 4u * u + 2u, ss);
    let d = input(row, 4u * u + 3u, ss);
    return Unit(a, b, c, d);
}

// Unit u of weight row i dotted with its 16 inputs, scaled.
fn unit_dot(i: u32, u: u32, xs: Unit) -> f32 {
    let q = quants[i * (p.k / 16u) + u];
    let s = dot(i8x4(q.x), xs.a) + dot(i8x4(q.y), xs.b) + dot(i8x4(q.z), xs.c) + dot(i8x4(q.w), xs.d);
    return scale_of(i * (p.k / 32u) + (u >> 1u)) * s;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let lanes = p.lanes;
    let g = lid / lanes;
    let lane = lid % lanes;
    let row0 = ((wid.x + wid.y * nwg.x) * (WG / lanes) + g) * RT;
    let nu = p.k / 16u;
    let total = p.n * p.t;

    var acc = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var ss = 0.0;
    if (row0 < total) {
        let r = row0 / p.n;
        let i0 = row0 % p.n;
        let width = select(p.k, 2u * p.k, p.input == 1u);
        let xrow = (p.x_offset + r * width) / 4u;
        if (p.input == 3u) {
            // the partial sums of squares behind the row: loads independent of the loop's
            for (var j = lane; j < p.parts / 4u; j += lanes) {
                let s = x[p.k / 4u + j];
                ss += (s.x + s.y) + (s.z + s.w);
            }
        }
        var u = lane;
        for (; u + lanes < nu; u += 2u * lanes) {
            let u1 = u + lanes;
            let xa = load_unit(xrow, u, &ss);
            let xb = load_unit(xrow, u1, &ss);
            acc.x += unit_dot(i0, u, xa) + unit_dot(i0, u1, xb);
            acc.y += unit_dot(i0 + 1u, u, xa) + unit_dot(i0 + 1u, u1, xb);
            acc.z += unit_dot(i0 + 2u, u, xa) + unit_dot(i0 + 2u, u1, xb);
            acc.w += unit_dot(i0 + 3u, u, xa) + unit_dot(i0 + 3u, u1, xb);
            acc2.x += unit_dot(i0 + 4u, u, xa) + unit_dot(i0 + 4u, u1, xb);
            acc2.y += unit_dot(i0 + 5u, u, xa) + unit_dot(i0 + 5u, u1, xb);
            acc2.z += unit_dot(i0 + 6u, u, xa) + unit_dot(i0 + 6u, u1, xb);
            acc2.w += unit_dot(i0 + 7u, u, xa) + unit_dot(i0 + 7u, u1, xb);
        }
        if (u < nu) {
            let xa = load_unit(xrow, u, &ss);
            acc.x += unit_dot(i0, u, xa);
            acc.y += unit_dot(i0 + 1u, u, xa);
            acc.z += unit_dot(i0 + 2u, u, xa);
            acc.w += unit_dot(i0 + 3u, u, xa);
            acc2.x += unit_dot(i0 + 4u, u, xa);
            acc2.y += unit_dot(i0 + 5u, u, xa);
            acc2.z += unit_dot(i0 + 6u, u, xa);
            acc2.w += unit_dot(i0 + 7u, u, xa);
        }
    }
    red[lid] = acc.x;
    red[WG + lid] = acc.y;
    red[2u * WG + lid] = acc.z;
    red[3u * WG + lid] = acc.w;
    red[4u * WG + lid] = acc2.x;
    red[5u * WG + lid] = acc2.y;
    red[6u * WG + lid] = acc2.z;
    red[7u * WG + lid] = acc2.w;
    red[RT * WG + lid] = ss;
    workgroupBarrier();
    for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            for (var j = 0u; j <= RT; j++) {
                red[j * WG + lid] += red[j * WG + lid + s];
            }
        }
        workgroupBarrier();
    }
    var sq = 0.0;
    if (lane < RT && row0 < total) {
        let o = row0 + lane;
        let r = o / p.n;
        let i = o % p.n;
        var v = red[lane * WG + g * lanes];
        if (p.input >= 2u) {
            v *= inverseSqrt(p.eps + red[RT * WG + g * lanes] / f32(p.k));
        }
        let yo = p.y_offset + r * p.y_stride + i;
        if (p.mode == 0u) {
            y[yo] = v;
        } else {
            let yn = y[yo] + v;
            y[yo] = yn;
            if (p.mode == 2u) {
                norm_out[i] = yn * alpha[i / 4u][i % 4u];
                sq = yn * yn;
            }
        }
    }
    if (p.mode == 2u) {
        // each 4 rows' squares summed by the group's lane 0, as two partials in the layout of
        // q8_matvec's (one per 4 rows; segment RT of red is free here: lanes below RT read
        // only segments 0 to RT - 1 above, and segment RT only at lane 0's own slot, read
        // before this write)
        workgroupBarrier();
        red[RT * WG + lid] = sq;
        workgroupBarrier();
        if (lane == 0u && row0 < total) {
            let b = RT * WG + lid;
            norm_out[p.n + row0 / 4u] = (red[b] + red[b + 1u]) + (red[b + 2u] + red[b + 3u]);
            norm_out[p.n + row0 / 4u + 1u] = (red[b + 4u] + red[b + 5u]) + (red[b + 6u] + red[b + 7u]);
        }
    }
}
