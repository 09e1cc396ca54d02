// Squared L2 distance from the residual to every entry of one codebook level, one thread
// per entry (the parallel half of vq_encode.wgsl; vq_argmin.wgsl picks the nearest).
//
//   codebook : [levels, bins, dim]   residual : [dim]   dist : [bins]

struct Params {
    level: u32,
    bins: u32,
    dim: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> codebook: array<f32>;
@group(0) @binding(1) var<storage, read> residual: array<f32>;
@group(0) @binding(2) var<storage, read_write> dist: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let bin = gid.x;
    if (bin >= p.bins) {
        return;
    }
    let o = (p.level * p.bins + bin) * p.dim;
    var d = 0.0;
    for (var c = 0u; c < p.dim; c++) {
        let df = codebook[o + c] - residual[c];
        d += df * df;
    }
    dist[bin] = d;
}
