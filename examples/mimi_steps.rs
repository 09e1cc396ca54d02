//! Each dispatch of Mimi's encode and decode plans timed on its own: per step of the plan
//! (in plan order) its label and GPU time, the median of `REPS` profiles
//! (`Plan::profile`: every dispatch in a pass of its own between two timestamps, which adds
//! a few microseconds to each), after a few frames encoded and decoded so that the state
//! is that of a running codec. `bench --profile` sums the same times by kind of step; this
//! shows which layer of a kind takes them.
//!
//! `cargo run --release --example mimi_steps -- CHECKPOINT [CONFIG]` (a Mimi checkpoint, as
//! `inferencelayer synthetic-checkpoint` writes one; CONFIG: its `_mimi_config` JSON, the
//! released codec's when omitted).

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod common;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    common::run_or_exit("mimi_steps", native::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::rc::Rc;

    use crate::common::{self, median};
    use inferencelayer::gpu::Plan;
    use inferencelayer::mimi::{Mimi, MimiConfig, MimiWeights};
    use inferencelayer::{bench, Error, Result};

    /// Profiles per plan; the first is dropped (warm-up), the median of the rest kept.
    const REPS: usize = 7;
    /// Frames encoded and decoded before the profiles.
    const FRAMES: usize = 8;

    fn print(name: &str, plan: &Plan, runs: &[Vec<f64>]) {
        let labels = plan.labels();
        let mut total = 0.0;
        println!("{name}: {} dispatches", labels.len());
        for (i, label) in labels.iter().enumerate() {
            let us = 1e3 * median(runs[1..].iter().map(|r| r[i]).collect());
            total += us;
            println!("  {i:>3} {label:<56}{us:>9.1} us");
        }
        println!("  {name} total {:.1} us", total);
    }

    pub async fn run() -> Result<()> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let Some(path) = args.first() else {
            return Err(Error::Input("usage: mimi_steps CHECKPOINT [CONFIG]".into()));
        };
        let config = match args.get(1) {
            Some(c) => MimiConfig::from_json(&std::fs::read_to_string(c).map_err(|e| Error::Input(format!("{c}: {e}")))?)?,
            None => MimiConfig::default(),
        };
        let bytes = std::fs::read(path).map_err(|e| Error::Input(format!("{path}: {e}")))?;
        let weights = MimiWeights::from_safetensors(&config, &bytes)?;
        drop(bytes);
        let ctx = Rc::new(common::context().await?);
        if !common::has_timestamps(&ctx) {
            return Ok(());
        }
        let mut mimi = Mimi::new(ctx.clone(), &weights).await?;
        let signal = bench::bench_signal()?;
        let fs = mimi.frame_size();
        for (i, frame) in signal.chunks_exact(fs).take(FRAMES).enumerate() {
            let codes = mimi.encode_frame(frame).await?;
            mimi.decode_frame(i, &codes).await?;
        }
        for (name, plan) in [("encode", mimi.encode_plan()), ("decode", mimi.decode_plan())] {
            let mut runs = Vec::new();
            for _ in 0..REPS {
                runs.push(plan.profile(&ctx).await?);
            }
            print(name, plan, &runs);
        }
        ctx.take_error()
    }
}
