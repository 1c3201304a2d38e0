//! The seeds of padding: matmuls, convolutions and embeddings whose feature dims are
//! widened (with zero-padded derived weights), and `bmm`s that contract padded dims.

use super::{padded_dim, Contraction, Padded, Padder, Width, Widths};
use crate::ir::{Graph, NodeId, ValueRef, WeightRecipe};
use crate::pass::{PaddedContraction, PaddedDim};

impl Padder {
    /// `mm(x, w)` (`x_slot` 0) or `addmm(c, x, w)` (`x_slot` 1) on 2-D float operands.
    pub(super) fn matmul(&mut self, graph: &mut Graph, id: NodeId, x_slot: u16) -> bool {
        let ins = graph.inputs(id);
        let (x, w) = (ins[usize::from(x_slot)], ins[usize::from(x_slot) + 1]);
        let (Some(xd), Some(wd)) = (graph.value_type(x).static_dims(), graph.value_type(w).static_dims()) else {
            return false;
        };
        let (&[m, _], &[k, n]) = (&xd[..], &wd[..]) else { return false };
        if !graph.node(id).outputs[0].dtype.is_float() {
            return false;
        }
        let c = Contraction { x_slot, w_in: 0, w_out: 1, roles: ["k", "n"], k, n, macs_per_pair: m };
        let features = self.features(graph, id, 1, n);
        let Some(n_pad) = self.contract(graph, id, c, features) else {
            return !ins.iter().any(|v| self.state.contains_key(v));
        };
        if x_slot == 1 {
            self.pad_bias(graph, id, 0, n, &n_pad);
        }
        self.set_output(graph, id, 0, Padded { dims: n_pad, zero: true });
        true
    }

    /// Pads `x`'s dim 1 where it arrives padded and the output features always (`features`),
    /// with the weight to match; records the contraction. `None` when there is nothing to pad.
    pub(super) fn contract(&mut self, graph: &mut Graph, id: NodeId, c: Contraction, n_pad: Widths) -> Option<Widths> {
        let ins = graph.inputs(id);
        let (x, w) = (ins[usize::from(c.x_slot)], ins[usize::from(c.x_slot) + 1]);
        let k_pad: Widths = self.arriving(x, 1).map(|k| (1, k)).into_iter().collect();
        if k_pad.is_empty() && n_pad.is_empty() && !self.state.contains_key(&x) {
            return None;
        }
        let new_x = self.with_padding(graph, x, &k_pad);
        graph.set_input(id, c.x_slot, new_x);
        let w_want: Widths =
            k_pad.values().map(|&k| (c.w_in, k)).chain(n_pad.values().map(|&n| (c.w_out, n))).collect();
        let new_w = self.with_padding(graph, w, &w_want);
        graph.set_input(id, c.x_slot + 1, new_w);
        let k = k_pad.get(&1).copied().unwrap_or(Width::at_end(c.k, c.k));
        let n = n_pad.get(&1).copied().unwrap_or(Width::at_end(c.n, c.n));
        let dims = [(c.roles[0], k), (c.roles[1], n)]
            .into_iter()
            .filter(|(_, w)| w.size != w.padded)
            .map(|(role, w)| padded_dim(role, w))
            .collect();
        let extra_flops = 2 * c.macs_per_pair * (k.padded * n.padded - c.k * c.n);
        self.contractions.push(PaddedContraction {
            node: graph.node(id).name.clone(),
            dims,
            extra_flops: extra_flops as u64,
        });
        Some(n_pad)
    }

    /// A bias operand (`[n]`, or `[.., n]` broadcast against the result) widened like the
    /// result's last dim.
    pub(super) fn pad_bias(&mut self, graph: &mut Graph, id: NodeId, slot: u16, n: i64, n_pad: &Widths) {
        let b = graph.inputs(id)[usize::from(slot)];
        let Some(bd) = graph.value_type(b).static_dims() else { return };
        let last = bd.len().saturating_sub(1);
        let want = match (bd.last(), n_pad.values().next()) {
            (Some(&size), Some(&w)) if size == n => Widths::from([(last, w)]),
            _ => Widths::new(),
        };
        let new_b = self.with_padding(graph, b, &want);
        graph.set_input(id, slot, new_b);
    }

    /// `bmm(a, b)` on `[B, M, K] × [B, K, N]` operands (attention's `Q·Kᵀ` and `P·V`): a
    /// padded `K` is contracted padded, with zeros in at least one operand; padded `M` and `N`
    /// carry through to the result.
    pub(super) fn bmm(&mut self, graph: &mut Graph, id: NodeId) -> bool {
        let [a, b] = graph.inputs(id)[..] else { return false };
        let (pa, pb) = (self.state.get(&a).cloned(), self.state.get(&b).cloned());
        let dims_of = |p: &Option<Padded>| p.as_ref().map(|p| p.dims.clone()).unwrap_or_default();
        let (mut wa, mut wb) = (dims_of(&pa), dims_of(&pb));
        if wa.contains_key(&0) || wb.contains_key(&0) || !graph.node(id).outputs[0].dtype.is_float() {
            return false;
        }
        let k = match (wa.get(&2), wb.get(&1)) {
            (Some(x), Some(y)) if x != y => return false,
            (x, y) => x.or(y).copied(),
        };
        if let Some(k) = k {
            wa.insert(2, k);
            wb.insert(1, k);
        }
        let new_a = self.with_padding_keep_fill(graph, a, &wa);
        let mut new_b = self.with_padding_keep_fill(graph, b, &wb);
        let zero = |s: &Self, v: ValueRef| s.state.get(&v).is_none_or(|p| p.zero);
        if k.is_some() && !zero(self, new_a) && !zero(self, new_b) {
            new_b = self.with_padding(graph, b, &wb);
        }
        graph.set_input(id, 0, new_a);
        graph.set_input(id, 1, new_b);
        let out: Widths = wa.get(&1).map(|&m| (1, m)).into_iter().chain(wb.get(&2).map(|&n| (2, n))).collect();
        let out_zero = (!out.contains_key(&1) || zero(self, new_a)) && (!out.contains_key(&2) || zero(self, new_b));
        // (true, padded) sizes of M, K and N.
        let size = |v: ValueRef, d: usize, w: Option<&Width>| {
            let s = graph.value_type(v).dims[d].as_static().unwrap_or(1);
            w.map_or((s, s), |w| (w.size, w.padded))
        };
        let [(m, mp), (kk, kp), (n, np)] = [size(a, 1, out.get(&1)), size(a, 2, k.as_ref()), size(b, 2, out.get(&2))];
        let dims: Vec<PaddedDim> = [("m", out.get(&1)), ("k", k.as_ref()), ("n", out.get(&2))]
            .into_iter()
            .filter_map(|(role, w)| w.map(|&w| padded_dim(role, w)))
            .collect();
        if !dims.is_empty() {
            let batch = size(a, 0, None).0;
            let extra_flops = 2 * batch * (mp * kp * np - m * kk * n);
            self.contractions.push(PaddedContraction {
                node: graph.node(id).name.clone(),
                dims,
                extra_flops: extra_flops as u64,
            });
        }
        self.set_output(graph, id, 0, Padded { dims: out, zero: out_zero });
        true
    }

    /// A convolution with one group: channels in (where the input arrives padded) and out.
    pub(super) fn convolution(&mut self, graph: &mut Graph, id: NodeId) -> bool {
        let ins = graph.inputs(id);
        let out = graph.node(id).outputs[0].clone();
        let (Some(wd), Some(od)) = (graph.value_type(ins[1]).static_dims(), out.static_dims()) else { return false };
        if !out.dtype.is_float() || wd.len() < 3 {
            return false;
        }
        // Multiply-adds per (input channel, output channel) pair.
        let macs_per_pair = od[0] * od[2..].iter().product::<i64>() * wd[2..].iter().product::<i64>();
        let c =
            Contraction { x_slot: 0, w_in: 1, w_out: 0, roles: ["c_in", "c_out"], k: wd[1], n: wd[0], macs_per_pair };
        let c_out = self.widen(1, c.n);
        let Some(c_out_pad) = self.contract(graph, id, c, c_out) else {
            return !ins.iter().any(|v| self.state.contains_key(v));
        };
        if ins.len() > 2 {
            let want: Widths = c_out_pad.values().map(|&p| (0, p)).collect();
            let new_b = self.with_padding(graph, ins[2], &want);
            graph.set_input(id, 2, new_b);
        }
        self.set_output(graph, id, 0, Padded { dims: c_out_pad, zero: true });
        true
    }

    /// `embedding(w, idx)`: the embedding width padded (zero columns in the table).
    pub(super) fn embedding(&mut self, graph: &mut Graph, id: NodeId) -> bool {
        let [w, idx] = graph.inputs(id)[..] else { return false };
        if self.state.contains_key(&w) || self.state.contains_key(&idx) {
            return false;
        }
        let out = graph.node(id).outputs[0].clone();
        let Some(wd) = graph.value_type(w).static_dims() else { return false };
        let (&[_, e], true) = (&wd[..], WeightRecipe::handles(out.dtype)) else { return false };
        let widths = self.widen(1, e);
        if widths.is_empty() {
            return true;
        }
        let new_w = self.with_padding(graph, w, &widths);
        graph.set_input(id, 0, new_w);
        let dims = vec![padded_dim("embed", widths[&1])];
        self.contractions.push(PaddedContraction { node: graph.node(id).name.clone(), dims, extra_flops: 0 });
        let last = out.rank() - 1;
        self.set_output(graph, id, 0, Padded { dims: widths.values().map(|&w| (last, w)).collect(), zero: true });
        true
    }
}
