// Causal streaming Conv1d for deep, short layers on CPU adapters: one workgroup of 64
// threads per output element, the threads striding over (input channel, tap) pairs, then a
// tree reduction. Same bindings, parameters, staging, carry and result as conv1d_tiled.wgsl
// (a workgroup per tile of outputs, which suits wide, long layers) and conv1d_lanes.wgsl
// (16 to 256 threads per output, several outputs a workgroup of 256, which GPUs run
// faster); the plan builder picks one by shape and adapter.
//
//   w    : [out_c, in_c / groups, k]   b : [out_c / max(p.phases, 1)] (a phase takes its channel's)
//   x    : [in_c, t], or [t, in_c] when p.time_major == 1
//   prev : [2, in_c, tp]  carried prefix, half frame.index % 2 read, the other written
//   res  : [out_c, t_out]              y : [out_c, t_out]
//   (y and res [t_out, out_c] when p.time_major_out == 1; with p.phases > 1 the channels'
//   phases interleaved in time, out_index)

struct Params {
    in_c: u32,
    out_c: u32,
    k: u32,
    stride: u32,
    dilation: u32,
    groups: u32,
    t_out: u32,
    t: u32,
    tp: u32,
    has_bias: u32,
    residual: u32,
    time_major: u32,
    elu: u32,
    replicate: u32,
    time_major_out: u32,
    phases: u32,
    // conv1d_lanes's threads per output (not read here)
    lanes: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

struct Frame {
    pos: u32,
    first: u32,
    index: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> prev: array<f32>;
@group(0) @binding(4) var<storage, read> res: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> frame: Frame;

var<workgroup> red: array<f32, 64>;

// Where output channel oc, column t goes. With p.phases = P > 1 the out_c channels are P
// phases of out_c / P (channel oc is phase oc % P of channel oc / P) interleaved in time:
// column t of phase r is column t * P + r (a transposed conv of stride P computed as a
// conv, see PlanBuilder::conv_transpose1d_as_conv).
fn out_index(oc: u32, t: u32) -> u32 {
    let ph = max(p.phases, 1u);
    let c = oc / ph;
    let col = t * ph + oc % ph;
    if (p.time_major_out == 1u) {
        return col * (p.out_c / ph) + c;
    }
    return c * (p.t_out * ph) + col;
}

// act(x[c, i])
fn fresh(c: u32, i: u32) -> f32 {
    var v: f32;
    if (p.time_major == 1u) {
        v = x[i * p.in_c + c];
    } else {
        v = x[c * p.t + i];
    }
    if (p.elu == 1u && v < 0.0) {
        v = exp(v) - 1.0;
    }
    return v;
}

// xa[c, j], the prefix read from half `cur`
fn staged(c: u32, j: u32, cur: u32) -> f32 {
    if (j >= p.tp) {
        return fresh(c, j - p.tp);
    }
    if (p.replicate == 1u && frame.first == 1u) {
        return fresh(c, 0u);
    }
    return prev[(cur * p.in_c + c) * p.tp + j];
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let idx = wid.x + wid.y * nwg.x;
    let cur = frame.index % 2u;
    // the next frame's prefix, strided over every thread of the grid
    let threads = nwg.x * nwg.y * 64u;
    for (var e = idx * 64u + lid; e < p.in_c * p.tp; e += threads) {
        let c = e / p.tp;
        let i = e % p.tp;
        prev[((1u - cur) * p.in_c + c) * p.tp + i] = staged(c, p.t + i, cur);
    }
    if (idx >= p.out_c * p.t_out) {
        return;
    }
    let oc = idx / p.t_out;
    let t = idx % p.t_out;
    let in_g = p.in_c / p.groups;
    let g = oc / (p.out_c / p.groups);
    let x0 = t * p.stride;
    var acc = 0.0;
    let n = in_g * p.k;
    let wo = oc * n;
    // four (weight, input) pairs a lane at a time: their loads go out together instead of
    // one round trip to memory per pair
    var e = lid;
    for (; e + 192u < n; e += 256u) {
        let w0 = w[wo + e];
        let w1 = w[wo + e + 64u];
        let w2 = w[wo + e + 128u];
        let w3 = w[wo + e + 192u];
        let a0 = staged(g * in_g + e / p.k, x0 + (e % p.k) * p.dilation, cur);
        let a1 = staged(g * in_g + (e + 64u) / p.k, x0 + ((e + 64u) % p.k) * p.dilation, cur);
        let a2 = staged(g * in_g + (e + 128u) / p.k, x0 + ((e + 128u) % p.k) * p.dilation, cur);
        let a3 = staged(g * in_g + (e + 192u) / p.k, x0 + ((e + 192u) % p.k) * p.dilation, cur);
        acc += (w0 * a0 + w1 * a1) + (w2 * a2 + w3 * a3);
    }
    for (; e < n; e += 64u) {
        acc += w[wo + e] * staged(g * in_g + e / p.k, x0 + (e % p.k) * p.dilation, cur);
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
        var v = red[0];
        if (p.has_bias == 1u) {
            v += b[oc / max(p.phases, 1u)];
        }
        let yo = out_index(oc, t);
        if (p.residual == 1u) {
            v += res[yo];
        }
        y[yo] = v;
    }
}
