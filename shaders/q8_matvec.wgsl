// Linear layer with Q8_0 weights (ggml's block format, repacked for 16-byte access). A
// workgroup of 256 threads is 256 / p.lanes row groups of p.lanes threads (a power of two,
// 4 to 256); a row group computes 4 consecutive output rows: each thread streams whole blocks
// of 32 weights (two vec4<u32> loads and one scale per row), loading the block's 32 inputs
// once for the 4 rows; then a tree reduction per row over the group's lanes.
//
//   quants : [n, k / 16] vec4<u32>  four i8 weights per u32, little-endian: byte b of word w
//                                   of row i is W[i, 4 w + b]; block c of row i is the two
//                                   vec4s at 2 (i k / 32 + c)
//   scales : [n * k / 32] f16       one scale per block of 32 consecutive weights of a row,
//                                   two per u32 (the even block in the low half)
//   x      : [t, k] f32 as vec4s (rows from p.x_offset, a multiple of 4). The input row is
//            p.input 0: x[r, :]
//            p.input 1: silu(x[r, :k]) * x[r, k:], x being [t, 2 k] (a SiLU-gated FFN's
//                       linear_in output; moshi.modules.gating ActivationGating)
//            p.input 2: x[r, :] * alpha * rsqrt(p.eps + mean(x[r, :]^2)) (RMSNorm, f32;
//                       t must be 1)
//   alpha  : [k] f32 as vec4s, the RMSNorm gain (read only when p.input is 2)
//   y      : [t, n] f32 (rows from p.y_offset, stride p.y_stride)
//
// W[i, j] = q * scale(block j / 32); v = sum_j W[i, j] in[r, j];
// y = v (p.mode 0), y += v (p.mode 1). k must be a multiple of 32 and n of 4.

struct Params {
    n: u32,
    k: u32,
    t: u32,
    mode: u32,
    x_offset: u32,
    y_offset: u32,
    y_stride: u32,
    input: u32,
    lanes: u32,
    eps: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> quants: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> alpha: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const WG: u32 = 256u;
const RT: u32 = 4u;

var<workgroup> red: array<f32, 1024>;

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

// The four signed bytes of w, lowest first.
fn i8x4(w: u32) -> vec4<f32> {
    let s = bitcast<vec4<i32>>(vec4<u32>(w << 24u, w << 16u, w << 8u, w));
    return vec4<f32>(s >> vec4<u32>(24u));
}

// Input vec4 v of the row starting at vec4 `row`.
fn input(row: u32, v: u32, inv: f32) -> vec4<f32> {
    let a = x[row + v];
    if (p.input == 1u) {
        let u = x[row + p.k / 4u + v];
        return a / (vec4<f32>(1.0) + exp(-a)) * u;
    }
    if (p.input == 2u) {
        return a * (alpha[v] * inv);
    }
    return a;
}

// Block `blk` of the weights dotted with its 32 inputs, scaled.
fn block_dot(blk: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let q0 = quants[2u * blk];
    let q1 = quants[2u * blk + 1u];
    var s = dot(i8x4(q0.x), xs[0]);
    s += dot(i8x4(q0.y), xs[1]);
    s += dot(i8x4(q0.z), xs[2]);
    s += dot(i8x4(q0.w), xs[3]);
    s += dot(i8x4(q1.x), xs[4]);
    s += dot(i8x4(q1.y), xs[5]);
    s += dot(i8x4(q1.z), xs[6]);
    s += dot(i8x4(q1.w), xs[7]);
    return scale_of(blk) * s;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let lanes = p.lanes;
    let g = lid / lanes;
    let lane = lid % lanes;
    let row0 = ((wid.x + wid.y * nwg.x) * (WG / lanes) + g) * RT;
    let nb = p.k / 32u;
    let total = p.n * p.t;

    var inv = 1.0;
    if (p.input == 2u) {
        var ss = 0.0;
        for (var v = lid; v < p.k / 4u; v += WG) {
            let a = x[p.x_offset / 4u + v];
            ss += dot(a, a);
        }
        red[lid] = ss;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (lid < s) {
                red[lid] += red[lid + s];
            }
            workgroupBarrier();
        }
        inv = inverseSqrt(p.eps + red[0] / f32(p.k));
        workgroupBarrier();
    }

    var acc = vec4<f32>(0.0);
    if (row0 < total) {
        let r = row0 / p.n;
        let i0 = row0 % p.n;
        let width = select(p.k, 2u * p.k, p.input == 1u);
        let xrow = (p.x_offset + r * width) / 4u;
        for (var c = lane; c < nb; c += lanes) {
            var xs: array<vec4<f32>, 8>;
            for (var e = 0u; e < 8u; e++) {
                xs[e] = input(xrow, 8u * c + e, inv);
            }
            acc.x += block_dot(i0 * nb + c, xs);
            acc.y += block_dot((i0 + 1u) * nb + c, xs);
            acc.z += block_dot((i0 + 2u) * nb + c, xs);
            acc.w += block_dot((i0 + 3u) * nb + c, xs);
        }
    }
    red[lid] = acc.x;
    red[WG + lid] = acc.y;
    red[2u * WG + lid] = acc.z;
    red[3u * WG + lid] = acc.w;
    workgroupBarrier();
    for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
            red[WG + lid] += red[WG + lid + s];
            red[2u * WG + lid] += red[2u * WG + lid + s];
            red[3u * WG + lid] += red[3u * WG + lid + s];
        }
        workgroupBarrier();
    }
    if (lane < RT && row0 < total) {
        let o = row0 + lane;
        let r = o / p.n;
        let i = o % p.n;
        let v = red[lane * WG + g * lanes];
        let yo = p.y_offset + r * p.y_stride + i;
        if (p.mode == 1u) {
            y[yo] += v;
        } else {
            y[yo] = v;
        }
    }
}
