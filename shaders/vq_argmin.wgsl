// The nearest codebook entry from precomputed distances (vq_distance.wgsl), ties to the
// lower bin as torch's argmin; then, when p.subtract == 1, the entry is removed from the
// residual (the next RVQ level's input). One workgroup of 256 threads.
//
//   codebook : [levels, bins, dim]   codes : [n_q]
//   dist     : [bins] from element p.dist_offset   residual : [dim] from p.res_offset

struct Params {
    level: u32,
    bins: u32,
    dim: u32,
    slot: u32,
    subtract: u32,
    dist_offset: u32,
    res_offset: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> codebook: array<f32>;
@group(0) @binding(1) var<storage, read> dist: array<f32>;
@group(0) @binding(2) var<storage, read_write> residual: array<f32>;
@group(0) @binding(3) var<storage, read_write> codes: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> best_d: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    var bd = 3.4e38;
    var bi = 0u;
    for (var bin = lid; bin < p.bins; bin += 256u) {
        let d = dist[p.dist_offset + bin];
        if (d < bd) {
            bd = d;
            bi = bin;
        }
    }
    best_d[lid] = bd;
    best_i[lid] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let od = best_d[lid + s];
            let oi = best_i[lid + s];
            if (od < best_d[lid] || (od == best_d[lid] && oi < best_i[lid])) {
                best_d[lid] = od;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    let chosen = best_i[0];
    if (lid == 0u) {
        codes[p.slot] = chosen;
    }
    if (p.subtract == 1u) {
        let base = (p.level * p.bins + chosen) * p.dim;
        for (var c = lid; c < p.dim; c += 256u) {
            residual[p.res_offset + c] = residual[p.res_offset + c] - codebook[base + c];
        }
    }
}
