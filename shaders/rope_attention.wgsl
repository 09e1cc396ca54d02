// Streaming causal windowed attention of t new positions (t * hd / 4 at most 256, t at most
// the ring's size) with its rotary embedding and KV push fused (rope_kv then attention in
// one dispatch): one workgroup of 256 threads per (head, row). The head's keys of rows
// 0..=r are rotated (interleaved pairs, as rope_kv.wgsl does it,
// moshi.modules.rope.apply_rope) into workgroup memory with row r's query; row r's key and
// value are written into the rings at slot (frame.pos + r) % ring; then the query attends
// over the window as attention.wgsl does.
//
//   qkv      : [t, 3 dim / 4] vec4   the in_proj output: q | k | v, heads of hd = dim / heads
//   k_ring, v_ring : [ring, dim / 4] vec4    pos_ring : [ring]  (0xffffffff when empty)
//   scores   : [t, heads, ring]  scratch, for windows over 1024 positions (else workgroup memory):
//              the scores, then after the softmax's tree their weights exp(score - max)
//   out      : [t, dim / 4] vec4
//
// hd must be a multiple of 4, at most 256. This frame's keys and values are read from qkv,
// never from the rings (other workgroups write them there; the pushes of all rows happen
// before any row attends, as in rope_kv then attention). An older position is attended iff
// no row of this frame takes its slot, its slot still holds it and pos - pos_k < context.
// With p.rope == 0 keys and queries go in unrotated (Moshi's depformer).

struct Params {
    dim: u32,
    heads: u32,
    ring: u32,
    context: u32,
    scale: f32,
    freq_coef: f32,
    rope: u32,
    t: u32,
}

// after frame.wgsl (Frame) and rope.wgsl (rotate)
@group(0) @binding(0) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> k_ring: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> v_ring: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> pos_ring: array<u32>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> frame: Frame;

const NEG: f32 = -3.0e38;
const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;
var<workgroup> red_s: array<f32, 256>;
var<workgroup> qs: array<vec4<f32>, 64>;
// this frame's rotated keys of the head, rows 0..=r: ks[i * hd4 + e]
var<workgroup> ks: array<vec4<f32>, 256>;
var<workgroup> part: array<vec4<f32>, 256>;
// the scores while the window is at most HELD positions (else in `scores`)
const HELD: u32 = 1024u;
var<workgroup> held: array<f32, 1024>;

fn score_set(held_here: bool, so: u32, i: u32, v: f32) {
    if (held_here) {
        held[i] = v;
    } else {
        scores[so + i] = v;
    }
}

fn score_get(held_here: bool, so: u32, i: u32) -> f32 {
    if (held_here) {
        return held[i];
    }
    return scores[so + i];
}

// The window's largest score and its sum of exp(score - largest) from each thread's (m, s)
// (its own largest and sum of exp(score - m); NEG and 0 for a thread without keys): one
// tree over the pairs, each step rescaling the smaller side's sum to the larger maximum.
fn reduce_softmax(lid: u32, m: f32, s: f32) -> vec2<f32> {
    red[lid] = m;
    red_s[lid] = s;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k = k >> 1u) {
        if (lid < k) {
            let m1 = red[lid];
            let m2 = red[lid + k];
            let mm = max(m1, m2);
            red_s[lid] = red_s[lid] * exp(m1 - mm) + red_s[lid + k] * exp(m2 - mm);
            red[lid] = mm;
        }
        workgroupBarrier();
    }
    let r = vec2<f32>(red[0], red_s[0]);
    workgroupBarrier();
    return r;
}

// The query against the ring's key at vec4 ko, eight vec4s at a time: their loads go out
// together (a thread's chain of round trips to memory is hd4 / 8 long, not hd4).
fn ring_key_dot(ko: u32, hd4: u32) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    var e = 0u;
    for (; e + 7u < hd4; e += 8u) {
        let k0 = k_ring[ko + e];
        let k1 = k_ring[ko + e + 1u];
        let k2 = k_ring[ko + e + 2u];
        let k3 = k_ring[ko + e + 3u];
        let k4 = k_ring[ko + e + 4u];
        let k5 = k_ring[ko + e + 5u];
        let k6 = k_ring[ko + e + 6u];
        let k7 = k_ring[ko + e + 7u];
        acc += ((qs[e] * k0 + qs[e + 1u] * k1) + (qs[e + 2u] * k2 + qs[e + 3u] * k3))
            + ((qs[e + 4u] * k4 + qs[e + 5u] * k5) + (qs[e + 6u] * k6 + qs[e + 7u] * k7));
    }
    for (; e < hd4; e++) {
        acc += qs[e] * k_ring[ko + e];
    }
    return acc;
}

// exp(score - gmax) of window position i (0 for a position not attended)
fn weight_of(here: bool, so: u32, i: u32, gmax: f32) -> f32 {
    let s = score_get(here, so, i);
    return select(0.0, exp(s - gmax), s > -1.0e38);
}

// Window position i's weighted value column c, its weight already in place of its score:
// this frame's from qkv, an older one from the ring at slot slot_lo + i (wrapped; i is under
// the ring's size), slot_lo = lo % ring (a slot this frame takes weighs 0: skipped, it is
// being written).
fn weighted(here: bool, so: u32, i: u32, lo: u32, slot_lo: u32, pos0: u32, row4: u32, dim4: u32, h: u32, hd4: u32, c: u32) -> vec4<f32> {
    let pk = lo + i;
    if (pk >= pos0) {
        return score_get(here, so, i) * qkv[(pk - pos0) * row4 + 2u * dim4 + h * hd4 + c];
    }
    if (pk + p.ring >= pos0 + p.t) {
        let s = slot_lo + i;
        let slot = select(s, s - p.ring, s >= p.ring);
        return score_get(here, so, i) * v_ring[slot * dim4 + h * hd4 + c];
    }
    return vec4<f32>(0.0);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let h = wid.x;
    let r = wid.y;
    let hd4 = p.dim / p.heads / 4u;
    let dim4 = p.dim / 4u;
    let pos0 = frame.pos;
    let pos_q = pos0 + r;
    let slot_q = pos_q % p.ring;
    let so = (r * p.heads + h) * p.ring;
    let row4 = 3u * dim4;
    for (var e = lid; e < (r + 1u) * hd4; e += WG) {
        let i = e / hd4;
        let c = e % hd4;
        ks[e] = rotate(qkv[i * row4 + dim4 + h * hd4 + c], 2u * c, pos0 + i);
    }
    if (lid < hd4) {
        qs[lid] = rotate(qkv[r * row4 + h * hd4 + lid], 2u * lid, pos_q);
    }
    workgroupBarrier();
    if (lid < hd4) {
        let col = h * hd4 + lid;
        k_ring[slot_q * dim4 + col] = ks[r * hd4 + lid];
        v_ring[slot_q * dim4 + col] = qkv[r * row4 + 2u * dim4 + col];
        if (h == 0u && lid == 0u) {
            pos_ring[slot_q] = pos_q;
        }
    }
    let window = min(p.context, p.ring);
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;
    let here = nk <= HELD;

    var lmax = NEG;
    for (var i = lid; i < nk; i += WG) {
        let pk = lo + i;
        let slot = pk % p.ring;
        var s = NEG;
        if (pk >= pos0) {
            let ko = (pk - pos0) * hd4;
            var acc = vec4<f32>(0.0);
            for (var e = 0u; e < hd4; e++) {
                acc += qs[e] * ks[ko + e];
            }
            s = (acc.x + acc.y + acc.z + acc.w) * p.scale;
        } else if (pk + p.ring >= pos0 + p.t) {
            // the key's loads do not wait for the slot's position (read beside them)
            let held_pos = pos_ring[slot];
            let acc = ring_key_dot(slot * dim4 + h * hd4, hd4);
            s = select(NEG, (acc.x + acc.y + acc.z + acc.w) * p.scale, held_pos == pk);
        }
        score_set(here, so, i, s);
        lmax = max(lmax, s);
    }
    // this thread's sum of exp(score - lmax) over its own keys (its own writes: no barrier)
    var lsum = 0.0;
    for (var i = lid; i < nk; i += WG) {
        lsum += weight_of(here, so, i, lmax);
    }
    let soft = reduce_softmax(lid, lmax, lsum);
    let gmax = soft.x;
    let den = soft.y;
    // each position's weight once, in place of its score (this thread's own positions)
    for (var i = lid; i < nk; i += WG) {
        score_set(here, so, i, weight_of(here, so, i, gmax));
    }
    storageBarrier();
    workgroupBarrier();

    let lanes = WG / hd4;
    let c = lid % hd4;
    let kl = lid / hd4;
    let slot_lo = lo % p.ring;
    var acc = vec4<f32>(0.0);
    if (kl < lanes) {
        // four positions a lane at a time: their value loads go out together
        var i = kl;
        for (; i + 3u * lanes < nk; i += 4u * lanes) {
            let v0 = weighted(here, so, i, lo, slot_lo, pos0, row4, dim4, h, hd4, c);
            let v1 = weighted(here, so, i + lanes, lo, slot_lo, pos0, row4, dim4, h, hd4, c);
            let v2 = weighted(here, so, i + 2u * lanes, lo, slot_lo, pos0, row4, dim4, h, hd4, c);
            let v3 = weighted(here, so, i + 3u * lanes, lo, slot_lo, pos0, row4, dim4, h, hd4, c);
            acc += (v0 + v1) + (v2 + v3);
        }
        for (; i < nk; i += lanes) {
            acc += weighted(here, so, i, lo, slot_lo, pos0, row4, dim4, h, hd4, c);
        }
    }
    part[lid] = acc;
    workgroupBarrier();
    if (lid < hd4) {
        var sum = vec4<f32>(0.0);
        for (var l = 0u; l < lanes; l++) {
            sum += part[l * hd4 + lid];
        }
        out[r * dim4 + h * hd4 + lid] = sum / den;
    }
}
