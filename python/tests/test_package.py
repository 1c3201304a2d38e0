"""The Python package against the bundled test models (numpy only; no torch): compile from a
path, load, call, compare with PyTorch's outputs, state across calls, generate, inspect, the
console script, and the errors at the boundary."""

import importlib.util
import inspect
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import torchtpu_compile as ttc

MODELS = Path(__file__).resolve().parents[2] / "testdata" / "models"


def reference(model: str, name: str) -> np.ndarray:
    return np.load(MODELS / model / name)


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """Compiles a test model for the CPU once per run; its artifact's path."""
    out = tmp_path_factory.mktemp("artifacts")
    done = {}

    def compile_model(model: str, **options) -> Path:
        if model not in done:
            path = out / f"{model}.tpuexe"
            ttc.compile(MODELS / f"{model}.pt2", path, targets=["cpu"], quiet=True, **options)
            done[model] = path
        return done[model]

    return compile_model


def test_compile_returns_the_manifest(tmp_path):
    manifest = ttc.compile(MODELS / "mlp.pt2", tmp_path / "mlp.tpuexe", targets="cpu", quiet=True)
    assert [t["target"] for t in manifest["targets"]] == ["cpu"]
    assert manifest == ttc.inspect(tmp_path / "mlp.tpuexe")
    assert manifest["signature"]["inputs"][0]["dtype"] == "f32"


def test_a_call_gives_pytorchs_outputs(compiled):
    with ttc.load(compiled("mlp")) as model:
        out = model(reference("mlp", "in_0.npy"))
        assert isinstance(out, np.ndarray)
        np.testing.assert_allclose(out, reference("mlp", "out_0.npy"), rtol=1e-4, atol=1e-5)
        # The weights stay loaded: a second call gives the same.
        np.testing.assert_array_equal(model(reference("mlp", "in_0.npy")), out)


def test_several_outputs_come_as_a_tuple(compiled):
    with ttc.load(compiled("multi_out")) as model:
        inputs = [reference("multi_out", f"in_{i}.npy") for i in range(len(model.inputs))]
        outs = model(*inputs)
        assert isinstance(outs, tuple) and len(outs) > 1
        for j, out in enumerate(outs):
            np.testing.assert_allclose(out, reference("multi_out", f"out_{j}.npy"), rtol=1e-4, atol=1e-5)


def test_buckets_serve_every_size_in_range(compiled):
    art = compiled("cnn_dynbatch", buckets="auto:3")
    with ttc.load(art) as model:
        for case in ["", "_case1", "_case2", "_case3"]:
            x = reference("cnn_dynbatch", f"in_0{case}.npy")
            want = reference("cnn_dynbatch", f"out_0{case}.npy")
            np.testing.assert_allclose(model(x), want, rtol=1e-4, atol=1e-4)
        with pytest.raises(ttc.InputError, match="outside the sizes this artifact serves"):
            model(np.zeros((17, 3, 32, 32), np.float32))


def test_state_stays_on_the_device_across_calls(compiled):
    inputs = [reference("train_cnn", f"in_{i}.npy") for i in range(2)]
    with ttc.load(compiled("train_cnn")) as model:
        steps = []
        for _ in range(3):
            model(*inputs)
            steps.append(int(model.state()["bn.num_batches_tracked"]))
        assert steps == [1, 2, 3]
        model.reset()
        assert int(model.state()["bn.num_batches_tracked"]) == 0
        loss = model(*inputs)[0]
        np.testing.assert_allclose(loss, reference("train_cnn", "out_0.npy"), rtol=1e-4, atol=1e-5)
        model.set_state({"bn.num_batches_tracked": np.array(41, np.int64)})
        model(*inputs)
        assert int(model.state()["bn.num_batches_tracked"]) == 42
        with pytest.raises(ttc.InputError, match=r"has shape \[\], the value given has \[2\]"):
            model.set_state({"bn.num_batches_tracked": np.zeros(2, np.int64)})
        with pytest.raises(ttc.InputError, match="updates no weight `fc.bias_typo`"):
            model.set_state({"fc.bias_typo": np.zeros(2, np.float32)})


def test_encoder_decoder_generation_equals_transformers_generate(compiled):
    """T5 as transformers' seq2seq export recipe writes it: the encoder's session once, this
    decoder step's per token, gives transformers' greedy `generate` for a prompt of a bucket's
    size and one its bucket pads."""
    encoder, decoder = compiled("t5_gen_encoder"), compiled("t5_gen_decoder")
    with ttc.load(encoder) as enc, ttc.load(decoder) as dec:
        for suffix in ("", "_short"):
            prompt = reference("t5_gen_decoder", f"prompt{suffix}.npy")
            out = dec.generate(prompt, 12, encoder=enc)
            np.testing.assert_array_equal(out.tokens, reference("t5_gen_decoder", f"tokens{suffix}.npy"))
            assert out.new_tokens == 12 and out.prompt_calls == 1
        # Greedy: each row of logits has its token as the largest value.
        np.testing.assert_array_equal(out.logits.argmax(-1), out.tokens)
        assert dec.generate(prompt, 12, encoder=enc, logits=False).logits is None
        with pytest.raises(ttc.InputError, match="the encoder is this decoder's own session"):
            dec.generate(prompt, 2, encoder=dec)
        # An `eos` ends it there, kept.
        eos = int(out.tokens[0, 3])
        stopped = dec.generate(prompt, 12, encoder=enc, eos=eos).tokens
        first = list(out.tokens[0]).index(eos)
        np.testing.assert_array_equal(stopped[0], out.tokens[0, : first + 1])


def test_generate_reproduces_eager_decoding(compiled):
    art = compiled("decoder_kv")
    prompt = reference("decoder_kv", "prompt.npy")
    with ttc.load(art) as decoder:
        out = decoder.generate(prompt, max_new_tokens=24)
        np.testing.assert_array_equal(out.tokens, reference("decoder_kv", "tokens.npy"))
        np.testing.assert_allclose(out.logits, reference("decoder_kv", "logits.npy"), rtol=1e-3, atol=1e-4)
        assert out.prompt_tokens == prompt.shape[-1] and out.new_tokens == 24 and out.tokens_per_second > 0
        # The step takes 1 to 64 tokens: the prompt went in one call.
        assert out.prompt_calls == 1
        # Each generate starts from the artifact's caches: the same tokens again, and without
        # logits when they are not asked for.
        again = decoder.generate(prompt, max_new_tokens=24, logits=False)
        np.testing.assert_array_equal(again.tokens, out.tokens)
        assert again.logits is None
        # The same seed samples the same tokens.
        a = decoder.generate(prompt, max_new_tokens=8, temperature=0.8, seed=7).tokens
        b = decoder.generate(prompt, max_new_tokens=8, temperature=0.8, seed=7).tokens
        np.testing.assert_array_equal(a, b)
        with pytest.raises(ttc.InputError, match="need 66 positions; the caches hold 64"):
            decoder.generate(prompt, max_new_tokens=60)
    np.testing.assert_array_equal(ttc.generate(art, prompt, 24).tokens, out.tokens)


def test_a_session_swaps_to_another_checkpoint(compiled):
    prompt = reference("decoder_kv", "prompt.npy")
    with ttc.load(compiled("decoder_kv")) as decoder:
        decoder.swap_weights(MODELS / "decoder_kv_tuned.pt2")
        tokens = decoder.generate(prompt, max_new_tokens=24).tokens
        np.testing.assert_array_equal(tokens, reference("decoder_kv_tuned", "tokens.npy"))
        with pytest.raises(ttc.UnsupportedError, match="is not a checkpoint of this artifact"):
            decoder.swap_weights(MODELS / "mlp.pt2")
        np.testing.assert_array_equal(decoder.generate(prompt, max_new_tokens=24).tokens, tokens)


def test_calls_from_threads_are_run_one_at_a_time(compiled):
    x = reference("mlp", "in_0.npy")
    with ttc.load(compiled("mlp")) as model:
        want = model(x)
        results = []
        threads = [threading.Thread(target=lambda: results.append(model(x))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 4
        for r in results:
            np.testing.assert_array_equal(r, want)


def test_wrong_inputs_are_refused(compiled):
    x = reference("mlp", "in_0.npy")
    with ttc.load(compiled("mlp")) as model:
        with pytest.raises(ttc.InputError, match=r"expected 1 input\(s\)"):
            model(x, x)
        with pytest.raises(ttc.InputError, match="expected dtype f32, got dtype f64"):
            model(x.astype(np.float64))
        with pytest.raises(ttc.InputError, match="expected shape"):
            model(x[:, :-1])
        with pytest.raises(ttc.InputError, match="dtype object"):
            model(np.array(["a"], dtype=object))
        # InputError is also a ValueError.
        with pytest.raises(ValueError):
            model()


def test_a_closed_session_refuses_use(compiled):
    model = ttc.load(compiled("mlp"))
    model.close()
    assert model.closed
    with pytest.raises(ttc.SessionClosedError, match="is closed"):
        model(reference("mlp", "in_0.npy"))
    with pytest.raises(ttc.SessionClosedError):
        model.state()
    model.close()  # closing twice is harmless


def test_errors_carry_the_tools_messages(tmp_path, compiled):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip archive")
    with pytest.raises(ttc.ArchiveError, match="bad.pt2"):
        ttc.compile(bad, tmp_path / "bad.tpuexe", targets="cpu", quiet=True)
    with pytest.raises(ttc.UsageError, match="--target"):
        ttc.compile(MODELS / "mlp.pt2", tmp_path / "x.tpuexe", targets="tpu:v99", quiet=True)
    with pytest.raises(TypeError, match="no_such_option"):
        ttc.compile(MODELS / "mlp.pt2", tmp_path / "x.tpuexe", no_such_option=1)
    with pytest.raises(ttc.UsageError, match="--no-no-such-pass"):
        ttc.compile(MODELS / "mlp.pt2", tmp_path / "x.tpuexe", skip=["no_such_pass"], quiet=True)
    with pytest.raises(ttc.ArtifactError, match="missing.tpuexe"):
        ttc.load(tmp_path / "missing.tpuexe")
    with pytest.raises(ttc.UnsupportedError, match="give `cpu` or `tpu`"):
        ttc.load(compiled("mlp"), device="gpu")
    with pytest.raises(ttc.InputError, match="not a decode step"):
        ttc.generate(compiled("mlp"), np.array([1, 2]), 2)
    for error in [ttc.ArchiveError, ttc.PluginError, ttc.InputError, ttc.SessionClosedError]:
        assert issubclass(error, ttc.TorchTpuError)


def test_the_tpu_device_needs_a_tpu(compiled):
    has_tpu = any(n.startswith("accel") for n in os.listdir("/dev")) or (
        os.path.isdir("/dev/vfio") and any(n.isdigit() for n in os.listdir("/dev/vfio"))
    )
    assert not has_tpu, "this test is written for machines without a TPU"
    with pytest.raises(ttc.PluginError, match="this machine has no TPU"):
        ttc.load(compiled("mlp"), device="tpu")


def test_the_console_script_is_the_tool(compiled):
    script = Path(sys.executable).parent / "torchtpu-compile"
    done = subprocess.run([script, "inspect", compiled("mlp")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "cpu" in done.stdout
    done = subprocess.run([script, "run", compiled("mlp")], capture_output=True, text=True)
    assert done.returncode == 1 and "expected 1 input(s)" in done.stderr


def test_compile_keywords_follow_the_command_line():
    flags = set(ttc._native.command_flags("compile"))
    assert "--target" in flags and "--pad-multiple" in flags, flags
    skipped = {f for f in flags if f.startswith("--no-") and f != "--no-cache"}
    # Flags the binding sets itself; and `compile` always writes an artifact (it returns its
    # manifest), so the command line's cache-only share of a compile is not a keyword.
    binding = {"--output", "--format", "--cache-only", "--only-bucket", "--only-target"}
    assert set(ttc._COMPILE_FLAGS.values()) | skipped | binding == flags
    keywords = set(inspect.signature(ttc.compile).parameters)
    assert keywords == {"src", "out", "skip", "isolate"} | set(ttc._COMPILE_FLAGS)


def test_skipped_passes_and_options_reach_the_compiler(tmp_path):
    out = tmp_path / "mlp.tpuexe"
    manifest = ttc.compile(MODELS / "mlp.pt2", out, targets="cpu", skip=["cse", "dce"], pad_multiple=0, quiet=True)
    ran = set(manifest["options"]["passes"])
    assert ran and "cse" not in ran and "dce" not in ran, ran


def test_check_and_inspect_read_an_archive():
    report = ttc.check(MODELS / "mlp.pt2")
    assert report["ok"] and report["problems"] == []
    bad = ttc.check(MODELS.parent / "check" / "unsupported_ops.pt2")
    assert not bad["ok"] and bad["problems"][0]["target"] == "testlib.scale_rows.default"
    described = ttc.inspect(MODELS / "mlp.pt2")
    assert described["kind"] == "pt2" and described["parameters"]["tensors"] > 0


def test_a_plugin_that_crashes_raises_instead_of_ending_the_process(tmp_path):
    # A plugin that dereferences null when loaded: XLA's side of the process dies, not ours.
    source = tmp_path / "crash.c"
    source.write_text("void *GetPjrtApi(void) { *(volatile int *)0 = 1; return 0; }\n")
    plugin = tmp_path / "libcrash.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", plugin, source], check=True)
    out = tmp_path / "x.tpuexe"
    with pytest.raises(ttc.CompileError, match=r"died \(signal SIGSEGV\) while compiling `cpu \[main\]`"):
        ttc.compile(MODELS / "mlp.pt2", out, targets="cpu", plugin=plugin, no_cache=True, quiet=True)
    assert not out.exists()
    # The failures the compiler reports itself keep their classes through the child.
    with pytest.raises(ttc.UsageError, match="--target"):
        ttc.compile(MODELS / "mlp.pt2", out, targets="tpu:v99", quiet=True)


def damaged_copies(artifact: Path, n: int, folder: Path):
    """Copies of ``artifact``, each with one byte inverted, at ``n - 1`` places spread over it."""
    data = artifact.read_bytes()
    for k in range(1, n):
        at = k * len(data) // n
        damaged = bytearray(data)
        damaged[at] ^= 0xFF
        path = folder / f"{artifact.stem}-damaged-{at}.tpuexe"
        path.write_bytes(bytes(damaged))
        yield path


def test_a_damaged_artifact_is_refused_at_load_or_harmless(tmp_path, compiled):
    # Bytes flipped across the artifact (headers, executable, weights, manifest, directory):
    # `load` and the call refuse it with an ArtifactError-like TorchTpuError, or give eager's.
    refused = 0
    for path in damaged_copies(compiled("mlp"), 40, tmp_path):
        try:
            with ttc.load(path) as model:
                out = model(reference("mlp", "in_0.npy"))
        except ttc.TorchTpuError as e:
            assert str(e), f"byte {at}: an empty message"
            refused += 1
            continue
        np.testing.assert_allclose(out, reference("mlp", "out_0.npy"), rtol=1e-4, atol=1e-5)
    assert refused > 30, f"only {refused} of 39 damaged artifacts refused"


def test_generate_on_a_damaged_artifact_is_refused_or_harmless(tmp_path, compiled):
    prompt, tokens = reference("decoder_kv", "prompt.npy"), reference("decoder_kv", "tokens.npy")
    refused = 0
    for path in damaged_copies(compiled("decoder_kv"), 12, tmp_path):
        try:
            out = ttc.generate(path, prompt, 24)
        except ttc.TorchTpuError:
            refused += 1
            continue
        np.testing.assert_array_equal(out.tokens, tokens)
    assert refused > 8, f"only {refused} of 11 damaged artifacts refused"


def test_the_export_command_explains_itself_and_what_it_needs(tmp_path):
    """`python -m torchtpu_compile.export` teaches its options without torch, and a model it
    cannot use gets one line in the tool's words: without torch, that exporting needs it; with
    torch, that the model cannot be loaded."""
    help_text = subprocess.run([sys.executable, "-m", "torchtpu_compile.export", "--help"],
                               capture_output=True, text=True, check=True).stdout
    for flag in ("--slots", "--max-len", "--prefill-chunk", "--dtype", "-o"):
        assert flag in help_text, help_text
    done = subprocess.run([sys.executable, "-m", "torchtpu_compile.export", str(tmp_path / "nowhere"),
                           "-o", str(tmp_path / "m.pt2"), "--max-len", "64"], capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    if importlib.util.find_spec("torch") is None:
        assert "exporting needs torch and transformers" in done.stderr, done.stderr
    else:
        assert f"cannot export `{tmp_path / 'nowhere'}`: cannot load it" in done.stderr, done.stderr
    assert not (tmp_path / "m.pt2").exists()


def test_every_error_kind_has_its_class():
    """The kinds `Error::kind` gives (src/error.rs) each map to their own exception class; a
    bug in the compiler is an InternalError, not an UnsupportedError."""
    from torchtpu_compile import errors

    source = (Path(__file__).resolve().parents[2] / "src/error.rs").read_text()
    kinds = set(re.findall(r'=> "(\w+)"', source))
    assert {"internal", "unsupported", "input", "lowering"} <= kinds, kinds
    for kind in kinds:
        assert type(errors.of_kind(kind, "m")) is not ttc.TorchTpuError, kind
    assert isinstance(errors.of_kind("internal", "m"), ttc.InternalError)
    assert not isinstance(errors.of_kind("internal", "m"), ttc.UnsupportedError)
