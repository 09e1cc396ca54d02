//! The GPU sampler (`shaders/sample.wgsl`, and `shaders/sample_radix8.wgsl` up to 4096
//! logits): its draws follow softmax-with-top-k
//! probabilities computed on the CPU (a chi-square bound), never leave the top k, and a
//! seeded LM session replays token for token.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::rc::Rc;

use common::moshi::*;
use inferencelayer::gpu::{FrameParams, PlanBuilder, Readback, KERNELS};
use inferencelayer::moshi::{Lm, LmGen, LmWeights, Sampling};
use inferencelayer::GpuContext;

#[test]
fn gpu_draws_follow_softmax_top_k() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("adapter");
        // 64 logits with a spread like an LM head's; top 10 at temperature 0.8
        let n = 64usize;
        let logits: Vec<f32> = (0..n).map(|i| ((i * 37 % 64) as f32 / 16.0).sin() * 2.0 + (i % 7) as f32 * 0.1).collect();
        let (temperature, top_k) = (0.8f32, 10usize);
        let mut sorted = logits.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let kth = sorted[top_k - 1];
        let z: f64 = logits.iter().filter(|&&l| l >= kth).map(|&l| ((l / temperature) as f64).exp()).sum();
        let probs: Vec<f64> = logits.iter().map(|&l| if l >= kth { ((l / temperature) as f64).exp() / z } else { 0.0 }).collect();

        let draws_per_submit = 1000;
        let submits = 24;
        let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
        let logits_buf = ctx.storage_f32("logits", &logits).unwrap();
        let tokens = ctx.zeros("tokens", draws_per_submit).unwrap();
        let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
        for s in 0..draws_per_submit {
            b.sample("draw", (&logits_buf, 0, n), &tokens, s, (temperature, top_k), 1234, s as u32).unwrap();
        }
        let (plan, _, _) = b.finish();
        let rb = Readback::new(&ctx, (4 * draws_per_submit) as u64);
        let mut counts = vec![0usize; n];
        for f in 0..submits {
            ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&FrameParams { pos: f as u32, ..Default::default() }));
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                plan.record(&mut pass);
            }
            rb.copy(&mut enc, &tokens);
            ctx.queue.submit([enc.finish()]);
            let got: Vec<i32> = bytemuck::pod_collect_to_vec(&rb.read(&ctx).await.unwrap());
            for t in got {
                counts[t as usize] += 1;
            }
        }
        let total = (draws_per_submit * submits) as f64;
        let outside: usize = counts.iter().zip(&probs).filter(|(_, &p)| p == 0.0).map(|(c, _)| c).sum();
        assert_eq!(outside, 0, "draws outside the top {top_k}");
        let chi2: f64 = counts
            .iter()
            .zip(&probs)
            .filter(|(_, &p)| p > 0.0)
            .map(|(&c, &p)| (c as f64 - total * p).powi(2) / (total * p))
            .sum();
        eprintln!("chi-square over the top {top_k} ({} draws): {chi2:.2}", total);
        // 9 degrees of freedom: P(chi2 > 27.88) = 0.001
        assert!(chi2 < 27.88, "draws do not follow softmax-top-k: chi-square {chi2:.2}");
    });
}

#[test]
fn a_seeded_session_replays_token_for_token() {
    pollster::block_on(async {
        let g = lm_golden();
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        let w = LmWeights::from_safetensors(&g.config, &lm_checkpoint_bytes(&g.config)).unwrap().upload(&ctx).unwrap();
        let run = |seed: u32| {
            let ctx = ctx.clone();
            let w = &w;
            let g = &g;
            async move {
                let mut lm = Lm::new(ctx, w, Sampling::moshi(seed)).await.unwrap();
                let mut gen = LmGen::new(&g.config);
                let mut out = Vec::new();
                for codes in g.user_codes.iter().take(16) {
                    let input = gen.input(codes).unwrap();
                    out.push(lm.step(&input).await.unwrap());
                    gen.output(out.last().unwrap());
                }
                out
            }
        };
        let a = run(7).await;
        let b = run(7).await;
        let c = run(8).await;
        assert_eq!(a, b, "the same seed must replay bit for bit");
        assert_ne!(a, c, "another seed should give another session");
        let greedy = {
            let mut lm = Lm::new(ctx.clone(), &w, Sampling::greedy()).await.unwrap();
            let mut gen = LmGen::new(&g.config);
            let mut out = Vec::new();
            for codes in g.user_codes.iter().take(16) {
                let input = gen.input(codes).unwrap();
                out.push(lm.step(&input).await.unwrap());
                gen.output(out.last().unwrap());
            }
            out
        };
        assert_ne!(a, greedy, "sampling at temperature 0.7/0.8 should differ from greedy");
    });
}

/// The sampler's rule on the CPU, from `shaders/sample.wgsl`'s header: key, threshold, hash,
/// Gumbel value, ties to the lower index.
mod rule {
    pub fn key(v: f32) -> u32 {
        let b = v.to_bits();
        if b & 0x8000_0000 != 0 {
            !b
        } else {
            b | 0x8000_0000
        }
    }

    pub fn pcg(v: u32) -> u32 {
        let s = v.wrapping_mul(747796405).wrapping_add(2891336453);
        let w = ((s >> ((s >> 28) + 4)) ^ s).wrapping_mul(277803737);
        (w >> 22) ^ w
    }

    /// The token the rule draws, and every index whose value lies within `tol` of the
    /// largest (the GPU's `log` is not the CPU's: a draw that close may go either way).
    pub fn draw(l: &[f32], top_k: usize, temperature: f32, seed: u32, pos: u32, stream: u32, tol: f32) -> (i32, Vec<i32>) {
        let n = l.len();
        let greedy = temperature <= 0.0;
        let inv_temp = if greedy { 0.0 } else { 1.0 / temperature };
        let threshold = if !greedy && top_k > 0 && top_k < n {
            let mut keys: Vec<u32> = l.iter().map(|&v| key(v)).collect();
            keys.sort_unstable_by(|a, b| b.cmp(a));
            keys[top_k - 1]
        } else {
            0
        };
        let h0 = pcg(pcg(pcg(seed) ^ pos) ^ stream);
        let vals: Vec<(usize, f32)> = (0..n)
            .filter(|&i| key(l[i]) >= threshold)
            .map(|i| {
                if greedy {
                    (i, l[i])
                } else {
                    let u = ((pcg(h0 ^ i as u32) >> 8) as f32 + 0.5) / 16777216.0;
                    (i, l[i] * inv_temp - (-u.ln()).ln())
                }
            })
            .collect();
        let mut best: Option<(usize, f32)> = None;
        for &(i, v) in &vals {
            // f32 comparison: -0 == +0; the first of equal values stays
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((i, v));
            }
        }
        let Some((bi, bv)) = best else { return (-1, vec![-1]) };
        let close = if greedy { vec![bi as i32] } else { vals.iter().filter(|(_, v)| *v >= bv - tol).map(|&(i, _)| i as i32).collect() };
        (bi as i32, close)
    }
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 32) as u32
    }
    fn unit(&mut self) -> f32 {
        ((self.next() >> 8) as f32 + 0.5) / (1u32 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        let (a, b) = (self.unit(), self.unit());
        (-2.0 * a.ln()).sqrt() * (std::f32::consts::TAU * b).cos()
    }
}

/// Logit vectors of `n` values: an LM head's spread, with masked (-inf) tokens, values in
/// steps of 0.5 (ties everywhere, at the threshold too), all equal, and signed zeros.
fn logit_vector(kind: &str, n: usize, rng: &mut Lcg) -> Vec<f32> {
    (0..n)
        .map(|_| match kind {
            "lm" => rng.normal() * 3.0 + if rng.next() % 97 == 0 { 8.0 } else { 0.0 },
            "masked" => {
                if rng.next() % 10 == 0 {
                    f32::NEG_INFINITY
                } else {
                    rng.normal() * 2.0
                }
            }
            "ties" => (rng.next() % 17) as f32 * 0.5 - 4.0,
            "flat" => 1.5,
            "zeros" => [0.0, -0.0, -1.0][rng.next() as usize % 3],
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn gpu_draws_follow_the_rule_exactly() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("adapter");
        let mut rng = Lcg(0x5a3c_91e7);
        // (n, distribution, draws as (top_k, temperature))
        type Draws = Vec<(usize, f32)>;
        let mut cases: Vec<(usize, &str, Draws)> = Vec::new();
        let moshi = vec![(25, 0.7), (250, 0.8), (1, 0.7), (300, 0.8), (0, 0.7), (0, 0.0)];
        for kind in ["lm", "masked", "ties", "flat"] {
            for n in [32000usize, 2048] {
                let mut d = moshi.clone();
                d.extend([(n - 1, 0.8), (n, 0.8), (n + 7, 0.8)]);
                cases.push((n, kind, d));
            }
        }
        for n in [2049usize, 4099, 1001, 257, 255, 5, 1] {
            let mut d = vec![(1, 0.7), (n.div_ceil(3), 0.8), (n, 0.8), (0, 0.0)];
            if n > 25 {
                d.extend([(25, 0.7), (250, 0.8)]);
            }
            cases.push((n, "lm", d.clone()));
            cases.push((n, "ties", d));
        }
        // near-uniform over the top k: a threshold one logit off changes many draws
        for kind in ["lm", "masked"] {
            for n in [32000usize, 4099, 2048] {
                cases.push((n, kind, vec![(2, 50.0), (3, 50.0), (25, 50.0), (250, 50.0)]));
            }
        }
        cases.push((32000, "zeros", vec![(0, 0.0), (25, 0.7), (5000, 0.8)]));
        cases.push((2048, "zeros", vec![(0, 0.0), (250, 0.8)]));
        cases.push((0, "lm", vec![(0, 0.0), (1, 0.8)]));

        // every vector in one buffer at odd offsets
        let mut all: Vec<f32> = Vec::new();
        let mut vectors = Vec::new();
        for (n, kind, _) in &cases {
            all.push(0.0);
            vectors.push((all.len(), logit_vector(kind, *n, &mut rng)));
            all.extend_from_slice(&vectors.last().unwrap().1);
        }
        let seeds_per_draw = 3u32;
        let mut draws = Vec::new(); // (case, top_k, temperature, seed, stream)
        for (c, (_, _, d)) in cases.iter().enumerate() {
            for &(k, t) in d {
                for s in 0..if t >= 10.0 { 4 * seeds_per_draw } else { seeds_per_draw } {
                    draws.push((c, k, t, 1000 + 7 * draws.len() as u32, s * 3 + 1));
                }
            }
        }
        let logits = ctx.storage_f32("logits", &all).unwrap();
        let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
        let tokens = ctx.zeros("tokens", draws.len()).unwrap();
        let old_tokens = ctx.zeros("other tokens", draws.len()).unwrap();
        let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
        for (slot, &(c, k, t, seed, stream)) in draws.iter().enumerate() {
            b.sample("draw", (&logits, vectors[c].0, cases[c].0), &tokens, slot, (t, k), seed, stream).unwrap();
        }
        let (plan, _, _) = b.finish();
        // the kernel the plan does not use for the draw (the plans take the four-round radix
        // kernel up to 4096 logits, sample.wgsl above), for a token-for-token comparison
        let raw = |name: &str, src: &str| {
            let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(src.into()) });
            ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(name),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let source = |name: &str| KERNELS.iter().find(|k| k.name == name).expect("a kernel of the table").source;
        let radix8 = raw("sample_radix8", source("sample_radix8"));
        let bounded = raw("sample", source("sample"));
        let other = |n: usize| if n <= 4096 { &bounded } else { &radix8 };
        let (unused, unused_out) = (ctx.zeros("unused", 4).unwrap(), ctx.zeros("unused out", 4).unwrap());
        let groups: Vec<wgpu::BindGroup> = draws
            .iter()
            .enumerate()
            .map(|(slot, &(c, k, t, seed, stream))| {
                let inv_temp = if t <= 0.0 { 0.0 } else { 1.0 / t };
                // (no embedding added: emb_dim 0)
                let words = [cases[c].0 as u32, k as u32, vectors[c].0 as u32, slot as u32, (t <= 0.0) as u32, inv_temp.to_bits(), seed, stream, 0, 0, 0, 0];
                let params = ctx.uniform("other params", bytemuck::cast_slice(&words));
                let entries = [&logits, &old_tokens, &params, &frame, &unused, &unused_out];
                let entries: Vec<wgpu::BindGroupEntry> =
                    entries.iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() }).collect();
                let layout = other(cases[c].0).get_bind_group_layout(0);
                ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries })
            })
            .collect();

        let rb = Readback::new(&ctx, (4 * draws.len()) as u64);
        let rb_old = Readback::new(&ctx, (4 * draws.len()) as u64);
        let (mut near, mut checked) = (0usize, 0usize);
        for pos in [0u32, 12345] {
            ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&FrameParams { pos, ..Default::default() }));
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                plan.record(&mut pass);
                for (g, &(c, ..)) in groups.iter().zip(&draws) {
                    pass.set_pipeline(other(cases[c].0));
                    pass.set_bind_group(0, g, &[]);
                    pass.dispatch_workgroups(1, 1, 1);
                }
            }
            rb.copy(&mut enc, &tokens);
            rb_old.copy(&mut enc, &old_tokens);
            ctx.queue.submit([enc.finish()]);
            let got: Vec<i32> = bytemuck::pod_collect_to_vec(&rb.read(&ctx).await.unwrap());
            let old: Vec<i32> = bytemuck::pod_collect_to_vec(&rb_old.read(&ctx).await.unwrap());
            for (slot, &(c, k, t, seed, stream)) in draws.iter().enumerate() {
                let (n, kind, _) = &cases[c];
                let what = format!("n {n} {kind} top_k {k} temperature {t} seed {seed} stream {stream} pos {pos}");
                assert_eq!(got[slot], old[slot], "{what}: the other kernel drew {} and the plan's {}", old[slot], got[slot]);
                let (want, close) = rule::draw(&vectors[c].1, k, t, seed, pos, stream, 1e-4);
                if close.len() > 1 {
                    near += 1;
                    assert!(close.contains(&got[slot]), "{what}: drew {}, not one of the near-equal {close:?}", got[slot]);
                } else {
                    assert_eq!(got[slot], want, "{what}");
                }
                checked += 1;
            }
        }
        eprintln!("{checked} draws checked against the rule ({near} within 1e-4 of another value) and the other kernel");
        assert!(near * 100 <= checked, "{near} of {checked} draws too close to call");
    });
}

/// `sample_then_embed` adds the drawn token's row of the table into the output row, on both
/// kernels (the radix one up to 4096 logits, the bounded one above); the drawn tokens are
/// the greedy argmaxes, a plain `sample` beside them included.
#[test]
fn a_draw_adds_its_tokens_embedding_row() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("adapter");
        let (rows, dim) = (9usize, 300usize);
        let table_rows: Vec<f32> = (0..rows * dim).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 250.0).collect();
        let table = inferencelayer::gpu::SplitTable::zeros(&ctx, "table", rows, dim).unwrap();
        table.write_rows(&ctx.queue, 0, &table_rows).unwrap();
        let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
        let start: Vec<f32> = (0..dim).map(|j| j as f32 * 0.01).collect();
        // (n, argmax): below and above the radix kernel's 4096
        let cases = [(2048usize, 5usize), (5000, 3)];
        let mut outs = Vec::new();
        let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
        let tokens = ctx.zeros("tokens", 3).unwrap();
        let mut keep = Vec::new();
        for (slot, &(n, arg)) in cases.iter().enumerate() {
            let logits: Vec<f32> = (0..n).map(|i| if i == arg { 4.0 } else { (i % 13) as f32 * 0.1 }).collect();
            let lb = ctx.storage_f32("logits", &logits).unwrap();
            let out = ctx.storage_f32("out", &start).unwrap();
            b.sample_then_embed("draw", (&lb, 0, n), &tokens, slot, (0.0, 0), 1, 1, Some((&table, &out))).unwrap();
            outs.push(out);
            keep.push(lb);
        }
        b.sample("plain draw", (&keep[0], 0, cases[0].0), &tokens, 2, (0.0, 0), 1, 1).unwrap();
        let (plan, _, _) = b.finish();
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            plan.record(&mut pass);
        }
        ctx.queue.submit([enc.finish()]);
        let got: Vec<i32> = ctx.read_f32(&tokens, 3).await.unwrap().iter().map(|f| f.to_bits() as i32).collect();
        assert_eq!(got, vec![5, 3, 5], "greedy tokens");
        for (out, &(_, arg)) in outs.iter().zip(&cases) {
            let row = ctx.read_f32(out, dim).await.unwrap();
            let want: Vec<f32> = (0..dim).map(|j| start[j] + table_rows[arg * dim + j]).collect();
            assert_eq!(row, want, "row {arg} added");
        }
    });
}
