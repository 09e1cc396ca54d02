// matvec.wgsl's input rows or residual with the partial rows behind each time row (the
// heads' parts of LayerScale(out_proj) that rope_attention_out_proj.wgsl writes), which
// nothing sums in memory:
//   p.part_in > 0: input row r = x[r] + sum_q part[r, q, :]   (part [t, part_in, k])
//   p.part_out > 0: residual row r = y[r] + sum_q part[r, q, :]   (part [t, part_out, n])
// A group's input rows (at most 4 of k, 4 k <= 4 * XST) are summed once into workgroup memory.

@group(0) @binding(7) var<storage, read> part: array<vec4<f32>>;

const XST: u32 = 256u;
var<workgroup> xst: array<vec4<f32>, 256>;

fn stage_input(lid: u32, r0: u32, rows: u32) {
    if (p.part_in == 0u) {
        return;
    }
    let k4 = p.k / 4u;
    for (var e = lid; e < rows * k4; e += 256u) {
        let r = r0 + e / k4;
        let j = e % k4;
        var v = x[(p.x_offset + r * p.k) / 4u + j];
        for (var q = 0u; q < p.part_in; q++) {
            v += part[(r * p.part_in + q) * k4 + j];
        }
        xst[e] = v;
    }
    workgroupBarrier();
}

// input element e of time row r (of the group being staged)
fn x_at(r: u32, e: u32) -> f32 {
    if (p.part_in == 0u) {
        let xe = p.x_offset + r * p.k + e;
        return x[xe / 4u][xe % 4u];
    }
    let v = xst[(r % 4u) * (p.k / 4u) + e / 4u];
    return v[e % 4u];
}

// input vec4 j of time row r
fn x_vec(r: u32, j: u32) -> vec4<f32> {
    if (p.part_in == 0u) {
        return x[(p.x_offset + r * p.k) / 4u + j];
    }
    return xst[(r % 4u) * (p.k / 4u) + j];
}

// the residual's partial rows at output i of time row r, summed
fn residual_early(r: u32, i: u32, live: bool) -> f32 {
    var s = 0.0;
    if (live) {
        for (var q = 0u; q < p.part_out; q++) {
            let e = (r * p.part_out + q) * p.n + i;
            s += part[e / 4u][e % 4u];
        }
    }
    return s;
}

fn residual_row(y_old: f32, early: f32) -> f32 {
    return y_old + early;
}
