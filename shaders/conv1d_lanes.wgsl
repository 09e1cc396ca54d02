// Causal streaming Conv1d for deep, short layers on GPU adapters: p.lanes threads per
// output element (16 to 256, a power of two; a workgroup of 256 threads computes
// 256 / p.lanes consecutive outputs), the lanes striding over (input channel, tap) pairs
// eight at a time (their loads go out together: a lane's chain of round trips to memory is
// n / (8 lanes) long), then a tree reduction over the lanes. Same bindings, parameters,
// staging, carry and result as conv1d_tiled.wgsl (a workgroup per tile of outputs, which
// suits wide, long layers) and conv1d_reduce.wgsl (a workgroup of 64 per output, which CPU
// adapters run faster); the plan builder picks one by shape and adapter.
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

const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;

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

// Term e of the output's reduction: weight e of its row times input (channel cin + cj.x,
// tap cj.y), cj = (e / k, e % k) kept by `advance` (no division a term).
fn term(wo: u32, e: u32, cj: vec2<u32>, cin: u32, x0: u32, cur: u32) -> f32 {
    return w[wo + e] * staged(cin + cj.x, x0 + cj.y * p.dilation, cur);
}

// (channel, tap) of term e + lanes from that of e, d = (lanes / k, lanes % k)
fn advance(cj: vec2<u32>, d: vec2<u32>) -> vec2<u32> {
    let t = cj.y + d.y;
    return select(vec2<u32>(cj.x + d.x, t), vec2<u32>(cj.x + d.x + 1u, t - p.k), t >= p.k);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let wl = wid.x + wid.y * nwg.x;
    let cur = frame.index % 2u;
    // the next frame's prefix, strided over every thread of the grid
    let threads = nwg.x * nwg.y * WG;
    for (var e = wl * WG + lid; e < p.in_c * p.tp; e += threads) {
        let c = e / p.tp;
        let i = e % p.tp;
        prev[((1u - cur) * p.in_c + c) * p.tp + i] = staged(c, p.t + i, cur);
    }
    let lanes = p.lanes;
    let lane = lid % lanes;
    let idx = wl * (WG / lanes) + lid / lanes;
    // every thread reaches the barriers below; those past the last output sum nothing
    let valid = idx < p.out_c * p.t_out;
    let oc = idx / p.t_out;
    let t = idx % p.t_out;
    let in_g = p.in_c / p.groups;
    let cin = (oc / (p.out_c / p.groups)) * in_g;
    let x0 = t * p.stride;
    var acc = 0.0;
    let n = select(0u, in_g * p.k, valid);
    let wo = oc * in_g * p.k;
    let d = vec2<u32>(lanes / p.k, lanes % p.k);
    var cj = vec2<u32>(lane / p.k, lane % p.k);
    var e = lane;
    for (; e + 7u * lanes < n; e += 8u * lanes) {
        let c1 = advance(cj, d);
        let c2 = advance(c1, d);
        let c3 = advance(c2, d);
        let c4 = advance(c3, d);
        let c5 = advance(c4, d);
        let c6 = advance(c5, d);
        let c7 = advance(c6, d);
        let a0 = term(wo, e, cj, cin, x0, cur);
        let a1 = term(wo, e + lanes, c1, cin, x0, cur);
        let a2 = term(wo, e + 2u * lanes, c2, cin, x0, cur);
        let a3 = term(wo, e + 3u * lanes, c3, cin, x0, cur);
        let a4 = term(wo, e + 4u * lanes, c4, cin, x0, cur);
        let a5 = term(wo, e + 5u * lanes, c5, cin, x0, cur);
        let a6 = term(wo, e + 6u * lanes, c6, cin, x0, cur);
        let a7 = term(wo, e + 7u * lanes, c7, cin, x0, cur);
        acc += ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
        cj = advance(c7, d);
    }
    for (; e < n; e += lanes) {
        acc += term(wo, e, cj, cin, x0, cur);
        cj = advance(cj, d);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && valid) {
        var v = red[lid];
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
