//! Control flow: the higher-order ops whose arguments include subgraphs (`torch.cond`,
//! `while_loop`, `scan`, `map`), imported with their regions by `build::regions`.

use super::Special;

/// Which control-flow op a higher-order target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::import) enum Flow {
    Cond,
    WhileLoop,
    Scan,
    Map,
}

/// The targets of this family (all of them [`Special`]).
pub(super) fn special(key: &str) -> Option<Special> {
    let flow = match key {
        "higher_order.cond" => Flow::Cond,
        "higher_order.while_loop" => Flow::WhileLoop,
        "higher_order.scan" => Flow::Scan,
        "higher_order.map_impl" => Flow::Map,
        _ => return None,
    };
    Some(Special::ControlFlow(flow))
}
