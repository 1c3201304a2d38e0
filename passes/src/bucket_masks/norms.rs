//! Normalizations whose statistics span a padded dim: written out as their arithmetic, with
//! the statistics taken over the real positions only.

use super::rules::Across;
use super::{static_view, Masker, Res};
use crate::ir::ops::{Binary, Convert, GroupNorm, Reduce};
use crate::ir::{
    BinaryOp, DType, Dim, Graph, NodeId, Op, Operand, ReduceOp, Scalar, SymExpr, TensorType, UnaryOp, ValueRef,
};

impl Masker<'_> {
    /// `native_group_norm` of `[N, C, *spatial]` padded along spatial dims (the time of
    /// wav2vec2's feature encoder, the height and width of a diffusion UNet): in the group
    /// layout `[N, G, C/G, *spatial]`, `mean = Σx / count` and `var = Σ(x − mean)² / count` over
    /// the real positions, `count` being `C/G` times the real spatial sizes, the input and the
    /// centred values zeroed past them; then the affine part per channel. In `f32` for lower
    /// precisions, as the op's own lowering. Only when the op's `mean` and `rstd` are unused
    /// (inference).
    pub(super) fn group_norm(&mut self, graph: &mut Graph, id: NodeId, gn: &GroupNorm, across: &[Across]) -> Res<()> {
        if across.iter().any(|(slot, d, f)| *slot != 0 || *d < 2 || f.len() > 1) {
            return Err("normalizes over dynamic channels or over merged dynamic dims".into());
        }
        let stats_used = graph.users(id).iter().any(|u| u.2 > 0)
            || graph.outputs().iter().any(|o| o.value.node == id && o.value.slot > 0);
        if stats_used {
            return Err("its mean and rstd are used along a dynamic dim".into());
        }
        let ins = graph.inputs(id);
        let ty = Self::ty(graph, ins[0]);
        let dims: Vec<i64> = ty.dims.iter().map(Dim::as_static).collect::<Option<_>>().ok_or("not specialized")?;
        let (n, c, g) = (dims[0], dims[1], gn.groups);
        if g <= 0 || c % g != 0 {
            return Err(format!("{c} channels do not split into {g} groups").into());
        }
        let out_ty = graph.node(id).outputs[0].clone();
        let acc = if matches!(ty.dtype, DType::F32 | DType::F64) { ty.dtype } else { DType::F32 };
        let mut grouped = vec![n, g, c / g];
        grouped.extend(&dims[2..]);
        let grouped_ty = TensorType::new(acc, &grouped);
        let mut stat = vec![n, g];
        stat.resize(grouped.len(), 1);
        let stat_ty = TensorType::new(acc, &stat);
        let users = graph.users(id);

        let mut x = ins[0];
        if ty.dtype != acc {
            x = self.add(graph, id, Op::Convert(Convert), TensorType::new(acc, &dims), &[x]);
        }
        x = self.add(graph, id, static_view(&grouped), grouped_ty.clone(), &[x]);
        // The padded dims move one on in the group layout.
        let padded: Vec<(usize, &[SymExpr])> = across.iter().map(|(_, d, f)| (d + 1, f.as_slice())).collect();
        let zero = Scalar::Float(0.0);
        for &(d, f) in &padded {
            x = self.mask(graph, id, (x, d), f, zero)?;
        }
        // The real count of a group: its channels times every spatial dim's real size.
        let mut count = vec![SymExpr::Int(c / g)];
        for (d, &size) in dims.iter().enumerate().skip(2) {
            let real = across.iter().find(|(_, ad, _)| *ad == d).map(|(_, _, f)| f[0].clone());
            count.push(real.unwrap_or(SymExpr::Int(size)));
        }
        let count = self.length(graph, id, &SymExpr::Mul(count).simplify())?;
        let count = self.add(graph, id, Op::Convert(Convert), TensorType::new(acc, &[]), &[count]);
        let tensor = |op| Op::Binary(Binary { op, lhs: Operand::Tensor, rhs: Operand::Tensor, alpha: None });
        let sum = Op::Reduce(Reduce {
            op: ReduceOp::Sum,
            dims: (2..grouped.len() as i64).collect(),
            keepdim: true,
            dtype: None,
        });

        let total = self.add(graph, id, sum.clone(), stat_ty.clone(), &[x]);
        let mean = self.add(graph, id, tensor(BinaryOp::Div), stat_ty.clone(), &[total, count]);
        let mut centred = self.add(graph, id, tensor(BinaryOp::Sub), grouped_ty.clone(), &[x, mean]);
        for &(d, f) in &padded {
            centred = self.mask(graph, id, (centred, d), f, zero)?;
        }
        let square = self.add(graph, id, tensor(BinaryOp::Mul), grouped_ty.clone(), &[centred, centred]);
        let var = self.add(graph, id, sum, stat_ty.clone(), &[square]);
        let var = self.add(graph, id, tensor(BinaryOp::Div), stat_ty.clone(), &[var, count]);
        let eps = Op::Binary(Binary {
            op: BinaryOp::Add,
            lhs: Operand::Tensor,
            rhs: Operand::Scalar(Scalar::Float(gn.eps)),
            alpha: None,
        });
        let var = self.add(graph, id, eps, stat_ty.clone(), &[var]);
        let rstd = self.add(graph, id, Op::Unary(UnaryOp::Rsqrt), stat_ty, &[var]);
        let normalized = self.add(graph, id, tensor(BinaryOp::Mul), grouped_ty, &[centred, rstd]);
        let y_ty = TensorType::new(acc, &dims);
        let mut y = self.add(graph, id, static_view(&dims), y_ty.clone(), &[normalized]);

        // The affine part: weight and bias `[C]`, as `[C, 1, …]` against `[N, C, *spatial]`.
        let mut per_channel = vec![c];
        per_channel.resize(dims.len() - 1, 1);
        let mut params = ins[1..].iter();
        for (present, op) in [(gn.has_weight, BinaryOp::Mul), (gn.has_bias, BinaryOp::Add)] {
            let Some(&param) = present.then(|| params.next()).flatten() else { continue };
            let mut p = param;
            if graph.value_type(param).dtype != acc {
                p = self.add(graph, id, Op::Convert(Convert), TensorType::new(acc, &[c]), &[p]);
            }
            p = self.add(graph, id, static_view(&per_channel), TensorType::new(acc, &per_channel), &[p]);
            y = self.add(graph, id, tensor(op), y_ty.clone(), &[y, p]);
        }
        if out_ty.dtype != acc {
            y = self.add(graph, id, Op::Convert(Convert), out_ty, &[y]);
        }
        self.take_over(graph, ValueRef { node: id, slot: 0 }, y, users);
        Ok(())
    }
}
