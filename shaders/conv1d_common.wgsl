// What the streaming Conv1d kernels share (moshi.modules.conv.StreamingConv1d in streaming
// mode): their parameters, bindings, output layout and staged input. The kernel table
// prepends frame.wgsl, this file and one of conv1d_load_elu.wgsl and conv1d_load_raw.wgsl
// (act_in) to conv1d_tiled.wgsl, conv1d_reduce.wgsl and conv1d_lanes.wgsl
// (src/gpu/kernels.rs), which differ only in how they share out the sums.
//
//   w    : [out_c, in_c / groups, k]   (PyTorch Conv1d layout)
//   b    : [out_c / max(p.phases, 1)]  (read only when p.has_bias == 1; a phase takes its
//                                      channel's)
//   x    : [in_c, t] channel-major, or [t, in_c] when p.time_major == 1
//   prev : [2, in_c, tp]  the carried prefix (`previous`, activation applied) in two halves:
//          half frame.index % 2 is this frame's, the other receives the next frame's (one
//          buffer read and rewritten in place would race between workgroups)
//   res  : [out_c, t_out]              (added when p.residual == 1: SEANet's true skip)
//   y    : [out_c, t_out], or [t_out, out_c] when p.time_major_out == 1 (res then too);
//          with p.phases > 1 the channels' phases interleaved in time (out_index); ELU'd
//          as it is stored when p.elu_out == 1 (act_out)
//
// The staged input xa [in_c, tp + t]: xa[c, j] = prev[c, j] for j < tp, act(x[c, j - tp])
// after, act being the kernel's act_in: ELU (alpha 1) in the kernels with conv1d_load_elu.wgsl,
// none with conv1d_load_raw.wgsl. On the first frame of a stream a conv
// with pad_mode "replicate" takes its prefix from the first fresh column.
// y[oc, t] = b[oc] + sum_{ic, j} w[oc, ic, j] * xa[g * in_g + ic, t * stride + j * dilation]
// The next prefix is xa[c, t + i] for i < tp, written strided over every thread of the grid.

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
    _pad3: u32,
    replicate: u32,
    time_major_out: u32,
    phases: u32,
    // threads per output (conv1d_lanes; the others ignore it)
    lanes: u32,
    // ELU on the outputs as they are stored (act_out)
    elu_out: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> prev: array<f32>;
@group(0) @binding(4) var<storage, read> res: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> frame: Frame;

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

// act(x[c, i]), at x[c * s.x + i * s.y] with the strides of either layout (a select, not a
// branch in every load)
fn fresh(c: u32, i: u32) -> f32 {
    let s = select(vec2<u32>(p.t, 1u), vec2<u32>(1u, p.in_c), p.time_major == 1u);
    return act_in(x[c * s.x + i * s.y]);
}

// An output as it is stored: ELU'd (alpha 1) when p.elu_out == 1, where the conv's only
// reader is a conv that would apply SEANet's ELU on load (PlanBuilder's `Elu`).
fn act_out(v: f32) -> f32 {
    if (p.elu_out == 1u && v < 0.0) {
        return exp(v) - 1.0;
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

// The next frame's prefix xa[c, t + i] (i < tp) into half 1 - cur, strided over the grid's
// `threads` threads: this one is `thread`.
fn carry_prefix(thread: u32, threads: u32, cur: u32) {
    for (var e = thread; e < p.in_c * p.tp; e += threads) {
        let c = e / p.tp;
        let i = e % p.tp;
        prev[((1u - cur) * p.in_c + c) * p.tp + i] = staged(c, p.t + i, cur);
    }
}

// y[oc, t] = act_out(sum + the channel's bias (p.has_bias) + res[oc, t] (p.residual)): the end of
// an output whose reduction one thread holds (conv1d_reduce, conv1d_lanes; conv1d_tiled
// starts its sums from the bias instead)
fn store_output(oc: u32, t: u32, sum: f32) {
    var v = sum;
    if (p.has_bias == 1u) {
        v += b[oc / max(p.phases, 1u)];
    }
    let yo = out_index(oc, t);
    if (p.residual == 1u) {
        v += res[yo];
    }
    y[yo] = act_out(v);
}
