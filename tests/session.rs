//! The session's combined submit: the LM step followed, in the same compute pass, by Mimi's
//! decode plan reading Moshi's realigned audio codes from the LM's token buffer. Its tokens
//! equal Kyutai's LMGen output and its audio equals decoding those codes separately.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::rc::Rc;

use common::moshi::*;
use inferencelayer::moshi::{LmWeights, Sampling};
use inferencelayer::session::Session;
use inferencelayer::{GpuContext, Mimi, MimiConfig, MimiWeights};

#[test]
fn lm_and_decode_in_one_submit_match_lmgen_and_a_separate_decode() {
    pollster::block_on(async {
        let g = lm_golden();
        let lm_w = LmWeights::from_safetensors(&g.config, &lm_checkpoint_bytes(&g.config)).unwrap();
        let mimi_w = MimiWeights::from_safetensors(&MimiConfig::default(), &common::checkpoint_bytes()).unwrap();
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        let mut session = Session::new(ctx.clone(), &mimi_w, &lm_w.upload(&ctx).unwrap(), Sampling::greedy()).await.unwrap();
        let mut separate = Mimi::new(ctx.clone(), &mimi_w).await.unwrap();
        let frames = 8;
        let mut rows = 0;
        for codes in g.user_codes.iter().take(frames) {
            if let Some(out) = session.step_codes(codes).await.unwrap() {
                let want = &g.tokens[rows];
                assert_eq!(out.text, want[0], "row {rows}: text token");
                let audio: Vec<i32> = out.audio_codes.iter().map(|&c| c as i32).collect();
                assert_eq!(&audio[..], &want[1..], "row {rows}: audio codes");
                let pcm = separate.decode_frame(rows, &out.audio_codes).await.unwrap();
                let diff = common::max_abs_diff(&out.pcm, &pcm);
                assert!(diff == 0.0, "row {rows}: fused decode differs from a separate decode by {diff}");
                rows += 1;
            }
        }
        assert_eq!(rows, frames - 1, "LMGen yields from the second frame on");
    });
}
