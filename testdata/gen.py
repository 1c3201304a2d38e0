#!/usr/bin/env python3
"""Generate the reference .pt2 archives and reference data for torchtpu-compile.

Single source of truth for everything under testdata/models/.  Run with the
pinned venv (see testdata/README.md):

    python testdata/gen.py [--out testdata/models] [name ...]

For each model (random init, torch.manual_seed(0) before it is built, eval
mode, nothing downloaded):

    ep = torch.export.export(model, args, dynamic_shapes=...)
    ep = ep.run_decompositions()          # core ATen
    torch.export.save(ep, "<out>/<name>.pt2")
    torch.export.load(...).module()       # round-trip check against eager

and writes, in <out>/<name>/:

    in_<i>.npy, out_<i>.npy                 user inputs / eager outputs (user order)
    in_<i>_case<k>.npy, out_<i>_case<k>.npy extra sizes for dynamic models (k = 1, 2, ...)
    meta.json                               description, shapes, diffs, versions,
                                            and every tensor the archive carries
                                            (ep.state_dict + tensor ep.constants):
                                            dtype, shape, sha256 of its bytes

Models with `train=True` (train_mlp, train_cnn) are exported as one training step
instead: the forward (which returns the loss) is exported, then
torch.export.experimental._export_forward_backward turns it into the joint
forward+backward graph (core ATen), whose outputs are the new value of every buffer
the step updates (BUFFER_MUTATION; train_cnn's BatchNorm running stats), the loss
(LOSS_OUTPUT) and one gradient per parameter (GRADIENT_TO_PARAMETER).  See
generate_train.
"""
import argparse
import contextlib
import copy
import hashlib
import json
import os
import sys
import struct
import unittest.mock
import zipfile
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.export import Dim

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def tuned(model, seed=31):
    """Every parameter moved by seeded noise of a tenth of its spread, as a fine-tune moves it:
    the same program, other weights."""
    g = gen(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1 * p.std().clamp(min=1e-3))
    return model


def randomize_bn(model):
    """Random affine params and running stats, so a wrong BN shows up."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
    return model


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu1 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.relu2 = nn.ReLU()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(self.relu1(self.bn1(self.conv1(x))))
        x = self.relu2(self.bn2(self.conv2(x)))
        return self.fc(self.flatten(self.gap(x)))


class TinyUNet(nn.Module):
    """diffusers' UNet2DModel in miniature: GroupNorm and SiLU, two stride-2 downsamples, nearest
    2x upsamples each followed by a concatenation with the skip of the same size."""

    def __init__(self, ch=8):
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.down1 = nn.Conv2d(ch, 2 * ch, 3, stride=2, padding=1)
        self.norm1 = nn.GroupNorm(4, 2 * ch)
        self.down2 = nn.Conv2d(2 * ch, 2 * ch, 3, stride=2, padding=1)
        self.norm2 = nn.GroupNorm(4, 2 * ch)
        self.mid = nn.Conv2d(2 * ch, 2 * ch, 3, padding=1)
        self.up1 = nn.Conv2d(4 * ch, 2 * ch, 3, padding=1)
        self.norm3 = nn.GroupNorm(4, 2 * ch)
        self.up2 = nn.Conv2d(3 * ch, ch, 3, padding=1)
        self.conv_out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, x):
        silu = torch.nn.functional.silu
        up = lambda t: torch.nn.functional.interpolate(t, scale_factor=2.0, mode="nearest")
        h0 = silu(self.conv_in(x))
        h1 = silu(self.norm1(self.down1(h0)))
        h2 = silu(self.norm2(self.down2(h1)))
        m = silu(self.mid(h2)) + h2
        u1 = silu(self.norm3(self.up1(torch.cat([up(m), h1], 1))))
        u2 = silu(self.up2(torch.cat([up(u1), h0], 1)))
        return self.conv_out(u2)


class PastAttention(nn.Module):
    """GPT-2's attention block in a decode step with a dynamic past, as transformers' eager
    attention runs it over a DynamicCache: the new keys and values concatenated after the past
    ones, the causal mask cut from a lower-triangular buffer at the past's length, the
    extended caches returned."""

    def __init__(self, dim=16, heads=2, max_pos=64):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        causal = torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool)).view(1, 1, max_pos, max_pos)
        self.register_buffer("bias", causal, persistent=False)

    def forward(self, x, past_k, past_v):
        b, t, dim = x.shape
        split = lambda z: z.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        q, k, v = (split(z) for z in self.c_attn(x).split(dim, dim=2))
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        w = q @ k.transpose(-1, -2) / self.head_dim ** 0.5
        p, length = past_k.shape[2], past_k.shape[2] + t
        w = torch.where(self.bias[:, :, p:length, :length], w, torch.finfo(w.dtype).min)
        out = (w.softmax(-1) @ v).transpose(1, 2).reshape(b, t, dim)
        return self.c_proj(out), k, v


class ResNetMini(nn.Module):
    def __init__(self, widths=(8, 16, 32, 64), num_classes=10):
        super().__init__()
        from torchvision.models.resnet import BasicBlock, conv1x1, conv3x3

        self.conv1 = conv3x3(3, widths[0])
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            down = None
            if stride != 1 or cin != w:
                down = nn.Sequential(conv1x1(cin, w, stride), nn.BatchNorm2d(w))
            layers.append(BasicBlock(cin, w, stride=stride, downsample=down))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class LogitsWrapper(nn.Module):
    """forward(input_ids) -> logits, without a KV cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def build_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    # head_dim 64 (not hidden / heads = 16): the width real Llamas use, which the `pad` pass
    # widens to 128 head by head.
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=256,
                      max_position_embeddings=512, attn_implementation="sdpa")
    return LogitsWrapper(LlamaForCausalLM(cfg))


def build_llama_bf16():
    """The Llama architecture in bf16, as real checkpoints ship, small enough to commit: hidden
    32, 1 layer, 2 heads of 16, 1 kv head, vocab 128."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=128,
                      max_position_embeddings=64, attn_implementation="sdpa")
    return LogitsWrapper(LlamaForCausalLM(cfg)).to(torch.bfloat16)


def build_llama_1b_bf16():
    """Benchmark only: Llama-3.2-1B's shape (1.24 B parameters, tied embeddings) in bf16,
    randomly initialized."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                      max_position_embeddings=2048, rope_theta=500000.0, tie_word_embeddings=True,
                      attn_implementation="sdpa")
    return LogitsWrapper(LlamaForCausalLM(cfg).to(torch.bfloat16))


def build_llama_1b_long():
    """Benchmark only: Llama-3.2-1B's shape in bf16 for prompts of up to 32,768 tokens (its
    positions up to 32,768), built on the meta device and written as a sparse archive."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                      max_position_embeddings=32768, rope_theta=500000.0, tie_word_embeddings=True,
                      attn_implementation="sdpa")
    return LogitsWrapper(LlamaForCausalLM(cfg).to(torch.bfloat16))


def build_llama_8b_bf16():
    """Benchmark only: Llama-3.1-8B's shape (8.03 B parameters, untied LM head) in bf16. Built
    on the meta device and written as a sparse archive (`generate_sparse`): its weights are
    zeros that cost no disk."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                      max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    return LogitsWrapper(LlamaForCausalLM(cfg).to(torch.bfloat16))


def build_llama_70b_bf16():
    """Benchmark only: Llama-3.1-70B's shape (70.6 B parameters) in bf16, on the meta device,
    written as a sparse archive (140 GB of holes)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                      num_attention_heads=64, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                      max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    return LogitsWrapper(LlamaForCausalLM(cfg).to(torch.bfloat16))


def build_mixtral_8x7b_bf16():
    """Benchmark only: Mixtral-8x7B's shape (46.7 B parameters: 8 experts, top-2) in bf16, on
    the meta device, written as a sparse archive (93 GB of holes)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                        num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=8192,
                        attn_implementation="sdpa")
    return LogitsWrapper(MixtralForCausalLM(cfg).to(torch.bfloat16))


def build_gpt2_124m():
    """Benchmark only: GPT-2 small (124 M parameters, f32, tied LM head), randomly initialized."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return LogitsWrapper(GPT2LMHeadModel(GPT2Config()))


def build_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                     bos_token_id=0, eos_token_id=0)
    return LogitsWrapper(GPT2LMHeadModel(cfg))


def build_qwen3_moe():
    return qwen3_moe(hidden=64, layers=2, experts=4, top_k=2, expert_width=32)


def build_qwen3_moe_wide():
    """Benchmark only (not committed): one layer with 64 experts, top-8, expert width 256."""
    return qwen3_moe(hidden=512, layers=1, experts=64, top_k=8, expert_width=256)


def qwen3_moe(hidden, layers, experts, top_k, expert_width):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    # Every layer is a sparse-MoE layer (decoder_sparse_step 1), so intermediate_size (the
    # dense-MLP width) is unused. Experts are 3-D parameters: gate_up_proj f32[4, 64, 64],
    # down_proj f32[4, 64, 32]; experts_implementation "grouped_mm" is transformers' default.
    cfg = Qwen3MoeConfig(vocab_size=256, hidden_size=hidden, intermediate_size=hidden,
                         moe_intermediate_size=expert_width, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, num_experts=experts, num_experts_per_tok=top_k,
                         norm_topk_prob=True, decoder_sparse_step=1,
                         max_position_embeddings=128, attn_implementation="sdpa",
                         experts_implementation="grouped_mm")
    model = Qwen3MoeForCausalLM(cfg)
    assert model.config._experts_implementation == "grouped_mm", model.config._experts_implementation
    return LogitsWrapper(model)


@contextlib.contextmanager
def real_grouped_mm_under_export():
    """Export-only patch for moe_tiny. transformers 5.24's `_can_use_grouped_mm`
    (transformers/integrations/moe.py) refuses `torch._grouped_mm` when
    `is_torchdynamo_compiling()` is true and the expert weights are not bf16, and calls its
    custom op `transformers.grouped_mm_fallback` instead. Non-strict torch.export makes that
    call true, so an f32 export would hold the custom op, while eager on CPU (the reference)
    runs the real `aten._grouped_mm` kernel. For the duration of torch.export.export only,
    this makes that one check see "not compiling" (the name is used nowhere else in that
    module); the other checks of `_can_use_grouped_mm` still run. The graph then holds
    `aten._grouped_mm`, as an export with bf16 weights or on a TPU device does."""
    from transformers.integrations import moe

    assert callable(getattr(moe, "is_torchdynamo_compiling", None)), "transformers changed"
    with unittest.mock.patch.object(moe, "is_torchdynamo_compiling", lambda: False):
        yield


class SizeOutputs(nn.Module):
    """Returns Python numbers computed from sizes next to a tensor: export fixes them as
    constant outputs (`as_int`, `as_bool`, `as_float`)."""

    def forward(self, x):
        rows, cols = x.shape
        return x * 2, rows * cols, cols > 2, rows / 4


class BertMeanPool(nn.Module):
    """BERT encoder + attention-mask-weighted mean over the sequence."""

    def __init__(self):
        super().__init__()
        from transformers import BertConfig, BertModel

        cfg = BertConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=128,
                         max_position_embeddings=128)
        self.bert = BertModel(cfg, add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        h = out.last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp(min=1)


class KVAttention(nn.Module):
    """gpt-fast-style attention: static K/V caches as buffers updated in place with
    `index_copy_` at the step's positions, SDPA over the whole cache with a causal mask row."""

    def __init__(self, dim, heads, max_seq):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_seq, self.d))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_seq, self.d))

    def forward(self, x, pos, mask):
        b, t, _ = x.shape
        q, k, v = self.wqkv(x).split(self.h * self.d, dim=-1)
        q, k, v = (z.view(b, t, self.h, self.d).transpose(1, 2) for z in (q, k, v))
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(b, t, self.h * self.d))


class KVBlock(nn.Module):
    def __init__(self, dim, heads, max_seq):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn = KVAttention(dim, heads, max_seq)
        self.up, self.down = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x, pos, mask):
        x = x + self.attn(self.n1(x), pos, mask)
        return x + self.down(F.silu(self.up(self.n2(x))))


class DecoderKV(nn.Module):
    """A decode step as gpt-fast writes it: (token ids [1, 1], position [1]) -> logits, the
    KV caches of 64 positions updated in place."""

    def __init__(self, vocab=64, dim=32, heads=2, layers=2, max_seq=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(KVBlock(dim, heads, max_seq) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        causal = torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, input_ids, input_pos):
        mask = self.causal[input_pos].view(1, 1, input_ids.shape[1], -1)
        x = self.emb(input_ids)
        for block in self.blocks:
            x = block(x, input_pos, mask)
        return self.head(self.norm(x))


def decode_reference(model, d, new_tokens=24):
    """Eager greedy decoding from zeroed caches, the prompt fed token by token, as
    `torchtpu-compile generate` does: prompt.npy [1, T], tokens.npy [1, N], logits.npy [1, N, V]
    (the logits that chose each token)."""
    model = copy.deepcopy(model)
    for block in model.blocks:
        block.attn.k_cache.zero_()
        block.attn.v_cache.zero_()
    prompt = torch.tensor([[5, 9, 3, 17, 42, 8]])
    t = prompt.shape[1]
    tokens, logits = [], []
    with torch.no_grad():
        nxt = prompt[:, :1]
        for p in range(t + new_tokens - 1):
            out = model(nxt, torch.tensor([p]))
            if p + 1 < t:
                nxt = prompt[:, p + 1:p + 2]
                continue
            logits.append(out[:, -1])
            nxt = out[:, -1].argmax(-1, keepdim=True)
            tokens.append(nxt)
    np.save(os.path.join(d, "prompt.npy"), prompt.numpy())
    np.save(os.path.join(d, "tokens.npy"), torch.cat(tokens, 1).numpy())
    np.save(os.path.join(d, "logits.npy"), torch.stack(logits, 1).numpy())
    return {"prompt": prompt.tolist(), "tokens": torch.cat(tokens, 1).tolist()}


class RowsAttention(nn.Module):
    """Attention over static K/V caches `[B, S, H, D]` with a position per row: row b writes its
    one token at `input_pos[b]` and reads the positions up to it, as a server's slots do when
    each holds a request of its own length."""

    def __init__(self, dim, heads, max_seq, batch):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.register_buffer("k_cache", torch.zeros(batch, max_seq, heads, self.d), persistent=False)
        self.register_buffer("v_cache", torch.zeros(batch, max_seq, heads, self.d), persistent=False)

    def forward(self, x, pos, mask):
        b, t = x.shape[0], x.shape[1]
        q, k, v = self.wqkv(x).split(self.h * self.d, dim=-1)
        if pos.dim() == 1:  # one token a row
            rows, k, v = torch.arange(b), k.view(b, self.h, self.d), v.view(b, self.h, self.d)
        else:  # [B, T]: T tokens a row, at their own positions
            rows, k, v = torch.arange(b).view(b, 1), k.view(b, t, self.h, self.d), v.view(b, t, self.h, self.d)
        self.k_cache[rows, pos] = k
        self.v_cache[rows, pos] = v
        q = q.view(b, t, self.h, self.d).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, self.k_cache.transpose(1, 2), self.v_cache.transpose(1, 2),
                                           attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(b, t, self.h * self.d))


class RowsBlock(nn.Module):
    def __init__(self, dim, heads, max_seq, batch):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn = RowsAttention(dim, heads, max_seq, batch)
        self.up, self.down = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x, pos, mask):
        x = x + self.attn(self.n1(x), pos, mask)
        return x + self.down(F.silu(self.up(self.n2(x))))


class DecoderRows(nn.Module):
    """A decode step for a batch of requests at their own positions: (input_ids [B, 1],
    input_pos [B]) -> logits [B, 1, V]; each row's caches written at its position and read up
    to it (a causal mask row per position)."""

    def __init__(self, vocab=64, dim=32, heads=2, layers=2, max_seq=64, batch=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(RowsBlock(dim, heads, max_seq, batch) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        causal = torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, input_ids, input_pos):
        b, t = input_ids.shape
        mask = self.causal[input_pos].view(b, 1, t, -1)
        x = self.emb(input_ids)
        for block in self.blocks:
            x = block(x, input_pos, mask)
        return self.head(self.norm(x))


# Requests of different lengths for the batched decoders (ids < 64).
ROWS_PROMPTS = [[5, 9, 3, 17, 42, 8], [7, 1], [33, 2, 60, 14, 9, 9, 21, 40, 3], [12, 50, 6, 31],
                [8], [44, 19, 27], [61, 3, 3, 58, 11, 22, 7]]


def rows_decode_reference(model, d, new_tokens=16):
    """Each request of ROWS_PROMPTS decoded alone, greedily, by a batch-1 model with the same
    parameters, token by token: prompts.npy [R, Tmax] (padded with -1), lengths.npy [R],
    tokens.npy [R, N]: what a batched decode must give every row."""
    dtype = model.head.weight.dtype
    solo = DecoderRows(batch=1, max_seq=model.causal.shape[0]).to(dtype)
    solo.load_state_dict(model.state_dict())
    solo.eval()
    rows, logits = [], []
    with torch.no_grad():
        for prompt in ROWS_PROMPTS:
            for block in solo.blocks:
                block.attn.k_cache.zero_()
                block.attn.v_cache.zero_()
            out, nxt, new = None, prompt[0], []
            for p in range(len(prompt) + new_tokens - 1):
                out = solo(torch.tensor([[nxt]]), torch.tensor([p]))
                if p + 1 < len(prompt):
                    nxt = prompt[p + 1]
                    continue
                nxt = int(out[0, -1].argmax())
                new.append(nxt)
                logits.append(out[0, -1].float())
            rows.append(new)
    width = max(len(p) for p in ROWS_PROMPTS)
    prompts = np.array([p + [-1] * (width - len(p)) for p in ROWS_PROMPTS], dtype=np.int64)
    np.save(os.path.join(d, "prompts.npy"), prompts)
    np.save(os.path.join(d, "lengths.npy"), np.array([len(p) for p in ROWS_PROMPTS], dtype=np.int64))
    np.save(os.path.join(d, "tokens.npy"), np.array(rows, dtype=np.int64))
    if dtype != torch.float32:  # what a near tie is judged by
        np.save(os.path.join(d, "logits.npy"), torch.stack(logits).view(len(rows), new_tokens, -1).numpy())
    return {"prompts": ROWS_PROMPTS, "tokens": rows}


class HFStaticCacheStep(nn.Module):
    """A decode step exported the way transformers exports decoder-only LMs with a `StaticCache`
    (its own `TorchExportableModuleWithStaticCache`, as `convert_and_export_with_cache` uses):
    (input_ids [1, 1], cache_position [1]) -> logits, the per-layer key/value caches (and their
    length counters) non-persistent buffers updated in place. A one-layer Llama."""

    def __init__(self, hidden=32, layers=1, heads=2, kv_heads=1, vocab=128, cache_len=48, batch=1):
        super().__init__()
        from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
                          vocab_size=vocab, max_position_embeddings=max(64, cache_len),
                          attn_implementation="sdpa")
        model = LlamaForCausalLM(cfg).eval()
        model.generation_config = GenerationConfig(
            use_cache=True, cache_implementation="static",
            cache_config={"batch_size": batch, "max_cache_len": cache_len, "device": "cpu"})
        self.step = TorchExportableModuleWithStaticCache(model)

    def forward(self, input_ids, cache_position):
        return self.step(input_ids=input_ids, cache_position=cache_position)


# The prefill chunk of `hf_export_moe`, as the export command declares it.
EXPORT_T = Dim("tokens", min=1, max=8)


def torchtpu_export():
    """python/torchtpu_compile/export.py (`python -m torchtpu_compile.export`), loaded by its path:
    it needs torch and transformers only, not the package's native module."""
    import importlib.util

    path = os.path.join(HERE, "..", "python", "torchtpu_compile", "export.py")
    spec = importlib.util.spec_from_file_location("torchtpu_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_hf_export_moe():
    """A tiny Qwen3-MoE (f32: transformers' MoE calls its own `grouped_mm_fallback` op under
    export) wrapped by the export command's recipe: 4 slots, 48 positions, prompts fed in
    chunks of up to 8 tokens."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, vocab_size=128, max_position_embeddings=64,
                         num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1)
    module, _, _ = torchtpu_export().decode_step(Qwen3MoeForCausalLM(cfg).eval(), slots=4, max_len=48,
                                                 prefill_chunk=8)
    return module


def hf_rows_reference_without_eos(module, d, new_tokens=16):
    """`hf_rows_reference` with the model's EOS neither stopping nor suppressed: 16 tokens each,
    as `serve_all` decodes them."""
    module.step.model.generation_config.eos_token_id = None
    return hf_rows_reference(module, d, new_tokens)


def hf_decode_reference(module, d, new_tokens=24):
    """transformers' own greedy `generate` with a static cache (not the exported step): prompt.npy
    [1, T], tokens.npy [1, N] and logits.npy [1, N, V], the raw logits that chose each token."""
    prompt = torch.tensor([[5, 9, 3, 17, 42, 8]])
    with torch.no_grad():
        out = module.step.model.generate(prompt, max_new_tokens=new_tokens, do_sample=False,
                                         cache_implementation="static", output_logits=True,
                                         return_dict_in_generate=True)
    tokens = out.sequences[:, prompt.shape[1]:]
    np.save(os.path.join(d, "prompt.npy"), prompt.numpy())
    np.save(os.path.join(d, "tokens.npy"), tokens.numpy())
    np.save(os.path.join(d, "logits.npy"), torch.stack(out.logits, 1).numpy())
    return {"prompt": prompt.tolist(), "tokens": tokens.tolist()}


def hf_rows_reference(module, d, new_tokens=16):
    """transformers' own greedy `generate` with a static cache (batch 1) of each request of
    ROWS_PROMPTS alone: prompts.npy [R, Tmax] (padded with -1), tokens.npy [R, N]."""
    rows = []
    with torch.no_grad():
        for prompt in ROWS_PROMPTS:
            out = module.step.model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False,
                                             cache_implementation="static")
            rows.append(out[0, len(prompt):].tolist())
    width = max(len(p) for p in ROWS_PROMPTS)
    np.save(os.path.join(d, "prompts.npy"), np.array([p + [-1] * (width - len(p)) for p in ROWS_PROMPTS], dtype=np.int64))
    np.save(os.path.join(d, "tokens.npy"), np.array(rows, dtype=np.int64))
    return {"prompts": ROWS_PROMPTS, "tokens": rows}


class MultiOut(nn.Module):
    """Several outputs of different dtypes (f32, i64, bool, i64)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 4)

    def forward(self, x):
        y = self.fc(x)
        idx = torch.argmax(y, dim=-1)
        flag = y > 0
        count = (x > 0).sum(dim=1)
        return y, idx, flag, count


class EdgeCases(nn.Module):
    """Cases a weight reader must handle (see README)."""

    def __init__(self):
        super().__init__()
        # non-contiguous parameter: sizes [4, 8], strides [1, 4]
        self.w_t = nn.Parameter(torch.randn(8, 4).t())
        self.w_fp16 = nn.Parameter(torch.randn(8).half())
        self.w_bf16 = nn.Parameter(torch.randn(8).bfloat16())
        # persistent int64 buffer
        self.register_buffer("idx", torch.tensor([2, 0, 1], dtype=torch.int64))
        # non-persistent 0-d buffer -> constants config
        self.register_buffer("scale", torch.tensor(0.5), persistent=False)
        # two persistent buffers that are overlapping views of one storage
        base = torch.randn(20)
        self.register_buffer("view_a", base[0:8])
        self.register_buffer("view_b", base[4:12])

    def forward(self, x):  # x: f32[3, 4]
        h = x @ self.w_t  # [3, 8]
        h = h * self.w_fp16.float() + self.w_bf16.float()
        h = (h + self.view_a - self.view_b) * self.scale
        h = torch.index_select(h, 0, self.idx)
        c = torch.tensor([1.0, 2.0, 3.0, 4.0])  # lifted tensor constant
        y = x * c
        # -inf literals: row 2 fully masked -> softmax NaN, amax -inf
        rows = torch.arange(3).unsqueeze(-1)
        mask = (h < 0) | (rows == 2)
        masked = h.masked_fill(mask, float("-inf"))
        p = torch.softmax(masked, dim=-1)
        mx = masked.amax(dim=-1)
        return p, mx, y


class TrainMLP(nn.Module):
    """One training step: forward returns the MSE loss (mean) against `target`; the
    export turns it into forward + backward (see generate_train)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x, target):
        y = self.fc2(self.act(self.fc1(x)))
        return nn.functional.mse_loss(y, target, reduction="mean")


class TrainAttention(nn.Module):
    """One training step of causal self-attention (2 heads of 8 over 16 positions, q/k/v and
    output projections) written out as transformers' eager attention does (scores, causal
    mask, softmax, product with V; SDPA's CPU backward is no core ATen op): forward returns the
    MSE loss (mean) against `target`; the backward reads the attention's probabilities."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def forward(self, x, target):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * 8 ** -0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        y = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        y = self.out(y.transpose(1, 2).reshape(b, t, 16))
        return nn.functional.mse_loss(y, target, reduction="mean")


class TrainCNN(nn.Module):
    """One training step of a small CNN: forward returns the cross-entropy loss (mean)
    against integer `labels`; BatchNorm runs in train mode (batch statistics, running
    stats updated), so the joint graph also returns the new running stats."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x, labels):  # x: f32[4, 3, 8, 8], labels: i64[4] in [0, 5)
        y = self.fc(self.flatten(self.pool(self.relu(self.bn(self.conv(x))))))
        return nn.functional.cross_entropy(y, labels, reduction="mean")


class EffNetBlock(nn.Module):
    """EfficientNet-style MBConv block: stem conv3x3-BN-Hardswish (as in MobileNetV3), then
    1x1 expand (x4)-BN-SiLU, 3x3 depthwise-BN-SiLU, squeeze-excitation (global avg pool,
    1x1 reduce-SiLU, 1x1 expand-sigmoid, multiply), 1x1 project-BN, residual add; global
    avg pool, flatten, Linear to 10 classes."""

    def __init__(self, ch=16, expand=4, se_ratio=0.25, num_classes=10):
        super().__init__()
        mid = ch * expand
        sq = max(1, int(ch * se_ratio))
        self.stem = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(ch)
        self.stem_act = nn.Hardswish()
        self.expand = nn.Conv2d(ch, mid, 1, bias=False)
        self.expand_bn = nn.BatchNorm2d(mid)
        self.expand_act = nn.SiLU()
        self.dw = nn.Conv2d(mid, mid, 3, padding=1, groups=mid, bias=False)
        self.dw_bn = nn.BatchNorm2d(mid)
        self.dw_act = nn.SiLU()
        self.se_pool = nn.AdaptiveAvgPool2d(1)
        self.se_reduce = nn.Conv2d(mid, sq, 1)
        self.se_act = nn.SiLU()
        self.se_expand = nn.Conv2d(sq, mid, 1)
        self.se_gate = nn.Sigmoid()
        self.project = nn.Conv2d(mid, ch, 1, bias=False)
        self.project_bn = nn.BatchNorm2d(ch)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(ch, num_classes)

    def forward(self, x):  # x: f32[2, 16, 16, 16]
        x = self.stem_act(self.stem_bn(self.stem(x)))
        h = self.expand_act(self.expand_bn(self.expand(x)))
        h = self.dw_act(self.dw_bn(self.dw(h)))
        s = self.se_gate(self.se_expand(self.se_act(self.se_reduce(self.se_pool(h)))))
        h = h * s
        h = self.project_bn(self.project(h))
        x = x + h
        return self.fc(self.flatten(self.gap(x)))


def build_mobilenet_v2_tiny():
    from torchvision.models import mobilenet_v2

    return mobilenet_v2(weights=None, width_mult=0.25, num_classes=10)


class SizeFloats(nn.Module):
    """Returns Python floats computed from a dynamic size: export records them as symbolic
    float outputs (`n / 4`, `float(n) * 1.5`), known per size bucket."""

    def forward(self, x):
        n = x.shape[0]
        return x * 2, n / 4, n * 1.5 - 1


class SymScalars(nn.Module):
    """Sizes as operands of tensor arithmetic, as models scale by them: `x * s`, `x / (2s)`,
    `- len(y)`, `x * (s / 2)` (a symbolic float), `(y + s) * (s // 3)` on integers; as a
    fill value, `full((t,), s)`, `full_like(x, s)`, `masked_fill(m, s)`; as clamp bounds and a
    scattered value."""

    def forward(self, x, y):
        s = x.shape[1]
        index = (y[:1] % 2).view(1, 1).expand(2, 1)
        return (x * s + x / (s * 2) - y.shape[0], x * (s / 2), (y + s) * (s // 3), torch.full((y.shape[0],), s),
                (x * s).clamp(min=-s, max=s / 4), torch.scatter(x, 1, index, s), x.masked_fill(x > 0, s),
                torch.full_like(x, s))


class CondData(nn.Module):
    """A branch on data: `h.sum() > 0` picks a two-layer branch (its own weights) or a
    parameter-free one; both read the shared input projection."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 4)
    def forward(self, x):
        h = self.inp(x)
        def wide(h):
            return self.b(torch.relu(self.a(h)))
        def narrow(h):
            return torch.tanh(h[:, :4] * 2) - h[:, 4:8]
        return torch.cond(h.sum() > 0, wide, narrow, (h,))

class CondSize(nn.Module):
    """A branch on a size: sequences longer than 16 are mean-pooled, shorter ones max-pooled
    and scaled by their length (reductions over the dynamic dim inside each branch)."""
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
    def forward(self, x):
        h = self.proj(x)
        def long(h):
            return h.mean(dim=1)
        def short(h):
            return h.amax(dim=1) * h.shape[1]
        return torch.cond(h.shape[1] > 16, long, short, (h,))

class WhileRNN(nn.Module):
    """An RNN cell run `steps` times (a data-dependent trip count): h = tanh(W h + U x[i] + b)."""
    def __init__(self):
        super().__init__()
        self.w = nn.Linear(16, 16)
        self.u = nn.Linear(8, 16, bias=False)
    def forward(self, xs, h, steps):
        def cond(i, h):
            return i < steps
        def body(i, h):
            x = torch.index_select(xs, 0, i.reshape(1)).squeeze(0)
            return i + 1, torch.tanh(self.w(h) + self.u(x))
        i0 = torch.zeros((), dtype=torch.int64)
        return while_loop(cond, body, (i0, h))

class ScanRNN(nn.Module):
    """A GRU-style cell scanned over the sequence: the final state and every step's output."""
    def __init__(self):
        super().__init__()
        self.gates = nn.Linear(8 + 16, 32)
        self.cand = nn.Linear(8 + 16, 16)
        self.out = nn.Linear(16, 4)
    def forward(self, xs, h):  # xs [seq, batch, 8], h [batch, 16]
        def step(h, x):
            z, r = torch.sigmoid(self.gates(torch.cat([x, h], -1))).chunk(2, -1)
            c = torch.tanh(self.cand(torch.cat([x, r * h], -1)))
            h = (1 - z) * h + z * c
            return h, self.out(h)
        return scan(step, h, xs)

class CheckedItem(nn.Module):
    """A data-dependent number the program only asserts on, as XLM checks
    `lengths.max().item() <= slen`: export keeps `item()` and its `_assert_scalar`s."""

    def forward(self, x):
        n = (x > 0).sum().item()
        torch._check(n <= x.shape[0] * x.shape[1])
        return x * 2


class NonzeroGather(nn.Module):
    """`nonzero` with a data-dependent row count, its coordinates used to gather and returned."""

    def forward(self, x):  # x: f32[3, 4]
        idx = torch.nonzero(x > 0.5)
        vals = x[idx[:, 0], idx[:, 1]]
        return idx, vals * 2, vals.sum(), (x.abs() > 1).nonzero().shape[0] * x


class ItemSlice(nn.Module):
    """A count read with item() and bounded with torch._check, used as a size: the rows kept,
    a fill of that length."""

    def forward(self, x, n):  # x: f32[8, 4], n: i64[]
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= 8)
        y = x[:k]
        return y * 2, y.sum(0), torch.ones(k).cumsum(0) * k


class RepeatCounts(nn.Module):
    """repeat_interleave by counts from data, without `output_size`: a data-dependent length,
    bounded at export with torch._check."""

    def forward(self, x, r):  # x: f32[4, 3], r: i64[4]
        y = torch.repeat_interleave(x, r, dim=0)
        torch._check(y.shape[0] <= 16)
        z = torch.repeat_interleave(r)
        torch._check(z.shape[0] <= 16)
        return y * 2, y.sum(0), z


class PadCounts(nn.Module):
    """The rows a mask keeps (a data-dependent count), padded back to the full length, as Mochi's
    attention pads its text tokens: `pad` by `6 - count`, a view dropping nonzero's column."""

    def forward(self, x, mask):  # x: f32[6, 4], mask: bool[6]
        idx = mask.nonzero().view(-1)
        y = x[idx] * 2
        y = torch.nn.functional.pad(y, (0, 0, 0, x.shape[0] - y.shape[0]), value=-1.0)
        return y, y.sum(0)


class DualFFN(nn.Module):
    """HiggsAudio v2's dual FFN: the tokens a mask marks (ids below 32, its "audio" tokens) and the
    others each through their own MLP, gathered with `h[mask]` and written back with
    `out[mask] = ...` (index_put with a boolean mask and one row per true position: a count made by
    data). `h[~mask]` is taken twice, so torch asserts its two counts equal (`Eq(u3, u2)`)."""

    def __init__(self, vocab=128, d=16, h=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.audio = nn.Sequential(nn.Linear(d, h), nn.SiLU(), nn.Linear(h, d))
        self.text = nn.Sequential(nn.Linear(d, h), nn.SiLU(), nn.Linear(h, d))

    def forward(self, input_ids):
        h = self.emb(input_ids)
        audio = input_ids < 32
        out = h.clone()
        out[audio] = h[audio] + self.audio(h[audio])
        out[~audio] = h[~audio] + self.text(h[~audio])
        return out


class UniqueCounts(nn.Module):
    """`torch.unique` (sorted) with the inverse and the counts: a data-dependent count."""

    def forward(self, x):
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        return values * 2, inverse, counts


class NmsDecode(nn.Module):
    """Detection post-processing over a data-dependent count of candidates: the boxes that
    torchvision's `nms` keeps (IoU 0.5), in score order, scaled, with their scores."""

    def forward(self, boxes, scores):
        import torchvision

        keep = torchvision.ops.nms(boxes, scores, 0.5)
        return boxes[keep] * 2, scores[keep]


def nms_case(n, seed, scores="rand"):
    """`n` boxes of 1 to 21 pixels in a 30-pixel square (many overlap) and their scores:
    uniform, normal (negative ones too), two of them −inf, or all equal (ties)."""
    g = gen(seed)
    xy = torch.rand(n, 2, generator=g) * 30
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 20 + 1], 1)
    s = torch.randn(n, generator=g) if scores == "normal" else torch.rand(n, generator=g)
    if scores == "-inf":
        s[[1, n // 2]] = float("-inf")
    if scores == "ties":
        s[:] = 0.5
    return boxes, s


class MoEGather(nn.Module):
    """Token-choice MoE as transformers wrote Mixtral's block: per expert, `torch.where` finds its
    tokens (a data-dependent count), gathers them, and `index_add_` scatters the weighted results."""

    def __init__(self, d=8, h=16, e=4, k=2):
        super().__init__()
        self.k, self.e = k, e
        self.gate = nn.Linear(d, e, bias=False)
        self.w1 = nn.ModuleList(nn.Linear(d, h, bias=False) for _ in range(e))
        self.w2 = nn.ModuleList(nn.Linear(h, d, bias=False) for _ in range(e))

    def forward(self, x):  # x: f32[b, t, d]
        b, t, d = x.shape
        x = x.view(-1, d)
        w, sel = torch.topk(F.softmax(self.gate(x), dim=1), self.k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        mask = F.one_hot(sel, self.e).permute(2, 1, 0)
        for i in range(self.e):
            slot, token = torch.where(mask[i])
            y = self.w2[i](F.silu(self.w1[i](x[token]))) * w[token, slot, None]
            out.index_add_(0, token, y)
        return out.view(b, t, d)


class MoESplitCounts(nn.Module):
    """Token-choice MoE as JetMoE writes it: the tokens sorted by expert, split by per-expert
    counts read with `tolist()` (data-dependent sizes whose sum torch asserts), each piece through
    its expert, concatenated back and added to its tokens with `index_add`."""

    def __init__(self, d=8, h=16, e=4, k=2):
        super().__init__()
        self.k, self.e = k, e
        self.gate = nn.Linear(d, e, bias=False)
        self.w1 = nn.Parameter(torch.randn(e, d, h) / 3)
        self.w2 = nn.Parameter(torch.randn(e, h, d) / 4)

    def forward(self, x):  # x: f32[b, t, d]
        b, t, d = x.shape
        x = x.view(-1, d)
        w, sel = torch.topk(F.softmax(self.gate(x), dim=-1), self.k, dim=-1)
        flat = sel.view(-1)
        order = flat.argsort(stable=True)
        tokens = order // self.k
        counts = F.one_hot(flat, self.e).sum(0).tolist()
        pieces = x[tokens].split(counts, 0)
        outs = [F.silu(p @ self.w1[i]) @ self.w2[i] for i, p in enumerate(pieces)]
        y = torch.cat(outs, 0) * w.view(-1)[order, None]
        return torch.zeros_like(x).index_add(0, tokens, y).view(b, t, d)


class LastToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 4)

    def forward(self, x):  # x: f32[2, seq, 8]
        return self.proj(x)[:, -1]


class LongContext(nn.Module):
    """A one-layer encoder for long sequences: embedding, bidirectional attention (2 heads of 16,
    `scaled_dot_product_attention` without a mask), a residual, the mean over the sequence and a
    classifier. Its output is small at any length, so a 32,768-token reference costs little."""

    def __init__(self, vocab=128, d=32, heads=2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.head = nn.Linear(d, 4)

    def forward(self, input_ids):  # i64[1, seq]
        x = self.embed(input_ids)
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)
        return self.head((x + self.out(a)).mean(1))


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------
def gen(seed):
    return torch.Generator().manual_seed(seed)


# The pairs of sides the image models with a dynamic height and width are compared at (8..64,
# odd ones included), and how they are exported.
IMAGE_SIDES = ((32, 32), (8, 8), (9, 13), (17, 31), (33, 8), (64, 64), (47, 21), (12, 60))
IMAGE_SIDES_DYNAMIC = {"x": {2: Dim.AUTO(min=8, max=64), 3: Dim.AUTO(min=8, max=64)}}


def randn(shape, seed):
    return torch.randn(*shape, generator=gen(seed))


def ids(seq, seed, batch=1, vocab=256):
    return torch.randint(0, vocab, (batch, seq), generator=gen(seed), dtype=torch.int64)


def bert_inputs(seq, seed, batch=2):
    input_ids = ids(seq, seed, batch=batch)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    pad = min(5, seq - 1)  # last row (when batch > 1): last `pad` positions masked
    if batch > 1:
        mask[batch - 1, seq - pad:] = 0
    return (input_ids, mask)


# --- dynamic batch and sequence on every architecture (issue 30) -----------------------------
class HiddenWrapper(nn.Module):
    """forward(ids) -> last_hidden_state of an encoder or decoder stack."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).last_hidden_state


def build_mixtral_dyn():
    """A Mixtral-style MoE: the router flattens [batch, seq, hidden] to [batch*seq, hidden],
    softmax and topk over the experts, sorts the tokens by expert, grouped matmuls, and the
    inverse permutation."""
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_local_experts=4,
                        num_experts_per_tok=2, max_position_embeddings=64, attn_implementation="sdpa")
    return LogitsWrapper(MixtralForCausalLM(cfg))


class FNetLogits(nn.Module):
    """forward(input_ids) -> an FNet masked LM's logits."""

    def __init__(self):
        super().__init__()
        from transformers import FNetConfig, FNetForMaskedLM

        cfg = FNetConfig(vocab_size=32, hidden_size=24, intermediate_size=48, num_hidden_layers=2,
                         max_position_embeddings=64, use_tpu_fourier_optimizations=False)
        self.model = FNetForMaskedLM(cfg)

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).logits


def build_mla_dyn():
    """A DeepSeek-V3-style model: multi-head latent attention (the rope part written back
    into a slice of each head) and a MoE with a shared expert and group-limited routing."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = DeepseekV3Config(vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                           n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1,
                           topk_group=1, first_k_dense_replace=0, q_lora_rank=16, kv_lora_rank=16,
                           qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                           max_position_embeddings=64, attn_implementation="sdpa")
    return LogitsWrapper(DeepseekV3ForCausalLM(cfg))


def build_alibi_dyn():
    """A Bloom-style model: ALiBi biases built from `arange(seq)` and repeated `batch` times
    (`repeat` with a symbolic count), eager attention."""
    from transformers import BloomConfig, BloomForCausalLM

    return LogitsWrapper(BloomForCausalLM(BloomConfig(vocab_size=128, hidden_size=32, n_layer=1, n_head=2)))


class SwinClassifier(nn.Module):
    """SwinForImageClassification (image 32, patch 4, embed 16, 2 stages of 1 block, 1 and 2
    heads, window 4): window partitions written as `as_strided` with symbolic sizes in a
    dynamic batch, shifted windows (`roll`), patch merging; returns the logits."""

    def __init__(self):
        super().__init__()
        from transformers import SwinConfig, SwinForImageClassification

        cfg = SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4,
                         num_labels=4)
        self.model = SwinForImageClassification(cfg)

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).logits


def build_sink_dyn():
    """A GPT-OSS-style model: a learned attention sink per head concatenated after the scores
    (softmax over both, the sink sliced off), sliding-window and full layers, a MoE."""
    from transformers import GptOssConfig, GptOssForCausalLM

    cfg = GptOssConfig(vocab_size=128, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_local_experts=4,
                       num_experts_per_tok=2, sliding_window=8, max_position_embeddings=64,
                       attn_implementation="eager")
    return LogitsWrapper(GptOssForCausalLM(cfg))


def build_llama_1head_dyn():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1, head_dim=32, vocab_size=128, max_position_embeddings=64,
                      attn_implementation="sdpa")
    return LogitsWrapper(LlamaForCausalLM(cfg))


def build_mamba():
    """transformers' Mamba (v1) as exported without its CUDA kernels: the in projection cut into
    the SSM input and its gate, a causal depthwise conv, x_proj/dt_proj, the selective scan
    unrolled over the sequence, the out projection."""
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(vocab_size=128, hidden_size=32, state_size=16, num_hidden_layers=2, expand=2, conv_kernel=4,
                      time_step_rank=8)
    return LogitsWrapper(MambaForCausalLM(cfg))


def t5_config():
    from transformers import T5Config

    return T5Config(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_decoder_layers=1,
                    num_heads=2, decoder_start_token_id=0)


def build_t5_encoder_dyn():
    from transformers import T5EncoderModel

    return HiddenWrapper(T5EncoderModel(t5_config()))


def t5_full():
    """A T5 for conditional generation on t5_config (built first, so the same seed gives the
    same weights to the encoder and the decoder exported apart), every parameter moved by
    seeded noise of 0.5: as initialized, it generates the pad token only."""
    from transformers import T5ForConditionalGeneration

    model = T5ForConditionalGeneration(t5_config()).eval()
    g = gen(77)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    return model


def build_t5_gen_encoder():
    from transformers.integrations.executorch import Seq2SeqLMEncoderExportableModule

    return Seq2SeqLMEncoderExportableModule(t5_full().get_encoder())


def build_t5_gen_decoder():
    from transformers.integrations.executorch import Seq2SeqLMDecoderExportableModuleWithStaticCache

    return Seq2SeqLMDecoderExportableModuleWithStaticCache(t5_full(), max_static_cache_length=32, batch_size=1)


def whisper_full():
    """A tiny Whisper (80 → 8 mel bins, 32 frames → 16 encoder positions, vocab 128, start token
    1, no suppressed tokens), every parameter moved by seeded noise of 0.5 (as initialized it
    repeats one token): built first, so the same seed gives the encoder and the decoder
    exported apart the same weights."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(vocab_size=128, num_mel_bins=8, encoder_layers=1, decoder_layers=1, d_model=32,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                        decoder_ffn_dim=64, max_source_positions=16, max_target_positions=32,
                        decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        suppress_tokens=None, begin_suppress_tokens=None)
    model = WhisperForConditionalGeneration(cfg).eval()
    g = gen(78)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    return model


class WhisperEncoderStep(nn.Module):
    """Whisper's encoder as a serving stack exports it: log-mel features [1, mels, frames] ->
    states [1, frames / 2, d_model] (transformers' seq2seq recipe wraps encoders that take
    token ids; Whisper's takes features)."""

    def __init__(self):
        super().__init__()
        self.encoder = whisper_full().get_encoder()

    def forward(self, input_features):
        return self.encoder(input_features=input_features).last_hidden_state


def build_whisper_gen_decoder():
    """transformers' seq2seq recipe's decoder step over the same Whisper: the recipe reads the
    output projection as `lm_head`, which Whisper names `proj_out`."""
    from transformers.integrations.executorch import Seq2SeqLMDecoderExportableModuleWithStaticCache

    model = whisper_full()
    model.lm_head = model.proj_out
    return Seq2SeqLMDecoderExportableModuleWithStaticCache(model, max_static_cache_length=32, batch_size=1)


def whisper_generate_reference(_module, d, new_tokens=12):
    """Greedy decoding by the whole eager Whisper (same seed) from the start token, one token a
    call over the whole sequence so far, for seeded features (features.npy [1, 8, 32],
    tokens.npy [1, N])."""
    torch.manual_seed(0)
    model = whisper_full()
    features = randn((1, 8, 32), 790)
    ids = torch.tensor([[1]])
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(input_features=features, decoder_input_ids=ids).logits
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    tokens = ids[:, 1:]
    np.save(os.path.join(d, "features.npy"), features.numpy())
    np.save(os.path.join(d, "tokens.npy"), tokens.numpy())
    return {"tokens": tokens.tolist()}


def t5_generate_reference(_module, d, new_tokens=12):
    """transformers' own greedy `generate` of the same T5 (same seed) for two prompts: 8 tokens
    (prompt.npy [1, 8], tokens.npy [1, N], after the decoder start token 0) and 5
    (prompt_short.npy, tokens_short.npy: a size its bucket of 8 pads)."""
    torch.manual_seed(0)
    model = t5_full()
    done = {}
    for suffix, prompt in (("", [[5, 9, 3, 17, 42, 8, 61, 22]]), ("_short", [[44, 19, 27, 3, 90]])):
        prompt = torch.tensor(prompt)
        with torch.no_grad():
            out = model.generate(input_ids=prompt, max_new_tokens=new_tokens, do_sample=False)
        tokens = out[:, 1:]
        assert tokens.shape[1] == new_tokens, f"generation stopped early: {tokens.tolist()}"
        np.save(os.path.join(d, f"prompt{suffix}.npy"), prompt.numpy())
        np.save(os.path.join(d, f"tokens{suffix}.npy"), tokens.numpy())
        done[f"tokens{suffix}"] = tokens.tolist()
    return done


class T5DecoderStep(nn.Module):
    """T5's decoder stack over decoder ids and the encoder's states, both of dynamic length."""

    def __init__(self):
        super().__init__()
        from transformers import T5ForConditionalGeneration

        self.model = T5ForConditionalGeneration(t5_config())

    def forward(self, decoder_input_ids, encoder_hidden_states):
        out = self.model.decoder(input_ids=decoder_input_ids, encoder_hidden_states=encoder_hidden_states)
        return self.model.lm_head(out.last_hidden_state)


class CausalConv(nn.Module):
    """Mamba-style: a depthwise Conv1d along the sequence padded by kernel - 1 on both sides,
    sliced back to the sequence's length (causal), SiLU, projections in and out."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.conv = nn.Conv1d(16, 16, 4, groups=16, padding=3)
        self.out = nn.Linear(16, 8)

    def forward(self, x):  # x: f32[batch, seq, 8]
        h = self.inp(x).transpose(1, 2)
        h = self.conv(h)[..., :x.shape[1]]
        return self.out(F.silu(h).transpose(1, 2))


class PadCNN(nn.Module):
    """A CNN that pads its images with F.pad (constant_pad_nd): right and bottom before a
    stride-2 conv, all sides with 0.5 before the next."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2)
        self.c2 = nn.Conv2d(8, 8, 3)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = F.relu(self.c1(F.pad(x, (0, 1, 0, 1))))
        x = F.relu(self.c2(F.pad(x, (1, 1, 1, 1), value=0.5)))
        return self.fc(x.mean((2, 3)))


class LogMel(nn.Module):
    """A log-mel spectrogram as audio front ends compute it: `torch.stft` (reflect-padded frames,
    a Hann window, `_fft_r2c`), the power `|X|**2` of the complex spectrum, a mel matrix, log."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(64))
        self.register_buffer("mel", torch.rand(33, 16, generator=gen(40)))

    def forward(self, x):
        spec = torch.stft(x, n_fft=64, hop_length=16, window=self.window, center=True, return_complex=True)
        power = spec.abs() ** 2
        return torch.log(power.transpose(1, 2) @ self.mel + 1e-6)


class MetaRopeAttention(nn.Module):
    """Causal self-attention with rotary embeddings as Meta's reference Llama and gpt-fast write
    them: `freqs_cis` a complex64 buffer (`polar`, not persistent), each head's pairs viewed as
    complex numbers (`view_as_complex`), multiplied by the rotations of their positions, viewed
    back as reals (`view_as_real`)."""

    def __init__(self, dim=32, heads=2, max_seq=64):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        freqs = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(max_seq).float(), freqs)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)

    def rotate(self, x, freqs_cis):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis).flatten(3).type_as(x)

    def forward(self, x):
        b, s, _ = x.shape
        split = lambda t: t.view(b, s, self.heads, self.head_dim)
        freqs_cis = self.freqs_cis[:s].view(1, s, 1, self.head_dim // 2)
        q, k = self.rotate(split(self.wq(x)), freqs_cis), self.rotate(split(self.wk(x)), freqs_cis)
        v = split(self.wv(x))
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class GridSample(nn.Module):
    """`F.grid_sample` (bilinear, zeros padding) of x [b, 3, 8, 8] at grid [b, 5, 5, 2]: each
    batch element sampled at its own grid."""

    def forward(self, x, grid):
        return F.grid_sample(x, grid, align_corners=False)


class PositionsAfterPast(nn.Module):
    """`arange(past, past + t)`: the positions of t new tokens after a past of a dynamic length,
    added to them (the start of the arange a symbolic size)."""

    def forward(self, x, past):
        pos = torch.arange(past.shape[1], past.shape[1] + x.shape[1])
        return x + pos[None, :, None].float()


class RowsAtSizes(nn.Module):
    """Rows picked at indices that are sizes (`select` at a symbolic index): the last position
    of a dynamic length and its middle (`x[:, n - 1]`, `x[:, n // 2]`), and a fixed table's
    row `n - 1` and row `-n` (counted from the end)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(12, 4, generator=torch.Generator().manual_seed(2600)))

    def forward(self, x):
        n = x.shape[1]
        last, middle = x[:, n - 1] * 2, x[:, n // 2] + 1
        return last + self.table[n - 1], middle * self.table[-n]


class RowsOfCount(nn.Module):
    """The rows a mask picks (a count from data, at most 8) merged with the dim after them:
    `x[idx]` is [u0, 16, 64], viewed as [16*u0, 64] and summed."""

    def forward(self, x, mask):
        idx = mask.nonzero()[:, 0]
        torch._check(idx.shape[0] <= 8)
        return x[idx].reshape(-1, 64).sum(0)


class Guarded(nn.Module):
    """Two branches on a size: the export keeps the one its example took and records the other's
    condition as a guard (`L['x'].size()[1] != 16`)."""

    def forward(self, x):
        return x * 2 if x.shape[1] == 16 else x + 1


class SizeMinMax(nn.Module):
    """Sizes through Python's `min` and `max` (a window of at most 16 positions, at least 8):
    the export writes `torch.sym_min` and `torch.sym_max` nodes, their values `Min(16, s)` and
    `Max(8, s)`, used as numbers and as `arange` ends."""

    def forward(self, x):
        k = min(x.shape[1], 16)
        w = max(x.shape[1], 8)
        return x.sum(1) * k + x.mean(1) * w + torch.arange(k).sum() + torch.arange(w).float().mean()


class WindowPad(nn.Module):
    """Swin's window partition of an image of any size: its height and width padded to whole
    windows of 4 (`(4 - h % 4) % 4`, with 0.25), each window's mean taken out, the windows put
    back and cropped; and a row padded to 16 positions, centred (`max(16 - w, 0) // 2` before):
    pads whose amounts are sizes."""

    def forward(self, x):
        b, h, w, c = x.shape
        y = F.pad(x, (0, 0, 0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4), value=0.25)
        hp, wp = y.shape[1], y.shape[2]
        win = y.view(b, hp // 4, 4, wp // 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, c)
        win = win - win.mean(1, keepdim=True)
        y = win.view(b, hp // 4, wp // 4, 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
        p = max(16 - w, 0)
        row = F.pad(x[:, 0], (0, 0, p // 2, p - p // 2), value=-1.0)
        return y[:, :h, :w, :] * 2, row + 1


class PooledCnn(nn.Module):
    """DenseNet's transitions on an image of any size: conv, BN and ReLU, then average pools
    that cut the sides in half (2x2, stride 2; and 3x3, stride 2, padding 1, the padding
    counted as torch does by default), a global average and a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool1 = nn.AvgPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 1)
        self.pool2 = nn.AvgPool2d(3, stride=2, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.conv2(x)))
        return self.fc(x.mean((2, 3))), x


class ResizedHead(nn.Module):
    """A segmentation head on an image of any size (torchvision's FCN and DeepLab): a stride-2
    and a stride-4 feature map resized back to the input's height and width (bilinear,
    `size=`), a bilinear 2x by a factor with `align_corners`, and a nearest resize by size."""

    def __init__(self):
        super().__init__()
        self.down2 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.down4 = nn.Conv2d(4, 4, 3, stride=2, padding=1)

    def forward(self, x):
        h, w = x.shape[-2:]
        a = F.relu(self.down2(x))
        b = F.relu(self.down4(a))
        up_a = F.interpolate(a, size=(h, w), mode="bilinear", align_corners=False)
        up_b = F.interpolate(b, size=(h, w), mode="bilinear", align_corners=False)
        twice = F.interpolate(b, scale_factor=2.0, mode="bilinear", align_corners=True)
        nearest = F.interpolate(b, size=(h, w), mode="nearest")
        return up_a + up_b + nearest, twice


class ResizedTable(nn.Module):
    """A learned table resized to the input's height and width (a position table interpolated
    to an image's grid): bilinear and nearest, the table fixed at 4 x 4."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(7)))

    def forward(self, x):
        h, w = x.shape[-2:]
        smooth = F.interpolate(self.table, size=(h, w), mode="bilinear", align_corners=False)
        return x + smooth + F.interpolate(self.table, size=(h, w), mode="nearest")


class CrossAttention(nn.Module):
    """A decoder's cross-attention over encoder states, each with a length of its own:
    queries from x [b, t, 16], keys and values from memory [b, s, 16], two heads."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(16, 16) for _ in range(4))

    def forward(self, x, memory):
        b, t, _ = x.shape
        s = memory.shape[1]
        heads = lambda y, n: y.view(b, n, 2, 8).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(x), t), heads(self.k(memory), s), heads(self.v(memory), s)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.o(o.transpose(1, 2).reshape(b, t, 16))


def edge_pairs(seqs, batches):
    """(batch, seq) pairs: every seq listed, the batches cycled through."""
    return [(batches[i % len(batches)], s) for i, s in enumerate(seqs)]


def dynamic_lm(build, desc, seed, **extra):
    """A causal LM exported with a dynamic batch and sequence, its reference cases at 1, every
    pow2 bucket edge and edge - 1 (ids below 128, `seed + seq` for each)."""
    inputs = [(ids(s, seed + s, batch=b, vocab=128),) for b, s in edge_pairs(EDGE_SEQS, EDGE_BATCHES)]
    return dict(build=build, desc=desc, inputs=inputs, dynamic_shapes={"input_ids": {0: BATCH, 1: DYN_SEQ}},
                lean_metadata=True, **extra)


# pow2 buckets of seq in [1, 64] and batch in [1, 8]: sizes 1, every edge and every edge - 1
EDGE_SEQS = [16, 1, 2, 3, 4, 7, 8, 15, 31, 32, 63, 64, 40]
EDGE_BATCHES = [2, 1, 3, 4, 7, 8]
DYN_SEQ = Dim("seq", min=1, max=64)


SEQ = Dim("seq", min=2, max=512)
BERT_SEQ = Dim("seq", min=2, max=128)
BERT2_SEQ = Dim("seq", min=2, max=64)
BATCH = Dim("batch", min=1, max=8)
CNN_BATCH = Dim("batch", min=1, max=16)
# Tokens a decode step takes: 1 to decode, more to prefill (decoder_kv).
DECODE_T = Dim("T", min=1, max=64)
# The tokens a call of decoder_rows_prefill takes.
ROWS_T = Dim("T", min=1, max=16)
# The tokens a call of gpt_fast_long (a bench model) takes.
LONG_T = Dim("T", min=1, max=32768)
# The candidate boxes of nms_dyn.
NMS_BOXES = Dim("boxes", min=2, max=64)

# What decoder_rows_prefill and its bf16 copy are exported with and checked against.
ROWS_PREFILL = dict(
    inputs=[(torch.tensor([[5, 9, 3], [7, 1, 0], [33, 2, 60], [12, 50, 6]]),
             torch.tensor([[0, 1, 2], [4, 5, 6], [1, 2, 3], [9, 10, 11]]))],
    dynamic_shapes={"input_ids": {1: ROWS_T}, "input_pos": {1: ROWS_T}},
    lean_metadata=True,
    decode=rows_decode_reference)

# name -> dict(build, desc, inputs: list of arg tuples (base first), dynamic_shapes)
MODELS = {
    "mlp": dict(
        build=MLP,
        desc="Linear(16,32)-ReLU-Linear(32,8)",
        inputs=[(randn((4, 16), 1),)]),
    "cnn": dict(
        build=lambda: randomize_bn(CNN()),
        desc="Conv2d(3,8,3,p1)-BN-ReLU-MaxPool2d(2)-Conv2d(8,16,3,p1)-BN-ReLU-"
             "AdaptiveAvgPool2d(1)-Flatten-Linear(16,10); BN stats randomized",
        inputs=[(randn((2, 3, 32, 32), 2),)]),
    "cnn_dynbatch": dict(
        state_dict_of="cnn",
        build=lambda: randomize_bn(CNN()),
        desc="cnn (same weights) with dynamic batch Dim('batch', min=1, max=16) on x's dim 0; "
             "the base case is cnn's input (batch 2)",
        inputs=[(randn((2, 3, 32, 32), 2),)]
        + [(randn((b, 3, 32, 32), 50 + b),) for b in (1, 3, 5, 9, 16)],
        dynamic_shapes={"x": {0: CNN_BATCH}}),
    "resnet_mini": dict(
        build=lambda: randomize_bn(ResNetMini()),
        desc="mini ResNet from torchvision BasicBlock: conv3x3-BN-ReLU-maxpool(3,2,1), "
             "4 stages x 1 BasicBlock (widths 8,16,32,64; stride 2 + 1x1 conv/BN downsample "
             "on stages 2-4), AdaptiveAvgPool2d(1), flatten, Linear(64,10); BN stats randomized",
        inputs=[(randn((2, 3, 64, 64), 3),)]),
    "mobilenet_v2_tiny": dict(
        build=lambda: randomize_bn(build_mobilenet_v2_tiny()),
        desc="torchvision mobilenet_v2(weights=None, width_mult=0.25, num_classes=10): conv3x3 "
             "stem, 17 inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 linear project, "
             "all convs without bias, BN, ReLU6, residual add when stride 1 and widths match), "
             "1x1 conv to 1280, global avg pool, Dropout (eval) + Linear(1280,10); "
             "BN stats randomized",
        inputs=[(randn((1, 3, 32, 32), 19),)]),
    "effnet_block": dict(
        build=lambda: randomize_bn(EffNetBlock()),
        desc="EfficientNet-style MBConv block on 16 channels: stem Conv2d(16,16,3,p1,no bias)-BN-"
             "Hardswish, 1x1 expand to 64 (no bias)-BN-SiLU, 3x3 depthwise (groups 64, no bias)-"
             "BN-SiLU, squeeze-excitation (AdaptiveAvgPool2d(1), Conv2d(64,4,1)-SiLU, "
             "Conv2d(4,64,1)-sigmoid, multiply), 1x1 project to 16 (no bias)-BN, residual add; "
             "AdaptiveAvgPool2d(1)-Flatten-Linear(16,10); BN stats randomized",
        inputs=[(randn((2, 16, 16, 16), 20),)]),
    "llama_tiny": dict(
        build=build_llama,
        desc="LlamaForCausalLM(hidden 64, inter 128, 2 layers, 4 heads, 2 kv heads, head_dim 64, vocab 256, "
             "max_pos 512, sdpa); wrapper returns logits, use_cache=False",
        inputs=[(ids(16, 4),)]),
    "llama_tiny_dyn": dict(
        state_dict_of="llama_tiny",
        build=build_llama,
        desc="llama_tiny (same weights) with dynamic seq Dim('seq', min=2, max=512)",
        # min, max, each power-of-two bucket boundary b and b+1, odd sizes
        inputs=[(ids(16, 4),), (ids(5, 5),), (ids(37, 6),), (ids(128, 7),)]
        + [(ids(n, 100 + n),) for n in (2, 3, 4, 8, 9, 17, 32, 33, 64, 65, 129, 256, 257, 512)],
        dynamic_shapes={"input_ids": {1: SEQ}}),
    "gpt2_tiny": dict(
        build=build_gpt2,
        desc="GPT2LMHeadModel(vocab 256, n_positions 128, n_embd 64, 2 layers, 4 heads, "
             "bos/eos 0), tied lm_head/wte; wrapper returns logits, use_cache=False",
        inputs=[(ids(16, 8),)]),
    "llama_bf16": dict(
        build=build_llama_bf16,
        desc="LlamaForCausalLM(hidden 32, inter 64, 1 layer, 2 heads, 1 kv head, head_dim 16, vocab 128, "
             "max_pos 64, sdpa) with every weight in bf16; wrapper returns logits, use_cache=False; "
             "saved without stack traces and node provenance (from_node)",
        inputs=[(ids(12, 21, vocab=128),)],
        lean_metadata=True),
    "cnn_bf16": dict(
        build=lambda: randomize_bn(CNN()).to(torch.bfloat16),
        desc="cnn's architecture (fresh weights) in bf16, weights, BN statistics and input; "
             "BN stats randomized",
        inputs=[(randn((1, 3, 16, 16), 22).to(torch.bfloat16),)]),
    "moe_tiny": dict(
        build=build_qwen3_moe,
        desc="Qwen3MoeForCausalLM(hidden 64, 2 layers, 4 heads, 2 kv heads, head_dim 16, vocab 256, "
             "max_pos 128, sdpa; every layer sparse MoE: 4 experts, top-2, norm_topk_prob, "
             "moe_intermediate_size 32), experts_implementation='grouped_mm' (the default) with f32 "
             "weights: router softmax/topk, sort by expert id, histc + cumsum(int32) offsets, "
             "aten._grouped_mm for gate_up and down, inverse permutation via empty_permuted + "
             "index_put; exported with the grouped_mm check patched (real_grouped_mm_under_export) "
             "so the graph holds aten._grouped_mm, not transformers.grouped_mm_fallback; "
             "wrapper returns logits, use_cache=False",
        inputs=[(ids(16, 4),)],
        export_context=real_grouped_mm_under_export,
        graph_has=["torch.ops.aten._grouped_mm.default", "torch.ops.aten.histc.default",
                   "torch.ops.aten.empty_permuted.default"],
        graph_lacks=["grouped_mm_fallback"]),
    "size_outputs": dict(
        build=SizeOutputs,
        desc="x * 2 plus three Python numbers from x's static sizes (rows * cols, cols > 2, rows / 4), "
             "which export records as constant outputs as_int, as_bool, as_float",
        inputs=[(torch.randn(3, 5, generator=gen(11)),)]),
    "bert_meanpool": dict(
        build=BertMeanPool,
        desc="BertModel(vocab 256, hidden 64, 2 layers, 4 heads, inter 128, max_pos 128, "
             "no pooler) + attention-mask mean pooling; dynamic seq Dim('seq', min=2, max=128) "
             "shared by input_ids and attention_mask; row 1 of the mask has a zero tail",
        inputs=[bert_inputs(16, 9), bert_inputs(3, 10), bert_inputs(33, 11), bert_inputs(100, 12)]
        + [bert_inputs(n, 100 + n) for n in (2, 4, 5, 8, 9, 17, 32, 64, 65, 127, 128)],
        dynamic_shapes={"input_ids": {1: BERT_SEQ}, "attention_mask": {1: BERT_SEQ}}),
    "bert_meanpool_2d": dict(
        state_dict_of="bert_meanpool",
        build=BertMeanPool,
        desc="bert_meanpool (same weights) with two dynamic dims: batch Dim('batch', min=1, max=8) "
             "and seq Dim('seq', min=2, max=64)",
        inputs=[bert_inputs(16, 30, batch=2), bert_inputs(2, 31, batch=1), bert_inputs(5, 32, batch=3),
                bert_inputs(33, 33, batch=4), bert_inputs(64, 34, batch=8), bert_inputs(17, 35, batch=5),
                bert_inputs(9, 36, batch=2)],
        dynamic_shapes={"input_ids": {0: BATCH, 1: BERT2_SEQ}, "attention_mask": {0: BATCH, 1: BERT2_SEQ}}),
    "size_floats": dict(
        build=SizeFloats,
        desc="x * 2 plus two Python floats from a dynamic size Dim('rows', min=2, max=64): "
             "rows / 4 and rows * 1.5 - 1, symbolic float outputs",
        inputs=[(randn((5, 3), 50),), (randn((2, 3), 51),), (randn((17, 3), 52),), (randn((64, 3), 53),)],
        dynamic_shapes={"x": {0: Dim("rows", min=2, max=64)}}),
    "sym_scalars": dict(
        build=SymScalars,
        desc="sizes as tensor operands: x * s + x / (2s) - t, x * (s / 2), (y + s) * (s // 3), full((t,), s), "
             "(x * s).clamp(-s, s / 4), scatter(x, 1, idx, s), masked_fill(x > 0, s), full_like(x, s), with x f32[2, s] "
             "and y i64[t], s in [2, 64] and t in [1, 16]",
        inputs=[(randn((2, s), 1300 + s), torch.randint(0, 5, (t,), generator=gen(1300 + t)))
                for s, t in ((8, 3), (2, 1), (5, 7), (16, 16), (17, 2), (33, 9), (64, 4))],
        dynamic_shapes={"x": {1: Dim("s", min=2, max=64)}, "y": {0: Dim("t", min=1, max=16)}}),
    "last_token": dict(
        build=LastToken,
        desc="Linear(8,4) then the last position x[:, -1] of a dynamic seq Dim('seq', min=2, max=64) "
             "(in a size bucket, the last real position is found from the real size)",
        inputs=[(randn((2, 5, 8), 40),), (randn((2, 2, 8), 41),), (randn((2, 3, 8), 42),),
                (randn((2, 17, 8), 43),), (randn((2, 33, 8), 44),), (randn((2, 64, 8), 45),)],
        dynamic_shapes={"x": {1: Dim("seq", min=2, max=64)}}),
    "grid_sample_dyn": dict(
        build=GridSample,
        desc="F.grid_sample(x [b, 3, 8, 8], grid [b, 5, 5, 2]) with a dynamic batch Dim('batch', 1..8): position by "
             "position along the batch and the grid's points",
        inputs=[(randn((b, 3, 8, 8), 2000 + b), torch.rand((b, 5, 5, 2), generator=gen(2100 + b)) * 2.2 - 1.1)
                for b in (2, 1, 3, 4, 5, 7, 8)],
        dynamic_shapes={"x": {0: BATCH}, "grid": {0: BATCH}}),
    "positions_after_past_dyn": dict(
        build=PositionsAfterPast,
        desc="x [1, t, 4] + arange(p, p + t) for a past [1, p], t in 1..16 and p in 1..32: an arange whose start is "
             "a symbolic size",
        inputs=[(randn((1, t, 4), 2200 + t), randn((1, p), 2300 + p))
                for t, p in ((3, 5), (1, 1), (2, 31), (16, 32), (9, 17), (4, 8), (15, 2))],
        dynamic_shapes={"x": {1: Dim("t", min=1, max=16)}, "past": {1: Dim("p", min=1, max=32)}}),
    "rows_at_sizes_dyn": dict(
        build=RowsAtSizes,
        desc="x f32[2, n, 4] (Dim.AUTO(min=2, max=12)): x[:, n - 1] + table[n - 1] and x[:, n // 2] * table[-n] "
             "for a fixed table [12, 4]: rows selected at indices that are sizes, from the end for -n",
        inputs=[(randn((2, n, 4), 2600 + n),) for n in (5, 2, 3, 4, 7, 8, 9, 12)],
        dynamic_shapes={"x": {1: Dim.AUTO(min=2, max=12)}}),
    "rows_of_count": dict(
        build=RowsOfCount,
        desc="x[mask.nonzero()[:, 0]] ([u0, 16, 64], u0 <= 8 by torch._check) viewed as [16*u0, 64] and summed: a "
             "view of a count from data; cases of 4, 0, 8 and 1 rows",
        inputs=[(randn((8, 16, 64), 2400 + k), torch.tensor(m, dtype=torch.bool))
                for k, m in enumerate(([1, 0, 1, 1, 0, 0, 1, 0], [0] * 8, [1] * 8, [0, 0, 0, 0, 0, 0, 0, 1]))]),
    "guarded_dyn": dict(
        build=Guarded,
        desc="x * 2 if x.shape[1] == 16 else x + 1, x f32[3, s] exported with Dim.AUTO(min=2, max=64) at s = 8: the "
             "graph is x + 1 and the archive's guards_code holds L['x'].size()[1] != 16; at 16 eager takes the "
             "other branch and the loaded module refuses the input (the `excluded` case)",
        inputs=[(randn((3, s), 1500 + s),) for s in (8, 2, 3, 4, 7, 15, 17, 31, 32, 33, 63, 64)],
        excluded=[(randn((3, 16), 1516),)],
        dynamic_shapes={"x": {1: Dim.AUTO(min=2, max=64)}}),
    "size_minmax_dyn": dict(
        build=SizeMinMax,
        desc="min(s, 16) and max(s, 8) of x f32[2, s, 4]'s length (torch.sym_min, torch.sym_max), exported with "
             "Dim.AUTO(min=2, max=64) at s = 10, used as numbers and as arange ends; sizes on both sides of 8 "
             "and 16",
        inputs=[(randn((2, s, 4), 1800 + s),) for s in (10, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64)],
        dynamic_shapes={"x": {1: Dim.AUTO(min=2, max=64)}}),
    "window_pad_dyn": dict(
        build=WindowPad,
        desc="Swin's window padding: x f32[2, h, w, 3] padded to whole windows of 4 ((4 - h % 4) % 4 after, "
             "value 0.25) in height and width, windows centred and put back; a row padded to 16, centred "
             "(max(16 - w, 0) // 2 before); Dim.AUTO(min=5, max=24) for h and w at 10 x 9, where both pads are "
             "not 0: the export's guards exclude every side that is a multiple of 4 (the excluded cases), which "
             "the buckets 8, 16 and 24 are",
        inputs=[(randn((2, h, w, 3), 2500 + 30 * h + w),)
                for h, w in ((10, 9), (5, 5), (7, 7), (9, 15), (15, 17), (17, 23), (23, 5), (21, 11), (6, 19))],
        excluded=[(randn((2, 8, 8, 3), 2508),), (randn((2, 10, 12, 3), 2512),)],
        dynamic_shapes={"x": {1: Dim.AUTO(min=5, max=24), 2: Dim.AUTO(min=5, max=24)}}),
    "pool_sides_dyn": dict(
        build=lambda: randomize_bn(PooledCnn()),
        desc="average pools along a dynamic height and width (DenseNet's transitions): conv, BN, ReLU, "
             "avg_pool2d(2), a 1x1 conv, avg_pool2d(3, stride 2, padding 1), a global mean and a linear head, "
             "x f32[2, 3, h, w] with Dim.AUTO(min=8, max=64) for h and w, odd sides included; both outputs "
             "(the head and the last feature map) compared",
        inputs=[(randn((2, 3, h, w), 2600 + 70 * h + w),)
                for h, w in IMAGE_SIDES],
        dynamic_shapes=IMAGE_SIDES_DYNAMIC),
    "resize_sides_dyn": dict(
        build=ResizedHead,
        desc="a segmentation head resized back to its input's sides (torchvision's FCN and DeepLab): stride-2 "
             "and stride-4 feature maps upsampled bilinearly to `size=(h, w)`, a bilinear 2x by a factor with "
             "align_corners, a nearest resize by size; x f32[1, 3, h, w] with Dim.AUTO(min=8, max=64) for h and "
             "w, odd sides included",
        inputs=[(randn((1, 3, h, w), 2700 + 70 * h + w),)
                for h, w in IMAGE_SIDES],
        dynamic_shapes=IMAGE_SIDES_DYNAMIC),
    "resize_table_dyn": dict(
        build=ResizedTable,
        desc="a fixed 4x4 table resized to the input's sides, bilinear and nearest (a position table "
             "interpolated to an image's grid): the operand has no padding, its result does; x f32[1, 2, h, w] "
             "with Dim('h', 2..32) and Dim('w', 2..32)",
        inputs=[(randn((1, 2, h, w), 2800 + 40 * h + w),) for h, w in ((10, 12), (5, 7), (17, 3), (32, 32), (2, 9))],
        dynamic_shapes={"x": {2: Dim("h", min=2, max=32), 3: Dim("w", min=2, max=32)}}),
    "auto_batch_dyn": dict(
        state_dict_of="mlp",
        build=MLP,
        desc="mlp (same weights) exported with {0: Dim.AUTO} on x f32[b, 16]: the batch's range is [2, int_oo] "
             "(unbounded), so compiling it needs --buckets or --max for its symbol",
        inputs=[(randn((4, 16), 1),)] + [(randn((b, 16), 1600 + b),) for b in (2, 3, 5, 8, 9, 16)],
        dynamic_shapes={"x": {0: Dim.AUTO}}),
    "derived_cnn_dyn": dict(
        state_dict_of="cnn",
        build=lambda: randomize_bn(CNN()),
        desc="cnn (same weights) with a derived height and width, H = 8*Dim('kh', 2..8) and W = 8*Dim('kw', 2..8) "
             "(images 16 to 64 pixels a side, multiples of 8): the inputs' dims are 8*s, the symbols their "
             "quotients",
        inputs=[(randn((2, 3, 8 * kh, 8 * kw), 1700 + 10 * kh + kw),)
                for kh, kw in ((4, 4), (2, 2), (2, 8), (3, 5), (4, 3), (5, 8), (8, 8), (7, 2), (8, 4))],
        dynamic_shapes={"x": {2: 8 * Dim("kh", min=2, max=8), 3: 8 * Dim("kw", min=2, max=8)}},
        lean_metadata=True),
    "gpt2_past_dyn": dict(
        build=PastAttention,
        desc="GPT-2's attention in a decode step with a dynamic past (transformers' eager attention over a "
             "DynamicCache): x [2, t, 16] with caches [2, 2, p, 8], keys and values cat([past, new]), the causal "
             "mask bias[:, :, p:p+t, :p+t]; Dim('past', 1..32) and Dim('new', 1..8)",
        inputs=[(randn((2, t, 16), 2200 + t), randn((2, 2, p, 8), 2300 + p), randn((2, 2, p, 8), 2400 + p))
                for p, t in ((8, 2), (1, 1), (32, 8), (5, 3), (17, 1), (31, 7), (16, 4), (3, 8))],
        dynamic_shapes={"x": {1: Dim("new", min=1, max=8)}, "past_k": {2: Dim("past", min=1, max=32)},
                        "past_v": {2: Dim("past", min=1, max=32)}},
        lean_metadata=True),
    "unet_derived_dyn": dict(
        build=TinyUNet,
        desc="a miniature diffusers-style UNet (GroupNorm, SiLU, two stride-2 downsamples, nearest upsamples "
             "concatenated with their skips) with a derived height and width, H = 8*Dim('uh', 2..8) and "
             "W = 8*Dim('uw', 2..8): every feature map's sides are multiples of the symbols",
        inputs=[(randn((1, 3, 8 * kh, 8 * kw), 2100 + 10 * kh + kw),)
                for kh, kw in ((4, 4), (2, 2), (2, 8), (3, 5), (4, 3), (5, 8), (8, 8), (7, 2))],
        dynamic_shapes={"x": {2: 8 * Dim("uh", min=2, max=8), 3: 8 * Dim("uw", min=2, max=8)}},
        lean_metadata=True),
    "cross_attention_3dyn": dict(
        build=CrossAttention,
        desc="cross-attention (Linear q/k/v/o 16x16, 2 heads, SDPA) of x [b, t, 16] over memory [b, s, 16] with three "
             "dynamic dims, batch Dim('batch', 1..8), target Dim('tgt', 1..64) and source Dim('src', 1..64): powers "
             "of two would make 4 x 7 x 7 = 196 buckets, so the default chooses fewer sizes per dim",
        inputs=[(randn((b, t, 16), 1800 + t), randn((b, s, 16), 1900 + s))
                for b, t, s in ((2, 16, 16), (1, 1, 1), (8, 64, 64), (3, 17, 33), (4, 2, 63), (5, 40, 3),
                                (7, 9, 64), (8, 1, 32), (1, 64, 2))],
        dynamic_shapes={"x": {0: BATCH, 1: Dim("tgt", min=1, max=64)},
                        "memory": {0: BATCH, 1: Dim("src", min=1, max=64)}},
        lean_metadata=True),
    "decoder_kv": dict(
        build=DecoderKV,
        desc="gpt-fast-style decode step: (input_ids [1, T], input_pos [T]) -> logits [1, T, 64] for "
             "T in 1..64 (one token to decode, several to prefill a prompt); vocab 64, dim 32, 2 heads, "
             "2 layers, static KV caches of 64 positions (zeros) as buffers updated with index_copy_; "
             "decode references (prompt, 24 greedy tokens, their logits) from eager, token by token",
        inputs=[(torch.tensor([[5, 9, 3]]), torch.arange(3)), (torch.tensor([[5]]), torch.tensor([0]))],
        dynamic_shapes={"input_ids": {1: DECODE_T}, "input_pos": {0: DECODE_T}},
        lean_metadata=True,
        decode=decode_reference),
    "decoder_rows": dict(
        build=DecoderRows,
        desc="a decode step for 4 requests at their own positions: (input_ids [4, 1], input_pos [4]) -> "
             "logits [4, 1, 64]; vocab 64, dim 32, 2 heads, 2 layers, K/V caches [4, 64, 2, 16] written at "
             "each row's position (index_put) and read up to it through a causal mask row; references: "
             "7 requests of 1 to 9 tokens, each decoded alone (16 greedy tokens) by a batch-1 copy",
        inputs=[(torch.tensor([[5], [7], [33], [12]]), torch.tensor([0, 3, 1, 2]))],
        lean_metadata=True,
        decode=rows_decode_reference),
    "decoder_rows_prefill": dict(
        state_dict_of="decoder_rows",
        build=DecoderRows,
        desc="decoder_rows (the same weights) taking T tokens a row at positions of its own: (input_ids "
             "[4, T], input_pos [4, T]) -> logits [4, T, 64], T in 1..16 (a slot's prompt in chunks while "
             "the others decode); references: decoder_rows' requests, each decoded alone; case 1: 16 "
             "tokens a row from position 0 (as many mask rows as the causal buffer holds)",
        **{**ROWS_PREFILL, "inputs": ROWS_PREFILL["inputs"] + [
            (torch.randint(0, 64, (4, 16), generator=gen(61)), torch.arange(16).repeat(4, 1))]}),
    "decoder_rows_bf16": dict(
        build=lambda: DecoderRows().to(torch.bfloat16),
        desc="decoder_rows_prefill in bf16 (decoder_rows' weights rounded to bf16, bf16 caches): "
             "(input_ids [4, T], input_pos [4, T]) -> bf16 logits [4, T, 64], T in 1..16; references: "
             "decoder_rows' requests, each decoded alone by a bf16 batch-1 copy, with the f32 values of "
             "the bf16 logits that chose each token (logits.npy [7, 16, 64]: near ties are judged by them)",
        **ROWS_PREFILL),
    "decoder_kv_tuned": dict(
        build=lambda: tuned(DecoderKV()),
        desc="decoder_kv with other weights (each parameter moved by seeded noise of a tenth of its "
             "spread, as a fine-tune moves it): another checkpoint of the same program, for taking "
             "its weights into decoder_kv's artifact without recompiling; decode references from eager",
        inputs=[(torch.tensor([[5, 9, 3]]), torch.arange(3)), (torch.tensor([[5]]), torch.tensor([0]))],
        dynamic_shapes={"input_ids": {1: DECODE_T}, "input_pos": {0: DECODE_T}},
        lean_metadata=True,
        decode=decode_reference),
    "hf_static_cache": dict(
        build=HFStaticCacheStep,
        desc="transformers' StaticCache export recipe (TorchExportableModuleWithStaticCache) of a one-layer "
             "Llama (hidden 32, 2 heads of 16, 1 kv head, vocab 128): (input_ids [1, 1], cache_position [1]) "
             "-> logits [1, 1, 128], key/value caches of 48 positions and their length counters as "
             "non-persistent buffers updated in place; decode references from transformers' own greedy "
             "generate with a static cache",
        inputs=[(torch.tensor([[5]]), torch.tensor([0]))],
        # As convert_and_export_with_cache exports it.
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True,
        decode=hf_decode_reference),
    "hf_static_rows": dict(
        build=lambda: HFStaticCacheStep(batch=4),
        desc="hf_static_cache (the same weights) exported by the same recipe with a batch of 4: (input_ids "
             "[4, 1], cache_position [1]) -> logits [4, 1, 128], one position for all rows; references: "
             "ROWS_PROMPTS, each decoded alone by transformers' greedy generate with a static cache",
        inputs=[(torch.tensor([[5], [7], [33], [12]]), torch.tensor([0]))],
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True,
        decode=hf_rows_reference),
    "hf_export_moe": dict(
        build=build_hf_export_moe,
        desc="`python -m torchtpu_compile.export`'s recipe (transformers' StaticCache module, 4 slots, 48 "
             "positions, a prefill chunk of 1 to 8 tokens) of a 1-layer Qwen3-MoE (hidden 32, 2 heads of 16, "
             "1 kv head, vocab 128, 4 experts of width 32, top-2; f32, so its experts call transformers' "
             "`grouped_mm_fallback`): (input_ids [4, T], cache_position [T]) -> logits [4, T, 128]; "
             "references: ROWS_PROMPTS, each decoded alone by transformers' greedy generate",
        inputs=[(torch.zeros(4, 2, dtype=torch.long), torch.arange(2)),
                (torch.tensor([[5, 9, 3], [7, 1, 1], [33, 2, 9], [12, 4, 4]]), torch.arange(3))],
        dynamic_shapes={"input_ids": {1: EXPORT_T}, "cache_position": {0: EXPORT_T}},
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True,
        fresh_state=True,
        graph_has=["torch.ops.transformers.grouped_mm_fallback.default"],
        decode=hf_rows_reference_without_eos),
    "moe_dyn": dynamic_lm(
        build_mixtral_dyn,
        "MixtralForCausalLM(hidden 32, 1 layer, 2 heads of 16, 1 kv head, vocab 128, 4 experts, top-2, "
             "grouped_mm experts) with dynamic batch Dim('batch', 1..8) and seq Dim('seq', 1..64): the router's "
             "[batch*seq] tokens, sorted by expert, grouped matmuls, inverse permutation",
        200,
        export_context=real_grouped_mm_under_export),
    "fnet_dyn": dict(
        build=FNetLogits,
        desc="transformers' FNetForMaskedLM (hidden 24, 2 layers, vocab 32): token mixing by fftn over the "
             "sequence and hidden dims (_fft_r2c over hidden, _fft_c2c over the sequence, real part) with "
             "dynamic batch Dim('batch', 1..8) and seq Dim('seq', 1..64); references at 1, every bucket edge "
             "and edge - 1",
        inputs=[(ids(s, 700 + s, batch=b, vocab=32),) for b, s in edge_pairs(EDGE_SEQS, EDGE_BATCHES)],
        dynamic_shapes={"input_ids": {0: BATCH, 1: DYN_SEQ}},
        lean_metadata=True),
    "mla_dyn": dynamic_lm(
        build_mla_dyn,
        "DeepseekV3ForCausalLM(hidden 32, 1 layer, 2 heads, MLA with q/kv LoRA ranks 16, rope 8 + nope 8, "
             "MoE of 4 experts top-2 + 1 shared, grouped_mm) with dynamic batch Dim('batch', 1..8) and seq "
             "Dim('seq', 1..64)",
        300,
        export_context=real_grouped_mm_under_export),
    "alibi_dyn": dynamic_lm(
        build_alibi_dyn,
        "BloomForCausalLM(hidden 32, 1 layer, 2 heads, vocab 128, ALiBi, eager attention) with dynamic "
             "batch Dim('batch', 1..8) and seq Dim('seq', 1..64): the ALiBi bias repeated `batch` times",
        1000,
        graph_has=["torch.ops.aten.repeat.default"]),
    "swin_dyn": dict(
        build=SwinClassifier,
        desc="SwinForImageClassification(image 32, patch 4, embed 16, depths [1, 1], heads [1, 2], window 4, "
             "4 labels) with dynamic batch Dim('batch', 1..8): window partitions as `as_strided` with symbolic "
             "sizes",
        inputs=[(randn((b, 3, 32, 32), 1100 + b),) for b in (2, 1, 3, 4, 5, 7, 8)],
        dynamic_shapes={"pixel_values": {0: BATCH}},
        graph_has=["torch.ops.aten.as_strided.default"],
        lean_metadata=True),
    "sink_dyn": dynamic_lm(
        build_sink_dyn,
        "GptOssForCausalLM(hidden 32, 2 layers (sliding window 8, full), 2 heads of 16, 1 kv head, vocab 128, "
             "4 experts top-2, eager attention) with dynamic batch Dim('batch', 1..8) and seq Dim('seq', 1..64): "
             "attention sinks concatenated after the scores",
        1200,
        export_context=real_grouped_mm_under_export,
        graph_has=["torch.ops.aten.cat.default"]),
    "mamba_dynbatch": dict(
        build=build_mamba,
        desc="MambaForCausalLM(hidden 32, 2 layers, state 16, expand 2, conv 4, dt rank 8, vocab 128) at seq 12 "
             "with dynamic batch Dim('batch', 1..8) (the scan unrolled over the sequence makes it static)",
        inputs=[(ids(12, 500 + b, batch=b, vocab=128),) for b in EDGE_BATCHES],
        dynamic_shapes={"input_ids": {0: BATCH}},
        lean_metadata=True),
    "llama_1head_dyn": dict(
        build=build_llama_1head_dyn,
        desc="LlamaForCausalLM(hidden 32, 1 layer, a single head of 32, vocab 128) at batch 1 with dynamic "
             "seq Dim('seq', 1..64): views that merge the seq with size-1 dims",
        inputs=[(ids(s, 400 + s, vocab=128),) for s in EDGE_SEQS],
        dynamic_shapes={"input_ids": {1: DYN_SEQ}},
        lean_metadata=True),
    "t5_encoder_dyn": dict(
        build=build_t5_encoder_dyn,
        desc="T5EncoderModel(d_model 32, 1 layer, 2 heads of 16, relative position buckets) at batch 1 with "
             "dynamic length Dim('seq', 1..64); returns the last hidden state",
        inputs=[(ids(s, 500 + s, vocab=128),) for s in EDGE_SEQS],
        dynamic_shapes={"input_ids": {1: DYN_SEQ}},
        lean_metadata=True),
    "t5_decoder_dyn": dict(
        build=T5DecoderStep,
        desc="T5's decoder stack (1 layer, causal self-attention, cross-attention) and LM head at batch 1: "
             "decoder ids of dynamic length Dim('tgt', 1..64) over encoder states of dynamic length "
             "Dim('src', 1..64)",
        inputs=[(ids(s, 600 + s, vocab=128), randn((1, max(1, 65 - s), 32), 700 + s)) for s in EDGE_SEQS],
        dynamic_shapes={"decoder_input_ids": {1: Dim("tgt", min=1, max=64)},
                        "encoder_hidden_states": {1: Dim("src", min=1, max=64)}},
        lean_metadata=True),
    "t5_gen_encoder": dict(
        build=build_t5_gen_encoder,
        desc="transformers' seq2seq export recipe, encoder half (Seq2SeqLMEncoderExportableModule) of a T5 "
             "(t5_config): input_ids [1, src] -> encoder states [1, src, 32], src in 2..32; the encoder "
             "`generate --encoder` runs once per request for t5_gen_decoder",
        inputs=[(ids(s, 620 + s, vocab=128),) for s in (8, 2, 5, 17, 32)],
        dynamic_shapes={"input_ids": {1: Dim("src", min=2, max=32)}},
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True),
    "t5_recipe_encoder": dict(
        state_dict_of="t5_gen_encoder",
        build=build_t5_gen_encoder,
        desc="t5_gen_encoder (same weights) exported with the recipe's own dim, Dim('encoder_seq_length', max=32) "
             "with no minimum: its range is [0, 32], and buckets serve 1 to 32 (a size 0 is not served)",
        inputs=[(ids(s, 630 + s, vocab=128),) for s in (8, 1, 2, 3, 4, 7, 15, 16, 17, 31, 32)],
        dynamic_shapes={"input_ids": {1: Dim("encoder_seq_length", max=32)}},
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True),
    "t5_recipe_decoder": dict(
        state_dict_of="t5_gen_decoder",
        build=build_t5_gen_decoder,
        desc="t5_gen_decoder (same weights) exported with the recipe's own dim for the encoder states' length, "
             "Dim('encoder_hidden_seq_length', max=32) with no minimum ([0, 32]); each case is a first step from "
             "the initial caches (a fresh module per case)",
        inputs=[(torch.tensor([[0]]), randn((1, s, 32), 660 + s), torch.tensor([0])) for s in (8, 1, 2, 3, 16, 17, 32)],
        dynamic_shapes={"decoder_input_ids": None, "encoder_hidden_states": {1: Dim("encoder_hidden_seq_length", max=32)},
                        "cache_position": None},
        fresh_state=True,
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True),
    "t5_gen_decoder": dict(
        build=build_t5_gen_decoder,
        desc="transformers' seq2seq export recipe, decoder half (Seq2SeqLMDecoderExportableModuleWithStaticCache, "
             "self-attention caches of 32 positions as buffers) of the same T5: (decoder_input_ids [1, 1], "
             "encoder_hidden_states [1, src, 32], cache_position [1]) -> logits [1, 1, 128], src in 2..32; "
             "references: the step at src 8, and transformers' greedy generate of the whole model "
             "(prompt.npy, tokens.npy)",
        # One case: the eager module keeps its first call's cross-attention keys in a cache of
        # its own (the exported program computes them at every call), so a second eager call
        # with other encoder states is not a reference.
        inputs=[(torch.tensor([[0]]), randn((1, 8, 32), 648), torch.tensor([0]))],
        dynamic_shapes={"decoder_input_ids": None, "encoder_hidden_states": {1: Dim("src", min=2, max=32)},
                        "cache_position": None},
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True,
        decode=t5_generate_reference),
    "whisper_gen_encoder": dict(
        build=WhisperEncoderStep,
        desc="a tiny Whisper's encoder (whisper_full: 8 mel bins, 32 frames) as a serving stack exports it: "
             "input_features [1, 8, 32] -> encoder states [1, 16, 32]; the encoder `generate --encoder` "
             "runs once per request for whisper_gen_decoder",
        inputs=[(randn((1, 8, 32), 790),)],
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True),
    "whisper_gen_decoder": dict(
        build=build_whisper_gen_decoder,
        desc="transformers' seq2seq export recipe, decoder half (Seq2SeqLMDecoderExportableModuleWithStaticCache, "
             "self-attention caches of 32 positions) of the same Whisper: (decoder_input_ids [1, 1], "
             "encoder_hidden_states [1, 16, 32], cache_position [1]) -> logits [1, 1, 128]; references: the step, "
             "and greedy decoding by the whole eager model from seeded features (features.npy, tokens.npy)",
        inputs=[(torch.tensor([[1]]), randn((1, 16, 32), 791), torch.tensor([0]))],
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True,
        decode=whisper_generate_reference),
    "causal_conv_dyn": dict(
        build=CausalConv,
        desc="Mamba-style causal depthwise Conv1d(16, kernel 4, padding 3) sliced back to the sequence, "
             "between two Linear layers, with dynamic batch Dim('batch', 1..8) and seq Dim('seq', 1..64)",
        inputs=[(randn((b, s, 8), 800 + s),) for b, s in edge_pairs(EDGE_SEQS, EDGE_BATCHES)],
        dynamic_shapes={"x": {0: BATCH, 1: DYN_SEQ}}),
    "pad_cnn_dyn": dict(
        build=PadCNN,
        desc="Conv2d(3,8,3,s2) after F.pad right/bottom by 1, Conv2d(8,8,3) after F.pad by 1 with 0.5, mean, "
             "Linear(8,4), with dynamic batch Dim('batch', 1..8) on 16x16 images",
        inputs=[(randn((b, 3, 16, 16), 900 + b),) for b in (2, 1, 3, 4, 5, 7, 8)],
        dynamic_shapes={"x": {0: BATCH}}),
    "rope_complex": dict(
        build=MetaRopeAttention,
        desc="Meta-style attention (dim 32, 2 heads of 16, causal sdpa) with complex RoPE: freqs_cis a "
             "complex64 buffer (polar), q and k rotated by view_as_complex * freqs_cis -> view_as_real",
        inputs=[(randn((2, 16, 32), 42),)]),
    "rope_complex_dyn": dict(
        state_dict_of="rope_complex",
        build=MetaRopeAttention,
        desc="rope_complex (same weights) with dynamic batch Dim('batch', 1..8) and seq Dim('seq', 1..64): "
             "freqs_cis[:seq]",
        inputs=[(randn((b, s, 32), 1200 + s),) for b, s in edge_pairs(EDGE_SEQS, EDGE_BATCHES)],
        dynamic_shapes={"x": {0: BATCH, 1: DYN_SEQ}}),
    "logmel": dict(
        build=LogMel,
        desc="log-mel spectrogram: stft(n_fft 64, hop 16, Hann window, center) -> |X|**2 -> [33, 16] mel "
             "matrix -> log(+1e-6), of 2 waveforms of 1024 samples",
        inputs=[(randn((2, 1024), 41),)]),
    "nonzero_gather": dict(
        build=NonzeroGather,
        desc="nonzero(x > 0.5) (a data-dependent row count u0 <= 12), x gathered at its coordinates, "
             "their sum, and x times the count of |x| > 1",
        inputs=[(randn((3, 4), 1470),), (randn((3, 4), 1471) - 9,), (randn((3, 4), 1472) + 9,)]),
    "item_slice": dict(
        build=ItemSlice,
        desc="k = n.item() bounded by torch._check(0 <= k <= 8) (a data-dependent size u0): x[:k] * 2, "
             "its sum over rows, and ones(k).cumsum(0) * k",
        inputs=[(randn((8, 4), 1500), torch.tensor(n)) for n in (5, 0, 8)]),
    "repeat_counts": dict(
        build=RepeatCounts,
        desc="repeat_interleave(x, r, dim=0) and repeat_interleave(r) by counts r from data, without "
             "output_size, the length bounded by torch._check(len <= 16): computed at 16, cut back",
        inputs=[(randn((4, 3), 1510), torch.tensor(r)) for r in ([1, 0, 3, 2], [0, 0, 0, 0], [4, 4, 4, 4])]),
    "pad_counts": dict(
        build=PadCounts,
        desc="x[mask.nonzero().view(-1)] * 2 (a data-dependent count u0 <= 6) padded back to 6 rows with -1 "
             "(pad by 6 - u0), and its column sums",
        inputs=[(randn((6, 4), 1520), torch.tensor(m, dtype=torch.bool)) for m in ([1, 0, 1, 1, 0, 0], [0] * 6, [1] * 6)]),
    "moe_gather": dict(
        build=MoEGather,
        desc="MoE (4 experts of Linear(8,16)-SiLU-Linear(16,8), top-2 of a softmax router) whose experts "
             "gather their tokens with torch.where and scatter them back with index_add_",
        inputs=[(randn((2, 5, 8), s),) for s in (1480, 1481, 1482)]),
    "moe_gather_dyn": dict(
        state_dict_of="moe_gather",
        build=MoEGather,
        desc="moe_gather (same weights) with dynamic batch Dim('batch', 1..8) and seq Dim('seq', 1..64): "
             "the routing mask's token dim merges batch and seq",
        inputs=[(randn((b, s, 8), 1490 + s),) for b, s in ((2, 5), (1, 2), (3, 17), (8, 64), (5, 33), (1, 64),
                                                           (4, 9))],
        dynamic_shapes={"x": {0: BATCH, 1: DYN_SEQ}}),
    "unique_dyn": dict(
        build=UniqueCounts,
        desc="torch.unique(x, return_inverse=True, return_counts=True) over Dim('n', 2..64) int64 values: "
             "the distinct values (x2), each element's index among them and their counts; a case holds the "
             "largest int64 twice (the value a size bucket pads the sort with)",
        inputs=[(torch.randint(0, 10, (n,), generator=gen(1710 + n)),) for n in (40, 2, 3, 17, 64, 33)]
        + [(torch.tensor([5, 2**63 - 1, 3, 2**63 - 1, 1]),)],
        dynamic_shapes={"x": {0: Dim("n", min=2, max=64)}}),
    "nms_dyn": dict(
        build=NmsDecode,
        desc="torchvision nms (IoU 0.5) over Dim('boxes', 2..64) boxes and scores: the kept boxes (x2) and "
             "scores, a data-dependent count; cases with negative, −inf and equal scores",
        inputs=[nms_case(40, 1700, "normal"), nms_case(2, 1701), nms_case(3, 1702, "normal"),
                nms_case(17, 1703, "-inf"), nms_case(33, 1704, "ties"), nms_case(64, 1705, "normal"),
                nms_case(9, 1706)],
        dynamic_shapes={"boxes": {0: NMS_BOXES}, "scores": {0: NMS_BOXES}}),
    "dual_ffn_dyn": dynamic_lm(
        DualFFN,
        "HiggsAudio-style dual FFN (vocab 128, dim 16, MLPs of 32; returns the hidden states): out[mask] = h[mask] + audio(h[mask]) "
             "and the same for ~mask with text(), mask = ids < 32, with dynamic batch Dim('batch', 1..8) and "
             "seq Dim('seq', 1..64): boolean index_put of rows counted by data, two counts asserted equal",
        1600),
    "moe_split_counts": dict(
        build=MoESplitCounts,
        desc="JetMoE-style MoE (4 experts, top-2): tokens sorted by expert, split by counts read with "
             "tolist() (u0..u3, whose sum torch asserts is 20), each piece through its expert, cat, index_add",
        inputs=[(randn((2, 5, 8), s),) for s in (1510, 1511, 1512)]),
    "long_context_dyn": dict(
        build=LongContext,
        desc="one-layer encoder (embedding 128x32, bidirectional SDPA of 2 heads of 16 without a mask, "
             "residual, mean over the sequence, Linear(32,4)) with a dynamic seq Dim('seq', 1..32768); "
             "the last case is 32,768 tokens",
        inputs=[(ids(s, 1530 + s, vocab=128),) for s in (16, 1, 100, 1000, 32768)],
        dynamic_shapes={"input_ids": {1: Dim("seq", min=1, max=32768)}},
        loaded_numel_max=4096),
    "moe_split_counts_dyn": dict(
        state_dict_of="moe_split_counts",
        build=MoESplitCounts,
        desc="moe_split_counts (same weights) with dynamic batch Dim('batch', 1..8) and seq Dim('seq', 1..64): "
             "the sorted tokens' dim is padded, the pieces' offsets come from counts (at most 2·batch·seq each)",
        inputs=[(randn((b, s, 8), 1520 + s),) for b, s in edge_pairs(EDGE_SEQS, EDGE_BATCHES)],
        dynamic_shapes={"x": {0: BATCH, 1: DYN_SEQ}}),
    "checked_item": dict(
        build=CheckedItem,
        desc="x * 2 after asserting on a count read with item() (torch._check): the unbacked "
             "symbol is only used by the dead assertions, which are dropped with it",
        inputs=[(randn((3, 4), 1460),)]),
    "cond_data": dict(
        build=CondData,
        desc="torch.cond on data: Linear(8,16), then h.sum() > 0 picks Linear(16,16)-relu-Linear(16,4) "
             "or tanh(2 h[:, :4]) - h[:, 4:8]; the inputs take each branch",
        inputs=[(randn((4, 8), 1400),), (randn((4, 8), 1401) - 3,), (randn((4, 8), 1402) + 3,)]),
    "cond_size_dyn": dict(
        build=CondSize,
        desc="torch.cond on a size: Linear(8,8), then mean over seq when seq > 16, else amax over seq "
             "times seq; dynamic batch Dim('batch', 1..8) and seq Dim('seq', 2..64)",
        inputs=[(randn((b, s, 8), 1410 + s),) for b, s in ((2, 20), (1, 2), (3, 16), (2, 17), (8, 64),
                                                           (5, 9), (4, 33))],
        dynamic_shapes={"x": {0: BATCH, 1: DYN_SEQ}}),
    "while_rnn": dict(
        build=WhileRNN,
        desc="torch while_loop RNN: h = tanh(W h + U xs[i] + b) for i < steps, a data-dependent trip "
             "count (steps is an input); xs [10, 2, 8], h [2, 16]; returns (steps, h)",
        inputs=[(randn((10, 2, 8), 1420), randn((2, 16), 1421), torch.tensor(n)) for n in (6, 0, 10)]),
    "scan_rnn": dict(
        build=ScanRNN,
        desc="torch scan of a GRU-style cell (gates Linear(24,32), candidate Linear(24,16), "
             "out Linear(16,4)) over xs [6, 3, 8] from h [3, 16]: final state and per-step outputs",
        inputs=[(randn((6, 3, 8), 1430), randn((3, 16), 1431))]),
    "scan_rnn_dyn": dict(
        state_dict_of="scan_rnn",
        build=ScanRNN,
        desc="scan_rnn (same weights) with a dynamic batch Dim('batch', 1..8)",
        inputs=[(randn((6, b, 8), 1440 + b), randn((b, 16), 1450 + b)) for b in (3, 1, 2, 5, 8)],
        dynamic_shapes={"xs": {1: BATCH}, "h": {0: BATCH}}),
    "multi_out": dict(
        build=MultiOut,
        desc="Linear(5,4) -> (y f32, argmax(y,-1) i64, y>0 bool, (x>0).sum(1) i64)",
        inputs=[(randn((3, 5), 13),)]),
    "edge_cases": dict(
        build=EdgeCases,
        desc="non-contiguous param (w_t, strides [1,4]), fp16 + bf16 params, int64 persistent "
             "buffer (idx), non-persistent 0-d buffer (scale), overlapping-view buffers "
             "(view_a/view_b of one storage), lifted tensor constant, -inf literals "
             "(masked_fill + softmax + amax; outputs contain -inf and NaN)",
        inputs=[(randn((3, 4), 14),)]),
    "train_mlp": dict(
        build=TrainMLP,
        train=True,
        desc="one training step of Linear(8,16)-ReLU-Linear(16,4) with MSE loss (mean) against "
             "`target`: joint forward+backward graph from "
             "torch.export.experimental._export_forward_backward (core ATen); parameters are "
             "graph inputs; outputs are the loss (loss_output) and the gradient of every "
             "parameter (gradient_to_parameter)",
        inputs=[(randn((4, 8), 15), randn((4, 4), 16))]),
    "train_attention": dict(
        build=TrainAttention,
        train=True,
        desc="one training step of causal self-attention (2 heads of 8, 16 positions, q/k/v and "
             "output projections) with MSE loss (mean): joint forward+backward graph from "
             "torch.export.experimental._export_forward_backward (core ATen); outputs are the loss "
             "and the gradient of every parameter",
        inputs=[(randn((2, 16, 16), 19), randn((2, 16, 16), 20))]),
    "train_cnn": dict(
        build=lambda: randomize_bn(TrainCNN()),
        train=True,
        desc="one training step of Conv2d(3,8,3,p1)-BatchNorm2d(8) (train mode)-ReLU-MaxPool2d(2)-"
             "Flatten-Linear(128,5) with cross-entropy loss (mean) against integer `labels`: "
             "joint forward+backward graph from torch.export.experimental._export_forward_backward "
             "(core ATen); parameters and BN buffers are graph inputs; outputs are the new BN "
             "running_mean/running_var/num_batches_tracked (buffer_mutation), the loss "
             "(loss_output) and the gradient of every parameter (gradient_to_parameter); "
             "BN affine params and running stats randomized",
        inputs=[(randn((4, 3, 8, 8), 17),
                 torch.randint(0, 5, (4,), generator=gen(18), dtype=torch.int64))]),
}

# Larger models for `cargo xtask bench` only: generated into the set-up folder, never committed
# (`python testdata/gen.py --out DIR moe_wide`).
BENCH_MODELS = {
    "decoder_rows_bench": dict(
        build=lambda: DecoderRows(vocab=256, dim=512, heads=8, layers=4, max_seq=512, batch=8),
        desc="decoder_rows at benchmark size for `bench serve`: 8 slots, vocab 256, dim 512, 8 heads, "
             "4 layers, K/V caches of 512 positions",
        inputs=[(torch.zeros(8, 1, dtype=torch.long), torch.arange(8))],
        lean_metadata=True),
    "decoder_rows_1b": dict(
        build=lambda: DecoderRows(vocab=32000, dim=2048, heads=16, layers=16, max_seq=256,
                                  batch=8).to(torch.bfloat16),
        desc="decoder_rows 1B-shaped in bf16 for `bench serve`'s time to ready: 8 slots, vocab 32000, "
             "dim 2048, 16 heads, 16 layers (0.93 B parameters, 1.9 GB), K/V caches of 256 positions",
        inputs=[(torch.zeros(8, 1, dtype=torch.long), torch.arange(8))],
        lean_metadata=True,
        large=True),
    "llama_1b_bf16": dict(
        build=build_llama_1b_bf16,
        desc="Llama-3.2-1B-shaped LlamaForCausalLM in bf16 (hidden 2048, inter 8192, 16 layers, 32 heads, "
             "8 kv heads, vocab 128256, tied): 2.5 GB of weights; one forward of 32 tokens",
        inputs=[(ids(32, 30, vocab=128256),)],
        # 16 bf16 layers: the loaded module's decomposed ops drift from eager's by about 2.5%.
        tolerance=5e-2,
        large=True),
    "gpt2_124m": dict(
        build=build_gpt2_124m,
        desc="GPT-2 small (GPT2Config defaults, f32, tied LM head): 500 MB of weights; 32 tokens",
        inputs=[(ids(32, 31, vocab=50257),)],
        large=True),
    "llama_8b_sparse": dict(
        build=build_llama_8b_bf16,
        desc="Llama-3.1-8B-shaped LlamaForCausalLM in bf16 (hidden 4096, inter 14336, 32 layers, 32 heads, "
             "8 kv heads, vocab 128256, untied): 16 GB of zero weights written as holes (no disk); "
             "exported on the meta device, no eager reference",
        inputs=[(ids(32, 32, vocab=128256),)],
        sparse=True),
    "llama_70b_sparse": dict(
        build=build_llama_70b_bf16,
        desc="Llama-3.1-70B-shaped LlamaForCausalLM in bf16 (hidden 8192, inter 28672, 80 layers, 64 heads, "
             "8 kv heads, vocab 128256, untied): 141 GB of zero weights written as holes; exported on the "
             "meta device, no eager reference (for `plan`)",
        inputs=[(ids(32, 32, vocab=128256),)],
        sparse=True),
    "mixtral_8x7b_sparse": dict(
        build=build_mixtral_8x7b_bf16,
        desc="Mixtral-8x7B-shaped MixtralForCausalLM in bf16 (hidden 4096, 8 experts of inter 14336, top-2, "
             "32 layers, 32 heads, 8 kv heads, vocab 32000): 93 GB of zero weights written as holes; exported "
             "on the meta device, no eager reference (for `plan`)",
        inputs=[(ids(32, 32, vocab=32000),)],
        export_context=real_grouped_mm_under_export,
        sparse=True),
    "llama_1b_long": dict(
        build=build_llama_1b_long,
        desc="Llama-3.2-1B-shaped LlamaForCausalLM in bf16 with a dynamic seq Dim('seq', 1..32768): "
             "2.5 GB of zero weights written as holes; exported on the meta device, no eager reference",
        inputs=[(ids(64, 33, vocab=128256),)],
        dynamic_shapes={"input_ids": {1: Dim("seq", min=1, max=32768)}},
        sparse=True),
    "moe_wide": dict(
        build=build_qwen3_moe_wide,
        desc="moe_tiny's architecture at benchmark size: hidden 512, 1 layer, 64 experts, top-8, "
             "moe_intermediate_size 256; 256 tokens, so each _grouped_mm has 2048 rows",
        inputs=[(ids(256, 4),)],
        export_context=real_grouped_mm_under_export,
        graph_has=["torch.ops.aten._grouped_mm.default"],
        graph_lacks=["grouped_mm_fallback"]),
    "gpt_fast_long": dict(
        build=lambda: DecoderRows(vocab=256, dim=256, heads=4, layers=1, max_seq=32768, batch=1),
        desc="decoder_rows_prefill's program (gpt-fast's: the causal mask a [max_seq, max_seq] bool buffer "
             "indexed by the positions) for one row over 32,768 positions: 1 layer, dim 256, 4 heads of 64, "
             "vocab 256; T in 1..32768 tokens a call; the 1 GiB mask buffer and the weights written as "
             "holes (meta device), no eager reference",
        inputs=[(torch.zeros(1, 64, dtype=torch.long), torch.arange(64).view(1, 64))],
        dynamic_shapes={"input_ids": {1: LONG_T}, "input_pos": {1: LONG_T}},
        sparse=True),
    "hf_static_cache_32k": dict(
        build=lambda: HFStaticCacheStep(hidden=256, layers=2, heads=4, kv_heads=2, vocab=256, cache_len=32768),
        desc="hf_static_cache at benchmark size: 2 layers, hidden 256, 4 heads of 64, 2 kv heads, vocab 256, "
             "static caches of 32,768 positions (64 MiB); no eager reference",
        inputs=[(torch.tensor([[5]]), torch.tensor([0]))],
        export_context=torch.no_grad,
        strict=True,
        lean_metadata=True),
    "decoder_kv_4096": dict(
        build=lambda: DecoderKV(vocab=256, dim=512, heads=8, layers=4, max_seq=4096),
        desc="decoder_kv at benchmark size: vocab 256, dim 512, 8 heads, 4 layers, static KV caches "
             "of 4096 positions (64 MiB of caches); decode references from eager",
        inputs=[(torch.tensor([[5]]), torch.tensor([0]))],
        lean_metadata=True,
        decode=decode_reference),
    "avgpool_wide": dict(
        build=lambda: nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
        desc="AvgPool2d(3, stride 1, padding 1, count_include_pad=False) on f32[32,384,25,25]: "
             "its divisor differs at the borders",
        inputs=[(torch.randn(32, 384, 25, 25, generator=gen(7)),)],
        graph_has=["torch.ops.aten.avg_pool2d.default"]),
}


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def flat_outputs(out):
    """Tensor leaves; Python int/bool/float leaves (sizes fixed at export) as the 0-d
    tensors the compiler returns for them: int64, bool, float32 (TPUs have no f64)."""
    leaves, _ = torch.utils._pytree.tree_flatten(out)
    as_tensor = {bool: torch.bool, int: torch.int64, float: torch.float32}
    return [t if isinstance(t, torch.Tensor) else torch.tensor(t, dtype=as_tensor[type(t)]) for t in leaves]


def to_numpy(t):
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.contiguous().numpy()


def max_abs_diff(a, b):
    """Max |a-b| over finite positions; inf if shapes/dtypes/non-finite positions differ."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf")
    if a.dtype == torch.bool or not (a.is_floating_point() or a.is_complex()):
        return float((a.to(torch.int64) - b.to(torch.int64)).abs().max()) if a.numel() else 0.0
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb):
        return float("inf")
    nf = ~fa
    if nf.any():
        x, y = a[nf], b[nf]
        if not torch.equal(torch.isnan(x), torch.isnan(y)) or not torch.equal(
                x[~torch.isnan(x)], y[~torch.isnan(y)]):
            return float("inf")
    if not fa.any():
        return 0.0
    return float((a[fa].double() - b[fa].double()).abs().max())


def compact_json(obj, indent=0):
    """Indented JSON; lists of scalars and flat objects stay on one line."""
    def flat(o):
        if isinstance(o, list):
            return all(not isinstance(x, (list, dict)) for x in o)
        if isinstance(o, dict):
            return all(not isinstance(v, (list, dict)) or (isinstance(v, list) and flat(v))
                       for v in o.values())
        return True

    if flat(obj):
        return json.dumps(obj)
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(obj, list):
        items = [inner + compact_json(x, indent + 1) for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    items = [inner + json.dumps(k) + ": " + compact_json(v, indent + 1) for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n" + pad + "}"


def tensor_desc(name, t):
    return {"name": name, "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}


def archive_info(path):
    """Read straight from the zip: FQNs in the weights/constants payload configs,
    and the node targets (with counts) of the serialized graph."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        root = names[0].split("/")[0]
        keys = {}
        for kind in ("weights", "constants"):
            cfg = json.loads(zf.read(f"{root}/data/{kind}/model_{kind}_config.json"))["config"]
            keys[kind] = sorted(cfg)
        graph = json.loads(zf.read(f"{root}/models/model.json"))["graph_module"]["graph"]
    ops = {}
    for node in graph["nodes"]:
        ops[node["target"]] = ops.get(node["target"], 0) + 1
    return keys, dict(sorted(ops.items()))


def range_constraints(ep):
    out = {}
    for sym, vr in ep.range_constraints.items():
        lo, hi = vr.lower, vr.upper
        # torch's integer infinities (`int_oo`) are not sympy's `oo`: test for a finite number.
        finite = lambda b: int(b) if b.is_Integer else None  # noqa: E731
        out[str(sym)] = [finite(lo), finite(hi)]
    return out


def local_prefixes():
    """Absolute folders of this machine that export metadata would otherwise leak."""
    import site
    import sysconfig

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pairs = [(repo + os.sep, "")]
    for sp in site.getsitepackages() + [sysconfig.get_paths()["purelib"]]:
        pairs.append((sp + os.sep, "<site-packages>/"))
    for lib in {sysconfig.get_paths()["stdlib"]}:
        pairs.append((lib + os.sep, "<stdlib>/"))
    # longest first, so nested folders win over their parents
    return sorted(set(pairs), key=lambda p: -len(p[0]))


def strip_local_paths(ep):
    """Rewrites absolute file paths in node stack traces to repo-relative or symbolic ones,
    so the committed archives hold no paths of the machine that generated them."""
    prefixes = local_prefixes()
    for node in ep.graph.nodes:
        trace = node.meta.get("stack_trace")
        if not trace:
            continue
        for old, new in prefixes:
            trace = trace.replace(old, new)
        node.meta["stack_trace"] = trace


def generate(name, spec, outdir):
    if spec.get("train"):
        return generate_train(name, spec, outdir)
    if spec.get("sparse"):
        return generate_sparse(name, spec, outdir)
    torch.manual_seed(0)
    model = spec["build"]().eval()
    cases = spec["inputs"]
    dyn = spec.get("dynamic_shapes")
    base = cases[0]
    note = None

    # export_context: a context manager held around torch.export.export only (moe_tiny)
    export_context = spec.get("export_context", contextlib.nullcontext)
    try:
        with export_context():
            ep = torch.export.export(model, base, dynamic_shapes=dyn, strict=spec.get("strict", False))
    except Exception as e:  # noqa: BLE001 - fall back to a static export
        if dyn is None:
            raise
        note = f"dynamic export failed ({type(e).__name__}: {str(e).splitlines()[0]}); exported static"
        print(f"[{name}] WARNING: {note}", file=sys.stderr)
        dyn, cases = None, cases[:1]
        with export_context():
            ep = torch.export.export(model, base, strict=False)
    ep = ep.run_decompositions()
    strip_local_paths(ep)
    if spec.get("lean_metadata"):
        # Keeps the archive small (stack traces and node provenance are most of its graph);
        # exports may lack both.
        for node in ep.graph.nodes:
            node.meta.pop("stack_trace", None)
            node.meta.pop("from_node", None)

    path = os.path.join(outdir, f"{name}.pt2")
    torch.export.save(ep, path)

    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):  # start clean
        if f.endswith(".npy"):
            os.remove(os.path.join(d, f))

    # every tensor the archive carries, keyed by FQN, with its digest (not for the large
    # benchmark models: hashing gigabytes)
    if spec.get("large"):
        tensors, digests, (keys, ops) = None, None, archive_info(path)
    else:
        tensors, digests, keys, ops = state_dict_digests(ep, path)
    # graph_has: targets the saved graph must hold; graph_lacks: substrings no target may hold
    missing = [t for t in spec.get("graph_has", []) if t not in ops]
    assert not missing, f"{name}: graph lacks {missing}"
    unwanted = [t for t in ops for bad in spec.get("graph_lacks", []) if bad in t]
    assert not unwanted, f"{name}: graph holds {unwanted}"

    loaded_ep = torch.export.load(path)
    loaded = loaded_ep.module()
    # the archive's weights must round-trip bit for bit
    for k, v in list(loaded_ep.state_dict.items()) + list(loaded_ep.constants.items()):
        if isinstance(v, torch.Tensor) and tensors is not None:
            assert v.dtype == tensors[k].dtype and torch.equal(v, tensors[k]), k

    in_names = list(ep.graph_signature.user_inputs)
    out_names = [str(o) for o in ep.graph_signature.user_outputs]
    meta_cases, worst = [], 0.0
    for k, args in enumerate(cases):
        suffix = "" if k == 0 else f"_case{k}"
        # The loaded module runs the decomposed graph (attention's scores whole): a case larger
        # than `loaded_numel_max` (a 32,768-token prompt) is checked against eager only.
        whole = all(t.numel() <= spec.get("loaded_numel_max", float("inf")) for t in args)
        # fresh_state: each case is a first call from the initial buffers (a module that keeps
        # state between calls, such as a static cache), as `run` makes it from the artifact.
        eager_model, loaded_model = model, loaded
        if spec.get("fresh_state"):
            eager_model, loaded_model = copy.deepcopy(model), torch.export.load(path).module()
        with torch.no_grad():
            eager = flat_outputs(eager_model(*args))
            got = flat_outputs(loaded_model(*args)) if whole else eager
        assert len(eager) == len(got) == len(out_names), (len(eager), len(got), out_names)
        assert len(args) == len(in_names)
        diff = max(max_abs_diff(a, b) for a, b in zip(eager, got))
        worst = max(worst, diff)
        for i, t in enumerate(args):
            np.save(os.path.join(d, f"in_{i}{suffix}.npy"), to_numpy(t))
        for i, t in enumerate(eager):
            np.save(os.path.join(d, f"out_{i}{suffix}.npy"), to_numpy(t))
        meta_cases.append({
            "case": "base" if k == 0 else f"case{k}",
            "inputs": [tensor_desc(n, t) for n, t in zip(in_names, args)],
            "outputs": [tensor_desc(n, t) for n, t in zip(out_names, eager)],
            "max_abs_diff_eager_vs_loaded": diff,
        })
        print(f"[{name}] {meta_cases[-1]['case']}: inputs "
              f"{[tuple(t.shape) for t in args]} max|eager-loaded|={diff:.3g}")
        # bf16 keeps 8 significant bits: the loaded module's decomposed ops round differently
        # from eager's fused kernels by a few units in the last place.
        floats = [float(t.float().abs().max()) for t in eager if t.is_floating_point() and t.numel()]
        scale = max(floats + [1.0])
        half = any(t.dtype in (torch.bfloat16, torch.float16) for t in eager)
        bound = spec.get("tolerance", 2e-2 if half else 1e-4) * (scale if half else 1.0)
        assert diff <= bound, f"{name}: loaded module differs from eager ({diff}, bound {bound})"

    # Inputs the export's guards exclude: the loaded module must refuse each, naming a guard.
    excluded = []
    for k, args in enumerate(spec.get("excluded", [])):
        try:
            loaded(*args)
        except Exception as e:  # noqa: BLE001 - what torch raises for a failed guard
            message = str(e).splitlines()[0]
        else:
            raise AssertionError(f"{name}: the loaded module accepts excluded case {k}")
        assert "Guard failed" in message, f"{name}: excluded case {k}: {message}"
        for i, t in enumerate(args):
            np.save(os.path.join(d, f"in_{i}_excluded{k}.npy"), to_numpy(t))
        excluded.append({"inputs": [tensor_desc(n, t) for n, t in zip(in_names, args)], "refused": message})
        print(f"[{name}] excluded{k}: inputs {[tuple(t.shape) for t in args]} refused: {message}")

    import transformers

    meta = {
        "name": name,
        "description": spec["desc"],
        "dynamic": dyn is not None,
        "range_constraints": range_constraints(ep),
        "cases": meta_cases,
        "max_abs_diff_eager_vs_loaded": worst,
        **({"excluded": excluded} if excluded else {}),
        "num_params": sum(p.numel() for p in model.parameters()),
        "state_dict_keys": {"weights": keys["weights"], "constants": keys["constants"]},
        "ops": ops,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
    }
    if note:
        meta["note"] = note
    if spec.get("state_dict_of"):
        # The same weights as another model: its digests stand for this one's.
        with open(os.path.join(outdir, spec["state_dict_of"], "meta.json")) as f:
            other = json.load(f)["state_dict"]
        assert other == digests, f"{name}: its weights differ from {spec['state_dict_of']}'s"
        meta["state_dict_of"] = spec["state_dict_of"]
    if spec.get("decode"):
        meta["decode"] = spec["decode"](model, d)
    if digests is not None and not spec.get("state_dict_of"):
        meta["state_dict"] = digests
    with open(os.path.join(d, "meta.json"), "w") as f:
        f.write(compact_json(meta) + "\n")
    print(f"[{name}] wrote {path} ({os.path.getsize(path)} bytes)")


def generate_sparse(name, spec, outdir):
    """A model too large for this machine's memory or disk, for the memory bound: built and
    exported on the meta device, then written as an archive whose weight files are holes (zeros
    written by seek) with their true sizes and CRC-32s. Only its inputs are saved: there is no
    eager reference to compare with."""
    import tempfile

    with torch.device("meta"):
        model = spec["build"]().eval()
    args = spec["inputs"][0]
    with spec.get("export_context", contextlib.nullcontext)():
        ep = torch.export.export(model, tuple(a.to("meta") for a in args),
                                 dynamic_shapes=spec.get("dynamic_shapes"), strict=False)
    ep = ep.run_decompositions()
    strip_local_paths(ep)
    path = os.path.join(outdir, f"{name}.pt2")
    with tempfile.TemporaryDirectory() as tmp:
        plain = os.path.join(tmp, f"{name}.pt2")  # the archive's root folder is named after it
        torch.export.save(ep, plain)  # every meta tensor is a 0-byte record of one shared file
        write_sparse_archive(plain, path, ep)
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    for i, t in enumerate(args):
        np.save(os.path.join(d, f"in_{i}.npy"), to_numpy(t))
    params = sum(p.numel() for p in model.parameters())
    print(f"[{name}] wrote {path} ({os.path.getsize(path)} bytes, {params} parameters, sparse)")


ELEMENT_BYTES = {13: 2, 7: 4, 6: 2, 5: 8, 4: 4, 12: 1}  # export schema dtype codes: bf16, f32, f16, i64, i32, bool


def write_sparse_archive(plain, path, ep):
    """Rewrites the archive `plain` (meta tensors: 0-byte payloads) as `path`, where every
    weight and constant gets its own payload file of its true size, written as a hole, and the
    configs point each FQN at it (tensors that are one object, tied weights, share a file). The
    payloads are 64-byte aligned and stored, as torch writes them; zip64 where offsets pass 4 GiB."""
    with zipfile.ZipFile(plain) as zf:
        names = zf.namelist()
        root = names[0].split("/")[0]
        entries = []  # (name, bytes) or (name, size of zeros)
        payloads = {}
        for kind, tensors, prefix in (("weights", ep.state_dict, "weight_"), ("constants", ep.constants, "tensor_")):
            config = json.loads(zf.read(f"{root}/data/{kind}/model_{kind}_config.json"))
            files = {}
            for fqn in sorted(config["config"]):
                meta = config["config"][fqn]["tensor_meta"]
                sizes = [s["as_int"] for s in meta["sizes"]]
                numel = int(np.prod(sizes)) if sizes else 1
                key = id(tensors[fqn])
                if key not in files:
                    files[key] = f"{prefix}{len(files)}"
                    payloads[f"{root}/data/{kind}/{files[key]}"] = numel * ELEMENT_BYTES[meta["dtype"]]
                strides, acc = [], 1
                for n in reversed(sizes):
                    strides.insert(0, {"as_int": acc})
                    acc *= n
                meta["strides"], meta["storage_offset"] = strides, {"as_int": 0}
                meta["device"] = {"type": "cpu", "index": None}
                config["config"][fqn]["path_name"] = files[key]
            payloads[f"{root}/data/{kind}/model_{kind}_config.json"] = json.dumps(config).encode()
        for n in names:
            if n in payloads or n.startswith((f"{root}/data/weights/weight_", f"{root}/data/constants/tensor_")):
                continue
            data = zf.read(n)
            if n.endswith("models/model.json"):
                data = data.replace(b'"type": "meta"', b'"type": "cpu"').replace(b'"type":"meta"', b'"type":"cpu"')
            entries.append((n, data))
        entries = sorted(payloads.items()) + entries  # payloads first, as torch writes them
    crc_of_zeros = {}

    def zeros_crc(n):
        if n not in crc_of_zeros:
            crc, block, left = 0, bytes(1 << 24), n
            while left:
                k = min(left, len(block))
                crc = zlib.crc32(block[:k] if k < len(block) else block, crc)
                left -= k
            crc_of_zeros[n] = crc
        return crc_of_zeros[n]

    with open(path, "wb") as f:
        records = []
        for n, data in entries:
            name = n.encode()
            size = data if isinstance(data, int) else len(data)
            crc = zeros_crc(size) if isinstance(data, int) else zlib.crc32(data)
            at = f.tell()
            pad = (-(at + 30 + len(name) + 4)) % 64
            extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0x21, crc, size, size, len(name), len(extra)))
            f.write(name + extra)
            if isinstance(data, int):
                f.seek(size, 1)
            else:
                f.write(data)
            records.append((name, at, size, crc))
        directory_at = f.tell()
        for name, at, size, crc in records:
            extra = struct.pack("<HHQ", 1, 8, at) if at >= 0xFFFFFFFF else b""
            f.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0x21, crc, size, size,
                                len(name), len(extra), 0, 0, 0, 0, min(at, 0xFFFFFFFF)))
            f.write(name + extra)
        end64_at = f.tell()
        size, count = end64_at - directory_at, len(records)
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, size, directory_at))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, end64_at, 1))
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                            min(size, 0xFFFFFFFF), min(directory_at, 0xFFFFFFFF), 0))


# The names the compiler gives torch's dtypes (`DType`'s printed names).
DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
               torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
               torch.uint8: "u8", torch.bool: "bool"}


def state_dict_digests(ep, path):
    """Every tensor the archive carries (ep.state_dict and tensor ep.constants), keyed by FQN:
    its dtype, shape and the sha256 of its contiguous bytes, which the compiler's reading of
    the archive must reproduce bit for bit (complex tensors as their (real, imaginary) pairs,
    as the compiler reads them). Returns (the tensors, their digests, payload keys, graph op targets with counts)."""
    tensors = {}
    for k, v in ep.state_dict.items():
        tensors[k] = v.detach()
    for k, v in ep.constants.items():
        if isinstance(v, torch.Tensor):
            tensors[k] = v.detach()
    keys, ops = archive_info(path)
    assert sorted(tensors) == sorted(keys["weights"] + keys["constants"]), (sorted(tensors), keys)
    digests = {}
    for k in sorted(tensors):
        v = tensors[k]
        v = (torch.view_as_real(v) if v.is_complex() else v).contiguous()
        raw = v.reshape(-1).view(torch.uint8).numpy().tobytes()
        digests[k] = {"dtype": DTYPE_NAMES[v.dtype], "shape": list(v.shape), "sha256": hashlib.sha256(raw).hexdigest()}
    return tensors, digests, keys, ops


def spec_kind(kind):
    return kind.name.lower()  # InputKind.PARAMETER -> "parameter", OutputKind.LOSS_OUTPUT -> ...


def generate_train(name, spec, outdir):
    """One training step as a graph: export the forward (which returns the loss) in train
    mode, then `_export_forward_backward` builds the joint forward+backward graph and
    decomposes it with the core ATen table; `run_decompositions()` after it changes only
    node names.  The graph takes the parameters (input kind `parameter`), then the buffers
    (`buffer`, e.g. BatchNorm running stats), then the user inputs, and returns the new
    value of every buffer the step updates (`buffer_mutation`, target = the buffer's FQN),
    the loss (`loss_output`) and one gradient per parameter (`gradient_to_parameter`,
    target = the parameter's FQN).  References: eager `loss.backward()` on a copy of the
    model with the same weights and buffers (the buffers' values after that step are the
    buffer_mutation references).  `ExportedProgram.module()` cannot run a joint
    graph (its out_spec holds only the loss), so the loaded archive is checked by calling its
    graph module on the flat inputs in input-spec order."""
    from torch.export.experimental import _export_forward_backward
    from torch.export.graph_signature import InputKind, OutputKind

    torch.manual_seed(0)
    model = spec["build"]().train()
    assert len(spec["inputs"]) == 1 and not spec.get("dynamic_shapes")
    args = spec["inputs"][0]

    ep = torch.export.export(model, args, strict=False)
    ep = _export_forward_backward(ep, joint_loss_index=0)
    ep = ep.run_decompositions()
    strip_local_paths(ep)
    if spec.get("lean_metadata"):
        # Keeps the archive small (stack traces and node provenance are most of its graph);
        # exports may lack both.
        for node in ep.graph.nodes:
            node.meta.pop("stack_trace", None)
            node.meta.pop("from_node", None)

    path = os.path.join(outdir, f"{name}.pt2")
    torch.export.save(ep, path)

    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):  # start clean
        if f.endswith(".npy"):
            os.remove(os.path.join(d, f))
    tensors, digests, keys, ops = state_dict_digests(ep, path)

    # eager reference: loss.backward() on a copy with the same weights and buffers (the
    # step updates buffers in place, and ep.state_dict shares storage with the model)
    import copy

    step = copy.deepcopy(model)
    params = dict(step.named_parameters())
    buffers = dict(step.named_buffers())
    step.zero_grad(set_to_none=True)
    loss = step(*args)
    loss.backward()
    out_specs = ep.graph_signature.output_specs
    eager = []
    for s in out_specs:
        if s.kind == OutputKind.LOSS_OUTPUT:
            eager.append(loss.detach().clone())
        elif s.kind == OutputKind.GRADIENT_TO_PARAMETER:
            eager.append(params[s.target].grad.detach().clone())
        elif s.kind == OutputKind.BUFFER_MUTATION:
            eager.append(buffers[s.target].detach().clone())
        else:
            raise AssertionError(f"unexpected output kind {s.kind} ({s.arg.name})")
    del step
    kinds = [s.kind for s in out_specs]
    assert kinds.count(OutputKind.LOSS_OUTPUT) == 1, kinds
    assert sorted(s.target for s in out_specs if s.kind == OutputKind.GRADIENT_TO_PARAMETER) == \
        sorted(params), out_specs
    mutated = [s.target for s in out_specs if s.kind == OutputKind.BUFFER_MUTATION]
    assert sorted(mutated) == sorted(k for k, v in buffers.items()
                                     if not torch.equal(v, model.get_buffer(k))), (mutated, out_specs)

    loaded_ep = torch.export.load(path)
    for k, v in list(loaded_ep.state_dict.items()) + list(loaded_ep.constants.items()):
        if isinstance(v, torch.Tensor):
            assert v.dtype == tensors[k].dtype and torch.equal(v, tensors[k]), k
    assert [(s.kind, s.arg.name, s.target) for s in loaded_ep.graph_signature.output_specs] == \
        [(s.kind, s.arg.name, s.target) for s in out_specs]
    in_specs = loaded_ep.graph_signature.input_specs
    user = iter(args)
    flat = []
    for s in in_specs:
        if s.kind == InputKind.PARAMETER:
            flat.append(loaded_ep.state_dict[s.target])
        elif s.kind == InputKind.BUFFER:
            src = loaded_ep.state_dict if s.persistent else loaded_ep.constants
            flat.append(src[s.target].clone())
        elif s.kind == InputKind.USER_INPUT:
            flat.append(next(user))
        else:
            raise AssertionError(f"unexpected input kind {s.kind} ({s.arg.name})")
    with torch.no_grad():
        got = flat_outputs(loaded_ep.graph_module(*flat))
    assert len(got) == len(eager), (len(got), len(eager))
    diff = max(max_abs_diff(a, b) for a, b in zip(eager, got))
    print(f"[{name}] base: inputs {[tuple(t.shape) for t in args]} max|eager-loaded|={diff:.3g}")
    assert diff <= 1e-5, f"{name}: loaded graph differs from eager ({diff})"

    for i, t in enumerate(args):
        np.save(os.path.join(d, f"in_{i}.npy"), to_numpy(t))
    # As `run` names them: updated buffers as state_<fqn>.npy, the other outputs (loss,
    # gradients) as out_<j>.npy in graph order.
    others = 0
    for s, t in zip(out_specs, eager):
        if s.kind == OutputKind.BUFFER_MUTATION:
            file = f"state_{s.target}.npy"
        else:
            file, others = f"out_{others}.npy", others + 1
        np.save(os.path.join(d, file), to_numpy(t))

    in_names = list(ep.graph_signature.user_inputs)
    assert len(in_names) == len(args)
    by_name = {**{s.arg.name: tensors[s.target] for s in in_specs
                  if s.kind in (InputKind.PARAMETER, InputKind.BUFFER)},
               **dict(zip(in_names, args))}
    outputs = []
    for s, t in zip(out_specs, eager):
        o = tensor_desc(s.arg.name, t)
        o["kind"] = spec_kind(s.kind)
        o["target"] = s.target
        outputs.append(o)
    graph_inputs = []
    for s in ep.graph_signature.input_specs:
        o = tensor_desc(s.arg.name, by_name[s.arg.name])
        o["kind"] = spec_kind(s.kind)
        o["target"] = s.target
        graph_inputs.append(o)

    import transformers

    meta = {
        "name": name,
        "description": spec["desc"],
        "dynamic": False,
        "training_step": True,
        "export": "torch.export.export(strict=False) in train mode -> "
                  "torch.export.experimental._export_forward_backward(joint_loss_index=0) -> "
                  "run_decompositions()",
        "range_constraints": range_constraints(ep),
        "graph_inputs": graph_inputs,
        "cases": [{
            "case": "base",
            "inputs": [tensor_desc(n, t) for n, t in zip(in_names, args)],
            "outputs": outputs,
            "max_abs_diff_eager_vs_loaded": diff,
        }],
        "max_abs_diff_eager_vs_loaded": diff,
        "num_params": sum(p.numel() for p in model.parameters()),
        "state_dict_keys": {"weights": keys["weights"], "constants": keys["constants"]},
        "ops": ops,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
        "state_dict": digests,
    }
    with open(os.path.join(d, "meta.json"), "w") as f:
        f.write(compact_json(meta) + "\n")
    print(f"[{name}] wrote {path} ({os.path.getsize(path)} bytes)")


def dir_size(p):
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def save_check_model(ep, outdir, name):
    """Writes `<outdir>/<name>.pt2` (local paths stripped) and lists its ops."""
    strip_local_paths(ep)
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, f"{name}.pt2")
    torch.export.save(ep, path)
    targets = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})
    print(f"[{name}] wrote {path}: {targets}")


def generate_unsupported(outdir):
    """`check/unsupported_ops.pt2`: a real export whose graph holds a custom op
    (`torch.ops.testlib.scale_rows`, outside ATen: no compiler can lower it) between ATen ops
    (`sort`, `flip`). `check` must name it; the model is never compiled."""
    lib_op = getattr(torch.ops.testlib, "scale_rows", None) if hasattr(torch.ops, "testlib") else None
    if lib_op is None:
        @torch.library.custom_op("testlib::scale_rows", mutates_args=())
        def scale_rows(x: torch.Tensor, s: float) -> torch.Tensor:
            return x * s

        @scale_rows.register_fake
        def _(x, s):
            return torch.empty_like(x)

    class Unsupported(nn.Module):
        def forward(self, x):
            y = torch.sort(x, dim=-1).values
            z = torch.ops.testlib.scale_rows(y, 2.0)
            return torch.flip(z, [0]) + 1

    torch.manual_seed(0)
    ep = torch.export.export(Unsupported(), (torch.randn(3, 4),), strict=False).run_decompositions()
    save_check_model(ep, outdir, "unsupported_ops")


def generate_undecomposed(outdir):
    """`check/undecomposed.pt2`: a program saved as `torch.export.export` writes it, without
    `run_decompositions()`: it holds `aten.linear.default` (not Core ATen, not lowered) and
    `aten.reshape.default` (whose sizes are named `shape`). `check` must name `linear` alone
    and say how to decompose it; the model is never compiled."""

    class Undecomposed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 6)

        def forward(self, x):
            return self.fc(x).reshape(2, -1)

    torch.manual_seed(0)
    ep = torch.export.export(Undecomposed(), (torch.randn(3, 4),), strict=False)
    ops = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert ops == {"aten.linear.default", "aten.reshape.default"}, ops
    save_check_model(ep, outdir, "undecomposed")


def generate_flip_seq(outdir):
    """`check/flip_seq.pt2`: a dynamic-seq model that reverses the sequence (`flip` along
    Dim('seq', min=2, max=64)). In a size bucket the padding would move in front of the real
    positions, so bucketing must refuse it, naming the node; the model is never run."""

    class FlipSeq(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 4)

        def forward(self, x):  # x: f32[2, seq, 8]
            return torch.flip(self.proj(x), [1])

    torch.manual_seed(0)
    seq = Dim("seq", min=2, max=64)
    ep = torch.export.export(FlipSeq(), (torch.randn(2, 5, 8),), dynamic_shapes={"x": {1: seq}},
                             strict=False).run_decompositions()
    save_check_model(ep, outdir, "flip_seq")


def generate_as_strided_gaps(outdir):
    """`check/as_strided_gaps.pt2`: `as_strided` of a stepped slice (`x[:, ::2]`, strides
    [4, 2]): its storage holds the elements the slice skips, which the program does not have, so
    the import must refuse it, naming the node; the model is never run."""

    class Gaps(nn.Module):
        def forward(self, x):  # x: f32[3, 4]
            return torch.as_strided(x[:, ::2], (3, 2), (4, 1))

    torch.manual_seed(0)
    ep = torch.export.export(Gaps(), (torch.randn(3, 4),), strict=False).run_decompositions()
    save_check_model(ep, outdir, "as_strided_gaps")


def generate_item_float(outdir):
    """`check/item_float.pt2`: returns `x.sum().item() / 2`, a Python float computed from data,
    which the compiled program returns as a 0-d f32 (as floats computed from sizes, in
    `models/size_floats`)."""

    class ItemFloat(nn.Module):
        def forward(self, x):  # x: f32[3, 4]
            return x * 2, x.sum().item() / 2

    torch.manual_seed(0)
    ep = torch.export.export(ItemFloat(), (torch.randn(3, 4),), strict=False).run_decompositions()
    save_check_model(ep, outdir, "item_float")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "models"))
    ap.add_argument("names", nargs="*", help=f"subset of {list(MODELS)}, or of {list(BENCH_MODELS)} (benchmarks)")
    a = ap.parse_args()
    names = [n for n in a.names if n != "checks"] if a.names else list(MODELS)
    known = {**MODELS, **BENCH_MODELS}
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {list(known)}")
    os.makedirs(a.out, exist_ok=True)
    for n in names:
        generate(n, known[n], a.out)
    if any(n in BENCH_MODELS for n in names):
        return
    if not a.names or "checks" in a.names:
        check_dir = os.path.join(os.path.dirname(os.path.abspath(a.out)), "check")
        generate_unsupported(check_dir)
        generate_undecomposed(check_dir)
        generate_flip_seq(check_dir)
        generate_as_strided_gaps(check_dir)
        generate_item_float(check_dir)
    total = dir_size(a.out)
    for extra in ("bad", "check"):
        folder = os.path.join(os.path.dirname(os.path.abspath(a.out)), extra)
        if os.path.isdir(folder):
            total += dir_size(folder)
    print(f"total test data size: {total} bytes ({total / 2**20:.2f} MiB; budget 32 MiB)")
    if total >= 32 * 2**20:
        print("ERROR: over the 32 MiB budget", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
