//! Weight readers: a checkpoint's tensors by name, checked against the shapes the model
//! expects, and the seeded synthetic checkpoints used offline and in tests.

pub mod gguf;
pub mod place;
pub mod q8;
pub mod source;
pub mod stream;
pub mod synthetic;

use safetensors::{Dtype, SafeTensors};

use crate::error::{Error, Result};

/// Where a model's loader finds its tensors by name: a parsed file in memory
/// ([`TensorStore`]) or the f32 tensors a stream delivered ([`place::TensorMap`]).
pub trait TensorSource {
    /// Whether the checkpoint holds `name`.
    fn contains(&self, name: &str) -> bool;
    /// The tensor `name` as f32, which must have exactly `shape`: [`Error::MissingTensor`],
    /// [`Error::Shape`], [`Error::Dtype`] naming it otherwise.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>>;
    /// The first of `names` present (a tensor renamed across checkpoint versions).
    fn get_any(&self, names: &[&str], shape: &[usize]) -> Result<Vec<f32>> {
        for n in names {
            if self.contains(n) {
                return self.get(n, shape);
            }
        }
        Err(Error::MissingTensor(names.join(" or ")))
    }
}

impl TensorSource for TensorStore<'_> {
    fn contains(&self, name: &str) -> bool {
        TensorStore::contains(self, name)
    }
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        TensorStore::get(self, name, shape)
    }
}

/// A parsed safetensors checkpoint held in memory, read tensor by tensor.
///
/// Accepts F32, F16 and BF16 tensors, returned as f32. Every lookup names the tensor in its
/// error: [`Error::MissingTensor`], [`Error::Shape`], [`Error::Dtype`].
pub struct TensorStore<'a> {
    st: SafeTensors<'a>,
}

impl<'a> TensorStore<'a> {
    /// Parse the header of a safetensors file (`bytes` is the whole file). A truncated file,
    /// a header that is not JSON, or offsets outside the data give [`Error::Checkpoint`].
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| Error::Checkpoint(e.to_string()))?;
        Ok(Self { st })
    }

    /// Whether the checkpoint holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.st.tensor(name).is_ok()
    }

    /// Names of every tensor in the file.
    pub fn names(&self) -> Vec<String> {
        self.st.names().into_iter().map(|s| s.to_string()).collect()
    }

    /// The tensor `name` as f32, which must have exactly `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let view = self.st.tensor(name).map_err(|_| Error::MissingTensor(name.to_string()))?;
        if view.shape() != shape {
            return Err(Error::Shape { name: name.to_string(), expected: shape.to_vec(), found: view.shape().to_vec() });
        }
        let data = view.data();
        let out = match view.dtype() {
            Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => data.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => return Err(Error::Dtype { name: name.to_string(), found: format!("{other:?}") }),
        };
        Ok(out)
    }

    /// The first of `names` present (a tensor renamed across checkpoint versions).
    pub fn get_any(&self, names: &[&str], shape: &[usize]) -> Result<Vec<f32>> {
        for n in names {
            if self.contains(n) {
                return self.get(n, shape);
            }
        }
        Err(Error::MissingTensor(names.join(" or ")))
    }
}
