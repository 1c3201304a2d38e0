//! The graph IR: typed nodes over a private petgraph `StableDiGraph`.

pub mod builder;
mod cursor;
mod graph;
mod node;
mod op;
pub mod ops;
mod parse;
mod print;
mod product;
mod sharding;
mod sym;
mod types;

pub use graph::{Graph, GraphOutput, OutputKind, MAX_OPERANDS};
pub use node::{Composite, Edge, Node, NodeId, Origin, Symbolic, ValueRef, COMPOSITES, SDPA};
pub use op::{
    ArgReduceOp, BagMode, BinaryOp, CumulativeOp, GridPadding, InputKind, Interpolation, Operand, ReduceOp,
    ScatterReduce, UnaryOp, WeightRecipe,
};
pub use ops::{Op, OpDef};
pub use parse::{parse, ParseError};
pub use print::print;
pub use product::Product;
pub use sharding::{Mesh, MeshAxis, Sharding};
pub use sym::{floor_div, python_mod, SymExpr};
pub use types::{brief_list, norm_dim, Bounds, DType, Dim, Precision, Scalar, TensorType};
