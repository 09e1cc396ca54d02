// Draw one token from logits on the GPU, one workgroup of 256 threads (moshi.utils.sampling
// `sample_token`): greedy argmax when p.greedy == 1, else a softmax sample at temperature
// 1 / p.inv_temp restricted to the top p.top_k logits, by the Gumbel-max trick.
//
//   logits : [..] f32, this draw's n values from p.offset   tokens : [slots] i32
//
// The rule, exactly (the CPU oracle of tests/sampling.rs follows it):
// - key(l): the order-preserving u32 of the f32 bits (sign set: ~bits, else bits | 2^31);
// - threshold: when greedy == 0 and 0 < top_k < n, the top_k-th largest key (counted with
//   repeats), else none; a logit takes part when key(l) >= threshold;
// - value: greedy: l; else l * inv_temp - log(-log(u)), u = (f32(h >> 8) + 0.5) / 2^24 and
//   h = pcg(pcg(pcg(pcg(seed) ^ frame.pos) ^ stream) ^ i) (a seeded session replays exactly);
// - the token is the index of the largest value as f32 (-0 == +0), ties to the lower index
//   (torch.argmax); -1 when n == 0. NaN logits give an unspecified token.
//
// How: the threshold is found without re-reading every logit per radix digit. Each thread
// keeps the largest key of its logits; the top_k-th largest of these 256 maxima (low 8 bits
// dropped) is a lower bound t0 of the threshold (top_k threads hold a logit >= t0), and the
// largest bounds every key above, so only keys in [t0, kmax] count and the radix digits
// start below the bits t0 and kmax share. With n <= 2048 the keys are held in workgroup
// memory (one read of the logits); larger n gathers the keys >= t0 with their indices (a
// second read, only by threads whose maximum is >= t0): up to 256 of them are ranked
// directly, up to 1024 radix-selected in workgroup memory; more (or top_k > 256) fall back
// to the radix select over the logits in memory. The Gumbel values are computed for the
// logits at or above the threshold only, and the argmax is a two-level reduction.

// after frame.wgsl (Frame) and sample_common.wgsl (Params, the bindings, add_embedding, key, pcg)

// logits held whole in workgroup memory up to this n
const HELD: u32 = 2048u;
// keys >= t0 gathered (key, index) from a larger n
const GATHERED: u32 = 1024u;
const NONE: u32 = 0xffffffffu;

// n <= HELD: the keys at their indices; else keys in [0, GATHERED), indices above
var<workgroup> cand: array<u32, 2048>;
// per-thread maxima (low 8 bits: 255 - thread), four per entry
var<workgroup> maxima: array<vec4<u32>, 64>;
// two 256-bin histograms, used in turn by the radix rounds
var<workgroup> hist: array<atomic<u32>, 512>;
var<workgroup> group_sum: array<u32, 16>;
var<workgroup> found: vec2<u32>;
// (t0, kmax)
var<workgroup> bounds: vec2<u32>;
var<workgroup> gathered: atomic<u32>;
var<workgroup> shared_u: u32;
var<workgroup> best_k: array<u32, 256>;
var<workgroup> best_i: array<u32, 256>;

fn key4(v: vec4<f32>) -> vec4<u32> {
    let b = bitcast<vec4<u32>>(v);
    return select(b | vec4<u32>(0x80000000u), ~b, (b & vec4<u32>(0x80000000u)) != vec4<u32>(0u));
}

// The f32 of a key (key's inverse).
fn value(k: u32) -> f32 {
    return bitcast<f32>(select(~k, k & 0x7fffffffu, (k & 0x80000000u) != 0u));
}

// The argmax's order: key with -0 taken as +0 (the f32 comparison's tie).
fn order(v: f32) -> u32 {
    let k = key(v);
    return select(k, 0x80000000u, k == 0x7fffffffu);
}

// l * inv_temp + Gumbel noise; h0 = pcg(pcg(pcg(seed) ^ pos) ^ stream), u in (0, 1) with 24
// random bits from h0 and i.
fn perturbed(l: f32, i: u32, h0: u32) -> f32 {
    let u = (f32(pcg(h0 ^ i) >> 8u) + 0.5) / 16777216.0;
    return l * p.inv_temp - log(-log(u));
}

// Logits i, i + 256, i + 512, i + 768 (indices past n read a valid one; valid4 masks them).
fn load4(i: u32) -> vec4<f32> {
    let last = p.offset + max(p.n, 1u) - 1u;
    let o = p.offset + i;
    return vec4<f32>(logits[min(o, last)], logits[min(o + 256u, last)], logits[min(o + 512u, last)], logits[min(o + 768u, last)]);
}

fn valid4(i: u32) -> vec4<bool> {
    return vec4<u32>(i, i + 256u, i + 512u, i + 768u) < vec4<u32>(p.n);
}

fn max4(v: vec4<u32>) -> u32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

// (order, index) a before b: larger order, then lower index; (0, NONE) is no candidate.
fn better(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.x > b.x || (a.x == b.x && a.y < b.y);
}

// The running greedy best with logit l at index i (when i < n).
fn consider(best: vec2<u32>, l: f32, i: u32) -> vec2<u32> {
    let c = vec2<u32>(order(l), i);
    return select(best, c, i < p.n && better(c, best));
}

fn consider4(best: vec2<u32>, l: vec4<f32>, i: u32) -> vec2<u32> {
    var b = consider(best, l.x, i);
    b = consider(b, l.y, i + 256u);
    b = consider(b, l.z, i + 512u);
    return consider(b, l.w, i + 768u);
}

// This thread's best over the logits it reads (i = lid + 256 j), in increasing index: greedy
// 16 loads at a time, else one at a time (the Gumbel values' code once).
fn scan_logits(lid: u32, thr: u32, h0: u32) -> vec2<u32> {
    var best = vec2<u32>(0u, NONE);
    if (p.greedy != 0u) {
        for (var i = lid; i < p.n; i += 4096u) {
            let a = load4(i);
            let b = load4(i + 1024u);
            let c = load4(i + 2048u);
            let d = load4(i + 3072u);
            best = consider4(best, a, i);
            best = consider4(best, b, i + 1024u);
            best = consider4(best, c, i + 2048u);
            best = consider4(best, d, i + 3072u);
        }
    } else {
        for (var i = lid; i < p.n; i += 256u) {
            let l = logits[p.offset + i];
            if (key(l) >= thr) {
                let c = vec2<u32>(order(perturbed(l, i, h0)), i);
                best = select(best, c, better(c, best));
            }
        }
    }
    return best;
}

// The held key kv at index i (>= thr) against the running best.
fn consider_key(best: vec2<u32>, kv: u32, i: u32, h0: u32) -> vec2<u32> {
    let c = vec2<u32>(order(perturbed(value(kv), i, h0)), i);
    return select(best, c, better(c, best));
}

// the token drawn, for every thread
var<workgroup> drawn: u32;

// The workgroup's best of every thread's `best`, written to tokens[p.slot] (and its
// embedding row added, add_embedding).
fn finish(lid: u32, best: vec2<u32>) {
    best_k[lid] = best.x;
    best_i[lid] = best.y;
    workgroupBarrier();
    if (lid < 16u) {
        var b = best;
        for (var j = 1u; j < 16u; j++) {
            let o = vec2<u32>(best_k[lid + 16u * j], best_i[lid + 16u * j]);
            if (better(o, b)) {
                b = o;
            }
        }
        best_k[lid] = b.x;
        best_i[lid] = b.y;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var b = vec2<u32>(best_k[0], best_i[0]);
        for (var j = 1u; j < 16u; j++) {
            let o = vec2<u32>(best_k[j], best_i[j]);
            if (better(o, b)) {
                b = o;
            }
        }
        tokens[p.slot] = i32(b.y);
        drawn = b.y;
    }
    add_embedding(lid, workgroupUniformLoad(&drawn));
}

// (t0, kmax) from this thread's largest key m: t0 the top_k-th largest of the maxima with
// their low 8 bits cleared (0 when top_k > 256), kmax >= every key. Uniform.
fn bounds_of(lid: u32, m: u32) -> vec2<u32> {
    let mine = (m & 0xffffff00u) | (255u - lid);
    maxima[lid >> 2u][lid & 3u] = mine;
    workgroupBarrier();
    var above = vec4<u32>(0u);
    for (var j = 0u; j < 64u; j++) {
        above += select(vec4<u32>(0u), vec4<u32>(1u), maxima[j] > vec4<u32>(mine));
    }
    let pos = above.x + above.y + above.z + above.w;
    if (pos + 1u == p.top_k) {
        bounds.x = mine & 0xffffff00u;
    }
    if (pos == 0u) {
        bounds.y = mine | 0xffu;
    }
    return workgroupUniformLoad(&bounds);
}

// After the histogram of round r: the digit holding the rank-th largest (1-based) key among
// those counted, and how many counted keys have a larger digit. Clears the other histogram.
fn pick_digit(lid: u32, r: u32, rank: u32) -> vec2<u32> {
    let h = (r & 1u) * 256u;
    workgroupBarrier();
    if (lid < 16u) {
        var s = 0u;
        for (var j = 0u; j < 16u; j++) {
            s += atomicLoad(&hist[h + 16u * lid + j]);
        }
        group_sum[lid] = s;
    }
    workgroupBarrier();
    let g = lid >> 4u;
    var above = 0u;
    for (var j = 0u; j < 16u; j++) {
        above += select(0u, group_sum[j], j > g);
        let d = 16u * g + j;
        above += select(0u, atomicLoad(&hist[h + d]), d > lid);
    }
    let own = atomicLoad(&hist[h + lid]);
    if (above < rank && above + own >= rank) {
        found = vec2<u32>(lid, above);
    }
    atomicStore(&hist[(h ^ 256u) + lid], 0u);
    workgroupBarrier();
    return found;
}

fn low_bits(n: u32) -> u32 {
    return select((1u << n) - 1u, 0xffffffffu, n >= 32u);
}

// Radix rounds over keys in [t0, kmax] = b: the bits fixed so far (`prefix` under `mask`)
// and the rank left to find among the keys with that prefix. The digit's bits (`shift`,
// 8 wide at most) come from b alone, so the rounds' count is uniform.
struct Select {
    prefix: u32,
    mask: u32,
    rank: u32,
}

// The bits below which t0 and kmax differ (8 at least: t0's low byte is 0, kmax's 0xff).
fn varying_bits(b: vec2<u32>) -> u32 {
    return 32u - countLeadingZeros(b.x ^ b.y);
}

fn first_select(b: vec2<u32>) -> Select {
    let top = varying_bits(b);
    return Select(b.x & ~low_bits(top), ~low_bits(top), p.top_k);
}

fn count_key(s: Select, t0: u32, kv: u32, shift: u32, r: u32) {
    if (kv >= t0 && (kv & s.mask) == s.prefix) {
        atomicAdd(&hist[(r & 1u) * 256u + ((kv >> shift) & 0xffu)], 1u);
    }
}

// The selection after picking digit f (x: the digit, y: keys above it) at `shift`, `width`.
fn next_select(s: Select, f: vec2<u32>, shift: u32, width: u32) -> Select {
    return Select(s.prefix | (f.x << shift), s.mask | (low_bits(width) << shift), s.rank - f.y);
}

// The threshold by radix rounds (uniform b, m, from_logits) over the m keys held in cand,
// or over the logits in memory.
fn select_threshold(lid: u32, b: vec2<u32>, m: u32, from_logits: bool) -> u32 {
    var s = first_select(b);
    var top = varying_bits(b);
    var r = 0u;
    loop {
        if (top == 0u) {
            break;
        }
        let width = min(8u, top);
        let shift = top - width;
        if (from_logits) {
            for (var i = lid; i < p.n; i += 1024u) {
                let k = select(vec4<u32>(0u), key4(load4(i)), valid4(i));
                count_key(s, b.x, k.x, shift, r);
                count_key(s, b.x, k.y, shift, r);
                count_key(s, b.x, k.z, shift, r);
                count_key(s, b.x, k.w, shift, r);
            }
        } else {
            for (var j = lid; j < m; j += 256u) {
                count_key(s, b.x, cand[j], shift, r);
            }
        }
        s = next_select(s, pick_digit(lid, r, s.rank), shift, width);
        top = shift;
        r += 1u;
    }
    return s.prefix;
}

fn gather(kv: u32, i: u32, t0: u32, ok: bool) {
    if (ok && kv >= t0) {
        let at = atomicAdd(&gathered, 1u);
        if (at < GATHERED) {
            cand[at] = kv;
            cand[GATHERED + at] = i;
        }
    }
}

fn gather4(l: vec4<f32>, i: u32, t0: u32) {
    let k = key4(l);
    let v = valid4(i);
    gather(k.x, i, t0, v.x);
    gather(k.y, i + 256u, t0, v.y);
    gather(k.z, i + 512u, t0, v.z);
    gather(k.w, i + 768u, t0, v.w);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let h0 = pcg(pcg(pcg(p.seed) ^ frame.pos) ^ p.stream);
    let n = p.n;
    let k = p.top_k;
    let direct = n <= HELD;
    atomicStore(&hist[lid], 0u);
    if (lid == 0u) {
        bounds = vec2<u32>(0u, 0u);
        atomicStore(&gathered, 0u);
    }
    // the threshold (0: every logit takes part) and the c candidates held in cand
    var thr = 0u;
    var c = 0u;
    var held = false;
    if (p.greedy == 0u && k > 0u && k < n) {
        var m = 0u;
        if (direct) {
            for (var j = 0u; j < HELD; j += 1024u) {
                let i = lid + j;
                let kv = select(vec4<u32>(0u), key4(load4(i)), valid4(i));
                cand[i] = kv.x;
                cand[i + 256u] = kv.y;
                cand[i + 512u] = kv.z;
                cand[i + 768u] = kv.w;
                m = max(m, max4(kv));
            }
        } else {
            for (var i = lid; i < n; i += 4096u) {
                let a = select(vec4<u32>(0u), key4(load4(i)), valid4(i));
                let b = select(vec4<u32>(0u), key4(load4(i + 1024u)), valid4(i + 1024u));
                let c = select(vec4<u32>(0u), key4(load4(i + 2048u)), valid4(i + 2048u));
                let d = select(vec4<u32>(0u), key4(load4(i + 3072u)), valid4(i + 3072u));
                m = max(m, max(max(max4(a), max4(b)), max(max4(c), max4(d))));
            }
        }
        let b = bounds_of(lid, m);
        if (!direct && k <= 256u && m >= b.x) {
            for (var i = lid; i < n; i += 4096u) {
                let l0 = load4(i);
                let l1 = load4(i + 1024u);
                let l2 = load4(i + 2048u);
                let l3 = load4(i + 3072u);
                gather4(l0, i, b.x);
                gather4(l1, i + 1024u, b.x);
                gather4(l2, i + 2048u, b.x);
                gather4(l3, i + 3072u, b.x);
            }
        }
        workgroupBarrier();
        if (lid == 0u) {
            shared_u = select(atomicLoad(&gathered), n, direct);
        }
        c = workgroupUniformLoad(&shared_u);
        held = direct || (k <= 256u && c <= GATHERED);
        if (!direct && held && c <= 256u) {
            // rank the gathered keys directly (c >= top_k: t0 is a lower bound)
            let kv = cand[min(lid, GATHERED - 1u)];
            var pos = 0u;
            for (var j = 0u; j < c; j++) {
                let o = cand[j];
                pos += select(0u, 1u, o > kv || (o == kv && j < lid));
            }
            workgroupBarrier();
            if (lid < c && pos + 1u == k) {
                shared_u = kv;
            }
            thr = workgroupUniformLoad(&shared_u);
        } else {
            thr = select_threshold(lid, b, c, !held);
        }
    }
    var best = vec2<u32>(0u, NONE);
    if (held) {
        for (var j = lid; j < c; j += 256u) {
            let kv = cand[j];
            if (kv >= thr) {
                var i = j;
                if (!direct) {
                    i = cand[GATHERED + j];
                }
                best = consider_key(best, kv, i, h0);
            }
        }
    } else {
        best = scan_logits(lid, thr, h0);
    }
    finish(lid, best);
}
