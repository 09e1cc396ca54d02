//! Every kernel in `shaders/` parses and validates with naga (the native WGSL front end;
//! the browser tests cover Tint), and its `@group(0)` bindings are exactly the kernel
//! table's, in order and access mode.
#![cfg(not(target_arch = "wasm32"))]

use inferencelayer::gpu::{Binding, KERNELS};
use naga::{AddressSpace, StorageAccess};

#[test]
fn every_kernel_validates_and_matches_its_binding_table() {
    for k in KERNELS {
        let module = naga::front::wgsl::parse_str(k.source)
            .unwrap_or_else(|e| panic!("{}: {}", k.name, e.emit_to_string(k.source)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {e:?}", k.name));
        assert!(
            module.entry_points.iter().any(|e| e.name == "main" && e.stage == naga::ShaderStage::Compute),
            "{}: no compute entry point `main`",
            k.name
        );
        let mut found: Vec<(u32, Binding)> = module
            .global_variables
            .iter()
            .filter_map(|(_, g)| {
                let rb = g.binding.as_ref()?;
                assert_eq!(rb.group, 0, "{}: binding outside group 0", k.name);
                let b = match g.space {
                    AddressSpace::Uniform => Binding::Uniform,
                    AddressSpace::Storage { access } if access.contains(StorageAccess::STORE) => Binding::ReadWrite,
                    AddressSpace::Storage { .. } => Binding::Read,
                    other => panic!("{}: unexpected address space {other:?}", k.name),
                };
                Some((rb.binding, b))
            })
            .collect();
        found.sort_by_key(|(i, _)| *i);
        let indices: Vec<u32> = found.iter().map(|(i, _)| *i).collect();
        let want: Vec<u32> = (0..k.bindings.len() as u32).collect();
        assert_eq!(indices, want, "{}: bindings are not 0..{}", k.name, k.bindings.len());
        let kinds: Vec<Binding> = found.into_iter().map(|(_, b)| b).collect();
        assert_eq!(kinds, k.bindings, "{}: binding kinds differ from the kernel table", k.name);
    }
}
