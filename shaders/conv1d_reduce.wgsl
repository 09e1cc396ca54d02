// Causal Conv1d for deep, short layers: one workgroup of 64 threads per output element,
// the threads striding over (input channel, tap) pairs, then a tree reduction. Same
// bindings, parameters and result as conv1d.wgsl (which gives each output one thread and
// suits wide, long layers); the plan builder picks one by shape.
//
//   w   : [out_c, in_c / groups, k]   b : [out_c]   xa : [in_c, ta]
//   res : [out_c, t_out]              y : [out_c, t_out]

struct Params {
    in_c: u32,
    out_c: u32,
    k: u32,
    stride: u32,
    dilation: u32,
    groups: u32,
    t_out: u32,
    ta: u32,
    has_bias: u32,
    residual: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> xa: array<f32>;
@group(0) @binding(3) var<storage, read> res: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let idx = wid.x + wid.y * nwg.x;
    if (idx >= p.out_c * p.t_out) {
        return;
    }
    let oc = idx / p.t_out;
    let t = idx % p.t_out;
    let in_g = p.in_c / p.groups;
    let g = oc / (p.out_c / p.groups);
    let x0 = t * p.stride;
    var acc = 0.0;
    for (var e = lid; e < in_g * p.k; e += 64u) {
        let ic = e / p.k;
        let j = e % p.k;
        acc += w[oc * in_g * p.k + e] * xa[(g * in_g + ic) * p.ta + x0 + j * p.dilation];
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
        if (p.has_bias == 1u) {
            v += b[oc];
        }
        if (p.residual == 1u) {
            v += res[idx];
        }
        y[idx] = v;
    }
}
