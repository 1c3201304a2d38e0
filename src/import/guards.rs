//! The export's guards read into the program: each of `guards_code`, and each relation between
//! symbols that `range_constraints` bounds (`8*s52` in `[16, 64]`, a derived dim), parsed and
//! checked against the program's inputs. A guard that does not parse, or reads an input the
//! program does not take, fails the import naming it: none is ignored.

use std::collections::BTreeMap;

use torchtpu_passes::ir::{Graph, InputKind, Op};

use super::schema::ExportedProgram;
use super::{shown, ImportError, SymbolBinding};
use crate::guards::{input_index, Guard};

/// The program's guards, in the order the export wrote them, then the relations.
pub(super) fn read(
    ep: &ExportedProgram,
    graph: &Graph,
    bindings: &BTreeMap<String, SymbolBinding>,
) -> Result<Vec<Guard>, ImportError> {
    let ranks = user_input_ranks(graph);
    let names: Vec<&str> = ranks.iter().map(|(n, _)| n.as_str()).collect();
    let mut out: Vec<Guard> = vec![];
    for text in &ep.guards_code {
        let refuse = |reason: String| ImportError::Guard { guard: shown(text), reason };
        let guard = Guard::parse(text).map_err(refuse)?;
        for (input, dim) in guard.inputs() {
            let Some(rank) = input_index(&input, &names).map(|i| ranks[i].1) else {
                return Err(refuse(format!(
                    "it reads input `{}`, which the program does not take (its inputs: {})",
                    shown(&input),
                    names.join(", ")
                )));
            };
            if let Some(d) = dim.filter(|&d| d >= rank) {
                return Err(refuse(format!("it reads dim {d} of input `{input}`, which has {rank}")));
            }
        }
        if !out.contains(&guard) {
            out.push(guard);
        }
    }
    for (relation, rc) in &ep.range_constraints {
        if is_symbol(relation) {
            continue;
        }
        let refuse = |reason: String| ImportError::RangeConstraint { symbol: shown(relation), reason };
        let Some(guard) = Guard::of_range(relation, rc.min_val, rc.max_val) else { continue };
        let guard = guard.map_err(refuse)?;
        // A relation among sizes the data makes is checked where they are computed; one over
        // symbols the program no longer uses says nothing about its inputs.
        if guard.symbols().iter().all(|s| bindings.contains_key(s)) {
            out.push(guard);
        }
    }
    Ok(out)
}

/// A plain symbol (`s70`, `u0`): its range is the symbol's own bounds.
fn is_symbol(key: &str) -> bool {
    key.strip_prefix(['s', 'u']).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Each user input's name and number of dims, in the order of the program's user inputs.
fn user_input_ranks(graph: &Graph) -> Vec<(String, usize)> {
    let mut inputs: Vec<(usize, String, usize)> = graph
        .graph_inputs()
        .iter()
        .filter_map(|&id| match graph.node(id).op {
            Op::Input(InputKind::User { index }) => {
                Some((index, graph.node(id).name.clone(), graph.node(id).outputs[0].dims.len()))
            }
            _ => None,
        })
        .collect();
    inputs.sort();
    inputs.into_iter().map(|(_, name, rank)| (name, rank)).collect()
}
