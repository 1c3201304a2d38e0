//! The manifest's signature: the user inputs and every graph output with their dims (static,
//! or expressions of the symbols), the symbols with where each gets its value, and the export's
//! guards; and the files `run` writes the outputs to.

use serde::{Deserialize, Serialize};
use torchtpu_passes::ir::{Dim, OutputKind, SymExpr, TensorType};

/// A user input or output: name, dtype and dims (ints, or symbol expressions).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignatureValue {
    pub name: String,
    pub dtype: String,
    pub dims: Vec<serde_json::Value>,
    /// For outputs: `user`, `loss`, `gradient <fqn>`, … (see `inspect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The dims as expressions (`run` evaluates them at the real sizes of a dynamic program).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sym_dims: Vec<SymExpr>,
}

/// A value's dims as the manifest and `inspect` write them: ints, or the text of a symbolic
/// expression.
pub(crate) fn dims_json(ty: &TensorType) -> Vec<serde_json::Value> {
    ty.dims
        .iter()
        .map(|d| match d {
            Dim::Static(v) => serde_json::Value::from(*v),
            Dim::Sym(e) => serde_json::Value::from(e.to_string()),
        })
        .collect()
}

/// What a graph output is, as the manifest and `inspect` say it: `user`, `loss`,
/// `gradient <fqn>`, `buffer_mutation <fqn>`, ….
pub(crate) fn describe_output(kind: &OutputKind) -> String {
    match kind {
        OutputKind::User { .. } => "user".into(),
        OutputKind::Loss => "loss".into(),
        OutputKind::GradientToParameter { fqn } => format!("gradient {fqn}"),
        OutputKind::GradientToUserInput { input } => format!("gradient of input {input}"),
        OutputKind::BufferMutation { fqn } => format!("buffer_mutation {fqn}"),
        OutputKind::ParameterMutation { fqn } => format!("parameter_mutation {fqn}"),
        OutputKind::UserInputMutation { input } => format!("user_input_mutation {input}"),
        OutputKind::Size { symbol } => format!("size {symbol}"),
    }
}

/// The file `run` writes each output to: `state_<name>.npy` for an updated buffer or parameter
/// (or a mutated user input), named after it, and `out_<j>.npy` for the others (the user's
/// outputs, or a training step's loss and gradients), numbered in graph order among themselves.
pub fn output_files(outputs: &[SignatureValue]) -> Vec<String> {
    let mut next = 0;
    outputs
        .iter()
        .map(|o| {
            let kind = o.kind.as_deref().unwrap_or("user");
            let state = ["buffer_mutation ", "parameter_mutation ", "user_input_mutation "]
                .iter()
                .find_map(|prefix| kind.strip_prefix(prefix));
            match state {
                Some(name) => format!("state_{}.npy", file_safe(name)),
                None => {
                    next += 1;
                    format!("out_{}.npy", next - 1)
                }
            }
        })
        .collect()
}

/// `name` with every character but letters, digits, `.`, `_` and `-` made `_` (a state name
/// comes from the archive and must not leave the output folder).
fn file_safe(name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    if safe.is_empty() || safe.starts_with('.') {
        format!("_{safe}")
    } else {
        safe
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SymbolInfo {
    pub name: String,
    pub min: Option<i64>,
    pub max: Option<i64>,
    /// The user input and dimension that give the symbol its value.
    pub input: usize,
    pub dim: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Signature {
    pub inputs: Vec<SignatureValue>,
    pub outputs: Vec<SignatureValue>,
    pub symbols: Vec<SymbolInfo>,
    /// The export's guards: conditions on the inputs' sizes that every call must meet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<crate::Guard>,
    /// The program has random ops and takes a `u64[2]` seed after the user inputs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rng_seed: bool,
}
