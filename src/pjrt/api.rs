//! The raw API: a plugin's function table (`Api`) with its checked calls, and the helpers that
//! read what the plugin hands back (strings, slices, named values). Above `ffi`, below every
//! wrapper type.

use std::fmt;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::ptr;

use super::ffi;
use super::{ErrorCode, PjrtError};

/// The program format `PJRT_Program` takes for StableHLO text, MLIR bytecode and portable
/// artifacts alike.
pub(super) const MLIR_FORMAT: &str = "mlir";

/// The error for a call that succeeded but returned no object.
pub(super) fn null_output(call: &'static str) -> PjrtError {
    PjrtError::Call { call, code: None, message: "the plugin returned no error and a null result".to_string() }
}

/// The PJRT C API version a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    pub major: i32,
    pub minor: i32,
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A value of a plugin attribute (`PJRT_NamedValue`).
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    String(String),
    Int64(i64),
    Int64List(Vec<i64>),
    Float(f32),
    Bool(bool),
}

impl AttributeValue {
    /// A number's value (an XLA cost-model figure is a float or an integer).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttributeValue::Float(f) => Some(f64::from(*f)),
            AttributeValue::Int64(i) => Some(*i as f64),
            _ => None,
        }
    }
}

/// A copy of the plugin's function table. Slots past the plugin's `struct_size` are `None`.
pub(super) struct Api {
    pub(super) table: ffi::PJRT_Api,
}

// SAFETY: the table holds only function pointers into a library that is never unloaded and a
// never-dereferenced `extension_start`; PJRT functions may be called from any thread.
unsafe impl Send for Api {}
// SAFETY: as above; `Api` is never mutated after loading.
unsafe impl Sync for Api {}

impl Api {
    /// Copies the plugin's table after checking its version and size.
    ///
    /// # Safety
    /// `raw` must point to a `PJRT_Api` of at least `struct_size` readable bytes.
    pub(super) unsafe fn copy_from(raw: *const ffi::PJRT_Api, path: &Path) -> Result<(Api, ApiVersion), PjrtError> {
        let version_end = offset_of!(ffi::PJRT_Api, pjrt_api_version) + size_of::<ffi::PJRT_Api_Version>();
        let needed = || {
            format!(
                "{}.{} or newer with a function table of at least {} bytes",
                ffi::PJRT_API_MAJOR,
                ffi::PJRT_API_MINOR_MIN,
                ffi::PJRT_API_CLIENT_PATH_SIZE
            )
        };
        // SAFETY: every `PJRT_Api` starts with its `size_t struct_size`.
        let size = unsafe { ptr::addr_of!((*raw).struct_size).read() };
        if size < version_end {
            return Err(PjrtError::ApiVersion {
                path: path.to_path_buf(),
                found: format!("a {size}-byte table without a version"),
                needed: needed(),
            });
        }
        // SAFETY: `size` covers the version struct.
        let version = unsafe { ptr::addr_of!((*raw).pjrt_api_version).read() };
        let version = ApiVersion { major: version.major_version, minor: version.minor_version };
        if version.major != ffi::PJRT_API_MAJOR
            || version.minor < ffi::PJRT_API_MINOR_MIN
            || size < ffi::PJRT_API_CLIENT_PATH_SIZE
        {
            return Err(PjrtError::ApiVersion {
                path: path.to_path_buf(),
                found: format!("{version} with a {size}-byte function table"),
                needed: needed(),
            });
        }
        // Copy whole slots only, and no more than the plugin has or this build knows.
        let n = size.min(size_of::<ffi::PJRT_Api>()) / size_of::<usize>() * size_of::<usize>();
        // SAFETY: all-zero bytes are a valid `PJRT_Api` (integers, null pointers, `None` slots);
        // the copy reads `n <= struct_size` bytes from the plugin's table into ours, and every
        // copied slot is a whole function pointer (or null) as the plugin wrote it.
        let table = unsafe {
            let mut table: ffi::PJRT_Api = std::mem::zeroed();
            ptr::copy_nonoverlapping(raw.cast::<u8>(), ptr::addr_of_mut!(table).cast::<u8>(), n);
            table
        };
        Ok((Api { table }, version))
    }

    /// A table slot, or an `unimplemented` error when the plugin's table is too old for it.
    pub(super) fn slot<F>(&self, call: &'static str, slot: Option<F>) -> Result<F, PjrtError> {
        slot.ok_or_else(|| PjrtError::Call {
            call,
            code: Some(ErrorCode::Unimplemented),
            message: "the plugin's function table has no such entry".to_string(),
        })
    }

    /// Calls `f(args)` and turns a returned `PJRT_Error*` into a [`PjrtError::Call`].
    ///
    /// # Safety
    /// `f` must be the slot for `call`, whose argument type is `A`, and `args` must hold valid
    /// pointers for that call.
    pub(super) unsafe fn call<A>(&self, call: &'static str, f: ffi::ApiFn<A>, args: &mut A) -> Result<(), PjrtError> {
        let f = self.slot(call, f)?;
        // SAFETY: per this function's contract.
        let error = unsafe { f(args) };
        // SAFETY: `error` was just returned by the plugin and is owned by us.
        unsafe { self.take_error(call, error) }
    }

    /// Converts and destroys a `PJRT_Error*` (`Ok` for null).
    ///
    /// # Safety
    /// `error` must be null or an error returned by this plugin and not yet destroyed.
    pub(super) unsafe fn take_error(&self, call: &'static str, error: *mut ffi::PJRT_Error) -> Result<(), PjrtError> {
        if error.is_null() {
            return Ok(());
        }
        let mut message_args = ffi::PJRT_Error_Message_Args::new();
        message_args.error = error;
        let message = match self.table.PJRT_Error_Message {
            Some(f) => {
                // SAFETY: `error` is live; the message has the error's lifetime and is copied
                // before the error is destroyed.
                unsafe {
                    f(&mut message_args);
                    lossy_string(message_args.message, message_args.message_size)
                }
            }
            None => String::new(),
        };
        let mut code_args = ffi::PJRT_Error_GetCode_Args::new();
        code_args.error = error;
        let code = match self.table.PJRT_Error_GetCode {
            Some(f) => {
                // SAFETY: `error` is live; a second error from `GetCode` is destroyed in turn.
                let code_error = unsafe { f(&mut code_args) };
                if code_error.is_null() {
                    ErrorCode::from_raw(code_args.code)
                } else {
                    // SAFETY: `code_error` was just returned by the plugin.
                    unsafe { self.destroy_error(code_error) };
                    None
                }
            }
            None => None,
        };
        // SAFETY: `error` is live and not used after this.
        unsafe { self.destroy_error(error) };
        Err(PjrtError::Call { call, code, message: message.trim_end().to_string() })
    }

    /// # Safety
    /// `error` must be an error returned by this plugin and not yet destroyed.
    unsafe fn destroy_error(&self, error: *mut ffi::PJRT_Error) {
        if let Some(f) = self.table.PJRT_Error_Destroy {
            let mut args = ffi::PJRT_Error_Destroy_Args::new();
            args.error = error;
            // SAFETY: per this function's contract.
            unsafe { f(&mut args) };
        }
    }

    /// Waits for `event` (if not null), then destroys it; returns the event's error, if any.
    ///
    /// # Safety
    /// `event` must be null or an event returned by this plugin and not yet destroyed.
    pub(super) unsafe fn await_event(&self, call: &'static str, event: *mut ffi::PJRT_Event) -> Result<(), PjrtError> {
        if event.is_null() {
            return Ok(());
        }
        let mut args = ffi::PJRT_Event_Await_Args::new();
        args.event = event;
        // SAFETY: `event` is live.
        let awaited = unsafe { self.call(call, self.table.PJRT_Event_Await, &mut args) };
        let mut destroy = ffi::PJRT_Event_Destroy_Args::new();
        destroy.event = event;
        // SAFETY: `event` is live and not used after this.
        let destroyed = unsafe { self.call("PJRT_Event_Destroy", self.table.PJRT_Event_Destroy, &mut destroy) };
        awaited.and(destroyed)
    }

    /// `PJRT_Plugin_Attributes`, copied.
    pub(super) fn attributes(&self) -> Result<Vec<(String, AttributeValue)>, PjrtError> {
        let mut args = ffi::PJRT_Plugin_Attributes_Args::new();
        // SAFETY: the args struct is fully initialized and outlives the call.
        unsafe { self.call("PJRT_Plugin_Attributes", self.table.PJRT_Plugin_Attributes, &mut args)? };
        if args.attributes.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returned `num_attributes` values that live as long as the process.
        Ok(unsafe { named_values(args.attributes, args.num_attributes) })
    }
}

/// Copies `len` plugin-owned `PJRT_NamedValue`s (none for null); values of unknown types are
/// left out.
///
/// # Safety
/// If not null, `values` must point to `len` values from the plugin that are live for the call:
/// each `name` has `name_size` bytes, and its union member and `value_size` match `type_`.
pub(super) unsafe fn named_values(values: *const ffi::PJRT_NamedValue, len: usize) -> Vec<(String, AttributeValue)> {
    // SAFETY: per this function's contract.
    let values = unsafe { raw_slice(values, len) };
    values
        .iter()
        .filter_map(|v| {
            // SAFETY: per this function's contract.
            unsafe {
                let name = lossy_string(v.name, v.name_size);
                let value = match v.type_ {
                    ffi::PJRT_NamedValue_kString => {
                        AttributeValue::String(lossy_string(v.value.string_value, v.value_size))
                    }
                    ffi::PJRT_NamedValue_kInt64 => AttributeValue::Int64(v.value.int64_value),
                    ffi::PJRT_NamedValue_kInt64List => {
                        AttributeValue::Int64List(raw_slice(v.value.int64_array_value, v.value_size).to_vec())
                    }
                    ffi::PJRT_NamedValue_kFloat => AttributeValue::Float(v.value.float_value),
                    ffi::PJRT_NamedValue_kBool => AttributeValue::Bool(v.value.bool_value),
                    _ => return None,
                };
                Some((name, value))
            }
        })
        .collect()
}

/// A slice from a plugin-owned pointer and length; empty for null.
///
/// # Safety
/// If not null, `data` must point to `len` initialized `T`s that outlive `'a`.
pub(super) unsafe fn raw_slice<'a, T>(data: *const T, len: usize) -> &'a [T] {
    if data.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: per this function's contract.
        unsafe { std::slice::from_raw_parts(data, len) }
    }
}

/// A `String` from plugin-owned bytes (not NUL-terminated), invalid UTF-8 replaced.
///
/// # Safety
/// As for [`raw_slice`].
pub(super) unsafe fn lossy_string(data: *const std::ffi::c_char, len: usize) -> String {
    // SAFETY: per this function's contract.
    String::from_utf8_lossy(unsafe { raw_slice(data.cast::<u8>(), len) }).into_owned()
}
