// One step of a residual VQ encode between two levels: the argmin of level p.level - 1 over
// its distances (as vq_argmin.wgsl picks it, ties to the lower bin), that entry subtracted
// from the residual, and the squared L2 distances of the new residual to every entry of
// level p.level (as vq_distance.wgsl computes them). Every workgroup takes the same argmin
// and the new residual into workgroup memory; workgroup 0 also writes the code and the new
// residual for the next step. Eight entries per workgroup of 256 threads, 32 lanes over
// each entry's dimensions.
//
//   codebook  : [levels, bins, dim]
//   dist      : [2, bins]     half (p.level - 1) % 2 read, half p.level % 2 written
//   residuals : [levels, dim] row p.level - 1 read, row p.level written (by workgroup 0)
//   codes     : [n_q]         codes[p.slot] = the argmin of level p.level - 1
//
// dim must be at most 1024.

struct Params {
    level: u32,
    bins: u32,
    dim: u32,
    slot: u32,
}

@group(0) @binding(0) var<storage, read> codebook: array<f32>;
@group(0) @binding(1) var<storage, read_write> dist: array<f32>;
@group(0) @binding(2) var<storage, read_write> residuals: array<f32>;
@group(0) @binding(3) var<storage, read_write> codes: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> best_d: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;
var<workgroup> r: array<f32, 1024>;
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let wg = wid.x + wid.y * nwg.x;
    let prev = p.level - 1u;
    let din = (prev % 2u) * p.bins;
    let dout = (p.level % 2u) * p.bins;

    var bd = 3.4e38;
    var bi = 0u;
    for (var bin = lid; bin < p.bins; bin += 256u) {
        let d = dist[din + bin];
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
    if (wg == 0u && lid == 0u) {
        codes[p.slot] = chosen;
    }
    let base = (prev * p.bins + chosen) * p.dim;
    for (var c = lid; c < p.dim; c += 256u) {
        let v = residuals[prev * p.dim + c] - codebook[base + c];
        r[c] = v;
        if (wg == 0u) {
            residuals[p.level * p.dim + c] = v;
        }
    }
    workgroupBarrier();

    let lane = lid % 32u;
    let bin = wg * 8u + lid / 32u;
    var d = 0.0;
    if (bin < p.bins) {
        let o = (p.level * p.bins + bin) * p.dim;
        for (var c = lane; c < p.dim; c += 32u) {
            let df = codebook[o + c] - r[c];
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
        dist[dout + bin] = red[lid];
    }
}
