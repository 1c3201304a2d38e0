//! The rule of `upsample` along padded spatial dims (a segmentation head resized back to its
//! input's height and width, a bilinear upsampling by a factor).
//!
//! The emitter multiplies each spatial dim by an interpolation matrix built from the dim's
//! sizes; in a bucket those are the padded sizes, while eager reads its source positions at the
//! ratio of the real ones. So each spatial dim is multiplied by a matrix built in the program
//! instead, from the real input length `n` and output length `m`, computed as torch computes its
//! source indices (in f32): the scale is `1/scale_factor` where the op has one, else `n/m`
//! (`(n-1)/(m-1)` with `align_corners`); bilinear reads `src = scale·(o + ½) − ½` clamped at 0
//! (`scale·o` with `align_corners`), rows `i0 = ⌊src⌋` and `i1 = min(i0 + 1, n − 1)` weighted
//! `1 − λ` and `λ` (`λ = src − i0`); nearest reads `min(⌊scale·o⌋, n − 1)`. Every real result
//! position reads real rows only; the operand's padding is zeroed first, so that a weight of 0
//! never meets a NaN there. Work along each dim is `O(P_in·P_out)`, as the emitter's own.

use super::rules::Across;
use super::{static_view, Masker, Res, MERGED};
use crate::ir::ops::{Arange, Convert, Mm, Permute, Upsample};
use crate::ir::{BinaryOp, DType, Graph, NodeId, Op, Operand, Scalar, SymExpr, TensorType, ValueRef};

/// A dim's interpolation: its real input and output lengths (`i64[]` values), and its padded
/// input and output sizes.
struct Lengths {
    n: ValueRef,
    m: ValueRef,
    n_padded: i64,
    m_padded: i64,
}

impl Masker<'_> {
    /// `upsample` (see the module docs): the operand masked, then each spatial dim multiplied
    /// by its interpolation matrix of the real lengths.
    pub(super) fn resample(&mut self, graph: &mut Graph, id: NodeId, up: &Upsample, across: &[Across]) -> Res<()> {
        if across.iter().any(|(_, _, f)| f.len() > 1) {
            return Err(MERGED.into());
        }
        let x = graph.inputs(id)[0];
        let out = graph.node(id).outputs[0].clone();
        let in_dims = Self::ty(graph, x).static_dims().ok_or("not specialized")?;
        let out_dims = out.static_dims().ok_or("not specialized")?;
        let (in_dyn, out_dyn) = (self.dyn_dims(graph, x), self.dyn_dims(graph, ValueRef { node: id, slot: 0 }));
        let mut v = x;
        for (_, d, f) in across {
            v = self.mask(graph, id, (v, *d), f, Scalar::Float(0.0))?;
        }
        if Self::ty(graph, v).dtype != out.dtype {
            v = self.add(graph, id, Op::Convert(Convert), TensorType::new(out.dtype, &in_dims), &[v]);
        }
        let mut dims = in_dims.clone();
        let spatial = in_dims.len() - 2;
        for k in 0..spatial {
            let d = 2 + k;
            let real =
                |dyn_dims: &super::DynDims, size: i64| dyn_dims.get(&d).map_or(SymExpr::Int(size), |f| f[0].clone());
            let lengths = Lengths {
                n: self.length(graph, id, &real(&in_dyn, in_dims[d]))?,
                m: self.length(graph, id, &real(&out_dyn, out_dims[d]))?,
                n_padded: in_dims[d],
                m_padded: out_dims[d],
            };
            let scale = up.scales.as_ref().and_then(|s| s.get(k).copied()).filter(|s| *s > 0.0);
            let mut matrix = self.interpolation(graph, id, up, scale, &lengths);
            if out.dtype != DType::F32 {
                let ty = TensorType::new(out.dtype, &[lengths.n_padded, lengths.m_padded]);
                matrix = self.add(graph, id, Op::Convert(Convert), ty, &[matrix]);
            }
            (v, dims) = self.times_along(graph, id, (v, dims), d, (matrix, lengths.m_padded));
        }
        let users = graph.users(id);
        self.take_over(graph, ValueRef { node: id, slot: 0 }, v, users);
        Ok(())
    }

    /// The f32 `[n_padded, m_padded]` matrix whose column `o` holds the weights output
    /// position `o` gives the input rows (see the module docs).
    fn interpolation(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        up: &Upsample,
        scale_factor: Option<f64>,
        l: &Lengths,
    ) -> ValueRef {
        let f32_of = |dims: &[i64]| TensorType::new(DType::F32, dims);
        let i64_of = |dims: &[i64]| TensorType::new(DType::I64, dims);
        let (np, mp) = (l.n_padded, l.m_padded);
        let iota = |m: &mut Self, graph: &mut Graph, p: i64, shape: &[i64]| {
            let arange = Arange { start: Scalar::Int(0), end: Scalar::Int(p), step: Scalar::Int(1) };
            let v = m.add(graph, id, Op::Arange(arange), i64_of(&[p]), &[]);
            m.add(graph, id, static_view(shape), i64_of(shape), &[v])
        };
        let rows = iota(self, graph, np, &[np, 1]);
        let o = iota(self, graph, mp, &[1, mp]);
        let o = self.add(graph, id, Op::Convert(Convert), f32_of(&[1, mp]), &[o]);
        let scalar_f32 =
            |m: &mut Self, graph: &mut Graph, v: ValueRef| m.add(graph, id, Op::Convert(Convert), f32_of(&[]), &[v]);
        let scale = match scale_factor {
            Some(s) if !up.align_corners => self.add(graph, id, full_f32(1.0 / s), f32_of(&[]), &[]),
            _ if up.bilinear && up.align_corners => {
                // (n - 1) / max(m - 1, 1): 0 where m is 1, whose one position reads row 0.
                let n1 = self.binary(graph, id, BinaryOp::Sub, int(1), &[l.n], i64_of(&[]));
                let m1 = self.binary(graph, id, BinaryOp::Sub, int(1), &[l.m], i64_of(&[]));
                let m1 = self.binary(graph, id, BinaryOp::Maximum, int(1), &[m1], i64_of(&[]));
                let (n1, m1) = (scalar_f32(self, graph, n1), scalar_f32(self, graph, m1));
                self.binary(graph, id, BinaryOp::Div, Operand::Tensor, &[n1, m1], f32_of(&[]))
            }
            _ => {
                let (n, m) = (scalar_f32(self, graph, l.n), scalar_f32(self, graph, l.m));
                self.binary(graph, id, BinaryOp::Div, Operand::Tensor, &[n, m], f32_of(&[]))
            }
        };
        let last = self.binary(graph, id, BinaryOp::Sub, int(1), &[l.n], i64_of(&[]));
        let one_hot = |m: &mut Self, graph: &mut Graph, at: ValueRef| {
            let hit = m.binary(
                graph,
                id,
                BinaryOp::Eq,
                Operand::Tensor,
                &[rows, at],
                TensorType::new(DType::Bool, &[np, mp]),
            );
            m.add(graph, id, Op::Convert(Convert), f32_of(&[np, mp]), &[hit])
        };
        if !up.bilinear {
            // min(⌊scale·o⌋, n − 1): the product is not negative, so the conversion floors it.
            let src = self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[o, scale], f32_of(&[1, mp]));
            let at = self.add(graph, id, Op::Convert(Convert), i64_of(&[1, mp]), &[src]);
            let at = self.binary(graph, id, BinaryOp::Minimum, Operand::Tensor, &[at, last], i64_of(&[1, mp]));
            return one_hot(self, graph, at);
        }
        let src = if up.align_corners {
            self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[o, scale], f32_of(&[1, mp]))
        } else {
            let half = self.binary(graph, id, BinaryOp::Add, float(0.5), &[o], f32_of(&[1, mp]));
            let src = self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[half, scale], f32_of(&[1, mp]));
            let src = self.binary(graph, id, BinaryOp::Sub, float(0.5), &[src], f32_of(&[1, mp]));
            self.binary(graph, id, BinaryOp::Maximum, float(0.0), &[src], f32_of(&[1, mp]))
        };
        let i0 = self.add(graph, id, Op::Convert(Convert), i64_of(&[1, mp]), &[src]);
        let i1 = self.binary(graph, id, BinaryOp::Add, int(1), &[i0], i64_of(&[1, mp]));
        let i1 = self.binary(graph, id, BinaryOp::Minimum, Operand::Tensor, &[i1, last], i64_of(&[1, mp]));
        let floor = self.add(graph, id, Op::Convert(Convert), f32_of(&[1, mp]), &[i0]);
        let lambda1 = self.binary(graph, id, BinaryOp::Sub, Operand::Tensor, &[src, floor], f32_of(&[1, mp]));
        let lambda0 = self.binary(graph, id, BinaryOp::Mul, float(-1.0), &[lambda1], f32_of(&[1, mp]));
        let lambda0 = self.binary(graph, id, BinaryOp::Add, float(1.0), &[lambda0], f32_of(&[1, mp]));
        let (at0, at1) = (one_hot(self, graph, i0), one_hot(self, graph, i1));
        let w0 = self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[at0, lambda0], f32_of(&[np, mp]));
        let w1 = self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[at1, lambda1], f32_of(&[np, mp]));
        self.binary(graph, id, BinaryOp::Add, Operand::Tensor, &[w0, w1], f32_of(&[np, mp]))
    }

    /// `v` (of `dims`) with its dim `d` multiplied by `matrix` (`[dims[d], size]`): `d` moved
    /// last (where it is not) and flattened to `[rows, dims[d]]`, the product, and back; the new
    /// value and dims.
    fn times_along(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        (v, dims): (ValueRef, Vec<i64>),
        d: usize,
        (matrix, size): (ValueRef, i64),
    ) -> (ValueRef, Vec<i64>) {
        let dtype = Self::ty(graph, v).dtype;
        let mut perm: Vec<usize> = (0..dims.len()).filter(|&k| k != d).collect();
        perm.push(d);
        let moved: Vec<i64> = perm.iter().map(|&k| dims[k]).collect();
        let rows = moved[..moved.len() - 1].iter().product::<i64>();
        let last = d + 1 == dims.len();
        let mut v = v;
        if !last {
            let permute = Op::Permute(Permute { dims: perm.iter().map(|&k| k as i64).collect() });
            v = self.add(graph, id, permute, TensorType::new(dtype, &moved), &[v]);
        }
        v = self.add(graph, id, static_view(&[rows, dims[d]]), TensorType::new(dtype, &[rows, dims[d]]), &[v]);
        v = self.add(graph, id, Op::Mm(Mm), TensorType::new(dtype, &[rows, size]), &[v, matrix]);
        let mut moved_out = moved;
        if let Some(end) = moved_out.last_mut() {
            *end = size;
        }
        v = self.add(graph, id, static_view(&moved_out), TensorType::new(dtype, &moved_out), &[v]);
        let mut back = vec![0i64; dims.len()];
        for (i, &k) in perm.iter().enumerate() {
            back[k] = i as i64;
        }
        let mut out_dims = dims;
        out_dims[d] = size;
        if !last {
            v = self.add(graph, id, Op::Permute(Permute { dims: back }), TensorType::new(dtype, &out_dims), &[v]);
        }
        (v, out_dims)
    }
}

fn int(i: i64) -> Operand {
    Operand::Scalar(Scalar::Int(i))
}

fn float(x: f64) -> Operand {
    Operand::Scalar(Scalar::Float(x))
}

fn full_f32(value: f64) -> Op {
    Op::Full(crate::ir::ops::Full { size: vec![], value: Scalar::Float(value) })
}
