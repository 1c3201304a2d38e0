//! The collectives of a split program, counted in the optimized program XLA compiled for one
//! device (`PJRT_Executable_OptimizedProgram`, a serialized `xla.HloModuleProtoWithConfig`):
//! per kind, how many and the bytes of their results. Every computation is walked, fusion
//! bodies included (libtpu puts a reduce-scatter inside a fusion around an `all-reduce`, which
//! counts as one); an async pair counts once, at its `-start`. A collective inside a loop body
//! counts once, whatever the trip count.

use std::collections::BTreeMap;

use prost::Message;

use crate::artifact::CollectiveInfo;
use crate::proto::xla::{HloModuleProtoWithConfig, ShapeProto};

/// The format the plugins give optimized programs in.
const FORMAT: &str = "hlo_with_config";

/// The kinds counted, by the opcodes that start one.
fn kind(opcode: &str) -> Option<&'static str> {
    Some(match opcode {
        "all-reduce" | "all-reduce-start" => "all-reduce",
        "all-gather" | "all-gather-start" => "all-gather",
        "reduce-scatter" => "reduce-scatter",
        "all-to-all" | "ragged-all-to-all" => "all-to-all",
        "collective-permute" | "collective-permute-start" => "collective-permute",
        "collective-broadcast" => "collective-broadcast",
        _ => return None,
    })
}

/// Counts the collectives of an optimized program.
pub(super) fn count(format: &str, bytes: &[u8]) -> Result<BTreeMap<String, CollectiveInfo>, String> {
    if format != FORMAT {
        return Err(format!("it is `{format}`, not `{FORMAT}`"));
    }
    let module = HloModuleProtoWithConfig::decode(bytes).map_err(|e| e.to_string())?;
    let mut out: BTreeMap<String, CollectiveInfo> = BTreeMap::new();
    for computation in module.hlo_module.iter().flat_map(|m| &m.computations) {
        for i in &computation.instructions {
            if let Some(k) = kind(&i.opcode) {
                let c = out.entry(k.to_string()).or_default();
                c.count += 1;
                c.bytes += i.shape.as_ref().map_or(0, result_bytes);
            }
        }
    }
    Ok(out)
}

/// Bytes of a result: an array's, or for an async start's tuple the largest element's (the
/// gathered or reduced value).
fn result_bytes(shape: &ShapeProto) -> u64 {
    if !shape.tuple_shapes.is_empty() {
        return shape.tuple_shapes.iter().map(result_bytes).max().unwrap_or(0);
    }
    let element: u64 = match shape.element_type {
        1 | 2 | 6 | 19 | 20 | 23..=25 | 28 | 29 | 33 => 1, // pred, s8, u8, fp8 kinds
        3 | 7 | 10 | 16 => 2,                              // s16, u16, f16, bf16
        4 | 8 | 11 => 4,                                   // s32, u32, f32
        5 | 9 | 12 | 15 => 8,                              // s64, u64, f64, c64
        18 => 16,                                          // c128
        _ => 0,
    };
    shape.dimensions.iter().fold(element, |n, &d| n.saturating_mul(u64::try_from(d).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::count;
    use crate::proto::xla::{
        HloComputationProto, HloInstructionProto, HloModuleProto, HloModuleProtoWithConfig, ShapeProto,
    };

    fn instruction(opcode: &str, shape: ShapeProto) -> HloInstructionProto {
        HloInstructionProto { name: opcode.into(), opcode: opcode.into(), shape: Some(shape) }
    }

    fn array(element_type: i32, dimensions: &[i64]) -> ShapeProto {
        ShapeProto { element_type, dimensions: dimensions.to_vec(), tuple_shapes: vec![] }
    }

    #[test]
    fn counts_collectives_in_every_computation() {
        let entry = HloComputationProto {
            name: "main".into(),
            instructions: vec![
                instruction("all-reduce", array(11, &[16, 64])),
                instruction("add", array(11, &[16, 64])),
                instruction(
                    "all-gather-start",
                    ShapeProto {
                        element_type: 13,
                        dimensions: vec![],
                        tuple_shapes: vec![array(16, &[8, 4]), array(16, &[8, 8])],
                    },
                ),
                instruction("all-gather-done", array(16, &[8, 8])),
            ],
        };
        let fused = HloComputationProto {
            name: "fusion".into(),
            instructions: vec![instruction("all-reduce", array(11, &[4]))],
        };
        let module = HloModuleProtoWithConfig {
            hlo_module: Some(HloModuleProto { name: "m".into(), computations: vec![entry, fused] }),
        };
        let counted = count("hlo_with_config", &module.encode_to_vec()).expect("decodes");
        assert_eq!((counted["all-reduce"].count, counted["all-reduce"].bytes), (2, 16 * 64 * 4 + 16));
        assert_eq!((counted["all-gather"].count, counted["all-gather"].bytes), (1, 8 * 8 * 2));
        assert_eq!(counted.len(), 2);
        assert!(count("mlir", b"").is_err());
        assert!(count("hlo_with_config", b"\xff\xff").is_err());
    }
}
