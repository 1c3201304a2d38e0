//! Compile-time evaluation of small constant computations for `fold_constants`: a node whose
//! inputs are all constants (`arange`, `full`, `scalar_tensor`, earlier literals) becomes an
//! `Op::Literal(Literal)` holding its values. Exact by construction: only integer and boolean
//! arithmetic is evaluated (checked, so an overflow refuses), and float results only where
//! values are moved or selected, never computed (`where` between constants, views, `cat`,
//! integers converted to f32 below 2^24). Llama's position ids and causal mask are such
//! chains: `arange`, `unsqueeze`, `sub`, `cat`, `ne`, `cumsum`, advanced indexing, `le`, `eq`,
//! `and`, `where(mask, 0, -inf)`.

use crate::ir::ops::{
    Arange, Binary, Cat, Convert, Cumulative, Full, Identity, Index, Literal, Permute, ScalarTensor, Slice, Where,
};
use crate::ir::{
    norm_dim, BinaryOp, CumulativeOp, DType, Dim, Graph, NodeId, Op, Operand, Scalar, TensorType, UnaryOp, ValueRef,
};

/// The most elements a literal may hold (larger constants are left to XLA).
pub const MAX_LITERAL: usize = 1 << 14;

/// A constant's values, row-major, with its dims.
pub struct Constant {
    dims: Vec<usize>,
    values: Vec<Scalar>,
}

/// The sizes of a static type, as indices.
fn sizes(ty: &TensorType) -> Option<Vec<usize>> {
    ty.static_dims().map(|d| d.into_iter().map(|s| s as usize).collect())
}

/// The value of `v` when it is a constant small enough to evaluate.
pub fn constant(graph: &Graph, v: ValueRef) -> Option<Constant> {
    let dims = sizes(graph.value_type(v))?;
    let len: usize = dims.iter().product();
    if len > MAX_LITERAL || v.slot != 0 {
        return None;
    }
    let values = match &graph.node(v.node).op {
        Op::Literal(Literal { values }) => values.clone(),
        Op::Full(Full { value, .. }) | Op::ScalarTensor(ScalarTensor { value }) => vec![*value; len],
        Op::Arange(Arange { start: Scalar::Int(start), step: Scalar::Int(step), .. }) => {
            (0..len as i64).map(|i| Scalar::Int(start + i * step)).collect()
        }
        _ => return None,
    };
    (values.len() == len).then_some(Constant { dims, values })
}

/// The values of node `id`'s only output from its constant inputs, when the op is one this
/// module evaluates exactly and the result is small.
pub fn evaluate(graph: &Graph, id: NodeId, inputs: &[Constant]) -> Option<Vec<Scalar>> {
    let node = graph.node(id);
    let [out] = &node.outputs[..] else { return None };
    let dims = sizes(out)?;
    let len: usize = dims.iter().product();
    if len > MAX_LITERAL || !matches!(out.dtype, DType::Bool | DType::I32 | DType::I64 | DType::F32) {
        return None;
    }
    let moves_only = matches!(
        node.op,
        Op::View(_) | Op::Unsqueeze(_) | Op::Identity(Identity) | Op::Expand(_) | Op::Permute(_) | Op::Slice(_)
    ) || matches!(node.op, Op::Cat(_) | Op::Where(_) | Op::Convert(Convert));
    if out.dtype == DType::F32 && !moves_only {
        return None;
    }
    let values = match &node.op {
        Op::View(_) | Op::Unsqueeze(_) | Op::Identity(Identity) => inputs[0].values.clone(),
        Op::Expand(_) => (0..len).map(|i| inputs[0].values[broadcast(i, &dims, &inputs[0].dims)]).collect(),
        Op::Permute(Permute { dims: perm }) => permute(&inputs[0], perm, &dims),
        Op::Slice(Slice { dim, start, step, .. }) => slice(&inputs[0], *dim, start, *step, &dims)?,
        Op::Cat(Cat { dim }) => cat(inputs, *dim, &dims)?,
        Op::Binary(Binary { op, lhs, rhs, alpha }) => {
            let [a, b] = operands(&[lhs, rhs], inputs)?;
            (0..len).map(|i| binary(*op, a.at(i, &dims), b.at(i, &dims), *alpha, out.dtype)).collect::<Option<_>>()?
        }
        Op::Unary(op) => inputs[0].values.iter().map(|&x| unary(*op, x)).collect::<Option<_>>()?,
        Op::Where(Where { on_true, on_false }) => {
            let (cond, rest) = inputs.split_first()?;
            let [a, b] = operands(&[on_true, on_false], rest)?;
            let cond = Element::Tensor(cond);
            (0..len)
                .map(|i| {
                    convert(if as_int(cond.at(i, &dims))? != 0 { a.at(i, &dims) } else { b.at(i, &dims) }, out.dtype)
                })
                .collect::<Option<_>>()?
        }
        Op::Convert(Convert) => inputs[0].values.iter().map(|&x| convert(x, out.dtype)).collect::<Option<_>>()?,
        Op::Cumulative(Cumulative { op: CumulativeOp::Cumsum, dim, .. }) => cumsum(&inputs[0], *dim)?,
        Op::Index(Index { present }) => index(inputs, present, &dims)?,
        _ => return None,
    };
    (values.len() == len).then_some(values)
}

/// An operand of an element-wise op: a scalar, or a constant tensor broadcast to the output.
enum Element<'a> {
    Scalar(Scalar),
    Tensor(&'a Constant),
}

impl Element<'_> {
    /// The value output element `flat` (of `out_dims`) reads.
    fn at(&self, flat: usize, out_dims: &[usize]) -> Scalar {
        match self {
            Element::Scalar(s) => *s,
            Element::Tensor(t) => t.values[broadcast(flat, out_dims, &t.dims)],
        }
    }
}

/// The two operands, tensor ones taken from `tensors` in order.
fn operands<'a>(ops: &[&Operand; 2], tensors: &'a [Constant]) -> Option<[Element<'a>; 2]> {
    let mut tensors = tensors.iter();
    let mut element = |o: &Operand| match o {
        Operand::Scalar(s) => Some(Element::Scalar(*s)),
        Operand::Tensor => tensors.next().map(Element::Tensor),
    };
    Some([element(ops[0])?, element(ops[1])?])
}

fn as_int(s: Scalar) -> Option<i64> {
    match s {
        Scalar::Int(i) => Some(i),
        Scalar::Bool(b) => Some(i64::from(b)),
        Scalar::Float(_) => None,
    }
}

/// `s` stored as `dtype`, when exact.
fn convert(s: Scalar, dtype: DType) -> Option<Scalar> {
    match (dtype, s) {
        (DType::Bool, _) => Some(Scalar::Bool(as_int(s).map(|i| i != 0).or(match s {
            Scalar::Float(x) => Some(x != 0.0),
            _ => None,
        })?)),
        (DType::I64, _) => as_int(s).map(Scalar::Int),
        (DType::I32, _) => as_int(s).filter(|i| i32::try_from(*i).is_ok()).map(Scalar::Int),
        (DType::F32, Scalar::Float(x)) => ((x as f32) as f64 == x || x.is_nan()).then_some(Scalar::Float(x)),
        (DType::F32, _) => as_int(s).filter(|i| i.abs() <= 1 << 24).map(|i| Scalar::Float(i as f64)),
        _ => None,
    }
}

fn binary(op: BinaryOp, a: Scalar, b: Scalar, alpha: Option<Scalar>, dtype: DType) -> Option<Scalar> {
    use BinaryOp::*;
    let (x, y) = (as_int(a)?, as_int(b)?);
    let y = match (op, alpha) {
        (Add | Sub, Some(alpha)) => y.checked_mul(as_int(alpha)?)?,
        _ => y,
    };
    let value = match op {
        Add => Scalar::Int(x.checked_add(y)?),
        Sub => Scalar::Int(x.checked_sub(y)?),
        Mul => Scalar::Int(x.checked_mul(y)?),
        Eq => Scalar::Bool(x == y),
        Ne => Scalar::Bool(x != y),
        Lt => Scalar::Bool(x < y),
        Le => Scalar::Bool(x <= y),
        Gt => Scalar::Bool(x > y),
        Ge => Scalar::Bool(x >= y),
        BitwiseAnd => Scalar::Int(x & y),
        BitwiseOr => Scalar::Int(x | y),
        BitwiseXor => Scalar::Int(x ^ y),
        LogicalAnd => Scalar::Bool(x != 0 && y != 0),
        LogicalOr => Scalar::Bool(x != 0 || y != 0),
        LogicalXor => Scalar::Bool((x != 0) != (y != 0)),
        Maximum => Scalar::Int(x.max(y)),
        Minimum => Scalar::Int(x.min(y)),
        _ => return None,
    };
    convert(value, dtype)
}

fn unary(op: UnaryOp, x: Scalar) -> Option<Scalar> {
    match (op, x) {
        (UnaryOp::LogicalNot, _) => Some(Scalar::Bool(as_int(x)? == 0)),
        (UnaryOp::BitwiseNot, Scalar::Bool(b)) => Some(Scalar::Bool(!b)),
        (UnaryOp::BitwiseNot, Scalar::Int(i)) => Some(Scalar::Int(!i)),
        (UnaryOp::Neg, Scalar::Int(i)) => i.checked_neg().map(Scalar::Int),
        (UnaryOp::Abs, Scalar::Int(i)) => i.checked_abs().map(Scalar::Int),
        _ => None,
    }
}

/// The flat index in an input of `in_dims` that output element `flat` (of `out_dims`) reads
/// under NumPy broadcasting (dims right-aligned, size-1 dims repeated).
fn broadcast(flat: usize, out_dims: &[usize], in_dims: &[usize]) -> usize {
    let offset = out_dims.len() - in_dims.len();
    let (mut rest, mut at, mut stride) = (flat, 0, 1);
    for d in (0..out_dims.len()).rev() {
        let coord = rest % out_dims[d];
        rest /= out_dims[d];
        if d >= offset {
            let size = in_dims[d - offset];
            if size != 1 {
                at += coord * stride;
            }
            stride *= size;
        }
    }
    at
}

/// The coordinates of flat index `flat` in `dims`.
fn coords(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut c = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        c[d] = flat % dims[d];
        flat /= dims[d];
    }
    c
}

fn flat_index(c: &[usize], dims: &[usize]) -> usize {
    c.iter().zip(dims).fold(0, |acc, (&x, &d)| acc * d + x)
}

fn permute(x: &Constant, perm: &[i64], out: &[usize]) -> Vec<Scalar> {
    let len: usize = out.iter().product();
    (0..len)
        .map(|i| {
            let c = coords(i, out);
            let mut src = vec![0; c.len()];
            for (k, &p) in perm.iter().enumerate() {
                src[norm_dim(p, c.len())] = c[k];
            }
            x.values[flat_index(&src, &x.dims)]
        })
        .collect()
}

fn slice(x: &Constant, dim: i64, start: &Dim, step: i64, out: &[usize]) -> Option<Vec<Scalar>> {
    let d = norm_dim(dim, x.dims.len());
    let size = x.dims[d] as i64;
    let start = start.as_static()?;
    let start = if start < 0 { (start + size).max(0) } else { start.min(size) } as usize;
    let len: usize = out.iter().product();
    (step > 0).then(|| {
        (0..len)
            .map(|i| {
                let mut c = coords(i, out);
                c[d] = start + c[d] * step as usize;
                x.values[flat_index(&c, &x.dims)]
            })
            .collect()
    })
}

fn cat(inputs: &[Constant], dim: i64, out: &[usize]) -> Option<Vec<Scalar>> {
    let d = norm_dim(dim, out.len());
    let len: usize = out.iter().product();
    (0..len)
        .map(|i| {
            let mut c = coords(i, out);
            for x in inputs {
                if c[d] < x.dims[d] {
                    return Some(x.values[flat_index(&c, &x.dims)]);
                }
                c[d] -= x.dims[d];
            }
            None
        })
        .collect()
}

fn cumsum(x: &Constant, dim: i64) -> Option<Vec<Scalar>> {
    let d = norm_dim(dim, x.dims.len());
    let mut out = Vec::with_capacity(x.values.len());
    for i in 0..x.values.len() {
        let c = coords(i, &x.dims);
        let v = as_int(x.values[i])?;
        let sum = if c[d] == 0 {
            v
        } else {
            let mut prev = c.clone();
            prev[d] -= 1;
            as_int(out[flat_index(&prev, &x.dims)])?.checked_add(v)?
        };
        out.push(Scalar::Int(sum));
    }
    Some(out)
}

/// `x[i0, i1, …]` with index tensors on the leading dims (broadcast together) and the rest of
/// `x` kept: the result is `broadcast(i…) + x.dims[k..]`.
fn index(inputs: &[Constant], present: &[bool], out: &[usize]) -> Option<Vec<Scalar>> {
    let (x, indices) = inputs.split_first()?;
    let k = indices.len();
    if !present.iter().take(k).all(|&p| p) || present.iter().skip(k).any(|&p| p) {
        return None;
    }
    let rest = &x.dims[k..];
    let lead = &out[..out.len() - rest.len()];
    let len: usize = out.iter().product();
    (0..len)
        .map(|i| {
            let c = coords(i, out);
            let (lc, rc) = c.split_at(lead.len());
            let li = flat_index(lc, lead);
            let mut src = Vec::with_capacity(x.dims.len());
            for (j, t) in indices.iter().enumerate() {
                let at = as_int(t.values[broadcast(li, lead, &t.dims)])?;
                let size = x.dims[j] as i64;
                let at = if at < 0 { at + size } else { at };
                if !(0..size).contains(&at) {
                    return None;
                }
                src.push(at as usize);
            }
            src.extend_from_slice(rc);
            Some(x.values[flat_index(&src, &x.dims)])
        })
        .collect()
}
