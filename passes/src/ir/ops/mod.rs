//! The closed set of operations of the IR, one definition per op.
//!
//! Each op (or family of ops sharing a rule, such as the reductions) is a struct in its
//! family's file, declared with `op!`: its doc, its printed name, and its attributes, each
//! with the key it prints under. The declaration gives the struct, its `NAME`, and the
//! printing and reading back of its attributes ([`OpSyntax`], and `ParseOp`). Next to it, the
//! file implements [`OpDef`] by hand: the op's arity, its type rule, and its facts (whether it
//! is element-wise or random, how it treats padding: [`Padding`]). [`Op`] is the enum of all of
//! them, made by `ops!` from one list, which also gives the parser's table
//! (`Op::parse_named`) and [`Op::def`], the op as a `&dyn OpDef`.
//!
//! Tensor operands are the node's inputs, in slot order; the doc of each struct names them.
//! Attributes are normalized: defaults filled in, negative dims kept as written (the verifier
//! and emitter normalize them against the operand rank).
//!
//! An attribute's spec, in brackets after its type:
//!
//! - `["key"]`: printed `key=value` by its type's `Attr` form;
//! - `["key", optional]`: the same, left out when it is the type's default;
//! - `["key", via codec]`: printed and read by the module `codec` of `attr` (e.g. a slice's
//!   `end`, which prints `end` for "to the end");
//! - `[flatten]`: another op's attributes, in place (a backward op holds its forward's);
//! - `[kind]`: the member of the family, which names the op (`reduce_sum`, `cumsum`).
//!
//! Ops with regions (`cond`'s branches, a loop's body: `control`) hold their subgraphs; the
//! printer writes each region after its node and the parser reads it back there
//! ([`Op::regions`]). Complex values are a dtype, which the rules promote (`is_complex`); an op
//! that reads both parts says so in its rule and its emission.

#[macro_use]
mod attr;
mod complex;
mod control;
mod elementwise;
mod index;
mod linalg;
mod misc;
mod nn;
mod padding;
mod reduce;
mod rule;
mod shape;
#[cfg(test)]
mod tests;

pub use complex::*;
pub use control::*;
pub use elementwise::*;
pub use index::*;
pub use linalg::*;
pub use misc::*;
pub use nn::*;
pub use reduce::*;
pub use shape::*;

pub(crate) use attr::{serde_name, AttrReader};
pub use padding::{Padding, PaddingRule};
pub use rule::{same_dim, Along, Arity, Expected, RuleResult};

use super::op::{InputKind, UnaryOp};
use super::types::{Scalar, TensorType};

/// How an op is written: its name and attributes. `op!` implements it from the declaration.
pub trait OpSyntax {
    /// The printed name (`addmm`, `reduce_mean`, `cumsum`): the struct's `NAME`, or made from
    /// the member of a family.
    fn name(&self) -> String;

    /// `key=value` attributes in the printed order.
    fn attrs(&self, out: &mut Vec<String>);
}

/// What every op's definition answers, written next to its declaration. Object-safe:
/// [`Op::def`] gives any op as `&dyn OpDef`.
pub trait OpDef: OpSyntax {
    /// How many tensor operands the op takes and results it makes.
    fn arity(&self) -> Arity;

    /// The type rule: the result types for operands of types `inputs` (arity already checked).
    fn infer(&self, inputs: &[&TensorType]) -> RuleResult;

    /// Element-wise on broadcast operands: each result position reads the same position of
    /// every operand (arithmetic, selects, clamps, conversions, copies).
    fn is_elementwise(&self) -> bool {
        false
    }

    /// Draws random numbers: reads the graph's `rng_seed` input as its last operand and
    /// advances the random state in graph order.
    fn is_random(&self) -> bool {
        false
    }

    /// The dims along which the op works position by position: each [`Along`] says that result
    /// `out`'s position `i` along `out_dim` is computed from operand `slot`'s position `i` along
    /// `dim` alone (the batch of a convolution, the rows of a matmul, every dim but the one a
    /// softmax or a sort works along). Padding along such a dim, in any pattern, stays where it
    /// is and never reaches a real position. Element-wise ops: every dim of every operand that
    /// is not broadcast.
    fn position_wise(&self, inputs: &[&TensorType], outputs: &[TensorType]) -> Vec<Along> {
        if self.is_elementwise() {
            Along::broadcast(inputs, outputs)
        } else {
            vec![]
        }
    }

    /// What running at a size bucket does to it along the dynamic dims it does not work along
    /// position by position ([`OpDef::position_wise`]), its operands padded past their real
    /// size (the `bucket_masks` pass). Element-wise ops are exact; others are refused unless
    /// they say otherwise.
    fn under_padding(&self) -> Padding {
        if self.is_elementwise() {
            Padding::Exact
        } else {
            Padding::Refused
        }
    }
}

/// Reading an op back from its printed name and attributes.
pub(crate) trait ParseOp: Sized {
    /// The op named `name` with its attributes read from `r`; `None` when `name` is not this
    /// op's. `args` are the call's operands (`Some` for a scalar), for the ops that take
    /// scalar operands.
    fn parse(name: &str, r: &mut AttrReader<'_, '_>, args: &[Option<Scalar>]) -> Option<Result<Self, String>>;
}

/// Declares the enum [`Op`] from the list of op definitions, with [`Op::def`],
/// [`Op::parse_named`], the variants' names and a `From` conversion from each definition.
macro_rules! ops {
    ($( $variant:ident($ty:ty), )*) => {
        /// One operation: a graph input or an op, by its definition.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Op {
            $( #[doc = concat!("[`", stringify!($ty), "`]")] $variant($ty), )*
        }

        impl Op {
            /// The name of every variant, in the order of the list.
            pub const VARIANTS: &'static [&'static str] = &[$( stringify!($variant), )*];

            /// The name of this op's variant (one of [`Op::VARIANTS`]).
            pub fn variant(&self) -> &'static str {
                match self {
                    $( Op::$variant(_) => stringify!($variant), )*
                }
            }

            /// The op's definition, for what every op answers.
            pub fn def(&self) -> &dyn OpDef {
                match self {
                    $( Op::$variant(o) => o, )*
                }
            }

            /// The op of a printed name, its attributes read from `r`; `None` for a name no
            /// op has.
            pub(crate) fn parse_named(
                name: &str,
                r: &mut AttrReader<'_, '_>,
                args: &[Option<Scalar>],
            ) -> Option<Result<Op, String>> {
                $(
                    if let Some(op) = <$ty as ParseOp>::parse(name, r, args) {
                        return Some(op.map(Op::$variant));
                    }
                )*
                None
            }
        }

        $(
            impl From<$ty> for Op {
                fn from(o: $ty) -> Op {
                    Op::$variant(o)
                }
            }
        )*
    };
}

ops! {
    Input(InputKind),
    Unary(UnaryOp),
    Binary(Binary),
    Where(Where),
    Clamp(Clamp),
    ClampTensor(ClampTensor),
    Elu(Elu),
    LeakyRelu(LeakyRelu),
    Mm(Mm),
    Bmm(Bmm),
    Addmm(Addmm),
    GroupedMm(GroupedMm),
    Histc(Histc),
    Convolution(Convolution),
    MaxPool(MaxPool),
    AvgPool(AvgPool),
    AdaptiveAvgPool(AdaptiveAvgPool),
    Upsample(Upsample),
    UpsampleNearestBackward(UpsampleNearestBackward),
    GroupNorm(GroupNorm),
    BatchNormTraining(BatchNormTraining),
    BatchNormInference(BatchNormInference),
    LayerNorm(LayerNorm),
    Softmax(Softmax),
    Reduce(Reduce),
    ArgReduce(ArgReduce),
    Var(Var),
    ExtremumDim(ExtremumDim),
    Sort(Sort),
    TopK(TopK),
    Cumulative(Cumulative),
    View(View),
    Permute(Permute),
    Expand(Expand),
    Unsqueeze(Unsqueeze),
    Squeeze(Squeeze),
    Identity(Identity),
    After(After),
    Slice(Slice),
    Select(Select),
    Diagonal(Diagonal),
    Flip(Flip),
    Repeat(Repeat),
    Pad(Pad),
    PadMode(PadMode),
    AsStrided(AsStrided),
    Cdist(Cdist),
    Pdist(Pdist),
    MaxPoolBackward(MaxPoolBackward),
    AvgPoolBackward(AvgPoolBackward),
    LayerNormBackward(LayerNormBackward),
    ConvolutionBackward(ConvolutionBackward),
    GroupNormBackward(GroupNormBackward),
    AdaptiveAvgPoolBackward(AdaptiveAvgPoolBackward),
    CopyFrom(CopyFrom),
    Cat(Cat),
    SplitWithSizes(SplitWithSizes),
    Index(Index),
    IndexSelect(IndexSelect),
    Nonzero(Nonzero),
    Item(Item),
    NmsKeep(NmsKeep),
    Gather(Gather),
    Scatter(Scatter),
    IndexPut(IndexPut),
    SliceScatter(SliceScatter),
    SelectScatter(SelectScatter),
    MaskedScatter(MaskedScatter),
    EmbeddingBackward(EmbeddingBackward),
    Embedding(Embedding),
    EmbeddingBag(EmbeddingBag),
    Col2Im(Col2Im),
    GridSampler(GridSampler),
    Rand(Rand),
    RandPerm(RandPerm),
    Dropout(Dropout),
    Fft(Fft),
    Complex(Complex),
    Polar(Polar),
    ViewAsComplex(ViewAsComplex),
    ViewAsReal(ViewAsReal),
    Arange(Arange),
    ArangeSym(ArangeSym),
    Full(Full),
    Literal(Literal),
    FullLike(FullLike),
    ScalarTensor(ScalarTensor),
    Convert(Convert),
    AssertMetadata(AssertMetadata),
    SymSize(SymSize),
    SymInt(SymInt),
    Cond(Cond),
    WhileLoop(WhileLoop),
    Scan(Scan),
    Unsupported(Unsupported),
}

impl Op {
    /// The subgraphs the op runs, in printed order (none for most ops).
    pub fn regions(&self) -> Vec<&Region> {
        match self {
            Op::Cond(c) => vec![&c.then, &c.otherwise],
            Op::WhileLoop(w) => vec![&w.cond, &w.body],
            Op::Scan(s) => vec![&s.body],
            _ => vec![],
        }
    }

    /// The same, to change them.
    pub fn regions_mut(&mut self) -> Vec<&mut Region> {
        match self {
            Op::Cond(c) => vec![&mut c.then, &mut c.otherwise],
            Op::WhileLoop(w) => vec![&mut w.cond, &mut w.body],
            Op::Scan(s) => vec![&mut s.body],
            _ => vec![],
        }
    }

    /// Draws random numbers (see [`OpDef::is_random`]).
    pub fn is_random(&self) -> bool {
        self.def().is_random()
    }

    /// Element-wise on broadcast operands (see [`OpDef::is_elementwise`]).
    pub fn is_elementwise(&self) -> bool {
        self.def().is_elementwise()
    }

    /// Short, stable op name used by the printer, the parser and messages (`addmm`,
    /// `reduce_mean`).
    pub fn name(&self) -> String {
        self.def().name()
    }

    /// How many tensor operands the op takes and results it makes.
    pub fn arity(&self) -> Arity {
        self.def().arity()
    }

    /// The result types the op gives for operands of types `inputs` (arity already checked).
    pub fn infer(&self, inputs: &[&TensorType]) -> RuleResult {
        self.def().infer(inputs)
    }
}

impl OpSyntax for InputKind {
    fn name(&self) -> String {
        let kind = match self {
            InputKind::Parameter { .. } => "param",
            InputKind::Buffer { .. } => "buffer",
            InputKind::Constant { .. } => "const",
            InputKind::User { .. } => "user",
            InputKind::RngSeed => "rng_seed",
            InputKind::Size { .. } => "size",
            InputKind::Derived { .. } => "derived",
        };
        format!("input.{kind}")
    }

    /// An input prints its kind's own syntax instead (`input.user #0`).
    fn attrs(&self, _: &mut Vec<String>) {}
}

impl OpDef for InputKind {
    fn arity(&self) -> Arity {
        Arity::fixed(0, 1)
    }

    /// An input's declared type is the contract.
    fn infer(&self, _: &[&TensorType]) -> RuleResult {
        Ok(vec![])
    }

    fn under_padding(&self) -> Padding {
        Padding::Exact
    }
}

/// Graph inputs have a syntax of their own, read by the parser directly.
impl ParseOp for InputKind {
    fn parse(_: &str, _: &mut AttrReader<'_, '_>, _: &[Option<Scalar>]) -> Option<Result<Self, String>> {
        None
    }
}
