"""A small word-level tokenizer built locally with the ``tokenizers`` library (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

# Token 0 is "!": a model whose logits are all NaN argmaxes to id 0 and "writes" "!!!!", as broken models do.
# The rest are MiniCPM-V's image and slice markers and its terminators.
SPECIAL_TOKENS = ["!", "<unk>", "<s>", "</s>", "<pad>", "<image>", "</image>", "<slice>", "</slice>", "<|im_end|>"]
WORDS = (
    "describe what do you see ? . , the a of and in on with is this image photo shows there left right "
    "top bottom red green blue yellow black white bright dark small large square circle line corner "
    "center cat dog bird tree house car sky sea sun moon road"
).split()


def vocabulary(vocab_size: int) -> list[str]:
    """The first ``vocab_size`` tokens: specials, then words, then filler words ``w<N>``."""
    base = SPECIAL_TOKENS + WORDS
    if vocab_size < len(SPECIAL_TOKENS) + 8:
        raise ValueError(f"vocab_size must be at least {len(SPECIAL_TOKENS) + 8}, got {vocab_size}")
    filler = [f"w{i}" for i in range(max(0, vocab_size - len(base)))]
    return (base + filler)[:vocab_size]


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """Write tokenizer.json + tokenizer_config.json loadable by ``AutoTokenizer.from_pretrained``."""
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(vocabulary(vocab_size))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    specials = [t for t in SPECIAL_TOKENS if t in vocab and t != "!"]
    backend.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=4096,
        model_input_names=["input_ids", "attention_mask"],
    )
    tokenizer.save_pretrained(str(folder))
