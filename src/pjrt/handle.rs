//! The owned `PJRT_Client*` that a client, its executables and its buffers share (each holds an
//! `Arc` of it, so the last one destroys it), and the devices it addresses.

use super::api::Api;
use super::ffi;
use super::plugin::Plugin;

/// The owned `PJRT_Client*`, destroyed when the last client, executable or buffer goes.
pub(super) struct ClientInner {
    pub(super) plugin: Plugin,
    pub(super) raw: *mut ffi::PJRT_Client,
    /// The addressable devices, in the plugin's order: buffers go to the first unless a device
    /// is named.
    pub(super) raw_devices: Vec<*mut ffi::PJRT_Device>,
    pub(super) platform_name: String,
    pub(super) platform_version: String,
    pub(super) devices: Vec<Device>,
}

// SAFETY: a `PJRT_Client` may be used from any thread and concurrently: PJRT clients are
// thread-safe (frameworks call compile, transfers and execute from many threads), and this type
// only reads its fields after construction. The device pointer is owned by the client.
unsafe impl Send for ClientInner {}
// SAFETY: as above.
unsafe impl Sync for ClientInner {}

impl ClientInner {
    pub(super) fn api(&self) -> &'static Api {
        self.plugin.api()
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        let api = self.api();
        let mut args = ffi::PJRT_Client_Destroy_Args::new();
        args.client = self.raw;
        // SAFETY: the client is live, and nothing refers to it any more (executables and buffers
        // hold this `Arc`). A destroy error cannot be reported from `drop`; it is freed.
        let _ = unsafe { api.call("PJRT_Client_Destroy", api.table.PJRT_Client_Destroy, &mut args) };
    }
}

/// An addressable device of a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// `PJRT_DeviceDescription_Id`: unique among the client's devices.
    pub id: i32,
    /// `PJRT_DeviceDescription_Kind`, e.g. `cpu`.
    pub kind: String,
}
