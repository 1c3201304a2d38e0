//! The rule of `fft` along a padded dim (FNet's token mixing over the sequence).
//!
//! A transform of length `P` (the bucket's) is not the transform of length `n` (the real
//! size) of the real positions: every frequency changes with the length. Along each padded
//! dim the transform is computed as a product with the DFT matrix of the real length instead,
//! built in the program from `n`: `W[j, k] = exp(∓2πi·(j·k mod n)/n)`, applied to the real
//! positions (the padding masked to zero) — exact at every real size, for `O(P²)` work along
//! that dim rather than `O(P log P)`. The other transformed dims keep `stablehlo.fft`, and the
//! scaling of `normalization` takes the real length. The complex values are carried as their
//! real and imaginary parts, so the products are real matmuls.
//!
//! Full spectra only: a one-sided `_fft_r2c` or a `_fft_c2r` along a padded dim (whose length
//! follows the real size) is refused.

use super::rules::Across;
use super::{static_view, Masker, Res, MERGED};
use crate::ir::ops::{Complex, Convert, Fft, Mm, Permute, Select, ViewAsReal};
use crate::ir::{BinaryOp, DType, Graph, NodeId, Op, Operand, Scalar, SymExpr, TensorType, UnaryOp, ValueRef};
use crate::pass::bug;

/// A complex value as its parts (`None`: a real value, no imaginary part).
type Parts = (ValueRef, Option<ValueRef>);

impl Masker<'_> {
    /// `fft` (see the module docs): the static transformed dims through the op itself, the
    /// padded ones (`across`) each as a product with its real length's DFT matrix.
    pub(super) fn fourier(&mut self, graph: &mut Graph, id: NodeId, fft: &Fft, across: &[Across]) -> Res<()> {
        let x = graph.inputs(id)[0];
        let (xt, out) = (Self::ty(graph, x), graph.node(id).outputs[0].clone());
        let part = out.dtype.complex_part().filter(|_| !fft.onesided || xt.dtype.is_complex());
        let Some(part) = part else {
            return Err(
                "transforms a dynamic dim to or from a one-sided spectrum (its length follows the real size)".into()
            );
        };
        if across.iter().any(|(_, _, f)| f.len() > 1) {
            return Err(MERGED.into());
        }
        let rank = xt.rank();
        let transformed = fft.dims.iter().map(|&d| crate::ir::norm_dim(d, rank)).collect::<Vec<_>>();
        let padded: Vec<(usize, SymExpr)> = across.iter().map(|(_, d, f)| (*d, f[0].clone())).collect();
        let statics: Vec<usize> = transformed.iter().copied().filter(|d| padded.iter().all(|p| p.0 != *d)).collect();
        let dims = out.static_dims().ok_or("not specialized")?;
        // The static dims' transform, unscaled: scaling takes the real lengths below.
        let mut z = x;
        if !statics.is_empty() {
            let op = Fft {
                dims: statics.iter().map(|&d| d as i64).collect(),
                normalization: 0,
                inverse: fft.inverse,
                onesided: false,
            };
            z = self.add(graph, id, Op::Fft(op), TensorType::new(out.dtype, &dims), &[x]);
        }
        let mut parts = self.parts(graph, id, z, part, &dims)?;
        let mut count = None::<ValueRef>;
        for (d, len) in &padded {
            let n = self.length(graph, id, len)?;
            let masked_re = self.mask(graph, id, (parts.0, *d), std::slice::from_ref(len), Scalar::Float(0.0))?;
            let masked_im = match parts.1 {
                Some(im) => Some(self.mask(graph, id, (im, *d), std::slice::from_ref(len), Scalar::Float(0.0))?),
                None => None,
            };
            parts = self.dft_along(graph, id, (masked_re, masked_im), (*d, n), (part, fft.inverse), &dims)?;
            let scalar = TensorType::new(DType::I64, &[]);
            count = Some(match count {
                None => n,
                Some(c) => self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[c, n], scalar),
            });
        }
        // Every padded dim's product gave both parts.
        let (mut re, im) = parts;
        let mut im = im.ok_or_else(|| bug("a Fourier transform with no dynamic dim"))?;
        if fft.normalization != 0 {
            let statics_size: i64 = statics.iter().map(|&d| dims[d]).product();
            let factor =
                self.normalization(graph, id, count.ok_or_else(|| bug("no padded dim"))?, statics_size, fft, part);
            let ty = Self::ty(graph, re);
            re = self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[re, factor], ty.clone());
            im = self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[im, factor], ty);
        }
        let result = self.add(graph, id, Op::Complex(Complex), out, &[re, im]);
        let users = graph.users(id);
        self.take_over(graph, ValueRef { node: id, slot: 0 }, result, users);
        self.masks += 1;
        Ok(())
    }

    /// `z`'s real and imaginary parts (a real `z` has no imaginary part).
    fn parts(&mut self, graph: &mut Graph, id: NodeId, z: ValueRef, part: DType, dims: &[i64]) -> Res<Parts> {
        let zt = Self::ty(graph, z);
        if !zt.dtype.is_complex() {
            let re = if zt.dtype == part {
                z
            } else {
                self.add(graph, id, Op::Convert(Convert), TensorType::new(part, dims), &[z])
            };
            return Ok((re, None));
        }
        let mut pairs = dims.to_vec();
        pairs.push(2);
        let pairs = self.add(graph, id, Op::ViewAsReal(ViewAsReal), TensorType::new(part, &pairs), &[z]);
        let rank = dims.len() as i64;
        let mut select = |index| {
            let op = Op::Select(Select { dim: rank, index });
            self.add(graph, id, op, TensorType::new(part, dims), &[pairs])
        };
        let re = select(0);
        Ok((re, Some(select(1))))
    }

    /// The transform of length `n` along dim `d` of the masked parts: each part flattened to
    /// `[rows, P]` (dim `d` last), times the DFT matrix's cosines and signed sines, and back.
    fn dft_along(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        (re, im): Parts,
        (d, n): (usize, ValueRef),
        (part, inverse): (DType, bool),
        dims: &[i64],
    ) -> Res<Parts> {
        let p = dims[d];
        let (cos, sin) = self.dft_matrix(graph, id, n, p, (part, inverse));
        let mut perm: Vec<usize> = (0..dims.len()).filter(|&k| k != d).collect();
        perm.push(d);
        let moved: Vec<i64> = perm.iter().map(|&k| dims[k]).collect();
        let rows = moved[..moved.len() - 1].iter().product::<i64>();
        let flat = TensorType::new(part, &[rows, p]);
        let flatten = |m: &mut Self, graph: &mut Graph, v: ValueRef| {
            let permute = Op::Permute(Permute { dims: perm.iter().map(|&k| k as i64).collect() });
            let v = m.add(graph, id, permute, TensorType::new(part, &moved), &[v]);
            m.add(graph, id, static_view(&[rows, p]), flat.clone(), &[v])
        };
        let re = flatten(self, graph, re);
        let im = im.map(|im| flatten(self, graph, im));
        let mm = |m: &mut Self, graph: &mut Graph, a: ValueRef, b: ValueRef| {
            m.add(graph, id, Op::Mm(Mm), flat.clone(), &[a, b])
        };
        // (re + i·im)(cos + i·sin) = (re·cos − im·sin) + i(re·sin + im·cos)
        let (mut out_re, mut out_im) = (mm(self, graph, re, cos), mm(self, graph, re, sin));
        if let Some(im) = im {
            let (im_sin, im_cos) = (mm(self, graph, im, sin), mm(self, graph, im, cos));
            out_re = self.binary(graph, id, BinaryOp::Sub, Operand::Tensor, &[out_re, im_sin], flat.clone());
            out_im = self.binary(graph, id, BinaryOp::Add, Operand::Tensor, &[out_im, im_cos], flat.clone());
        }
        let mut back = vec![0i64; dims.len()];
        for (i, &k) in perm.iter().enumerate() {
            back[k] = i as i64;
        }
        let unflatten = |m: &mut Self, graph: &mut Graph, v: ValueRef| {
            let v = m.add(graph, id, static_view(&moved), TensorType::new(part, &moved), &[v]);
            m.add(graph, id, Op::Permute(Permute { dims: back.clone() }), TensorType::new(part, dims), &[v])
        };
        let re = unflatten(self, graph, out_re);
        Ok((re, Some(unflatten(self, graph, out_im))))
    }

    /// `cos(θ)` and `∓sin(θ)` (− forward, + inverse), `θ[j, k] = 2π·(j·k mod n)/n`, both
    /// `[p, p]` in `part`: the DFT matrix of length `n` (`n` at least 1) on a dim of `p`.
    fn dft_matrix(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        n: ValueRef,
        p: i64,
        (part, inverse): (DType, bool),
    ) -> (ValueRef, ValueRef) {
        let int = |dims: &[i64]| TensorType::new(DType::I64, dims);
        let iota = crate::ir::ops::Arange { start: Scalar::Int(0), end: Scalar::Int(p), step: Scalar::Int(1) };
        let iota = self.add(graph, id, Op::Arange(iota), int(&[p]), &[]);
        let j = self.add(graph, id, static_view(&[p, 1]), int(&[p, 1]), &[iota]);
        let k = self.add(graph, id, static_view(&[1, p]), int(&[1, p]), &[iota]);
        let jk = self.binary(graph, id, BinaryOp::Mul, Operand::Tensor, &[j, k], int(&[p, p]));
        let n = self.binary(graph, id, BinaryOp::Maximum, Operand::Scalar(Scalar::Int(1)), &[n], int(&[]));
        let turns = self.binary(graph, id, BinaryOp::Remainder, Operand::Tensor, &[jk, n], int(&[p, p]));
        let float = |dims: &[i64]| TensorType::new(part, dims);
        let turns = self.add(graph, id, Op::Convert(Convert), float(&[p, p]), &[turns]);
        let n = self.add(graph, id, Op::Convert(Convert), float(&[]), &[n]);
        let two_pi = Operand::Scalar(Scalar::Float(std::f64::consts::TAU));
        let theta = self.binary(graph, id, BinaryOp::Mul, two_pi, &[turns], float(&[p, p]));
        let theta = self.binary(graph, id, BinaryOp::Div, Operand::Tensor, &[theta, n], float(&[p, p]));
        let cos = self.add(graph, id, Op::Unary(UnaryOp::Cos), float(&[p, p]), &[theta]);
        let sin = self.add(graph, id, Op::Unary(UnaryOp::Sin), float(&[p, p]), &[theta]);
        let sign = Operand::Scalar(Scalar::Float(if inverse { 1.0 } else { -1.0 }));
        let sin = self.binary(graph, id, BinaryOp::Mul, sign, &[sin], float(&[p, p]));
        (cos, sin)
    }

    /// `1/√N` (`normalization` 1) or `1/N` (2), `N` the real number of points: the padded
    /// dims' real lengths (`count`) times the static transformed dims' sizes.
    fn normalization(
        &mut self,
        graph: &mut Graph,
        id: NodeId,
        count: ValueRef,
        statics_size: i64,
        fft: &Fft,
        part: DType,
    ) -> ValueRef {
        let scalar = TensorType::new(part, &[]);
        let count = self.add(graph, id, Op::Convert(Convert), scalar.clone(), &[count]);
        let points = match statics_size {
            1 => count,
            size => self.binary(
                graph,
                id,
                BinaryOp::Mul,
                Operand::Scalar(Scalar::Float(size as f64)),
                &[count],
                scalar.clone(),
            ),
        };
        let points = if fft.normalization == 1 {
            self.add(graph, id, Op::Unary(UnaryOp::Sqrt), scalar.clone(), &[points])
        } else {
            points
        };
        let one = Op::Full(crate::ir::ops::Full { size: vec![], value: Scalar::Float(1.0) });
        let one = self.add(graph, id, one, scalar.clone(), &[]);
        self.binary(graph, id, BinaryOp::Div, Operand::Tensor, &[one, points], scalar)
    }
}
