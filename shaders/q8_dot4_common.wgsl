// The i8 Q8_0 kernels' shared part (q8_matvec_dot4.wgsl, q8_qkv_attention.wgsl; WGSL has
// no includes, so the kernel table puts this file before each): the weights' bindings, the
// f16 scales, an input unit of 16 values as two 8-bit levels, and a weight unit against it
// through dot4I8Packed.
//
//   quants : [n, k / 16] vec4<u32>  the i8 quants, 16 a vec4
//   scales : [n k / 64] u32          the f16 scale of each block of 32, two a word

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

fn scale_of(block: u32) -> f32 {
    let word = scales[block >> 1u];
    return f16_to_f32(select(word & 0xffffu, word >> 16u, (block & 1u) == 1u));
}

struct Levels {
    hi: vec4<u32>,
    lo: vec4<u32>,
    s: f32,
}

// The 16 inputs v of a unit as two levels: hi = round(v / s), lo = round((v - s hi) * 254 / s).
fn levels(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>) -> Levels {
    let m4 = max(max(abs(a), abs(b)), max(abs(c), abs(d)));
    let m = max(max(m4.x, m4.y), max(m4.z, m4.w));
    let inv = select(0.0, 127.0 / m, m > 0.0);
    let s = m / 127.0;
    let ha = round(a * inv);
    let hb = round(b * inv);
    let hc = round(c * inv);
    let hd = round(d * inv);
    let inv_lo = 254.0 * inv;
    let hi = vec4<u32>(pack4xI8Clamp(vec4<i32>(ha)), pack4xI8Clamp(vec4<i32>(hb)), pack4xI8Clamp(vec4<i32>(hc)), pack4xI8Clamp(vec4<i32>(hd)));
    let lo = vec4<u32>(
        pack4xI8Clamp(vec4<i32>(round((a - ha * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((b - hb * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((c - hc * s) * inv_lo))),
        pack4xI8Clamp(vec4<i32>(round((d - hd * s) * inv_lo))),
    );
    return Levels(hi, lo, s);
}

fn dot16(q: vec4<u32>, h: vec4<u32>) -> i32 {
    return (dot4I8Packed(q.x, h.x) + dot4I8Packed(q.y, h.y)) + (dot4I8Packed(q.z, h.z) + dot4I8Packed(q.w, h.w));
}

// Unit u of weight row i (of k inputs) against an input unit's levels and scale.
fn row_unit_dot(i: u32, k: u32, u: u32, hi: vec4<u32>, lo: vec4<u32>, s: f32) -> f32 {
    let q = quants[i * (k / 16u) + u];
    let v = f32(dot16(q, hi)) + f32(dot16(q, lo)) * (1.0 / 254.0);
    return scale_of(i * (k / 32u) + (u >> 1u)) * s * v;
}
