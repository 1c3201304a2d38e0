//! Loading a plugin, and the checked calls through its function table.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Mutex;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use sha2::{Digest, Sha256};

use super::ffi;
use super::topology::{is_libtpu, prepare_libtpu_environment};
use super::{ErrorCode, PjrtError};

/// Keep the object mapped after `dlclose`: unloading XLA crashes at process exit.
#[cfg(target_os = "linux")]
const RTLD_NODELETE: c_int = 0x1000;
#[cfg(target_os = "macos")]
const RTLD_NODELETE: c_int = 0x80;

/// Plugins loaded by this process, by canonical path. Entries are leaked: a plugin is
/// initialized once and never unloaded.
static LOADED: Mutex<BTreeMap<PathBuf, &'static Loaded>> = Mutex::new(BTreeMap::new());

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

/// A loaded and initialized PJRT plugin. Cheap to copy: it refers to a process-wide entry.
#[derive(Clone, Copy)]
pub struct Plugin {
    loaded: &'static Loaded,
}

struct Loaded {
    api: Api,
    path: PathBuf,
    sha256: String,
    version: ApiVersion,
    attributes: Vec<(String, AttributeValue)>,
    created: Counters,
}

/// How many clients and topology descriptions a plugin has created in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Created {
    pub clients: usize,
    pub topologies: usize,
}

#[derive(Default)]
struct Counters {
    clients: std::sync::atomic::AtomicUsize,
    topologies: std::sync::atomic::AtomicUsize,
}

/// Opens the library at `canonical` (never to be unloaded), finds its API table, checks its
/// version and size, and initializes the plugin.
fn open_and_initialize(canonical: &Path, path: &Path) -> Result<(Api, ApiVersion), PjrtError> {
    let load_error = |reason: String| PjrtError::PluginLoad { path: path.to_path_buf(), reason };
    // SAFETY: opening a library runs its initializers; a PJRT plugin is a library meant to be
    // opened this way, and the path was chosen by the user as one.
    let library = unsafe {
        Library::open(Some(canonical), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE).map_err(|e| load_error(e.to_string()))?
    };
    // SAFETY: `GetPjrtApi` has this signature in every PJRT plugin.
    let get_api = unsafe { library.get::<ffi::GetPjrtApiFn>(ffi::GET_PJRT_API) };
    let get_api: ffi::GetPjrtApiFn = match get_api {
        Ok(symbol) => *symbol,
        Err(_) => {
            std::mem::forget(library);
            return Err(PjrtError::MissingSymbol { path: path.to_path_buf(), symbol: "GetPjrtApi" });
        }
    };
    // Never unload: the function pointers below point into the library.
    std::mem::forget(library);

    // SAFETY: `get_api` is the plugin's `GetPjrtApi`, which takes no arguments.
    let raw = unsafe { get_api() };
    if raw.is_null() {
        return Err(load_error("`GetPjrtApi` returned null".to_string()));
    }
    // SAFETY: `raw` points to the plugin's static `PJRT_Api`, which starts with `struct_size`
    // and, when that is large enough (checked first), the version struct.
    let (api, version) = unsafe { Api::copy_from(raw, path)? };
    let mut init = ffi::PJRT_Plugin_Initialize_Args::new();
    // SAFETY: the args struct is fully initialized and outlives the call.
    unsafe { api.call("PJRT_Plugin_Initialize", api.table.PJRT_Plugin_Initialize, &mut init)? };
    Ok((api, version))
}

impl Plugin {
    /// Opens the plugin at `path` (once per process; later calls with the same file return the
    /// same plugin), checks its API version and table size, and initializes it.
    ///
    /// For a file named `libtpu*` it first calls [`prepare_libtpu_environment`], which the binary
    /// should have called before starting threads.
    pub fn load(path: &Path) -> Result<Plugin, PjrtError> {
        let load_error = |reason: String| PjrtError::PluginLoad { path: path.to_path_buf(), reason };
        let canonical = match path.canonicalize() {
            Ok(canonical) => canonical,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PjrtError::PluginNotFound { path: path.to_path_buf() })
            }
            Err(e) => return Err(load_error(e.to_string())),
        };
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = loaded.get(&canonical) {
            return Ok(Plugin { loaded: entry });
        }
        let sha256 = sha256_file(&canonical).map_err(|e| load_error(e.to_string()))?;
        if is_libtpu(path.file_name()) || is_libtpu(canonical.file_name()) {
            prepare_libtpu_environment();
        }

        // libtpu logs alarming but harmless lines while it is opened and initialized: kept
        // out of the user's terminal, and shown if the load fails.
        let (opened, log) = super::quiet::captured(|| open_and_initialize(&canonical, path));
        let (api, version) = opened.inspect_err(|_| eprint!("{log}"))?;
        let attributes = api.attributes().unwrap_or_default();

        let entry: &'static Loaded = Box::leak(Box::new(Loaded {
            api,
            path: canonical.clone(),
            sha256,
            version,
            attributes,
            created: Counters::default(),
        }));
        loaded.insert(canonical, entry);
        Ok(Plugin { loaded: entry })
    }

    /// How many clients and topologies this plugin has created so far (creating them is costly:
    /// a compile makes at most one of each per target).
    pub fn created(&self) -> Created {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.loaded.created;
        Created { clients: c.clients.load(Relaxed), topologies: c.topologies.load(Relaxed) }
    }

    pub(super) fn count_client(&self) {
        self.loaded.created.clients.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn count_topology(&self) {
        self.loaded.created.topologies.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The canonical path of the shared object.
    pub fn path(&self) -> &Path {
        &self.loaded.path
    }

    /// The lowercase hex sha256 of the shared object, computed once when it was loaded.
    pub fn sha256(&self) -> &str {
        &self.loaded.sha256
    }

    /// The PJRT C API version the plugin implements.
    pub fn api_version(&self) -> ApiVersion {
        self.loaded.version
    }

    /// The plugin's attributes (`xla_version`, `stablehlo_current_version`, ...), empty when the
    /// plugin reports none.
    pub fn attributes(&self) -> &[(String, AttributeValue)] {
        &self.loaded.attributes
    }

    /// One attribute by name.
    pub fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes().iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub(super) fn api(&self) -> &'static Api {
        &self.loaded.api
    }
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.loaded.path)
            .field("sha256", &self.loaded.sha256)
            .field("api_version", &self.loaded.version)
            .finish()
    }
}

/// Streams the file through sha256.
fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        hasher.update(&chunk[..n]);
    }
    Ok(crate::artifact::hex(&hasher.finalize()))
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
    unsafe fn copy_from(raw: *const ffi::PJRT_Api, path: &Path) -> Result<(Api, ApiVersion), PjrtError> {
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
    fn attributes(&self) -> Result<Vec<(String, AttributeValue)>, PjrtError> {
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
