//! Control flow in a bucket: each region of a `cond`, `while_loop` or `scan` is masked as a
//! program of its own. The op passes the real sizes into its regions (one `i64[]` operand per
//! symbol, after the others: for a loop, values it reads and never changes), and the region's
//! inputs are padded where their types are symbolic, with real positions a prefix — as every
//! operand is, since operands that merge a dynamic size under other dims are refused. A scan
//! with a carry along a dynamic dim is refused: its padded steps would change the carry.

use super::{op_name, DynDims, Masker, Res, MERGED};
use crate::ir::ops::Scan;
use crate::ir::{DType, Graph, InputKind, Node, NodeId, Op, TensorType, ValueRef};
use crate::pass::bug;

impl Masker<'_> {
    /// True when `op` has regions that need masking: padded operands, or symbolic sizes inside.
    pub(super) fn needs_region_masks(op: &Op, in_dyn: &[DynDims]) -> bool {
        let symbolic = |g: &Graph| g.node_ids().any(|id| g.node(id).symbolic.is_some());
        !op.regions().is_empty()
            && (in_dyn.iter().any(|d| !d.is_empty()) || op.regions().iter().any(|r| symbolic(&r.0)))
    }

    /// Masks every region of the control-flow node `id` and passes it the real sizes.
    pub(super) fn control_flow(&mut self, graph: &mut Graph, id: NodeId, in_dyn: &[DynDims]) -> Res<()> {
        if in_dyn.iter().any(|d| d.values().any(|f| f.len() > 1)) {
            return Err(MERGED.into());
        }
        let ins = graph.inputs(id);
        if ins.iter().any(|v| [&self.positions, &self.perms].iter().any(|m| m.get(v).is_some_and(|f| f.len() > 1))) {
            return Err("passes positions along a dim that merges a dynamic size into control flow".into());
        }
        let mut op = graph.node(id).op.clone();
        if let Op::Scan(Scan { carried, scanned, .. }) = op {
            let along_dynamic = in_dyn[carried..carried + scanned].iter().any(|d| d.contains_key(&0));
            if carried > 0 && along_dynamic {
                return Err("scans along a dynamic dim with a carry (its padded steps would change the carry)".into());
            }
        }
        let symbols: Vec<String> = self.spec.values.keys().cloned().collect();
        for region in op.regions_mut() {
            self.mask_region(&mut region.0, &symbols)?;
        }
        graph.node_mut(id).op = op;
        for (slot, s) in (ins.len()..).zip(&symbols) {
            let size = *self.sizes.get(s).ok_or_else(|| bug(format!("no size input for `{s}`")))?;
            let slot = u16::try_from(slot).map_err(|_| "too many operands".to_string())?;
            graph.connect(size, id, slot);
        }
        Ok(())
    }

    /// Masks one region, which gets an input per symbol for its real size.
    fn mask_region(&mut self, region: &mut Graph, symbols: &[String]) -> Res<()> {
        let mut inner = Masker::new(self.spec);
        for s in symbols {
            let index = region.graph_inputs().len();
            let node = Node::new(
                format!("size_{s}"),
                Op::Input(InputKind::User { index }),
                [TensorType::new(DType::I64, &[])],
            );
            inner.sizes.insert(s.clone(), ValueRef { node: region.add_input(node), slot: 0 });
        }
        let order = region.topo_order().map_err(|_| bug("a region with a cycle"))?;
        for id in order {
            inner.visit(region, id).map_err(|why| {
                let node = region.node(id);
                why.map(|r| format!("in region `{}`: node `{}` ({}) {r}", region.name, node.name, op_name(node)))
            })?;
        }
        inner.check_outputs(region).map_err(|why| why.map(|r| format!("in region `{}`: {r}", region.name)))?;
        self.masks += inner.masks;
        Ok(())
    }
}
