"""Tiny tokenizers and models built on the spot, so training runs offline and tests use real ones.

Nothing is downloaded: a byte-level BPE tokenizer is trained on the caller's texts (or a real
tokenizer folder, such as Qwen3's, is copied) and a randomly initialised Qwen3 model is sized to it.
Both are seeded, so the same inputs give the same files.
Digits are single tokens (never merged), which keeps arithmetic tasks learnable by a tiny model.
torch, transformers and tokenizers are imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfcore.chat import END_OF_TURN, QWEN3_TEMPLATE, SPECIAL_TOKENS

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

PAD_TOKEN = "<|endoftext|>"
DIGITS = "0123456789"
_BYTE_ALPHABET_SIZE = 256


def build_tokenizer(
    texts: Iterable[str],
    out_dir: str | Path,
    vocab_size: int = 512,
    template: str = QWEN3_TEMPLATE,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` and save it to ``out_dir``.

    The special tokens of :data:`rlfcore.chat.SPECIAL_TOKENS` come first (ids 0..n-1), then all 256
    bytes, then merges. Digits are split off one by one before byte-level splitting, so no merge
    ever contains a digit.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    minimum = len(SPECIAL_TOKENS) + _BYTE_ALPHABET_SIZE
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: the {len(SPECIAL_TOKENS)} special tokens and "
            f"{_BYTE_ALPHABET_SIZE} bytes need at least {minimum}"
        )
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    vocab = bpe.get_vocab()
    missing = [d for d in DIGITS if d not in vocab]
    if missing:  # the byte alphabet holds every digit; this guards the invariant the docs promise
        raise RuntimeError(f"trained vocabulary lacks the digit tokens {missing}")

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=END_OF_TURN,
        pad_token=PAD_TOKEN,
        extra_special_tokens=[t for t in SPECIAL_TOKENS if t not in (END_OF_TURN, PAD_TOKEN)],
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 30,
    )
    tokenizer.chat_template = template
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer


def build_model(
    tokenizer_dir: str | Path,
    out_dir: str | Path,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 1024,
    seed: int = 0,
    tie_word_embeddings: bool = True,
    tokenizer: Any = None,
) -> PreTrainedModel:
    """Randomly initialise a Qwen3 causal LM sized to the tokenizer in ``tokenizer_dir`` (or to
    ``tokenizer``, that folder's tokenizer already loaded); save it to ``out_dir``."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
    tok = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(str(tokenizer_dir))
    eos_id = tok.eos_token_id if tok.eos_token is not None else tok.convert_tokens_to_ids(END_OF_TURN)
    if not isinstance(eos_id, int) or eos_id == tok.unk_token_id:
        raise ValueError(f"tokenizer in {tokenizer_dir} names no eos_token and lacks {END_OF_TURN!r}")
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos_id  # Llama 3 has no pad token
    bos_id = tok.bos_token_id if tok.bos_token_id is not None else pad_id  # Qwen has no bos; it uses <|endoftext|>
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):  # seed the init without touching the caller's RNG
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    log.info("built %s in %s", describe(model), out_dir)
    return model


def build_tiny(
    texts: Iterable[str], out_dir: str | Path, vocab_size: int = 512, template: str = QWEN3_TEMPLATE, **sizes: Any
) -> Path:
    """Build a tokenizer and a model into one folder that the ``Auto*`` classes load offline.

    ``sizes`` are passed to :func:`build_model` (``hidden_size``, ``num_layers``, ``seed``, ...).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(texts, out, vocab_size=vocab_size, template=template)
    build_model(out, out, **sizes)
    return out


TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
)  # fmt: skip
"""The files of a Hugging Face tokenizer folder (a model folder's other files are not copied)."""


def copy_tokenizer(tokenizer_dir: str | Path, out_dir: str | Path) -> PreTrainedTokenizerBase:
    """Copy a real tokenizer folder's files into ``out_dir`` byte for byte, once they are known to
    load offline and to carry a chat template (rlf renders every prompt with it); returns the tokenizer."""
    from transformers import AutoTokenizer

    src, out = Path(tokenizer_dir), Path(out_dir)
    if not src.is_dir():
        raise FileNotFoundError(f"tokenizer folder {src} does not exist")
    files = [src / f for f in TOKENIZER_FILES if (src / f).is_file()]
    if not any(f.name in ("tokenizer.json", "tokenizer_config.json") for f in files):
        raise FileNotFoundError(
            f"{src} is not a tokenizer folder: it has neither tokenizer.json nor tokenizer_config.json"
        )
    try:
        tok = AutoTokenizer.from_pretrained(str(src), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds; the message says which folder
        raise ValueError(f"the tokenizer in {src} does not load: {exc}") from exc
    if not tok.chat_template:
        raise ValueError(
            f"the tokenizer in {src} has no chat template (chat_template.jinja or tokenizer_config.json's)"
        )
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copyfile(f, out / f.name)
    return tok


def build_on_tokenizer(tokenizer_dir: str | Path, out_dir: str | Path, **sizes: Any) -> Path:
    """A randomly initialised model sized to a real tokenizer's vocabulary, beside a copy of that
    tokenizer in ``out_dir``: a real vocabulary and template with a model small enough for a CPU.

    ``sizes`` are passed to :func:`build_model`. With a vocabulary of ~150k the tied embedding is most
    of the parameters, so keep ``hidden_size`` small.
    """
    out = Path(out_dir)
    build_model(out, out, tokenizer=copy_tokenizer(tokenizer_dir, out), **sizes)
    return out


def count_parameters(model: Any) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def describe(model: Any) -> str:
    """One line naming the architecture, its sizes and the parameter count."""
    c = model.config
    return (
        f"{type(model).__name__}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
        f"heads {c.num_attention_heads}/{c.num_key_value_heads}, vocab {c.vocab_size}, "
        f"{count_parameters(model):,} parameters"
    )
