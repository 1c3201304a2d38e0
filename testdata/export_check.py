"""`python -m torchtpu_compile.export` on several transformers architectures, each checked end to
end: a tiny random model of the architecture saved as a model folder, exported by the command
(slots, static caches, a prefill chunk), compiled by `torchtpu-compile compile` with its buckets,
and its requests decoded by `torchtpu-compile generate` (prompts of different lengths sharing
the slots) — every request's tokens equal to transformers' own greedy `generate` of it alone.

Needs torch and transformers (the test-data environment) and a built compiler:

    PYTHONPATH=python ~/.cache/torchtpu-compile/testdata-venv/bin/python testdata/export_check.py \\
        --compiler target/release/torchtpu-compile [--only llama,qwen2] [--keep DIR]

Prints a line per architecture and exits non-zero if any differs or fails. Not run by CI (CI
never needs torch); its figures go in docs/serving.md.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from torchtpu_compile.export import export

SLOTS, MAX_LEN, CHUNK, NEW = 4, 48, 8, 12
PROMPTS = [[5, 9, 3, 17, 42, 8], [7, 1], [33, 2, 90, 14, 3, 61, 22, 8, 9, 10, 11], [12, 4, 4]]


def tiny(kind):
    """A tiny random model of the architecture `kind`."""
    import transformers as t

    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16, vocab_size=128, max_position_embeddings=64)
    if kind == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(**common))
    if kind == "qwen2":
        return t.Qwen2ForCausalLM(t.Qwen2Config(**common))
    if kind == "gemma":
        return t.GemmaForCausalLM(t.GemmaConfig(**common))
    if kind == "qwen3_moe":
        cfg = t.Qwen3MoeConfig(**common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                               decoder_sparse_step=1)
        return t.Qwen3MoeForCausalLM(cfg)
    if kind == "mixtral":
        return t.MixtralForCausalLM(t.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2))
    if kind == "t5":
        cfg = t.T5Config(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                         decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        model = t.T5ForConditionalGeneration(cfg)
        # As initialized, T5 generates its pad token only: move every weight by seeded noise.
        g = torch.Generator().manual_seed(77)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
        return model
    raise ValueError(kind)


KINDS = ["llama", "qwen2", "gemma", "qwen3_moe", "mixtral", "t5"]


def reference(model):
    """transformers' greedy `generate` of each prompt alone, `NEW` tokens whatever they are: the
    model's EOS does not stop it (as `torchtpu-compile generate` without `--eos`), and is not
    suppressed either."""
    model.generation_config.eos_token_id = None
    rows = []
    with torch.no_grad():
        for p in PROMPTS:
            out = model.generate(torch.tensor([p]), max_new_tokens=NEW, do_sample=False)
            # A decoder-only model's output starts with its prompt; an encoder–decoder model's
            # with the decoder's start token.
            rows.append(out[0, 1 if model.config.is_encoder_decoder else len(p):].tolist())
    return rows


def check_seq2seq(model, folder, compiler, work):
    """An encoder–decoder model: exported as two programs, each prompt decoded alone by
    `generate --encoder` (the decoder step has one row)."""
    expected = reference(model)
    pt2 = os.path.join(work, "t5.pt2")
    encoder_pt2, decoder_pt2 = export(folder, pt2, max_len=MAX_LEN)
    arts = []
    for path in (encoder_pt2, decoder_pt2):
        arts.append(path[:-4] + ".tpuexe")
        subprocess.run([compiler, "compile", path, "-o", arts[-1], "--target", "cpu", "-q"], check=True)
    got = []
    for i, p in enumerate(PROMPTS):
        prompt, tokens = (os.path.join(work, f"t5_{name}_{i}.npy") for name in ("prompt", "tokens"))
        np.save(prompt, np.array([p], dtype=np.int64))
        start = str(model.config.decoder_start_token_id)
        subprocess.run([compiler, "generate", arts[1], "--encoder", arts[0], "--start-token", start, "--prompt",
                        prompt, "--max-new-tokens", str(NEW), "--out", tokens], check=True, stdout=subprocess.DEVNULL)
        got.append(np.load(tokens)[0].tolist())
    return got == expected, got, expected


def check(kind, compiler, work):
    torch.manual_seed(0)
    folder = os.path.join(work, kind)
    model = tiny(kind).eval()
    model.save_pretrained(folder)
    if model.config.is_encoder_decoder:
        return check_seq2seq(model, folder, compiler, work)
    expected = reference(model)
    pt2 = os.path.join(work, f"{kind}.pt2")
    export(folder, pt2, slots=SLOTS, max_len=MAX_LEN, prefill_chunk=CHUNK)
    art = os.path.join(work, f"{kind}.tpuexe")
    subprocess.run([compiler, "compile", pt2, "-o", art, "--target", "cpu", "-q"], check=True)
    width = max(len(p) for p in PROMPTS)
    prompts = os.path.join(work, f"{kind}_prompts.npy")
    np.save(prompts, np.array([p + [-1] * (width - len(p)) for p in PROMPTS], dtype=np.int64))
    tokens = os.path.join(work, f"{kind}_tokens.npy")
    subprocess.run([compiler, "generate", art, "--prompt", prompts, "--max-new-tokens", str(NEW),
                    "--out", tokens], check=True, stdout=subprocess.DEVNULL)
    got = np.load(tokens).tolist()
    return got == expected, got, expected


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--only", help="comma-separated kinds: " + ",".join(KINDS))
    ap.add_argument("--keep", help="a folder to keep the models and artifacts in")
    args = ap.parse_args()
    kinds = args.only.split(",") if args.only else KINDS
    work = args.keep or tempfile.mkdtemp(prefix="export-check-")
    os.makedirs(work, exist_ok=True)
    failed = 0
    for kind in kinds:
        try:
            same, got, expected = check(kind, os.path.abspath(args.compiler), work)
        except Exception as e:  # noqa: BLE001 - one line per architecture
            print(f"{kind}: FAILED {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
            failed += 1
            continue
        how = "one at a time, encoder and decoder step" if kind == "t5" else \
            f"{SLOTS} slots, prefill chunks of up to {CHUNK}"
        print(f"{kind}: {'equal' if same else 'DIFFERENT'} ({len(PROMPTS)} requests x {NEW} tokens, {how})")
        if not same:
            print(f"  got      {got}\n  expected {expected}")
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
