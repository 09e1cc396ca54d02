// rope_attention.wgsl's head output taken through the head's columns of out_proj (a
// bias-free [dim, dim] f32 linear, torch.nn.Linear layout) and its LayerScale: the workgroup
// of head h and row r writes the partial row
//   out[r, h, i] = w_scale[i] * sum_j w_out[i, h * hd + j] * o[j],   i < dim,
// o = its head's attention output; the heads' partial rows of a row sum to
// LayerScale(out_proj(attention)) of that row, which the linears after it add in
// (matvec.wgsl, p.part_in and p.part_out). One dispatch fewer than out_proj apart.
//
//   w_out   : [dim, dim / 4] vec4
//   w_scale : [dim]
//   out     : [t, heads, dim / 4] vec4

@group(0) @binding(8) var<storage, read> w_out: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read> w_scale: array<f32>;

// the head's output against eight vec4s of an out_proj row from wo + e: the loads go out
// together
fn row_part8(wo: u32, e: u32) -> vec4<f32> {
    let w0 = w_out[wo + e];
    let w1 = w_out[wo + e + 1u];
    let w2 = w_out[wo + e + 2u];
    let w3 = w_out[wo + e + 3u];
    let w4 = w_out[wo + e + 4u];
    let w5 = w_out[wo + e + 5u];
    let w6 = w_out[wo + e + 6u];
    let w7 = w_out[wo + e + 7u];
    return ((qs[e] * w0 + qs[e + 1u] * w1) + (qs[e + 2u] * w2 + qs[e + 3u] * w3))
        + ((qs[e + 4u] * w4 + qs[e + 5u] * w5) + (qs[e + 6u] * w6 + qs[e + 7u] * w7));
}

fn store_head(lid: u32, r: u32, h: u32, hd4: u32, lanes: u32, den: f32) {
    // the head's output into qs (the query is read no more)
    if (lid < hd4) {
        var sum = vec4<f32>(0.0);
        for (var l = 0u; l < lanes; l++) {
            sum += part[l * hd4 + lid];
        }
        qs[lid] = sum / den;
    }
    workgroupBarrier();
    // a thread per two rows of out_proj (i and i + 256), eight vec4s of each at a time
    let dim4 = p.dim / 4u;
    let o = (r * p.heads + h) * dim4;
    for (var i = lid; i < p.dim; i += 2u * WG) {
        let i1 = min(i + WG, p.dim - 1u);
        let wa = i * dim4 + h * hd4;
        let wb = i1 * dim4 + h * hd4;
        var acc_a = vec4<f32>(0.0);
        var acc_b = vec4<f32>(0.0);
        var e = 0u;
        for (; e + 7u < hd4; e += 8u) {
            acc_a += row_part8(wa, e);
            acc_b += row_part8(wb, e);
        }
        for (; e < hd4; e++) {
            acc_a += qs[e] * w_out[wa + e];
            acc_b += qs[e] * w_out[wb + e];
        }
        out[o + i / 4u][i % 4u] = w_scale[i] * ((acc_a.x + acc_a.y) + (acc_a.z + acc_a.w));
        if (i + WG < p.dim) {
            out[o + i1 / 4u][i1 % 4u] = w_scale[i1] * ((acc_b.x + acc_b.y) + (acc_b.z + acc_b.w));
        }
    }
}
