//! `PJRT_Client`: compile, deserialize, and host-to-device copies.

use std::ffi::c_char;
use std::fmt;
use std::sync::Arc;

use super::api::{lossy_string, null_output, raw_slice, Api, MLIR_FORMAT};
use super::executable::{Buffer, LoadedExecutable};
use super::ffi;
use super::handle::{ClientInner, Device};
use super::plugin::Plugin;
use super::types::{CompileOptions, ElementType};
use super::{ErrorCode, PjrtError};

/// A PJRT client on one plugin. Executables and buffers keep their client alive.
pub struct Client {
    inner: Arc<ClientInner>,
}

impl Plugin {
    /// Creates a client. CPU plugins get `cpu_device_count = 1`; a plugin that refuses that
    /// option (invalid argument, not found or unimplemented) gets a client with no options.
    pub fn client(&self) -> Result<Client, PjrtError> {
        self.client_with_devices(1)
    }

    /// Creates a client with `devices` CPU devices (`cpu_device_count`); a plugin that refuses
    /// the option gets a client with no options, and then needs `devices` of its own.
    pub fn client_with_devices(&self, devices: u32) -> Result<Client, PjrtError> {
        let name = "cpu_device_count";
        let mut option = ffi::PJRT_NamedValue::new();
        option.name = name.as_ptr().cast::<c_char>();
        option.name_size = name.len();
        option.type_ = ffi::PJRT_NamedValue_kInt64;
        option.value = ffi::PJRT_NamedValue_Value { int64_value: i64::from(devices) };
        option.value_size = 1;
        let raw = match create_client(self.api(), std::slice::from_ref(&option)) {
            Err(PjrtError::Call {
                code: Some(ErrorCode::InvalidArgument | ErrorCode::NotFound | ErrorCode::Unimplemented),
                ..
            }) => create_client(self.api(), &[])?,
            other => other?,
        };
        self.count_client();
        let client = Client::new(*self, raw)?;
        if client.devices().len() < devices as usize {
            return Err(PjrtError::InvalidArgument(format!(
                "the plugin made a client with {} devices, {devices} were asked for",
                client.devices().len()
            )));
        }
        Ok(client)
    }
}

/// `PJRT_Client_Create` with `options`.
fn create_client(api: &Api, options: &[ffi::PJRT_NamedValue]) -> Result<*mut ffi::PJRT_Client, PjrtError> {
    let mut args = ffi::PJRT_Client_Create_Args::new();
    args.create_options = options.as_ptr();
    args.num_options = options.len();
    // SAFETY: the options and their names outlive the call; no key-value callbacks are given.
    unsafe { api.call("PJRT_Client_Create", api.table.PJRT_Client_Create, &mut args)? };
    if args.client.is_null() {
        return Err(null_output("PJRT_Client_Create"));
    }
    Ok(args.client)
}

impl Client {
    /// Takes ownership of `raw` (destroyed on error) and reads its constant properties.
    fn new(plugin: Plugin, raw: *mut ffi::PJRT_Client) -> Result<Client, PjrtError> {
        let mut inner = ClientInner {
            plugin,
            raw,
            raw_devices: Vec::new(),
            platform_name: String::new(),
            platform_version: String::new(),
            devices: Vec::new(),
        };
        let api = plugin.api();

        let mut name = ffi::PJRT_Client_PlatformName_Args::new();
        name.client = raw;
        // SAFETY: the client is live; the name lives as long as the client and is copied.
        inner.platform_name = unsafe {
            api.call("PJRT_Client_PlatformName", api.table.PJRT_Client_PlatformName, &mut name)?;
            lossy_string(name.platform_name, name.platform_name_size)
        };
        let mut version = ffi::PJRT_Client_PlatformVersion_Args::new();
        version.client = raw;
        // SAFETY: as above.
        inner.platform_version = unsafe {
            api.call("PJRT_Client_PlatformVersion", api.table.PJRT_Client_PlatformVersion, &mut version)?;
            lossy_string(version.platform_version, version.platform_version_size)
        };

        let mut devices = ffi::PJRT_Client_AddressableDevices_Args::new();
        devices.client = raw;
        // SAFETY: as above; the device list is owned by the client.
        let raw_devices = unsafe {
            api.call("PJRT_Client_AddressableDevices", api.table.PJRT_Client_AddressableDevices, &mut devices)?;
            raw_slice(devices.addressable_devices, devices.num_addressable_devices)
        };
        for &device in raw_devices {
            inner.devices.push(describe(api, device)?);
        }
        if raw_devices.is_empty() {
            return Err(PjrtError::Call {
                call: "PJRT_Client_AddressableDevices",
                code: None,
                message: "the client has no addressable device".to_string(),
            });
        }
        inner.raw_devices = raw_devices.to_vec();
        Ok(Client { inner: Arc::new(inner) })
    }

    /// The plugin this client runs on.
    pub fn plugin(&self) -> Plugin {
        self.inner.plugin
    }

    /// `PJRT_Client_PlatformName`, e.g. `cpu` or `tpu`.
    pub fn platform_name(&self) -> &str {
        &self.inner.platform_name
    }

    /// `PJRT_Client_PlatformVersion`: a human-readable version of the backend.
    pub fn platform_version(&self) -> &str {
        &self.inner.platform_version
    }

    /// The addressable devices; buffers go to the first.
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }

    /// Compiles an MLIR module (StableHLO text in pretty or generic form, MLIR bytecode, or a
    /// StableHLO portable artifact) for this client's devices.
    pub fn compile(&self, program: &[u8], options: &CompileOptions) -> Result<LoadedExecutable, PjrtError> {
        if program.is_empty() {
            return Err(PjrtError::InvalidArgument("the program is empty".to_string()));
        }
        let options = options.to_bytes();
        let api = self.inner.api();
        let mut code = ffi::PJRT_Program::new();
        // The plugin only reads `code` when compiling (it writes it only in
        // `PJRT_Executable_OptimizedProgram`).
        code.code = program.as_ptr().cast::<c_char>().cast_mut();
        code.code_size = program.len();
        code.format = MLIR_FORMAT.as_ptr().cast::<c_char>();
        code.format_size = MLIR_FORMAT.len();
        let mut args = ffi::PJRT_Client_Compile_Args::new();
        args.client = self.inner.raw;
        args.program = &code;
        args.compile_options = options.as_ptr().cast::<c_char>();
        args.compile_options_size = options.len();
        // SAFETY: the client is live; program, format and options outlive the call.
        unsafe { api.call("PJRT_Client_Compile", api.table.PJRT_Client_Compile, &mut args)? };
        LoadedExecutable::new(self.inner.clone(), args.executable, "PJRT_Client_Compile")
    }

    /// Loads an executable produced by [`LoadedExecutable::serialize`] with the same plugin
    /// build. Bytes from another build are refused by the plugin or, for some builds, load and
    /// compute garbage: key stored executables on [`Plugin::sha256`].
    pub fn deserialize(&self, bytes: &[u8]) -> Result<LoadedExecutable, PjrtError> {
        if bytes.is_empty() {
            return Err(PjrtError::InvalidArgument("the serialized executable is empty".to_string()));
        }
        let api = self.inner.api();
        let mut args = ffi::PJRT_Executable_DeserializeAndLoad_Args::new();
        args.client = self.inner.raw;
        args.serialized_executable = bytes.as_ptr().cast::<c_char>();
        args.serialized_executable_size = bytes.len();
        // SAFETY: the client is live and `bytes` outlives the call; no override options.
        unsafe {
            api.call("PJRT_Executable_DeserializeAndLoad", api.table.PJRT_Executable_DeserializeAndLoad, &mut args)?
        };
        LoadedExecutable::new(self.inner.clone(), args.loaded_executable, "PJRT_Executable_DeserializeAndLoad")
    }

    /// Copies a dense row-major host array onto the first device. Returns once the plugin no
    /// longer reads `bytes`.
    pub fn buffer_from_host(&self, bytes: &[u8], ty: ElementType, dims: &[i64]) -> Result<Buffer, PjrtError> {
        self.buffer_from_host_on(0, bytes, ty, dims)
    }

    /// [`Client::buffer_from_host`] onto device `device` (an index into [`Client::devices`]).
    pub fn buffer_from_host_on(
        &self,
        device: usize,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
    ) -> Result<Buffer, PjrtError> {
        let semantics = ffi::PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
        // SAFETY: the plugin reads `bytes` only until the event fires, which is awaited here.
        let (buffer, done) = unsafe { self.buffer_with_semantics(device, bytes, ty, dims, semantics)? };
        let api = self.inner.api();
        // SAFETY: the event was just returned by the plugin and is ours to await and destroy.
        unsafe { api.await_event("PJRT_Client_BufferFromHostBuffer", done)? };
        Ok(buffer)
    }

    /// A buffer on the first device that may use `bytes` in place (the CPU plugin aliases host
    /// memory aligned for it and copies the rest), so that weights mapped from a file are
    /// never copied.
    ///
    /// # Safety
    ///
    /// `bytes` must stay alive and unchanged until the returned buffer is dropped.
    pub unsafe fn buffer_viewing_host(&self, bytes: &[u8], ty: ElementType, dims: &[i64]) -> Result<Buffer, PjrtError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.buffer_viewing_host_on(0, bytes, ty, dims) }
    }

    /// [`Client::buffer_viewing_host`] on device `device` (an index into [`Client::devices`]).
    ///
    /// # Safety
    ///
    /// `bytes` must stay alive and unchanged until the returned buffer is dropped.
    pub unsafe fn buffer_viewing_host_on(
        &self,
        device: usize,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
    ) -> Result<Buffer, PjrtError> {
        let semantics = ffi::PJRT_HostBufferSemantics_kImmutableZeroCopy;
        // SAFETY: the caller keeps `bytes` until the buffer is dropped, which awaits the event.
        let (mut buffer, done) = unsafe { self.buffer_with_semantics(device, bytes, ty, dims, semantics)? };
        buffer.keep_until_dropped(done);
        Ok(buffer)
    }

    /// `PJRT_Client_BufferFromHostBuffer` with `semantics`: the buffer and the event that fires
    /// once the plugin no longer reads `bytes`.
    ///
    /// # Safety
    ///
    /// `bytes` must stay alive and unchanged until the event has fired.
    unsafe fn buffer_with_semantics(
        &self,
        device: usize,
        bytes: &[u8],
        ty: ElementType,
        dims: &[i64],
        semantics: std::ffi::c_int,
    ) -> Result<(Buffer, *mut ffi::PJRT_Event), PjrtError> {
        let expected = host_size(ty, dims)?;
        if bytes.len() != expected {
            return Err(PjrtError::InvalidArgument(format!(
                "{} bytes given for a {ty}{dims:?} array of {expected} bytes",
                bytes.len()
            )));
        }
        let device = *self.inner.raw_devices.get(device).ok_or_else(|| {
            PjrtError::InvalidArgument(format!("device {device} of a client with {}", self.inner.raw_devices.len()))
        })?;
        let api = self.inner.api();
        let mut args = ffi::PJRT_Client_BufferFromHostBuffer_Args::new();
        args.client = self.inner.raw;
        args.data = bytes.as_ptr().cast();
        args.type_ = ty.to_raw();
        args.dims = dims.as_ptr();
        args.num_dims = dims.len();
        args.host_buffer_semantics = semantics;
        args.device = device;
        // SAFETY: the client and device are live; `dims` outlives the call and `bytes` the
        // event (the caller's promise).
        unsafe { api.call("PJRT_Client_BufferFromHostBuffer", api.table.PJRT_Client_BufferFromHostBuffer, &mut args)? };
        match Buffer::new(self.inner.clone(), args.buffer, "PJRT_Client_BufferFromHostBuffer") {
            Ok(buffer) => Ok((buffer, args.done_with_host_buffer)),
            Err(e) => {
                // SAFETY: the event, if any, is ours; nothing holds the data any more.
                let _ = unsafe { api.await_event("PJRT_Client_BufferFromHostBuffer", args.done_with_host_buffer) };
                Err(e)
            }
        }
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("platform_name", &self.inner.platform_name)
            .field("platform_version", &self.inner.platform_version)
            .field("devices", &self.inner.devices)
            .finish()
    }
}

/// Bytes of a dense host array of `ty` with `dims`.
fn host_size(ty: ElementType, dims: &[i64]) -> Result<usize, PjrtError> {
    let element = ty
        .byte_size()
        .ok_or_else(|| PjrtError::InvalidArgument(format!("element type `{ty}` has no whole-byte host layout")))?;
    dims.iter().try_fold(element, |size, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| size.checked_mul(d))
            .ok_or_else(|| PjrtError::InvalidArgument(format!("invalid dimensions {dims:?} for a host array")))
    })
}

/// Reads a device's id and kind.
fn describe(api: &Api, device: *mut ffi::PJRT_Device) -> Result<Device, PjrtError> {
    let mut description = ffi::PJRT_Device_GetDescription_Args::new();
    description.device = device;
    // SAFETY: `device` is owned by a live client; the description is owned by the device.
    unsafe { api.call("PJRT_Device_GetDescription", api.table.PJRT_Device_GetDescription, &mut description)? };
    let mut id = ffi::PJRT_DeviceDescription_Id_Args::new();
    id.device_description = description.device_description;
    // SAFETY: as above.
    unsafe { api.call("PJRT_DeviceDescription_Id", api.table.PJRT_DeviceDescription_Id, &mut id)? };
    let mut kind = ffi::PJRT_DeviceDescription_Kind_Args::new();
    kind.device_description = description.device_description;
    // SAFETY: as above; the kind string lives as long as the device and is copied.
    let kind = unsafe {
        api.call("PJRT_DeviceDescription_Kind", api.table.PJRT_DeviceDescription_Kind, &mut kind)?;
        lossy_string(kind.device_kind, kind.device_kind_size)
    };
    Ok(Device { id: id.id, kind })
}
