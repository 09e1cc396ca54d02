//! The browser side (wasm32 only): checkpoint bytes through `fetch` and the Cache API, fed
//! to the same [`crate::weights::source`] driver as a file natively.

pub mod cache;
pub mod fetch;
pub mod scope;
