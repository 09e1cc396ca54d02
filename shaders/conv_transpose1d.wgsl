// Causal streaming ConvTranspose1d (moshi.modules.conv.StreamingConvTranspose1d), one thread
// per column of the full output of this frame.
//
//   w       : [in_c, out_c / groups, k]   (PyTorch ConvTranspose1d layout)
//   b       : [out_c]                     (read only when p.has_bias == 1)
//   x       : [in_c, t_in]        (ELU applied on load when p.elu == 1: SEANet's decoder
//                                  puts an ELU in front of each upsampling layer)
//   partial : [out_c, tp]  the previous frame's overlap tail, bias already removed
//   y       : [out_c, ts]  this frame's output, ts = t_in * stride
//   tail    : [out_c, tp]  the new overlap tail, bias removed; copied into `partial` by the
//                          next step of the plan (writing `partial` here would race with its
//                          readers)
//
// The full output has ts + tp columns (tp = k - stride); requires ts >= tp, which holds for
// every kernel of twice the stride.

struct Params {
    in_c: u32,
    out_c: u32,
    k: u32,
    stride: u32,
    groups: u32,
    t_in: u32,
    ts: u32,
    tp: u32,
    has_bias: u32,
    elu: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> partial: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> tail: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let full_t = p.ts + p.tp;
    let idx = gid.x + gid.y * nwg.x * 64u;
    if (idx >= p.out_c * full_t) {
        return;
    }
    let oc = idx / full_t;
    let i = idx % full_t;
    let in_g = p.in_c / p.groups;
    let out_g = p.out_c / p.groups;
    let g = oc / out_g;
    let ocl = oc % out_g;
    var bias = 0.0;
    if (p.has_bias == 1u) {
        bias = b[oc];
    }
    var acc = 0.0;
    for (var j = 0u; j < p.k; j++) {
        if (j > i) {
            break;
        }
        let d = i - j;
        if (d % p.stride != 0u) {
            continue;
        }
        let ti = d / p.stride;
        if (ti >= p.t_in) {
            continue;
        }
        for (var ic = 0u; ic < in_g; ic++) {
            let c = g * in_g + ic;
            var xv = x[c * p.t_in + ti];
            if (p.elu == 1u && xv < 0.0) {
                xv = exp(xv) - 1.0;
            }
            acc += w[(c * out_g + ocl) * p.k + j] * xv;
        }
    }
    var v = acc + bias;
    if (i < p.tp) {
        v += partial[oc * p.tp + i];
    }
    if (i < p.ts) {
        y[oc * p.ts + i] = v;
    } else {
        tail[oc * p.tp + (i - p.ts)] = v - bias;
    }
}
