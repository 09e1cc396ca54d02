//! The GPU sampler (`shaders/sample.wgsl`): its draws follow softmax-with-top-k
//! probabilities computed on the CPU (a chi-square bound), never leave the top k, and a
//! seeded LM session replays token for token.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::rc::Rc;

use common::moshi::*;
use inferencelayer::gpu::{FrameParams, PlanBuilder, Readback};
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
            b.sample("draw", (&logits_buf, 0, n), &tokens, s, (temperature, top_k), 1234, s as u32);
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
