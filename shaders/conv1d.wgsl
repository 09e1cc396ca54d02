// Causal Conv1d over a staged input (see conv_prep.wgsl), one thread per output element.
//
//   w   : [out_c, in_c / groups, k]   (PyTorch Conv1d layout)
//   b   : [out_c]                     (read only when p.has_bias == 1)
//   xa  : [in_c, ta]
//   res : [out_c, t_out]              (added when p.residual == 1: SEANet's true skip)
//   y   : [out_c, t_out]
//
// y[oc, t] = b[oc] + sum_{ic, j} w[oc, ic, j] * xa[g * in_g + ic, t * stride + j * dilation]
// The reference is torch.nn.Conv1d inside moshi.modules.conv.StreamingConv1d.

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

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 64u;
    if (idx >= p.out_c * p.t_out) {
        return;
    }
    let oc = idx / p.t_out;
    let t = idx % p.t_out;
    let in_g = p.in_c / p.groups;
    let out_g = p.out_c / p.groups;
    let g = oc / out_g;
    var acc = 0.0;
    if (p.has_bias == 1u) {
        acc = b[oc];
    }
    let x0 = t * p.stride;
    for (var ic = 0u; ic < in_g; ic++) {
        let wo = (oc * in_g + ic) * p.k;
        let xo = (g * in_g + ic) * p.ta + x0;
        for (var j = 0u; j < p.k; j++) {
            acc += w[wo + j] * xa[xo + j * p.dilation];
        }
    }
    if (p.residual == 1u) {
        acc += res[idx];
    }
    y[idx] = acc;
}
