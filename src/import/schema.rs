//! serde types for `models/model.json` and the payload configs (torch export schema 8.x).
//!
//! Unions are externally tagged enums (`{"as_tensor": {...}}`), exactly serde's default. Unknown
//! fields are ignored, as torch's own deserializer does. Variants this compiler never reads keep
//! their payload as raw JSON so that any valid archive still parses.

// The types mirror the format (names included); not every field or variant payload is read.
#![allow(dead_code, clippy::enum_variant_names)]

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The schema major version this reader understands.
pub(super) const SCHEMA_MAJOR: i64 = 8;

/// Only the version, read first so that an archive of another major version is refused with a
/// clear message rather than a parse error deep inside the graph.
#[derive(Deserialize)]
pub(super) struct VersionProbe {
    #[serde(default)]
    pub schema_version: Option<SchemaVersion>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
pub(super) struct SchemaVersion {
    pub major: i64,
    pub minor: i64,
}

#[derive(Debug, Deserialize)]
pub(super) struct ExportedProgram {
    pub graph_module: GraphModule,
    #[serde(default)]
    pub range_constraints: BTreeMap<String, RangeConstraint>,
    pub schema_version: SchemaVersion,
    #[serde(default)]
    pub torch_version: Option<String>,
    /// The conditions its trace assumed, as Python expressions (`L['x'].size()[1] != 16`).
    #[serde(default)]
    pub guards_code: Vec<String>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
pub(super) struct RangeConstraint {
    pub min_val: Option<i64>,
    pub max_val: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct GraphModule {
    pub graph: Graph,
    pub signature: GraphSignature,
}

#[derive(Debug, Deserialize)]
pub(super) struct Graph {
    pub inputs: Vec<Argument>,
    pub outputs: Vec<Argument>,
    pub nodes: Vec<Node>,
    pub tensor_values: BTreeMap<String, TensorMeta>,
    #[serde(default)]
    pub sym_int_values: BTreeMap<String, SymInt>,
    /// Symbolic bools by name (`{"as_expr": {"expr_str": …}}`), read where a value is asserted.
    #[serde(default)]
    pub sym_bool_values: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Node {
    pub target: String,
    pub inputs: Vec<NamedArgument>,
    pub outputs: Vec<Argument>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct NamedArgument {
    pub name: String,
    pub arg: Argument,
}

#[derive(Debug, Deserialize)]
pub(super) struct TensorMeta {
    pub dtype: i64,
    pub sizes: Vec<SymInt>,
    #[serde(default)]
    pub strides: Vec<SymInt>,
    #[serde(default)]
    pub storage_offset: Option<SymInt>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum SymInt {
    AsExpr(SymExprJson),
    AsInt(i64),
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct SymExprJson {
    pub expr_str: String,
    /// The value at export time (`{"as_int": 16}`), when recorded.
    #[serde(default)]
    pub hint: Option<Value>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct TensorArgument {
    pub name: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum SymIntArgument {
    AsName(String),
    AsInt(i64),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum OptionalTensorArgument {
    AsTensor(TensorArgument),
    AsNone(Value),
}

/// Every variant of the schema's `Argument` union.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Argument {
    AsNone(Value),
    AsTensor(TensorArgument),
    AsTensors(Vec<TensorArgument>),
    AsInt(i64),
    AsInts(Vec<i64>),
    AsFloat(F64),
    AsFloats(Vec<F64>),
    AsString(String),
    AsStrings(Vec<String>),
    AsSymInt(SymIntArgument),
    AsSymInts(Vec<SymIntArgument>),
    AsScalarType(i64),
    AsMemoryFormat(i64),
    AsLayout(i64),
    AsDevice(Value),
    AsBool(bool),
    AsBools(Vec<bool>),
    AsSymBool(Value),
    AsSymBools(Value),
    AsGraph(Value),
    AsOptionalTensors(Vec<OptionalTensorArgument>),
    AsCustomObj(Value),
    AsOperator(Value),
    AsSymFloat(Value),
    AsSymFloats(Value),
    AsOptionalTensor(OptionalTensorArgument),
    AsComplex(Value),
    AsNestedTensors(Value),
    AsIntLists(Value),
    AsStringToArgument(Value),
    AsFloatLists(Value),
}

impl Argument {
    /// The union tag, for messages (`as_tensor`, `as_ints`, …).
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Argument::AsNone(_) => "as_none",
            Argument::AsTensor(_) => "as_tensor",
            Argument::AsTensors(_) => "as_tensors",
            Argument::AsInt(_) => "as_int",
            Argument::AsInts(_) => "as_ints",
            Argument::AsFloat(_) => "as_float",
            Argument::AsFloats(_) => "as_floats",
            Argument::AsString(_) => "as_string",
            Argument::AsStrings(_) => "as_strings",
            Argument::AsSymInt(_) => "as_sym_int",
            Argument::AsSymInts(_) => "as_sym_ints",
            Argument::AsScalarType(_) => "as_scalar_type",
            Argument::AsMemoryFormat(_) => "as_memory_format",
            Argument::AsLayout(_) => "as_layout",
            Argument::AsDevice(_) => "as_device",
            Argument::AsBool(_) => "as_bool",
            Argument::AsBools(_) => "as_bools",
            Argument::AsSymBool(_) => "as_sym_bool",
            Argument::AsSymBools(_) => "as_sym_bools",
            Argument::AsGraph(_) => "as_graph",
            Argument::AsOptionalTensors(_) => "as_optional_tensors",
            Argument::AsCustomObj(_) => "as_custom_obj",
            Argument::AsOperator(_) => "as_operator",
            Argument::AsSymFloat(_) => "as_sym_float",
            Argument::AsSymFloats(_) => "as_sym_floats",
            Argument::AsOptionalTensor(_) => "as_optional_tensor",
            Argument::AsComplex(_) => "as_complex",
            Argument::AsNestedTensors(_) => "as_nested_tensors",
            Argument::AsIntLists(_) => "as_int_lists",
            Argument::AsStringToArgument(_) => "as_string_to_argument",
            Argument::AsFloatLists(_) => "as_float_lists",
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct GraphSignature {
    pub input_specs: Vec<InputSpec>,
    pub output_specs: Vec<OutputSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum InputSpec {
    UserInput { arg: Argument },
    Parameter { arg: TensorArgument, parameter_name: String },
    Buffer { arg: TensorArgument, buffer_name: String, persistent: bool },
    TensorConstant { arg: TensorArgument, tensor_constant_name: String },
    CustomObj(Value),
    Token(Value),
    ConstantInput { name: String, value: Value },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum OutputSpec {
    UserOutput { arg: Argument },
    LossOutput { arg: TensorArgument },
    BufferMutation { arg: TensorArgument, buffer_name: String },
    GradientToParameter { arg: TensorArgument, parameter_name: String },
    GradientToUserInput { arg: TensorArgument, user_input_name: String },
    UserInputMutation { arg: TensorArgument, user_input_name: String },
    Token(Value),
    ParameterMutation { arg: TensorArgument, parameter_name: String },
}

/// `data/{weights,constants}/model_*_config.json`.
#[derive(Debug, Deserialize)]
pub(super) struct PayloadConfig {
    pub config: BTreeMap<String, PayloadMeta>,
}

#[derive(Debug, Deserialize)]
pub(super) struct PayloadMeta {
    pub path_name: String,
    #[serde(default)]
    pub is_param: bool,
    #[serde(default)]
    pub use_pickle: bool,
    #[serde(default)]
    pub tensor_meta: Option<TensorMeta>,
}

/// A float that may be written as the strings `"Infinity"`, `"-Infinity"` or `"NaN"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct F64(pub f64);

impl<'de> Deserialize<'de> for F64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<F64, D::Error> {
        struct F64Visitor;
        impl Visitor<'_> for F64Visitor {
            type Value = F64;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or one of \"Infinity\", \"-Infinity\", \"NaN\"")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<F64, E> {
                Ok(F64(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<F64, E> {
                Ok(F64(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<F64, E> {
                Ok(F64(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<F64, E> {
                match v {
                    "Infinity" => Ok(F64(f64::INFINITY)),
                    "-Infinity" => Ok(F64(f64::NEG_INFINITY)),
                    "NaN" => Ok(F64(f64::NAN)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(F64Visitor)
    }
}

/// Maps the schema's `ScalarType` numbers (not c10's) to IR dtypes.
pub(super) fn scalar_type(v: i64) -> Option<torchtpu_passes::ir::DType> {
    use torchtpu_passes::ir::DType::*;
    Some(match v {
        1 => U8,
        2 => I8,
        3 => I16,
        4 => I32,
        5 => I64,
        6 => F16,
        7 => F32,
        8 => F64,
        9 => C32,
        10 => C64,
        11 => C128,
        12 => Bool,
        13 => BF16,
        28 => U16,
        29 => F8E4M3FN,
        30 => F8E5M2,
        31 => F8E4M3FNUZ,
        32 => F8E5M2FNUZ,
        33 => F8E8M0FNU,
        34 => U32,
        35 => U64,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_accept_infinity_strings() {
        let v: Vec<F64> = serde_json::from_str(r#"[1.5, 2, "Infinity", "-Infinity"]"#).unwrap();
        assert_eq!(v, [F64(1.5), F64(2.0), F64(f64::INFINITY), F64(f64::NEG_INFINITY)]);
        let nan: F64 = serde_json::from_str(r#""NaN""#).unwrap();
        assert!(nan.0.is_nan());
        assert!(serde_json::from_str::<F64>(r#""inf""#).is_err());
    }

    #[test]
    fn arguments_are_externally_tagged() {
        let a: Argument = serde_json::from_str(r#"{"as_sym_ints": [{"as_int": 1}, {"as_name": "s"}]}"#).unwrap();
        assert!(matches!(a, Argument::AsSymInts(v) if v.len() == 2));
        let a: Argument =
            serde_json::from_str(r#"{"as_optional_tensors": [{"as_none": true}, {"as_tensor": {"name": "i"}}]}"#)
                .unwrap();
        assert_eq!(a.kind(), "as_optional_tensors");
    }
}
