// matvec.wgsl's input rows and residual as they are (every linear but those after
// rope_attention_out_proj.wgsl).

fn stage_input(lid: u32, r0: u32, rows: u32) {}

// input element e of time row r
fn x_at(r: u32, e: u32) -> f32 {
    let xe = p.x_offset + r * p.k + e;
    return x[xe / 4u][xe % 4u];
}

// input vec4 j of time row r
fn x_vec(r: u32, j: u32) -> vec4<f32> {
    return x[(p.x_offset + r * p.k) / 4u + j];
}

fn residual_early(r: u32, i: u32, live: bool) -> f32 {
    return 0.0;
}

fn residual_row(y_old: f32, early: f32) -> f32 {
    return y_old;
}
