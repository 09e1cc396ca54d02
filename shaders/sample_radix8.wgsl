// Draw one token from logits on the GPU, one workgroup of 256 threads (moshi.utils.sampling
// `sample_token`): greedy argmax when p.greedy == 1, else a softmax sample at temperature
// 1 / p.inv_temp restricted to the top p.top_k logits, by the Gumbel-max trick:
// argmax over the top k of (l * inv_temp + g), g = -log(-log(u)) with u from a hash of
// (p.seed, frame.pos, p.stream, i), so a seeded session replays exactly.
//
//   logits : [..] f32, this draw's n values from p.offset   tokens : [slots] i32
//
// Ties go to the lower index (torch.argmax). The top-k threshold (the k-th largest of the
// order-preserving integer keys of the logits) is found exactly by a radix select: four
// rounds of a 256-bin histogram of one key byte, most significant first.

// after frame.wgsl (Frame) and sample_common.wgsl (Params, the bindings, add_embedding, key, pcg)

var<workgroup> red_v: array<f32, 256>;
var<workgroup> red_i: array<u32, 256>;
var<workgroup> red_c: array<u32, 256>;
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> found: vec2<u32>;

// u in (0, 1) from (seed, frame, stream, i); 24 random bits.
fn uniform01(i: u32) -> f32 {
    let h = pcg(pcg(pcg(pcg(p.seed) ^ frame.pos) ^ p.stream) ^ i);
    return (f32(h >> 8u) + 0.5) / 16777216.0;
}

// Select the digit (bits `shift`..`shift + 8`) of the k-th largest key among the keys whose
// higher bits equal `prefix` (under `mask`), `rank` of them (1-based) counted from the top.
// Returns (digit, keys above it among those): a uniform value for the whole workgroup.
fn select_digit(lid: u32, prefix: u32, mask: u32, shift: u32, rank: u32) -> vec2<u32> {
    atomicStore(&hist[lid], 0u);
    workgroupBarrier();
    for (var i = lid; i < p.n; i += 256u) {
        let kv = key(logits[p.offset + i]);
        if ((kv & mask) == prefix) {
            atomicAdd(&hist[(kv >> shift) & 0xffu], 1u);
        }
    }
    workgroupBarrier();
    // inclusive scan from the top digit down: red_c[j] = keys with digit >= 255 - j
    red_c[lid] = atomicLoad(&hist[255u - lid]);
    workgroupBarrier();
    for (var s = 1u; s < 256u; s = s << 1u) {
        var v = red_c[lid];
        if (lid >= s) {
            v += red_c[lid - s];
        }
        workgroupBarrier();
        red_c[lid] = v;
        workgroupBarrier();
    }
    let above = select(0u, red_c[max(lid, 1u) - 1u], lid > 0u);
    if (red_c[lid] >= rank && above < rank) {
        found = vec2<u32>(255u - lid, above);
    }
    workgroupBarrier();
    let f = found;
    workgroupBarrier();
    return f;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    var threshold = 0u;
    if (p.greedy == 0u && p.top_k > 0u && p.top_k < p.n) {
        var mask = 0u;
        var rank = p.top_k;
        for (var shift = 24i; shift >= 0i; shift -= 8i) {
            let d = select_digit(lid, threshold, mask, u32(shift), rank);
            threshold |= d.x << u32(shift);
            mask |= 0xffu << u32(shift);
            rank -= d.y;
        }
    }
    var best = -3.4e38;
    var best_i = 0xffffffffu;
    for (var i = lid; i < p.n; i += 256u) {
        let l = logits[p.offset + i];
        var v = l;
        if (p.greedy == 0u) {
            if (key(l) < threshold) {
                continue;
            }
            v = l * p.inv_temp - log(-log(uniform01(i)));
        }
        if (v > best || best_i == 0xffffffffu) {
            best = v;
            best_i = i;
        }
    }
    red_v[lid] = best;
    red_i[lid] = best_i;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let ov = red_v[lid + s];
            let oi = red_i[lid + s];
            let mine = red_i[lid];
            if (oi != 0xffffffffu && (mine == 0xffffffffu || ov > red_v[lid] || (ov == red_v[lid] && oi < mine))) {
                red_v[lid] = ov;
                red_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        tokens[p.slot] = i32(red_i[0]);
    }
    add_embedding(lid, red_i[0]);
}
