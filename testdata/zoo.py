#!/usr/bin/env python3
"""The architecture sweep (`cargo xtask zoo`): a tiny random-init instance of every model type
in transformers' auto mappings (causal LM, masked LM, sequence classification, image
classification, encoder-decoder LM, audio classification, and AutoModel for the types none of
those has: task `base`), every model of torchvision's
registry (classification, segmentation, video, detection: tasks `tv-*`, at their own sizes),
one model of each of timm's families (task `timm`) and diffusers' model classes (task
`diffusers`, tiny configs in zoo_diffusers.py), exported — at one size (non-strict, then
strict), with a dynamic batch and sequence (a waveform's time for audio; batch only for
images, latents and fixed-size audio features), and with its more dims dynamic (an image's
height and width, an encoder-decoder's two lengths apart) — compiled with torchtpu-compile for CPU with
size buckets and for `tpu:v6e:1x1`, run at several sizes on CPU and compared with eager.
Writes each library's section of docs/zoo.md, keeping the sections of the others.

    python testdata/zoo.py --compiler target/release/torchtpu-compile --out DIR [--tasks causal-lm,...]
                           [--only TYPE,...] [--limit N] [--no-tpu]

Everything it makes goes under DIR (the set-up folder's `zoo/`), never into git; a model's
results are kept in DIR/<task>/<type>/result.json, so a rerun skips what is done, and so does a
run on another machine for the rows the table already holds (--again redoes everything;
--recheck compiles and runs again, from the same exports, what did not pass, as after a change
to the compiler; --add-tpu compiles for `tpu:v6e:1x1` only, from the same exports, what passed
with --no-tpu: the CPU verdicts stand, and a TPU compile that fails becomes the row's outcome;
a row the table holds as passed without a TPU compile, and this machine has no export of, is
swept again in full).
Each model is exported in a child process with a time limit, so one that hangs or crashes torch
is recorded, not fatal. A row's archives are removed once its verdicts are all recorded and
passed (torchvision's and timm's take hundreds of MB each; --keep-exports keeps them), and the
sweep stops, keeping every row so far, when less than 4 GiB is free: a full disk would fail
exports in ways recorded as the model's.

Outcomes, per column (static, dynamic):
  EXPORT   torch.export failed (torch's error, first line), or the program it wrote differs
           from eager (ExportDiffers: no compiler could match eager from that archive)
  PASS     compiles and equals eager at every size tried
  REFUSED  the compiler refused it (exit 1), with the op and reason it named
  WRONG    compiled and ran, but a result differs from eager
  CRASH    the compiler panicked, aborted or was killed (exit >= 101 or a signal), or hung
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import traceback

import zoo_table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TASKS = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq-cls": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "image-cls": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "audio-cls": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    # AutoModel, for the model types no task above has (multimodal models, vision and audio
    # encoders, detectors, codecs): each called on its main input alone.
    "base": "MODEL_MAPPING_NAMES",
}
# What `base` feeds a model, by its main input's name (beside it, fixed companions: find_companions).
BASE_INPUTS = {"input_ids": "tokens", "pixel_values": "image", "input_values": "audio",
               "input_features": "features"}
# torchvision's model families (its registry of builders), at their own sizes, random-init.
VISION_TASKS = {
    "tv-cls": "torchvision.models",
    "tv-seg": "torchvision.models.segmentation",
    "tv-video": "torchvision.models.video",
    "tv-det": "torchvision.models.detection",
}
# Tasks compared by `run`'s default rule (a tolerance relative to the output's scale).
SCALE_RULE_TASKS = set(VISION_TASKS) | {"timm", "diffusers"}
# torchvision and timm models larger than this are not swept (their rows say so).
MAX_VISION_PARAMS = 100_000_000
# The side of torchvision's images (ViT is built for it), and of those that need more (Inception
# needs 75 pixels; MaxViT's windows divide only its own 224).
VISION_IMAGE = 64
VISION_IMAGE_OF = {"inception_v3": 128, "maxvit_t": 224, "s3d": 224, "mvit_v1_b": 224, "mvit_v2_s": 224}
# Frames of a video clip (MViT's positions and S3D's last pooling need 16).
VISION_FRAMES, VISION_FRAMES_OF = 8, {"s3d": 16, "mvit_v1_b": 16, "mvit_v2_s": 16}

# Every (batch, seq) the dynamic export is run at: 1 (or the smallest seq), the edges of the
# `auto:2` buckets (batch 4 and 8; seq 32 and 64) and each edge - 1, sizes in the middle.
DYN_PAIRS = [(2, 16), (1, None), (3, 31), (4, 32), (5, 33), (7, 63), (8, 64), (1, 40), (8, 2)]
# Image sides: the kinds whose input is an image (or image-like latents) of a height and width
# that models take at many sizes, exported with both sides `Dim.AUTO` from half to twice the side
# the row uses; the sizes tried, as fractions of that side (height, width).
SIDES_KINDS = ("image", "tv-cls", "tv-seg", "diffusers")
SIDE_FRACTIONS = [(1, 1), (0.5, 0.5), (2, 2), (0.5, 2), (2, 0.5), (0.75, 1.25), (1.5, 0.625), (0.875, 1.125),
                  (1.25, 0.75), (1.75, 1.75)]
# An encoder-decoder's lengths: the encoder's and the decoder's tokens, each `Dim.AUTO` over
# 2..64 at batch 1; the pairs tried (source, target): both edges of the `auto:2` buckets, each
# edge - 1 and + 1, and lengths far apart either way.
LENGTH_PAIRS = [(16, 16), (2, 2), (3, 7), (9, 17), (17, 9), (31, 33), (33, 31), (64, 64), (64, 2), (2, 64),
                (5, 40)]
# Sizes the loaded module refuses (its guards) kept as cases that the compiler must refuse too.
MAX_EXCLUDED = 2
VOCAB = 128
IMAGE = 32
# A waveform's samples per sequence step: the dynamic time of `input_values` runs over
# 800..6400 samples (the 320× downsampling feature encoders of wav2vec2 and its kin).
SAMPLES = 100

# Config fields set on every config that has them: small enough to build and export in seconds.
SMALL = {
    "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128,
    "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 128, "d_model": 32, "d_ff": 64, "d_kv": 16,
    "num_layers": 2, "num_heads": 2, "ffn_dim": 64, "encoder_layers": 2, "decoder_layers": 2,
    "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16, "n_shared_experts": 1,
    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0, "embed_dim": 16, "image_size": IMAGE,
    "patch_size": 4, "num_channels": 3, "num_labels": 4, "type_vocab_size": 2, "embedding_size": 32,
    "sliding_window": 16, "attention_chunk_size": 16, "pad_token_id": 0, "bos_token_id": 1,
    "eos_token_id": 2, "decoder_start_token_id": 0, "sep_token_id": 2, "cls_token_id": 1,
    "rotary_dim": 8, "max_source_positions": 16, "num_mel_bins": 16,
}
# Set even where the config lacks them (models that read them unconditionally).
ALWAYS = {"pad_token_id": 0}


# ------------------------------------------------------------------------------------------------
# worker: one model type, exported in a child process
# ------------------------------------------------------------------------------------------------
def tiny_config(model_type):
    from transformers import CONFIG_MAPPING

    cfg = CONFIG_MAPPING[model_type]()
    shrink(cfg)
    cfg._attn_implementation = None
    return cfg


def shrink(cfg, depth=0):
    """Sets the SMALL fields of `cfg` and of its sub-configs (the text, audio and vision
    configs of a multimodal model), to a bounded depth."""
    from transformers import PretrainedConfig

    for k, v in SMALL.items():
        if hasattr(cfg, k) and not isinstance(getattr(cfg, k), (list, dict)) and getattr(cfg, k) is not None:
            try:
                setattr(cfg, k, v)
            except Exception:  # noqa: BLE001 - read-only properties
                pass
    for k, v in ALWAYS.items():
        if getattr(cfg, k, None) is None:
            try:
                setattr(cfg, k, v)
            except Exception:  # noqa: BLE001
                pass
    # Multi-head latent attention ropes `qk_rope_head_dim` of each head.
    if getattr(cfg, "qk_rope_head_dim", None):
        if hasattr(cfg, "head_dim"):
            cfg.head_dim = cfg.qk_rope_head_dim
        if hasattr(cfg, "num_key_value_heads"):
            cfg.num_key_value_heads = cfg.num_attention_heads
    # Per-layer lists follow the layer count.
    layers = getattr(cfg, "num_hidden_layers", None)
    for k in ("layer_types", "layers_block_type", "block_types"):
        v = getattr(cfg, k, None)
        if isinstance(v, list) and layers and len(v) != layers:
            setattr(cfg, k, (v * layers)[:layers])
    for k in ("depths", "hidden_sizes", "num_heads", "embed_dims", "widths"):
        v = getattr(cfg, k, None)
        if isinstance(v, list) and len(v) > 2:
            small = {"depths": 1, "hidden_sizes": 16, "num_heads": 2, "embed_dims": 16, "widths": 16}[k]
            setattr(cfg, k, [small * (2 ** i if k != "depths" and k != "num_heads" else 1) for i in range(2)])
    if depth < 3:
        for v in list(vars(cfg).values()):
            if isinstance(v, PretrainedConfig):
                shrink(v, depth + 1)


def vision_types(task):
    import importlib

    import torchvision

    return sorted(torchvision.models.list_models(module=importlib.import_module(VISION_TASKS[task])))


def build_vision(task, model_type):
    """A torchvision model, random-init, with few classes and `VISION_IMAGE` inputs."""
    import torch
    import torchvision

    kw = {"weights": None}
    if task == "tv-seg":
        kw.update(num_classes=4, weights_backbone=None, aux_loss=False)
    elif task == "tv-det":
        kw.update(num_classes=4, weights_backbone=None)
        if not model_type.startswith("ssd"):  # SSD's builders fix their own size
            kw.update(min_size=VISION_IMAGE, max_size=VISION_IMAGE)
    else:
        kw["num_classes"] = 4
    if model_type.startswith("vit_"):
        kw["image_size"] = VISION_IMAGE
    if model_type in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=True)
    torch.manual_seed(0)
    model = torchvision.models.get_model(model_type, **kw).eval()
    params = sum(p.numel() for p in model.parameters())
    if params > MAX_VISION_PARAMS:
        raise RuntimeError(f"not swept: {params / 1e6:.0f}M parameters (the sweep takes up to "
                           f"{MAX_VISION_PARAMS / 1e6:.0f}M)")
    return model


def timm_types(out):
    """One model of each of timm's families (its modules): the one with the fewest parameters,
    counted on the meta device; the choice is kept in `out`/timm/types.json."""
    path = os.path.join(out, "timm", "types.json")
    if os.path.exists(path):
        return json.load(open(path))
    import timm
    import torch

    chosen = []
    for module in timm.list_modules():
        sizes = []
        for name in timm.list_models(module=module):
            try:
                with torch.device("meta"):
                    model = timm.create_model(name, pretrained=False, num_classes=4)
                sizes.append((sum(p.numel() for p in model.parameters()), name))
            except Exception:  # noqa: BLE001 - a model timm cannot build this way is not a candidate
                continue
        if sizes:
            chosen.append(min(sizes)[1])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    json.dump(sorted(chosen), open(path, "w"))
    return sorted(chosen)


def build_timm(model_type):
    """A timm model, random-init, 4 classes, on `VISION_IMAGE` images where it takes them (with
    `img_size` where it has one), else at its default input size (`zoo_image` says which)."""
    import timm
    import torch

    def make(**kw):
        torch.manual_seed(0)
        return timm.create_model(model_type, pretrained=False, num_classes=4, **kw).eval()

    for kw in ({"img_size": VISION_IMAGE}, {}):
        try:
            model = make(**kw)
            with torch.no_grad():
                model(torch.randn(1, 3, VISION_IMAGE, VISION_IMAGE))
            model.zoo_image = VISION_IMAGE
            break
        except Exception:  # noqa: BLE001 - no `img_size`, or a model that needs its own size
            model = None
    if model is None:
        model = make()
        model.zoo_image = model.pretrained_cfg["input_size"][-1]
    params = sum(p.numel() for p in model.parameters())
    if params > MAX_VISION_PARAMS:
        raise RuntimeError(f"not swept: {params / 1e6:.0f}M parameters (the sweep takes up to "
                           f"{MAX_VISION_PARAMS / 1e6:.0f}M)")
    return model


def build(task, model_type):
    import torch
    import transformers

    if task in VISION_TASKS:
        return build_vision(task, model_type)
    if task == "timm":
        return build_timm(model_type)
    if task == "diffusers":
        sys.path.insert(0, HERE)
        import zoo_diffusers

        model = zoo_diffusers.build(model_type)
        # Zero-initialized layers (ControlNets' zero convolutions, adaLN-zero) would make the
        # output a constant that any compiler matches.
        break_ties(model)
        return model
    names = getattr(transformers.models.auto.modeling_auto, TASKS[task])
    name = names[model_type]
    cls = getattr(transformers, name if isinstance(name, str) else name[0])
    if task == "base" and cls.main_input_name not in BASE_INPUTS:
        raise RuntimeError(f"its main input `{cls.main_input_name}` is not one the sweep makes")
    cfg = tiny_config(model_type)
    torch.manual_seed(0)
    model = cls(cfg).eval()
    break_ties(model)
    params = sum(p.numel() for p in model.parameters())
    if params > 20_000_000:
        raise RuntimeError(f"the tiny config still has {params} parameters")
    return model


def break_ties(model):
    """Adds a little noise to every parameter whose elements are all equal. transformers
    initializes some to a constant (MoE routers' gates to zeros; diffusers zero-initializes
    ControlNets' convolutions and adaLN modulations): every expert's score is then
    the same, and which experts a `topk` picks among equal scores is the implementation's choice
    (torch's CPU `topk` does not take the lowest index), so eager and any compiler legitimately
    differ. A trained model has no such ties."""
    import torch

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and p.is_floating_point() and bool((p == p.flatten()[0]).all()):
                p.add_(0.02 * torch.randn(p.shape, generator=g).to(p.dtype))


def input_kind(task, model):
    """What forward(x) feeds the model: tokens, an image, tokens to both sides of an encoder-
    decoder, a waveform (`input_values`) or fixed-size audio features (`input_features`)."""
    if task in ("image-cls", "tv-cls", "tv-seg", "tv-det"):
        return "image" if task == "image-cls" else task
    if task == "timm":
        return "tv-cls"
    if task == "diffusers":
        return "diffusers"
    if task == "tv-video":
        return task
    if task == "seq2seq":
        return "seq2seq"
    if task == "base":
        kind = BASE_INPUTS[model.main_input_name]
        return "seq2seq" if kind == "tokens" and model.config.is_encoder_decoder else kind
    if task == "audio-cls":
        # The AST takes spectrogram features under the name `input_values`.
        waveform = model.main_input_name == "input_values" and not hasattr(model.config, "num_mel_bins")
        return "audio" if waveform else "features"
    return "tokens"


def feature_shape(cfg):
    """The [channels, frames] of a model's fixed-size audio features (Whisper's mel frames are
    twice its encoder positions; the AST takes [max_length, num_mel_bins])."""
    mels = getattr(cfg, "num_mel_bins", 16)
    if getattr(cfg, "max_source_positions", None):
        return [mels, 2 * cfg.max_source_positions]
    return [getattr(cfg, "max_length", 64), mels]


class Wrapper(__import__("torch").nn.Module):
    """forward(x) -> the first tensor output (logits)."""

    def __init__(self, model, kind, image=VISION_IMAGE, frames=VISION_FRAMES):
        super().__init__()
        self.model, self.kind, self.image, self.frames = model, kind, image, frames
        self.companions = []

    def set_companions(self, fixed):
        """Fixed inputs (batch 1, repeated over the batch) passed beside `x`, as buffers."""
        for name in self.companions:
            delattr(self, f"companion_{name}")
        self.companions = list(fixed)
        for name, v in fixed.items():
            self.register_buffer(f"companion_{name}", v)

    def forward(self, x, y=None):
        """`y`: an encoder-decoder's decoder tokens, where they differ from its encoder's."""
        if self.kind == "diffusers":
            return self.model(x)
        if self.kind.startswith("tv-"):
            out = self.model(x)
            if self.kind == "tv-seg":
                return out["out"]
            if self.kind == "tv-det":
                return out[0]["boxes"]
            return out
        if self.kind == "image":
            kw = {"pixel_values": x}
        elif self.kind in ("audio", "features"):
            kw = {self.model.main_input_name: x}
            if "decoder_input_ids" in __import__("inspect").signature(self.model.forward).parameters:
                # A speech encoder-decoder's decoder reads a few fixed tokens.
                kw["decoder_input_ids"] = __import__("torch").full((x.shape[0], 4), 3)
        else:
            decoder = x if y is None else y
            kw = {"input_ids": x, **({"decoder_input_ids": decoder} if self.kind == "seq2seq" else {})}
            if "use_cache" in self.model.forward.__code__.co_varnames:
                kw["use_cache"] = False
        for name in self.companions:
            v = getattr(self, f"companion_{name}")
            kw.setdefault(name, v.expand(x.shape[0], *v.shape[1:]))
        out = self.model(**kw)
        for k in ("logits", "last_hidden_state"):
            if getattr(out, k, None) is not None:
                return getattr(out, k)
        return out[0]


def find_companions(module, x):
    """For a `base` model that needs another input beside its main one (a dual encoder's image
    beside its text, a Q-Former's text beside its image): the first set of fixed inputs with which
    it runs eagerly, or none."""
    import torch

    cfg = module.model.config
    vision = getattr(cfg, "vision_config", None) or cfg
    size = getattr(vision, "image_size", IMAGE)
    size = size if isinstance(size, int) else IMAGE
    g = torch.Generator().manual_seed(2)
    pixels = torch.randn(1, getattr(vision, "num_channels", 3), size, size, generator=g)
    tokens = torch.randint(3, VOCAB, (1, 8), generator=g)
    for fixed in ({}, {"pixel_values": pixels}, {"input_ids": tokens}, {"pixel_values": pixels, "input_ids": tokens}):
        module.set_companions(fixed)
        try:
            with torch.no_grad():
                module(x)
            return
        except Exception:  # noqa: BLE001 - whatever the model raises without the input it needs
            continue
    module.set_companions({})


def make_input(module, b, s, seed, sides=None):
    """The input of `module` for batch `b` and sequence `s` (a waveform of `s * SAMPLES`); an
    image (or latents) of `sides` (height, width) where given."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if module.kind == "diffusers":
        shape = list(module.model.sample_shape)
        if sides:
            shape[-2:] = sides
        return torch.randn(b, *shape, generator=g)
    if module.kind == "tv-video":
        return torch.randn(b, 3, module.frames, module.image, module.image, generator=g)
    if module.kind.startswith("tv-"):
        return torch.randn(b, 3, *(sides or (module.image, module.image)), generator=g)
    if module.kind == "image":
        return torch.randn(b, 3, *(sides or (IMAGE, IMAGE)), generator=g)
    if module.kind == "features":
        return torch.randn(b, *feature_shape(module.model.config), generator=g)
    if module.kind == "audio":
        return torch.randn(b, max(8, s) * SAMPLES, generator=g)
    return torch.randint(3, VOCAB, (b, s), generator=g)


def export_dynamic(module, x):
    import torch
    from torch.export import Dim

    batch = Dim("batch", min=1, max=8)
    if module.kind == "audio":
        time = Dim("time", min=8 * SAMPLES, max=64 * SAMPLES)
        tries = [{0: batch, 1: time}, {0: batch}, {1: time}]
    elif module.kind in ("image", "features", "diffusers") or module.kind.startswith("tv-"):
        tries = [{0: batch}]
    else:
        tries = [
            {0: batch, 1: Dim("seq", min=1, max=64)},
            {0: batch, 1: Dim("seq", min=2, max=64)},
            {0: batch},
            {1: Dim("seq", min=2, max=64)},
        ]
    errors = []
    for shapes in tries:
        try:
            ep = torch.export.export(module, (x,), dynamic_shapes={"x": shapes}, strict=False)
            return ep.run_decompositions(), shapes, x
        except Exception as e:  # noqa: BLE001 - torch's many export errors
            errors.append(f"{type(e).__name__}: {first_line(e)}")
    if module.kind in ("tokens", "seq2seq"):
        # Last, the sequence alone from a batch-1 example (torch 2.15 fails GPT-2 at batch 2).
        shapes = {1: Dim("seq", min=2, max=64)}
        try:
            one = x[:1]
            ep = torch.export.export(module, (one,), dynamic_shapes={"x": shapes}, strict=False)
            return ep.run_decompositions(), shapes, one
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {first_line(e)}")
    raise RuntimeError("; ".join(errors))


def native_side(module):
    """The side of the images (or latents) the row's static export takes."""
    if module.kind == "diffusers":
        return module.model.sample_shape[-1]
    return IMAGE if module.kind == "image" else module.image


def has_sides(module):
    """True where the input is an image whose height and width can vary: 4-d, square."""
    if module.kind not in SIDES_KINDS:
        return False
    if module.kind == "diffusers":
        shape = module.model.sample_shape
        return len(shape) == 3 and shape[-1] == shape[-2]
    return True


def export_sides(module, x):
    """The export with a dynamic height and width, each from half to twice the row's side:
    `Dim.AUTO` (torch records what its trace assumed as guards), else a derived multiple of 32,
    16 or 8 (`k * Dim`) where torch wants the sides divisible. Returns the program, the
    multiple the sides must be (1 for `Dim.AUTO`) and its dims as text."""
    import torch
    from torch.export import Dim

    side = native_side(module)
    lo, hi = max(1, side // 2), side * 2
    tries = [(1, {2: Dim.AUTO(min=lo, max=hi), 3: Dim.AUTO(min=lo, max=hi)})]
    for k in (32, 16, 8):
        if side % k == 0 and lo // k >= 1:
            tries.append((k, {2: k * Dim("side_h", min=max(1, lo // k), max=hi // k),
                              3: k * Dim("side_w", min=max(1, lo // k), max=hi // k)}))
    errors = []
    for k, shapes in tries:
        try:
            ep = torch.export.export(module, (x,), dynamic_shapes={"x": shapes}, strict=False).run_decompositions()
        except Exception as e:  # noqa: BLE001 - torch's many export errors
            errors.append(f"{type(e).__name__}: {first_line(e)}")
            continue
        if not any(is_symbolic(d) for d in input_shape(ep)[2:]):
            # `Dim.AUTO` lets torch fix a side its trace needs fixed (ViT's position table).
            raise RuntimeError(f"torch.export fixes the sides at {side} (the model takes that size only)")
        return ep, k, {str(d): str(v) for d, v in shapes.items()}
    raise RuntimeError("; ".join(errors))


def input_shape(ep):
    """The shape of the exported program's first user input, symbols as `torch.SymInt`."""
    return user_inputs(ep)[0].meta["val"].shape


def is_symbolic(size):
    """True for a size the export left to vary (a `torch.SymInt` with no fixed value)."""
    import torch

    return isinstance(size, torch.SymInt) and size.node.maybe_as_int() is None


def side_pairs(module, multiple):
    """The (height, width) pairs tried: `SIDE_FRACTIONS` of the row's side, rounded to the
    export's multiple, within half to twice the side, each once."""
    side = native_side(module)
    lo, hi = max(1, side // 2), side * 2
    pairs = []
    for fh, fw in SIDE_FRACTIONS:
        h, w = (min(hi, max(lo, multiple * max(1, round(side * f / multiple)))) for f in (fh, fw))
        if (h, w) not in pairs:
            pairs.append((h, w))
    return pairs


def export_either_way(module, x):
    """Non-strict export, then strict where that fails; the non-strict error if both do."""
    import torch

    try:
        return torch.export.export(module, (x,), strict=False)
    except Exception as first:  # noqa: BLE001 - torch's many export errors
        try:
            return torch.export.export(module, (x,), strict=True)
        except Exception:  # noqa: BLE001
            raise first from None


class ExportDiffers(Exception):
    """torch.export's program does not compute what the model does eagerly (a failure of the
    export, as an error would be: no compiler can match eager from that archive)."""


def same_as_eager(ep, module, x):
    """Raises `ExportDiffers` when the exported program's result at `x` is off eager's by more
    than the sweep's tolerance (paligemma's exported forward differs from its eager one)."""
    import torch

    with torch.no_grad():
        want, got = module(x), ep.module()(x)
    got = got[0] if isinstance(got, (tuple, list)) else got
    if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)) or want.shape != got.shape:
        return
    diff = (want.float() - got.float()).abs()
    scale = max(1.0, float(want.float().abs().max())) if want.numel() else 1.0
    if want.numel() and float(diff.max()) > 1e-3 * scale:
        raise ExportDiffers(f"torch.export's program differs from eager by {float(diff.max()):.3g} (scale {scale:.3g})")


def first_line(e):
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def worker(task, model_type, out, sides_only=""):
    """Exports one model type into `out`: static.pt2, dynamic.pt2 (and sides.pt2 for an image
    model), the inputs and eager outputs of each size, export.json. With `sides_only`, only the
    sides export, added to the export.json there."""
    import numpy as np
    import torch

    os.makedirs(out, exist_ok=True)
    info_path = os.path.join(out, "export.json")
    info = {"task": task, "type": model_type}
    if sides_only and os.path.exists(info_path):
        info = json.load(open(info_path))
    try:
        model = build(task, model_type)
        image = getattr(model, "zoo_image", VISION_IMAGE_OF.get(model_type, VISION_IMAGE))
        module = Wrapper(model, input_kind(task, model), image, VISION_FRAMES_OF.get(model_type, VISION_FRAMES)).eval()
        if task == "base":
            find_companions(module, make_input(module, 2, 16, 1))
    except Exception as e:  # noqa: BLE001
        info["build"] = f"{type(e).__name__}: {first_line(e)}"
        json.dump(info, open(os.path.join(out, "export.json"), "w"))
        return

    def save_case(kind, k, *xs):
        with torch.no_grad():
            y = module(*xs)
        save_inputs(os.path.join(out, f"{kind}_in_{k}"), xs)
        np.save(os.path.join(out, f"{kind}_out_{k}.npy"), y.float().numpy() if y.dtype == torch.bfloat16 else y.numpy())

    if sides_only:
        more_dims_cases(module, out, info, save_case)
        json.dump(info, open(info_path, "w"))
        return

    sys.path.insert(0, HERE)
    from gen import real_grouped_mm_under_export

    # Batch 1 for text (torch 2.15's decompositions fail on GPT-2's attention at batch 2).
    x = make_input(module, 1 if module.kind in ("tokens", "seq2seq") else 2, 16, 1)
    try:
        with real_grouped_mm_under_export():
            ep = export_either_way(module, x)
        ep = ep.run_decompositions()
        same_as_eager(ep, module, x)
        torch.export.save(ep, os.path.join(out, "static.pt2"))
        save_case("static", 0, x)
        info["static"] = "ok"
    except Exception as e:  # noqa: BLE001
        info["static"] = f"{type(e).__name__}: {first_line(e)}"
    try:
        # Batch 2 and 16 tokens: torch specializes dims whose example size is 1.
        with real_grouped_mm_under_export():
            ep, shapes, example = export_dynamic(module, make_input(module, 2, 16, 1))
        same_as_eager(ep, module, example)
        torch.export.save(ep, os.path.join(out, "dynamic.pt2"))
        dims = {str(k): str(v) for k, v in shapes.items()}
        info["dynamic"] = "ok"
        info["dynamic_dims"] = dims
        seq_min = 1 if 1 in shapes and shapes[1].min == 1 else 2
        k = 0
        for b, s in DYN_PAIRS:
            s = seq_min if s is None else s
            if 1 not in shapes:
                s = 16  # the sequence was specialized: batch only
            if 0 not in shapes:
                b = example.shape[0]  # the batch was specialized: sequence only
            save_case("dynamic", k, make_input(module, b, s, 10 + k))
            k += 1
        info["dynamic_cases"] = k
    except Exception as e:  # noqa: BLE001
        info["dynamic"] = f"{type(e).__name__}: {first_line(e)}"
    more_dims_cases(module, out, info, save_case)
    json.dump(info, open(os.path.join(out, "export.json"), "w"))


def save_inputs(stem, xs):
    """The inputs of one case: `<stem>.npy`, then `<stem>_arg<i>.npy` for each after the first."""
    import numpy as np

    for i, x in enumerate(xs):
        np.save(f"{stem}.npy" if i == 0 else f"{stem}_arg{i}.npy", x.numpy())


def inputs_of(stem):
    """The files `save_inputs` wrote for `stem`, in order."""
    extra = sorted(glob.glob(f"{glob.escape(stem)}_arg*.npy"), key=lambda p: int(p.rsplit("_arg", 1)[1][:-4]))
    return [f"{stem}.npy", *extra]


def more_dims_cases(module, out, info, save_case):
    """The column of dims beyond batch and sequence (its key is `sides`, its first kind): an
    image's height and width, an encoder-decoder's two lengths; nothing for other models."""
    if has_sides(module):
        export_sides_cases(module, out, info, save_case)
    elif module.kind == "seq2seq":
        export_lengths_cases(module, out, info, save_case)


def export_lengths_cases(module, out, info, save_case):
    """An encoder-decoder exported with its encoder's and decoder's lengths `Dim.AUTO`, apart, at
    batch 1 (`sides.pt2`: the column's file), its cases at `LENGTH_PAIRS` the loaded program
    accepts and up to `MAX_EXCLUDED` its guards refuse, in `info` as the sides are."""
    import torch
    from torch.export import Dim

    try:
        x, y = make_input(module, 1, 16, 1), make_input(module, 1, 12, 2)
        shapes = {"x": {1: Dim.AUTO(min=2, max=64)}, "y": {1: Dim.AUTO(min=2, max=64)}}
        ep = torch.export.export(module, (x, y), dynamic_shapes=shapes, strict=False).run_decompositions()
        fixed = [n for n, node in zip(("encoder", "decoder"), user_inputs(ep))
                 if not is_symbolic(node.meta["val"].shape[1])]
        if fixed:
            raise RuntimeError(f"torch.export fixes the {' and '.join(fixed)} length (the model takes one only)")
        with torch.no_grad():
            want, got = module(x, y), ep.module()(x, y)
        if float((want.float() - got.float()).abs().max()) > 1e-3 * max(1.0, float(want.float().abs().max())):
            raise ExportDiffers("torch.export's program differs from eager at 16 and 12 tokens")
        torch.export.save(ep, os.path.join(out, "sides.pt2"))
        loaded = ep.module()
        cases, excluded = 0, 0
        for k, (src, tgt) in enumerate(LENGTH_PAIRS):
            xs = (make_input(module, 1, src, 30 + k), make_input(module, 1, tgt, 60 + k))
            try:
                with torch.no_grad():
                    loaded(*xs)
            except Exception as e:  # noqa: BLE001
                if "Guard failed" in str(e) and excluded < MAX_EXCLUDED:
                    save_inputs(os.path.join(out, f"sides_excluded_{excluded}"), xs)
                    excluded += 1
                continue
            save_case("sides", cases, *xs)
            cases += 1
        dims = {"encoder": "Dim.AUTO(min=2, max=64)", "decoder": "Dim.AUTO(min=2, max=64)"}
        info.update(sides="ok", sides_cases=cases, sides_excluded=excluded, sides_dims=dims)
    except Exception as e:  # noqa: BLE001
        info["sides"] = f"{type(e).__name__}: {first_line(e)}"


def user_inputs(ep):
    """The placeholder nodes of an exported program's user inputs, in order."""
    names = ep.graph_signature.user_inputs
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    return [nodes[n] for n in names]


def export_sides_cases(module, out, info, save_case):
    """The sides export of an image model (`sides.pt2`), its cases at every pair of sides the
    loaded program accepts (`sides_in_<k>.npy`, eager's outputs beside) and up to
    `MAX_EXCLUDED` pairs its guards refuse (`sides_excluded_<k>.npy`), in `info`."""
    import numpy as np
    import torch

    try:
        x = make_input(module, 2, 16, 1)
        ep, multiple, dims = export_sides(module, x)
        same_as_eager(ep, module, x)
        torch.export.save(ep, os.path.join(out, "sides.pt2"))
        loaded = ep.module()
        cases, excluded = 0, 0
        for k, sides in enumerate(side_pairs(module, multiple)):
            x = make_input(module, 2, 16, 20 + k, sides)
            try:
                with torch.no_grad():
                    module(x)
            except Exception:  # noqa: BLE001 - a size the model itself cannot take is not tried
                continue
            try:
                with torch.no_grad():
                    loaded(x)
            except Exception as e:  # noqa: BLE001
                if "Guard failed" in str(e) and excluded < MAX_EXCLUDED:
                    np.save(os.path.join(out, f"sides_excluded_{excluded}.npy"), x.numpy())
                    excluded += 1
                continue
            save_case("sides", cases, x)
            cases += 1
        info.update(sides="ok", sides_cases=cases, sides_excluded=excluded, sides_dims=dims)
    except Exception as e:  # noqa: BLE001
        info["sides"] = f"{type(e).__name__}: {first_line(e)}"


# ------------------------------------------------------------------------------------------------
# driver: compile and run with torchtpu-compile
# ------------------------------------------------------------------------------------------------
def classify(proc, timed_out=False):
    """The outcome of one compiler call."""
    if timed_out:
        return "CRASH", "timed out"
    text = (proc.stderr or "") + (proc.stdout or "")
    if proc.returncode == 0:
        return "PASS", ""
    if proc.returncode < 0 or proc.returncode >= 101:
        return "CRASH", tail(text)
    if "DIFFERS" in text:
        return "WRONG", tail(text)
    return "REFUSED", reason(text)


def tail(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " ".join(lines[-2:])[:400]


def reason(text):
    """The op and reason of a refusal: `op: why` from the compiler's message (a message that
    ends in a colon, with the line after it: the ops that have no lowering)."""
    lines = [l for l in text.splitlines() if l.strip()]
    at = next((i for i, l in enumerate(lines) if l.startswith("error:")), 0)
    line = lines[at] if lines else ""
    if line.endswith(":") and at + 1 < len(lines):
        line += " " + lines[at + 1].strip()
    m = re.search(r"node `[^`]*` \((?:torch\.ops\.)?([^)]*)\)(?: \(File [^)]*\))? (.*)", line)
    if m:
        return f"{m.group(1)}: {m.group(2)}"[:300]
    return re.sub(r"^error: (cannot (compile|read) `[^`]*`: )?", "", line)[:300]


def call(args, timeout):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout), False
    except subprocess.TimeoutExpired:
        return None, True


def evaluate(compiler, d, kind, cases, buckets, tpu, scale_rule=False, excluded=0):
    """Compiles `kind`.pt2 in `d` and runs every case, then each of `excluded` inputs that the
    export's guards refuse (`run` must refuse them too); (outcome, detail). Outputs are compared
    element by element (rtol 1e-3, atol 1e-4), or with `scale_rule` by `run`'s default rule
    (within 1e-4 of the output's scale, max(1, max |ref|)): torchvision's random-init networks at
    their real depth reach activations of 10^3, where f32's rounding alone exceeds atol 1e-4."""
    art = os.path.join(d, f"{kind}.tpuexe")
    args = [compiler, "compile", os.path.join(d, f"{kind}.pt2"), "-o", art, "--target", "cpu", "--no-cache"]
    if tpu:
        args += ["--target", "tpu:v6e:1x1"]
    if buckets:
        args += ["--buckets", buckets]
    proc, timed_out = call(args, 900)
    outcome = classify(proc, timed_out)
    if outcome[0] != "PASS":
        return outcome
    for k in range(cases):
        ref = os.path.join(d, f"ref_{kind}_{k}")
        os.makedirs(ref, exist_ok=True)
        os.replace(os.path.join(d, f"{kind}_out_{k}.npy"), os.path.join(ref, "out_0.npy")) \
            if os.path.exists(os.path.join(d, f"{kind}_out_{k}.npy")) else None
        tolerance = [] if scale_rule else ["--rtol", "1e-3", "--atol", "1e-4"]
        inputs = inputs_of(os.path.join(d, f"{kind}_in_{k}"))
        proc, timed_out = call([compiler, "run", art, *inputs, "--out-dir", os.path.join(d, f"run_{kind}_{k}"),
                                "--reference", ref, *tolerance], 600)
        outcome = classify(proc, timed_out)
        if outcome[0] != "PASS":
            return outcome[0], f"at {shapes_of(inputs)}: {outcome[1]}"
    for k in range(excluded):
        refused = refuses_excluded(compiler, art, inputs_of(os.path.join(d, f"{kind}_excluded_{k}")))
        if refused is not None:
            return refused
    os.remove(art)
    drawn = random_ops(os.path.join(d, f"{kind}.pt2"))
    # Its numbers are not eager's: equal within the tolerance only where the output depends
    # little on them.
    return "PASS", f"draws random numbers ({', '.join(drawn)}): equal to eager's within the tolerance" if drawn else ""


def refuses_excluded(compiler, art, inputs):
    """None where `run` refuses the files `inputs` as the export does: a broken condition of the
    export, or a size outside its ranges (torch checks both as guards); else why not."""
    proc, timed_out = call([compiler, "run", art, *inputs, "--out-dir", inputs[0] + ".out"], 600)
    refusals = ("break a condition of the export", "outside the sizes")
    if proc is not None and proc.returncode == 1 and any(r in proc.stderr for r in refusals):
        return None
    shape = shapes_of(inputs)
    outcome = classify(proc, timed_out)
    if outcome[0] == "PASS":
        return "WRONG", f"at {shape}: ran a size the export's guards exclude"
    return outcome[0], f"at {shape}, excluded by the export's guards: {outcome[1]}"


def shapes_of(inputs):
    """The shapes of the `.npy` files `inputs`, as `1x16` (`1x16, 1x12` for two)."""
    import numpy as np

    return ", ".join("x".join(str(n) for n in np.load(f, mmap_mode="r").shape) for f in inputs)


def random_ops(archive):
    """The random ops of an archive's graph (`randn`, ...), by name."""
    import zipfile

    with zipfile.ZipFile(archive) as z:
        graph = next((z.read(n).decode() for n in z.namelist() if n.endswith("models/model.json")), "")
    return sorted(set(re.findall(r'"torch\.ops\.aten\.(rand\w*|native_dropout|bernoulli\w*)\.', graph)))


def add_tpu(compiler, d, result, done):
    """Compiles for `tpu:v6e:1x1` what passed on CPU without having been compiled for it (the
    CPU verdict stands: the same archives, compiled and run before); a TPU compile that fails
    turns the row's outcome into that failure."""
    for kind, buckets in (("static", None), ("dynamic", "auto:2")):
        if result[kind][0] != "PASS":
            continue
        art = os.path.join(d, f"{kind}.tpu.tpuexe")
        args = [compiler, "compile", os.path.join(d, f"{kind}.pt2"), "-o", art, "--target", "tpu:v6e:1x1",
                "--no-cache", "-q"]
        proc, timed_out = call(args + (["--buckets", buckets] if buckets else []), 900)
        outcome = classify(proc, timed_out)
        if outcome[0] != "PASS":
            result[kind] = [outcome[0], f"tpu:v6e:1x1: {outcome[1]}"]
        if os.path.exists(art):
            os.remove(art)
    result["tpu"] = True
    json.dump(result, open(done, "w"))
    return result


# Free space below which the sweep stops before a row: a full disk fails exports in ways that
# would be recorded as the model's (an export "timed out or crashed").
MIN_FREE_BYTES = 4 << 30


def enough_disk(path):
    """Exits, keeping every row so far, when `path`'s disk has less than MIN_FREE_BYTES free."""
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        sys.exit(f"zoo: only {free >> 20} MiB free under {path}; stopping before recording another row "
                 f"(the rows so far are kept; free space and run again to resume)")


def drop_exports(args, d, result):
    """Removes a row's archives once its verdicts are all recorded (TPU included) and none needs
    a re-check: a vision model's exports take hundreds of MB each. `--keep-exports` keeps them."""
    passed = all(result[k][0] in ("PASS", "EXPORT", "—") for k in ("static", "dynamic", "sides") if k in result)
    if passed and result.get("tpu") is True and not args.keep_exports:
        for path in glob.glob(os.path.join(d, "*.pt2")):
            os.remove(path)


def export(args, task, model_type, d, sides_only=False):
    """Runs the worker for one model type, with a time limit."""
    try:
        subprocess.run([sys.executable, __file__, "--worker", task, model_type, d, *(["sides"] if sides_only else [])],
                       timeout=args.export_timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        pass


def sweep_one(args, task, model_type):
    d = os.path.join(args.out, task, model_type)
    done = os.path.join(d, "result.json")
    enough_disk(args.out)
    if os.path.exists(done) and not args.again:
        previous = json.load(open(done))
        if args.add_sides and "sides" not in previous:
            return add_sides(args, d, previous, done)
        passed = all(previous[k][0] in ("PASS", "EXPORT", "—") for k in ("static", "dynamic", "sides") if k in previous)
        if args.add_tpu and not previous.get("tpu") and "tpu" in previous and not args.recheck:
            result = add_tpu(args.compiler, d, previous, done)
            drop_exports(args, d, result)
            return result
        if not (args.recheck and not passed):
            return previous
    os.makedirs(d, exist_ok=True)
    info_path = os.path.join(d, "export.json")
    if args.again or not os.path.exists(info_path):
        export(args, task, model_type, d)
    info = json.load(open(info_path)) if os.path.exists(info_path) else {"build": "export timed out or crashed"}
    result = {"task": task, "type": model_type}
    if "build" in info:
        result["static"] = result["dynamic"] = ["EXPORT", info["build"]]
        result["sides"] = ["—", ""]
    else:
        for kind, buckets, cases in (("static", None, 1), ("dynamic", "auto:2", info.get("dynamic_cases", 0))):
            if info.get(kind) != "ok":
                result[kind] = ["EXPORT", info.get(kind, "")]
            else:
                result[kind] = list(evaluate(args.compiler, d, kind, cases, buckets, not args.no_tpu,
                                             scale_rule=task in SCALE_RULE_TASKS))
        result["tpu"] = not args.no_tpu
        result["dynamic_dims"] = info.get("dynamic_dims")
        result["sides"] = sides_outcome(args, d, info, task)
    enough_disk(args.out)
    json.dump(result, open(done, "w"))
    drop_exports(args, d, result)
    return result


def sides_outcome(args, d, info, task):
    """The more-dims column of a row (key `sides`): `—` for a model without such dims, EXPORT
    where torch could not export them or accepts none of the sizes tried, else the compile and
    runs."""
    if "sides" not in info:
        return ["—", ""]
    if info["sides"] != "ok":
        return ["EXPORT", info["sides"]]
    if not info.get("sides_cases"):
        return ["EXPORT", "the loaded program accepts none of the sizes tried (its guards)"]
    outcome = evaluate(args.compiler, d, "sides", info["sides_cases"], "auto:2", not args.no_tpu,
                       scale_rule=task in SCALE_RULE_TASKS, excluded=info.get("sides_excluded", 0))
    return list(outcome)


def add_sides(args, d, result, done):
    """Exports and evaluates the sides of a row swept before the sweep had them; its other
    verdicts stand."""
    export(args, result["task"], result["type"], d, sides_only=True)
    info_path = os.path.join(d, "export.json")
    info = json.load(open(info_path)) if os.path.exists(info_path) else {}
    if "build" in info:
        result["sides"] = ["EXPORT", info["build"]]
    elif "sides" not in info and not os.path.exists(info_path):
        result["sides"] = ["EXPORT", "export timed out or crashed"]
    else:
        result["sides"] = sides_outcome(args, d, info, result["task"])
    json.dump(result, open(done, "w"))
    for path in glob.glob(os.path.join(d, "sides*.pt2")):
        if result["sides"][0] in ("PASS", "EXPORT") and not args.keep_exports:
            os.remove(path)
    return result


# The libraries of the sweep and their tasks, in the table's order.
LIBRARIES = {
    "transformers": list(TASKS),
    "torchvision": list(VISION_TASKS),
    "timm": ["timm"],
    "diffusers": ["diffusers"],
}


def library_of(task):
    return next(lib for lib, tasks in LIBRARIES.items() if task in tasks)


def describe(library, results):
    """What the sweep did for one library's rows: the paragraph above its table."""
    target = "compiled for `cpu` (and for `tpu:v6e:1x1` where the TPU column says `yes`)"
    if library == "transformers":
        return (
            "A tiny random-init instance of every model type of transformers' auto mappings for the tasks "
            "below (`base`: AutoModel for the types no other task has, called on its main input — tokens, an image, "
            "a waveform or audio features — and, where it needs them, a fixed image, 8 fixed tokens (repeated over "
            "the batch) or 4 fixed decoder tokens; a model that needs another input fails at export with its own "
            "error), exported at one size (1 × 16 tokens — to both sides of an encoder-decoder —, 2 images of "
            "32×32, 2 waveforms of 1,600 samples or 2 fixed-size audio features) and with a dynamic batch "
            "`Dim(1..8)` and sequence `Dim(1..64)` (`2..64` where torch refuses 1; a waveform's "
            "`Dim(800..6400)`; batch only where it specializes the sequence, and for images and audio "
            "features; sequence only where it specializes the batch); every parameter transformers initializes "
            "to a constant gets a little noise (a zero router ties its experts, and eager's `topk` picks among "
            f"ties as it likes); {target} (the dynamic one with `--buckets auto:2`), run on CPU and compared "
            "with eager (rtol 1e-3, atol 1e-4) at one size, or at 9 (batch, seq) pairs: 1, the bucket edges "
            "and each edge − 1, sizes in the middle.")
    scale = ("compared by `run --reference`'s default rule (within 1e-4 of the output's scale, max(1, max |ref|): "
             "at their real depth random-init networks reach activations of 10^3, where f32 rounding alone "
             "passes the element-wise atol of 1e-4)")
    if library == "torchvision":
        return (
            "Every model of torchvision's registry for classification, segmentation, video and detection "
            "(tasks `tv-cls`, `tv-seg`, `tv-video`, `tv-det`), random-init with 4 classes (`weights=None`), at "
            f"its own size up to {MAX_VISION_PARAMS // 1_000_000}M parameters, on {VISION_IMAGE}×{VISION_IMAGE} "
            "images (Inception 128; MaxViT, S3D and MViT 224; video: 8 frames, 16 for S3D and MViT; detection "
            f"resizes to {VISION_IMAGE}, SSD to its own size, and returns the first image's boxes), exported at "
            f"batch 2 and with a dynamic batch `Dim(1..8)`, {target}, run at 9 batch sizes and {scale}.")
    if library == "timm":
        return (
            "One model of each of timm's families (its modules: the one with the fewest parameters, up to "
            f"{MAX_VISION_PARAMS // 1_000_000}M), random-init with 4 classes, on {VISION_IMAGE}×{VISION_IMAGE} "
            "images where the model takes them (`img_size` where it has one), else at its default input size, "
            f"exported at batch 2 and with a dynamic batch `Dim(1..8)`, {target}, run at 9 batch sizes and {scale}.")
    return (
        "A tiny random-init instance of each of diffusers' model classes below (UNets, VAEs, ControlNets and "
        "diffusion transformers; their configs in `testdata/zoo_diffusers.py`), every parameter diffusers "
        "initializes to a constant given a little noise (zero convolutions and adaLN-zero would make the output a "
        "constant), called on a latent with a fixed timestep and fixed conditioning repeated over the batch, "
        "exported at batch 2 and with a dynamic batch "
        f"`Dim(1..8)`, {target}, run at 9 batch sizes and {scale}.")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        try:
            worker(*sys.argv[2:6])
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            sys.exit(1)
        return
    p = argparse.ArgumentParser()
    p.add_argument("--compiler", required=True)
    p.add_argument("--out", required=True)
    every = [t for ts in LIBRARIES.values() for t in ts]
    p.add_argument("--tasks", default=",".join(TASKS), help=f"of {', '.join(every)}")
    p.add_argument("--only", default="")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--again", action="store_true", help="export and evaluate everything again")
    p.add_argument("--recheck", action="store_true", help="evaluate again what did not pass (same exports)")
    p.add_argument("--export-timeout", type=int, default=300)
    p.add_argument("--no-tpu", action="store_true", help="compile for CPU only (half the time)")
    p.add_argument("--add-tpu", action="store_true",
                   help="compile for tpu:v6e:1x1 what passed on CPU without it (CPU verdicts stand)")
    p.add_argument("--add-sides", action="store_true",
                   help="export and evaluate the more dims (image sides, an encoder-decoder's lengths) of rows "
                        "swept without them (other verdicts stand)")
    p.add_argument("--table-only", action="store_true", help="write the table from the results so far")
    p.add_argument("--keep-exports", action="store_true",
                   help="keep a row's archives after its verdicts are recorded (they are removed by default)")
    p.add_argument("--table", default=os.path.join(ROOT, "docs", "zoo.md"))
    args = p.parse_args()
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if not any(t in ts for ts in LIBRARIES.values())]
    if unknown:
        p.error(f"unknown task {', '.join(unknown)}")
    results, planned = [], {lib: 0 for lib in LIBRARIES}
    tabled = zoo_table.tabled(args.table)
    for task in tasks:
        types = task_types(task, args.out)
        if args.only:
            types = [t for t in types if t in args.only.split(",")]
        if args.limit:
            types = types[: args.limit]
        planned[library_of(task)] += len(types)
        for i, t in enumerate(types):
            done = os.path.join(args.out, task, t, "result.json")
            # A row the table holds but this machine has no result for was swept elsewhere: kept.
            kept = (task, t) in tabled and not os.path.exists(done)
            redo = args.again or args.recheck or (args.add_tpu and kept and untried_on_tpu(tabled[task, t])) \
                or (args.add_sides and kept)
            if args.table_only or (kept and not redo):
                results.extend([json.load(open(done))] if os.path.exists(done) else [])
                continue
            r = sweep_one(args, task, t)
            results.append(r)
            sides = r.get("sides", ["—", ""])
            print(f"[{task} {i + 1}/{len(types)}] {t}: static {r['static'][0]}, dynamic {r['dynamic'][0]}, "
                  f"more dims {sides[0]} {(sides[1] or r['dynamic'][1] or r['static'][1])[:160]}", flush=True)
    # No path of this machine in the table.
    for r in results:
        for k in ("static", "dynamic", "sides"):
            if k in r:
                r[k][1] = r[k][1].replace(os.path.abspath(args.out) + os.sep, "").replace(os.path.expanduser("~"), "~")
    zoo_table.write_table(results, args.table, versions(args.compiler), planned, LIBRARIES, describe)
    print(f"wrote {args.table}")


def untried_on_tpu(row):
    """Whether a kept row passed on CPU without a TPU compile recorded (its export is elsewhere,
    so --add-tpu sweeps it again)."""
    static, dynamic, tpu = row
    return "PASS" in (static, dynamic) and tpu != "yes"


def task_types(task, out):
    """The architectures of one task, in the sweep's order."""
    if task in VISION_TASKS:
        return vision_types(task)
    if task == "timm":
        return timm_types(out)
    if task == "diffusers":
        sys.path.insert(0, HERE)
        import zoo_diffusers

        return zoo_diffusers.types()
    import transformers

    auto = transformers.models.auto.modeling_auto
    types = set(getattr(auto, TASKS[task]))
    if task == "base":
        types -= {t for other in TASKS if other != "base" for t in getattr(auto, TASKS[other])}
    return sorted(types)


def versions(compiler):
    """The versions each library's section names: torch, the library, the compiler."""
    import importlib.metadata

    import torch

    compiler_version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.strip()
    return {
        lib: f"torch {torch.__version__}, {lib} {importlib.metadata.version(lib)}, {compiler_version}"
        for lib in LIBRARIES
    }


if __name__ == "__main__":
    main()
