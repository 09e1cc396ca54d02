// Sum of the codebook entries chosen by `levels` consecutive codes
// (ResidualVectorQuantization.decode): out[c] = sum_l codebook[l, codes[offset + l], c].
//
//   codebook : [levels, bins, dim]   codes : [n_q] (checked < bins before upload)   out : [dim]

struct Params {
    levels: u32,
    bins: u32,
    dim: u32,
    offset: u32,
}

@group(0) @binding(0) var<storage, read> codebook: array<f32>;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= p.dim) {
        return;
    }
    var acc = 0.0;
    for (var l = 0u; l < p.levels; l++) {
        let code = min(codes[p.offset + l], p.bins - 1u);
        acc += codebook[(l * p.bins + code) * p.dim + c];
    }
    out[c] = acc;
}
