//! Placing a streamed checkpoint's tensors where a model keeps them.
//!
//! A model loader knows which tensors it wants only once it sees the header (which naming
//! the file uses, which shapes it has), and keeps each tensor somewhere of its own (a GPU
//! buffer, a CPU map). A [`Placer`] says both: [`Placer::plan`] turns the header into a
//! [`Plan`] (checked against the header before any tensor byte; a refused plan stops the
//! stream before anything is placed), [`Placer::ready`] prepares the destinations, and
//! [`Placer::place`] receives every completed part in file order. [`Placing`] is the
//! [`Sink`] that drives a placer, so `CheckpointReader<Placing<P>>` is a [`ByteSink`]
//! reading either format.
//!
//! [`TensorMap`] is the placer for models held on the CPU: every wanted tensor as f32,
//! addressed by name, a [`TensorSource`] for the model's own `load`.
//!
//! [`ByteSink`]: super::stream::ByteSink

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::stream::{Header, Kind, Loaded, Loader, Plan, Sink, TensorEntry, Unknown};
use super::TensorSource;
use crate::error::{Error, Result};

/// A model's side of a streamed load (see the module doc).
pub trait Placer {
    /// The plan for this header: which tensors, at which shapes, as f32 or Q8_0.
    fn plan(&mut self, header: &Header) -> Result<Plan>;
    /// The header passed the plan's check: make room for the tensors.
    fn ready(&mut self, header: &Header) -> Result<()>;
    /// One completed part of `tensor`, in file order.
    fn place(&mut self, tensor: &TensorEntry, part: Loaded) -> Result<()>;
}

type PartFn = Box<dyn FnMut(&TensorEntry, Loaded) -> Result<()>>;

/// The [`Sink`] driving a [`Placer`]: asks it for a plan at the header, checks it, then
/// builds each wanted tensor part by part (see [`Loader`]) and hands the parts over.
pub struct Placing<P: Placer> {
    placer: Rc<RefCell<P>>,
    loader: Option<Loader<PartFn>>,
}

impl<P: Placer + 'static> Placing<P> {
    /// A sink for `placer`.
    pub fn new(placer: P) -> Self {
        Self { placer: Rc::new(RefCell::new(placer)), loader: None }
    }

    /// The placer, once the stream is done with it. Fails only if a part is still being
    /// placed (never, between calls).
    pub fn into_placer(self) -> Result<P> {
        drop(self.loader);
        Rc::try_unwrap(self.placer)
            .map(RefCell::into_inner)
            .map_err(|_| Error::Input("the loader is still in use".into()))
    }

    /// The placer, borrowed.
    pub fn placer(&self) -> std::cell::Ref<'_, P> {
        self.placer.borrow()
    }

    fn loader(&mut self, t: &TensorEntry) -> Result<&mut Loader<PartFn>> {
        self.loader.as_mut().ok_or_else(|| Error::Input(format!("tensor `{}` arrived before the header", t.name)))
    }
}

impl<P: Placer + 'static> Sink for Placing<P> {
    fn header(&mut self, header: &Header) -> Result<()> {
        let plan = self.placer.borrow_mut().plan(header)?;
        let p = self.placer.clone();
        let mut loader = Loader::new(plan, Box::new(move |t: &TensorEntry, l: Loaded| p.borrow_mut().place(t, l)) as PartFn);
        loader.header(header)?;
        self.placer.borrow_mut().ready(header)?;
        self.loader = Some(loader);
        Ok(())
    }
    fn begin(&mut self, t: &TensorEntry) -> Result<()> {
        self.loader(t)?.begin(t)
    }
    fn bytes(&mut self, t: &TensorEntry, offset: u64, bytes: &[u8]) -> Result<()> {
        self.loader(t)?.bytes(t, offset, bytes)
    }
    fn end(&mut self, t: &TensorEntry) -> Result<()> {
        self.loader(t)?.end(t)
    }
}

/// f32 tensors by name, filled from a stream: the [`Placer`] of models kept on the CPU.
///
/// Wants `specs` (name, shape), each found under its own name or one of its `aliases`
/// (a tensor renamed across checkpoint versions; the first alias present is loaded under
/// the spec's name); other tensors are read past. As a [`TensorSource`], each tensor is
/// handed out once and then dropped from the map, so a model built from it never holds
/// two copies.
pub struct TensorMap {
    specs: Vec<(String, Vec<usize>)>,
    aliases: Vec<(String, String)>,
    max_part: u64,
    /// checkpoint name -> spec name
    renamed: HashMap<String, String>,
    tensors: RefCell<HashMap<String, ShapedF32>>,
}

/// A tensor's shape and its values, row-major.
type ShapedF32 = (Vec<usize>, Vec<f32>);

impl TensorMap {
    /// A map wanting `specs`, parts cut to `max_part` bytes (the stream's unit of memory).
    pub fn new(specs: Vec<(String, Vec<usize>)>, max_part: u64) -> Self {
        Self { specs, aliases: Vec::new(), max_part, renamed: HashMap::new(), tensors: RefCell::default() }
    }

    /// Also accept checkpoint tensor `alias` for spec `name`.
    pub fn alias(mut self, name: &str, alias: &str) -> Self {
        self.aliases.push((name.to_string(), alias.to_string()));
        self
    }

    /// Tensors held (not yet handed out).
    pub fn len(&self) -> usize {
        self.tensors.borrow().len()
    }

    /// Whether no tensor is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Placer for TensorMap {
    fn plan(&mut self, header: &Header) -> Result<Plan> {
        let mut plan = Plan::new(self.max_part);
        plan.unknown(Unknown::Skip);
        self.renamed.clear();
        for (name, shape) in &self.specs {
            let mut file_name = name.clone();
            if header.get(name).is_none() {
                if let Some((_, a)) = self.aliases.iter().find(|(n, a)| n == name && header.get(a).is_some()) {
                    file_name = a.clone();
                }
            }
            plan.want(&file_name, shape, Kind::F32);
            self.renamed.insert(file_name, name.clone());
        }
        Ok(plan)
    }

    fn ready(&mut self, _header: &Header) -> Result<()> {
        self.tensors.borrow_mut().clear();
        Ok(())
    }

    fn place(&mut self, t: &TensorEntry, part: Loaded) -> Result<()> {
        let Loaded::F32(part) = part else {
            return Err(Error::Input(format!("tensor `{}`: a Q8_0 part where f32 was planned", t.name)));
        };
        let name = self.renamed.get(&t.name).cloned().unwrap_or_else(|| t.name.clone());
        let mut map = self.tensors.borrow_mut();
        let entry = map.entry(name).or_insert_with(|| (t.shape.clone(), Vec::with_capacity(t.elements())));
        entry.1.extend_from_slice(&part.data);
        Ok(())
    }
}

impl TensorSource for TensorMap {
    fn contains(&self, name: &str) -> bool {
        self.tensors.borrow().contains_key(name)
    }
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let mut map = self.tensors.borrow_mut();
        let found = map.get(name).map(|(s, _)| s.clone()).ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        if found != shape {
            return Err(Error::Shape { name: name.to_string(), expected: shape.to_vec(), found });
        }
        Ok(map.remove(name).map(|(_, v)| v).unwrap_or_default())
    }
}
