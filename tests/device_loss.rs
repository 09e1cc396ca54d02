//! Device loss: the GPU device destroyed in the middle of a session (as a driver reset or
//! the browser would) is reported as `Error::DeviceLost` by every later call, never a panic,
//! and loading again continues on a new device from a new adapter, giving the same frames.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::rc::Rc;

use inferencelayer::{Error, GpuContext};

#[test]
fn a_lost_device_is_reported_and_a_reload_continues_on_a_new_device() {
    pollster::block_on(async {
        let m = common::small::small(None);
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        eprintln!("adapter: {}", ctx.info);
        let mut session = m.session(&ctx).await.expect("session");
        let mut before = Vec::new();
        for i in 0..6 {
            before.push(session.step(&m.frame(i)).await.expect("frame before the loss"));
        }
        assert!(before.iter().filter(|f| f.is_some()).count() >= 4, "LMGen yields");

        // The device goes away under the session, as a driver reset would take it.
        ctx.device.destroy();
        let e = session.step(&m.frame(6)).await.expect_err("a frame on a lost device");
        eprintln!("after the loss: {e}");
        assert!(matches!(e, Error::DeviceLost(_)), "expected DeviceLost, got {e:?}");
        assert!(e.to_string().contains("load the models again"), "the error says what to do: {e}");
        assert!(ctx.lost().is_some());
        // Every later call says the same, and nothing panics.
        for i in 7..9 {
            let e = session.step(&m.frame(i)).await.expect_err("still lost");
            assert!(matches!(e, Error::DeviceLost(_)), "{e:?}");
        }
        session.reset();
        assert!(matches!(session.step_codes(&[0; 8]).await, Err(Error::DeviceLost(_))));
        // Loading onto the lost device is refused the same way.
        assert!(matches!(m.session(&ctx).await, Err(Error::DeviceLost(_))), "a load onto the lost device");
        drop(session);

        // Reload: a new adapter, a new device, the weights loaded again.
        let ctx2 = Rc::new(GpuContext::new().await.expect("a new adapter"));
        assert!(ctx2.lost().is_none());
        let mut again = m.session(&ctx2).await.expect("the session again");
        for (i, want) in before.iter().enumerate() {
            let got = again.step(&m.frame(i)).await.expect("frame after the reload");
            assert_eq!(&got, want, "frame {i} after the reload differs from before the loss");
        }

        // GpuContext::destroy is the same loss, known at once.
        ctx2.destroy();
        assert!(matches!(again.step(&m.frame(6)).await, Err(Error::DeviceLost(_))));
    });
}
