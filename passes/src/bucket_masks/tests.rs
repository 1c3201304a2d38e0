//! Unit tests of `bucket_masks`; the filetests in `passes/tests/bucket_masks/` show whole programs.
use crate::ir::ops::{Flip, Reduce};
use std::collections::BTreeMap;

use super::{BucketMasks, BucketSpec};
use crate::ir::builder::Builder;
use crate::ir::{print, Bounds, DType, Dim, Graph, Op, ReduceOp, SymExpr, TensorType};
use crate::pass::{Pass, PassCx};
use crate::specialize::specialize;

fn s() -> Dim {
    Dim::Sym(SymExpr::sym("s"))
}

fn f32(dims: Vec<Dim>) -> TensorType {
    TensorType { dtype: DType::F32, dims }
}

/// `x: f32[4, s]` through `op` (one f32 output of `out` dims), specialized at s = 8 and
/// masked for the bucket.
fn bucket(op: Op, out: Vec<Dim>) -> Result<Graph, String> {
    let mut b = Builder::new("t");
    let bounds = Bounds { min: Some(2), max: Some(8) };
    b.graph_mut().add_symbol("s", bounds);
    let x = b.input("x", f32(vec![Dim::Static(4), s()]));
    let y = b.op("y", op, &[x], f32(out));
    b.output(y);
    let values = BTreeMap::from([("s".to_string(), 8)]);
    let mut g = specialize(&b.finish(), &values).expect("specializes");
    let spec = BucketSpec { values, bounds: BTreeMap::from([("s".to_string(), bounds)]) };
    let mut cx = PassCx::default();
    BucketMasks { bucket: Some(spec) }.run(&mut g, &mut cx).map_err(|e| e.to_string())?;
    crate::verify(&g).expect("verifies");
    Ok(g)
}

/// A mean over the dynamic dim sums the real positions only and divides by the real size,
/// which the program takes as an input.
#[test]
fn means_over_a_dynamic_dim_use_the_real_size() {
    let mean = Op::Reduce(Reduce { op: ReduceOp::Mean, dims: vec![1], keepdim: false, dtype: None });
    let g = bucket(mean, vec![Dim::Static(4)]).expect("safe");
    insta::assert_snapshot!(print(&g), @r#"
    graph t {
      %0 = input.user #0 : f32[4,8]  # x
      %1 = input.size s : i64[]  # size_s
      %2 = arange() {start=0, end=8, step=1} : i64[8]  # y.bucket.1
      %3 = view(%2) {size=[1, 8]} : i64[1,8]  # y.bucket.2
      %4 = lt(%3, %1) : bool[1,8]  # y.bucket.3
      %5 = where(%4, %0, 0.0) : f32[4,8]  # y.bucket.4
      %6 = reduce_sum(%5) {dims=[1], keepdim=false, dtype=none} : f32[4]  # y
      %7 = convert(%1) : f32[]  # y.bucket.5
      %8 = div(%6, %7) : f32[4]  # y.bucket.6
      return user[0] = %8
    }
    "#);
}

/// Flipping a padded dim would move the padding in front of the real values: refused,
/// naming the node and the op.
#[test]
fn ops_with_no_padding_safe_form_are_refused() {
    let flip = Op::Flip(Flip { dims: vec![1] });
    let err = bucket(flip, vec![Dim::Static(4), s()]).expect_err("refused");
    assert!(err.contains("node `y` (flip)") && err.contains("no padding-safe form"), "{err}");
}
