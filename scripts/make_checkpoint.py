"""Build a random-weight Qwen3 checkpoint in the published Hugging Face layout.

The real weights cannot be downloaded everywhere (CI has no internet), so tests and
benchmarks run on checkpoints made here with `transformers.Qwen3ForCausalLM`:
random weights, every RMSNorm weight randomised (a fresh model has them all equal to 1,
which hides a swapped or misplaced norm), rope_theta 1e6, head_dim != hidden / heads,
stop ids written, plus a small byte-level BPE tokenizer carrying Qwen3's 26 added tokens
and the published Qwen3 chat template.

    python scripts/make_checkpoint.py models/tiny                 # tiny model for tests
    python scripts/make_checkpoint.py models/bench --size 0.6B    # exact Qwen3-0.6B shapes
    python scripts/make_checkpoint.py models/moe --size tiny-moe  # tiny Qwen3-MoE (30B-A3B layout)

Options choose the layouts the notebook must read: tied embeddings with `lm_head.weight`
stored (0.6B) or absent (4B), untied, sharded, the transformers 4.51 or 5.x config.

MoE sizes ("tiny-moe", "30B-A3B-4layers") are made with `transformers.Qwen3MoeForCausalLM`
and written as Qwen/Qwen3-30B-A3B is published: untied, config with `num_experts`, and each
expert stored on its own (model.layers.{i}.mlp.experts.{e}.gate_proj/up_proj/down_proj.weight,
router model.layers.{i}.mlp.gate.weight), although transformers 5 keeps the experts fused.
"""

import argparse
import json
import os

import torch

# Shapes. "0.6B" is the published Qwen3-0.6B; "tiny" keeps its quirks (GQA, head_dim
# different from hidden / heads, tied embeddings) at a size that runs in milliseconds.
SIZES = {
    "tiny": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, vocab_size=640, max_position_embeddings=512),
    "0.6B": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960),
    # Qwen3-MoE. "30B-A3B-4layers" is the published Qwen3-30B-A3B with 4 of its 48 layers;
    # intermediate_size is the width of a dense layer (mlp_only_layers), moe_intermediate_size
    # that of one expert.
    "tiny-moe": dict(hidden_size=64, intermediate_size=160, moe_intermediate_size=48, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=640,
                     max_position_embeddings=512, num_experts=8, num_experts_per_tok=2),
    # int4 groups 32 input columns: the same with an expert width that is a multiple of 32
    "tiny-moe-int4": dict(hidden_size=64, intermediate_size=160, moe_intermediate_size=64, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=640,
                          max_position_embeddings=512, num_experts=8, num_experts_per_tok=2),
    "30B-A3B-4layers": dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                            num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                            vocab_size=151936, max_position_embeddings=40960, num_experts=128,
                            num_experts_per_tok=8),
}

# Qwen3's added tokens, in the published order; the first 14 are "special" (dropped by
# skip_special_tokens), the last 12 are not.
ADDED_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
]
N_SPECIAL = 14

# The Qwen2/Qwen3 pre-tokenizer split pattern (from the published tokenizer.json).
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# The chat template published with Qwen3-0.6B (tokenizer_config.json, "chat_template").
QWEN3_CHAT_TEMPLATE = open(os.path.join(os.path.dirname(__file__), "qwen3_chat_template.jinja"),
                           encoding="utf-8").read()
# The chat template published with HuggingFaceTB/SmolLM2-135M-Instruct (and in its GGUF): no tools, no thinking.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. A language model predicts the next token.",
    "Attention is all you need. Rotary position embeddings rotate query and key vectors.",
    "What is the capital of France? Paris is the capital of France.",
    "def forward(x):\n    return x @ w.T\n",
    "Thinking step by step: first read the question, then answer it briefly.",
    "hello world, hello model, hello tokenizer. 1234567890",
    "测试一下tokenizer的效果。深度学习学完Transformer之后，决定手写一个推理器。",
    "steam现在最火的游戏是什么？你好，世界！",
]


def build_tokenizer(n_base_tokens):
    """A byte-level BPE with Qwen3's pre-tokenizer and added tokens. Rare characters (most
    Chinese ones) stay split into several byte tokens, as they often are in the real one."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=n_base_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    add_qwen3_tokens(tok)
    return tok


def add_qwen3_tokens(tok):
    """Qwen3's 26 added tokens, in the published order (ids follow the order they are added in)."""
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ADDED_TOKENS[:N_SPECIAL]])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS[N_SPECIAL:]])


def start_checkpoint(out_dir, without=()):
    """Make out_dir and write the test tokenizer there, less the added tokens `without` (the last ones: the ids
    stay contiguous); -> {added token: its id}."""
    os.makedirs(out_dir, exist_ok=True)
    tok = build_tokenizer(n_base_tokens=400)
    saved = json.loads(tok.to_str())
    saved["added_tokens"] = [t for t in saved["added_tokens"] if t["content"] not in without]
    type(tok).from_str(json.dumps(saved)).save(os.path.join(out_dir, "tokenizer.json"))
    return {t: tok.token_to_id(t) for t in ADDED_TOKENS if t not in without}


def is_moe(size):
    return "num_experts" in SIZES[size]


def build(out_dir, size="tiny", lm_head=None, shards=1, config_layout="4.51", dtype="bfloat16",
          base=False, seed=0, with_generation_config=True, template_file=False, *,
          norm_topk_prob=True, mlp_only_layers=(), decoder_sparse_step=1, device="cpu"):
    """Write a checkpoint to out_dir and return the transformers model it was made from.

    lm_head: "present" (tied, lm_head.weight stored too, as Qwen3-0.6B), "absent" (tied,
    not stored, as Qwen3-4B) or "untied" (its own matrix, as Qwen3-8B and Qwen3-30B-A3B);
    None: as published, "present" for dense sizes, "untied" for MoE sizes.
    MoE sizes only: norm_topk_prob, mlp_only_layers (layers with a dense MLP),
    decoder_sparse_step (layer i is sparse when (i + 1) % step == 0). Dense sizes only: device, where the
    random weights are made ("cuda": the 0.6B in seconds; other numbers than a CPU's). The router weights are not
    scaled up: a sharper softmax makes top-k near-ties no rarer (the ordering is unchanged) and
    amplifies rounding (transformers' own float32 implementations differ on tiny-moe by 2e-5 as
    built, 5e-5 with the router x2, 2e-4 with it x4).
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from safetensors.torch import save_file

    moe = is_moe(size)
    if lm_head is None:
        lm_head = "untied" if moe else "present"
    assert lm_head in ("present", "absent", "untied") and config_layout in ("4.51", "5")
    assert moe or (norm_topk_prob is True and not mlp_only_layers and decoder_sparse_step == 1
), "MoE options need a MoE size"
    shape = SIZES[size]
    ids = start_checkpoint(out_dir)
    assert max(ids.values()) < shape["vocab_size"]
    eos, eot = ids["<|im_end|>"], ids["<|endoftext|>"]
    eos_token_id = eot if base else eos

    torch.manual_seed(seed)
    common = dict(rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                  rms_norm_eps=1e-6, tie_word_embeddings=(lm_head != "untied"),
                  bos_token_id=eot, eos_token_id=eos_token_id, pad_token_id=None,
                  attention_bias=False, use_sliding_window=False)
    if moe:
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
        moe_options = dict(norm_topk_prob=norm_topk_prob, mlp_only_layers=list(mlp_only_layers),
                           decoder_sparse_step=decoder_sparse_step)
        config = Qwen3MoeConfig(**shape, **moe_options, **common)
        # made directly in `dtype` (30B-A3B-4layers has 3e9 parameters), rotary inv_freq kept in
        # float32 as from_pretrained keeps it
        model = Qwen3MoeForCausalLM._from_config(config, dtype=getattr(torch, dtype)).eval()
        randomise(model)
    else:
        config = Qwen3Config(**shape, **common)
        with torch.device(device):
            model = Qwen3ForCausalLM(config).eval()
            randomise(model)
        model = model.to(getattr(torch, dtype))

    state = {k: v.contiguous().cpu() for k, v in model.state_dict().items()}
    if moe:
        state = per_expert_layout(state)
    if lm_head == "present":
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    elif lm_head == "absent":
        state.pop("lm_head.weight", None)
    for f in os.listdir(out_dir):
        if f.endswith(".safetensors") or f == "model.safetensors.index.json":
            os.remove(os.path.join(out_dir, f))
    names = list(state)
    if shards == 1:
        save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map, per = {}, -(-len(names) // shards)
        for s in range(shards):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: state[n] for n in names[s * per:(s + 1) * per]}
            save_file(part, os.path.join(out_dir, fname), metadata={"format": "pt"})
            weight_map.update({n: fname for n in part})
        total = sum(t.numel() * t.element_size() for t in state.values())
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
        "bos_token_id": eot, "eos_token_id": eos_token_id, **shape,
        "max_window_layers": shape["num_hidden_layers"], "rms_norm_eps": 1e-6,
        "sliding_window": None, "use_sliding_window": False, "use_cache": True,
        "tie_word_embeddings": lm_head != "untied",
    }
    if moe:  # as Qwen3-30B-A3B is published
        cfg.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", **moe_options,
                   output_router_logits=False, router_aux_loss_coef=0.001)
    if config_layout == "4.51":  # as published: top-level rope_theta (an int; 30B-A3B: a float), torch_dtype
        cfg.update(rope_theta=1000000.0 if moe else 1000000, rope_scaling=None, torch_dtype=dtype,
                   transformers_version="4.51.0")
    else:  # as transformers 5 writes it (MoE: "num_local_experts", not "num_experts")
        cfg.update(rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"}, dtype=dtype,
                   transformers_version="5.0.0")
        if moe:
            cfg["num_local_experts"] = cfg.pop("num_experts")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    write_text_files(out_dir, ids, shape["max_position_embeddings"], base=base,
                     with_generation_config=with_generation_config, template_file=template_file)
    return model


def randomise(model):
    """Random weights in place, every RMSNorm weight included."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)  # a fresh model has all ones: randomise so misplaced norms show
            elif name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 1.0)
            else:  # linear layers strong enough that the layers, not the tied embedding, decide the
                p.normal_(0.0, 2.0 * p.shape[-1] ** -0.5)  # next token: varied text, few near-ties


def per_expert_layout(state):
    """transformers 5's fused experts -> the published layout, one tensor per expert:
    experts.gate_up_proj (E, 2F, D) = [gate; up] per expert, experts.down_proj (E, D, F)
    -> experts.{e}.gate_proj.weight (F, D), .up_proj.weight (F, D), .down_proj.weight (D, F)."""
    out = {}
    for name, t in state.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix, f = name[:-len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = t[e, :f].contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = t[e, f:].contiguous()
                out[f"{prefix}{e}.down_proj.weight"] = state[prefix + "down_proj"][e].contiguous()
        elif not name.endswith("mlp.experts.down_proj"):
            out[name] = t
    return out


# Qwen3.5 (model_type qwen3_5): "tiny-qwen3.5" keeps the published quirks (3 Gated DeltaNet layers
# then a gated attention layer, more value heads than key heads, dk != dv, head_dim != hidden / heads,
# partial RoPE, tied embeddings); "qwen3.5-0.8B" is the published Qwen/Qwen3.5-0.8B text model.
QWEN35_SIZES = {
    "tiny-qwen3.5": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=5, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32, vocab_size=640, max_position_embeddings=512,
                         linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                         linear_value_head_dim=24, linear_conv_kernel_dim=4, mrope_section=[1, 1, 2]),
    "qwen3.5-0.8B": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24, num_attention_heads=8,
                         num_key_value_heads=2, head_dim=256, vocab_size=248320, max_position_embeddings=262144,
                         linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128,
                         linear_value_head_dim=128, linear_conv_kernel_dim=4, mrope_section=[11, 11, 10]),
}


def build_qwen35(out_dir, size="tiny-qwen3.5", dtype="bfloat16", seed=0, tied=True, text_only=False):
    """A random Qwen3.5 checkpoint as Qwen/Qwen3.5-* are published: made with
    transformers.Qwen3_5ForConditionalGeneration (a one-block vision tower), config.json with the
    text model's settings under "text_config", text weights under model.language_model.*, plus
    model.visual.* and a few mtp.* (multi-token prediction) tensors, which text models skip.
    text_only: a qwen3_5_text config and model.* names, as Qwen3_5ForCausalLM saves them.

    Randomised so that the layers, not the tied embedding, pick the next token, while float32
    rounding stays small: the zero-centred norms' w in [-0.5, 0.5], the gated norm's in [0.05, 0.15]
    (at [0.5, 1.5] transformers' own float32 logits differ from its float64 ones by 7e-4 on a
    150-token prompt, here by 4e-5), the Gated DeltaNet matrices at std 1/sqrt(in), the others 2/sqrt(in).
    Returns the transformers model."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
    from safetensors.torch import save_file

    shape = dict(QWEN35_SIZES[size])
    mrope = shape.pop("mrope_section")
    ids = start_checkpoint(out_dir)
    eos = ids["<|im_end|>"]
    torch.manual_seed(seed)
    n = shape["num_hidden_layers"]
    text = dict(shape, rms_norm_eps=1e-6, tie_word_embeddings=tied, eos_token_id=eos, hidden_act="silu",
                layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)],
                rope_parameters={"rope_type": "default", "rope_theta": 10_000_000, "partial_rotary_factor": 0.25,
                                 "mrope_section": mrope, "mrope_interleaved": True})
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=shape["hidden_size"],
                  patch_size=2, temporal_patch_size=1, spatial_merge_size=2, num_position_embeddings=4)
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=tied)
    model = Qwen3_5ForConditionalGeneration._from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name:
                continue
            if name.endswith("linear_attn.norm.weight"):
                p.uniform_(0.05, 0.15)
            elif name.endswith("norm.weight"):
                p.uniform_(-0.5, 0.5)
            elif name.endswith("A_log"):
                p.uniform_(-2.0, 1.0)
            elif name.endswith("dt_bias"):
                p.uniform_(-1.0, 1.0)
            elif name.endswith("conv1d.weight"):
                p.normal_(0.0, 0.5)
            elif name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, (1.0 if "linear_attn" in name else 2.0) * p.shape[-1] ** -0.5)
    model = model.to(getattr(torch, dtype))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if tied:
        state.pop("lm_head.weight", None)
    D, F = shape["hidden_size"], shape["intermediate_size"]
    g = torch.Generator().manual_seed(seed + 1)
    for name, s in {"mtp.fc.weight": (D, 2 * D), "mtp.norm.weight": (D,), "mtp.pre_fc_norm_embedding.weight": (D,),
                    "mtp.pre_fc_norm_hidden.weight": (D,), "mtp.layers.0.mlp.down_proj.weight": (D, F)}.items():
        state[name] = (torch.randn(s, generator=g) * 0.02).to(getattr(torch, dtype))
    cfg = json.loads(json.dumps(config.to_dict(), default=str))
    cfg.update(architectures=["Qwen3_5ForConditionalGeneration"], dtype=dtype)
    cfg["text_config"].update(dtype=dtype, bos_token_id=None, pad_token_id=None)
    if text_only:  # as Qwen3_5ForCausalLM saves it: the text config alone, model.* names, no vision, no mtp
        state = {k.replace("model.language_model.", "model.", 1): v for k, v in state.items()
                 if not k.startswith(("model.visual.", "mtp."))}
        cfg = dict(cfg["text_config"], architectures=["Qwen3_5ForCausalLM"])
    for f in os.listdir(out_dir):
        if f.endswith(".safetensors") or f == "model.safetensors.index.json":
            os.remove(os.path.join(out_dir, f))
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_text_files(out_dir, ids, shape["max_position_embeddings"])
    return model


def write_text_files(out_dir, ids, max_positions, base=False, with_generation_config=True, template_file=False,
                     chat_template=QWEN3_CHAT_TEMPLATE):
    """generation_config.json and tokenizer_config.json (with the chat template, or beside it in
    chat_template.jinja as transformers 5 writes it), as Qwen3 and Qwen3.5 checkpoints are published.
    ids: the added tokens' ids; base: a -Base model (stops on <|endoftext|> only, no sampling defaults); Qwen3's
    sampling values come with Qwen3's template only (SmolLM2's generation_config.json has none)."""
    eos, eot = ids["<|im_end|>"], ids["<|endoftext|>"]
    gen_path = os.path.join(out_dir, "generation_config.json")
    if with_generation_config:
        gen = {"bos_token_id": eot, "eos_token_id": eot if base else [eos, eot], "pad_token_id": eot}
        if not base and chat_template == QWEN3_CHAT_TEMPLATE:  # Qwen3's published values
            gen.update(do_sample=True, temperature=0.6, top_k=20, top_p=0.95)
        with open(gen_path, "w") as f:
            json.dump(gen, f, indent=2)
    elif os.path.exists(gen_path):
        os.remove(gen_path)
    tok_cfg = {
        "tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False, "add_prefix_space": False,
        "bos_token": None, "eos_token": "<|endoftext|>" if base else "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
        "model_max_length": max_positions, "split_special_tokens": False,
        "added_tokens_decoder": {str(ids[t]): {"content": t, "special": i < N_SPECIAL, "lstrip": False,
                                              "rstrip": False, "normalized": False, "single_word": False}
                                 for i, t in enumerate(ADDED_TOKENS) if t in ids},
    }
    template_path = os.path.join(out_dir, "chat_template.jinja")
    if template_file:  # transformers 5 writes the template to its own file
        with open(template_path, "w", encoding="utf-8") as f:
            f.write(chat_template)
    else:
        tok_cfg["chat_template"] = chat_template
        if os.path.exists(template_path):
            os.remove(template_path)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tok_cfg, f, indent=2, ensure_ascii=False)


# Llama (model_type llama), laid out as HuggingFaceTB/SmolLM2-135M-Instruct is published: tied and no
# lm_head.weight stored, no head_dim in config.json (hidden / heads), rope_theta 100000, no QK-norm; its chat
# template (no tools, no thinking), no <think> tokens, no sampling values in generation_config.json.
LLAMA_SIZES = {
    "tiny-llama": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=640, max_position_embeddings=512),
}


def build_llama(out_dir, size="tiny-llama", dtype="bfloat16", seed=0, tied=True):
    """A random Llama checkpoint with this project's test tokenizer (less <think>) and SmolLM2's chat template."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from safetensors.torch import save_file

    shape = LLAMA_SIZES[size]
    ids = start_checkpoint(out_dir, without=("<think>", "</think>"))
    eos = ids["<|im_end|>"]
    torch.manual_seed(seed)
    config = LlamaConfig(**shape, rms_norm_eps=1e-5, tie_word_embeddings=tied, bos_token_id=ids["<|im_start|>"],
                         eos_token_id=eos, rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
    model = LlamaForCausalLM(config).eval()
    randomise(model)
    model = model.to(getattr(torch, dtype))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if tied:
        state.pop("lm_head.weight", None)
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
           "attention_dropout": 0.0, "bos_token_id": ids["<|im_start|>"], "eos_token_id": eos,
           "hidden_act": "silu", **shape, "initializer_range": 0.02, "is_llama_config": True,
           "pretraining_tp": 1, "rms_norm_eps": 1e-5, "rope_interleaved": False, "rope_scaling": None,
           "rope_theta": 100000, "tie_word_embeddings": tied, "torch_dtype": dtype,
           "transformers_version": "4.42.3", "use_cache": True}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_text_files(out_dir, ids, shape["max_position_embeddings"], chat_template=SMOLLM2_CHAT_TEMPLATE)
    return model


def build_checkpoint(out_dir, size="tiny", **options):
    """build(), build_qwen35() or build_llama(), as the size says."""
    builder = build_qwen35 if size in QWEN35_SIZES else build_llama if size in LLAMA_SIZES else build
    return builder(str(out_dir), size=size, **options)


def cached(path, size="tiny", **options):
    """A random checkpoint of `size` at path, built once and reused (benchmarks, pictures)."""
    if not os.path.exists(os.path.join(path, "config.json")):
        print(f"building a random {size} checkpoint in {path} (once) ...", flush=True)
        build_checkpoint(path, size, **options)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--size", choices=sorted(SIZES) + sorted(QWEN35_SIZES) + sorted(LLAMA_SIZES), default="tiny")
    p.add_argument("--lm-head", choices=["present", "absent", "untied"], default=None,
                   help="default: as published, present for dense sizes, untied for MoE sizes")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--config-layout", choices=["4.51", "5"], default="4.51")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--base", action="store_true", help="a -Base model: stops on <|endoftext|> only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-norm-topk-prob", action="store_true", help="MoE: keep the top-k softmax weights as they are")
    p.add_argument("--mlp-only-layers", type=int, nargs="*", default=[], help="MoE: layers with a dense MLP")
    p.add_argument("--decoder-sparse-step", type=int, default=1, help="MoE: layer i sparse when (i+1) %% step == 0")
    a = p.parse_args()
    qwen35, llama = a.size in QWEN35_SIZES, a.size in LLAMA_SIZES
    options = {} if qwen35 or llama else dict(lm_head=a.lm_head, shards=a.shards, config_layout=a.config_layout, base=a.base)
    if not (qwen35 or llama) and is_moe(a.size):
        options.update(norm_topk_prob=not a.no_norm_topk_prob, mlp_only_layers=a.mlp_only_layers,
                       decoder_sparse_step=a.decoder_sparse_step)
    build_checkpoint(a.out_dir, a.size, dtype=a.dtype, seed=a.seed, **options)
    print(f"wrote a random {a.size} {'Qwen3.5' if qwen35 else 'Llama' if llama else 'Qwen3'} checkpoint to {a.out_dir}")


if __name__ == "__main__":
    main()
