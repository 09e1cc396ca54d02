// One RVQ's decode and output projection in one dispatch (ResidualVectorQuantization.decode
// then the 1x1 output_proj): y[i] (+)= sum_j w[i, j] * q[j], q[j] = sum_l
// codebook[l, codes[p.offset + l], j]. One workgroup of 64 threads per output, each thread
// striding over the input dimension (taking each q[j] it needs as vq_decode.wgsl sums it),
// then a tree reduction as matvec.wgsl's: the result is that of vq_decode then matvec.
//
//   w        : [n, dim]   (a 1x1 Conv1d's [n, dim, 1])
//   codebook : [levels, bins, dim]   codes : [n_q] (checked < bins before upload)
//   y        : [n]        written, or added to when p.accumulate == 1

struct Params {
    n: u32,
    dim: u32,
    levels: u32,
    bins: u32,
    offset: u32,
    accumulate: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> codebook: array<f32>;
@group(0) @binding(2) var<storage, read> codes: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let i = wid.x + wid.y * nwg.x;
    if (i >= p.n) {
        return;
    }
    var acc = 0.0;
    for (var j = lid; j < p.dim; j += 64u) {
        var q = 0.0;
        for (var l = 0u; l < p.levels; l++) {
            let code = min(codes[p.offset + l], p.bins - 1u);
            q += codebook[(l * p.bins + code) * p.dim + j];
        }
        acc += w[i * p.dim + j] * q;
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
        if (p.accumulate == 1u) {
            y[i] += red[0];
        } else {
            y[i] = red[0];
        }
    }
}
