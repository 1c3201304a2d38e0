"""`cargo xtask bench serve`'s transformers side (run in the set-up folder's testdata venv).

    python xtask/serve_bench.py export DIR SLOTS MAX_LEN
        GPT-2 small (GPT2Config defaults, 124 M parameters, f32, seeded random weights) saved
        to DIR/gpt2_124m_hf (save_pretrained) and exported by `torchtpu_compile.export` as the
        decode step `serve` takes: DIR/gpt2_124m_decode.pt2, SLOTS rows of MAX_LEN positions.
    python xtask/serve_bench.py generate MODEL_DIR PROMPTS_JSON TOKENS BATCH
        The same prompts through transformers' batched greedy `generate`, BATCH at a time (left
        padded), TOKENS new tokens each; prints JSON: the seconds in `generate` and the tokens.
"""

import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def export_module():
    """`python/torchtpu_compile/export.py`, loaded on its own: the package's native part is not
    needed (nor built) for it."""
    spec = importlib.util.spec_from_file_location("tc_export", ROOT / "python/torchtpu_compile/export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export(out: Path, slots: int, max_len: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    model.save_pretrained(out / "gpt2_124m_hf")
    export_module().export(model, out / "gpt2_124m_decode.pt2", slots=slots, max_len=max_len)


def generate(model_dir: Path, prompts, tokens: int, batch: int):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    # Every request runs to its length, as `serve` runs them without a stop token.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    answers, seconds = [], 0.0
    for start in range(0, len(prompts), batch):
        group = prompts[start:start + batch]
        width = max(len(p) for p in group)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in group])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group])
        started = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, do_sample=False)
        seconds += time.perf_counter() - started
        answers.extend(row[width:].tolist() for row in out)
    print(json.dumps({"seconds": seconds, "tokens": answers}))


def main(argv):
    if argv[:1] == ["export"] and len(argv) == 4:
        export(Path(argv[1]), int(argv[2]), int(argv[3]))
    elif argv[:1] == ["generate"] and len(argv) == 5:
        generate(Path(argv[1]), json.loads(Path(argv[2]).read_text()), int(argv[3]), int(argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
