//! `#[repr(C)]` mirror of the parts of `pjrt_c_api.h` (openxla/xla, `xla/pjrt/c/`) this crate calls.
//!
//! Names follow the header so every struct can be checked against it by eye. The header is
//! append-only within major version 0 since 0.57 (the last reordering of `PJRT_Api`): new
//! functions go at the end of the table and new fields at the end of the structs. So a prefix of
//! a newer header is valid for an older plugin, provided that
//!
//! - a function slot is read only when the plugin's `PJRT_Api::struct_size` covers it
//!   ([`PJRT_Api`] is copied from the plugin with the slots it lacks left `None`), and
//! - each `*_Args::struct_size` is the header's `PJRT_STRUCT_SIZE` (offset of the last field plus
//!   its size, which excludes tail padding), so the plugin knows which fields we provide.
//!
//! Field layouts are those of API 0.94 plus the later tail fields noted on each struct. Enums
//! that the plugin writes are plain `i32`s: an unknown value must not become an invalid Rust enum.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

/// The major API version this layout is written for.
pub(super) const PJRT_API_MAJOR: i32 = 0;
/// The oldest minor version with this function-table order.
pub(super) const PJRT_API_MINOR_MIN: i32 = 57;

/// Declares opaque handle types.
macro_rules! opaque {
    ($($name:ident),* $(,)?) => {
        $(
            #[repr(C)]
            pub(crate) struct $name {
                _private: [u8; 0],
            }
        )*
    };
}

opaque!(
    PJRT_Error,
    PJRT_Event,
    PJRT_Client,
    PJRT_Device,
    PJRT_DeviceDescription,
    PJRT_Memory,
    PJRT_TopologyDescription,
    PJRT_Executable,
    PJRT_LoadedExecutable,
    PJRT_Buffer,
    PJRT_SerializedExecutable,
    PJRT_ExecuteContext,
    PJRT_MultiSlice_Config,
    PJRT_Extension_Base,
);

/// Declares an argument struct: `struct_size` and `extension_start` first, then the fields in
/// header order. `STRUCT_SIZE` is the end of the last field (`PJRT_STRUCT_SIZE`), and `new()`
/// returns a zeroed struct with `struct_size` set.
macro_rules! args {
    ($(#[$meta:meta])* $name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[repr(C)]
        pub(crate) struct $name {
            pub(crate) struct_size: usize,
            pub(crate) extension_start: *mut PJRT_Extension_Base,
            $(pub(crate) $field: $ty,)*
        }

        impl $name {
            /// `PJRT_STRUCT_SIZE(type, last_field)`: without tail padding.
            pub(crate) const STRUCT_SIZE: usize = {
                #[allow(unused_mut)]
                let mut end = offset_of!($name, extension_start) + size_of::<*mut c_void>();
                $(
                    let field_end = offset_of!($name, $field) + size_of::<$ty>();
                    if field_end > end {
                        end = field_end;
                    }
                )*
                end
            };

            /// A zeroed struct (null pointers, zero counts) with `struct_size` set.
            #[allow(clippy::new_without_default)]
            pub(crate) fn new() -> Self {
                // SAFETY: every field is an integer, a `bool`, a raw pointer, an `Option` of a
                // function pointer or a union of those, for all of which all-zero bytes are valid.
                let mut args: Self = unsafe { std::mem::zeroed() };
                args.struct_size = Self::STRUCT_SIZE;
                args
            }
        }
    };
}

/// A table slot for a function of the usual form `PJRT_Error* f(Args*)`.
pub(super) type ApiFn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut PJRT_Error>;
/// A table slot this crate does not call.
pub(super) type Unused = Option<unsafe extern "C" fn()>;

// ------------------------------- Version, errors ------------------------------------------------

args!(PJRT_Api_Version { major_version: c_int, minor_version: c_int });

args!(PJRT_Error_Destroy_Args { error: *mut PJRT_Error });
args!(PJRT_Error_Message_Args {
    error: *const PJRT_Error,
    message: *const c_char,
    message_size: usize,
});
args!(PJRT_Error_GetCode_Args { error: *const PJRT_Error, code: c_int });

// ------------------------------- Named values, plugin -------------------------------------------

pub(super) const PJRT_NamedValue_kString: c_int = 0;
pub(super) const PJRT_NamedValue_kInt64: c_int = 1;
pub(super) const PJRT_NamedValue_kInt64List: c_int = 2;
pub(super) const PJRT_NamedValue_kFloat: c_int = 3;
pub(super) const PJRT_NamedValue_kBool: c_int = 4;

/// The anonymous union of `PJRT_NamedValue`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) union PJRT_NamedValue_Value {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

args!(PJRT_NamedValue {
    name: *const c_char,
    name_size: usize,
    type_: c_int,
    value: PJRT_NamedValue_Value,
    value_size: usize,
});

args!(PJRT_Plugin_Initialize_Args {});
args!(PJRT_Plugin_Attributes_Args {
    attributes: *const PJRT_NamedValue,
    num_attributes: usize,
});

// ------------------------------- Events ---------------------------------------------------------

args!(PJRT_Event_Destroy_Args { event: *mut PJRT_Event });
args!(PJRT_Event_Await_Args { event: *mut PJRT_Event });

// ------------------------------- Client ---------------------------------------------------------

args!(PJRT_Client_Create_Args {
    create_options: *const PJRT_NamedValue,
    num_options: usize,
    kv_get_callback: Unused,
    kv_get_user_arg: *mut c_void,
    kv_put_callback: Unused,
    kv_put_user_arg: *mut c_void,
    client: *mut PJRT_Client,
    // 0.61
    kv_try_get_callback: Unused,
    kv_try_get_user_arg: *mut c_void,
});
args!(PJRT_Client_Destroy_Args { client: *mut PJRT_Client });
args!(PJRT_Client_PlatformName_Args {
    client: *mut PJRT_Client,
    platform_name: *const c_char,
    platform_name_size: usize,
});
args!(PJRT_Client_PlatformVersion_Args {
    client: *mut PJRT_Client,
    platform_version: *const c_char,
    platform_version_size: usize,
});
args!(PJRT_Client_AddressableDevices_Args {
    client: *mut PJRT_Client,
    addressable_devices: *const *mut PJRT_Device,
    num_addressable_devices: usize,
});

args!(PJRT_Program {
    code: *mut c_char,
    code_size: usize,
    format: *const c_char,
    format_size: usize,
});
args!(PJRT_Client_Compile_Args {
    client: *mut PJRT_Client,
    program: *const PJRT_Program,
    compile_options: *const c_char,
    compile_options_size: usize,
    executable: *mut PJRT_LoadedExecutable,
});

/// `PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes`: the caller keeps the data alive
/// and unchanged until `done_with_host_buffer` fires.
pub(super) const PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes: c_int = 1;
/// `PJRT_HostBufferSemantics_kImmutableZeroCopy`: the buffer may alias the data, which the
/// caller keeps alive and unchanged until the buffer is destroyed (`done_with_host_buffer`
/// fires then, or once the plugin copied it).
pub(super) const PJRT_HostBufferSemantics_kImmutableZeroCopy: c_int = 2;

args!(PJRT_Client_BufferFromHostBuffer_Args {
    client: *mut PJRT_Client,
    data: *const c_void,
    type_: c_int,
    dims: *const i64,
    num_dims: usize,
    byte_strides: *const i64,
    num_byte_strides: usize,
    host_buffer_semantics: c_int,
    device: *mut PJRT_Device,
    memory: *mut PJRT_Memory,
    device_layout: *mut c_void,
    done_with_host_buffer: *mut PJRT_Event,
    buffer: *mut PJRT_Buffer,
});

// ------------------------------- Devices --------------------------------------------------------

args!(PJRT_Device_GetDescription_Args {
    device: *mut PJRT_Device,
    device_description: *mut PJRT_DeviceDescription,
});
args!(PJRT_DeviceDescription_Id_Args {
    device_description: *mut PJRT_DeviceDescription,
    id: c_int,
});
args!(PJRT_DeviceDescription_Kind_Args {
    device_description: *mut PJRT_DeviceDescription,
    device_kind: *const c_char,
    device_kind_size: usize,
});

// ------------------------------- Executables ----------------------------------------------------

args!(PJRT_Executable_Destroy_Args { executable: *mut PJRT_Executable });
args!(PJRT_LoadedExecutable_Destroy_Args { executable: *mut PJRT_LoadedExecutable });
args!(PJRT_LoadedExecutable_GetExecutable_Args {
    loaded_executable: *mut PJRT_LoadedExecutable,
    executable: *mut PJRT_Executable,
});
args!(PJRT_Executable_NumPartitions_Args {
    executable: *mut PJRT_Executable,
    num_partitions: usize,
});
args!(PJRT_Executable_NumOutputs_Args {
    executable: *mut PJRT_Executable,
    num_outputs: usize,
});
args!(PJRT_Executable_SizeOfGeneratedCodeInBytes_Args {
    executable: *mut PJRT_Executable,
    size_in_bytes: i64,
});
args!(
    /// Called twice: with `program.code` null the plugin says `code_size` (and the format);
    /// then it writes that many bytes to `program.code`.
    PJRT_Executable_OptimizedProgram_Args {
        executable: *mut PJRT_Executable,
        program: *mut PJRT_Program,
    }
);
args!(PJRT_Executable_GetCostAnalysis_Args {
    executable: *mut PJRT_Executable,
    num_properties: usize,
    properties: *const PJRT_NamedValue,
});
args!(
    /// Plugins check `struct_size` against the smallest layout they accept and fill the fields
    /// it covers: libtpu 0.0.52 (API 0.117) wants at least 112 bytes (up to
    /// `peak_memory_in_bytes`) and fills all of the 144 given here.
    PJRT_Executable_GetCompiledMemoryStats_Args {
        executable: *mut PJRT_Executable,
        generated_code_size_in_bytes: i64,
        argument_size_in_bytes: i64,
        output_size_in_bytes: i64,
        alias_size_in_bytes: i64,
        temp_size_in_bytes: i64,
        host_generated_code_size_in_bytes: i64,
        host_argument_size_in_bytes: i64,
        host_output_size_in_bytes: i64,
        host_alias_size_in_bytes: i64,
        host_temp_size_in_bytes: i64,
        // 0.72
        peak_memory_in_bytes: i64,
        // 0.90
        total_size_in_bytes: i64,
        // 0.104
        total_allocation_bytes: i64,
        indefinite_allocations: i64,
        peak_unpadded_heap_bytes: i64,
    }
);
args!(PJRT_Executable_Serialize_Args {
    executable: *const PJRT_Executable,
    serialized_bytes: *const c_char,
    serialized_bytes_size: usize,
    serialized_executable: *mut PJRT_SerializedExecutable,
    serialized_executable_deleter: Option<unsafe extern "C" fn(*mut PJRT_SerializedExecutable)>,
});
args!(PJRT_Executable_DeserializeAndLoad_Args {
    client: *mut PJRT_Client,
    serialized_executable: *const c_char,
    serialized_executable_size: usize,
    loaded_executable: *mut PJRT_LoadedExecutable,
    // 0.71
    overridden_serialized_compile_options: *const c_char,
    overridden_serialized_compile_options_size: usize,
});

args!(PJRT_ExecuteOptions {
    send_callbacks: *mut c_void,
    recv_callbacks: *mut c_void,
    num_send_ops: usize,
    num_recv_ops: usize,
    launch_id: c_int,
    non_donatable_input_indices: *const i64,
    num_non_donatable_input_indices: usize,
    // 0.64
    context: *mut PJRT_ExecuteContext,
    // 0.76
    call_location: *const c_char,
    // 0.78
    num_tasks: usize,
    task_ids: *mut c_int,
    incarnation_ids: *mut i64,
    // 0.97
    multi_slice_config: *mut PJRT_MultiSlice_Config,
});
args!(PJRT_LoadedExecutable_Execute_Args {
    executable: *mut PJRT_LoadedExecutable,
    options: *mut PJRT_ExecuteOptions,
    argument_lists: *const *const *mut PJRT_Buffer,
    num_devices: usize,
    num_args: usize,
    output_lists: *const *mut *mut PJRT_Buffer,
    device_complete_events: *mut *mut PJRT_Event,
    execute_device: *mut PJRT_Device,
});

// ------------------------------- Buffers --------------------------------------------------------

args!(PJRT_Buffer_Destroy_Args { buffer: *mut PJRT_Buffer });
args!(PJRT_Buffer_ElementType_Args { buffer: *mut PJRT_Buffer, type_: c_int });
args!(PJRT_Buffer_Dimensions_Args {
    buffer: *mut PJRT_Buffer,
    dims: *const i64,
    num_dims: usize,
});
args!(PJRT_Buffer_ToHostBuffer_Args {
    src: *mut PJRT_Buffer,
    host_layout: *mut c_void,
    dst: *mut c_void,
    dst_size: usize,
    event: *mut PJRT_Event,
});

// ------------------------------- Topology, deviceless compile -----------------------------------

args!(PJRT_TopologyDescription_Create_Args {
    topology_name: *const c_char,
    topology_name_size: usize,
    create_options: *const PJRT_NamedValue,
    num_options: usize,
    topology: *mut PJRT_TopologyDescription,
});
args!(PJRT_TopologyDescription_Destroy_Args { topology: *mut PJRT_TopologyDescription });
args!(PJRT_TopologyDescription_PlatformName_Args {
    topology: *mut PJRT_TopologyDescription,
    platform_name: *const c_char,
    platform_name_size: usize,
});
args!(PJRT_TopologyDescription_PlatformVersion_Args {
    topology: *mut PJRT_TopologyDescription,
    platform_version: *const c_char,
    platform_version_size: usize,
});
args!(PJRT_Compile_Args {
    topology: *const PJRT_TopologyDescription,
    program: *const PJRT_Program,
    compile_options: *const c_char,
    compile_options_size: usize,
    client: *mut PJRT_Client,
    executable: *mut PJRT_Executable,
});

// ------------------------------- The function table ---------------------------------------------

/// `PJRT_Api`, in header order up to `PJRT_Executable_GetCompiledMemoryStats` (slot 96).
#[repr(C)]
pub(super) struct PJRT_Api {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub pjrt_api_version: PJRT_Api_Version,

    pub PJRT_Error_Destroy: Option<unsafe extern "C" fn(*mut PJRT_Error_Destroy_Args)>,
    pub PJRT_Error_Message: Option<unsafe extern "C" fn(*mut PJRT_Error_Message_Args)>,
    pub PJRT_Error_GetCode: ApiFn<PJRT_Error_GetCode_Args>,

    pub PJRT_Plugin_Initialize: ApiFn<PJRT_Plugin_Initialize_Args>,
    pub PJRT_Plugin_Attributes: ApiFn<PJRT_Plugin_Attributes_Args>,

    pub PJRT_Event_Destroy: ApiFn<PJRT_Event_Destroy_Args>,
    pub PJRT_Event_IsReady: Unused,
    pub PJRT_Event_Error: Unused,
    pub PJRT_Event_Await: ApiFn<PJRT_Event_Await_Args>,
    pub PJRT_Event_OnReady: Unused,

    pub PJRT_Client_Create: ApiFn<PJRT_Client_Create_Args>,
    pub PJRT_Client_Destroy: ApiFn<PJRT_Client_Destroy_Args>,
    pub PJRT_Client_PlatformName: ApiFn<PJRT_Client_PlatformName_Args>,
    pub PJRT_Client_ProcessIndex: Unused,
    pub PJRT_Client_PlatformVersion: ApiFn<PJRT_Client_PlatformVersion_Args>,
    pub PJRT_Client_Devices: Unused,
    pub PJRT_Client_AddressableDevices: ApiFn<PJRT_Client_AddressableDevices_Args>,
    pub PJRT_Client_LookupDevice: Unused,
    pub PJRT_Client_LookupAddressableDevice: Unused,
    pub PJRT_Client_AddressableMemories: Unused,
    pub PJRT_Client_Compile: ApiFn<PJRT_Client_Compile_Args>,
    pub PJRT_Client_DefaultDeviceAssignment: Unused,
    pub PJRT_Client_BufferFromHostBuffer: ApiFn<PJRT_Client_BufferFromHostBuffer_Args>,

    pub PJRT_DeviceDescription_Id: ApiFn<PJRT_DeviceDescription_Id_Args>,
    pub PJRT_DeviceDescription_ProcessIndex: Unused,
    pub PJRT_DeviceDescription_Attributes: Unused,
    pub PJRT_DeviceDescription_Kind: ApiFn<PJRT_DeviceDescription_Kind_Args>,
    pub PJRT_DeviceDescription_DebugString: Unused,
    pub PJRT_DeviceDescription_ToString: Unused,

    pub PJRT_Device_GetDescription: ApiFn<PJRT_Device_GetDescription_Args>,
    pub PJRT_Device_IsAddressable: Unused,
    pub PJRT_Device_LocalHardwareId: Unused,
    pub PJRT_Device_AddressableMemories: Unused,
    pub PJRT_Device_DefaultMemory: Unused,
    pub PJRT_Device_MemoryStats: Unused,

    pub PJRT_Memory_Id: Unused,
    pub PJRT_Memory_Kind: Unused,
    pub PJRT_Memory_DebugString: Unused,
    pub PJRT_Memory_ToString: Unused,
    pub PJRT_Memory_AddressableByDevices: Unused,

    pub PJRT_Executable_Destroy: ApiFn<PJRT_Executable_Destroy_Args>,
    pub PJRT_Executable_Name: Unused,
    pub PJRT_Executable_NumReplicas: Unused,
    pub PJRT_Executable_NumPartitions: ApiFn<PJRT_Executable_NumPartitions_Args>,
    pub PJRT_Executable_NumOutputs: ApiFn<PJRT_Executable_NumOutputs_Args>,
    pub PJRT_Executable_SizeOfGeneratedCodeInBytes: ApiFn<PJRT_Executable_SizeOfGeneratedCodeInBytes_Args>,
    pub PJRT_Executable_GetCostAnalysis: ApiFn<PJRT_Executable_GetCostAnalysis_Args>,
    pub PJRT_Executable_OutputMemoryKinds: Unused,
    pub PJRT_Executable_OptimizedProgram: ApiFn<PJRT_Executable_OptimizedProgram_Args>,
    pub PJRT_Executable_Serialize: ApiFn<PJRT_Executable_Serialize_Args>,

    pub PJRT_LoadedExecutable_Destroy: ApiFn<PJRT_LoadedExecutable_Destroy_Args>,
    pub PJRT_LoadedExecutable_GetExecutable: ApiFn<PJRT_LoadedExecutable_GetExecutable_Args>,
    pub PJRT_LoadedExecutable_AddressableDevices: Unused,
    pub PJRT_LoadedExecutable_Delete: Unused,
    pub PJRT_LoadedExecutable_IsDeleted: Unused,
    pub PJRT_LoadedExecutable_Execute: ApiFn<PJRT_LoadedExecutable_Execute_Args>,
    pub PJRT_Executable_DeserializeAndLoad: ApiFn<PJRT_Executable_DeserializeAndLoad_Args>,
    pub PJRT_LoadedExecutable_Fingerprint: Unused,

    pub PJRT_Buffer_Destroy: ApiFn<PJRT_Buffer_Destroy_Args>,
    pub PJRT_Buffer_ElementType: ApiFn<PJRT_Buffer_ElementType_Args>,
    pub PJRT_Buffer_Dimensions: ApiFn<PJRT_Buffer_Dimensions_Args>,
    pub PJRT_Buffer_UnpaddedDimensions: Unused,
    pub PJRT_Buffer_DynamicDimensionIndices: Unused,
    pub PJRT_Buffer_GetMemoryLayout: Unused,
    pub PJRT_Buffer_OnDeviceSizeInBytes: Unused,
    pub PJRT_Buffer_Device: Unused,
    pub PJRT_Buffer_Memory: Unused,
    pub PJRT_Buffer_Delete: Unused,
    pub PJRT_Buffer_IsDeleted: Unused,
    pub PJRT_Buffer_CopyToDevice: Unused,
    pub PJRT_Buffer_ToHostBuffer: ApiFn<PJRT_Buffer_ToHostBuffer_Args>,
    pub PJRT_Buffer_IsOnCpu: Unused,
    pub PJRT_Buffer_ReadyEvent: Unused,
    pub PJRT_Buffer_UnsafePointer: Unused,
    pub PJRT_Buffer_IncreaseExternalReferenceCount: Unused,
    pub PJRT_Buffer_DecreaseExternalReferenceCount: Unused,
    pub PJRT_Buffer_OpaqueDeviceMemoryDataPointer: Unused,

    pub PJRT_CopyToDeviceStream_Destroy: Unused,
    pub PJRT_CopyToDeviceStream_AddChunk: Unused,
    pub PJRT_CopyToDeviceStream_TotalBytes: Unused,
    pub PJRT_CopyToDeviceStream_GranuleSize: Unused,
    pub PJRT_CopyToDeviceStream_CurrentBytes: Unused,

    pub PJRT_TopologyDescription_Create: ApiFn<PJRT_TopologyDescription_Create_Args>,
    pub PJRT_TopologyDescription_Destroy: ApiFn<PJRT_TopologyDescription_Destroy_Args>,
    pub PJRT_TopologyDescription_PlatformName: ApiFn<PJRT_TopologyDescription_PlatformName_Args>,
    pub PJRT_TopologyDescription_PlatformVersion: ApiFn<PJRT_TopologyDescription_PlatformVersion_Args>,
    pub PJRT_TopologyDescription_GetDeviceDescriptions: Unused,
    pub PJRT_TopologyDescription_Serialize: Unused,
    pub PJRT_TopologyDescription_Attributes: Unused,

    pub PJRT_Compile: ApiFn<PJRT_Compile_Args>,

    pub PJRT_Executable_OutputElementTypes: Unused,
    pub PJRT_Executable_OutputDimensions: Unused,
    pub PJRT_Buffer_CopyToMemory: Unused,
    pub PJRT_Client_CreateViewOfDeviceBuffer: Unused,
    pub PJRT_Executable_Fingerprint: Unused,
    pub PJRT_Client_TopologyDescription: Unused,
    pub PJRT_Executable_GetCompiledMemoryStats: ApiFn<PJRT_Executable_GetCompiledMemoryStats_Args>,
}

/// Bytes of `PJRT_Api` a plugin must provide for the client path (load, compile, buffers,
/// execute, serialize, deserialize): everything up to `PJRT_Buffer_ToHostBuffer`.
pub(super) const PJRT_API_CLIENT_PATH_SIZE: usize =
    offset_of!(PJRT_Api, PJRT_Buffer_ToHostBuffer) + size_of::<Unused>();

/// The signature of the plugin's only exported symbol.
pub(super) type GetPjrtApiFn = unsafe extern "C" fn() -> *const PJRT_Api;

/// The exported symbol's name.
pub(super) const GET_PJRT_API: &[u8] = b"GetPjrtApi\0";
