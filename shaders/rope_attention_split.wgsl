// rope_attention.wgsl split over the window's positions (flash-decoding): one streaming step
// (t = 1) of causal windowed attention with its rotary embedding and KV push fused, where
// workgroup (s, h) takes positions [s per, (s + 1) per) of head h's window (counted from the
// oldest) and writes a partial: m, the largest of its scores, l = sum exp(score - m) and
// o = sum exp(score - m) v. attention_combine.wgsl merges a head's partials in a second
// dispatch; when one workgroup takes the whole window it writes the output itself.
//
//   qkv      : [3 dim / 4] vec4   the in_proj output: q | k | v, heads of hd = dim / heads
//   k_ring, v_ring : [ring, dim / 4] vec4 of f32, or with p.half [ring, dim / 8] vec4 of u32,
//                    each the f16 halves of two vec4s (pack2x16float)
//   pos_ring : [ring]  (0xffffffff when empty)
//   part     : [heads, splits, hd / 4 + 1] vec4   per split: o, then (m, l, 0, 0)
//   out      : [dim / 4] vec4   (written here only when one split is used)
//
// The dispatch has splits = ceil(min(context, ring) / chunk) workgroups per head; of the n
// positions in the window each takes per = max(least, ceil(n / splits)) <= chunk, so a
// partly filled window spreads over several workgroups without tiny ones, and the workgroups
// past the window's n positions write nothing (the combine reads the first ceil(n / per)).
// The split that holds the new position rotates its key, pushes key and value into the rings
// at slot frame.pos % ring (that split of head 0 stamps the position ring) and reads them
// back after a storage barrier: no other workgroup reads that slot, since the window never
// reaches back to the position it held before. Older positions are attended iff their slot
// still holds them and pos - pos_k < context, as rope_attention.wgsl.
//
// Scores: tp threads per position, each a strided part of the dot product: 256 / per, but
// at least p.key_lanes where the partial dots fit (tp * per <= 1024), so that a long split's
// key loads stay coalesced (tp threads read consecutive vec4s of one key, where one thread
// a position read a 512-byte key alone), taken as a power of two; positions beyond 256 / tp
// go in rounds. Weighted values: (vec4 column, position lane) pairs. Where a thread's part
// of a key is at most 8 vec4s and a lane has at most 8 positions, keys, values and position
// stamps load before the first barrier, with the query: the kernel waits on memory once
// before its scores, not three times; past that a thread loads its part of a later key (at
// most 8 vec4s) at once, and a lane the values of four positions at a time. hd must be a
// multiple of 4, at most 256; 1 <= least <= chunk <= 512.

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
    key_lanes: u32,
    // 1: the rings hold f16 keys and values
    half: u32,
    _pad: u32,
}

// after frame.wgsl (Frame) and rope.wgsl (rotate)
@group(0) @binding(0) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> k_ring: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> v_ring: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> pos_ring: array<u32>;
@group(0) @binding(4) var<storage, read_write> part: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> frame: Frame;

// Vec4 i of a ring's keys or values (as f32, or two f16 words of the vec4 of u32 i / 2).
fn ring_vec4(w: vec4<u32>, i: u32) -> vec4<f32> {
    if (p.half == 0u) {
        return bitcast<vec4<f32>>(w);
    }
    let h = select(w.xy, w.zw, (i & 1u) == 1u);
    return vec4<f32>(unpack2x16float(h.x), unpack2x16float(h.y));
}
fn k_at(i: u32) -> vec4<f32> {
    return ring_vec4(k_ring[select(i, i >> 1u, p.half == 1u)], i);
}
fn v_at(i: u32) -> vec4<f32> {
    return ring_vec4(v_ring[select(i, i >> 1u, p.half == 1u)], i);
}
// The ring slot j positions after slot0 (both in the ring, j < ring).
fn slot_after(slot0: u32, j: u32) -> u32 {
    return select(slot0 + j, slot0 + j - p.ring, slot0 + j >= p.ring);
}
// exp(score - m) of the split's position j (its score in sc), 0 for a position not attended.
fn weight_at(j: u32, m: f32) -> f32 {
    let sj = sc[j / 4u][j % 4u];
    return select(0.0, exp(sj - m), sj > -1.0e38);
}
// A thread's part of the key at vec4 ko: vec4s r, r + tp, ... (at most 8; the slots past hd4
// repeat the last, read and never used), loaded at once.
fn key_part(ko: u32, r: u32, tp: u32, hd4: u32) -> array<vec4<f32>, 8> {
    var kp: array<vec4<f32>, 8>;
    for (var i = 0u; i < 8u; i++) {
        kp[i] = k_at(ko + min(r + i * tp, hd4 - 1u));
    }
    return kp;
}
// The query's vec4s r, r + tp, ... dotted with a key's part from key_part.
fn part_dot(kp: array<vec4<f32>, 8>, r: u32, tp: u32, hd4: u32) -> f32 {
    var d = 0.0;
    for (var i = 0u; i < 8u; i++) {
        let e = r + i * tp;
        if (e < hd4) {
            d += dot(qs[e], kp[i]);
        }
    }
    return d;
}
// Pushes key k and value v into vec4 i of the rings (f32, or f16 halves as ring_vec4 reads).
fn push_kv(i: u32, k: vec4<f32>, v: vec4<f32>) {
    if (p.half == 0u) {
        k_ring[i] = bitcast<vec4<u32>>(k);
        v_ring[i] = bitcast<vec4<u32>>(v);
        return;
    }
    let o = 2u * (i & 1u);
    let j = i >> 1u;
    k_ring[j][o] = pack2x16float(k.xy);
    k_ring[j][o + 1u] = pack2x16float(k.zw);
    v_ring[j][o] = pack2x16float(v.xy);
    v_ring[j][o + 1u] = pack2x16float(v.zw);
}

const NEG: f32 = -3.0e38;
const WG: u32 = 256u;
// partial dot products held: positions times their threads
const DOTS: u32 = 1024u;
var<workgroup> qs: array<vec4<f32>, 64>;
// partial dot products [position, thread of the position], then the scores
var<workgroup> dots: array<f32, 1024>;
var<workgroup> sc: array<vec4<f32>, 128>;
var<workgroup> acc_part: array<vec4<f32>, 256>;
var<workgroup> l_part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let s = wid.x;
    let h = wid.y;
    let hd4 = p.dim / p.heads / 4u;
    let dim4 = p.dim / 4u;
    let pos_q = frame.pos;
    let slot_q = pos_q % p.ring;
    let window = min(p.context, p.ring);
    let splits = (window + p.chunk - 1u) / p.chunk;
    let lo = select(0u, pos_q + 1u - window, pos_q + 1u > window);
    let nk = pos_q + 1u - lo;
    // this split's positions, lo + a + j for j < n (uniform: the same in every thread)
    let per = max(p.least, (nk + splits - 1u) / splits);
    let used = (nk + per - 1u) / per;
    let a = s * per;
    if (a >= nk) {
        return;
    }
    let n = min(per, nk - a);
    let has_new = a + n == nk;
    // ring slot of position lo + a
    let slot0 = (lo + a) % p.ring;
    // scores: tp threads per position, thread r takes vec4s r, r + tp, ...
    let tp = 1u << firstLeadingBit(max(max(1u, WG / per), min(p.key_lanes, DOTS / per)));
    let r = lid % tp;
    let j0 = lid / tp;
    let pk0 = lo + a + j0;
    let slot_0 = slot_after(slot0, j0);
    // Whether a thread's part of a key is at most 8 vec4s, loaded at once (key_part). Then
    // the key of the thread's first position, when older than the new one, loads before the
    // barrier, together with the query (one wait on memory, not two); the new key is not in
    // its ring slot yet.
    let part8 = 8u * tp >= hd4;
    var kr: array<vec4<f32>, 8>;
    var held0 = pk0;
    if (part8 && j0 < n && pk0 != pos_q) {
        held0 = pos_ring[slot_0];
        kr = key_part(slot_0 * dim4 + h * hd4, r, tp, hd4);
    }

    // weighted values: column c of position lanes g, g + groups, ...; likewise the values of
    // a lane's positions, when at most 8, load before the barrier (but the new one's)
    let groups = WG / hd4;
    let c = lid % hd4;
    let g = lid / hd4;
    let early_v = 8u * groups >= n;
    var vr: array<vec4<f32>, 8>;
    if (early_v && g < groups) {
        for (var i = 0u; i < 8u; i++) {
            let j = min(g + i * groups, n - 1u);
            let slot = slot_after(slot0, j);
            if (lo + a + j != pos_q) {
                vr[i] = v_at(slot * dim4 + h * hd4 + c);
            }
        }
    }

    if (lid < hd4) {
        let col = h * hd4 + lid;
        qs[lid] = rotate(qkv[col], 2u * lid, pos_q);
        if (has_new) {
            push_kv(slot_q * dim4 + col, rotate(qkv[dim4 + col], 2u * lid, pos_q), qkv[2u * dim4 + col]);
            if (h == 0u && lid == 0u) {
                pos_ring[slot_q] = pos_q;
            }
        }
    }
    // the new key and value are read back from the rings by this workgroup only
    storageBarrier();
    workgroupBarrier();

    // partial dots; a position the slot no longer holds is marked by NEG in its first part
    // (the new one is held: its stamp is head 0's to write)
    for (var j = j0; j < n; j += WG / tp) {
        let pk = lo + a + j;
        var d = 0.0;
        var held = held0;
        if (part8 && j == j0 && pk != pos_q) {
            d = part_dot(kr, r, tp, hd4);
        } else {
            let slot = slot_after(slot0, j);
            held = pk;
            if (pk != pos_q) {
                held = pos_ring[slot];
            }
            let ko = slot * dim4 + h * hd4;
            if (part8) {
                d = part_dot(key_part(ko, r, tp, hd4), r, tp, hd4);
            } else {
                for (var e = r; e < hd4; e += tp) {
                    d += dot(qs[e], k_at(ko + e));
                }
            }
        }
        if (held != pk) {
            d = select(0.0, NEG, r == 0u);
        }
        dots[j * tp + r] = d;
    }
    workgroupBarrier();
    // scores, four to a vec4, NEG past n
    let n4 = (n + 3u) / 4u;
    for (var j = lid; j < 4u * n4; j += WG) {
        var t = 0.0;
        if (j < n) {
            for (var i = 0u; i < tp; i++) {
                t += dots[j * tp + i];
            }
        }
        sc[j / 4u][j % 4u] = select(t * p.scale, NEG, j >= n || t < -1.0e38);
    }
    workgroupBarrier();

    var m = NEG;
    for (var i = 0u; i < n4; i++) {
        let s4 = sc[i];
        m = max(m, max(max(s4.x, s4.y), max(s4.z, s4.w)));
    }
    var acc = vec4<f32>(0.0);
    var l = 0.0;
    if (g < groups && early_v) {
        for (var i = 0u; i < 8u; i++) {
            let j = g + i * groups;
            if (j < n) {
                let w = weight_at(j, m);
                var v = vr[i];
                if (lo + a + j == pos_q) {
                    v = v_at(slot_q * dim4 + h * hd4 + c);
                }
                acc += w * v;
                l += w;
            }
        }
    } else if (g < groups) {
        // four positions of the lane at a time: their value loads go out together
        var j = g;
        for (; j + 3u * groups < n; j += 4u * groups) {
            var v: array<vec4<f32>, 4>;
            var w: vec4<f32>;
            for (var i = 0u; i < 4u; i++) {
                let ji = j + i * groups;
                let slot = slot_after(slot0, ji);
                v[i] = v_at(slot * dim4 + h * hd4 + c);
                w[i] = weight_at(ji, m);
            }
            acc += (w.x * v[0] + w.y * v[1]) + (w.z * v[2] + w.w * v[3]);
            l += (w.x + w.y) + (w.z + w.w);
        }
        for (; j < n; j += groups) {
            let w = weight_at(j, m);
            let slot = slot_after(slot0, j);
            acc += w * v_at(slot * dim4 + h * hd4 + c);
            l += w;
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
        if (used == 1u) {
            out[h * hd4 + lid] = o / lt;
        } else {
            let base = (h * splits + s) * (hd4 + 1u);
            part[base + lid] = o;
            if (lid == 0u) {
                part[base + hd4] = vec4<f32>(m, lt, 0.0, 0.0);
            }
        }
    }
}
