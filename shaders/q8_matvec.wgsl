// Linear layer with Q8_0 weights (ggml's block format, repacked for 4-byte access), one
// workgroup of 64 threads per output element, then a tree reduction.
//
//   quants : [n, k / 4] u32   four i8 weights per word, little-endian: byte b of word w of
//                             row i is W[i, 4 w + b]
//   scales : [n * k / 32] f16 one scale per block of 32 consecutive weights of a row, two
//                             per u32 (the even block in the low half)
//   x      : [t, k] f32 (rows from p.x_offset)      y : [t, n] f32 (rows from p.y_offset)
//
// W[i, j] = q * scale(block j / 32); v = sum_j W[i, j] x[r, j];
// y = v (p.mode 0), y += v (p.mode 1). k must be a multiple of 32.

struct Params {
    n: u32,
    k: u32,
    t: u32,
    mode: u32,
    x_offset: u32,
    y_offset: u32,
    y_stride: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> quants: array<u32>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> red: array<f32, 64>;

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

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let o = wid.x + wid.y * nwg.x;
    if (o >= p.n * p.t) {
        return;
    }
    let r = o / p.n;
    let i = o % p.n;
    let words = p.k / 4u;
    let row = i * words;
    let xo = p.x_offset + r * p.k;
    var acc = 0.0;
    for (var w = lid; w < words; w += 64u) {
        let q = bitcast<i32>(quants[row + w]);
        let xb = xo + 4u * w;
        let dot4 = f32(extractBits(q, 0u, 8u)) * x[xb]
            + f32(extractBits(q, 8u, 8u)) * x[xb + 1u]
            + f32(extractBits(q, 16u, 8u)) * x[xb + 2u]
            + f32(extractBits(q, 24u, 8u)) * x[xb + 3u];
        acc += scale_of((row + w) / 8u) * dot4;
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
        let yo = p.y_offset + r * p.y_stride + i;
        if (p.mode == 1u) {
            y[yo] += red[0];
        } else {
            y[yo] = red[0];
        }
    }
}
