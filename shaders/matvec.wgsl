// Bias-free linear layer over a few time rows, one workgroup of 64 threads per output
// element: each thread strides over the input dimension, then a tree reduction.
//
//   w     : [n, k]    (torch.nn.Linear layout; also a 1x1 Conv1d's [n, k, 1])
//   x     : [t, k]
//   scale : [n]       LayerScale, read when p.residual == 1
//   y     : [t, n]
//   ln_w, ln_b : [k]  LayerNorm gain and bias, read when p.norm == 1
//
// With p.norm == 1 the input row is LayerNormed as it is read (torch.nn.LayerNorm, affine,
// biased variance: x[r, j] -> (x[r, j] - mean) / sqrt(var + p.eps) * ln_w[j] + ln_b[j]),
// each workgroup taking its row's mean and variance with the summation order of
// layer_norm.wgsl's 256 threads, so the normed inputs are those that kernel writes.
// v = sum_j w[i, j] * x[r, j]; v = gelu(v) when p.gelu == 1 (exact erf GELU, torch's
// F.gelu default); then y[r, i] = v, or y[r, i] += scale[i] * v when p.residual == 1
// (the residual branch of a transformer layer, moshi.modules.transformer.LayerScale).
// Rows start at p.x_offset and p.y_offset elements into x and y.

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
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> ln_w: array<f32>;
@group(0) @binding(6) var<storage, read> ln_b: array<f32>;

var<workgroup> red: array<f32, 64>;

// The sum over the row at `base` of x (or of (x - mean)^2 when `centered`), in layer_norm.wgsl's
// order: 256 virtual lanes v, each summing elements v, v + 256, ... in turn, then a tree
// halving 256 -> 1. Thread lid holds lanes lid + 64 m (m < 4); the tree's first two levels
// (v + 128, then v + 64) happen in the thread, the remaining six in `red`.
fn row_sum(lid: u32, base: u32, mean: f32, centered: bool) -> f32 {
    var a = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var m = 0u; m < 4u; m++) {
        for (var j = lid + 64u * m; j < p.k; j += 256u) {
            var v = x[base + j];
            if (centered) {
                let d = v - mean;
                v = d * d;
            }
            a[m] += v;
        }
    }
    red[lid] = (a[0] + a[2]) + (a[1] + a[3]);
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
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

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let o = wid.x + wid.y * nwg.x;
    if (o >= p.n * p.t) {
        return;
    }
    let r = o / p.n;
    let i = o % p.n;
    let wo = i * p.k;
    let xo = p.x_offset + r * p.k;
    var acc = 0.0;
    if (p.norm == 1u) {
        let mean = row_sum(lid, xo, 0.0, false) / f32(p.k);
        let inv = 1.0 / sqrt(row_sum(lid, xo, mean, true) / f32(p.k) + p.eps);
        for (var j = lid; j < p.k; j += 64u) {
            acc += w[wo + j] * ((x[xo + j] - mean) * inv * ln_w[j] + ln_b[j]);
        }
    } else {
        for (var j = lid; j < p.k; j += 64u) {
            acc += w[wo + j] * x[xo + j];
        }
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var v = red[0];
        if (p.gelu == 1u) {
            v = 0.5 * v * (1.0 + erf_approx(v * 0.7071067811865476));
        }
        let yo = p.y_offset + r * p.n + i;
        if (p.residual == 1u) {
            y[yo] += scale[i] * v;
        } else if (p.accumulate == 1u) {
            y[yo] += v;
        } else {
            y[yo] = v;
        }
    }
}
