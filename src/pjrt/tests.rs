//! Tests of the PJRT layer. Most run the real CPU plugin: its path comes from
//! `TORCHTPU_PJRT_PLUGIN`, else the `cargo xtask setup` location; a missing plugin fails them.

use std::path::PathBuf;

use prost::Message;

use super::api::AttributeValue;
use super::ffi;
use super::*;
use crate::proto::xla::CompileOptionsProto;

/// Where `cargo xtask setup` unpacks the CPU plugin, under `$HOME`.
const DEFAULT_PLUGIN: &str = ".cache/torchtpu-compile/plugins/lammps-jax-pjrt-cpu-0.11.2/\
                              lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so";

/// `a · b + c` with `a: 2x3`, `b: 3x2`, in the pretty StableHLO form.
pub(super) const DOT_ADD: &str = r#"
func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %c: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %1 = stablehlo.add %0, %c : tensor<2x2xf32>
  return %1 : tensor<2x2xf32>
}
"#;

/// `x + x` on i64, in the generic form inside a `module`.
const I64_DOUBLE: &str = r#"
module {
  "func.func"() <{function_type = (tensor<2x3xi64>) -> tensor<2x3xi64>, sym_name = "main"}> ({
  ^bb0(%x: tensor<2x3xi64>):
    %0 = "stablehlo.add"(%x, %x) : (tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
    "func.return"(%0) : (tensor<2x3xi64>) -> ()
  }) : () -> ()
}
"#;

/// `not x` on booleans.
const PRED_NOT: &str = r#"
func.func @main(%x: tensor<4xi1>) -> tensor<4xi1> {
  %0 = stablehlo.not %x : tensor<4xi1>
  return %0 : tensor<4xi1>
}
"#;

const A: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
const B: [f32; 6] = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
const C: [f32; 4] = [0.5, -1.0, 2.0, 0.25];
/// `A · B = [[58, 64], [139, 154]]`, plus `C`; every value is exact in f32.
const EXPECTED: [f32; 4] = [58.5, 63.0, 141.0, 154.25];

fn plugin_path() -> PathBuf {
    if let Some(path) = std::env::var_os("TORCHTPU_PJRT_PLUGIN") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").expect("HOME is not set");
    PathBuf::from(home).join(DEFAULT_PLUGIN)
}

/// The CPU plugin; panics with a setup hint when it is missing.
pub(super) fn plugin() -> Plugin {
    let path = plugin_path();
    Plugin::load(&path).unwrap_or_else(|e| {
        panic!(
            "{e}\nthe PJRT tests need the CPU plugin: run `cargo xtask setup` \
             (or point TORCHTPU_PJRT_PLUGIN at a plugin)"
        )
    })
}

pub(super) fn client() -> Client {
    plugin().client().expect("client")
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}

/// The three inputs of [`DOT_ADD`] on `client`.
fn dot_add_inputs(client: &Client) -> [Buffer; 3] {
    let upload =
        |v: &[f32], dims: &[i64]| client.buffer_from_host(&f32_bytes(v), ElementType::F32, dims).expect("upload");
    [upload(&A, &[2, 3]), upload(&B, &[3, 2]), upload(&C, &[2, 2])]
}

/// Runs [`DOT_ADD`] and returns its one output as f32s, checking its shape.
fn run_dot_add(client: &Client, executable: &LoadedExecutable) -> Vec<f32> {
    let [a, b, c] = dot_add_inputs(client);
    let outputs = executable.execute(&[&a, &b, &c]).expect("execute");
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0].dims().expect("dims"), [2, 2]);
    assert_eq!(outputs[0].element_type().expect("type"), ElementType::F32);
    f32_values(&outputs[0].to_host().expect("to_host"))
}

#[test]
fn plugin_identity() {
    let plugin = plugin();
    assert_eq!(plugin.sha256().len(), 64);
    assert!(plugin.sha256().bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    let version = plugin.api_version();
    assert_eq!(version.major, 0);
    assert!(version.minor >= ffi::PJRT_API_MINOR_MIN, "{version}");
    assert!(plugin.path().is_absolute());
    assert!(matches!(
        plugin.attribute("stablehlo_current_version"),
        Some(AttributeValue::Int64List(v)) if v.len() == 3
    ));
    // Loading again returns the same process-wide plugin without re-initializing it.
    let again = Plugin::load(&plugin_path()).expect("second load");
    assert_eq!(again.sha256(), plugin.sha256());
    assert_eq!(again.path(), plugin.path());
}

#[test]
fn cpu_client_has_one_device() {
    let client = client();
    assert_eq!(client.platform_name(), "cpu");
    assert!(!client.platform_version().is_empty());
    assert_eq!(client.devices().len(), 1, "{:?}", client.devices());
    assert_eq!(client.devices()[0].id, 0);
}

#[test]
fn compiles_and_runs_dot_add() {
    let client = client();
    let executable = client.compile(DOT_ADD.as_bytes(), &CompileOptions::single_device()).expect("compile");
    assert_eq!(executable.num_outputs(), 1);
    assert_eq!(run_dot_add(&client, &executable), EXPECTED);
    // Executables are reusable.
    assert_eq!(run_dot_add(&client, &executable), EXPECTED);
}

#[test]
fn explicit_single_partition_options_compile() {
    let client = client();
    let options = CompileOptions::partitions(1).expect("options");
    let executable = client.compile(DOT_ADD.as_bytes(), &options).expect("compile");
    assert_eq!(run_dot_add(&client, &executable), EXPECTED);
}

#[test]
fn serialized_executable_reloads() {
    let client = client();
    let executable = client.compile(DOT_ADD.as_bytes(), &CompileOptions::single_device()).expect("compile");
    let bytes = executable.serialize().expect("serialize");
    assert!(!bytes.is_empty());
    drop(executable);
    let reloaded = client.deserialize(&bytes).expect("deserialize");
    assert_eq!(reloaded.num_outputs(), 1);
    assert_eq!(run_dot_add(&client, &reloaded), EXPECTED);
    // A second client of the same plugin loads it too.
    let other = plugin().client().expect("client");
    let reloaded = other.deserialize(&bytes).expect("deserialize");
    assert_eq!(run_dot_add(&other, &reloaded), EXPECTED);
}

/// Bytes that fail to parse are refused with an error. Single bytes flipped inside a valid
/// executable are not always caught: with this plugin some load and compute wrong numbers, and
/// some abort or crash the process, so stored executables must be checksummed before they
/// reach the plugin; this only covers truncation and garbage.
#[test]
fn truncated_or_garbled_executable_is_an_error() {
    let client = client();
    let bytes = client
        .compile(DOT_ADD.as_bytes(), &CompileOptions::single_device())
        .expect("compile")
        .serialize()
        .expect("serialize");
    let mut first_flipped = bytes.clone();
    first_flipped[0] ^= 0xff;
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let cases: [(&str, &[u8]); 5] = [
        ("half", &bytes[..bytes.len() / 2]),
        ("all but the last byte", &bytes[..bytes.len() - 1]),
        ("first byte flipped", &first_flipped),
        ("garbage", &garbage),
        ("zeros", &[0; 64]),
    ];
    for (name, case) in cases {
        match client.deserialize(case) {
            Err(PjrtError::Call { call, message, .. }) => {
                assert_eq!(call, "PJRT_Executable_DeserializeAndLoad", "{name}");
                assert!(!message.is_empty(), "{name}");
            }
            other => panic!("{name}: expected a call error, got {other:?}"),
        }
    }
    assert!(matches!(client.deserialize(&[]), Err(PjrtError::InvalidArgument(_))));
}

#[test]
fn invalid_program_reports_the_plugin_diagnostic() {
    let client = client();
    let program = "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n\
                   %0 = stablehlo.frobnicate %x : tensor<2xf32>\n\
                   return %0 : tensor<2xf32>\n}\n";
    let error = client
        .compile(program.as_bytes(), &CompileOptions::single_device())
        .expect_err("an unknown op must not compile");
    match &error {
        PjrtError::Call { call, message, .. } => {
            assert_eq!(*call, "PJRT_Client_Compile");
            assert!(message.contains("stablehlo.frobnicate"), "{message}");
        }
        other => panic!("expected a call error, got {other:?}"),
    }
    assert!(error.to_string().starts_with("`PJRT_Client_Compile` failed"), "{error}");
    assert!(matches!(client.compile(b"", &CompileOptions::single_device()), Err(PjrtError::InvalidArgument(_))));
}

#[test]
fn wrong_argument_count_is_a_call_error() {
    let client = client();
    let executable = client.compile(DOT_ADD.as_bytes(), &CompileOptions::single_device()).expect("compile");
    let [a, _, _] = dot_add_inputs(&client);
    let error = executable.execute(&[&a]).expect_err("one argument of three");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    assert!(error.to_string().contains("expected 3"), "{error}");
}

#[test]
fn buffers_of_another_client_are_refused() {
    let (first, second) = (client(), client());
    let executable = first.compile(DOT_ADD.as_bytes(), &CompileOptions::single_device()).expect("compile");
    let [a, b, _] = dot_add_inputs(&first);
    let [_, _, c] = dot_add_inputs(&second);
    let error = executable.execute(&[&a, &b, &c]).expect_err("foreign buffer");
    assert_eq!(error.to_string(), "argument 2 of device 0 is a buffer of another client");
}

#[test]
fn host_size_is_checked() {
    let client = client();
    let error = client.buffer_from_host(&[0; 20], ElementType::F32, &[2, 3]).expect_err("20 bytes for 6 f32s");
    assert_eq!(error.to_string(), "20 bytes given for a f32[2, 3] array of 24 bytes");
    assert!(matches!(client.buffer_from_host(&[0; 4], ElementType::S4, &[8]), Err(PjrtError::InvalidArgument(_))));
    assert!(matches!(client.buffer_from_host(&[], ElementType::F32, &[-1]), Err(PjrtError::InvalidArgument(_))));
    // Scalars and empty arrays are fine.
    let scalar = client.buffer_from_host(&f32_bytes(&[1.5]), ElementType::F32, &[]).expect("scalar");
    assert_eq!(scalar.dims().expect("dims"), Vec::<i64>::new());
    assert_eq!(f32_values(&scalar.to_host().expect("to_host")), [1.5]);
    let empty = client.buffer_from_host(&[], ElementType::F32, &[0, 3]).expect("empty");
    assert_eq!(empty.dims().expect("dims"), [0, 3]);
    assert!(empty.to_host().expect("to_host").is_empty());
}

#[test]
fn i64_round_trip() {
    let client = client();
    let values = [i64::MIN, -1, 0, 1, 42, i64::MAX];
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let buffer = client.buffer_from_host(&bytes, ElementType::S64, &[2, 3]).expect("upload");
    assert_eq!(buffer.element_type().expect("type"), ElementType::S64);
    assert_eq!(buffer.dims().expect("dims"), [2, 3]);
    assert_eq!(buffer.to_host().expect("to_host"), bytes);

    let executable = client.compile(I64_DOUBLE.as_bytes(), &CompileOptions::single_device()).expect("compile");
    let outputs = executable.execute(&[&buffer]).expect("execute");
    let doubled: Vec<i64> = outputs[0]
        .to_host()
        .expect("to_host")
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let expected: Vec<i64> = values.iter().map(|v| v.wrapping_mul(2)).collect();
    assert_eq!(doubled, expected);
}

#[test]
fn pred_round_trip() {
    let client = client();
    let buffer = client.buffer_from_host(&[1, 0, 0, 1], ElementType::Pred, &[4]).expect("upload");
    assert_eq!(buffer.element_type().expect("type"), ElementType::Pred);
    assert_eq!(buffer.to_host().expect("to_host"), [1, 0, 0, 1]);
    let executable = client.compile(PRED_NOT.as_bytes(), &CompileOptions::single_device()).expect("compile");
    let outputs = executable.execute(&[&buffer]).expect("execute");
    assert_eq!(outputs[0].element_type().expect("type"), ElementType::Pred);
    assert_eq!(outputs[0].to_host().expect("to_host"), [0, 1, 1, 0]);
}

#[test]
fn executes_from_several_threads() {
    let client = client();
    let executable = client.compile(DOT_ADD.as_bytes(), &CompileOptions::single_device()).expect("compile");
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..10 {
                    assert_eq!(run_dot_add(&client, &executable), EXPECTED);
                }
            });
        }
    });
}

#[test]
fn missing_plugin_is_not_found() {
    let path = PathBuf::from("/nonexistent/torchtpu/pjrt_plugin.so");
    match Plugin::load(&path) {
        Err(error @ PjrtError::PluginNotFound { .. }) => {
            assert!(error.is_plugin_setup());
            assert_eq!(error.to_string(), "no PJRT plugin at `/nonexistent/torchtpu/pjrt_plugin.so`");
        }
        other => panic!("expected PluginNotFound, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_a_library_fails_to_load() {
    let path = std::env::temp_dir().join(format!("torchtpu-not-a-plugin-{}.so", std::process::id()));
    std::fs::write(&path, b"not an ELF file").expect("write");
    let result = Plugin::load(&path);
    std::fs::remove_file(&path).expect("remove");
    match result {
        Err(error @ PjrtError::PluginLoad { .. }) => assert!(error.is_plugin_setup()),
        other => panic!("expected PluginLoad, got {other:?}"),
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_library_without_get_pjrt_api_is_not_a_plugin() {
    let candidates = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/aarch64-linux-gnu/libm.so.6",
        "/usr/lib/aarch64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
        "/usr/lib64/libm.so.6",
        "/usr/lib/libm.so.6",
    ];
    let path = candidates.iter().map(PathBuf::from).find(|p| p.exists()).expect("no libm.so.6 in the usual places");
    match Plugin::load(&path) {
        Err(PjrtError::MissingSymbol { symbol, .. }) => assert_eq!(symbol, "GetPjrtApi"),
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
}

#[test]
fn single_device_options_are_the_minimal_message() {
    assert_eq!(CompileOptions::single_device().to_bytes(), [0x1a, 0x04, 0x20, 0x01, 0x28, 0x01]);
}

#[test]
fn partition_options_match_the_documented_message() {
    // The TPU notes' hand-encoded P = 1 message: device_ordinal -1, one replica, one partition,
    // device assignment [[0]], with `replica_device_ids` unpacked. prost packs it; both decode
    // to the same message.
    let hex = "1a1908ffffffffffffffffff01200128014a08080110011a020800";
    let documented: Vec<u8> =
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect();
    let one = CompileOptions::partitions(1).expect("options");
    assert_eq!(&CompileOptionsProto::decode(documented.as_slice()).expect("decode"), one.proto());
    let packed = [
        0x1a, 0x1a, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x20, 0x01, 0x28, 0x01, 0x4a,
        0x09, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x03, 0x0a, 0x01, 0x00,
    ];
    assert_eq!(one.to_bytes(), packed);

    let four = CompileOptions::partitions(4).expect("options").with_shardy_partitioner(true);
    let build = four.proto().executable_build_options.as_ref().expect("build options");
    assert_eq!((build.num_replicas, build.num_partitions), (1, 4));
    assert!(build.use_spmd_partitioning && build.use_shardy_partitioner);
    let assignment = build.device_assignment.as_ref().expect("assignment");
    assert_eq!((assignment.replica_count, assignment.computation_count), (1, 4));
    let ids: Vec<Vec<i64>> = assignment.computation_devices.iter().map(|d| d.replica_device_ids.clone()).collect();
    assert_eq!(ids, [[0], [1], [2], [3]]);
}

#[test]
fn invalid_options_are_refused() {
    assert!(matches!(CompileOptions::partitions(0), Err(PjrtError::InvalidArgument(_))));
    assert!(matches!(CompileOptions::partitions(u32::MAX), Err(PjrtError::InvalidArgument(_))));
    assert!(CompileOptions::from_proto(CompileOptionsProto::default()).is_err());
    let mut proto = CompileOptions::single_device().proto().clone();
    if let Some(build) = proto.executable_build_options.as_mut() {
        build.num_partitions = 0;
    }
    assert!(CompileOptions::from_proto(proto).is_err());
}

#[test]
fn struct_sizes_follow_the_header() {
    // PJRT_STRUCT_SIZE excludes tail padding.
    assert_eq!(ffi::PJRT_Error_GetCode_Args::STRUCT_SIZE, 28);
    assert_eq!(std::mem::size_of::<ffi::PJRT_Error_GetCode_Args>(), 32);
    assert_eq!(ffi::PJRT_Plugin_Initialize_Args::STRUCT_SIZE, 16);
    assert_eq!(ffi::PJRT_Api_Version::STRUCT_SIZE, 24);
    assert_eq!(ffi::PJRT_NamedValue::STRUCT_SIZE, 56);
    assert_eq!(ffi::PJRT_Client_Create_Args::STRUCT_SIZE, 88);
    assert_eq!(ffi::PJRT_Client_BufferFromHostBuffer_Args::STRUCT_SIZE, 120);
    assert_eq!(ffi::PJRT_ExecuteOptions::STRUCT_SIZE, 120);
    assert_eq!(ffi::PJRT_LoadedExecutable_Execute_Args::STRUCT_SIZE, 80);
    assert_eq!(ffi::PJRT_Executable_GetCompiledMemoryStats_Args::STRUCT_SIZE, 144);
    assert_eq!(ffi::PJRT_Compile_Args::STRUCT_SIZE, 64);
    // Function slots start at byte 40, in header order.
    let slot = |offset: usize| (offset - 40) / 8;
    assert_eq!(slot(std::mem::offset_of!(ffi::PJRT_Api, PJRT_Error_Destroy)), 0);
    assert_eq!(slot(std::mem::offset_of!(ffi::PJRT_Api, PJRT_Client_Compile)), 20);
    assert_eq!(slot(std::mem::offset_of!(ffi::PJRT_Api, PJRT_LoadedExecutable_Execute)), 55);
    assert_eq!(slot(std::mem::offset_of!(ffi::PJRT_Api, PJRT_Buffer_ToHostBuffer)), 70);
    assert_eq!(slot(std::mem::offset_of!(ffi::PJRT_Api, PJRT_TopologyDescription_Create)), 82);
    assert_eq!(slot(std::mem::offset_of!(ffi::PJRT_Api, PJRT_Compile)), 89);
    assert_eq!(slot(std::mem::offset_of!(ffi::PJRT_Api, PJRT_Executable_GetCompiledMemoryStats)), 96);
    assert_eq!(std::mem::size_of::<ffi::PJRT_Api>(), 40 + 97 * 8);
}

#[test]
fn element_types_map_to_c_values() {
    for ty in ElementType::ALL {
        assert_eq!(ElementType::from_raw(ty.to_raw()), Some(ty));
    }
    assert_eq!(ElementType::from_raw(0), None);
    assert_eq!(ElementType::from_raw(32), None);
    assert_eq!(ElementType::F32.to_raw(), 11);
    assert_eq!(ElementType::Pred.byte_size(), Some(1));
    assert_eq!(ElementType::Bf16.byte_size(), Some(2));
    assert_eq!(ElementType::S64.byte_size(), Some(8));
    assert_eq!(ElementType::C128.byte_size(), Some(16));
    assert_eq!(ElementType::F8E4M3FN.byte_size(), Some(1));
    assert_eq!(ElementType::U4.byte_size(), None);
    assert_eq!(ElementType::Token.byte_size(), None);
    assert_eq!(ElementType::C64.to_string(), "complex<f32>");
}

#[test]
fn error_codes_and_messages() {
    assert_eq!(ErrorCode::from_raw(3), Some(ErrorCode::InvalidArgument));
    assert_eq!(ErrorCode::from_raw(0), None);
    assert_eq!(ErrorCode::from_raw(17), None);
    let error = PjrtError::Call {
        call: "PJRT_Client_Compile",
        code: Some(ErrorCode::InvalidArgument),
        message: "bad".to_string(),
    };
    assert_eq!(error.to_string(), "`PJRT_Client_Compile` failed (invalid argument): bad");
    let error = PjrtError::Call { call: "PJRT_Compile", code: None, message: "bad".to_string() };
    assert_eq!(error.to_string(), "`PJRT_Compile` failed: bad");
    assert!(!error.is_plugin_setup());
}

/// An element-wise `maximum` and a 2-wide max-pool window over `[NaN, 1, 2, 3]`.
const MAX_WITH_NAN: &str = r#"
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<2xf32>) {
  %m = stablehlo.maximum %x, %y : tensor<4xf32>
  %init = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %w = "stablehlo.reduce_window"(%x, %init) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %r = stablehlo.maximum %a, %b : tensor<f32>
      stablehlo.return %r : tensor<f32>
  }) {window_dimensions = array<i64: 2>, window_strides = array<i64: 2>} : (tensor<4xf32>, tensor<f32>) -> tensor<2xf32>
  return %m, %w : tensor<4xf32>, tensor<2xf32>
}
"#;

/// CPU executables are compiled so that `maximum` propagates NaN, as StableHLO says and torch
/// computes; XLA:CPU's default lets the number win, which the emitter then had to guard.
#[test]
fn cpu_options_make_maximum_propagate_nan() {
    let client = client();
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let x = client.buffer_from_host(&f32s(&[f32::NAN, 1.0, 2.0, 3.0]), ElementType::F32, &[4]).expect("x");
    let y = client.buffer_from_host(&f32s(&[5.0, f32::NAN, 1.0, 1.0]), ElementType::F32, &[4]).expect("y");
    let run = |options: &CompileOptions| -> Vec<Vec<f32>> {
        let exe = client.compile(MAX_WITH_NAN.as_bytes(), options).expect("compile");
        let outputs = exe.execute(&[&x, &y]).expect("execute");
        outputs
            .iter()
            .map(|o| {
                o.to_host()
                    .expect("to_host")
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            })
            .collect()
    };
    let nan = |v: &[f32]| v.iter().map(|x| x.is_nan()).collect::<Vec<bool>>();
    let with = run(&CompileOptions::cpu());
    assert_eq!(nan(&with[0]), [true, true, false, false], "maximum: {:?}", with[0]);
    assert_eq!(with[0][2..], [2.0, 3.0]);
    assert_eq!(nan(&with[1]), [true, false], "max-pool window: {:?}", with[1]);
    assert_eq!(with[1][1], 3.0);
    // What XLA:CPU does without the option (why the option is set): a number wins somewhere.
    let without = run(&CompileOptions::single_device());
    assert!(nan(&without[0]).iter().chain(&nan(&without[1])).filter(|&&n| n).count() < 3, "{without:?}");
}
