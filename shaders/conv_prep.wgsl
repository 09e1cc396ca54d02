// Stage one frame of a streaming causal convolution's input behind its carried prefix.
//
//   src : [c, t] channel-major, or [t, c] when p.time_major == 1
//   xa  : [c, ta] with ta = tp + t; columns [0, tp) hold the previous frame's tail
//         (StreamingConv1d's `previous`), columns [tp, ta) receive this frame
//
// xa[c, tp + i] = act(src[c, i]); act is ELU (alpha 1) when p.elu == 1 (SEANet puts an ELU
// in front of every conv but the first). On the first frame of a stream, a conv with
// pad_mode "replicate" fills its prefix with the first fresh sample (Kyutai's downsample).

struct Params {
    c: u32,
    t: u32,
    ta: u32,
    tp: u32,
    time_major: u32,
    elu: u32,
    replicate: u32,
    _pad: u32,
}

struct Frame {
    pos: u32,
    first: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> xa: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> frame: Frame;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 64u;
    if (idx >= p.c * p.t) {
        return;
    }
    let c = idx / p.t;
    let i = idx % p.t;
    var v: f32;
    if (p.time_major == 1u) {
        v = src[i * p.c + c];
    } else {
        v = src[c * p.t + i];
    }
    if (p.elu == 1u && v < 0.0) {
        v = exp(v) - 1.0;
    }
    xa[c * p.ta + p.tp + i] = v;
    if (i == 0u && p.replicate == 1u && frame.first == 1u) {
        for (var j = 0u; j < p.tp; j++) {
            xa[c * p.ta + j] = v;
        }
    }
}
