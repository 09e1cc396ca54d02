// The gate of a SiLU-gated FFN (moshi.modules.gating ActivationGating):
// h[r, j] = silu(a[r, j]) * a[r, hidden + j], silu(v) = v / (1 + exp(-v)).
//
//   a : [t, 2 hidden]   h : [t, hidden]

struct Params {
    hidden: u32,
    t: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> h: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 64u;
    if (idx >= p.hidden * p.t) {
        return;
    }
    let r = idx / p.hidden;
    let j = idx % p.hidden;
    let g = a[r * 2u * p.hidden + j];
    let u = a[r * 2u * p.hidden + p.hidden + j];
    h[idx] = g / (1.0 + exp(-g)) * u;
}
