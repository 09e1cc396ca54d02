// LMGen's realignment on the GPU (moshi.models.lm LMGen._step): record the tokens generated
// this frame in a history ring, then gather the output frame, each stream read `delay`
// frames behind the newest: out[s] = history[(off - max_delay + delays[s]) % ct][s] with
// off = frame.pos + 1 (frames generated so far). One workgroup; streams s < p.n
// (text, then Moshi's audio codebooks).
//
//   generated : [n] i32   delays : [n] u32   history : [ct, n] i32   out : [n] i32
//
// Lets Mimi's decode plan read Moshi's audio codes in the same submit as the LM step.

struct Params {
    n: u32,
    ct: u32,
    max_delay: u32,
    _pad: u32,
}

// after frame.wgsl (Frame)
@group(0) @binding(0) var<storage, read> generated: array<i32>;
@group(0) @binding(1) var<storage, read> delays: array<u32>;
@group(0) @binding(2) var<storage, read_write> history: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<i32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> frame: Frame;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let s = lid3.x;
    let off = frame.pos + 1u;
    if (s < p.n) {
        history[(off % p.ct) * p.n + s] = generated[s];
    }
    storageBarrier();
    workgroupBarrier();
    if (s < p.n) {
        // + 2 ct keeps the row index non-negative before the output starts
        let row = (off + 2u * p.ct - p.max_delay + delays[s]) % p.ct;
        out[s] = history[row * p.n + s];
    }
}
