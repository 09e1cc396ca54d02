//! Shared by the native and browser Moshi LM parity tests: the committed outputs of
//! Kyutai's LMModel / LMGen (`tests/golden/moshi_*`, made by `tests/reference/gen_moshi.py`)
//! and the checkpoint regenerated from the same seed.
#![allow(dead_code)]

use inferencelayer::moshi::LmConfig;
use inferencelayer::weights::synthetic;

pub const CONFIG_JSON: &str = include_str!("../golden/moshi_config.json");
pub const TENSORS_JSON: &str = include_str!("../golden/moshi_tensors.json");
const USER_CODES: &[u8] = include_bytes!("../golden/moshi_user_codes.npy");
const TOKENS: &[u8] = include_bytes!("../golden/moshi_greedy_tokens.npy");
const FRAMES: &[u8] = include_bytes!("../golden/moshi_greedy_frames.npy");
const TEXT_LOGITS: &[u8] = include_bytes!("../golden/moshi_text_logits.npy");

fn rows_i64(bytes: &[u8]) -> Vec<Vec<i64>> {
    let npy = npyz::NpyFile::new(bytes).expect("npy");
    let cols = npy.shape().get(1).copied().unwrap_or(1) as usize;
    let v = npy.into_vec::<i64>().expect("i64");
    v.chunks_exact(cols).map(|r| r.to_vec()).collect()
}

pub struct LmGolden {
    pub config: LmConfig,
    /// `[frames][8]`
    pub user_codes: Vec<Vec<u32>>,
    /// LMGen outputs `[rows][1 + dep_q]` and the input frame of each row.
    pub tokens: Vec<Vec<i32>>,
    pub frames: Vec<usize>,
    /// Text logits of steps 0..3, `[3 * text_card]`.
    pub text_logits: Vec<f32>,
}

pub fn lm_golden() -> LmGolden {
    LmGolden {
        config: LmConfig::from_json(CONFIG_JSON).expect("config"),
        user_codes: rows_i64(USER_CODES).into_iter().map(|r| r.into_iter().map(|c| c as u32).collect()).collect(),
        tokens: rows_i64(TOKENS).into_iter().map(|r| r.into_iter().map(|c| c as i32).collect()).collect(),
        frames: rows_i64(FRAMES).into_iter().map(|r| r[0] as usize).collect(),
        text_logits: npyz::NpyFile::new(TEXT_LOGITS).unwrap().into_vec::<f32>().unwrap(),
    }
}

pub fn lm_checkpoint_bytes(config: &LmConfig) -> Vec<u8> {
    synthetic::lm_checkpoint(&config.tensor_specs(), synthetic::SEED).expect("synthetic LM checkpoint")
}

/// How many leading output rows equal the reference's, and the total equal rows.
pub fn agreement(got: &[Vec<i32>], want: &[Vec<i32>]) -> (usize, usize) {
    let leading = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    let total = got.iter().zip(want).filter(|(a, b)| a == b).count();
    (leading, total)
}
