// Causal streaming ConvTranspose1d (moshi.modules.conv.StreamingConvTranspose1d). One
// workgroup of 256 threads per (output channel, tile of 128 columns of the full output of this
// frame): 32 columns at a time, 8 lanes splitting the input channels, summed at the end.
//
//   w       : [in_c, out_c / groups, k]   (PyTorch ConvTranspose1d layout)
//   b       : [out_c]                     (read only when p.has_bias == 1)
//   x       : [in_c, t_in]        (ELU applied on load when p.elu == 1: SEANet's decoder
//                                  puts an ELU in front of each upsampling layer)
//   partial : [2, out_c, tp]  overlap tails, bias removed, in two halves: half
//                          frame.index % 2 holds the previous frame's, the other receives
//                          this frame's (one buffer read and rewritten in place would race
//                          between workgroups)
//   y       : [out_c, ts]  this frame's output, ts = t_in * stride ([ts, out_c] when
//                          p.time_major_out == 1), ELU'd as it is stored when p.elu_out == 1
//
// The full output has ts + tp columns (tp = k - stride); requires ts >= tp, which holds for
// every kernel of twice the stride.

struct Params {
    in_c: u32,
    out_c: u32,
    k: u32,
    stride: u32,
    groups: u32,
    t_in: u32,
    ts: u32,
    tp: u32,
    has_bias: u32,
    elu: u32,
    time_major_out: u32,
    // ELU (alpha 1) on y as it is stored, not on the carried tails
    elu_out: u32,
}

// after frame.wgsl (Frame)
@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> partial: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<uniform> frame: Frame;

const TILE: u32 = 128u;
const COLS: u32 = 32u;
const LANES: u32 = 8u;

var<workgroup> red: array<f32, 256>;

fn input(c: u32, ti: u32) -> f32 {
    let v = x[c * p.t_in + ti];
    if (p.elu == 1u && v < 0.0) {
        return exp(v) - 1.0;
    }
    return v;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let full_t = p.ts + p.tp;
    let tiles = (full_t + TILE - 1u) / TILE;
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.out_c * tiles) {
        return;
    }
    let oc = wg / tiles;
    let tile = wg % tiles;
    let col = lid % COLS;
    let lane = lid / COLS;
    let in_g = p.in_c / p.groups;
    let out_g = p.out_c / p.groups;
    let g = oc / out_g;
    let ocl = oc % out_g;
    let cur = frame.index % 2u;
    var bias = 0.0;
    if (p.has_bias == 1u) {
        bias = b[oc];
    }
    for (var chunk = 0u; chunk < TILE / COLS; chunk++) {
        let i = tile * TILE + chunk * COLS + col;
        var acc = 0.0;
        if (i < full_t) {
            for (var ic = lane; ic < in_g; ic += LANES) {
                let c = g * in_g + ic;
                let wrow = (c * out_g + ocl) * p.k;
                // taps j = i mod stride, + stride, ...: input column (i - j) / stride
                for (var j = i % p.stride; j < p.k && j <= i; j += p.stride) {
                    let ti = (i - j) / p.stride;
                    if (ti < p.t_in) {
                        acc += w[wrow + j] * input(c, ti);
                    }
                }
            }
        }
        red[lid] = acc;
        workgroupBarrier();
        if (lane == 0u && i < full_t) {
            var v = bias;
            for (var l = 0u; l < LANES; l++) {
                v += red[l * COLS + col];
            }
            if (i < p.tp) {
                v += partial[(cur * p.out_c + oc) * p.tp + i];
            }
            if (i < p.ts) {
                var o = v;
                if (p.elu_out == 1u && o < 0.0) {
                    o = exp(o) - 1.0;
                }
                if (p.time_major_out == 1u) {
                    y[i * p.out_c + oc] = o;
                } else {
                    y[oc * p.ts + i] = o;
                }
            } else {
                partial[((1u - cur) * p.out_c + oc) * p.tp + (i - p.ts)] = v - bias;
            }
        }
        workgroupBarrier();
    }
}
