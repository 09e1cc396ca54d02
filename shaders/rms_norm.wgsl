// RMSNorm over the last dimension (moshi.modules.transformer RMSNorm, f32), one workgroup
// per row:  y = x * (alpha * rsqrt(eps + mean(x^2))).
//
//   x : [rows, dim]   alpha : [dim]   y : [rows, dim]

struct Params {
    dim: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> alpha: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let base = wid.x * p.dim;
    var acc = 0.0;
    for (var i = lid; i < p.dim; i += 256u) {
        let v = x[base + i];
        acc += v * v;
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let inv = inverseSqrt(p.eps + red[0] / f32(p.dim));
    for (var i = lid; i < p.dim; i += 256u) {
        y[base + i] = x[base + i] * (alpha[i] * inv);
    }
}
