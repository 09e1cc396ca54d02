//! Device limits in a real browser (headless Chromium's WebGPU, SwiftShader where there is
//! no GPU): the capability check the page makes before a download (`checkRequirements`)
//! for Moshi 7B under WebGPU's defaults and under a smaller emulated binding, and the
//! reduced-geometry LM streamed and run on a context keeping to limits far below the
//! defaults (its audio embeddings in parts), held to the reference's greedy tokens.
#![cfg(target_arch = "wasm32")]

mod common;

use std::rc::Rc;

use inferencelayer::gpu::{GpuLimits, MAX_STORAGE_BINDING};
use inferencelayer::moshi::{Lm, LmGen, LmLoader, Sampling};
use inferencelayer::web::{check_requirements, emulate_limits};
use inferencelayer::weights::stream::ByteSink;
use inferencelayer::{Error, GpuContext};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

async fn check(binding: f64, buffer: f64) -> serde_json::Value {
    emulate_limits(Some(binding), Some(buffer));
    let v = check_requirements(None, None, true).await.map_err(|_| "check failed").unwrap();
    emulate_limits(None, None);
    let text: String = js_sys::JSON::stringify(&v).unwrap().into();
    serde_json::from_str(&text).unwrap()
}

#[wasm_bindgen_test]
async fn browser_capability_check_before_a_download() {
    let r = check((128 << 20) as f64, (256 << 20) as f64).await;
    console_log!("capability check, WebGPU defaults: {r}");
    assert_eq!(r["fits"], true, "{r}");
    assert_eq!(r["limits"][MAX_STORAGE_BINDING], 128 << 20);
    let lm = &r["models"][1];
    assert_eq!(lm["model"], "Moshi LM");
    assert_eq!(lm["split"].as_array().unwrap().len(), 2, "{lm}");
    assert!(lm["largestBuffer"]["bytes"].as_u64().unwrap() <= 128 << 20);

    let r = check((64 << 20) as f64, (256 << 20) as f64).await;
    console_log!("capability check, 64 MiB binding: {}", r["error"]);
    assert_eq!(r["fits"], false);
    let lm = &r["models"][1];
    assert_eq!(lm["limit"], MAX_STORAGE_BINDING);
    assert_eq!(lm["needed"], 131_072_000u64, "the text head's quants");
    assert_eq!(lm["allowed"], 64u64 << 20);
    assert!(r["error"].as_str().unwrap().contains("text_linear.weight.quants"));
}

#[wasm_bindgen_test]
async fn browser_lm_under_small_limits_splits_its_tables_and_matches_the_reference() {
    use common::moshi::*;
    let g = lm_golden();
    let bytes = lm_checkpoint_bytes(&g.config);
    // far below what a browser grants: the context keeps to them all the same
    let tiny = GpuLimits { max_storage_binding: 32 << 10, max_buffer: 32 << 10 };
    let ctx = Rc::new(GpuContext::with_limits(Some(tiny)).await.expect("WebGPU adapter"));
    match LmLoader::new(ctx, &g.config, Some(bytes.len() as u64)) {
        Err(Error::Limit { limit, needed, .. }) => assert_eq!((limit, needed), (MAX_STORAGE_BINDING, 90_112)),
        Err(e) => panic!("expected a limit, got {e}"),
        Ok(_) => panic!("expected a limit"),
    }

    let lim = GpuLimits { max_storage_binding: 96 << 10, max_buffer: 112 << 10 };
    let ctx = Rc::new(GpuContext::with_limits(Some(lim)).await.expect("WebGPU adapter"));
    assert_eq!(ctx.info.limits(), lim);
    let mut loader = LmLoader::new(ctx.clone(), &g.config, Some(bytes.len() as u64)).expect("loader");
    for chunk in bytes.chunks(40000) {
        loader.push(chunk).expect("push");
    }
    loader.finish().expect("finish");
    let gw = loader.into_weights().expect("streamed weights");
    assert_eq!(gw.emb.parts.len(), 6);
    let mut lm = Lm::new(ctx, &gw, Sampling::greedy()).await.expect("plan");
    let mut gen = LmGen::new(&g.config);
    let mut out = Vec::new();
    // the first 45 frames: the 44 rows the gate holds to the reference (SwiftShader is slow)
    for codes in g.user_codes.iter().take(45) {
        let input = gen.input(codes).unwrap();
        if let Some(row) = gen.output(&lm.step(&input).await.unwrap()) {
            out.push(row);
        }
    }
    let (leading, total) = agreement(&out, &g.tokens);
    console_log!("browser LM under {lim}: {leading} leading rows equal, {total}/{} rows equal", g.tokens.len());
    assert!(leading >= 44, "only the first {leading} rows equal the reference");
}
