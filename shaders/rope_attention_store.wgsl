// rope_attention.wgsl's head output as it is: out[r, h * hd : (h + 1) * hd], the lanes'
// weighted value sums over the softmax's denominator.
fn store_head(lid: u32, r: u32, h: u32, hd4: u32, lanes: u32, den: f32) {
    if (lid < hd4) {
        var sum = vec4<f32>(0.0);
        for (var l = 0u; l < lanes; l++) {
            sum += part[l * hd4 + lid];
        }
        out[r * (p.dim / 4u) + h * hd4 + lid] = sum / den;
    }
}
