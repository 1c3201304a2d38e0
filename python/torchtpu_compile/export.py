"""A transformers causal LM exported as the decode step ``serve`` wants, in one command::

    python -m torchtpu_compile.export MODEL_DIR -o model.pt2 --slots 4 --max-len 512 \\
        [--prefill-chunk 64] [--dtype bf16]
    torchtpu-compile compile model.pt2 -o model.tpuexe --tokenizer MODEL_DIR
    torchtpu-compile serve model.tpuexe

or, from Python, ``export(model_or_dir, "model.pt2", slots=4, max_len=512)``.

The program is transformers' own static-cache recipe (``TorchExportableModuleWithStaticCache``,
what ``convert_and_export_with_cache`` uses), set up as ``serve`` takes it: ``(input_ids [slots,
T], cache_position [T]) -> logits [slots, T, vocab]``, the key/value caches of ``max_len``
positions for ``slots`` rows kept as buffers the step updates in place, decomposed to Core ATen.
``T`` is 1 (one token a call), or with ``prefill_chunk`` a dynamic size from 1 to the chunk, so
that a prompt is fed a chunk a call (``compile`` makes one executable per size bucket). The
rows share one position per call: ``serve`` starts requests together and feeds shorter prompts
while longer ones are still read.

An encoder–decoder model (T5, BART: ``config.is_encoder_decoder``) goes through transformers'
seq2seq recipe instead: ``OUT`` is its decoder step (one token a call over the encoder's states,
self-attention caches of ``max_len`` positions) and ``OUT`` with ``.encoder.pt2`` for ``.pt2``
its encoder (a prompt of 1 to ``max_len`` tokens); ``serve OUT.tpuexe --encoder
ENCODER.tpuexe`` serves them one request at a time.

A model transformers' recipe does not support is refused with transformers' own reason. Needs
``torch`` and ``transformers``, which the rest of the package does not.
"""

import argparse
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

DTYPES = ("f32", "bf16", "f16")


class ExportError(Exception):
    """The model cannot be exported this way; the message says why, in transformers' words where
    the reason is theirs."""


def decode_step(model, slots: int, max_len: int, prefill_chunk: int = 1) -> Tuple[Any, tuple, Optional[Dict]]:
    """The module to export, its example arguments and its dynamic shapes: transformers' static-
    cache recipe around ``model`` (a ``PreTrainedModel`` in eval mode) for ``slots`` rows of
    ``max_len`` positions, taking up to ``prefill_chunk`` tokens a call."""
    import torch
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    if slots < 1:
        raise ExportError(f"--slots must be at least 1, not {slots}")
    if prefill_chunk < 1:
        raise ExportError(f"--prefill-chunk must be at least 1, not {prefill_chunk}")
    limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    if max_len < 2 or (limit is not None and max_len > limit):
        raise ExportError(f"--max-len must be from 2 to the model's max_position_embeddings ({limit}), not {max_len}")
    if prefill_chunk > max_len:
        raise ExportError(f"--prefill-chunk {prefill_chunk} is longer than --max-len {max_len}")
    generation = model.generation_config
    generation.use_cache = True
    generation.cache_implementation = "static"
    generation.cache_config = {"batch_size": slots, "max_cache_len": max_len, "device": "cpu"}

    class DecodeStep(torch.nn.Module):
        """(input_ids [slots, T], cache_position [T]) -> logits [slots, T, vocab]."""

        def __init__(self):
            super().__init__()
            self.step = TorchExportableModuleWithStaticCache(model, batch_size=slots, max_cache_len=max_len)

        def forward(self, input_ids, cache_position):
            return self.step(input_ids=input_ids, cache_position=cache_position)

    tokens = 2 if prefill_chunk > 1 else 1
    args = (torch.zeros((slots, tokens), dtype=torch.long), torch.arange(tokens))
    shapes = None
    if prefill_chunk > 1:
        t = torch.export.Dim("tokens", min=1, max=prefill_chunk)
        shapes = {"input_ids": {1: t}, "cache_position": {0: t}}
    return DecodeStep().eval(), args, shapes


def seq2seq_steps(model, max_len: int):
    """The encoder and the decoder step of an encoder–decoder ``model`` (T5, BART), as
    transformers' seq2seq recipe writes them, each with its example arguments and dynamic
    shapes: the encoder takes a prompt of 1 to ``max_len`` tokens, the decoder step one token a
    call over the encoder's states, its self-attention caches of ``max_len`` positions."""
    import torch
    from transformers.integrations.executorch import (
        Seq2SeqLMDecoderExportableModuleWithStaticCache,
        Seq2SeqLMEncoderExportableModule,
    )

    if max_len < 2:
        raise ExportError(f"--max-len must be at least 2, not {max_len}")
    source = torch.export.Dim("source", min=1, max=max_len)
    encoder = Seq2SeqLMEncoderExportableModule(model.get_encoder()).eval()
    ids = torch.zeros((1, 2), dtype=torch.long)
    with torch.no_grad():
        states = encoder(ids)
    decoder = Seq2SeqLMDecoderExportableModuleWithStaticCache(model, max_static_cache_length=max_len, batch_size=1)
    return (
        (encoder, (ids,), {"input_ids": {1: source}}),
        (decoder.eval(), (torch.zeros((1, 1), dtype=torch.long), states, torch.zeros(1, dtype=torch.long)),
         {"decoder_input_ids": None, "encoder_hidden_states": {1: source}, "cache_position": None}),
    )


def encoder_path(out) -> str:
    """Where the encoder of an encoder–decoder model goes: beside ``out``, ``.encoder.pt2``."""
    out = os.fspath(out)
    stem = out[:-4] if out.endswith(".pt2") else out
    return stem + ".encoder.pt2"


def load(model, dtype: Optional[str] = None):
    """``model`` (a folder or a Hub name, or a ``PreTrainedModel``) in eval mode, in ``dtype``."""
    import torch

    torch_dtype = {None: None, "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    if isinstance(model, (str, os.PathLike)):
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

        path = os.fspath(model)
        seq2seq = getattr(AutoConfig.from_pretrained(path), "is_encoder_decoder", False)
        auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
        model = auto.from_pretrained(path, dtype=torch_dtype or "auto")
    elif torch_dtype is not None:
        model = model.to(torch_dtype)
    return model.eval()


def export(model, out, *, max_len: int, slots: int = 1, prefill_chunk: int = 1,
           dtype: Optional[str] = None) -> List[str]:
    """Writes the decode step of ``model`` (a folder, a Hub name or a ``PreTrainedModel``) to the
    ``.pt2`` ``out``, and an encoder–decoder model's encoder beside it (see the module docs);
    returns the paths written, the encoder first. Raises ``ExportError``."""
    import torch

    if dtype not in (None, *DTYPES):
        raise ExportError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype}")
    try:
        model = load(model, dtype)
    except ImportError:
        raise
    except Exception as e:  # noqa: BLE001 - transformers' reason, said once
        raise ExportError(f"cannot load it: {_first_line(e)}") from e
    seq2seq = getattr(model.config, "is_encoder_decoder", False)
    if seq2seq and (slots != 1 or prefill_chunk != 1):
        raise ExportError("an encoder–decoder model is served one request at a time: --slots 1, --prefill-chunk 1")
    recipe = "seq2seq" if seq2seq else "static-cache"
    try:
        if seq2seq:
            parts = list(zip((encoder_path(out), os.fspath(out)), seq2seq_steps(model, max_len)))
        else:
            parts = [(os.fspath(out), decode_step(model, slots, max_len, prefill_chunk))]
        exported = []
        for path, (module, args, shapes) in parts:
            with torch.no_grad():
                exported.append((path, torch.export.export(module, args, dynamic_shapes=shapes, strict=True)))
    except ExportError:
        raise
    except Exception as e:  # noqa: BLE001 - transformers' and torch's reasons, said once
        raise ExportError(f"transformers' {recipe} recipe cannot export it: {_first_line(e)}") from e
    try:
        programs = [(path, program.run_decompositions()) for path, program in exported]
    except Exception as e:  # noqa: BLE001 - torch's reason, said once
        raise ExportError(f"it exports, but torch cannot decompose it to Core ATen: {_first_line(e)}") from e
    for path, program in programs:
        torch.export.save(program, path)
    return [path for path, _ in programs]


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchtpu_compile.export",
        description="Export a transformers causal LM as the decode step `torchtpu-compile serve` wants "
                    "(transformers' static-cache recipe, decomposed to Core ATen).")
    parser.add_argument("model", help="a model folder (save_pretrained's) or a Hub name")
    parser.add_argument("-o", "--output", required=True, help="the .pt2 to write")
    parser.add_argument("--slots", type=int, default=1, help="requests served at once (the batch); default 1")
    parser.add_argument("--max-len", type=int, required=True,
                        help="positions the caches hold, prompt and answer (their memory grows with it)")
    parser.add_argument("--prefill-chunk", type=int, default=1,
                        help="the most prompt tokens one call takes (a dynamic size; compile buckets it); "
                             "default 1, one token a call")
    parser.add_argument("--dtype", choices=DTYPES, help="the weights' and caches' dtype; default the model's")
    args = parser.parse_args(argv)
    try:
        paths = export(args.model, args.output, slots=args.slots, max_len=args.max_len,
                       prefill_chunk=args.prefill_chunk, dtype=args.dtype)
    except ExportError as e:
        print(f"error: cannot export `{args.model}`: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(f"error: exporting needs torch and transformers: {e}", file=sys.stderr)
        return 1
    if len(paths) == 2:
        print(f"wrote {paths[1]} (the decoder step) and {paths[0]} (its encoder): compile each, then "
              f"`torchtpu-compile serve DECODER.tpuexe --encoder ENCODER.tpuexe`")
    else:
        print(f"wrote {paths[0]}: `torchtpu-compile compile {paths[0]} -o MODEL.tpuexe --tokenizer MODEL_DIR`, "
              f"then `torchtpu-compile serve MODEL.tpuexe`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
