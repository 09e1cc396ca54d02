// LayerNorm over the last dimension (torch.nn.LayerNorm, affine), one workgroup per row.
//
//   x : [rows, dim]   w, b : [dim]   y : [rows, dim]
//
// y = (x - mean) / sqrt(var + eps) * w + b, with the biased variance, as torch computes it.
// The mean and variance from one tree over the sums of d = x - x[row, 0] and d * d:
// norm_stats in layer_norm_stats.wgsl, which the kernel table prepends.

struct Params {
    dim: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> red: array<vec2<f32>, 256>;

// The sums of each thread's (d, d * d) over all 256 threads, in one tree.
fn reduce_sum2(lid: u32, v: vec2<f32>) -> vec2<f32> {
    red[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let base = wid.x * p.dim;
    let first = x[base];
    var acc = vec2<f32>(0.0);
    for (var i = lid; i < p.dim; i += 256u) {
        let d = x[base + i] - first;
        acc += vec2<f32>(d, d * d);
    }
    let st = norm_stats(first, reduce_sum2(lid, acc), f32(p.dim), p.eps);
    for (var i = lid; i < p.dim; i += 256u) {
        y[base + i] = (x[base + i] - st.x) * st.y * w[i] + b[i];
    }
}
