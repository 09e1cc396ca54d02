// Linear layer with Q8_0 weights (ggml's block format, repacked for 16-byte access): eight
// output rows per workgroup of 256 threads, 32 threads per row, each thread streaming whole
// blocks of 32 weights (two vec4<u32> loads, one scale), then a tree reduction per row.
//
//   quants : [n, k / 16] vec4<u32>  four i8 weights per u32, little-endian: byte b of word w
//                                   of row i is W[i, 4 w + b]; block c of row i is the two
//                                   vec4s at 2 (i k / 32 + c)
//   scales : [n * k / 32] f16       one scale per block of 32 consecutive weights of a row,
//                                   two per u32 (the even block in the low half)
//   x      : [t, k] f32 as vec4s (rows from p.x_offset, a multiple of 4); with p.gated 1
//            x is [t, 2 k] (a SiLU-gated FFN's linear_in output) and the input row is
//            silu(x[r, :k]) * x[r, k:] (moshi.modules.gating ActivationGating)
//   y      : [t, n] f32 (rows from p.y_offset, stride p.y_stride)
//
// W[i, j] = q * scale(block j / 32); v = sum_j W[i, j] in[r, j];
// y = v (p.mode 0), y += v (p.mode 1). k must be a multiple of 32.

struct Params {
    n: u32,
    k: u32,
    t: u32,
    mode: u32,
    x_offset: u32,
    y_offset: u32,
    y_stride: u32,
    gated: u32,
}

@group(0) @binding(0) var<storage, read> quants: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const LANES: u32 = 32u;
const ROWS: u32 = 8u;

var<workgroup> red: array<f32, 256>;

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

// Input vec4 v of the row starting at vec4 `row` (the gate applied when p.gated is 1).
fn input(row: u32, v: u32) -> vec4<f32> {
    let a = x[row + v];
    if (p.gated == 0u) {
        return a;
    }
    let u = x[row + p.k / 4u + v];
    return a / (vec4<f32>(1.0) + exp(-a)) * u;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let g = lid / LANES;
    let lane = lid % LANES;
    let o = (wid.x + wid.y * nwg.x) * ROWS + g;
    let nb = p.k / 32u;
    var acc = 0.0;
    if (o < p.n * p.t) {
        let r = o / p.n;
        let i = o % p.n;
        let width = select(p.k, 2u * p.k, p.gated == 1u);
        let xrow = (p.x_offset + r * width) / 4u;
        for (var c = lane; c < nb; c += LANES) {
            let blk = i * nb + c;
            let q0 = quants[2u * blk];
            let q1 = quants[2u * blk + 1u];
            let xv = 8u * c;
            var s = dot(i8x4(q0.x), input(xrow, xv));
            s += dot(i8x4(q0.y), input(xrow, xv + 1u));
            s += dot(i8x4(q0.z), input(xrow, xv + 2u));
            s += dot(i8x4(q0.w), input(xrow, xv + 3u));
            s += dot(i8x4(q1.x), input(xrow, xv + 4u));
            s += dot(i8x4(q1.y), input(xrow, xv + 5u));
            s += dot(i8x4(q1.z), input(xrow, xv + 6u));
            s += dot(i8x4(q1.w), input(xrow, xv + 7u));
            acc += scale_of(blk) * s;
        }
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && o < p.n * p.t) {
        let r = o / p.n;
        let i = o % p.n;
        let yo = p.y_offset + r * p.y_stride + i;
        if (p.mode == 1u) {
            y[yo] += red[lid];
        } else {
            y[yo] = red[lid];
        }
    }
}
