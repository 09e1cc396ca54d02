// Linear layer with Q8_0 weights (ggml's block format, repacked for 16-byte access). A
// workgroup of 256 threads is 256 / p.lanes row groups of p.lanes threads (a power of two,
// 4 to 256); a row group computes 4 consecutive output rows: its lanes stream the rows in
// units of 16 weights (one vec4<u32>, half a block), lane l taking units l, l + lanes, ...,
// so that each load of a warp reads one contiguous run of memory per row; two units per
// iteration for more loads in flight; the unit's 16 inputs are loaded once for the 4 rows.
// Then a tree reduction per row over the group's lanes.
//
//   quants, scales : the Q8_0 weights [n, k] (q8_blocks.wgsl)
//   x      : [t, k] f32 as vec4s (rows from p.x_offset, a multiple of 4). The input row is
//            p.input 0: x[r, :]
//            p.input 1: silu(x[r, :k]) * x[r, k:], x being [t, 2 k] (a SiLU-gated FFN's
//                       linear_in output; moshi.modules.gating ActivationGating)
//            p.input 2: x[r, :] * alpha * rsqrt(p.eps + mean(x[r, :]^2)) (RMSNorm, f32):
//                       a row group's lanes read all of x[r, :] between them, so they sum
//                       its squares as they go and scale the dot products at the end
//            p.input 3: x[:k] * rsqrt(p.eps + sum(x[k : k + p.parts]) / k), t = 1: x holds
//                       a row already times its RMSNorm gain, then p.parts partial sums
//                       of the row's squares (what p.mode 2 of the kernel that wrote the
//                       row left in its norm_out); each row group sums the partials
//   alpha  : [k] f32 as vec4s, the RMSNorm gain (read when p.input is 2); for p.mode 2
//            [n], the gain of the next RMSNorm
//   y      : [t, n] f32 (rows from p.y_offset, stride p.y_stride)
//   norm_out: [n + n / 4] f32, written by p.mode 2 only: y[i] * alpha[i], then for each
//            row group the sum of its 4 rows' squares (the next RMSNorm's input for
//            p.input 3; every row of a residual add is final when its group writes it)
//
// W[i, j] = q * scale(block j / 32); v = sum_j W[i, j] in[r, j];
// y = v (p.mode 0), y += v (p.mode 1, and p.mode 2 with t = 1, y_offset 0, y_stride n);
// p.mode 3 (linear_in of a SiLU-gated FFN, n = 2 h, t = 1): y[j] = silu(v[j]) * v[h + j]
// for j < h (moshi.modules.gating ActivationGating), the row group of logical rows
// i0 .. i0 + 3 taking weight rows i0 / 2, i0 / 2 + 1, h + i0 / 2, h + i0 / 2 + 1.
// k must be a multiple of 32 and n of 4.

// after q8_blocks.wgsl (quants, scales) and q8_linear.wgsl (Params, alpha, p, norm_out)
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> red: array<f32, 1280>;

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

// The weight rows of row group rows i0 .. i0 + 3 (p.mode 3: two gate rows, two up rows).
fn rows_of(i0: u32) -> vec4<u32> {
    if (p.mode == 3u) {
        let j = i0 / 2u;
        let h = p.n / 2u;
        return vec4<u32>(j, j + 1u, h + j, h + j + 1u);
    }
    return vec4<u32>(i0, i0 + 1u, i0 + 2u, i0 + 3u);
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
        let ri = rows_of(i0);
        var u = lane;
        for (; u + lanes < nu; u += 2u * lanes) {
            let u1 = u + lanes;
            let xa = load_unit(xrow, u, &ss);
            let xb = load_unit(xrow, u1, &ss);
            acc.x += unit_dot(ri.x, u, xa) + unit_dot(ri.x, u1, xb);
            acc.y += unit_dot(ri.y, u, xa) + unit_dot(ri.y, u1, xb);
            acc.z += unit_dot(ri.z, u, xa) + unit_dot(ri.z, u1, xb);
            acc.w += unit_dot(ri.w, u, xa) + unit_dot(ri.w, u1, xb);
        }
        if (u < nu) {
            let xa = load_unit(xrow, u, &ss);
            acc.x += unit_dot(ri.x, u, xa);
            acc.y += unit_dot(ri.y, u, xa);
            acc.z += unit_dot(ri.z, u, xa);
            acc.w += unit_dot(ri.w, u, xa);
        }
    }
    red[lid] = acc.x;
    red[WG + lid] = acc.y;
    red[2u * WG + lid] = acc.z;
    red[3u * WG + lid] = acc.w;
    red[4u * WG + lid] = ss;
    workgroupBarrier();
    for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
            red[WG + lid] += red[WG + lid + s];
            red[2u * WG + lid] += red[2u * WG + lid + s];
            red[3u * WG + lid] += red[3u * WG + lid + s];
            red[4u * WG + lid] += red[4u * WG + lid + s];
        }
        workgroupBarrier();
    }
    if (p.mode == 3u) {
        // lanes 0 and 1 of the group: hidden values i0 / 2 and i0 / 2 + 1
        if (lane < 2u && row0 < total) {
            var f = 1.0;
            if (p.input >= 2u) {
                f = inverseSqrt(p.eps + red[4u * WG + g * lanes] / f32(p.k));
            }
            let a = red[lane * WG + g * lanes] * f;
            let b = red[(lane + 2u) * WG + g * lanes] * f;
            y[p.y_offset + row0 / 2u + lane] = a / (1.0 + exp(-a)) * b;
        }
        return;
    }
    var sq = 0.0;
    if (lane < RT && row0 < total) {
        let o = row0 + lane;
        let r = o / p.n;
        let i = o % p.n;
        var v = red[lane * WG + g * lanes];
        if (p.input >= 2u) {
            v *= inverseSqrt(p.eps + red[4u * WG + g * lanes] / f32(p.k));
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
        // the group's 4 squares summed by its lane 0 (segment 4 of red is free here: lanes
        // below RT read only segments 0 to 3 above, and segment 4 only for p.input >= 2 at
        // lane 0's own slot, read before this write)
        workgroupBarrier();
        red[4u * WG + lid] = sq;
        workgroupBarrier();
        if (lane == 0u && row0 < total) {
            let b = 4u * WG + lid;
            norm_out[p.n + row0 / RT] = (red[b] + red[b + 1u]) + (red[b + 2u] + red[b + 3u]);
        }
    }
}
