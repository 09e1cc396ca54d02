// Bias-free linear layer over a few time rows: one workgroup of 256 threads per 256 / p.lanes
// output elements, p.lanes lanes per output (64, 128 or 256) striding over the input
// dimension in 16-byte loads, every time row of a group of 4 taken from one load of the
// weights, then a tree reduction.
//
//   w     : [n, k]    (torch.nn.Linear layout; also a 1x1 Conv1d's [n, k, 1])
//   x     : [t, k]
//   scale : [n]       LayerScale, read when p.residual == 1
//   y     : [t, n]
//   ln_w, ln_b : [k]  LayerNorm gain and bias, read when p.norm == 1
//
// With p.norm == 1 the input row is LayerNormed as it is read (torch.nn.LayerNorm, affine,
// biased variance: x[r, j] -> (x[r, j] - mean) / sqrt(var + p.eps) * ln_w[j] + ln_b[j]),
// each workgroup taking its rows' means and variances as layer_norm.wgsl does (the sums of
// d = x - x[r, 0] and d * d over 256 lanes, then one tree), so the normed inputs are those
// that kernel writes (norm_stats: layer_norm_stats.wgsl, which the kernel table prepends).
// v = sum_j w[i, j] * x[r, j]; v = gelu(v) when p.gelu == 1 (exact erf GELU, torch's
// F.gelu default); then y[r, i] = v, or y[r, i] += scale[i] * v when p.residual == 1
// (the residual branch of a transformer layer, moshi.modules.transformer.LayerScale), or
// y[r, i] += v when p.accumulate == 1. Rows start at p.x_offset and p.y_offset elements
// into x and y; k and p.x_offset must be multiples of 4 (every row starts a vec4).

struct Params {
    n: u32,
    k: u32,
    t: u32,
    gelu: u32,
    residual: u32,
    x_offset: u32,
    y_offset: u32,
    accumulate: u32,
    norm: u32,
    eps: f32,
    // lanes per output element: 64, 128 or 256
    lanes: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> ln_w: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> ln_b: array<vec4<f32>>;


// lanes' partial sums, one component per time row of the group of 4
var<workgroup> red: array<vec4<f32>, 256>;
// the LayerNorm statistics of the group's time rows
var<workgroup> stats: array<vec2<f32>, 4>;
var<workgroup> lred: array<vec4<f32>, 256>;

fn xs(e: u32) -> f32 {
    return x[e / 4u][e % 4u];
}

// layer_norm.wgsl's reduce_sum2, over all 256 threads, for up to 4 rows at once (one per
// component: each row's sums of d and of d * d in that kernel's order, in one tree). The
// sums of d * d go through `red`, which holds nothing until the dot products after it.
fn reduce_sum4x2(lid: u32, v: vec4<f32>, v2: vec4<f32>) -> array<vec4<f32>, 2> {
    lred[lid] = v;
    red[lid] = v2;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            lred[lid] += lred[lid + s];
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let total = array<vec4<f32>, 2>(lred[0], red[0]);
    workgroupBarrier();
    return total;
}

// erf, Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7): WGSL has no erf.
fn erf_approx(v: f32) -> f32 {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-a * a);
    return select(r, -r, v < 0.0);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let lanes = p.lanes;
    let lane = lid % lanes;
    let i = (wid.x + wid.y * nwg.x) * (256u / lanes) + lid / lanes;
    // Every thread takes part in the barriers; rows past n compute on row 0 and store nothing.
    let live = i < p.n;
    let wi = select(0u, i, live);
    let k4 = p.k / 4u;
    for (var r0 = 0u; r0 < p.t; r0 += 4u) {
        let rows = min(4u, p.t - r0);
        if (p.norm == 1u) {
            // the rows' sums of d = x - x[r, 0] and of d * d, in one tree
            var first = vec4<f32>(0.0);
            var acc = vec4<f32>(0.0);
            var acc2 = vec4<f32>(0.0);
            for (var r = 0u; r < rows; r++) {
                let xo = p.x_offset + (r0 + r) * p.k;
                first[r] = xs(xo);
                for (var j = lid; j < p.k; j += 256u) {
                    let d = xs(xo + j) - first[r];
                    acc[r] += d;
                    acc2[r] += d * d;
                }
            }
            let sums = reduce_sum4x2(lid, acc, acc2);
            if (lid < rows) {
                stats[lid] = norm_stats(first[lid], vec2<f32>(sums[0][lid], sums[1][lid]), f32(p.k), p.eps);
            }
            workgroupBarrier();
        }
        var acc = vec4<f32>(0.0);
        let wo = wi * k4;
        for (var j = lane; j < k4; j += lanes) {
            let wv = w[wo + j];
            for (var r = 0u; r < rows; r++) {
                var xv = x[(p.x_offset + (r0 + r) * p.k) / 4u + j];
                if (p.norm == 1u) {
                    let st = stats[r];
                    xv = (xv - vec4<f32>(st.x)) * st.y * ln_w[j] + ln_b[j];
                }
                acc[r] += dot(wv, xv);
            }
        }
        red[lid] = acc;
        workgroupBarrier();
        for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
            if (lane < s) {
                red[lid] += red[lid + s];
            }
            workgroupBarrier();
        }
        if (lane < rows && live) {
            var v = red[lid - lane][lane];
            if (p.gelu == 1u) {
                v = 0.5 * v * (1.0 + erf_approx(v * 0.7071067811865476));
            }
            let yo = p.y_offset + (r0 + lane) * p.n + i;
            if (p.residual == 1u) {
                y[yo] += scale[i] * v;
            } else if (p.accumulate == 1u) {
                y[yo] += v;
            } else {
                y[yo] = v;
            }
        }
        workgroupBarrier();
    }
}
