//! Element-wise ops: arithmetic with scalars and clamps, activations with attributes, copies and conversions, dropout.

use super::attr::by_name;
use super::{serde_name, AttrReader, OpDef, ParseOp};
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

impl OpDef for Binary {
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
            let [lhs, rhs] = operands(name, args)?;
            Ok(Binary { op, lhs, rhs, alpha: attr_read!(r, (), Option<Scalar>, "alpha", optional)? })
        };
        Some(read())
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

impl OpDef for Where {
    fn name(&self) -> String {
        Self::NAME.into()
    }

    fn attrs(&self, _: &mut Vec<String>) {}
}

impl ParseOp for Where {
    fn parse(name: &str, _: &mut AttrReader<'_, '_>, args: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        (name == Self::NAME).then(|| {
            let [cond, on_true, on_false] = operands(name, args)?;
            if cond != Operand::Tensor {
                return Err("the condition of `where` must be a value".into());
            }
            Ok(Where { on_true, on_false })
        })
    }
}

/// The `N` operands of a call, each a tensor or a scalar.
fn operands<const N: usize>(name: &str, args: &[Option<Scalar>]) -> Result<[Operand; N], String> {
    let found = args.len();
    let v: Vec<Operand> = args.iter().map(|a| a.map_or(Operand::Tensor, Operand::Scalar)).collect();
    v.try_into().map_err(|_| format!("`{name}` takes {N} operands, found {found}"))
}

/// The unary functions are one family, named by the function (`neg`, `rsqrt`).
impl OpDef for UnaryOp {
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

op! {
    /// `clamp(x, min, max)` (also `hardtanh`): inputs `[x]`.
    pub struct Clamp = "clamp" {
        pub min: Option<Scalar> ["min"],
        pub max: Option<Scalar> ["max"],
    }
}

op! {
    /// `clamp.Tensor(x, min, max)`: inputs `[x, (min), (max)]`.
    pub struct ClampTensor = "clamp_tensor" {
        pub has_min: bool ["min"],
        pub has_max: bool ["max"],
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

op! {
    /// `leaky_relu`: `x > 0 ? x : slope*x`; inputs `[x]`.
    pub struct LeakyRelu = "leaky_relu" {
        pub slope: f64 ["slope"],
    }
}

op! {
    /// `clone`, `alias` and other identities on values: inputs `[x]`.
    pub struct Identity = "copy";
}

op! {
    /// `copy(self, src)`: `src` broadcast and converted to `self`'s shape and dtype: inputs
    /// `[self, src]`.
    pub struct CopyFrom = "copy_from";
}

op! {
    /// `native_dropout(x, p, train)`: outputs `[x * keep / (1 - p), keep]`, each element kept
    /// with probability `1 - p` when training: inputs `[x, rng_seed]`.
    pub struct Dropout = "dropout" {
        pub p: f64 ["p"],
        pub train: bool ["train"],
    }
}

op! {
    /// `full_like(x, value)`: inputs `[x]` (only its shape is used).
    pub struct FullLike = "full_like" {
        pub value: Scalar ["value"],
    }
}

op! {
    /// `_to_copy` and friends: inputs `[x]`, converted to the output dtype.
    pub struct Convert = "convert";
}
