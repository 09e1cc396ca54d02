//! Moshi, Kyutai's full-duplex speech LM: a temporal transformer over text and 16 audio
//! streams, and a depformer that emits Moshi's 8 audio codebooks of each 80 ms frame.
//!
//! [`config`] mirrors Kyutai's LM config keys; [`transformer`] the gated RMSNorm layers
//! with Q8_0 linears; [`lm`] the model as a GPU plan and as the CPU oracle; [`loader`] its
//! weights resident on the GPU, uploaded or streamed from a checkpoint; [`sampler`]
//! greedy and top-k sampling on the GPU; [`lmgen`] the delays of LMGen.

pub mod config;
pub mod lm;
pub mod lmgen;
pub mod loader;
pub mod sampler;
pub mod synthetic;
pub mod tokenizer;
pub mod transformer;

pub use config::LmConfig;
pub use lm::{Lm, LmCpu, LmWeights};
pub use lmgen::LmGen;
pub use loader::{requirements, LmGpuWeights, LmLoader};
pub use sampler::{Sampling, StreamSampling};
pub use tokenizer::TextTokenizer;
