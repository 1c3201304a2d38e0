//! Plain data of the PJRT layer: element types and compile options.

use std::fmt;

use prost::Message;

use super::PjrtError;
use crate::proto::xla::{
    device_assignment_proto::ComputationDevice, option_override_proto, CompileOptionsProto, DeviceAssignmentProto,
    ExecutableBuildOptionsProto, OptionOverrideProto,
};

/// `PJRT_Buffer_Type`: the element type of a buffer. The discriminants are the C values, and
/// the variants are named after them (`S32` is `PJRT_Buffer_Type_S32`), so they carry no docs.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum ElementType {
    Pred = 1,
    S8 = 2,
    S16 = 3,
    S32 = 4,
    S64 = 5,
    U8 = 6,
    U16 = 7,
    U32 = 8,
    U64 = 9,
    F16 = 10,
    F32 = 11,
    F64 = 12,
    Bf16 = 13,
    C64 = 14,
    C128 = 15,
    F8E5M2 = 16,
    F8E4M3FN = 17,
    F8E4M3B11FNUZ = 18,
    F8E5M2FNUZ = 19,
    F8E4M3FNUZ = 20,
    S4 = 21,
    U4 = 22,
    Token = 23,
    S2 = 24,
    U2 = 25,
    F8E4M3 = 26,
    F8E3M4 = 27,
    F8E8M0FNU = 28,
    F4E2M1FN = 29,
    S1 = 30,
    U1 = 31,
}

impl ElementType {
    /// Every element type, in C order.
    pub const ALL: [ElementType; 31] = {
        use ElementType::*;
        [
            Pred,
            S8,
            S16,
            S32,
            S64,
            U8,
            U16,
            U32,
            U64,
            F16,
            F32,
            F64,
            Bf16,
            C64,
            C128,
            F8E5M2,
            F8E4M3FN,
            F8E4M3B11FNUZ,
            F8E5M2FNUZ,
            F8E4M3FNUZ,
            S4,
            U4,
            Token,
            S2,
            U2,
            F8E4M3,
            F8E3M4,
            F8E8M0FNU,
            F4E2M1FN,
            S1,
            U1,
        ]
    };

    /// Maps the C value; `None` for `PJRT_Buffer_Type_INVALID` and values this build does not
    /// know.
    pub fn from_raw(raw: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as i32 == raw)
    }

    /// The C value.
    pub fn to_raw(self) -> i32 {
        self as i32
    }

    /// Bits per element; `None` for `token`, which has no data.
    pub fn bit_width(self) -> Option<u32> {
        use ElementType::*;
        Some(match self {
            S1 | U1 => 1,
            S2 | U2 => 2,
            S4 | U4 | F4E2M1FN => 4,
            Pred | S8 | U8 | F8E5M2 | F8E4M3FN | F8E4M3B11FNUZ | F8E5M2FNUZ | F8E4M3FNUZ | F8E4M3 | F8E3M4
            | F8E8M0FNU => 8,
            S16 | U16 | F16 | Bf16 => 16,
            S32 | U32 | F32 => 32,
            S64 | U64 | F64 | C64 => 64,
            C128 => 128,
            Token => return None,
        })
    }

    /// Bytes per element in a dense host buffer (a `pred` is one byte); `None` for sub-byte
    /// types, whose host packing this layer does not handle, and for `token`.
    pub fn byte_size(self) -> Option<usize> {
        match self.bit_width()? {
            bits if bits >= 8 => Some(bits as usize / 8),
            _ => None,
        }
    }

    /// The StableHLO spelling, e.g. `f32`, `i64`, `ui8`, `i1`, `complex<f32>`.
    pub fn name(self) -> &'static str {
        use ElementType::*;
        match self {
            Pred => "i1",
            S8 => "i8",
            S16 => "i16",
            S32 => "i32",
            S64 => "i64",
            U8 => "ui8",
            U16 => "ui16",
            U32 => "ui32",
            U64 => "ui64",
            F16 => "f16",
            F32 => "f32",
            F64 => "f64",
            Bf16 => "bf16",
            C64 => "complex<f32>",
            C128 => "complex<f64>",
            F8E5M2 => "f8E5M2",
            F8E4M3FN => "f8E4M3FN",
            F8E4M3B11FNUZ => "f8E4M3B11FNUZ",
            F8E5M2FNUZ => "f8E5M2FNUZ",
            F8E4M3FNUZ => "f8E4M3FNUZ",
            S4 => "i4",
            U4 => "ui4",
            Token => "token",
            S2 => "i2",
            U2 => "ui2",
            F8E4M3 => "f8E4M3",
            F8E3M4 => "f8E3M4",
            F8E8M0FNU => "f8E8M0FNU",
            F4E2M1FN => "f4E2M1FN",
            S1 => "si1",
            U1 => "ui1",
        }
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A valid `xla.CompileOptionsProto`: at least one replica and one partition.
///
/// XLA aborts the whole process (a fatal `CHECK`, not a PJRT error) on options without
/// `num_replicas` and `num_partitions`, so every constructor sets both and the serialized form is
/// never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    proto: CompileOptionsProto,
}

impl CompileOptions {
    /// One replica, one partition, no device assignment: serializes to `1a 04 20 01 28 01`.
    ///
    /// This is the smallest message XLA accepts. With no device assignment the client picks its
    /// default device, and the executable is not pinned to a device id. For a fixed assignment
    /// (deviceless TPU compile) use [`CompileOptions::partitions`].
    pub fn single_device() -> Self {
        let build = ExecutableBuildOptionsProto { num_replicas: 1, num_partitions: 1, ..Default::default() };
        Self { proto: CompileOptionsProto { executable_build_options: Some(build), ..Default::default() } }
    }

    /// What CPU executables are compiled with: [`CompileOptions::single_device`] with XLA:CPU's
    /// `maximum`/`minimum` made to propagate NaN, as StableHLO specifies and torch computes.
    ///
    /// XLA:CPU's default (`xla_cpu_enable_fast_min_max`, "Eigen style") lets a number win over
    /// NaN, in element-wise ops, reductions and pooling windows alike; JAX turns it off the same
    /// way. With it off, programs say `maximum` and need no NaN guards of their own.
    pub fn cpu() -> Self {
        Self::single_device().for_cpu()
    }

    /// These options with the settings every CPU executable is compiled with (see
    /// [`CompileOptions::cpu`]).
    pub fn for_cpu(self) -> Self {
        self.with_flag("xla_cpu_enable_fast_min_max", false)
    }

    /// These options with the boolean XLA flag `name` (a `DebugOptions` field) set to `value`.
    pub fn with_flag(mut self, name: &str, value: bool) -> Self {
        let value = OptionOverrideProto { value: Some(option_override_proto::Value::BoolField(value)) };
        self.proto.env_option_overrides.insert(name.to_string(), value);
        self
    }

    /// One replica split SPMD-wise into `p` partitions on devices `0..p`, with an explicit device
    /// assignment and `device_ordinal = -1` (what XLA writes for "unset").
    pub fn partitions(p: u32) -> Result<Self, PjrtError> {
        let count = i32::try_from(p).ok().filter(|&p| p >= 1).ok_or_else(|| {
            PjrtError::InvalidArgument(format!("partition count {p} must be between 1 and {}", i32::MAX))
        })?;
        let assignment = DeviceAssignmentProto {
            replica_count: 1,
            computation_count: count,
            computation_devices: (0..i64::from(count))
                .map(|id| ComputationDevice { replica_device_ids: vec![id] })
                .collect(),
        };
        let build = ExecutableBuildOptionsProto {
            device_ordinal: -1,
            num_replicas: 1,
            num_partitions: i64::from(count),
            use_spmd_partitioning: count > 1,
            device_assignment: Some(assignment),
            ..Default::default()
        };
        Ok(Self { proto: CompileOptionsProto { executable_build_options: Some(build), ..Default::default() } })
    }

    /// Wraps a message built elsewhere after checking it has at least one replica and one
    /// partition.
    pub fn from_proto(proto: CompileOptionsProto) -> Result<Self, PjrtError> {
        let build = proto
            .executable_build_options
            .as_ref()
            .ok_or_else(|| PjrtError::InvalidArgument("compile options need `executable_build_options`".to_string()))?;
        if build.num_replicas < 1 || build.num_partitions < 1 {
            return Err(PjrtError::InvalidArgument(format!(
                "compile options need at least one replica and one partition, got {} and {}",
                build.num_replicas, build.num_partitions
            )));
        }
        Ok(Self { proto })
    }

    /// Partitions with Shardy (needed when the module carries `sdy.*` shardings).
    pub fn with_shardy_partitioner(mut self, on: bool) -> Self {
        if let Some(build) = self.proto.executable_build_options.as_mut() {
            build.use_shardy_partitioner = on;
        }
        self
    }

    /// The message.
    pub fn proto(&self) -> &CompileOptionsProto {
        &self.proto
    }

    /// The serialized message, as PJRT takes it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let bytes = self.proto.encode_to_vec();
        // Every constructor sets `num_replicas` and `num_partitions` to at least 1.
        assert!(!bytes.is_empty(), "compile options serialized to nothing");
        bytes
    }
}
