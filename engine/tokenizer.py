"""Tokenizer: a `tokenizers` backend plus what the engine needs around it (BOS/EOS ids, the
model's chat template, streaming decode).

Two sources:
- GGUF metadata (`from_gguf_fields`): a byte-level BPE is rebuilt from `tokenizer.ggml.tokens` and
  `tokenizer.ggml.merges`, with the pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre`.
- A Hugging Face directory (`from_hf_dir`): `tokenizer.json` as is, plus `tokenizer_config.json`,
  `config.json` and `generation_config.json` for special ids and the chat template.

`encode` never adds special tokens on its own; the caller says whether it wants BOS.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers

from engine.errors import EngineError, ModelLoadError

# llama.cpp token types (gguf.TokenType); only these two change how we build the vocab.
_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4

# Texts llama.cpp treats as end-of-generation when a GGUF's metadata forgets them (many GGUFs,
# the bundled SmolLM2 included, name <|im_start|> as EOS and never mention <|im_end|>).
_END_OF_GENERATION_TEXTS = frozenset(
    {
        "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>",
    }
)

# Split regexes from llama.cpp's llama-vocab.cpp / the models' own tokenizer.json files.
_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_PRE_FAMILIES = {
    "gpt2": ("gpt2", "gpt-2", "default"),
    "digits+gpt2": ("smollm", "starcoder", "refact"),
    "llama3": ("llama-bpe", "llama3", "llama-v3"),
    "qwen2": ("qwen2",),
}


def _byte_level_setup(pre: str) -> tuple[Any, Any, bool]:
    """(normalizer, pre_tokenizer, ignore_merges) for a GGUF `tokenizer.ggml.pre` value."""
    family = next((f for f, names in _PRE_FAMILIES.items() if pre in names), None)
    byte_level_no_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if family == "gpt2":
        return None, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False
    if family == "digits+gpt2":
        # SmolLM2/StarCoder: every digit is its own pre-token, then the GPT-2 split.
        return None, pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        ), False
    if family == "llama3":
        split = pre_tokenizers.Split(Regex(_LLAMA3_REGEX), behavior="isolated", invert=False)
        # Llama 3 matches whole vocab words before applying merges (HF `ignore_merges`).
        return None, pre_tokenizers.Sequence([split, byte_level_no_regex]), True
    if family == "qwen2":
        split = pre_tokenizers.Split(Regex(_QWEN2_REGEX), behavior="isolated", invert=False)
        return normalizers.NFC(), pre_tokenizers.Sequence([split, byte_level_no_regex]), False
    supported = ", ".join(name for names in _PRE_FAMILIES.values() for name in names)
    raise ModelLoadError(f"unsupported GGUF tokenizer pre-tokenizer {pre!r} (supported: {supported})")


class StreamDecoder:
    """Turns a stream of token ids into text pieces without splitting UTF-8 characters.

    Decodes a short window of recent ids and emits only what has become stable text (not ending
    in U+FFFD, which is what a half-finished multi-byte character decodes to)."""

    def __init__(self, tokenizer: "Tokenizer") -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix = 0  # window start: context kept so decoders see word boundaries
        self._read = 0  # ids before this have been emitted

    def push(self, token_id: int) -> str:
        self._ids.append(int(token_id))
        done = self._tokenizer.decode(self._ids[self._prefix : self._read])
        text = self._tokenizer.decode(self._ids[self._prefix :])
        if len(text) > len(done) and not text.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return text[len(done) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (possibly ending in U+FFFD)."""
        done = self._tokenizer.decode(self._ids[self._prefix : self._read])
        text = self._tokenizer.decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return text[len(done) :]


class Tokenizer:
    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        bos_id: int | None,
        eos_ids: Iterable[int],
        chat_template: str | None = None,
        add_bos_default: bool = False,
    ) -> None:
        self.backend = backend
        self.bos_id = bos_id
        self.eos_ids: tuple[int, ...] = tuple(dict.fromkeys(int(i) for i in eos_ids))
        self.chat_template = chat_template
        # What the model's own metadata asks for on raw prompts; `encode` only acts on `add_bos`.
        self.add_bos_default = add_bos_default

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_gguf_fields(cls, fields: Mapping[str, Any]) -> "Tokenizer":
        """Build from GGUF metadata given as plain Python values (key -> str/int/list)."""
        embedded = fields.get("tokenizer.huggingface.json")
        tokens: list[str] = list(fields.get("tokenizer.ggml.tokens") or [])
        if embedded:
            backend = tokenizers.Tokenizer.from_str(embedded)
        else:
            kind = fields.get("tokenizer.ggml.model")
            if kind != "gpt2":
                hint = " (SentencePiece)" if kind == "llama" else ""
                raise ModelLoadError(
                    f"unsupported GGUF tokenizer model {kind!r}{hint}: "
                    "only byte-level BPE ('gpt2') is supported"
                )
            if not tokens:
                raise ModelLoadError("GGUF has no tokenizer.ggml.tokens")
            backend = _byte_level_bpe_from_gguf(
                tokens,
                list(fields.get("tokenizer.ggml.merges") or []),
                list(fields.get("tokenizer.ggml.token_type") or []),
                str(fields.get("tokenizer.ggml.pre") or "default"),
            )

        n_ids = backend.get_vocab_size(with_added_tokens=True)

        def token_id(key: str) -> int | None:
            value = fields.get(key)
            return int(value) if value is not None and 0 <= int(value) < n_ids else None

        bos_id = token_id("tokenizer.ggml.bos_token_id")
        declared = [token_id(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
        eos_ids = [i for i in declared if i is not None]
        eos_ids += _end_of_generation_ids(backend)
        return cls(
            backend,
            bos_id=bos_id,
            eos_ids=eos_ids,
            chat_template=fields.get("tokenizer.chat_template"),
            add_bos_default=bool(fields.get("tokenizer.ggml.add_bos_token", False)) and bos_id is not None,
        )

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> "Tokenizer":
        """Load `tokenizer.json` and the special-token facts spread over the directory's configs."""
        root = Path(path)
        tokenizer_json = root / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise ModelLoadError(f"{root} has no tokenizer.json")
        try:
            backend = tokenizers.Tokenizer.from_file(str(tokenizer_json))
        except Exception as exc:  # the Rust side raises plain Exception subclasses
            raise ModelLoadError(f"cannot read {tokenizer_json}: {_one_line(exc)}") from None
        tok_cfg = _read_json(root / "tokenizer_config.json")
        model_cfg = _read_json(root / "config.json")
        gen_cfg = _read_json(root / "generation_config.json")

        bos_text = _token_text(tok_cfg.get("bos_token"))
        bos_id = backend.token_to_id(bos_text) if bos_text else None
        if bos_id is None:
            bos_id = _first_id(model_cfg.get("bos_token_id"))
        eos_ids = _id_list(model_cfg.get("eos_token_id")) + _id_list(gen_cfg.get("eos_token_id"))
        eos_text = _token_text(tok_cfg.get("eos_token"))
        if eos_text and backend.token_to_id(eos_text) is not None:
            eos_ids.append(backend.token_to_id(eos_text))
        return cls(
            backend,
            bos_id=bos_id,
            eos_ids=eos_ids,
            chat_template=_hf_chat_template(root, tok_cfg),
            add_bos_default=bool(tok_cfg.get("add_bos_token", False)) and bos_id is not None,
        )

    # -- encode / decode ------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    @cached_property
    def special_ids(self) -> frozenset[int]:
        return frozenset(i for i, tok in self.backend.get_added_tokens_decoder().items() if tok.special)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        # Special-token texts in `text` (e.g. from a rendered chat template) map to their ids.
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if add_bos:
            if self.bos_id is None:
                raise EngineError("this tokenizer has no BOS token")
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_token(self, token_id: int) -> str:
        """Text of one token; a piece of a multi-byte character shows as U+FFFD (see `stream`)."""
        return self.backend.decode([int(token_id)], skip_special_tokens=False)

    def token_to_id(self, text: str) -> int | None:
        return self.backend.token_to_id(text)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(int(token_id))

    def stream(self) -> StreamDecoder:
        return StreamDecoder(self)

    # -- chat ---------------------------------------------------------------------------------

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any
    ) -> str:
        if not self.chat_template:
            raise EngineError("this model has no chat template; pass a plain prompt instead")
        import jinja2

        try:
            return self._compiled_template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self._token_text_or_empty(self.bos_id),
                eos_token=self._token_text_or_empty(self.eos_ids[0] if self.eos_ids else None),
                **extra,
            )
        except jinja2.TemplateError as exc:
            raise EngineError(f"chat template failed: {_one_line(exc)}") from None

    @cached_property
    def _compiled_template(self) -> Any:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        # Same environment settings as transformers' apply_chat_template, so templates written for
        # HF render identically; sandboxed because the template comes from a model file.
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_template_error
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            return env.from_string(self.chat_template)
        except jinja2.TemplateError as exc:
            raise EngineError(f"chat template does not compile: {_one_line(exc)}") from None

    def _token_text_or_empty(self, token_id: int | None) -> str:
        return (self.backend.id_to_token(token_id) or "") if token_id is not None else ""


# -- helpers --------------------------------------------------------------------------------


def _byte_level_bpe_from_gguf(
    tokens: list[str], merges: list[str], token_types: list[int], pre: str
) -> tokenizers.Tokenizer:
    normalizer, pre_tokenizer, ignore_merges = _byte_level_setup(pre)
    # First occurrence wins if a GGUF repeats a token text; ids must stay the GGUF's ids.
    vocab: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        vocab.setdefault(tok, i)
    merge_pairs = []
    for m in merges:
        parts = m.split(" ")
        if len(parts) != 2:
            raise ModelLoadError(f"GGUF merge {m!r} is not two tokens separated by one space")
        merge_pairs.append((parts[0], parts[1]))
    backend = tokenizers.Tokenizer(models.BPE(vocab, merge_pairs, ignore_merges=ignore_merges))
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    # Control tokens (<|im_start|> ...) must match whole and never be split by BPE.
    special, user_defined = [], []
    for i, tt in enumerate(token_types):
        if tt == _TOKEN_TYPE_CONTROL:
            special.append(AddedToken(tokens[i], special=True, normalized=False))
        elif tt == _TOKEN_TYPE_USER_DEFINED:
            user_defined.append(AddedToken(tokens[i], special=False, normalized=False))
    if special:
        backend.add_special_tokens(special)
    if user_defined:
        backend.add_tokens(user_defined)
    return backend


def _end_of_generation_ids(backend: tokenizers.Tokenizer) -> list[int]:
    return sorted(
        i
        for i, tok in backend.get_added_tokens_decoder().items()
        if tok.special and tok.content in _END_OF_GENERATION_TEXTS
    )


def _hf_chat_template(root: Path, tok_cfg: Mapping[str, Any]) -> str | None:
    # Newer transformers write the template to its own file; older ones inline it.
    jinja_file = root / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = tok_cfg.get("chat_template") or _read_json(root / "chat_template.json").get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {_one_line(exc)}") from None
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # serialized AddedToken
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _id_list(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [int(v) for v in value if isinstance(v, int)]
    return []


def _first_id(value: Any) -> int | None:
    ids = _id_list(value)
    return ids[0] if ids else None


def _tojson(
    value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False
) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _raise_template_error(message: str) -> None:
    import jinja2

    raise jinja2.TemplateError(message)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


__all__ = ["StreamDecoder", "Tokenizer"]
