//! `torchtpu_compile._native`: the compiler and the runtime, for the Python package.
//!
//! Arrays cross as `(dtype, shape, bytes)`: the dtype by the tool's names (`f32`, `i64`,
//! `bf16`, …), the shape as a list, the bytes row-major (a buffer on the way in, a `bytearray`
//! on the way out, which numpy views without a copy). The Python layer (`torchtpu_compile`)
//! turns them into numpy arrays or torch tensors. Every failure is raised as one of the
//! package's exception classes (`torchtpu_compile.errors`), chosen by the kind of the tool's
//! error, with the tool's message. Long work (compiling, calling, decoding) runs with the
//! interpreter released.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use torchtpu_compile::internal::{
    conform_inputs, decode, default_cache_dir, generate_seq2seq, output_files, parse_dtype, Cache, CacheConfig,
    Decoding, DeviceKind, MappedZip, Seq2Seq,
};
use torchtpu_compile::{Array, Artifact, Session as RunSession, Verification};

/// An array on its way out: dtype name, shape, bytes.
type Out<'py> = (&'static str, Vec<i64>, Bound<'py, PyByteArray>);

/// The exception of the package's for `e`: its class named by the tool's kind of error.
fn raise(py: Python<'_>, e: &anyhow::Error) -> PyErr {
    let kind = match e.downcast_ref::<torchtpu_compile::Error>() {
        Some(error) => error.kind(),
        None if e.downcast_ref::<clap_error::Usage>().is_some() => "usage",
        None => "",
    };
    let message = match e.downcast_ref::<clap_error::Usage>() {
        Some(usage) => usage.0.clone(),
        None => torchtpu_compile::cli::error_chain(e),
    };
    // The class is chosen by `errors.of_kind`, the one table from kinds to classes.
    let made =
        py.import("torchtpu_compile.errors").and_then(|errors| errors.call_method1("of_kind", (kind, message.clone())));
    match made {
        Ok(exception) => PyErr::from_value(exception),
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(message),
    }
}

/// A usage error of the command line, as the text clap renders.
mod clap_error {
    #[derive(Debug)]
    pub struct Usage(pub String);

    impl std::fmt::Display for Usage {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Usage {}
}

/// An array from Python, after checking that its bytes fill its shape.
fn array_in(py: Python<'_>, dtype: &str, shape: Vec<i64>, data: &PyBuffer<u8>) -> PyResult<Array> {
    let bad = |reason: String| {
        let e = anyhow::Error::from(torchtpu_compile::Error::bad_input(reason));
        raise(py, &e)
    };
    let dt = parse_dtype(dtype).ok_or_else(|| bad(format!("unknown dtype `{dtype}`")))?;
    let count = shape.iter().try_fold(1i64, |n, &d| if d < 0 { None } else { n.checked_mul(d) });
    let bytes = count.and_then(|n| usize::try_from(n).ok()).and_then(|n| n.checked_mul(dt.size_bytes()));
    match bytes {
        Some(n) if n == data.len_bytes() => Ok(Array { dtype: dt, shape, data: data.to_vec(py)? }),
        _ => Err(bad(format!("an array of shape {shape:?} and dtype {dtype} with {} bytes", data.len_bytes()))),
    }
}

fn array_out<'py>(py: Python<'py>, a: &Array) -> Out<'py> {
    (a.dtype.name(), a.shape.clone(), PyByteArray::new(py, &a.data))
}

/// Runs the command line (`argv` with the program name) as the `torchtpu-compile` binary does:
/// its output to the process's stdout and stderr; returns the exit code.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    py.detach(|| torchtpu_compile::cli::main_with(argv, &mut std::io::stdout(), &mut std::io::stderr()))
}

/// Runs the command line (`argv` with the program name), its progress to stderr; returns what
/// it printed to stdout, or raises its failure (a non-zero exit among them).
#[pyfunction]
fn execute(py: Python<'_>, argv: Vec<OsString>) -> PyResult<String> {
    match execute_status(py, argv)? {
        (0, text) => Ok(text),
        (code, text) => Err(raise(py, &anyhow::anyhow!("the command exited with code {code}: {text}"))),
    }
}

/// Runs the command line as [`execute`] does; returns its exit code with what it printed (a
/// command that answers by its exit code, as `cache explain` does, exits 1 without failing).
#[pyfunction]
fn execute_status(py: Python<'_>, argv: Vec<OsString>) -> PyResult<(u8, String)> {
    let result = py.detach(|| {
        let mut out = Vec::new();
        let code = torchtpu_compile::cli::execute(argv, &mut out, &mut std::io::stderr()).map_err(|e| match e
            .downcast::<clap::Error>(
        ) {
            Ok(usage) => anyhow::Error::new(clap_error::Usage(usage.render().to_string())),
            Err(e) => e,
        })?;
        anyhow::Ok((code, String::from_utf8_lossy(&out).into_owned()))
    });
    result.map_err(|e| raise(py, &e))
}

/// The manifest of the artifact at `path`, or for a `.pt2` archive `inspect`'s report, as JSON
/// (told apart by content, as the command line does).
#[pyfunction]
fn inspect(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let report = || -> anyhow::Result<String> {
        if MappedZip::open(&path).is_ok_and(|z| Artifact::is_artifact(&z)) {
            let art = Artifact::open_but_weights(&path).map_err(torchtpu_compile::Error::from)?;
            return Ok(serde_json::to_string(&art.manifest)?);
        }
        let program = torchtpu_compile::import(&path).map_err(torchtpu_compile::Error::from)?;
        Ok(serde_json::to_string(&torchtpu_compile::inspect_report(&program, &path.display().to_string()))?)
    };
    py.detach(report).map_err(|e| raise(py, &e))
}

/// The `check --format json` report of the archive at `path`: every op that does not lower.
#[pyfunction]
fn check(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let report = || -> anyhow::Result<String> {
        let program = torchtpu_compile::import(&path).map_err(torchtpu_compile::Error::from)?;
        Ok(serde_json::to_string(&torchtpu_compile::check(&program, &path.display().to_string()))?)
    };
    py.detach(report).map_err(|e| raise(py, &e))
}

/// The long flags of a subcommand (`compile`, …) as its `--help` lists them, so that the
/// Python keywords can be checked against them.
#[pyfunction]
fn command_flags(command: &str) -> Vec<String> {
    torchtpu_compile::cli::flags(command)
}

/// An open artifact, its weights on the device (see `torchtpu_compile::Session`).
#[pyclass(module = "torchtpu_compile._native")]
struct Session {
    /// `None` once closed.
    inner: Mutex<Option<RunSession>>,
    path: PathBuf,
}

impl Session {
    /// Runs `f` on the open session, the interpreter released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut RunSession) -> anyhow::Result<T> + Send,
    ) -> PyResult<T> {
        let path = &self.path;
        let result = py.detach(|| {
            let mut guard = self.inner.lock().map_err(|_| anyhow::anyhow!("an earlier call panicked"))?;
            match guard.as_mut() {
                Some(session) => f(session),
                None => Err(closed(path)),
            }
        });
        result.map_err(|e| match e.downcast_ref::<Closed>() {
            Some(c) => session_closed(py, &c.0),
            None => raise(py, &e),
        })
    }
}

#[derive(Debug)]
struct Closed(String);

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the session of `{}` is closed", self.0)
    }
}

impl std::error::Error for Closed {}

fn closed(path: &Path) -> anyhow::Error {
    anyhow::Error::new(Closed(path.display().to_string()))
}

fn session_closed(py: Python<'_>, path: &str) -> PyErr {
    let message = format!("the session of `{path}` is closed");
    match py
        .import("torchtpu_compile.errors")
        .and_then(|m| m.call_method1("of_kind", ("session_closed", message.clone())))
    {
        Ok(e) => PyErr::from_value(e),
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(message),
    }
}

#[pymethods]
impl Session {
    /// Opens `path` on `device` (`cpu` or `tpu`) with `plugin` (default: the set-up one).
    #[new]
    #[pyo3(signature = (path, device = "cpu", plugin = None))]
    fn new(py: Python<'_>, path: PathBuf, device: &str, plugin: Option<PathBuf>) -> PyResult<Session> {
        let kind = match device {
            "cpu" => DeviceKind::Cpu,
            "tpu" => DeviceKind::Tpu,
            other => {
                let reason = format!("device `{other}`: give `cpu` or `tpu`");
                let e = anyhow::Error::from(torchtpu_compile::Error::Unsupported(reason));
                return Err(raise(py, &e));
            }
        };
        let opened = py.detach(|| {
            let cache =
                default_cache_dir().map(|dir| Cache::open(&CacheConfig { dir: Some(dir), ..CacheConfig::off() }));
            let verification = Verification { always_hash: false, cache: cache.as_ref() };
            RunSession::open(&path, kind, plugin.as_deref(), &verification)
                .map_err(|e| anyhow::Error::from(e).context(format!("cannot open `{}`", path.display())))
        });
        let session = opened.map_err(|e| raise(py, &e))?;
        Ok(Session { inner: Mutex::new(Some(session)), path })
    }

    /// The manifest, as JSON.
    fn manifest(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |s| Ok(serde_json::to_string(s.manifest())?))
    }

    /// The file name `run` gives each output a call returns: `out_<j>` for what the model
    /// returns, `state_<fqn>` for an updated weight not kept on the device.
    fn output_files(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.with(py, |s| {
            let files = output_files(&s.manifest().signature.outputs);
            Ok(s.returned_outputs().iter().map(|&j| files[j].clone()).collect())
        })
    }

    /// One call: `inputs` as `(dtype, shape, buffer)`; the outputs it returns (see
    /// `output_files`).
    #[pyo3(signature = (inputs, seed = 0))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<(String, Vec<i64>, PyBuffer<u8>)>,
        seed: u64,
    ) -> PyResult<Vec<Out<'py>>> {
        let arrays = inputs
            .iter()
            .map(|(dtype, shape, data)| array_in(py, dtype, shape.clone(), data))
            .collect::<PyResult<_>>()?;
        let outputs = self.with(py, |s| {
            let labels: Vec<PathBuf> = (0..inputs.len()).map(|i| PathBuf::from(format!("argument {i}"))).collect();
            let arrays = conform_inputs(s.manifest(), arrays, &labels)?;
            Ok(s.call(&arrays, &labels, seed)?.outputs)
        })?;
        Ok(outputs.iter().map(|a| array_out(py, a)).collect())
    }

    /// Every weight the program updates, by name, with its current value.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, Out<'py>)>> {
        let state = self.with(py, |s| Ok(s.state()?))?;
        Ok(state.iter().map(|(name, a)| (name.clone(), array_out(py, a))).collect())
    }

    /// The updated weight `name` takes the value `(dtype, shape, buffer)`.
    fn set_state(&self, py: Python<'_>, name: String, value: (String, Vec<i64>, PyBuffer<u8>)) -> PyResult<()> {
        let a = array_in(py, &value.0, value.1.clone(), &value.2)?;
        self.with(py, |s| Ok(s.set_state(&name, a)?))
    }

    /// The weights' values back in the updated weights: the artifact's, or the checkpoint's
    /// that `swap_weights` took.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| Ok(s.reset()?))
    }

    /// Takes the weights of another checkpoint of the same program, without recompiling: a
    /// `.pt2` of the same model with other values, or a `.safetensors` with every weight of
    /// the artifact by name, dtype and shape. A checkpoint of another program is refused and
    /// the session keeps its weights.
    fn swap_weights(&self, py: Python<'_>, checkpoint: PathBuf) -> PyResult<()> {
        self.with(py, |s| {
            s.swap_weights(&checkpoint)
                .map_err(|e| anyhow::Error::from(e).context(format!("cannot swap to `{}`", checkpoint.display())))
        })
    }

    /// Whether calls donate the updated weights' buffers (the default).
    fn set_donation(&self, py: Python<'_>, donate: bool) -> PyResult<()> {
        self.with(py, |s| {
            s.set_donation(donate);
            Ok(())
        })
    }

    /// The decode loop from the session's state: the new tokens, their logits (when
    /// `logits`), and the figures (JSON).
    #[pyo3(signature = (prompt, max_new_tokens, temperature = None, seed = 0, logits = true))]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: (String, Vec<i64>, PyBuffer<u8>),
        max_new_tokens: usize,
        temperature: Option<f64>,
        seed: u64,
        logits: bool,
    ) -> PyResult<(Out<'py>, Option<Out<'py>>, String)> {
        let prompt = array_in(py, &prompt.0, prompt.1.clone(), &prompt.2)?;
        let decoding = Decoding { prompt, max_new_tokens, temperature, seed, keep_logits: logits };
        let done = self.with(py, |s| Ok(decode(s, &decoding)?))?;
        let figures = serde_json::to_string(&done).map_err(|e| raise(py, &e.into()))?;
        Ok((array_out(py, &done.tokens), done.logits.as_ref().map(|a| array_out(py, a)), figures))
    }

    /// This decoder step's loop over the states of `encoder` (another session, run once on
    /// `prompt`): the new tokens, their logits (when `logits`), and the figures (JSON).
    #[pyo3(signature = (encoder, prompt, max_new_tokens, start_token = 0, eos = None, temperature = None, seed = 0, logits = true))]
    #[allow(clippy::too_many_arguments)]
    fn generate_seq2seq<'py>(
        &self,
        py: Python<'py>,
        encoder: &Session,
        prompt: (String, Vec<i64>, PyBuffer<u8>),
        max_new_tokens: usize,
        start_token: i64,
        eos: Option<i64>,
        temperature: Option<f64>,
        seed: u64,
        logits: bool,
    ) -> PyResult<(Out<'py>, Option<Out<'py>>, String)> {
        if std::ptr::eq(self, encoder) {
            let e = torchtpu_compile::Error::bad_input("the encoder is this decoder's own session".into());
            return Err(raise(py, &e.into()));
        }
        let prompt = array_in(py, &prompt.0, prompt.1.clone(), &prompt.2)?;
        let req = Seq2Seq { prompt, start_token, max_new_tokens, eos, temperature, seed, keep_logits: logits };
        let encoder_path = encoder.path.clone();
        let done = self.with(py, |decoder| {
            let mut guard = encoder.inner.lock().map_err(|_| anyhow::anyhow!("an earlier call panicked"))?;
            let encoder = guard.as_mut().ok_or_else(|| closed(&encoder_path))?;
            Ok(generate_seq2seq(encoder, decoder, &req)?)
        })?;
        let figures = serde_json::to_string(&done).map_err(|e| raise(py, &e.into()))?;
        Ok((array_out(py, &done.tokens), done.logits.as_ref().map(|a| array_out(py, a)), figures))
    }

    /// Frees the device's buffers; every later use raises `SessionClosedError`.
    fn close(&self, py: Python<'_>) {
        py.detach(|| {
            if let Ok(mut guard) = self.inner.lock() {
                guard.take();
            }
        });
    }

    /// Whether the session is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().map(|g| g.is_none()).unwrap_or(true)
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // As the binary does, before any plugin is loaded: quiet XLA's INFO logs, keep libtpu off
    // the metadata server, and XLA:CPU's memory-minimizing schedule.
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1");
    }
    torchtpu_compile::internal::prepare_libtpu_environment();
    torchtpu_compile::internal::prepare_xla_environment();
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(execute, m)?)?;
    m.add_function(wrap_pyfunction!(execute_status, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(command_flags, m)?)?;
    m.add_class::<Session>()?;
    Ok(())
}
