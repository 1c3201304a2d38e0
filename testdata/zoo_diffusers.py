"""Tiny random-init instances of diffusers' model classes for the architecture sweep
(testdata/zoo.py, task `diffusers`): each is built from a config of its own (a few channels, one
or two layers, latents of 8×8 or 16×16) and wrapped so that forward(x) takes the model's main
input alone, batch first; every other input (timestep, text states, ids, added conditions...) is
a buffer made once from a seeded generator and repeated to the batch in forward.

    import zoo_diffusers
    module = zoo_diffusers.build("UNet2DConditionModel")
    y = module(torch.randn(2, *module.sample_shape))
"""
import inspect

import torch

# The width of the fixed text states (and pooled projections) and their length.
TXT, TXT_LEN = 16, 4


class Fixed(tuple):
    """Extra input tensors with no batch dim (ids, rotary tables): passed as they are, the one
    tensor alone when there is one, else the tuple."""


def rand(g, *shape):
    """A batched random input of one sample, [1, *shape]."""
    return torch.randn(1, *shape, generator=g)


def step(t=500.0):
    """The timestep of one sample, [1] (a flow-matching model's t is in [0, 1])."""
    return torch.tensor([t])


def none(g):
    """No other input."""
    return {}


def timestep(g):
    """A timestep alone."""
    return {"timestep": step()}


def mode(g):
    """A VAE's input to forward: decode the posterior's mode, not a sample of it."""
    return {"sample_posterior": False}


def text(g, **more):
    """Random text states [1, TXT_LEN, TXT] and a timestep, with `more` extra inputs."""
    return {"encoder_hidden_states": rand(g, TXT_LEN, TXT), "timestep": step(), **more}


def flow_text(g):
    """Text states and a flow-matching timestep in [0, 1] (the model scales it by 1000 itself: at
    the 500 of a DDPM schedule its sinusoids would take arguments of 5e5, where f32 rounding
    alone moves them by 0.03)."""
    return text(g, timestep=step(0.5))


def unet_blocks(cross, dims=2, temporal=""):
    """down/up block types of a two-level UNet: the upper level (cross-)attends, the lower not."""
    attn = f"CrossAttn{{}}Block{dims}D" if cross else f"Attn{{}}Block{dims}D"
    plain = f"{{}}Block{dims}D"
    if temporal:
        attn, plain = f"CrossAttn{{}}Block{temporal}", f"{{}}Block{temporal}"
    return {"down_block_types": (attn.format("Down"), plain.format("Down")),
            "up_block_types": (plain.format("Up"), attn.format("Up"))}


def flux_ids(g, axes=3, **more):
    """Flux's inputs: text, the image/text position ids (`axes` of them) of a 4×4 grid, `more`."""
    img = torch.stack(torch.meshgrid(*[torch.zeros(1)] * (axes - 2), torch.arange(4.0), torch.arange(4.0),
                                     indexing="ij"), -1)
    return text(g, img_ids=Fixed([img.reshape(-1, axes)]), txt_ids=Fixed([torch.zeros(TXT_LEN, axes)]),
                timestep=step(0.5), **more)


def hunyuan_inputs(g):
    """HunyuanDiT's inputs: CLIP and T5 states with masks, image meta sizes, a style, 2-D RoPE."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed

    rope = get_2d_rotary_pos_embed(8, ((0, 0), (4, 4)), (4, 4))
    return text(g, text_embedding_mask=torch.ones(1, TXT_LEN), encoder_hidden_states_t5=rand(g, TXT_LEN, TXT),
                text_embedding_mask_t5=torch.ones(1, TXT_LEN), image_meta_size=torch.tensor([[16.0, 16, 16, 16, 0, 0]]),
                style=torch.zeros(1, dtype=torch.long), image_rotary_emb=Fixed(rope))


def lumina_next_inputs(g):
    """LuminaNext's inputs: text states, their mask, and its 2-D RoPE table."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed_lumina

    return text(g, encoder_mask=torch.ones(1, TXT_LEN), timestep=step(0.5), cross_attention_kwargs={},
                image_rotary_emb=Fixed([get_2d_rotary_pos_embed_lumina(16, 8, 8)]))


def stable_audio_inputs(g):
    """StableAudio DiT's inputs: text states, global states, and the 1-D RoPE of 1 + 16 positions."""
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    rope = get_1d_rotary_pos_embed(4, 17, use_real=True, repeat_interleave_real=False)
    return text(g, global_hidden_states=rand(g, 1, TXT), rotary_embedding=Fixed(rope))


def tiny_vae(m, x):
    """AutoencoderTiny without forward's rounding of the latents to bytes: encode, decode."""
    return m.decode(m.encode(x).latents).sample


def per_frame(m, x, **kw):
    """A model that takes a video's frames as its batch ([B*F, C, H, W] and `num_frames`), on
    x = [B, F, C, H, W]."""
    out = m(x.flatten(0, 1), num_frames=x.shape[1], return_dict=False, **kw)[0]
    return out.unflatten(0, (-1, x.shape[1]))


def per_frame_text(m, x, encoder_hidden_states, **kw):
    """A video UNet whose text states are per frame: repeated to each of x = [B, C, F, H, W]'s frames."""
    ehs = encoder_hidden_states.repeat_interleave(x.shape[2], 0)
    return first_tensor(m(x, encoder_hidden_states=ehs, return_dict=False, **kw))


def sparse_control(m, x, **kw):
    """SparseControlNetModel, its per-frame residual [B*F, ...] regrouped by video: [B, F, ...]."""
    return per_frame_text(m, x, **kw).unflatten(0, (x.shape[0], -1))


def union(m, x, controlnet_cond, **kw):
    """ControlNetUnionModel with one condition image, of the first control type."""
    return first_tensor(m(x, controlnet_cond=[controlnet_cond], control_type_idx=[0], conditioning_scale=[1.0],
                          return_dict=False, **kw))


def t5_film(m, x, encodings, mask, noise_time):
    """T5FilmDecoder: one (encodings, mask) pair of conditions, x the decoder's input tokens."""
    return m([(encodings, mask)], x, noise_time)


UNET2D = dict(block_out_channels=(32, 64), layers_per_block=1, norm_num_groups=8, sample_size=16)
UNET_COND = dict(UNET2D, in_channels=4, out_channels=4, cross_attention_dim=TXT, attention_head_dim=8,
                 **unet_blocks(True))
VAE = dict(block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
           up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=8, sample_size=32)
DIT = dict(num_attention_heads=2, attention_head_dim=8, num_layers=2)
WAN_VAE = dict(base_dim=8, z_dim=4, dim_mult=[1, 2], num_res_blocks=1, latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
IMAGE, LATENT, PACKED, VIDEO = (3, 32, 32), (4, 16, 16), (16, 16), (3, 5, 16, 16)

# class name -> (config, sample_shape, extra inputs(generator) -> {kwarg: value}, options):
# options are `main`, the keyword of x when it is not forward's first, and `run(model, x, **extra)`
# when the model is not simply called.
MODELS = {
    "UNet2DModel": (dict(UNET2D, attention_head_dim=8, **unet_blocks(False)), (3, 16, 16), timestep, {}),
    "UNet2DConditionModel": (UNET_COND, LATENT, text, {}),
    "UNet1DModel": (dict(block_out_channels=(32, 32, 64), extra_in_channels=64, sample_size=64), (2, 64),
                    timestep, {}),
    "UNet3DConditionModel": (dict(UNET_COND, **unet_blocks(True, 3)), (4, 2, 16, 16), text, {}),
    "UNetSpatioTemporalConditionModel": (
        dict(block_out_channels=(32, 64), layers_per_block=1, in_channels=8, out_channels=4, cross_attention_dim=TXT,
             addition_time_embed_dim=8, projection_class_embeddings_input_dim=24, num_attention_heads=(2, 4),
             num_frames=2, **unet_blocks(True, temporal="SpatioTemporal")),
        (2, 8, 16, 16), lambda g: text(g, encoder_hidden_states=rand(g, 1, TXT), added_time_ids=rand(g, 3)), {}),
    "AutoencoderKL": (VAE, IMAGE, mode, {}),
    "AutoencoderTiny": (dict(encoder_block_out_channels=(16,) * 4, decoder_block_out_channels=(16,) * 4,
                             num_encoder_blocks=(1,) * 4, num_decoder_blocks=(1,) * 4), IMAGE, none,
                        {"run": tiny_vae}),
    "VQModel": (dict(VAE, num_vq_embeddings=32, latent_channels=4), IMAGE, none, {}),
    "AsymmetricAutoencoderKL": (
        dict(down_block_out_channels=(32, 64), up_block_out_channels=(32, 64), norm_num_groups=8,
             down_block_types=VAE["down_block_types"], up_block_types=VAE["up_block_types"]),
        IMAGE, mode, {}),
    "AutoencoderDC": (
        dict(latent_channels=8, attention_head_dim=8, encoder_block_types=("ResBlock", "EfficientViTBlock"),
             decoder_block_types=("ResBlock", "EfficientViTBlock"), encoder_block_out_channels=(16, 32),
             decoder_block_out_channels=(16, 32), encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
             encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,))),
        IMAGE, none, {}),
    "AutoencoderOobleck": (dict(encoder_hidden_size=8, downsampling_ratios=[2, 2], channel_multiples=[1, 2],
                                decoder_channels=8, decoder_input_channels=4), (2, 256),
                           mode, {}),
    "ControlNetModel": (
        dict(UNET_COND, conditioning_embedding_out_channels=(8, 16)),
        LATENT, lambda g: text(g, controlnet_cond=rand(g, 3, 32, 32)), {}),
    "T2IAdapter": (dict(channels=(32, 64), num_res_blocks=1, downscale_factor=8), (3, 64, 64), none, {}),
    "Transformer2DModel": (
        dict(DIT, in_channels=32, norm_num_groups=8, cross_attention_dim=TXT, norm_type="layer_norm"),
        (32, 8, 8), text, {}),
    "DiTTransformer2DModel": (dict(DIT, in_channels=4, sample_size=8), (4, 8, 8),
                              lambda g: {"timestep": step(), "class_labels": torch.tensor([1])}, {}),
    "PixArtTransformer2DModel": (
        dict(DIT, in_channels=4, cross_attention_dim=TXT, caption_channels=TXT, sample_size=8,
             use_additional_conditions=False), (4, 8, 8),
        lambda g: text(g, added_cond_kwargs={"resolution": None, "aspect_ratio": None}), {}),
    "SD3Transformer2DModel": (
        dict(DIT, sample_size=8, in_channels=4, out_channels=4, joint_attention_dim=TXT, caption_projection_dim=16,
             pooled_projection_dim=TXT, pos_embed_max_size=16), (4, 8, 8),
        lambda g: text(g, pooled_projections=rand(g, TXT)), {}),
    "FluxTransformer2DModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=TXT, pooled_projection_dim=TXT, axes_dims_rope=(4, 6, 6)), PACKED,
        lambda g: flux_ids(g, pooled_projections=rand(g, TXT)), {}),
    "SanaTransformer2DModel": (
        dict(DIT, in_channels=4, out_channels=4, num_cross_attention_heads=2, cross_attention_head_dim=8,
             cross_attention_dim=16, caption_channels=TXT, sample_size=8), (4, 8, 8), text, {}),
    "AuraFlowTransformer2DModel": (
        dict(sample_size=8, in_channels=4, out_channels=4, num_mmdit_layers=1, num_single_dit_layers=1,
             attention_head_dim=8, num_attention_heads=2, joint_attention_dim=TXT, caption_projection_dim=16,
             pos_embed_max_size=16), (4, 8, 8), flow_text, {}),
    "HunyuanDiT2DModel": (
        dict(DIT, in_channels=4, patch_size=2, sample_size=8, hidden_size=16, cross_attention_dim=TXT,
             cross_attention_dim_t5=TXT, pooled_projection_dim=TXT, text_len=TXT_LEN, text_len_t5=TXT_LEN),
        (4, 8, 8), hunyuan_inputs, {}),
    "CogVideoXTransformer3DModel": (
        dict(DIT, in_channels=4, out_channels=4, time_embed_dim=16, text_embed_dim=TXT, sample_width=8,
             sample_height=8, sample_frames=5, max_text_seq_length=TXT_LEN), (2, 4, 8, 8), text, {}),
    "LTXVideoTransformer3DModel": (
        dict(DIT, in_channels=8, out_channels=8, cross_attention_dim=16, caption_channels=TXT), (32, 8),
        lambda g: text(g, encoder_attention_mask=torch.ones(1, TXT_LEN), num_frames=2, height=4, width=4), {}),
    "WanTransformer3DModel": (
        dict(DIT, in_channels=4, out_channels=4, text_dim=TXT, freq_dim=16, ffn_dim=32, rope_max_seq_len=32),
        (4, 2, 8, 8), text, {}),
    "QwenImageTransformer2DModel": (
        dict(num_layers=2, in_channels=16, out_channels=4, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=TXT, axes_dims_rope=(4, 6, 6)), PACKED,
        lambda g: text(g, encoder_hidden_states_mask=torch.ones(1, TXT_LEN), img_shapes=[[(1, 4, 4)]],
                       timestep=step(0.5)), {}),
    "PriorTransformer": (dict(DIT, embedding_dim=16, num_embeddings=TXT_LEN, additional_embeddings=4), (16,),
                         lambda g: text(g, proj_embedding=rand(g, 16)), {}),
    "UVit2DModel": (
        dict(hidden_size=32, cond_embed_dim=TXT, micro_cond_encode_dim=2, micro_cond_embed_dim=10,
             encoder_hidden_size=TXT, vocab_size=40, codebook_size=32, in_channels=16, block_out_channels=32,
             num_res_blocks=1, block_num_heads=2, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
             sample_size=8),
        (TXT_LEN, TXT), lambda g: {"input_ids": torch.randint(0, 32, (1, 8, 8), generator=g),
                                   "pooled_text_emb": rand(g, TXT), "micro_conds": rand(g, 5)},
        {"main": "encoder_hidden_states"}),
    "LuminaNextDiT2DModel": (
        dict(sample_size=8, in_channels=4, hidden_size=32, num_layers=2, num_attention_heads=2, num_kv_heads=1,
             multiple_of=16, cross_attention_dim=TXT), (4, 8, 8), lumina_next_inputs, {}),
    "Lumina2Transformer2DModel": (
        dict(sample_size=8, in_channels=4, hidden_size=32, num_layers=2, num_refiner_layers=1, num_attention_heads=2,
             num_kv_heads=1, multiple_of=16, axes_dim_rope=(4, 6, 6), axes_lens=(32, 32, 32), cap_feat_dim=TXT),
        (4, 8, 8), lambda g: text(g, encoder_attention_mask=torch.ones(1, TXT_LEN, dtype=torch.bool),
                                  timestep=step(0.5)), {}),
    "CogView3PlusTransformer2DModel": (
        dict(DIT, in_channels=4, out_channels=4, text_embed_dim=TXT, time_embed_dim=16, condition_dim=4,
             pos_embed_max_size=8, sample_size=8), (4, 8, 8),
        lambda g: text(g, original_size=torch.tensor([[64.0, 64]]), target_size=torch.tensor([[64.0, 64]]),
                       crop_coords=torch.zeros(1, 2)), {}),
    "StableAudioDiTModel": (
        dict(DIT, sample_size=16, in_channels=4, out_channels=4, num_key_value_attention_heads=1,
             cross_attention_dim=16, time_proj_dim=16, global_states_input_dim=TXT, cross_attention_input_dim=TXT),
        (4, 16), stable_audio_inputs, {}),
    # video VAEs: x = [B, C, F, H, W]
    "AutoencoderKLTemporalDecoder": (dict(block_out_channels=(32, 64), down_block_types=VAE["down_block_types"]),
                                     (2,) + IMAGE, mode, {"run": per_frame}),
    "AutoencoderKLCogVideoX": (
        dict(block_out_channels=(32, 32), down_block_types=("CogVideoXDownBlock3D",) * 2,
             up_block_types=("CogVideoXUpBlock3D",) * 2, latent_channels=4, layers_per_block=1, norm_num_groups=8),
        VIDEO, mode, {}),
    "AutoencoderKLLTXVideo": (
        dict(latent_channels=8, block_out_channels=(16, 32), decoder_block_out_channels=(16, 32),
             down_block_types=("LTXVideoDownBlock3D",) * 2, layers_per_block=(1, 1, 1),
             decoder_layers_per_block=(1, 1, 1), spatio_temporal_scaling=(True, False),
             decoder_spatio_temporal_scaling=(True, False), decoder_inject_noise=(False,) * 3,
             downsample_type=("conv", "conv"), upsample_residual=(False, False), upsample_factor=(1, 1), patch_size=2),
        VIDEO, mode, {}),
    "AutoencoderKLWan": (dict(WAN_VAE, temperal_downsample=[True]), VIDEO, mode, {}),
    "AutoencoderKLQwenImage": (dict(WAN_VAE, temperal_downsample=[False]), (3, 1, 16, 16),
                               mode, {}),
    "AutoencoderKLHunyuanVideo": (
        dict(latent_channels=4, block_out_channels=(16, 16, 32), down_block_types=("HunyuanVideoDownBlock3D",) * 3,
             up_block_types=("HunyuanVideoUpBlock3D",) * 3, layers_per_block=1, norm_num_groups=8,
             spatial_compression_ratio=4, temporal_compression_ratio=4), VIDEO, mode, {}),
    "AutoencoderKLMochi": (
        dict(encoder_block_out_channels=(32, 32), decoder_block_out_channels=(32, 32), latent_channels=4,
             layers_per_block=(1, 1, 1), temporal_expansions=(1,), spatial_expansions=(2,),
             add_attention_block=(False, True, True), latents_mean=(0.0,) * 4, latents_std=(1.0,) * 4),
        VIDEO, mode, {}),
    "AutoencoderKLMagvit": (
        dict(block_out_channels=(16, 32), down_block_types=("SpatialDownBlock3D", "SpatialTemporalDownBlock3D"),
             up_block_types=("SpatialUpBlock3D", "SpatialTemporalUpBlock3D"), layers_per_block=1, norm_num_groups=8,
             latent_channels=4), VIDEO, mode, {}),
    "AutoencoderKLFlux2": (dict(VAE, latent_channels=4), IMAGE, mode, {}),
    # other ControlNets (their first output: the first block's residual)
    "FluxControlNetModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=TXT, pooled_projection_dim=TXT, axes_dims_rope=(4, 6, 6)), PACKED,
        lambda g: flux_ids(g, pooled_projections=rand(g, TXT), controlnet_cond=rand(g, *PACKED)), {}),
    "SD3ControlNetModel": (
        dict(DIT, sample_size=8, in_channels=4, out_channels=4, joint_attention_dim=TXT, caption_projection_dim=16,
             pooled_projection_dim=TXT, pos_embed_max_size=16), (4, 8, 8),
        lambda g: text(g, pooled_projections=rand(g, TXT), controlnet_cond=rand(g, 4, 8, 8)), {}),
    "SanaControlNetModel": (
        dict(DIT, in_channels=4, out_channels=4, num_cross_attention_heads=2, cross_attention_head_dim=8,
             cross_attention_dim=16, caption_channels=TXT, sample_size=8), (4, 8, 8),
        lambda g: text(g, controlnet_cond=rand(g, 4, 8, 8)), {}),
    "HunyuanDiT2DControlNetModel": (
        dict(num_attention_heads=2, attention_head_dim=8, transformer_num_layers=4, in_channels=4, patch_size=2,
             sample_size=8, hidden_size=16, cross_attention_dim=TXT, cross_attention_dim_t5=TXT,
             pooled_projection_dim=TXT, text_len=TXT_LEN, text_len_t5=TXT_LEN),
        (4, 8, 8), lambda g: {**hunyuan_inputs(g), "controlnet_cond": rand(g, 4, 8, 8)}, {}),
    "QwenImageControlNetModel": (
        dict(num_layers=2, in_channels=16, out_channels=4, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=TXT, axes_dims_rope=(4, 6, 6)), PACKED,
        lambda g: text(g, encoder_hidden_states_mask=torch.ones(1, TXT_LEN), img_shapes=[[(1, 4, 4)]],
                       timestep=step(0.5), controlnet_cond=rand(g, *PACKED)), {}),
    # other UNets
    "UNetMotionModel": (
        dict(UNET2D, in_channels=4, out_channels=4, cross_attention_dim=TXT, num_attention_heads=2,
             motion_num_attention_heads=2, motion_max_seq_length=8, **unet_blocks(True, temporal="Motion")),
        (4, 2, 16, 16), text, {"run": per_frame_text}),
    "I2VGenXLUNet": (
        dict(UNET_COND, **unet_blocks(True, 3)), (4, 2, 16, 16),
        lambda g: text(g, fps=torch.tensor([8.0]), image_latents=rand(g, 4, 2, 16, 16),
                       image_embeddings=rand(g, TXT)), {}),
    "Kandinsky3UNet": (
        dict(in_channels=4, time_embedding_dim=32, groups=8, attention_head_dim=8, layers_per_block=2,
             block_out_channels=(32, 64), cross_attention_dim=TXT, encoder_hid_dim=TXT), LATENT,
        lambda g: text(g, encoder_attention_mask=torch.ones(1, TXT_LEN)), {}),
    "StableCascadeUNet": (
        dict(in_channels=4, out_channels=4, timestep_ratio_embedding_dim=16, conditioning_dim=32,
             block_out_channels=(32, 32), num_attention_heads=(2, 2), down_num_layers_per_block=(1, 1),
             up_num_layers_per_block=(1, 1), clip_text_pooled_in_channels=TXT, clip_seq=2, dropout=(0.0, 0.0),
             timestep_conditioning_type=("sca",)), LATENT,
        lambda g: {"timestep_ratio": step(0.5), "clip_text_pooled": rand(g, 1, TXT)}, {}),
    "AudioLDM2UNet2DConditionModel": (UNET_COND, LATENT, text, {}),
    # other transformers and small models
    "TransformerTemporalModel": (dict(num_attention_heads=2, attention_head_dim=8, in_channels=16, norm_num_groups=8),
                                 (2, 16, 8, 8), none, {"run": per_frame}),
    "LatteTransformer3DModel": (
        dict(DIT, in_channels=4, out_channels=8, cross_attention_dim=16, sample_size=8, patch_size=2,
             num_embeds_ada_norm=1000, norm_type="ada_norm_single", caption_channels=TXT, video_length=2),
        (4, 2, 8, 8), text, {}),
    "AllegroTransformer3DModel": (
        dict(DIT, in_channels=4, out_channels=4, cross_attention_dim=16, caption_channels=TXT, sample_height=8,
             sample_width=8, sample_frames=2), (4, 2, 8, 8), text, {}),
    "MochiTransformer3DModel": (
        dict(num_attention_heads=2, attention_head_dim=16, num_layers=2, pooled_projection_dim=16, in_channels=4,
             text_embed_dim=TXT, time_embed_dim=16, max_sequence_length=TXT_LEN), (4, 2, 8, 8),
        lambda g: text(g, encoder_attention_mask=torch.ones(1, TXT_LEN)), {}),
    "HunyuanVideoTransformer3DModel": (
        dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=1,
             num_single_layers=1, num_refiner_layers=1, guidance_embeds=False, text_embed_dim=TXT,
             pooled_projection_dim=TXT, rope_axes_dim=(4, 6, 6)), (4, 2, 8, 8),
        lambda g: text(g, encoder_attention_mask=torch.ones(1, TXT_LEN), pooled_projections=rand(g, TXT)), {}),
    "CogView4Transformer2DModel": (
        dict(DIT, in_channels=4, out_channels=4, text_embed_dim=TXT, time_embed_dim=16, condition_dim=4,
             pos_embed_max_size=8, sample_size=8, rope_axes_dim=(8, 8)), (4, 8, 8),
        lambda g: text(g, original_size=torch.tensor([[64.0, 64]]), target_size=torch.tensor([[64.0, 64]]),
                       crop_coords=torch.zeros(1, 2)), {}),
    "ChromaTransformer2DModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=TXT, axes_dims_rope=(4, 6, 6), approximator_num_channels=8,
             approximator_hidden_dim=32, approximator_layers=1), PACKED, flux_ids, {}),
    "Flux2Transformer2DModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=TXT, timestep_guidance_channels=16, axes_dims_rope=(4, 4, 4, 4),
             guidance_embeds=False), PACKED, lambda g: flux_ids(g, axes=4), {}),
    "BriaTransformer2DModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=TXT, axes_dims_rope=(4, 6, 6)), PACKED, flux_ids, {}),
    "SkyReelsV2Transformer3DModel": (
        dict(DIT, in_channels=4, out_channels=4, text_dim=TXT, freq_dim=16, ffn_dim=32, rope_max_seq_len=32),
        (4, 2, 8, 8), text, {}),
    "ConsisIDTransformer3DModel": (
        dict(DIT, in_channels=4, out_channels=4, time_embed_dim=16, text_embed_dim=TXT, sample_width=8,
             sample_height=8, sample_frames=5, max_text_seq_length=TXT_LEN), (2, 4, 8, 8), text, {}),
    "CLIPImageProjection": (dict(hidden_size=16), (16,), none, {}),
    "ReduxImageEncoder": (dict(redux_dim=16, txt_in_features=32), (4, 16), none, {}),
    "StableAudioProjectionModel": (dict(text_encoder_dim=TXT, conditioning_dim=16, min_value=0, max_value=8),
                                   (TXT_LEN, TXT), lambda g: {"start_seconds": step(1.0), "end_seconds": step(4.0)},
                                   {}),
    "T5FilmDecoder": (
        dict(input_dims=8, targets_length=16, d_model=32, num_layers=2, num_heads=2, d_kv=16, d_ff=64,
             dropout_rate=0.0), (16, 8),
        lambda g: {"encodings": rand(g, TXT_LEN, 32), "mask": torch.ones(1, TXT_LEN, dtype=torch.bool),
                   "noise_time": step(0.5)}, {"run": t5_film}),
    "SparseControlNetModel": (
        dict(UNET2D, cross_attention_dim=TXT, attention_head_dim=8, conditioning_channels=4,
             conditioning_embedding_out_channels=(8, 16), motion_num_attention_heads=2, motion_max_seq_length=8,
             down_block_types=("CrossAttnDownBlockMotion", "DownBlockMotion")), (4, 2, 16, 16),
        lambda g: text(g, controlnet_cond=rand(g, 4, 2, 16, 16), conditioning_mask=torch.ones(1, 1, 2, 16, 16)),
        {"run": sparse_control}),
    "UNetControlNetXSModel": (
        dict(UNET_COND, num_attention_heads=2, ctrl_block_out_channels=(8, 16), ctrl_num_attention_heads=2,
             ctrl_max_norm_num_groups=4, ctrl_conditioning_embedding_out_channels=(8, 16)), LATENT,
        lambda g: text(g, controlnet_cond=rand(g, 3, 32, 32)), {}),
    "ControlNetUnionModel": (
        dict(UNET_COND, conditioning_embedding_out_channels=(8, 16), addition_time_embed_dim=8, num_control_type=2,
             num_trans_channel=32, num_trans_head=2, num_proj_channel=32), LATENT,
        lambda g: text(g, controlnet_cond=rand(g, 3, 32, 32), control_type=torch.tensor([[1.0, 0.0]])), {"run": union}),
    "ChronoEditTransformer3DModel": (
        dict(DIT, in_channels=4, out_channels=4, text_dim=TXT, freq_dim=16, ffn_dim=32, rope_max_seq_len=32),
        (4, 2, 8, 8), text, {}),
    "WanVACETransformer3DModel": (
        dict(DIT, in_channels=4, out_channels=4, text_dim=TXT, freq_dim=16, ffn_dim=32, rope_max_seq_len=32,
             vace_layers=[0], vace_in_channels=8), (4, 2, 8, 8),
        lambda g: text(g, control_hidden_states=rand(g, 8, 2, 8, 8)), {}),
    "SanaVideoTransformer3DModel": (
        dict(DIT, in_channels=4, out_channels=4, num_cross_attention_heads=2, cross_attention_head_dim=8,
             cross_attention_dim=16, caption_channels=TXT, sample_size=8, rope_max_seq_len=32), (4, 2, 8, 8), text, {}),
    "CosmosTransformer3DModel": (
        dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=2,
             text_embed_dim=TXT, adaln_lora_dim=8, max_size=(4, 8, 8)), (4, 2, 8, 8),
        lambda g: text(g, padding_mask=Fixed([torch.zeros(1, 1, 8, 8)])), {}),
    "EasyAnimateTransformer3DModel": (
        dict(DIT, attention_head_dim=16, in_channels=4, out_channels=4, patch_size=2, sample_width=8, sample_height=8,
             mmdit_layers=2, time_embed_dim=16, text_embed_dim=TXT), (4, 2, 8, 8), text, {}),
    "HunyuanImageTransformer2DModel": (
        dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=1,
             num_single_layers=1, num_refiner_layers=1, patch_size=(2, 2), text_embed_dim=TXT, rope_axes_dim=(8, 8)),
        (4, 8, 8), lambda g: text(g, encoder_attention_mask=torch.ones(1, TXT_LEN)), {}),
    "Kandinsky5Transformer3DModel": (
        dict(in_visual_dim=4, in_text_dim=TXT, in_text_dim2=TXT, time_dim=16, out_visual_dim=4, model_dim=32,
             ff_dim=64, num_text_blocks=1, num_visual_blocks=2, axes_dims=(4, 6, 6)), (2, 8, 8, 4),
        lambda g: text(g, pooled_projections=rand(g, TXT), text_rope_pos=Fixed([torch.arange(TXT_LEN)]),
                       visual_rope_pos=Fixed([torch.arange(2), torch.arange(4), torch.arange(4)])), {}),
    "LongCatImageTransformer2DModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=TXT, pooled_projection_dim=TXT, axes_dims_rope=(4, 6, 6)), PACKED, flux_ids, {}),
    "OvisImageTransformer2DModel": (
        dict(in_channels=16, out_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
             num_attention_heads=2, joint_attention_dim=TXT, axes_dims_rope=(4, 6, 6)), PACKED, flux_ids, {}),
    "PRXTransformer2DModel": (
        dict(in_channels=4, patch_size=2, context_in_dim=TXT, hidden_size=32, mlp_ratio=2.0, num_heads=2, depth=2,
             axes_dim=(8, 8)), (4, 8, 8), flow_text, {}),
}


def types():
    """Sorted list of the diffusers class names this file covers."""
    return sorted(MODELS)


class Wrapper(torch.nn.Module):
    """forward(x) -> the first tensor the model returns, its other inputs fixed: tensors with a
    batch dim are buffers repeated to x's batch, `Fixed` ones buffers passed as they are, anything
    else a constant argument."""

    def __init__(self, model, sample_shape, extra, main=None, run=None):
        super().__init__()
        self.model, self.sample_shape, self.run = model, tuple(sample_shape), run
        self.main = main or next(iter(inspect.signature(model.forward).parameters))
        self.batched, self.fixed, self.const = [], {}, {}
        for k, v in extra.items():
            if isinstance(v, torch.Tensor):
                self.register_buffer(k, v)
                self.batched.append(k)
            elif isinstance(v, Fixed):
                for i, t in enumerate(v):
                    self.register_buffer(f"{k}_{i}", t)
                self.fixed[k] = len(v)
            else:
                self.const[k] = v
        if run is None and "return_dict" in inspect.signature(model.forward).parameters:
            self.const["return_dict"] = False

    def forward(self, x):
        kw = dict(self.const)
        for k in self.batched:
            t = getattr(self, k)
            kw[k] = t.repeat(x.shape[0], *[1] * (t.dim() - 1))
        for k, n in self.fixed.items():
            ts = tuple(getattr(self, f"{k}_{i}") for i in range(n))
            kw[k] = ts[0] if n == 1 else ts
        if self.run is not None:
            return self.run(self.model, x, **kw)
        return first_tensor(self.model(**{self.main: x}, **kw))


def first_tensor(out):
    """The first tensor of a model's output: itself, or the first tensor element of a tuple (a
    ControlNet's mid-block residual after its tuple of down-block ones), else of its first element."""
    if isinstance(out, torch.Tensor):
        return out
    items = list(out.values()) if isinstance(out, dict) else list(out)
    tensors = [o for o in items if isinstance(o, torch.Tensor)]
    return tensors[0] if tensors else first_tensor(items[0])


def build(name):
    """The wrapped tiny random-init model `name`, in eval mode, with its `sample_shape`."""
    import diffusers

    config, sample_shape, extra, options = MODELS[name]
    torch.manual_seed(0)
    model = getattr(diffusers, name).from_config(config).eval().float()
    return Wrapper(model, sample_shape, extra(torch.Generator().manual_seed(0)), **options).eval()
