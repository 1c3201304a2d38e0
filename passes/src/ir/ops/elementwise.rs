//! Element-wise ops (those whose `is_elementwise` holds: unary and binary functions, `where`,
//! clamps, activations with attributes, copies and conversions) and the ops typed like them
//! but not element-wise in that sense: `full_like` (reads only a shape), `copy_from` (its
//! source broadcast into `self`'s shape) and dropout (random). Also torch's type promotion
//! ([`promote_types`], [`result_type`]).

use super::attr::by_name;
use super::rule::*;
use super::*;
use super::{serde_name, AttrReader, OpSyntax, ParseOp};
use crate::ir::op::*;
use crate::ir::types::*;

/// `lhs op (alpha * rhs)`: one input per `Operand::Tensor`, lhs first. Its operands print in
/// the call (`sub(1.5, %0)`), so it reads them back by hand.
#[derive(Clone, Debug, PartialEq)]
pub struct Binary {
    /// The function, which names the op (`add`, `lt`).
    pub op: BinaryOp,
    /// The left operand.
    pub lhs: Operand,
    /// The right operand.
    pub rhs: Operand,
    /// Multiplier of `rhs` for `add`/`sub` (`alpha`), when not 1.
    pub alpha: Option<Scalar>,
}

impl OpSyntax for Binary {
    fn name(&self) -> String {
        serde_name(&self.op)
    }

    fn attrs(&self, out: &mut Vec<String>) {
        attr_write!(out, self.alpha, "alpha", optional);
    }
}

impl ParseOp for Binary {
    fn parse(name: &str, r: &mut AttrReader<'_, '_>, args: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        let op = by_name::<BinaryOp>(name)?;
        let mut read = || -> Result<Self, String> {
            let [lhs, rhs] = call_operands(name, args)?;
            Ok(Binary { op, lhs, rhs, alpha: attr_read!(r, (), Option<Scalar>, "alpha", optional)? })
        };
        Some(read())
    }
}

impl OpDef for Binary {
    fn arity(&self) -> Arity {
        let Binary { lhs, rhs, .. } = self;
        Arity::fixed(tensors(&[*lhs, *rhs]), 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let Binary { op: b, lhs, rhs, .. } = self;
        let dims = broadcast(&inputs.iter().map(|t| t.dims.as_slice()).collect::<Vec<_>>())?;
        let operands = typed_operands(&[*lhs, *rhs], inputs);
        let promoted = result_type(&operands);
        let logical = matches!(b, BinaryOp::LogicalAnd | BinaryOp::LogicalOr | BinaryOp::LogicalXor);
        let dtype = match b {
            _ if b.is_comparison() || logical => DType::Bool,
            BinaryOp::Div | BinaryOp::Atan2 if !promoted.is_float() && !promoted.is_complex() => DType::F32,
            _ => promoted,
        };
        one(Expected::exact(dtype, &dims))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

/// `where(cond, a, b)`: one input per `Operand::Tensor`, cond first (always a tensor).
#[derive(Clone, Debug, PartialEq)]
pub struct Where {
    /// The value where `cond` holds.
    pub on_true: Operand,
    /// The value elsewhere.
    pub on_false: Operand,
}

impl Where {
    /// The printed name.
    pub const NAME: &'static str = "where";
}

impl OpSyntax for Where {
    fn name(&self) -> String {
        Self::NAME.into()
    }

    fn attrs(&self, _: &mut Vec<String>) {}
}

impl ParseOp for Where {
    fn parse(name: &str, _: &mut AttrReader<'_, '_>, args: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        (name == Self::NAME).then(|| {
            let [cond, on_true, on_false] = call_operands(name, args)?;
            if cond != Operand::Tensor {
                return Err("the condition of `where` must be a value".into());
            }
            Ok(Where { on_true, on_false })
        })
    }
}

impl OpDef for Where {
    fn arity(&self) -> Arity {
        let Where { on_true, on_false } = self;
        Arity::fixed(1 + tensors(&[*on_true, *on_false]), 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let Where { on_true, on_false } = self;
        if x.dtype != DType::Bool {
            return Err(format!("the condition is {}, not bool", x.dtype));
        }
        let dims = broadcast(&inputs.iter().map(|t| t.dims.as_slice()).collect::<Vec<_>>())?;
        let dtype = result_type(&typed_operands(&[*on_true, *on_false], &inputs[1..]));
        one(Expected::exact(dtype, &dims))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

op! {
    /// `clamp(x, min, max)` (also `hardtanh`): inputs `[x]`.
    pub struct Clamp = "clamp" {
        pub min: Option<Scalar> ["min"],
        pub max: Option<Scalar> ["max"],
    }
}

impl OpDef for Clamp {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let dtype = x.dtype.is_float().then_some(x.dtype);
        one(Expected { dtype, ..Expected::shape(&x.dims) })
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

op! {
    /// `clamp.Tensor(x, min, max)`: inputs `[x, (min), (max)]`.
    pub struct ClampTensor = "clamp_tensor" {
        pub has_min: bool ["min"],
        pub has_max: bool ["max"],
    }
}

impl OpDef for ClampTensor {
    fn arity(&self) -> Arity {
        let ClampTensor { has_min, has_max } = self;
        Arity::fixed(1 + usize::from(*has_min) + usize::from(*has_max), 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let dims = broadcast(&inputs.iter().map(|t| t.dims.as_slice()).collect::<Vec<_>>())?;
        let all: Vec<_> = inputs.iter().map(|t| (Some(*t), None)).collect();
        one(Expected::exact(result_type(&all), &dims))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

op! {
    /// `elu`: `x > 0 ? scale*x : scale*alpha*(exp(input_scale*x) - 1)`; inputs `[x]`.
    pub struct Elu = "elu" {
        pub alpha: f64 ["alpha"],
        pub scale: f64 ["scale"],
        pub input_scale: f64 ["input_scale"],
    }
}

impl OpDef for Elu {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        one(like(x))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

op! {
    /// `leaky_relu`: `x > 0 ? x : slope*x`; inputs `[x]`.
    pub struct LeakyRelu = "leaky_relu" {
        pub slope: f64 ["slope"],
    }
}

impl OpDef for LeakyRelu {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        one(like(x))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

op! {
    /// `clone`, `alias` and other identities on values: inputs `[x]`.
    pub struct Identity = "copy";
}

impl OpDef for Identity {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        one(like(x))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

op! {
    /// `after(x, y)`: `x` itself, available only once `y` is: an ordering edge that keeps XLA
    /// from computing what reads it before `y` exists (an `fsdp` weight is gathered when the
    /// activation it multiplies is ready, not all at once). Emitted as
    /// `stablehlo.optimization_barrier`: inputs `[x, y]`.
    pub struct After = "after";
}

impl OpDef for After {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        one(like(inputs[0]))
    }

    /// Every dim of `x`, which it returns unchanged.
    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, outputs, 0..inputs[0].rank())
    }

    /// `x` unchanged; `y` is not read.
    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `copy(self, src)`: `src` broadcast and converted to `self`'s shape and dtype: inputs
    /// `[self, src]`.
    pub struct CopyFrom = "copy_from";
}

impl OpDef for CopyFrom {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        broadcast(&[&x.dims, &inputs[1].dims])?;
        one(like(x))
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `native_dropout(x, p, train)`: outputs `[x * keep / (1 - p), keep]`, each element kept
    /// with probability `1 - p` when training: inputs `[x, rng_seed]`.
    pub struct Dropout = "dropout" {
        pub p: f64 ["p"],
        pub train: bool ["train"],
    }
}

impl OpDef for Dropout {
    fn arity(&self) -> Arity {
        Arity::fixed(2, 2)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        Ok(vec![like(x), Expected::shape(&x.dims)])
    }

    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, outputs, 0..inputs[0].rank())
    }

    fn is_random(&self) -> bool {
        true
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `full_like(x, value)`: inputs `[x]` (only its shape is used).
    pub struct FullLike = "full_like" {
        pub value: Scalar ["value"],
    }
}

impl OpDef for FullLike {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        one(Expected::shape(&x.dims))
    }

    /// The fill value at every position, whatever the operand holds there.
    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        Along::same(inputs, outputs, 0..inputs[0].rank())
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

op! {
    /// `_to_copy` and friends: inputs `[x]`, converted to the output dtype.
    pub struct Convert = "convert";
}

impl OpDef for Convert {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        one(Expected::shape(&x.dims))
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

/// The unary functions are one family, named by the function (`neg`, `rsqrt`).
impl OpSyntax for UnaryOp {
    fn name(&self) -> String {
        serde_name(self)
    }

    fn attrs(&self, _: &mut Vec<String>) {}
}

impl ParseOp for UnaryOp {
    fn parse(name: &str, _: &mut AttrReader<'_, '_>, _: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        by_name::<UnaryOp>(name).map(Ok)
    }
}

impl OpDef for UnaryOp {
    fn arity(&self) -> Arity {
        Arity::fixed(1, 1)
    }

    fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        let x = inputs[0];
        let u = self;
        let dtype = match u {
            UnaryOp::LogicalNot | UnaryOp::IsInf | UnaryOp::IsNan | UnaryOp::Signbit => Some(DType::Bool),
            UnaryOp::Abs | UnaryOp::Angle if x.dtype.is_complex() => x.dtype.complex_part(),
            UnaryOp::Conj => Some(x.dtype),
            // Integer inputs of the float functions give the default float: left open.
            _ if x.dtype.is_float() => Some(x.dtype),
            _ => None,
        };
        one(Expected { dtype, ..Expected::shape(&x.dims) })
    }

    fn is_elementwise(&self) -> bool {
        true
    }
}

/// The `N` operands of a call, each a tensor or a scalar.
fn call_operands<const N: usize>(name: &str, args: &[Option<Scalar>]) -> Result<[Operand; N], String> {
    let found = args.len();
    let v: Vec<Operand> = args.iter().map(|a| a.map_or(Operand::Tensor, Operand::Scalar)).collect();
    v.try_into().map_err(|_| format!("`{name}` takes {N} operands, found {found}"))
}

/// How many of `operands` are tensors (node inputs).
fn tensors(operands: &[Operand]) -> usize {
    operands.iter().filter(|o| matches!(o, Operand::Tensor)).count()
}

/// Pairs each operand with its tensor type or scalar value, tensors taken from `tensors` in order.
fn typed_operands<'t>(ops: &[Operand], tensors: &[&'t TensorType]) -> Vec<(Option<&'t TensorType>, Option<Scalar>)> {
    let mut next = tensors.iter();
    ops.iter()
        .map(|o| match o {
            Operand::Scalar(s) => (None, Some(*s)),
            Operand::Tensor => (next.next().copied(), None),
        })
        .collect()
}

/// Category used by torch's promotion: bool < integer < floating < complex.
fn category(d: DType) -> u8 {
    if d == DType::Bool {
        0
    } else if d.is_integer() {
        1
    } else if d.is_float() {
        2
    } else {
        3
    }
}

/// Promotion of two dtypes of tensors of the same priority (`torch.promote_types`).
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    let (ca, cb) = (category(a), category(b));
    if ca != cb {
        let (high, low) = if ca > cb { (a, b) } else { (b, a) };
        // complex64 with float64 is complex128: the parts widen to the float.
        return match (high.complex_part(), low.complex_of()) {
            (Some(part), Some(wide)) if low.is_float() && low.size_bytes() > part.size_bytes() => wide,
            _ => high,
        };
    }
    let unsigned = |d: DType| matches!(d, U8 | U16 | U32 | U64);
    match (a, b) {
        (F16, BF16) | (BF16, F16) => F32,
        _ if ca == 1 && unsigned(a) != unsigned(b) => {
            // Mixed signedness: the signed type must hold the unsigned one's range.
            let (s, u) = if unsigned(a) { (b, a) } else { (a, b) };
            match (s.size_bytes(), u.size_bytes()) {
                (ss, us) if ss > us => s,
                (_, 1) => I16,
                (_, 2) => I32,
                _ => I64,
            }
        }
        _ if a.size_bytes() >= b.size_bytes() => a,
        _ => b,
    }
}

/// torch's `result_type` for tensor and scalar operands: dimensioned tensors first, then
/// 0-d tensors and scalars only when they are of a higher category.
pub fn result_type(operands: &[(Option<&TensorType>, Option<Scalar>)]) -> DType {
    let fold = |it: &mut dyn Iterator<Item = DType>| it.reduce(promote_types);
    let dimmed = fold(&mut operands.iter().filter_map(|(t, _)| t.filter(|t| t.rank() > 0)).map(|t| t.dtype));
    let zero = fold(&mut operands.iter().filter_map(|(t, _)| t.filter(|t| t.rank() == 0)).map(|t| t.dtype));
    let wrapped = fold(&mut operands.iter().filter_map(|(_, s)| *s).map(|s| match s {
        Scalar::Bool(_) => DType::Bool,
        Scalar::Int(_) => DType::I64,
        Scalar::Float(_) => DType::F32,
    }));
    let mut result = dimmed;
    for next in [zero, wrapped].into_iter().flatten() {
        result = Some(match result {
            None => next,
            Some(r) if category(next) > category(r) => next,
            Some(r) => r,
        });
    }
    result.unwrap_or(DType::F32)
}
