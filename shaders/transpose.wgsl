// dst = src^T:  src [rows, cols] -> dst [cols, rows]. Moves activations between the conv
// layout [channels, time] and the transformer layout [time, channels].

struct Params {
    rows: u32,
    cols: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 64u;
    if (idx >= p.rows * p.cols) {
        return;
    }
    let r = idx / p.cols;
    let c = idx % p.cols;
    dst[c * p.rows + r] = src[idx];
}
