//! Test fixtures shared by the loader tests and the malformed-input corpus: a seeded
//! generator, a raw safetensors writer and a GGUF writer (written from the formats, the
//! readers' counterparts).
#![allow(dead_code)]

/// splitmix64, for chunk sizes and test data.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A safetensors file from a header text and a data section.
pub fn raw_st(json: &str, data: &[u8]) -> Vec<u8> {
    let mut f = (json.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(json.as_bytes());
    f.extend_from_slice(data);
    f
}

/// A GGUF writer for test fixtures (the reader's counterpart, written from the format).
pub struct GgufWriter {
    pub alignment: u64,
    pub kv: Vec<u8>,
    pub n_kv: u64,
    pub tensors: Vec<GgufTensor>,
}

/// A GGUF tensor as the writer holds it: name, dimensions, ggml type, data.
pub type GgufTensor = (String, Vec<u64>, u32, Vec<u8>);

pub fn gstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl GgufWriter {
    pub fn new() -> Self {
        Self { alignment: 32, kv: vec![], n_kv: 0, tensors: vec![] }
    }
    /// A key with a raw value of `ty` (the value's bytes already encoded).
    pub fn kv(&mut self, key: &str, ty: u32, value: &[u8]) -> &mut Self {
        gstr(&mut self.kv, key);
        self.kv.extend_from_slice(&ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }
    pub fn alignment(&mut self, a: u32) -> &mut Self {
        self.alignment = a as u64;
        self.kv("general.alignment", 4, &a.to_le_bytes())
    }
    /// A tensor of row-major `shape` (written as `ne`, innermost first).
    pub fn tensor(&mut self, name: &str, shape: &[u64], ty: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.into(), shape.iter().rev().copied().collect(), ty, data));
        self
    }
    pub fn bytes(&self) -> Vec<u8> {
        let mut f = vec![];
        f.extend_from_slice(b"GGUF");
        f.extend_from_slice(&3u32.to_le_bytes());
        f.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        f.extend_from_slice(&self.n_kv.to_le_bytes());
        f.extend_from_slice(&self.kv);
        let mut off = 0u64;
        for (name, ne, ty, data) in &self.tensors {
            gstr(&mut f, name);
            f.extend_from_slice(&(ne.len() as u32).to_le_bytes());
            for d in ne {
                f.extend_from_slice(&d.to_le_bytes());
            }
            f.extend_from_slice(&ty.to_le_bytes());
            f.extend_from_slice(&off.to_le_bytes());
            off += (data.len() as u64).next_multiple_of(self.alignment);
        }
        f.resize((f.len() as u64).next_multiple_of(self.alignment) as usize, 0);
        for (_, _, _, data) in &self.tensors {
            f.extend_from_slice(data);
            f.resize((f.len() as u64).next_multiple_of(self.alignment) as usize, 0);
        }
        f
    }
}

