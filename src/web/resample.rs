//! [`crate::resample::Resampler`] for JavaScript: the Worker converts the AudioContext's
//! rate to Mimi's 24 kHz on the way in and back on the way out.

use wasm_bindgen::prelude::*;

use super::js_error;
use crate::resample::Resampler;

/// A streaming resampler from one rate to another (Hz).
#[wasm_bindgen]
pub struct StreamResampler {
    inner: Resampler,
}

#[wasm_bindgen]
impl StreamResampler {
    /// Throws when a rate is zero.
    #[wasm_bindgen(constructor)]
    pub fn new(from: u32, to: u32) -> Result<StreamResampler, JsError> {
        Ok(Self { inner: Resampler::new(from, to).map_err(js_error)? })
    }

    /// Push samples at the input rate; returns the output samples they complete.
    pub fn process(&mut self, input: &[f32]) -> Vec<f32> {
        self.inner.process(input)
    }

    /// A new stream.
    pub fn reset(&mut self) {
        self.inner.reset();
    }
}
