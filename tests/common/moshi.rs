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

/// Tensors of a safetensors file as `(name, shape, f32 values)`, in file order.
pub fn st_tensors(bytes: &[u8]) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("safetensors");
    let mut v: Vec<(String, Vec<usize>, Vec<f32>, usize)> = st
        .iter()
        .map(|(n, t)| {
            let vals = match t.dtype() {
                safetensors::Dtype::F32 => t.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
                safetensors::Dtype::BF16 => t.data().chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
                d => panic!("{n}: {d:?}"),
            };
            (n.to_string(), t.shape().to_vec(), vals, t.data().as_ptr() as usize)
        })
        .collect();
    v.sort_by_key(|t| t.3);
    v.into_iter().map(|(n, s, d, _)| (n, s, d)).collect()
}

/// A safetensors file of `tensors`, as f32 or (rounded to nearest) bf16.
pub fn st_write(tensors: &[(String, Vec<usize>, Vec<f32>)], bf16: bool) -> Vec<u8> {
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| {
            if bf16 {
                v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect()
            } else {
                v.iter().flat_map(|&x| x.to_le_bytes()).collect()
            }
        })
        .collect();
    let dtype = if bf16 { safetensors::Dtype::BF16 } else { safetensors::Dtype::F32 };
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .zip(&data)
        .map(|((n, s, _), d)| (n.clone(), safetensors::tensor::TensorView::new(dtype, s.clone(), d).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// The released (stacked) tensors renamed to the current package's split attention names:
/// `self_attn.in_projs.K.weight` / `out_projs.K.weight`, the depformer's stacked steps cut
/// into `dep_q` tensors.
pub fn split_naming(tensors: &[(String, Vec<usize>, Vec<f32>)], dep_q: usize) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut out = Vec::new();
    for (n, s, v) in tensors {
        let split = [("self_attn.in_proj_weight", "self_attn.in_projs"), ("self_attn.out_proj.weight", "self_attn.out_projs")]
            .iter()
            .find_map(|(a, b)| n.strip_suffix(a).map(|p| format!("{p}{b}")));
        match split {
            Some(base) => {
                let k = if n.starts_with("depformer.") { dep_q } else { 1 };
                let rows = s[0] / k;
                for j in 0..k {
                    let part = v[j * rows * s[1]..(j + 1) * rows * s[1]].to_vec();
                    out.push((format!("{base}.{j}.weight"), vec![rows, s[1]], part));
                }
            }
            None => out.push((n.clone(), s.clone(), v.clone())),
        }
    }
    out
}
