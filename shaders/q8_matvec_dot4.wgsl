// Linear layer with Q8_0 weights (the layout of q8_blocks.wgsl, the parameters of q8_linear.wgsl as q8_matvec.wgsl reads them) whose dot
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
//   products at the end), but for two layouts this kernel's alone:
//   p.mode 3 (linear_in of a SiLU-gated FFN, n = 2 h): the hidden row silu(gate) * up is
//     written to y already quantized, in the layout p.input 4 reads. Row group g takes
//     gate rows 2 g', 2 g' + 1 and up rows h + 2 g', h + 2 g' + 1 (g' the group's index
//     in the grid), so each group ends with two hidden values and each workgroup with
//     whole units of 16 (p.lanes at most 32);
//   p.input 5 (t = 1): p.input 2 of the row x plus the p.partials rows of k behind it in
//     the same buffer (attention_out_proj.wgsl's partial rows of out_proj), summed as
//     they are read;
//   p.partials with p.mode 1 or 2 (t = 1): the residual add also adds the p.partials rows
//     of n behind y's row (from y_offset + n on) into it.
// p.partials is at most MAX_PARTIALS, a constant the pipeline's prelude sets
// (q8_partials_none.wgsl: 0, q8_partials.wgsl: 8). p.input 4 is the pipeline's too: PACKED,
// from q8_input_packed.wgsl (true) or q8_input_staged.wgsl.
//   p.input 4 (t = 1): x holds a row of k inputs already quantized as the chunks below
//     quantize it: units u of [hi: vec4<u32>, lo: vec4<u32>] at vec4s 2 u, 2 u + 1, then
//     k / 16 scales (f32 bits) from u32 8 k / 16, the row padded to whole vec4s. Nothing is staged: each lane reads its
//     units' levels beside the weights (the row groups of a workgroup share them in L1),
//     with no barrier before the first weight load and none between chunks.
// x and y are bound as u32 words (f32 values as their bits): packed levels must not pass
// through an f32 load or store, which may quiet a NaN pattern.
//
// k must be a multiple of 32 and n of 4.

// after q8_blocks.wgsl (quants, scales), q8_linear.wgsl (Params, alpha, p, norm_out) and
// the preludes that set MAX_PARTIALS and PACKED
@group(0) @binding(2) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> y: array<u32>;

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
// p.mode 3: the workgroup's hidden values, two per row group (at most 64 groups)
var<workgroup> gated: array<f32, 128>;

// Input vec4 v of the row at vec4 `row` as p.input makes it (for p.input 2 before the
// 1 / rms factor); adds the raw squares to *sq for p.input 2.
fn xf(i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(x[i]);
}

// Whether the input is an RMSNorm's, its squares summed as the units are quantized.
fn normed() -> bool {
    return p.input == 2u || p.input == 3u || p.input == 5u;
}

// Vec4 v of the row at vec4 `row` plus the p.partials rows of k behind it (at most
// MAX_PARTIALS, a constant of the pipeline: the loop unrolls and its loads go out together).
fn with_partials(row: u32, v: u32) -> vec4<f32> {
    var a = xf(row + v);
    let k4 = p.k / 4u;
    for (var j = 1u; j <= MAX_PARTIALS; j++) {
        a += select(vec4<f32>(0.0), xf(row + min(j, p.partials) * k4 + v), j <= p.partials);
    }
    return a;
}

fn input(row: u32, v: u32, sq: ptr<function, f32>) -> vec4<f32> {
    if (p.input == 5u) {
        let a = with_partials(row, v);
        *sq += dot(a, a);
        return a * alpha[v];
    }
    let a = xf(row + v);
    if (p.input == 1u) {
        let u = xf(row + p.k / 4u + v);
        return a / (vec4<f32>(1.0) + exp(-a)) * u;
    }
    if (p.input == 2u) {
        *sq += dot(a, a);
        return a * alpha[v];
    }
    return a;
}

struct Levels {
    hi: vec4<u32>,
    lo: vec4<u32>,
    s: f32,
}

// The 16 inputs v of a unit as two levels: hi = round(v / s), lo = round((v - s hi) * 254 / s).
fn levels(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>) -> Levels {
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
    return Levels(hi, lo, s);
}

fn quantize_unit(slot: u32, a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>) {
    let l = levels(a, b, c, d);
    x_hi[slot] = l.hi;
    x_lo[slot] = l.lo;
    x_scale[slot] = l.s;
}

fn dot16(q: vec4<u32>, h: vec4<u32>) -> i32 {
    return (dot4I8Packed(q.x, h.x) + dot4I8Packed(q.y, h.y)) + (dot4I8Packed(q.z, h.z) + dot4I8Packed(q.w, h.w));
}

fn levels_dot(i: u32, u: u32, hi: vec4<u32>, lo: vec4<u32>, s: f32) -> f32 {
    let q = quants[i * (p.k / 16u) + u];
    let v = f32(dot16(q, hi)) + f32(dot16(q, lo)) * (1.0 / 254.0);
    return scale_of(i * (p.k / 32u) + (u >> 1u)) * s * v;
}

// Unit u (global) of weight row i against the chunk's unit slot, scaled.
fn unit_dot(i: u32, u: u32, slot: u32) -> f32 {
    return levels_dot(i, u, x_hi[slot], x_lo[slot], x_scale[slot]);
}

// Unit u of the packed row (p.input 4) dotted with the 4 weight rows `rows`.
fn packed_dot(rows: vec4<u32>, u: u32) -> vec4<f32> {
    let hi = x[2u * u];
    let lo = x[2u * u + 1u];
    let s = bitcast<f32>(x[(8u * (p.k / 16u) + u) / 4u][u % 4u]);
    return vec4<f32>(levels_dot(rows.x, u, hi, lo, s), levels_dot(rows.y, u, hi, lo, s), levels_dot(rows.z, u, hi, lo, s), levels_dot(rows.w, u, hi, lo, s));
}

// The weight rows of row group rows i0 .. i0 + 3 (p.mode 3: two gate rows, two up rows).
fn rows_of(i0: u32) -> vec4<u32> {
    if (p.mode == 3u) {
        let j = i0 / 2u;
        let h = p.n / 2u;
        return vec4<u32>(j, j + 1u, h + j, h + j + 1u);
    }
    return vec4<u32>(i0, i0 + 1u, i0 + 2u, i0 + 3u);
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

    let ri = rows_of(i0);
    var acc = vec4<f32>(0.0);
    var sq = 0.0;
    if (PACKED) {
        if (valid) {
            var u = lane;
            for (; u + lanes < nu; u += 2u * lanes) {
                acc += packed_dot(ri, u) + packed_dot(ri, u + lanes);
            }
            if (u < nu) {
                acc += packed_dot(ri, u);
            }
        }
    }
    for (var c0 = 0u; c0 < nu && !PACKED; c0 += CHUNK) {
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
                    let q = xf(p.k / 4u + j);
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
                acc.x += unit_dot(ri.x, u, j) + unit_dot(ri.x, u1, j1);
                acc.y += unit_dot(ri.y, u, j) + unit_dot(ri.y, u1, j1);
                acc.z += unit_dot(ri.z, u, j) + unit_dot(ri.z, u1, j1);
                acc.w += unit_dot(ri.w, u, j) + unit_dot(ri.w, u1, j1);
                if (normed()) {
                    sq += x_sq[j] + x_sq[j1];
                }
            }
            if (j < units) {
                let u = c0 + j;
                acc.x += unit_dot(ri.x, u, j);
                acc.y += unit_dot(ri.y, u, j);
                acc.z += unit_dot(ri.z, u, j);
                acc.w += unit_dot(ri.w, u, j);
                if (normed()) {
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
    if (p.mode == 3u) {
        // the gate: lanes 0 and 1 of each row group hold hidden values 2 g', 2 g' + 1
        if (lane < 2u) {
            var hv = 0.0;
            if (valid) {
                var f = 1.0;
                if (normed()) {
                    f = inverseSqrt(p.eps + red_sq[g * lanes] / f32(p.k));
                }
                let a = red[g * lanes][lane] * f;
                let u = red[g * lanes][lane + 2u] * f;
                hv = a / (1.0 + exp(-a)) * u;
            }
            gated[2u * g + lane] = hv;
        }
        workgroupBarrier();
        // the workgroup's units of 16 hidden values, quantized as p.input 4 reads them
        let hidden = p.n / 2u;
        let j0 = ((w % per_row) * rows) / 2u + 16u * lid;
        if (live && 16u * lid < rows / 2u && j0 < hidden) {
            let b = 16u * lid;
            let l = levels(
                vec4<f32>(gated[b], gated[b + 1u], gated[b + 2u], gated[b + 3u]),
                vec4<f32>(gated[b + 4u], gated[b + 5u], gated[b + 6u], gated[b + 7u]),
                vec4<f32>(gated[b + 8u], gated[b + 9u], gated[b + 10u], gated[b + 11u]),
                vec4<f32>(gated[b + 12u], gated[b + 13u], gated[b + 14u], gated[b + 15u]),
            );
            let u = j0 / 16u;
            for (var c = 0u; c < 4u; c++) {
                y[8u * u + c] = l.hi[c];
                y[8u * u + 4u + c] = l.lo[c];
            }
            y[8u * (hidden / 16u) + u] = bitcast<u32>(l.s);
        }
        return;
    }
    var sq_row = 0.0;
    if (lane < RT && valid) {
        let i = i0 + lane;
        var v = red[g * lanes][lane];
        if (normed()) {
            v *= inverseSqrt(p.eps + red_sq[g * lanes] / f32(p.k));
        }
        let yo = p.y_offset + r * p.y_stride + i;
        if (p.mode == 0u) {
            y[yo] = bitcast<u32>(v);
        } else {
            var yn = bitcast<f32>(y[yo]) + v;
            for (var j = 1u; j <= MAX_PARTIALS; j++) {
                yn += select(0.0, bitcast<f32>(y[yo + min(j, p.partials) * p.n]), j <= p.partials);
            }
            y[yo] = bitcast<u32>(yn);
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
