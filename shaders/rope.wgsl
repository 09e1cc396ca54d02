// Rotary position embedding on a head's vec4 columns (moshi.modules.rotary
// apply_rope, interleaved pairs), shared by the attention kernels (rope_attention.wgsl,
// rope_attention_small.wgsl, rope_attention_split.wgsl, attention_out_proj.wgsl): it reads
// p.rope (0: no rotation) and p.freq_coef (-ln(max_period) * 2 / head_dim) of the
// including kernel's Params.

// Rotate the pairs (a.x, a.y) and (a.z, a.w), pair indices j0 and j0 + 1 of the head, by
// the angles pos * exp(j * p.freq_coef).
fn rotate(a: vec4<f32>, j0: u32, pos: u32) -> vec4<f32> {
    if (p.rope == 0u) {
        return a;
    }
    let f0 = exp(f32(j0) * p.freq_coef);
    let f1 = exp(f32(j0 + 1u) * p.freq_coef);
    let a0 = f0 * f32(pos);
    let a1 = f1 * f32(pos);
    let c0 = cos(a0);
    let s0 = sin(a0);
    let c1 = cos(a1);
    let s1 = sin(a1);
    return vec4<f32>(a.x * c0 - a.y * s0, a.x * s0 + a.y * c0, a.z * c1 - a.w * s1, a.z * s1 + a.w * c1);
}
