//! Loading a plugin, and the checked calls through its function table.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use sha2::{Digest, Sha256};

use super::api::{Api, ApiVersion, AttributeValue};
use super::env::{is_libtpu, prepare_libtpu_environment};
use super::ffi;
use super::PjrtError;

/// Keep the object mapped after `dlclose`: unloading XLA crashes at process exit.
#[cfg(target_os = "linux")]
const RTLD_NODELETE: c_int = 0x1000;
#[cfg(target_os = "macos")]
const RTLD_NODELETE: c_int = 0x80;

/// Plugins loaded by this process, by canonical path. Entries are leaked: a plugin is
/// initialized once and never unloaded.
static LOADED: Mutex<BTreeMap<PathBuf, &'static Loaded>> = Mutex::new(BTreeMap::new());

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
    /// Clients created.
    pub clients: usize,
    /// Topology descriptions created.
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
    Ok(crate::digest::hex(&hasher.finalize()))
}
