"""A tiny random-weight Qwen2-VL built offline, for testing the vLLM plumbing.

A byte-level BPE trained with ``tokenizers`` on a few lines, with the Qwen chat special tokens
and ``<think>`` / ``</think>`` (plain added tokens, as in Qwen3, so they stay in the decoded
text); a Qwen2VLConfig with hidden size 128, 4 heads (head dim 32, the smallest vLLM's CPU
attention takes) and ``mrope_section [4, 6, 6]``; a chat template that opens ``<think>`` when
``enable_thinking`` is set, as Qwen3 templates do.

The weights are random except a scripted readout: a few residual dimensions that no layer writes
to carry "which token came last" to the output head, so greedy decoding writes
``SCRIPT`` = ``T</think>A<|im_end|>`` whatever the prompt and image. That gives known outputs for
every case the plumbing must handle: a thinking block that ends, a final answer, a stop at the
end-of-turn token (``finish_reason == "stop"``), and with a small ``max_tokens`` a thinking
block cut by the limit (``"length"``). Everything else about the model is random.

Run alone: ``python tests/vllm/tiny_qwen2vl.py FOLDER``.
"""

from __future__ import annotations

import sys
from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
THINK_TOKENS = ["<think>", "</think>"]
# What greedy decoding writes, token by token; the last one ends the turn.
SCRIPT = ["T", "</think>", "A", "<|im_end|>"]
SCRIPT_TEXT = "T</think>A"  # decoded (the end-of-turn token is special, so not in the text)
VOCAB_SIZE = 512
HIDDEN = 128
HEADS = 4
VISION_EMBED = 64
VISION_HEADS = 2  # vision head dim 32 too
# Images are resized to at most 8x8 patches of 28 px: at most 16 image tokens per image.
MIN_PIXELS = 28 * 28 * 4
MAX_PIXELS = 28 * 28 * 16

# One string with no incidental whitespace, so no whitespace control is needed.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ['image', 'image_url', 'image_pil'] %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}"
    "{% endif %}"
)

CORPUS = [
    "What is written in the image? Reply with only the text shown in the image, exactly as written.",
    "The answer is STOP. The sign says CAFE, OPEN, EXIT and BRIDGESTONE.",
    "Let me think step by step about the picture before answering the question.",
    "0123456789 + - * / = ( ) [ ] { } , . ; : ! ? ' \" abcdefghijklmnopqrstuvwxyz",
]


def build_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS) - len(THINK_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS * 4, trainer=trainer)
    bpe.add_tokens([AddedToken(tok, special=False, normalized=False) for tok in THINK_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        chat_template=CHAT_TEMPLATE,
    )


def build(folder: str | Path) -> Path:
    """Write the tiny model (weights, config, tokenizer, processor, template) into ``folder``."""
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
    )

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS + THINK_TOKENS}
    vocab = max(len(tokenizer), VOCAB_SIZE)
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": HIDDEN,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": HEADS,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [4, 6, 6]},
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "embed_dim": VISION_EMBED,
            "hidden_size": HIDDEN,
            "num_heads": VISION_HEADS,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(config).to(torch.float32)
    script_readout(model, [tokenizer.convert_tokens_to_ids(tok) for tok in SCRIPT])
    model.save_pretrained(folder)
    GenerationConfig(
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"]
    ).save_pretrained(folder)
    image_processor = Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    processor_parts = {"image_processor": image_processor, "tokenizer": tokenizer, "chat_template": CHAT_TEMPLATE}
    try:
        from transformers import Qwen2VLVideoProcessor  # needs torchvision

        processor_parts["video_processor"] = Qwen2VLVideoProcessor()
    except ImportError:
        pass
    Qwen2VLProcessor(**processor_parts).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def script_readout(model, script_ids: list[int]) -> None:
    """Make greedy decoding follow ``script_ids`` from any prompt.

    Reserved residual dimensions: ``base`` is 1 in every token's embedding, and dimension ``k_i``
    is 1 only in the embedding of script token i. No layer writes to them (their rows of every
    output projection are zero), so at the last position they still say which token came last.
    The final norm passes only them, and the output head maps ``base`` weakly to the first script
    token and ``k_i`` strongly to token i + 1.
    """
    import torch

    lm = model.model.language_model if hasattr(model.model, "language_model") else model.model
    reserved = list(range(HIDDEN - len(script_ids), HIDDEN))  # base + one per script token but the last
    base, chain = reserved[0], reserved[1:]
    with torch.no_grad():
        emb = lm.embed_tokens.weight
        emb[:, reserved] = 0.0
        emb[:, base] = 1.0
        for token, dim in zip(script_ids[:-1], chain):
            emb[token, dim] = 1.0
        for layer in lm.layers:
            layer.self_attn.o_proj.weight[reserved, :] = 0.0
            layer.mlp.down_proj.weight[reserved, :] = 0.0
        lm.norm.weight.zero_()
        lm.norm.weight[reserved] = 1.0
        head = model.lm_head.weight
        head.zero_()
        head[script_ids[0], base] = 1.0
        for dim, following in zip(chain, script_ids[1:]):
            head[following, dim] = 10.0


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "tiny-qwen2vl"))
