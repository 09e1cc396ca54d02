//! The GPU context: adapter, device, queue, the adapter's own limits, error capture and the
//! pipeline cache. Created once, asynchronously, on every target; tests and the web entry
//! share the same `(device, queue)` seam through [`GpuContext::from_adapter`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use wgpu::util::DeviceExt;

use super::kernels::{Binding, Kernel};
use super::limits::GpuLimits;
use crate::error::{Error, Result};

/// What the adapter is and what it allows, for logs, benchmarks and capability checks.
#[derive(Clone, Debug)]
pub struct GpuInfo {
    /// Adapter name as the driver reports it (`llvmpipe (LLVM ...)`, `NVIDIA H200`, ...); in
    /// a browser that gives wgpu none, as `GPUAdapterInfo` names it (`google swiftshader`).
    pub name: String,
    /// Backend (`Vulkan`, `Metal`, `BrowserWebGpu`, ...).
    pub backend: String,
    /// Device type (`DiscreteGpu`, `Cpu`, ...).
    pub device_type: String,
    /// Largest storage binding the plans may use, in bytes: the device's, or the lower
    /// emulated limit it was opened with ([`GpuContext::with_limits`]).
    pub max_storage_binding: u64,
    /// Largest buffer the plans may use, in bytes (the device's, or the emulated limit).
    pub max_buffer: u64,
    /// The adapter's own limits (what a device on it could be given).
    pub adapter_limits: GpuLimits,
    /// Whether the adapter offers subgroup operations. The kernels never need them: wgpu's
    /// webgpu backend does not pass the feature through, so every kernel is portable.
    pub subgroups: bool,
    /// Whether the device was opened with timestamp queries (per-step GPU profiles).
    pub timestamps: bool,
    /// Whether WGSL's `packed_4x8_integer_dot_product` language extension is there
    /// (`dot4I8Packed`, `pack4xI8Clamp`): natively always (naga implements it for every
    /// backend), in a browser where `navigator.gpu.wgslLanguageFeatures` lists it. Without
    /// it the Q8_0 linears run the f32 kernel ([`crate::gpu::Q8Dot`]).
    pub packed_dot: bool,
    /// Whether the adapter is a CPU emulating a GPU (lavapipe, SwiftShader: device type
    /// `Cpu`), where barriers and threads cost what a GPU's do not: the plans then take the
    /// kernels that suit it ([`crate::gpu::ConvKernel::Auto`]).
    pub cpu: bool,
    /// The queue the device submits to: `default` (the backend's own choice; Vulkan's
    /// queue family 0, graphics and compute) or `compute-only family N` (natively on Vulkan,
    /// see [`GpuContext::from_adapter`]).
    pub queue: String,
    /// The runtime checks the pipelines are compiled without ([`ShaderChecks`]: natively the
    /// loop counter).
    pub shader_checks: ShaderChecks,
}

/// Which of wgpu's safety measures around a kernel a context's pipelines leave out.
/// Natively wgpu compiles every WGSL kernel with each of them on: workgroup memory zeroed at
/// every workgroup's start, a 64-bit counter in every loop that breaks it after 2^64 turns
/// (so that a driver may not treat an endless loop as unreachable), a guard on every integer
/// division, and index clamps where the driver has no robust buffer access of its own.
///
/// The plans leave out the loop counter natively ([`Self::plans`]): measured on an H200
/// through Vulkan, it cost the temporal plan 3.77 against 3.32 ms in one pass and Mimi's
/// encode + decode 1.97 against 1.78 ms (the counter's compare and 64-bit add in every
/// turn of every inner loop), while the other three changed nothing measurable. Every
/// loop of `shaders/` ends: its bound and stride are the plan's validated shapes
/// (strides of at least 1: lanes, threads, a conv's stride). A browser's Tint adds no such
/// counter; there all of wgpu's checks are the browser's.
///
/// The environment variable `INFERENCELAYER_SHADER_CHECKS` sets what is left out, for
/// measurements: a comma-separated list of `zero-init`, `loop-bounds`, `int-div` and
/// `bounds`, or `none` to keep every check (unset or empty: [`Self::plans`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShaderChecks {
    pub no_zero_init: bool,
    pub no_loop_bounds: bool,
    pub no_int_div: bool,
    pub no_bounds: bool,
}

impl ShaderChecks {
    /// What the plans leave out: natively the loop counter, on the web nothing (the
    /// browser compiles the kernels).
    pub fn plans() -> Self {
        Self { no_loop_bounds: !cfg!(target_arch = "wasm32"), ..Self::default() }
    }

    /// From `INFERENCELAYER_SHADER_CHECKS` (see the type's doc); an [`Error::Input`] names
    /// an unknown entry. On the web: [`Self::plans`], whatever the variable says.
    pub fn from_env() -> Result<Self> {
        if cfg!(target_arch = "wasm32") {
            return Ok(Self::plans());
        }
        Self::parse(&std::env::var("INFERENCELAYER_SHADER_CHECKS").unwrap_or_default())
    }

    /// A value of `INFERENCELAYER_SHADER_CHECKS` (see the type's doc), natively.
    pub fn parse(v: &str) -> Result<Self> {
        if v.trim().is_empty() {
            return Ok(Self::plans());
        }
        let mut c = Self::default();
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item {
                "none" => {}
                "zero-init" => c.no_zero_init = true,
                "loop-bounds" => c.no_loop_bounds = true,
                "int-div" => c.no_int_div = true,
                "bounds" => c.no_bounds = true,
                _ => {
                    return Err(Error::Input(format!(
                        "INFERENCELAYER_SHADER_CHECKS lists the checks to leave out among zero-init, loop-bounds, int-div and bounds (or none), not {item:?}"
                    )))
                }
            }
        }
        Ok(c)
    }

    /// The checks left out as the variable names them (`none` when all are kept).
    pub fn dropped(&self) -> String {
        let names = [(self.no_zero_init, "zero-init"), (self.no_loop_bounds, "loop-bounds"), (self.no_int_div, "int-div"), (self.no_bounds, "bounds")];
        let v: Vec<&str> = names.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(",")
        }
    }
}

impl GpuInfo {
    /// The limits the plans keep to ([`Self::max_storage_binding`], [`Self::max_buffer`]).
    pub fn limits(&self) -> GpuLimits {
        GpuLimits { max_storage_binding: self.max_storage_binding, max_buffer: self.max_buffer }
    }
}

impl std::fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // where neither wgpu nor the browser names the adapter
        let name = if self.name.is_empty() { "unnamed adapter" } else { &self.name };
        write!(f, "{name} ({}, {})", self.backend, self.device_type)
    }
}

/// Whether `navigator.gpu.wgslLanguageFeatures` lists `feature` (false where any part of
/// that path is missing). Asked through `has` rather than wgpu's iteration of the set, which
/// panics on implementations whose set iterates otherwise (Dawn for Node).
#[cfg(target_arch = "wasm32")]
fn wgsl_has(feature: &str) -> bool {
    use wasm_bindgen::JsCast;
    let Some(set) = js_get(&js_sys::global(), "navigator").and_then(|n| js_get(&n, "gpu")).and_then(|g| js_get(&g, "wgslLanguageFeatures")) else {
        return false;
    };
    match js_get(&set, "has").as_ref().and_then(|h| h.dyn_ref::<js_sys::Function>()) {
        Some(has) => has.call1(&set, &feature.into()).map(|v| v.is_truthy()).unwrap_or(false),
        None => false,
    }
}

/// Property `k` of `o`; None where it is missing, undefined or null.
#[cfg(target_arch = "wasm32")]
fn js_get(o: &wasm_bindgen::JsValue, k: &str) -> Option<wasm_bindgen::JsValue> {
    js_sys::Reflect::get(o, &k.into()).ok().filter(|v| !v.is_undefined() && !v.is_null())
}

/// How the browser names its high-performance adapter (`GPUAdapterInfo`: the description,
/// else vendor, architecture and device, as `google swiftshader`), for an adapter whose
/// wgpu info has no name: wgpu's webgpu backend takes the description alone, which Chromium
/// leaves empty, and does not hand out the `GPUAdapter` it holds, so this asks
/// `navigator.gpu` for the high-performance adapter once more (once a context, with the
/// preference [`GpuContext::with_limits`] asks). None where any part of that is missing.
#[cfg(target_arch = "wasm32")]
async fn browser_adapter_name() -> Option<String> {
    use wasm_bindgen::JsCast;
    let gpu = js_get(&js_sys::global(), "navigator").and_then(|n| js_get(&n, "gpu"))?;
    let request = js_get(&gpu, "requestAdapter")?.dyn_into::<js_sys::Function>().ok()?;
    let options = js_sys::Object::new();
    js_sys::Reflect::set(&options, &"powerPreference".into(), &"high-performance".into()).ok()?;
    let promise = request.call1(&gpu, &options).ok()?.dyn_into::<js_sys::Promise>().ok()?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok()?;
    let info = js_get(&adapter, "info")?;
    let field = |k: &str| js_get(&info, k).and_then(|v| v.as_string()).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    if let Some(d) = field("description") {
        return Some(d);
    }
    let parts: Vec<String> = ["vendor", "architecture", "device"].into_iter().filter_map(field).collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// A compiled kernel: its explicit bind group layout and pipeline.
pub(crate) struct Pipeline {
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) pipeline: wgpu::ComputePipeline,
}

/// Device, queue and caches. Not `Send`: one context lives on one thread (the Worker on
/// the web).
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: GpuInfo,
    errors: Arc<Mutex<Vec<String>>>,
    lost: Arc<Mutex<Option<String>>>,
    pipelines: RefCell<HashMap<&'static str, Rc<Pipeline>>>,
    /// Storage buffers made through the context (label, bytes), once recording is on.
    recorded: RefCell<Option<Vec<(String, u64)>>>,
}

impl GpuContext {
    /// Find the best adapter (high performance first) and open a device on it.
    ///
    /// Natively the backend can be forced with `WGPU_BACKEND` (e.g. `vulkan`). Returns
    /// [`Error::NoAdapter`] when there is none: in a browser, WebGPU may be disabled or
    /// missing (Chromium needs `--enable-unsafe-webgpu` where it has no GPU).
    pub async fn new() -> Result<Self> {
        Self::with_limits(None).await
    }

    /// [`Self::new`] keeping to `limits` where they are below the adapter's (emulating a
    /// smaller device; `None`: the adapter's own). See [`Self::from_adapter_with_limits`].
    pub async fn with_limits(limits: Option<GpuLimits>) -> Result<Self> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                Error::NoAdapter(format!(
                    "{e}; natively install a Vulkan or Metal driver (Mesa's lavapipe works without a GPU), \
                     in a browser enable WebGPU"
                ))
            })?;
        Self::from_adapter_with_limits(adapter, limits).await
    }

    /// Open a device on `adapter`, asking for the adapter's own storage-binding and buffer
    /// limits (the defaults stop at 128 MiB and 256 MiB), and install the error handlers:
    /// uncaptured GPU errors are recorded and surface as [`Error::Gpu`] from the next
    /// readback, where wgpu would otherwise panic (native) or only log (web); a device loss
    /// is recorded and surfaces as [`Error::DeviceLost`] from then on.
    pub async fn from_adapter(adapter: wgpu::Adapter) -> Result<Self> {
        Self::from_adapter_with_limits(adapter, None).await
    }

    /// [`Self::from_adapter`] with emulated limits: the device is requested with
    /// `limits` where they are below the adapter's (natively wgpu then enforces them; a
    /// browser raises a request below WebGPU's defaults to the defaults), and the context
    /// keeps to them in every buffer it makes ([`GpuInfo::limits`], [`Error::Limit`]), so
    /// every plan behaves as on a device that has only `limits`.
    pub async fn from_adapter_with_limits(adapter: wgpu::Adapter, emulated: Option<GpuLimits>) -> Result<Self> {
        let a = adapter.limits();
        let adapter_limits = GpuLimits { max_storage_binding: a.max_storage_buffer_binding_size, max_buffer: a.max_buffer_size };
        let want = emulated.map_or(adapter_limits, |e| e.min(&adapter_limits));
        let limits = wgpu::Limits {
            max_storage_buffer_binding_size: want.max_storage_binding,
            max_buffer_size: want.max_buffer,
            max_storage_buffers_per_shader_stage: a.max_storage_buffers_per_shader_stage.max(8),
            ..Default::default()
        };
        // Timestamp queries only serve profiles; taken where the adapter has them.
        let features = adapter.features() & wgpu::Features::TIMESTAMP_QUERY;
        let desc = wgpu::DeviceDescriptor {
            label: Some("inferencelayer"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        };
        #[cfg(not(target_arch = "wasm32"))]
        let opened = vulkan::open_compute_queue(&adapter, &desc)?;
        #[cfg(target_arch = "wasm32")]
        let opened: Option<(wgpu::Device, wgpu::Queue, u32)> = None;
        let (device, queue, queue_name) = match opened {
            Some((d, q, family)) => (d, q, format!("compute-only family {family}")),
            None => {
                let (d, q) = adapter.request_device(&desc).await.map_err(|e| Error::Device(e.to_string()))?;
                (d, q, "default".to_string())
            }
        };
        let ai = adapter.get_info();
        #[cfg(target_arch = "wasm32")]
        let name = if ai.name.is_empty() { browser_adapter_name().await.unwrap_or_default() } else { ai.name.clone() };
        #[cfg(not(target_arch = "wasm32"))]
        let name = ai.name.clone();
        // what the device got (a browser may give more than asked), never above what was asked
        let got = device.limits();
        let kept = want.min(&GpuLimits { max_storage_binding: got.max_storage_buffer_binding_size, max_buffer: got.max_buffer_size });
        #[cfg(not(target_arch = "wasm32"))]
        let packed_dot = true;
        #[cfg(target_arch = "wasm32")]
        let packed_dot = wgsl_has("packed_4x8_integer_dot_product");
        let info = GpuInfo {
            name,
            backend: format!("{:?}", ai.backend),
            device_type: format!("{:?}", ai.device_type),
            max_storage_binding: kept.max_storage_binding,
            max_buffer: kept.max_buffer,
            adapter_limits,
            subgroups: adapter.features().contains(wgpu::Features::SUBGROUP),
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            packed_dot,
            cpu: ai.device_type == wgpu::DeviceType::Cpu,
            queue: queue_name,
            shader_checks: ShaderChecks::from_env()?,
        };
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let sink = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut l) = sink.lock() {
                let why = if msg.is_empty() { format!("{reason:?}") } else { format!("{reason:?}: {msg}") };
                l.get_or_insert(why);
            }
        });
        Ok(Self { device, queue, info, errors, lost, pipelines: RefCell::default(), recorded: RefCell::default() })
    }

    /// The reason the device was lost, once it was (see [`Error::DeviceLost`]).
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }

    /// [`Error::DeviceLost`] once the device is lost, else `Ok`.
    pub fn check_lost(&self) -> Result<()> {
        match self.lost() {
            Some(why) => Err(Error::DeviceLost(why)),
            None => Ok(()),
        }
    }

    /// Destroy the device now, as a driver reset or the browser would: its buffers are freed
    /// at once, the device-lost handler runs, and every later call on models built on this
    /// context fails with [`Error::DeviceLost`]. For tests of recovery and for releasing GPU
    /// memory without waiting for the last reference to go.
    pub fn destroy(&self) {
        self.device.destroy();
        // The callback runs on the next maintenance natively; record the loss now so that
        // the very next call sees it on every target.
        if let Ok(mut l) = self.lost.lock() {
            l.get_or_insert_with(|| "Destroyed: the device was destroyed".to_string());
        }
    }

    /// The first GPU error recorded since the last call, if any; [`Error::DeviceLost`] once
    /// the device is lost (the errors a lost device raises are its consequences).
    pub fn take_error(&self) -> Result<()> {
        let mut v = self.errors.lock().map_err(|_| Error::Gpu("error sink poisoned".into()))?;
        if let Some(why) = self.lost() {
            v.clear();
            return Err(Error::DeviceLost(why));
        }
        if v.is_empty() {
            Ok(())
        } else {
            let msg = v.join("; ");
            v.clear();
            Err(Error::Gpu(msg))
        }
    }

    /// Start recording every storage buffer made through the context from now on (label,
    /// bytes), for comparing a model's buffers with its [`super::Requirements`].
    pub fn record_buffers(&self) {
        *self.recorded.borrow_mut() = Some(Vec::new());
    }

    /// The storage buffers made since [`Self::record_buffers`] (label, bytes), in order.
    pub fn recorded_buffers(&self) -> Vec<(String, u64)> {
        self.recorded.borrow().clone().unwrap_or_default()
    }

    fn check_binding(&self, what: &str, bytes: u64) -> Result<()> {
        self.info.limits().check(&format!("buffer `{what}`"), bytes)?;
        if let Some(v) = self.recorded.borrow_mut().as_mut() {
            v.push((what.to_string(), bytes));
        }
        Ok(())
    }

    /// A storage buffer holding `data` (f32), bindable as one binding.
    /// Fails with [`Error::Limit`] above the device's storage-binding or buffer limit.
    pub fn storage_f32(&self, label: &str, data: &[f32]) -> Result<wgpu::Buffer> {
        self.storage_bytes(label, bytemuck::cast_slice(data))
    }

    /// A storage buffer holding raw bytes (length a multiple of 4).
    pub fn storage_bytes(&self, label: &str, data: &[u8]) -> Result<wgpu::Buffer> {
        self.check_binding(label, data.len() as u64)?;
        let contents: &[u8] = if data.is_empty() { &[0; 4] } else { data };
        Ok(self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        }))
    }

    /// A zero-filled storage buffer of `len` 4-byte elements.
    pub fn zeros(&self, label: &str, len: usize) -> Result<wgpu::Buffer> {
        let bytes = (len.max(1) * 4) as u64;
        self.check_binding(label, bytes)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    /// A uniform buffer holding `data`, writable later with `queue.write_buffer`.
    pub fn uniform(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: data,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        })
    }

    /// The compiled pipeline of `kernel`, built once per context with an explicit layout.
    pub(crate) fn pipeline(&self, kernel: &Kernel) -> Rc<Pipeline> {
        if let Some(p) = self.pipelines.borrow().get(kernel.name) {
            return p.clone();
        }
        let entries: Vec<wgpu::BindGroupLayoutEntry> = kernel
            .bindings
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupLayoutEntry {
                binding: i as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: match b {
                    Binding::Read => wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: true },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    Binding::ReadWrite => wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: false },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    Binding::Uniform => wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                },
                count: None,
            })
            .collect();
        let layout = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(kernel.name),
            entries: &entries,
        });
        let pl = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(kernel.name),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name),
            source: wgpu::ShaderSource::Wgsl(kernel.source.into()),
        };
        let checks = self.info.shader_checks;
        let runtime = wgpu::ShaderRuntimeChecks {
            bounds_checks: !checks.no_bounds,
            force_loop_bounding: !checks.no_loop_bounds,
            int_div_checks: !checks.no_int_div,
            ..wgpu::ShaderRuntimeChecks::checked()
        };
        let module = if checks == ShaderChecks::default() {
            self.device.create_shader_module(desc)
        } else {
            // SAFETY: `ShaderChecks`' doc: every loop of the kernels ends (the plans' strides
            // are validated non-zero, their bounds finite shapes). The other checks are left
            // out only where INFERENCELAYER_SHADER_CHECKS asks, for measurements: the kernels'
            // divisors are validated non-zero shapes, and their indices stay inside the
            // buffers the plan builder sized for them.
            unsafe { self.device.create_shader_module_trusted(desc, runtime) }
        };
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name),
            layout: Some(&pl),
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions { zero_initialize_workgroup_memory: !checks.no_zero_init, ..Default::default() },
            cache: None,
        });
        let p = Rc::new(Pipeline { layout, pipeline });
        self.pipelines.borrow_mut().insert(kernel.name, p.clone());
        p
    }

    /// Wait for the queue natively (a no-op on the web, where the browser drives mapping).
    pub(crate) fn poll(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(e) = self.device.poll(wgpu::PollType::wait_indefinitely()) {
            self.check_lost()?;
            return Err(Error::Gpu(e.to_string()));
        }
        Ok(())
    }

    /// Read `len` f32 values of `buf` (a debugging and test path: it allocates a staging
    /// buffer; per-frame reads go through a [`Readback`]).
    pub async fn read_f32(&self, buf: &wgpu::Buffer, len: usize) -> Result<Vec<f32>> {
        let rb = Readback::new(self, (len * 4) as u64);
        let mut enc = self.device.create_command_encoder(&Default::default());
        rb.copy(&mut enc, buf);
        self.queue.submit([enc.finish()]);
        let bytes = rb.read(self).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

/// A mappable staging buffer for the one small readback of a frame: the copy into it is
/// recorded in the frame's own command encoder, so a frame stays one submit.
pub struct Readback {
    staging: wgpu::Buffer,
    bytes: u64,
}

impl Readback {
    /// A staging buffer of `bytes` bytes (a multiple of 4).
    pub fn new(ctx: &GpuContext, bytes: u64) -> Self {
        let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Self { staging, bytes: bytes.max(4) }
    }

    /// The staging buffer the copies go to.
    pub fn staging(&self) -> &wgpu::Buffer {
        &self.staging
    }

    /// Record the copy of the first `bytes` bytes of `src` into the staging buffer.
    pub fn copy(&self, enc: &mut wgpu::CommandEncoder, src: &wgpu::Buffer) {
        enc.copy_buffer_to_buffer(src, 0, &self.staging, 0, self.bytes);
    }

    /// Map and read the staging buffer after the submit that filled it. Asynchronous on
    /// every target; natively it polls the device, on the web it yields to the event loop.
    /// Returns [`Error::Gpu`] if the map failed or any GPU error was recorded meanwhile, and
    /// [`Error::DeviceLost`] once the device is lost.
    pub async fn read(&self, ctx: &GpuContext) -> Result<Vec<u8>> {
        ctx.check_lost()?;
        let slice = self.staging.slice(..self.bytes);
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        ctx.poll()?;
        let mapped = rx.await.map_err(|_| Error::Gpu("readback dropped".into()));
        ctx.take_error()?;
        mapped?.map_err(|e| Error::Gpu(format!("readback map failed: {e}")))?;
        let out = slice
            .get_mapped_range()
            .map_err(|e| Error::Gpu(format!("readback range: {e}")))?
            .to_vec();
        self.staging.unmap();
        Ok(out)
    }
}

/// Natively on Vulkan: a device whose one queue is on a compute-only queue family.
#[cfg(not(target_arch = "wasm32"))]
mod vulkan {
    use ash::vk;

    use crate::error::{Error, Result};

    /// Open `desc` on the adapter's first queue family that has compute but not graphics
    /// (NVIDIA's family 2, say), where wgpu itself always takes family 0. Chosen by the
    /// environment variable `INFERENCELAYER_VK_QUEUE`: `compute` takes the compute-only
    /// family, anything else or unset the default queue. Returns `Ok(None)` when the adapter
    /// is not Vulkan, has no such family (or one without timestamps while `desc` asks for
    /// them) or the variable does not ask for it; [`Error::Device`] when the device cannot
    /// be created there.
    pub(super) fn open_compute_queue(
        adapter: &wgpu::Adapter,
        desc: &wgpu::DeviceDescriptor<'_>,
    ) -> Result<Option<(wgpu::Device, wgpu::Queue, u32)>> {
        if std::env::var("INFERENCELAYER_VK_QUEUE").as_deref() != Ok("compute") {
            return Ok(None);
        }
        let device_err = |e: &dyn std::fmt::Display| Error::Device(format!("compute-only Vulkan queue: {e}"));
        // SAFETY: the raw device is created from this adapter's physical device with the
        // extensions and features wgpu-hal itself asks for (`required_device_extensions`,
        // `physical_device_features`), and handed to wgpu-hal with the family it was created
        // on, as `device_from_raw` and `create_device_from_hal` require.
        unsafe {
            let open = {
                let Some(hal) = adapter.as_hal::<wgpu::hal::api::Vulkan>() else {
                    return Ok(None);
                };
                let instance = hal.shared_instance().raw_instance();
                let phd = hal.raw_physical_device();
                let families = instance.get_physical_device_queue_family_properties(phd);
                let wants_timestamps = desc.required_features.contains(wgpu::Features::TIMESTAMP_QUERY);
                let Some(family) = families.iter().position(|f| {
                    f.queue_flags.contains(vk::QueueFlags::COMPUTE)
                        && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS)
                        && (!wants_timestamps || f.timestamp_valid_bits >= 36)
                }) else {
                    return Ok(None);
                };
                let family = family as u32;
                let extensions = hal.required_device_extensions(desc.required_features);
                let mut features = hal.physical_device_features(&extensions, desc.required_features);
                let priorities = [1.0f32];
                let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
                let names: Vec<*const std::ffi::c_char> = extensions.iter().map(|e| e.as_ptr()).collect();
                let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&names);
                let info = features.add_to_device_create(info);
                let raw = instance.create_device(phd, &info, None).map_err(|e| device_err(&e))?;
                let open = hal
                    .device_from_raw(
                        raw,
                        None,
                        &extensions,
                        desc.required_features,
                        &desc.required_limits,
                        &desc.memory_hints,
                        family,
                        0,
                    )
                    .map_err(|e| device_err(&e))?;
                (open, family)
            };
            let (device, queue) = adapter.create_device_from_hal(open.0, desc).map_err(|e| device_err(&e))?;
            Ok(Some((device, queue, open.1)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ShaderChecks;

    #[test]
    fn shader_checks_parse() {
        let plans = ShaderChecks::parse("").unwrap();
        assert_eq!(plans, ShaderChecks::plans());
        assert!(plans.no_loop_bounds && !plans.no_zero_init && !plans.no_int_div && !plans.no_bounds);
        assert_eq!(plans.dropped(), "loop-bounds");
        assert_eq!(ShaderChecks::parse("none").unwrap(), ShaderChecks::default());
        assert_eq!(ShaderChecks::parse("none").unwrap().dropped(), "none");
        let c = ShaderChecks::parse(" zero-init, bounds ").unwrap();
        assert!(c.no_zero_init && c.no_bounds && !c.no_loop_bounds && !c.no_int_div);
        assert_eq!(c.dropped(), "zero-init,bounds");
        let e = ShaderChecks::parse("loop-bounds,fast").unwrap_err().to_string();
        assert!(e.contains("\"fast\""), "{e}");
    }
}
