//! Deviceless ahead-of-time compilation: a TPU topology described by name, and `PJRT_Compile`.
//!
//! libtpu compiles for a TPU slice it does not have: `PJRT_TopologyDescription_Create` turns a
//! name such as `v5e:2x2` into a description of the chips, and `PJRT_Compile` with that
//! description and no client produces an [`Executable`] that is serialized here and loaded on a
//! TPU host running the same libtpu build.
//!
//! libtpu reads two environment variables when it is initialized, see
//! [`prepare_libtpu_environment`](super::prepare_libtpu_environment).

use std::ffi::c_char;
use std::fmt;

use super::api::{lossy_string, null_output, Api, MLIR_FORMAT};
use super::executable::Executable;
use super::ffi;
use super::plugin::Plugin;
use super::types::CompileOptions;
use super::PjrtError;

/// A description of a TPU slice to compile for (`PJRT_TopologyDescription`), destroyed on drop.
pub struct Topology {
    plugin: Plugin,
    raw: *mut ffi::PJRT_TopologyDescription,
    name: String,
    platform_name: String,
    platform_version: String,
}

// SAFETY: a topology description is immutable after creation and PJRT allows its use (reads,
// compiles) from any thread; the pointer is owned by this value and the plugin is never unloaded.
unsafe impl Send for Topology {}
// SAFETY: as above; no method mutates this value.
unsafe impl Sync for Topology {}

impl Plugin {
    /// Describes the TPU slice `name` (`PJRT_TopologyDescription_Create` with no options), e.g.
    /// `v5e:1x1`, `v5e:2x2`, `v6e:1x1`, `v5p:2x2x1` or `tpu7x:1x1x1`: a generation, a colon and
    /// the chip grid. A name the plugin does not know is a [`PjrtError::Call`] with its message;
    /// a plugin without deviceless compilation (the CPU plugins) answers the same way.
    pub fn topology(&self, name: &str) -> Result<Topology, PjrtError> {
        if name.is_empty() {
            return Err(PjrtError::InvalidArgument("the topology name is empty".to_string()));
        }
        let api = self.api();
        let mut args = ffi::PJRT_TopologyDescription_Create_Args::new();
        args.topology_name = name.as_ptr().cast::<c_char>();
        args.topology_name_size = name.len();
        // SAFETY: the name outlives the call (it is read with its size, not as a C string); no
        // create options are given. What libtpu logs meanwhile is kept unless the call fails.
        let (created, log) = super::quiet::captured(|| unsafe {
            api.call("PJRT_TopologyDescription_Create", api.table.PJRT_TopologyDescription_Create, &mut args)
        });
        created.inspect_err(|_| eprint!("{log}"))?;
        if args.topology.is_null() {
            return Err(null_output("PJRT_TopologyDescription_Create"));
        }
        self.count_topology();
        // Own it first, so that it is destroyed if a read-out below fails.
        let mut topology = Topology {
            plugin: *self,
            raw: args.topology,
            name: name.to_string(),
            platform_name: String::new(),
            platform_version: String::new(),
        };

        let mut platform = ffi::PJRT_TopologyDescription_PlatformName_Args::new();
        platform.topology = topology.raw;
        // SAFETY: the topology is live; the name has its lifetime and is copied.
        topology.platform_name = unsafe {
            api.call(
                "PJRT_TopologyDescription_PlatformName",
                api.table.PJRT_TopologyDescription_PlatformName,
                &mut platform,
            )?;
            lossy_string(platform.platform_name, platform.platform_name_size)
        };
        let mut version = ffi::PJRT_TopologyDescription_PlatformVersion_Args::new();
        version.topology = topology.raw;
        // SAFETY: as above.
        topology.platform_version = unsafe {
            api.call(
                "PJRT_TopologyDescription_PlatformVersion",
                api.table.PJRT_TopologyDescription_PlatformVersion,
                &mut version,
            )?;
            lossy_string(version.platform_version, version.platform_version_size)
        };
        Ok(topology)
    }
}

impl Topology {
    fn api(&self) -> &'static Api {
        self.plugin.api()
    }

    /// The plugin that described the topology.
    pub fn plugin(&self) -> Plugin {
        self.plugin
    }

    /// The name the topology was created from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `PJRT_TopologyDescription_PlatformName`: `tpu` for libtpu.
    pub fn platform_name(&self) -> &str {
        &self.platform_name
    }

    /// `PJRT_TopologyDescription_PlatformVersion`, read at creation: the generation and the
    /// plugin build, e.g. `TFRT TPU v5 lite` and a `Built on ...` line for `v5e`.
    pub fn platform_version(&self) -> &str {
        &self.platform_version
    }

    /// Compiles an MLIR module (StableHLO text in pretty or generic form, MLIR bytecode, or a
    /// StableHLO portable artifact) for this topology without a client (`PJRT_Compile`).
    ///
    /// The options must assign devices that exist in the topology; libtpu accepts both
    /// [`CompileOptions::partitions`] and [`CompileOptions::single_device`] for one partition.
    /// The executable does not borrow the topology.
    pub fn compile(&self, program: &[u8], options: &CompileOptions) -> Result<Executable, PjrtError> {
        if program.is_empty() {
            return Err(PjrtError::InvalidArgument("the program is empty".to_string()));
        }
        let options = options.to_bytes();
        let api = self.api();
        let mut code = ffi::PJRT_Program::new();
        // The plugin only reads `code` when compiling.
        code.code = program.as_ptr().cast::<c_char>().cast_mut();
        code.code_size = program.len();
        code.format = MLIR_FORMAT.as_ptr().cast::<c_char>();
        code.format_size = MLIR_FORMAT.len();
        let mut args = ffi::PJRT_Compile_Args::new();
        args.topology = self.raw;
        args.program = &code;
        args.compile_options = options.as_ptr().cast::<c_char>();
        args.compile_options_size = options.len();
        // SAFETY: the topology is live; program, format and options outlive the call; a null
        // client asks for a deviceless compile.
        unsafe { api.call("PJRT_Compile", api.table.PJRT_Compile, &mut args)? };
        Executable::new(self.plugin, args.executable, "PJRT_Compile")
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let api = self.api();
        let mut args = ffi::PJRT_TopologyDescription_Destroy_Args::new();
        args.topology = self.raw;
        // SAFETY: the topology is live and not used after this; a destroy error cannot be
        // reported from `drop` and is freed.
        let _ = unsafe {
            api.call("PJRT_TopologyDescription_Destroy", api.table.PJRT_TopologyDescription_Destroy, &mut args)
        };
    }
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("name", &self.name)
            .field("platform_name", &self.platform_name)
            .field("platform_version", &self.platform_version)
            .finish()
    }
}
