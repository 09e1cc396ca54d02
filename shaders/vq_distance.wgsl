// Squared L2 distance from the residual to every entry of one codebook level (the parallel
// half of a VQ encode; vq_argmin.wgsl picks the nearest): eight entries per workgroup of
// 256 threads, 32 lanes over each entry's dimensions, then a tree reduction.
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

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let lane = lid % 32u;
    let bin = (wid.x + wid.y * nwg.x) * 8u + lid / 32u;
    var d = 0.0;
    if (bin < p.bins) {
        let o = (p.level * p.bins + bin) * p.dim;
        for (var c = lane; c < p.dim; c += 32u) {
            let df = codebook[o + c] - residual[c];
            d += df * df;
        }
    }
    red[lid] = d;
    workgroupBarrier();
    for (var s = 16u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && bin < p.bins) {
        dist[bin] = red[lid];
    }
}
