// Q8_0 weights as the kernels read them (ggml's block format, repacked for 16-byte access),
// shared by the kernels that read them (q8_matvec.wgsl, q8_matvec_dot4.wgsl,
// attention_out_proj.wgsl, q8_study.wgsl), which all bind them at 0 and 1:
//
//   quants : [n, k / 16] vec4<u32>  four i8 weights per u32, little-endian: byte b of word w
//                                   of row i is W[i, 4 w + b]; unit u of row i is the vec4
//                                   at i k / 16 + u (block c is units 2 c and 2 c + 1)
//   scales : [n * k / 32] f16       one scale per block of 32 consecutive weights of a row,
//                                   two per u32 (the even block in the low half)
//
// W[i, j] = q * scale(block j / 32).

@group(0) @binding(0) var<storage, read> quants: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;

// f16 bits -> f32 by hand: unpack2x16float would need a capability some backends lack.
fn f16_to_f32(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    var v: f32;
    if (e == 0u) {
        v = f32(m) * 5.9604644775390625e-8;
    } else {
        v = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
    }
    return select(v, -v, (h & 0x8000u) != 0u);
}

// The scale of block `block` (row i's block c is block i k / 32 + c).
fn scale_of(block: u32) -> f32 {
    let word = scales[block >> 1u];
    return f16_to_f32(select(word & 0xffffu, word >> 16u, (block & 1u) == 1u));
}

// The four signed bytes of w, lowest first.
fn i8x4(w: u32) -> vec4<f32> {
    let s = bitcast<vec4<i32>>(vec4<u32>(w << 24u, w << 16u, w << 8u, w));
    return vec4<f32>(s >> vec4<u32>(24u));
}
