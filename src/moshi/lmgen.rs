//! LMGen's stream semantics (moshi.models.lm `LMGen._step`): per-stream delays, initial
//! tokens, the user's audio codes in, and Moshi's text and audio tokens out, realigned.
//!
//! Per 80 ms frame: [`LmGen::input`] takes the user's `n_q - dep_q` codes and gives the
//! `1 + n_q` tokens to feed the model; [`LmGen::output`] takes the `1 + dep_q` tokens the
//! model chose and gives, once `max(delays)` frames have passed, one realigned frame
//! `[text, audio 0..dep_q]`.

use super::config::LmConfig;
use crate::error::{Error, Result};

/// A token not generated yet (the reference's `ungenerated_token_id`).
const UNGENERATED: i32 = -2;

/// The delay cache of one stream of frames.
pub struct LmGen {
    delays: Vec<usize>,
    initial: Vec<i32>,
    dep_q: usize,
    card: usize,
    max_delay: usize,
    /// `[1 + n_q][max_delay + 2]`
    cache: Vec<Vec<i32>>,
    offset: usize,
}

impl LmGen {
    pub fn new(c: &LmConfig) -> Self {
        let k = 1 + c.n_q;
        let ct = c.max_delay() + 2;
        let mut initial = vec![c.card as i32; k];
        initial[0] = c.text_card as i32;
        Self {
            delays: c.delays.clone(),
            initial,
            dep_q: c.dep_q,
            card: c.card,
            max_delay: c.max_delay(),
            cache: vec![vec![UNGENERATED; ct]; k],
            offset: 0,
        }
    }

    /// A fresh stream with the same configuration.
    pub fn new_like(other: &LmGen) -> Self {
        let mut g = Self {
            delays: other.delays.clone(),
            initial: other.initial.clone(),
            dep_q: other.dep_q,
            card: other.card,
            max_delay: other.max_delay,
            cache: other.cache.clone(),
            offset: 0,
        };
        g.cache.iter_mut().for_each(|r| r.iter_mut().for_each(|t| *t = UNGENERATED));
        g
    }

    /// Frames stepped so far.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The model's input tokens for this frame, given the user's audio codes (one per user
    /// stream, each below `card`).
    pub fn input(&mut self, user_codes: &[u32]) -> Result<Vec<i32>> {
        let k = self.cache.len();
        let users = k - 1 - self.dep_q;
        if user_codes.len() != users {
            return Err(Error::Input(format!("a frame takes {users} user audio codes, got {}", user_codes.len())));
        }
        if let Some((q, &c)) = user_codes.iter().enumerate().find(|(_, &c)| c as usize >= self.card) {
            return Err(Error::CodeOutOfRange { frame: self.offset, codebook: q, code: c as i64, bins: self.card });
        }
        let ct = self.cache[0].len();
        for (q, &c) in user_codes.iter().enumerate() {
            let s = self.dep_q + 1 + q;
            self.cache[s][(self.offset + self.delays[s]) % ct] = c as i32;
        }
        Ok((0..k)
            .map(|s| if self.offset <= self.delays[s] { self.initial[s] } else { self.cache[s][self.offset % ct] })
            .collect())
    }

    /// Record the model's `1 + dep_q` chosen tokens; returns the realigned output frame
    /// `[text, audio 0..dep_q]` once `max(delays)` frames have passed, else `None`.
    pub fn output(&mut self, generated: &[i32]) -> Option<Vec<i32>> {
        let ct = self.cache[0].len();
        self.offset += 1;
        for (s, &t) in generated.iter().enumerate().take(1 + self.dep_q) {
            self.cache[s][self.offset % ct] = t;
        }
        if self.offset <= self.max_delay {
            return None;
        }
        Some((0..=self.dep_q).map(|s| self.cache[s][(self.offset - self.max_delay + self.delays[s]) % ct]).collect())
    }
}
