// The second dispatch of rope_attention_split.wgsl: one workgroup of 256 threads per head
// merges the head's split partials (o_s, m_s, l_s) into softmax(q.k * scale) . v:
//   out = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s,   M = max_s m_s
// over the used splits, the first ceil(n / per) of the n positions in the window (per as the
// split kernel takes it); with one used split that kernel wrote the output and this one
// returns.
//
//   part : [heads, splits, hd / 4 + 1] vec4   per split: o, then (m, l, 0, 0)
//   out  : [dim / 4] vec4
//
// splits = ceil(min(context, ring) / chunk), at most 256; the parameters are the split
// kernel's.

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    context: u32,
    scale: f32,
    freq_coef: f32,
    rope: u32,
    chunk: u32,
    least: u32,
    // the split kernel's, unread here
    key_lanes: u32,
    half: u32,
    _pad: u32,
}

// after frame.wgsl (Frame)
@group(0) @binding(0) var<storage, read> part: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
const WG: u32 = 256u;
var<workgroup> ms: array<vec4<f32>, 64>;
var<workgroup> ls: array<f32, 256>;
var<workgroup> acc_part: array<vec4<f32>, 256>;
var<workgroup> l_part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let hd4 = p.dim / p.heads / 4u;
    let pos_q = frame.pos;
    let window = min(p.context, p.ring);
    let splits = (window + p.chunk - 1u) / p.chunk;
    let nk = min(pos_q + 1u, window);
    let per = max(p.least, (nk + splits - 1u) / splits);
    let used = (nk + per - 1u) / per;
    if (used == 1u) {
        return;
    }
    let stride = hd4 + 1u;
    let head = h * splits * stride;
    // the maxima four to a vec4, NEG past the used splits
    let u4 = (used + 3u) / 4u;
    if (lid < 4u * u4) {
        var ml = vec4<f32>(NEG, 0.0, 0.0, 0.0);
        if (lid < used) {
            ml = part[head + lid * stride + hd4];
        }
        ms[lid / 4u][lid % 4u] = ml.x;
        ls[lid] = ml.y;
    }
    workgroupBarrier();
    var mx = NEG;
    for (var i = 0u; i < u4; i++) {
        let m4 = ms[i];
        mx = max(mx, max(max(m4.x, m4.y), max(m4.z, m4.w)));
    }
    // column c of split lanes g, g + groups, ...
    let groups = WG / hd4;
    let c = lid % hd4;
    let g = lid / hd4;
    var acc = vec4<f32>(0.0);
    var l = 0.0;
    if (g < groups) {
        for (var s = g; s < used; s += groups) {
            let w = exp(ms[s / 4u][s % 4u] - mx);
            acc += w * part[head + s * stride + c];
            l += w * ls[s];
        }
    }
    acc_part[lid] = acc;
    if (c == 0u) {
        l_part[g] = l;
    }
    workgroupBarrier();
    if (lid < hd4) {
        var o = vec4<f32>(0.0);
        var lt = 0.0;
        for (var i = 0u; i < groups; i++) {
            o += acc_part[i * hd4 + lid];
            lt += l_part[i];
        }
        out[h * hd4 + lid] = o / lt;
    }
}
