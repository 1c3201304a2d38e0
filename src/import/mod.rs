//! The front end: a `torch.export.save` archive (`.pt2`) into the IR, without Python or pickle.
//!
//! [`import`] maps the archive, reads `models/model.json` into the schema types, checks every
//! weight and constant against its storage, and builds the [`Graph`]: one node per FX node,
//! typed outputs from `tensor_values`, symbols with their `range_constraints` bounds.

mod archive;
mod args;
mod build;
mod guards;
mod ops;
mod payload;
mod schema;
mod srepr;
mod wire;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use thiserror::Error;
use torchtpu_passes::ir::{Graph, NodeId, Op};
use torchtpu_passes::VerifyError;

pub(crate) use crate::display::shown;

pub(crate) use archive::Archive;
pub(crate) use build::SymbolBinding;
#[cfg(test)]
pub(crate) use payload::PayloadSource;
pub(crate) use payload::Weight;

/// Everything that can be wrong with an input archive. Each variant names the archive entry,
/// weight or node concerned.
#[derive(Debug, Error)]
pub enum ImportError {
    #[error("cannot read `{}`: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Writing the weights read from the archive failed (a full disk): the writer's error, for
    /// the caller to name the file it was writing.
    #[error("{source}")]
    Write { source: std::io::Error },
    #[error("not a pt2 archive (a zip written by torch.export.save): {reason}")]
    NotAnArchive { reason: String },
    #[error("archive entry `{entry}`: {reason}")]
    BadEntry { entry: String, reason: String },
    #[error("archive entry `{entry}` is missing")]
    MissingEntry { entry: String },
    #[error("archive entry `{entry}`: {what} at line {line}, column {column}: {message}")]
    Json { entry: String, what: &'static str, line: usize, column: usize, message: String },
    #[error(
        "archive entry `{entry}`: export schema version {major}.{minor} is not supported \
         (this compiler reads schema 8.x)"
    )]
    SchemaVersion { entry: String, major: i64, minor: i64 },
    #[error("weight `{fqn}` (archive entry `{entry}`): {reason}")]
    Payload { fqn: String, entry: String, reason: String },
    #[error("tensor `{tensor}` in `tensor_values`: {reason}")]
    TensorMeta { tensor: String, reason: String },
    #[error("graph signature: {reason}")]
    Signature { reason: String },
    #[error("guard `{guard}` of the export: {reason}")]
    Guard { guard: String, reason: String },
    #[error("range constraint of symbol `{symbol}`: {reason}")]
    RangeConstraint { symbol: String, reason: String },
    #[error("node `{node}` ({target}): {reason}{}", at_line(stack))]
    Node { node: String, target: String, reason: String, stack: Option<String> },
    /// An invariant of the importer broke while it translated a node: a bug, never a verdict
    /// on the archive.
    #[error("internal error while importing node `{node}` ({target}), a bug in torchtpu-compile (please report it): {reason}")]
    Bug { node: String, target: String, reason: String },
    #[error("the imported graph is malformed: {0}")]
    Verify(#[from] VerifyError),
}

/// `\n  at File "model.py", line 12, in forward` when a source line is known.
fn at_line(stack: &Option<String>) -> String {
    stack.as_ref().map_or_else(String::new, |s| format!("\n  at {s}"))
}

/// Version and provenance of the exported program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// `schema_version` of `model.json` (major, minor).
    pub schema_version: (i64, i64),
    /// The torch version that exported it, e.g. `2.15.0+cu132`.
    pub torch_version: Option<String>,
}

/// An imported program: the graph plus the weights it takes, still in the mapped archive.
#[derive(Debug)]
pub struct Program {
    /// The archive, kept mapped; weights are read from it on demand.
    pub archive: Archive,
    /// The verified graph.
    pub graph: Graph,
    /// Every tensor of the payload configs, by fully qualified name.
    pub weights: BTreeMap<String, Weight>,
    /// How each symbol is bound from the user inputs at run time.
    pub bindings: BTreeMap<String, SymbolBinding>,
    /// The conditions on the inputs' sizes under which the export traced the program.
    pub guards: Vec<crate::guards::Guard>,
    /// Python constants baked into the signature (`constant_input` specs), as JSON text.
    pub constant_inputs: Vec<(String, String)>,
    /// Schema and torch version.
    pub info: ExportInfo,
}

impl Program {
    /// Nodes whose target has no translation, in topological order.
    pub fn unsupported_nodes(&self) -> Vec<NodeId> {
        let order = self.graph.topo_order().unwrap_or_default();
        order.into_iter().filter(|&id| matches!(self.graph.node(id).op, Op::Unsupported(_))).collect()
    }
}

const MODEL_JSON: &str = "models/model.json";

/// Reads and verifies a `.pt2` archive.
pub fn import(path: &Path) -> Result<Program, ImportError> {
    import_checked(path, Integrity::Check, &|_| {})
}

/// Whether to check every byte of an archive against its CRC-32s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Integrity {
    /// Read every payload and check its CRC-32.
    Check,
    /// These very bytes were checked before (the cache remembers the file by its identity:
    /// path, inode, size, modification and change times), so they are not read again; the
    /// structure is still checked.
    KnownIntact,
    /// Check every entry but the weights' and constants' payloads now; whoever opens it so
    /// checks those before anything made from them is kept ([`Archive::blake3_verifying`]:
    /// a compile does it while XLA compiles).
    PayloadsLater,
}

/// Reads a `.pt2` archive, checking its payloads' CRC-32s as `integrity` says and telling
/// `progress` how many bytes each step of the check read.
pub(crate) fn import_checked(
    path: &Path,
    integrity: Integrity,
    progress: &dyn Fn(u64),
) -> Result<Program, ImportError> {
    let archive = Archive::open(path, integrity, progress)?;
    check_container(&archive)?;
    let probe: schema::VersionProbe = parse_json(&archive, MODEL_JSON)?;
    if let Some(v) = probe.schema_version {
        if v.major != schema::SCHEMA_MAJOR {
            return Err(ImportError::SchemaVersion {
                entry: archive.entry_name(MODEL_JSON),
                major: v.major,
                minor: v.minor,
            });
        }
    }
    let ep: schema::ExportedProgram = parse_json(&archive, MODEL_JSON)?;
    let mut weights = payload::load_payloads(&archive)?;
    for w in weights.values_mut() {
        if let Some(pairs) = w.as_real_pairs() {
            *w = pairs;
        }
    }
    let name = path.file_stem().map_or_else(|| archive.root().to_string(), |s| s.to_string_lossy().into_owned());
    let built = build::build(&name, &archive, &ep, &weights)?;
    torchtpu_passes::verify(&built.graph)?;
    let guards = guards::read(&ep, &built.graph, &built.bindings)?;
    Ok(Program {
        guards,
        archive,
        graph: built.graph,
        weights,
        bindings: built.bindings,
        constant_inputs: built.constant_inputs,
        info: ExportInfo {
            schema_version: (ep.schema_version.major, ep.schema_version.minor),
            torch_version: ep.torch_version,
        },
    })
}

/// The marker files that identify a pt2 archive, and the formats we refuse outright.
fn check_container(archive: &Archive) -> Result<(), ImportError> {
    let format = archive.bytes("archive_format")?;
    if format != b"pt2" {
        return Err(ImportError::BadEntry {
            entry: archive.entry_name("archive_format"),
            reason: format!("expected `pt2`, found `{}`", String::from_utf8_lossy(format)),
        });
    }
    if archive.has("byteorder") && archive.bytes("byteorder")? != b"little" {
        return Err(ImportError::BadEntry {
            entry: archive.entry_name("byteorder"),
            reason: "only little-endian archives are supported".into(),
        });
    }
    for legacy in ["data/weights/model.pt", "data/constants/model.pt"] {
        if archive.has(legacy) {
            return Err(ImportError::BadEntry {
                entry: archive.entry_name(legacy),
                reason: "legacy pickled weights (torch < 2.6) are not supported; re-export with a newer torch".into(),
            });
        }
    }
    Ok(())
}

/// Parses a JSON entry, reporting serde's line and column with the entry name. Text that is
/// not JSON is "invalid JSON"; JSON of another shape than the schema is said to be so.
fn parse_json<T: DeserializeOwned>(archive: &Archive, rel: &str) -> Result<T, ImportError> {
    let bytes = archive.bytes(rel)?;
    serde_json::from_slice(bytes).map_err(|e| {
        let text = e.to_string();
        // serde_json appends " at line L column C"; the variant carries those separately.
        let message = plain_serde_message(text.split(" at line ").next().unwrap_or(&text));
        let what = match e.classify() {
            serde_json::error::Category::Data => "JSON that does not follow the export schema",
            _ => "invalid JSON",
        };
        ImportError::Json { entry: archive.entry_name(rel), what, line: e.line(), column: e.column(), message }
    })
}

/// serde's wording without the Rust type names (`expected struct Graph`, `expected i64`).
fn plain_serde_message(message: &str) -> String {
    let mut out = shown(message.strip_prefix("invalid type: ").unwrap_or(message));
    for (rust, plain) in [
        ("expected i64", "expected an integer that fits in 64 bits"),
        ("expected u64", "expected a non-negative integer that fits in 64 bits"),
        ("expected u32", "expected a non-negative integer that fits in 32 bits"),
        ("expected f64", "expected a number"),
    ] {
        out = out.replace(rust, plain);
    }
    for kind in ["struct", "enum", "map"] {
        while let Some(at) = out.find(&format!("expected {kind} ")) {
            let name_end = out[at + 10 + kind.len()..]
                .find(|c: char| !c.is_alphanumeric())
                .map_or(out.len(), |e| at + 10 + kind.len() + e);
            let plain =
                if kind == "enum" { "expected one of the schema's tagged objects" } else { "expected an object" };
            out.replace_range(at..name_end, plain);
        }
    }
    out
}
