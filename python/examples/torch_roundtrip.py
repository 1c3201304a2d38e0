"""The package with torch (not needed by the package or its tests; run it where torch is
installed, e.g. the generator's venv):

    python python/examples/torch_roundtrip.py

Compiles ExportedPrograms straight from Python, calls them with torch tensors (bf16 too), and
generates with the test decoder from a torch prompt, checking each against eager."""

import os
import tempfile
from pathlib import Path

import numpy as np
import torch

import torchtpu_compile as ttc

MODELS = Path(__file__).resolve().parents[2] / "testdata" / "models"


class TwoOutputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).relu(), x.sum()


class ToBf16(torch.nn.Module):
    def forward(self, x):
        return (x * 2).to(torch.bfloat16) + 1


def main():
    out = tempfile.mkdtemp()
    model, x = TwoOutputs().eval(), torch.randn(3, 8)
    art = os.path.join(out, "two.tpuexe")
    ttc.compile(torch.export.export(model, (x,)), art, targets="cpu", quiet=True)
    with ttc.load(art) as session:
        y, total = session(x)
        assert isinstance(y, torch.Tensor) and torch.allclose(y, model(x)[0], atol=1e-5)
        assert torch.allclose(total, x.sum(), atol=1e-5)
        assert isinstance(session(x.numpy())[0], np.ndarray)

    xb = torch.randn(2, 3).to(torch.bfloat16)
    art = os.path.join(out, "bf16.tpuexe")
    ttc.compile(torch.export.export(ToBf16(), (xb,)), art, targets="cpu", quiet=True)
    with ttc.load(art) as session:
        got = session(xb)
        assert got.dtype == torch.bfloat16 and torch.equal(got, ToBf16()(xb))

    art = os.path.join(out, "decoder.tpuexe")
    ttc.compile(MODELS / "decoder_kv.pt2", art, targets="cpu", quiet=True)
    done = ttc.generate(art, torch.tensor([[5, 9, 3, 17, 42, 8]]), 24)
    assert isinstance(done.tokens, torch.Tensor)
    assert done.tokens.tolist() == np.load(MODELS / "decoder_kv" / "tokens.npy").tolist()
    print(f"torch round trip: ok ({done.tokens_per_second:.0f} tokens/s)")


if __name__ == "__main__":
    main()
