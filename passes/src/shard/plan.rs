//! Plan files (`--shard-plan FILE`): per module, how the `shard` pass treats its weights along
//! `tp`, in the words of PyTorch's `parallelize_module`, and per user input, which mesh axis
//! splits each dim; whatever a file does not name follows the `auto` plan.
//!
//! ```json
//! {
//!   "modules": {
//!     "model.layers.*.self_attn.q_proj": "colwise",
//!     "model.layers.*.self_attn.o_proj": "rowwise",
//!     "model.layers.1.mlp": "replicate",
//!     "model.embed_tokens": "vocab"
//!   },
//!   "inputs": { "input_ids": ["dp", null] }
//! }
//! ```
//!
//! A pattern names a module path component by component, `*` standing for any text within one
//! component; it covers the weights of that module and of the modules under it, and the most
//! specific pattern covering a weight decides (the longest; of equal length, the one with the
//! fewest `*` components; two such that disagree are refused). `colwise` and `rowwise` state what the analysis
//! must find for the module's matmuls (a file never forces a split that the analysis cannot
//! prove exact: a module it cannot split that way is refused by name), `replicate` keeps the
//! module's weights whole, and `vocab` (or `rowwise` on an embedding) splits an embedding
//! table along its rows, however small, and `sequence` runs a module (a norm) on activations
//! split along the sequence (`sequence`). A user input named under `inputs` is split
//! as listed (`null`: whole), replacing the `auto` split of its first dim along `dp`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::ir::{Graph, InputKind, NodeId, Op, WeightRecipe};

/// A plan file, as read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardPlan {
    /// Module-path patterns and their styles.
    #[serde(default)]
    pub modules: BTreeMap<String, Style>,
    /// User inputs by name: per dim, the mesh axis that splits it (`None`: whole).
    #[serde(default)]
    pub inputs: BTreeMap<String, Vec<Option<String>>>,
}

/// What a plan says of a module (PyTorch's parallel styles).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    /// Matmuls split along their output features (`ColwiseParallel`).
    Colwise,
    /// Matmuls split along their input features, then all-reduced (`RowwiseParallel`); on an
    /// embedding table, its rows.
    Rowwise,
    /// Weights whole on every device.
    Replicate,
    /// An embedding table split along its rows (the vocabulary).
    Vocab,
    /// A module run on activations split along the sequence (`SequenceParallel`).
    Sequence,
}

impl Style {
    /// The word a plan file uses.
    pub fn word(self) -> &'static str {
        match self {
            Style::Colwise => "colwise",
            Style::Rowwise => "rowwise",
            Style::Replicate => "replicate",
            Style::Vocab => "vocab",
            Style::Sequence => "sequence",
        }
    }
}

/// The module a weight input belongs to and the style the plan gives it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Assigned {
    pub module: String,
    pub style: Style,
}

impl ShardPlan {
    /// Reads a plan file's text.
    pub fn from_json(text: &str) -> Result<ShardPlan, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The style of every weight input of `graph` that a pattern covers; an error names a
    /// pattern that covers no weight, a style not supported, or two patterns of one length
    /// that disagree on a module.
    pub(super) fn assign(&self, graph: &Graph) -> Result<BTreeMap<NodeId, Assigned>, String> {
        let mut assigned = BTreeMap::new();
        let mut used: Vec<&str> = Vec::new();
        // Weights a pass has replaced (padded, narrowed) are left without users: skipped.
        let used_inputs = graph.graph_inputs().iter().copied().filter(|&id| !graph.users(id).is_empty());
        for id in used_inputs {
            let Some(module) = weight_module(graph, id) else { continue };
            let covering: Vec<(&String, Style)> =
                self.modules.iter().filter(|(p, _)| covers(p, &module)).map(|(p, &s)| (p, s)).collect();
            let Some(most) = covering.iter().map(|(p, _)| specificity(p)).max() else { continue };
            let mut best = covering.iter().filter(|(p, _)| specificity(p) == most);
            let (pattern, style) = *best.next().expect("a most specific pattern");
            if let Some((other, _)) = best.find(|(_, s)| *s != style) {
                return Err(format!(
                    "plan: `{pattern}` ({}) and `{other}` disagree on module `{module}`; make one of them more specific",
                    style.word()
                ));
            }
            used.extend(covering.iter().map(|(p, _)| p.as_str()));
            assigned.insert(id, Assigned { module, style });
        }
        // `sequence` patterns name modules by their nodes, which may have no weights (a dropout).
        let unused = self.modules.iter().find(|(p, &s)| s != Style::Sequence && !used.contains(&p.as_str()));
        if let Some((p, _)) = unused {
            return Err(format!(
                "plan: `{p}` names no module with weights; module paths look like {}",
                examples(graph).join(", ")
            ));
        }
        Ok(assigned)
    }
}

/// How specific a pattern is: its components, then those without a `*`.
fn specificity(pattern: &str) -> (usize, usize) {
    let parts = pattern.split('.');
    (parts.clone().count(), parts.filter(|c| !c.contains('*')).count())
}

/// The module path of a weight input: its state-dict name (or, for a derived weight, that of
/// the first stored weight it is made from) without the last component.
fn weight_module(graph: &Graph, id: NodeId) -> Option<String> {
    let Op::Input(kind) = &graph.node(id).op else { return None };
    let fqn = match kind {
        InputKind::Derived { recipe, .. } => stored_source(recipe)?,
        k => k.weight_fqn()?,
    };
    fqn.rsplit_once('.').map(|(module, _)| module.to_string())
}

/// The first stored weight a recipe reads.
fn stored_source(recipe: &WeightRecipe) -> Option<&str> {
    match recipe {
        WeightRecipe::Cast { weight } | WeightRecipe::BnFoldedWeight { weight, .. } => Some(weight),
        WeightRecipe::ConcatRows { weights } => weights.first().map(String::as_str),
        WeightRecipe::Pad { source, .. }
        | WeightRecipe::Narrow { source, .. }
        | WeightRecipe::Permute { source, .. } => stored_source(source),
        WeightRecipe::BnFoldedBias { mean, .. } => Some(mean),
    }
}

/// A few module paths of `graph`'s weights, for a message.
fn examples(graph: &Graph) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for &id in graph.graph_inputs() {
        if let Some(m) = weight_module(graph, id) {
            if !seen.contains(&m) && seen.len() < 3 {
                seen.push(m);
            }
        }
    }
    seen.iter().map(|m| format!("`{m}`")).collect()
}

/// Whether `pattern` names `module` or a module above it: component by component, `*`
/// matching any text within one.
pub(super) fn covers(pattern: &str, module: &str) -> bool {
    let (p, m): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), module.split('.').collect());
    p.len() <= m.len() && p.iter().zip(&m).all(|(p, m)| glob(p.as_bytes(), m.as_bytes()))
}

/// `*` matches any run of characters (iteratively, remembering the last `*` to back up to).
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < s.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == s[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_cover_modules_and_their_children() {
        assert!(covers("model.layers.*.mlp", "model.layers.0.mlp.up_proj"));
        assert!(covers("model.layers.*.mlp", "model.layers.11.mlp"));
        assert!(!covers("model.layers.*.mlp", "model.layers.0.self_attn.q_proj"));
        assert!(!covers("model.layers.0.mlp.up_proj", "model.layers.0.mlp"));
        assert!(covers("*.h.*.attn.c_*", "transformer.h.3.attn.c_proj"));
        assert!(!covers("layers", "model.layers"));
    }

    #[test]
    fn glob_matches_within_a_component() {
        assert!(glob(b"*_proj", b"q_proj"));
        assert!(glob(b"a*b*c", b"aXbYbZc"));
        assert!(!glob(b"a*b*c", b"aXbYbZ"));
        assert!(glob(b"*", b""));
        assert!(!glob(b"q", b""));
    }

    #[test]
    fn files_name_styles_in_pytorchs_words() {
        let text = r#"{"modules": {"a.*": "colwise", "b": "replicate"}, "inputs": {"x": ["dp", null]}}"#;
        let plan = ShardPlan::from_json(text).expect("a plan");
        assert_eq!(plan.modules["a.*"], Style::Colwise);
        assert_eq!(plan.inputs["x"], vec![Some("dp".to_string()), None]);
        let err = ShardPlan::from_json(r#"{"modules": {"a": "colwize"}}"#).expect_err("a typo");
        assert!(err.contains("unknown variant `colwize`, expected one of `colwise`"), "{err}");
        let err = ShardPlan::from_json(r#"{"module": {}}"#).expect_err("a typo");
        assert!(err.contains("unknown field `module`"), "{err}");
    }
}
