"""Tokenizer: GGUF-built byte-level BPE, HF directories, chat templates, streaming decode."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
import tokenizers

from engine.errors import EngineError, ModelLoadError
from engine.tokenizer import Tokenizer

TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # as in conftest.tiny_bpe

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

PROSE = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
    "of foolishness... \"Quoted\" text, (parentheses), and an em—dash; numbers 1,234.56 & 2024-01-31.\n"
    "  Indented line with trailing spaces   \n\n\n\tTabbed\r\nWindows newline."
)
UNICODE = (
    "Héllo wörld — naïve café, Ærøskøbing. 日本語のテキストと漢字。 한국어 문장. "
    "Привет, мир! Ελληνικά. עברית مرحبا بالعالم. "
    "Emoji: 🙂🚀👩‍👩‍👧‍👦 flags 🇫🇷. Math: ∀x∈ℝ, x²≥0. "
    + unicodedata.normalize("NFD", "é combining") + " \u200b zero-width \u00a0nbsp"
)


def gguf_fields(tok: tokenizers.Tokenizer, pre: str = "smollm", **extra) -> dict:
    """GGUF tokenizer metadata as llama.cpp's converter writes it for a byte-level BPE."""
    model = json.loads(tok.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    special = set(TINY_SPECIAL_TOKENS)
    fields = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3 if t in special else 1 for t in tokens],
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": tokens.index("<|im_start|>"),
        "tokenizer.ggml.eos_token_id": tokens.index("<|im_end|>"),
        "tokenizer.chat_template": CHATML_TEMPLATE,
    }
    fields.update(extra)
    return fields


# -- GGUF-built tokenizer (tiny, fast) -------------------------------------------------------


def test_gguf_tokenizer_encodes_like_the_bpe_it_was_exported_from(tiny_bpe):
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe))
    for text in (PROSE, UNICODE, "def f(x):\n    return x * 42\n", "<|im_start|>user\nhi<|im_end|>"):
        assert tok.encode(text) == tiny_bpe.encode(text, add_special_tokens=False).ids
        assert tok.decode(tok.encode(text)) == text


def test_gguf_tokenizer_special_tokens_are_single_ids(tiny_bpe):
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe))
    for special in TINY_SPECIAL_TOKENS:
        ids = tok.encode(f"a{special}b")
        assert tok.token_to_id(special) in ids
        assert tok.token_to_id(special) in tok.special_ids
    assert tok.decode(tok.encode("x<|im_end|>"), skip_special_tokens=True) == "x"


def test_gguf_tokenizer_special_ids_and_end_of_generation(tiny_bpe):
    fields = gguf_fields(tiny_bpe)
    # Like the bundled GGUF's sibling files: EOS names one token, <|endoftext|> is only CONTROL.
    tok = Tokenizer.from_gguf_fields(fields)
    assert tok.bos_id == tok.token_to_id("<|im_start|>")
    assert tok.eos_ids[0] == tok.token_to_id("<|im_end|>")
    assert tok.token_to_id("<|endoftext|>") in tok.eos_ids
    assert tok.bos_id not in tok.eos_ids


def test_gguf_tokenizer_add_bos(tiny_bpe):
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe))
    assert tok.encode("hi", add_bos=True) == [tok.bos_id, *tok.encode("hi")]
    no_bos = Tokenizer.from_gguf_fields(
        {k: v for k, v in gguf_fields(tiny_bpe).items() if k != "tokenizer.ggml.bos_token_id"}
    )
    with pytest.raises(EngineError):
        no_bos.encode("hi", add_bos=True)


@pytest.mark.parametrize(
    ("pre", "pieces"),
    [
        ("smollm", ["1", "2", "3", "4", "5", "Ġabc", "'s"]),
        ("gpt2", ["12345", "Ġabc", "'s"]),
        ("llama-bpe", ["123", "45", "Ġabc", "'s"]),
        ("qwen2", ["1", "2", "3", "4", "5", "Ġabc", "'s"]),
    ],
)
def test_gguf_pre_tokenizer_follows_tokenizer_ggml_pre(tiny_bpe, pre, pieces):
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe, pre=pre))
    assert [p for p, _ in tok.backend.pre_tokenizer.pre_tokenize_str("12345 abc's")] == pieces
    # Qwen2's tokenizer normalizes to NFC first, so only NFC text round-trips byte for byte.
    expected = unicodedata.normalize("NFC", UNICODE) if pre == "qwen2" else UNICODE
    assert tok.decode(tok.encode(UNICODE)) == expected


def test_gguf_unsupported_pre_tokenizer_is_a_clear_error(tiny_bpe):
    with pytest.raises(ModelLoadError, match="unsupported GGUF tokenizer pre-tokenizer 'deepseek-coder'"):
        Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe, pre="deepseek-coder"))


def test_gguf_sentencepiece_tokenizer_is_a_clear_error(tiny_bpe):
    with pytest.raises(ModelLoadError, match="SentencePiece"):
        Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe, **{"tokenizer.ggml.model": "llama"}))


def test_stream_decoder_never_splits_characters(tiny_bpe):
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe))
    ids = tok.encode(UNICODE)
    stream = tok.stream()
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == UNICODE
    assert not any("\ufffd" in p for p in pieces)
    # Single-token decoding, by contrast, shows U+FFFD for partial multi-byte characters.
    assert any("\ufffd" in tok.decode_token(i) for i in ids)


# -- chat templates -----------------------------------------------------------------------


def test_chat_template_renders_messages_and_generation_prompt(tiny_bpe):
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    text = tok.apply_chat_template(messages)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    assert not tok.apply_chat_template(messages, add_generation_prompt=False).endswith("assistant\n")


def test_chat_template_errors_are_engine_errors(tiny_bpe):
    raising = "{{ raise_exception('roles must alternate') }}"
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe, **{"tokenizer.chat_template": raising}))
    with pytest.raises(EngineError, match="roles must alternate"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])
    # The template comes from a model file, so it runs sandboxed.
    escape = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe, **{"tokenizer.chat_template": escape}))
    with pytest.raises(EngineError):
        tok.apply_chat_template([])
    no_template = {k: v for k, v in gguf_fields(tiny_bpe).items() if k != "tokenizer.chat_template"}
    with pytest.raises(EngineError, match="no chat template"):
        Tokenizer.from_gguf_fields(no_template).apply_chat_template([])


def test_chat_template_tojson_and_bos_eos_variables(tiny_bpe):
    template = "{{ bos_token }}{{ messages | tojson }}{{ eos_token }}"
    tok = Tokenizer.from_gguf_fields(gguf_fields(tiny_bpe, **{"tokenizer.chat_template": template}))
    out = tok.apply_chat_template([{"role": "user", "content": "é"}], add_generation_prompt=False)
    assert out == '<|im_start|>[{"role": "user", "content": "é"}]<|im_end|>'


# -- HF directories -------------------------------------------------------------------------


def write_hf_tokenizer(root: Path, tok: tokenizers.Tokenizer, **tokenizer_config) -> None:
    root.mkdir(parents=True, exist_ok=True)
    tok.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))


def test_hf_dir_tokenizer_reads_specials_from_all_configs(tmp_path, tiny_bpe):
    write_hf_tokenizer(
        tmp_path, tiny_bpe,
        bos_token={"content": "<|im_start|>", "special": True}, eos_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
    )
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 2, "bos_token_id": 1}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    tok = Tokenizer.from_hf_dir(tmp_path)
    assert tok.bos_id == tiny_bpe.token_to_id("<|im_start|>")
    assert set(tok.eos_ids) == {0, 2}
    assert tok.encode(PROSE) == tiny_bpe.encode(PROSE, add_special_tokens=False).ids
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]).startswith("<|im_start|>user\nx<|im_end|>")


def test_hf_dir_chat_template_file_and_named_templates(tmp_path, tiny_bpe):
    write_hf_tokenizer(tmp_path, tiny_bpe, chat_template=[
        {"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEFAULT"},
    ])
    assert Tokenizer.from_hf_dir(tmp_path).apply_chat_template([]) == "DEFAULT"
    (tmp_path / "chat_template.jinja").write_text("FILE")
    assert Tokenizer.from_hf_dir(tmp_path).apply_chat_template([]) == "FILE"


def test_hf_dir_without_tokenizer_json(tmp_path):
    with pytest.raises(ModelLoadError, match="no tokenizer.json"):
        Tokenizer.from_hf_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="cannot read"):
        Tokenizer.from_hf_dir(tmp_path)


# -- the bundled SmolLM2 tokenizer -------------------------------------------------------------


@pytest.mark.slow
def test_bundled_round_trips_real_text(bundled):
    import json as stdlib_module

    source = Path(stdlib_module.decoder.__file__).read_text(encoding="utf-8")
    tok = bundled.tokenizer
    for text in (source, PROSE, UNICODE, "", " ", "\n\n", "  leading and trailing  "):
        assert tok.decode(tok.encode(text)) == text


@pytest.mark.slow
def test_bundled_special_tokens_and_digits(bundled):
    tok = bundled.tokenizer
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert len(tok.encode(special)) == 1
        assert tok.id_to_token(tok.encode(special)[0]) == special
    digit_pieces = [tok.decode([i]) for i in tok.encode("Year 2024, pi 3.14159, id 007")]
    digits = [p.strip() for p in digit_pieces if any(c.isdigit() for c in p)]
    assert digits == list("2024314159007")
    assert tok.vocab_size == 49152
    assert tok.token_to_id("<|im_end|>") in tok.eos_ids


@pytest.mark.slow
def test_bundled_chat_template(bundled):
    tok = bundled.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}])
    assert "<|im_start|>user\nWhat is 2+2?<|im_end|>\n" in text
    assert text.startswith("<|im_start|>system\n")  # SmolLM2's template adds a default system turn
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok.encode(text)
    assert ids.count(tok.token_to_id("<|im_start|>")) == 3
    assert tok.decode(ids) == text


@pytest.mark.slow
def test_bundled_tokenizer_agrees_with_transformers_gguf_conversion(bundled):
    """transformers converts GGUF tokenizers independently of us; both must tokenize alike."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    path = bundled.source_path
    reference = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    source = Path(json.__file__).read_text(encoding="utf-8")
    for text in (source, PROSE, UNICODE, "<|im_start|>user\n123 apples<|im_end|>\n"):
        assert bundled.tokenizer.encode(text) == reference.encode(text, add_special_tokens=False)
