//! Executables and device buffers.

use std::fmt;
use std::ptr;
use std::sync::Arc;

use super::api::{lossy_string, named_values, null_output, raw_slice, Api, AttributeValue};
use super::ffi;
use super::handle::ClientInner;
use super::plugin::Plugin;
use super::types::ElementType;
use super::PjrtError;

/// A compiled program loaded on a client's devices.
pub struct LoadedExecutable {
    client: Arc<ClientInner>,
    raw: *mut ffi::PJRT_LoadedExecutable,
    num_outputs: usize,
}

// SAFETY: PJRT loaded executables are thread-safe (execute may run concurrently), the pointer is
// owned by this value, and the client it needs is kept alive by the `Arc`.
unsafe impl Send for LoadedExecutable {}
// SAFETY: as above; no method mutates this value.
unsafe impl Sync for LoadedExecutable {}

impl LoadedExecutable {
    /// Takes ownership of `raw`, the output of `call`, and reads its output count.
    pub(super) fn new(
        client: Arc<ClientInner>,
        raw: *mut ffi::PJRT_LoadedExecutable,
        call: &'static str,
    ) -> Result<LoadedExecutable, PjrtError> {
        if raw.is_null() {
            return Err(null_output(call));
        }
        let mut executable = LoadedExecutable { client, raw, num_outputs: 0 };
        let num_outputs = executable.unloaded()?.num_outputs()?;
        executable.num_outputs = num_outputs;
        Ok(executable)
    }

    fn api(&self) -> &'static Api {
        self.client.api()
    }

    /// The executable behind this loaded one (`PJRT_LoadedExecutable_GetExecutable`).
    fn unloaded(&self) -> Result<RawExecutable<'_>, PjrtError> {
        let api = self.api();
        let mut args = ffi::PJRT_LoadedExecutable_GetExecutable_Args::new();
        args.loaded_executable = self.raw;
        // SAFETY: the loaded executable is live; the result is ours to destroy.
        unsafe {
            api.call("PJRT_LoadedExecutable_GetExecutable", api.table.PJRT_LoadedExecutable_GetExecutable, &mut args)?
        };
        if args.executable.is_null() {
            return Err(null_output("PJRT_LoadedExecutable_GetExecutable"));
        }
        Ok(RawExecutable { api, raw: args.executable, _owner: std::marker::PhantomData })
    }

    /// Outputs per device (`PJRT_Executable_NumOutputs`).
    pub fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    /// Serializes the executable; [`super::Client::deserialize`] on the same plugin build loads it.
    pub fn serialize(&self) -> Result<Vec<u8>, PjrtError> {
        self.unloaded()?.serialize()
    }

    /// `PJRT_Executable_SizeOfGeneratedCodeInBytes`.
    pub fn generated_code_bytes(&self) -> Result<i64, PjrtError> {
        self.unloaded()?.generated_code_bytes()
    }

    /// `PJRT_Executable_GetCompiledMemoryStats`.
    pub fn memory_stats(&self) -> Result<MemoryStats, PjrtError> {
        self.unloaded()?.memory_stats()
    }

    /// See [`Executable::optimized_program`].
    pub fn optimized_program(&self) -> Result<(String, Vec<u8>), PjrtError> {
        self.unloaded()?.optimized_program()
    }

    /// Runs the executable on its one device and waits until the outputs are computed. No
    /// argument is donated.
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>, PjrtError> {
        Ok(self.execute_on_devices(&[args.to_vec()], Donation::None)?.remove(0))
    }

    /// Runs an executable compiled for `args.len()` devices (one partition each, in the
    /// client's device order): `args[d]` are device `d`'s arguments, each a buffer on that
    /// device. Waits until every device's outputs are computed; per device, its outputs.
    ///
    /// With [`Donation::Aliased`], each argument the program aliases to a result
    /// (`tf.aliasing_output`) gives its memory to that result and is deleted: it must be an
    /// owned buffer (not a view of host memory), and the caller must not read it again.
    pub fn execute_on_devices(&self, args: &[Vec<&Buffer>], donation: Donation) -> Result<Vec<Vec<Buffer>>, PjrtError> {
        let num_args = args.first().map_or(0, Vec::len);
        for (d, list) in args.iter().enumerate() {
            if list.len() != num_args {
                return Err(PjrtError::InvalidArgument(format!(
                    "device {d} has {} arguments, device 0 {num_args}",
                    list.len()
                )));
            }
            if let Some(i) = list.iter().position(|b| !Arc::ptr_eq(&b.client, &self.client)) {
                return Err(PjrtError::InvalidArgument(format!(
                    "argument {i} of device {d} is a buffer of another client"
                )));
            }
        }
        let api = self.api();
        let raw_args: Vec<Vec<*mut ffi::PJRT_Buffer>> =
            args.iter().map(|l| l.iter().map(|b| b.raw).collect()).collect();
        let arg_lists: Vec<*const *mut ffi::PJRT_Buffer> = raw_args.iter().map(|l| l.as_ptr()).collect();
        let mut outputs: Vec<Vec<*mut ffi::PJRT_Buffer>> = vec![vec![ptr::null_mut(); self.num_outputs]; args.len()];
        let output_lists: Vec<*mut *mut ffi::PJRT_Buffer> = outputs.iter_mut().map(|l| l.as_mut_ptr()).collect();
        let mut done: Vec<*mut ffi::PJRT_Event> = vec![ptr::null_mut(); args.len()];
        // PJRT donates every aliased argument not listed here.
        let kept: Vec<i64> = match donation {
            Donation::Aliased => Vec::new(),
            Donation::None => (0..num_args as i64).collect(),
        };
        let mut options = ffi::PJRT_ExecuteOptions::new();
        options.non_donatable_input_indices = kept.as_ptr();
        options.num_non_donatable_input_indices = kept.len();
        let mut execute = ffi::PJRT_LoadedExecutable_Execute_Args::new();
        execute.executable = self.raw;
        execute.options = &mut options;
        execute.argument_lists = arg_lists.as_ptr();
        execute.num_devices = args.len();
        execute.num_args = num_args;
        execute.output_lists = output_lists.as_ptr();
        execute.device_complete_events = done.as_mut_ptr();
        // SAFETY: the executable and argument buffers are live and belong to this client; the
        // argument lists, the output lists (`num_outputs` slots each, as the executable reports)
        // and the event slots (one per device) outlive the call.
        unsafe { api.call("PJRT_LoadedExecutable_Execute", api.table.PJRT_LoadedExecutable_Execute, &mut execute)? };
        // Own every output before anything else can fail, so none leaks.
        let outputs: Vec<Vec<Result<Buffer, PjrtError>>> = outputs
            .into_iter()
            .map(|l| {
                l.into_iter()
                    .map(|raw| Buffer::new(self.client.clone(), raw, "PJRT_LoadedExecutable_Execute"))
                    .collect()
            })
            .collect();
        // Every event is awaited (and destroyed), the first failure reported.
        let mut failed = None;
        for event in done {
            // SAFETY: each completion event was just returned by the plugin and is ours.
            if let Err(e) = unsafe { api.await_event("PJRT_LoadedExecutable_Execute", event) } {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        outputs.into_iter().map(|l| l.into_iter().collect()).collect()
    }
}

/// Which arguments of a call give their memory to the results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Donation {
    /// None: an aliased result is a copy of its argument, updated.
    None,
    /// Every argument the program aliases to a result.
    Aliased,
}

impl Drop for LoadedExecutable {
    fn drop(&mut self) {
        let api = self.api();
        let mut args = ffi::PJRT_LoadedExecutable_Destroy_Args::new();
        args.executable = self.raw;
        // SAFETY: the executable is live and not used after this; a destroy error cannot be
        // reported from `drop` and is freed.
        let _ =
            unsafe { api.call("PJRT_LoadedExecutable_Destroy", api.table.PJRT_LoadedExecutable_Destroy, &mut args) };
    }
}

impl fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedExecutable").field("num_outputs", &self.num_outputs).finish_non_exhaustive()
    }
}

/// A compiled program that is not loaded on any device: the result of a deviceless compile
/// ([`super::Topology::compile`]). It serializes itself and reports its code size and memory
/// use; loading it needs a host with the target's devices and the same plugin build.
pub struct Executable {
    plugin: Plugin,
    raw: RawExecutable<'static>,
}

impl Executable {
    /// Takes ownership of `raw`, the output of `call`, which must own itself (not come from a
    /// loaded executable).
    pub(super) fn new(
        plugin: Plugin,
        raw: *mut ffi::PJRT_Executable,
        call: &'static str,
    ) -> Result<Executable, PjrtError> {
        if raw.is_null() {
            return Err(null_output(call));
        }
        Ok(Executable { plugin, raw: RawExecutable { api: plugin.api(), raw, _owner: std::marker::PhantomData } })
    }

    /// The plugin that compiled it.
    pub fn plugin(&self) -> Plugin {
        self.plugin
    }

    /// The serialized executable (`PJRT_Executable_Serialize`).
    ///
    /// The bytes depend on the program, options, topology and plugin build, and on how many
    /// modules the process compiled before: XLA numbers modules with a process-wide counter that
    /// the executable records. The first compiles of two processes give identical bytes; a
    /// second compile of the same program in one process does not.
    pub fn serialize(&self) -> Result<Vec<u8>, PjrtError> {
        self.raw.serialize()
    }

    /// `PJRT_Executable_SizeOfGeneratedCodeInBytes`.
    pub fn generated_code_bytes(&self) -> Result<i64, PjrtError> {
        self.raw.generated_code_bytes()
    }

    /// `PJRT_Executable_GetCompiledMemoryStats`.
    pub fn memory_stats(&self) -> Result<MemoryStats, PjrtError> {
        self.raw.memory_stats()
    }

    /// `PJRT_Executable_NumPartitions`: devices one replica of the program spans.
    pub fn num_partitions(&self) -> Result<usize, PjrtError> {
        self.raw.num_partitions()
    }

    /// XLA's cost model of the program (`PJRT_Executable_GetCostAnalysis`): named figures such
    /// as `flops` and `bytes accessed`, as the plugin reports them.
    pub fn cost_analysis(&self) -> Result<Vec<(String, AttributeValue)>, PjrtError> {
        self.raw.cost_analysis()
    }

    /// Outputs per device (`PJRT_Executable_NumOutputs`).
    pub fn num_outputs(&self) -> Result<usize, PjrtError> {
        self.raw.num_outputs()
    }

    /// The program as XLA optimized it, for one device (`PJRT_Executable_OptimizedProgram`):
    /// its format (`hlo_with_config`: a serialized `xla.HloModuleProtoWithConfig`) and bytes.
    pub fn optimized_program(&self) -> Result<(String, Vec<u8>), PjrtError> {
        self.raw.optimized_program()
    }
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executable").field("plugin", &self.plugin.path()).finish_non_exhaustive()
    }
}

/// What a compiled program needs in memory (`PJRT_Executable_GetCompiledMemoryStats`), in bytes,
/// with the header's field names. Device fields are about the default memory (HBM on a TPU).
///
/// The fields from `total_size_in_bytes` on were added to the C API in 0.90 and 0.104; a plugin
/// that predates them leaves them 0. libtpu's `generated_code_size_in_bytes` is not
/// [`Executable::generated_code_bytes`]: it counts more than the program's instructions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MemoryStats {
    pub generated_code_size_in_bytes: i64,
    pub argument_size_in_bytes: i64,
    pub output_size_in_bytes: i64,
    /// Argument bytes reused for outputs.
    pub alias_size_in_bytes: i64,
    pub temp_size_in_bytes: i64,
    pub host_generated_code_size_in_bytes: i64,
    pub host_argument_size_in_bytes: i64,
    pub host_output_size_in_bytes: i64,
    pub host_alias_size_in_bytes: i64,
    pub host_temp_size_in_bytes: i64,
    pub peak_memory_in_bytes: i64,
    pub total_size_in_bytes: i64,
    pub total_allocation_bytes: i64,
    pub indefinite_allocations: i64,
    pub peak_unpadded_heap_bytes: i64,
}

/// An owned `PJRT_Executable*` (compiled, not loaded), destroyed on drop. One that comes from a
/// loaded executable may not outlive it (`'a`); `RawExecutable<'static>` owns itself.
pub(super) struct RawExecutable<'a> {
    api: &'static Api,
    raw: *mut ffi::PJRT_Executable,
    _owner: std::marker::PhantomData<&'a LoadedExecutable>,
}

// SAFETY: a compiled executable is immutable, PJRT allows reading and serializing it from any
// thread, and the pointer is owned by this value (a borrowed owner is `Sync`, see
// `LoadedExecutable`).
unsafe impl Send for RawExecutable<'_> {}
// SAFETY: as above; no method mutates this value.
unsafe impl Sync for RawExecutable<'_> {}

impl RawExecutable<'_> {
    /// `PJRT_Executable_NumOutputs`.
    pub(super) fn num_outputs(&self) -> Result<usize, PjrtError> {
        let mut args = ffi::PJRT_Executable_NumOutputs_Args::new();
        args.executable = self.raw;
        // SAFETY: the executable is live.
        unsafe { self.api.call("PJRT_Executable_NumOutputs", self.api.table.PJRT_Executable_NumOutputs, &mut args)? };
        Ok(args.num_outputs)
    }

    /// `PJRT_Executable_NumPartitions`.
    fn num_partitions(&self) -> Result<usize, PjrtError> {
        let mut args = ffi::PJRT_Executable_NumPartitions_Args::new();
        args.executable = self.raw;
        // SAFETY: the executable is live.
        unsafe {
            self.api.call("PJRT_Executable_NumPartitions", self.api.table.PJRT_Executable_NumPartitions, &mut args)?
        };
        Ok(args.num_partitions)
    }

    /// `PJRT_Executable_SizeOfGeneratedCodeInBytes`.
    fn generated_code_bytes(&self) -> Result<i64, PjrtError> {
        let mut args = ffi::PJRT_Executable_SizeOfGeneratedCodeInBytes_Args::new();
        args.executable = self.raw;
        // SAFETY: the executable is live.
        unsafe {
            self.api.call(
                "PJRT_Executable_SizeOfGeneratedCodeInBytes",
                self.api.table.PJRT_Executable_SizeOfGeneratedCodeInBytes,
                &mut args,
            )?
        };
        Ok(args.size_in_bytes)
    }

    /// `PJRT_Executable_OptimizedProgram`, asked for its size and then for its bytes.
    fn optimized_program(&self) -> Result<(String, Vec<u8>), PjrtError> {
        let mut program = ffi::PJRT_Program::new();
        let mut args = ffi::PJRT_Executable_OptimizedProgram_Args::new();
        args.executable = self.raw;
        args.program = &mut program;
        let call = "PJRT_Executable_OptimizedProgram";
        // SAFETY: the executable is live; with a null `code`, the plugin only writes the size
        // and the format (a string it owns, copied below before the executable can go).
        unsafe { self.api.call(call, self.api.table.PJRT_Executable_OptimizedProgram, &mut args)? };
        // SAFETY: the format string is the plugin's, alive with the executable; it is copied.
        let format = unsafe { lossy_string(program.format, program.format_size) };
        let mut code = vec![0u8; program.code_size];
        program.code = code.as_mut_ptr().cast();
        args.program = &mut program;
        // SAFETY: `code` has the `code_size` bytes the plugin asked for and outlives the call.
        unsafe { self.api.call(call, self.api.table.PJRT_Executable_OptimizedProgram, &mut args)? };
        code.truncate(program.code_size);
        Ok((format, code))
    }

    /// `PJRT_Executable_GetCostAnalysis`, copied.
    fn cost_analysis(&self) -> Result<Vec<(String, AttributeValue)>, PjrtError> {
        let mut args = ffi::PJRT_Executable_GetCostAnalysis_Args::new();
        args.executable = self.raw;
        // SAFETY: the executable is live.
        unsafe {
            self.api.call(
                "PJRT_Executable_GetCostAnalysis",
                self.api.table.PJRT_Executable_GetCostAnalysis,
                &mut args,
            )?
        };
        // SAFETY: the properties live as long as the executable, which outlives this call.
        Ok(unsafe { named_values(args.properties, args.num_properties) })
    }

    /// `PJRT_Executable_GetCompiledMemoryStats`.
    fn memory_stats(&self) -> Result<MemoryStats, PjrtError> {
        let mut args = ffi::PJRT_Executable_GetCompiledMemoryStats_Args::new();
        args.executable = self.raw;
        // SAFETY: the executable is live; the plugin writes at most `struct_size` bytes, which
        // is the size of `args` without its tail padding.
        unsafe {
            self.api.call(
                "PJRT_Executable_GetCompiledMemoryStats",
                self.api.table.PJRT_Executable_GetCompiledMemoryStats,
                &mut args,
            )?
        };
        Ok(MemoryStats {
            generated_code_size_in_bytes: args.generated_code_size_in_bytes,
            argument_size_in_bytes: args.argument_size_in_bytes,
            output_size_in_bytes: args.output_size_in_bytes,
            alias_size_in_bytes: args.alias_size_in_bytes,
            temp_size_in_bytes: args.temp_size_in_bytes,
            host_generated_code_size_in_bytes: args.host_generated_code_size_in_bytes,
            host_argument_size_in_bytes: args.host_argument_size_in_bytes,
            host_output_size_in_bytes: args.host_output_size_in_bytes,
            host_alias_size_in_bytes: args.host_alias_size_in_bytes,
            host_temp_size_in_bytes: args.host_temp_size_in_bytes,
            peak_memory_in_bytes: args.peak_memory_in_bytes,
            total_size_in_bytes: args.total_size_in_bytes,
            total_allocation_bytes: args.total_allocation_bytes,
            indefinite_allocations: args.indefinite_allocations,
            peak_unpadded_heap_bytes: args.peak_unpadded_heap_bytes,
        })
    }

    /// `PJRT_Executable_Serialize`, copied out of the plugin's storage.
    pub(super) fn serialize(&self) -> Result<Vec<u8>, PjrtError> {
        let mut args = ffi::PJRT_Executable_Serialize_Args::new();
        args.executable = self.raw;
        // SAFETY: the executable is live. The bytes live until the deleter runs; they are copied
        // first, and the deleter is called once.
        unsafe {
            self.api.call("PJRT_Executable_Serialize", self.api.table.PJRT_Executable_Serialize, &mut args)?;
            let bytes = raw_slice(args.serialized_bytes.cast::<u8>(), args.serialized_bytes_size).to_vec();
            if let Some(deleter) = args.serialized_executable_deleter {
                deleter(args.serialized_executable);
            }
            Ok(bytes)
        }
    }
}

impl Drop for RawExecutable<'_> {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Executable_Destroy_Args::new();
        args.executable = self.raw;
        // SAFETY: the executable is live and not used after this; errors are freed.
        let _ = unsafe { self.api.call("PJRT_Executable_Destroy", self.api.table.PJRT_Executable_Destroy, &mut args) };
    }
}

/// An array on a device.
pub struct Buffer {
    client: Arc<ClientInner>,
    raw: *mut ffi::PJRT_Buffer,
    /// For a buffer that may alias host memory: the event that fires once the plugin no longer
    /// reads it, awaited after the buffer is destroyed.
    done_with_host: Option<*mut ffi::PJRT_Event>,
}

// SAFETY: PJRT buffers are thread-safe (reads and copies may run concurrently), the pointer is
// owned by this value, and the client is kept alive by the `Arc`.
unsafe impl Send for Buffer {}
// SAFETY: as above; no method mutates this value.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Takes ownership of `raw`, the output of `call`.
    pub(super) fn new(
        client: Arc<ClientInner>,
        raw: *mut ffi::PJRT_Buffer,
        call: &'static str,
    ) -> Result<Buffer, PjrtError> {
        if raw.is_null() {
            return Err(null_output(call));
        }
        Ok(Buffer { client, raw, done_with_host: None })
    }

    /// Makes the buffer await `event` (its host data no longer read) when it is dropped.
    pub(super) fn keep_until_dropped(&mut self, event: *mut ffi::PJRT_Event) {
        self.done_with_host = Some(event);
    }

    fn api(&self) -> &'static Api {
        self.client.api()
    }

    /// `PJRT_Buffer_Dimensions`.
    pub fn dims(&self) -> Result<Vec<i64>, PjrtError> {
        let api = self.api();
        let mut args = ffi::PJRT_Buffer_Dimensions_Args::new();
        args.buffer = self.raw;
        // SAFETY: the buffer is live; the dims it returns live as long as it and are copied.
        unsafe {
            api.call("PJRT_Buffer_Dimensions", api.table.PJRT_Buffer_Dimensions, &mut args)?;
            Ok(raw_slice(args.dims, args.num_dims).to_vec())
        }
    }

    /// `PJRT_Buffer_ElementType`.
    pub fn element_type(&self) -> Result<ElementType, PjrtError> {
        let api = self.api();
        let mut args = ffi::PJRT_Buffer_ElementType_Args::new();
        args.buffer = self.raw;
        // SAFETY: the buffer is live.
        unsafe { api.call("PJRT_Buffer_ElementType", api.table.PJRT_Buffer_ElementType, &mut args)? };
        ElementType::from_raw(args.type_).ok_or_else(|| PjrtError::Call {
            call: "PJRT_Buffer_ElementType",
            code: None,
            message: format!("unknown element type {}", args.type_),
        })
    }

    /// Copies the array to the host in dense row-major order and waits for the copy.
    pub fn to_host(&self) -> Result<Vec<u8>, PjrtError> {
        const CALL: &str = "PJRT_Buffer_ToHostBuffer";
        let api = self.api();
        let mut query = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        query.src = self.raw;
        // SAFETY: the buffer is live; with a null `dst` the plugin only sets `dst_size`.
        unsafe {
            api.call(CALL, api.table.PJRT_Buffer_ToHostBuffer, &mut query)?;
            api.await_event(CALL, query.event)?;
        }
        let mut host = vec![0u8; query.dst_size];
        let mut copy = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        copy.src = self.raw;
        copy.dst = host.as_mut_ptr().cast();
        copy.dst_size = host.len();
        // SAFETY: the buffer is live and `host` has `dst_size` writable bytes; it is neither
        // read nor freed until the copy event has fired (awaited here, also on error).
        unsafe {
            api.call(CALL, api.table.PJRT_Buffer_ToHostBuffer, &mut copy)?;
            api.await_event(CALL, copy.event)?;
        }
        Ok(host)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let api = self.api();
        let mut args = ffi::PJRT_Buffer_Destroy_Args::new();
        args.buffer = self.raw;
        // SAFETY: the buffer is live and not used after this; errors are freed.
        let _ = unsafe { api.call("PJRT_Buffer_Destroy", api.table.PJRT_Buffer_Destroy, &mut args) };
        if let Some(event) = self.done_with_host.take() {
            // SAFETY: the event came with this buffer, which no longer exists, so it fires now.
            let _ = unsafe { api.await_event("PJRT_Client_BufferFromHostBuffer", event) };
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("element_type", &self.element_type().ok())
            .field("dims", &self.dims().ok())
            .finish()
    }
}
