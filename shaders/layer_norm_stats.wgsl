// What LayerNorm's kernels share (layer_norm.wgsl, and matvec.wgsl's LayerNorm-fused
// linears, which normalize their input rows as that kernel would): the statistics of a row
// from one tree over the sums of d and d * d, d = x - x[row, 0] (shifted by the row's first
// value, so that a mean far from the spread does not cancel the variance away).

// (mean, 1 / sqrt(var + eps)) from the row's first value and the sums of (d, d * d) over
// its n values, d = x - first: mean = first + sum(d) / n,
// var = sum(d * d) / n - (sum(d) / n)^2 (biased, as torch's)
fn norm_stats(first: f32, sums: vec2<f32>, n: f32, eps: f32) -> vec2<f32> {
    let m = sums / n;
    return vec2<f32>(first + m.x, 1.0 / sqrt(max(m.y - m.x * m.x, 0.0) + eps));
}
