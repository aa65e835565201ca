"""Reference data for tests/test_tokenizer.cpp, made offline.

Trains small tokenizers on a deterministic corpus (generated sentences, the
licence texts Debian ships, hard cases) with Hugging Face `tokenizers`
(byte-level BPE with the GPT-2 / Llama 3 / Qwen 2 / SmolLM pre-tokenizers
spelled out) and `sentencepiece` (BPE with byte fallback, Llama 2's
settings), and writes for each: the tokenizer file, the GGUF-style spec as
JSON, and the reference ids of every test text.

usage: tokenizer_ref.py OUT_DIR
"""
import glob
import io
import json
import os
import random
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
import sentencepiece as spm

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")

HARD = [
    "日本語のテキストです。中文文本，还有标点！한국어 텍스트",
    "emoji 👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and ✨sparkles✨",
    "combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Zalgo z\u0351\u0346a\u0352",
    "digits 1234567890 3.14159 2026-12-01 007 1,000,000 ٣٤٥ ½",
    "whitespace   runs\t\ttabs\n\n\nnewlines \r\n crlf   ",
    "    leading spaces",
    "trailing spaces    ",
    " ",
    "\n",
    "I'm, you're, they've, he'll, she'd, it's; DON'T WE'RE They'Ve 'quoted'",
    "x=1;y=2//comment {a: [1, 2]} <tag attr=\"v\"> ~!@#$%^&*()_+",
    "Ελληνικά, русский текст, עברית, العربية, हिन्दी",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "mixed: naïve café résumé Straße ﬁ ligature",
    "",
]
SPECIAL_LINES = [
    "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n",
    "text <|endoftext|> more text<|endoftext|>",
]


def corpus():
    rng = random.Random(1234)
    words = ("the of and to in is was for on that with as by at from it an be this which or are "
             "tokenizer merge byte pair encoding model vocabulary text string unicode regex split "
             "kernel array stream graph lazy evaluation gradient quantize matrix vector tensor").split()
    gen = []
    for _ in range(1500):
        n = rng.randint(3, 18)
        s = " ".join(rng.choice(words) for _ in range(n))
        if rng.random() < 0.3:
            s += " " + str(rng.randint(0, 10 ** rng.randint(1, 7)))
        if rng.random() < 0.3:
            s = s.capitalize() + rng.choice([".", "!", "?", ",", ";", "..."])
        if rng.random() < 0.1:
            s += rng.choice(["'s", "'ll", "'ve", "n't"])
        gen.append(s)
    lic = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                lic.append(f.read())
    return gen, lic


gen, lic = corpus()
train_text = gen + lic + HARD * 3
# Test texts: generated lines, licence paragraphs (newlines inside), hard cases.
paragraphs = [p for text in lic[:6] for p in text.split("\n\n")[:40]]
tests = gen[:150] + paragraphs + HARD + [lic[0][:3000]]


def dump(name, obj):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)


def byte_level(name, pre, ggml_pre, ignore_merges=False, bos=None):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + ([bos] if bos else [])
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train_text, trainer)
    if bos:
        bid = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, bid)])
    path = os.path.join(OUT, name + ".json")
    tok.save(path)
    saved = json.load(open(path, encoding="utf-8"))
    merges = [m if isinstance(m, str) else " ".join(m) for m in saved["model"]["merges"]]
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special_ids = {tok.token_to_id(s) for s in specials}
    spec = {"model": "gpt2", "pre": ggml_pre, "tokens": tokens, "merges": merges,
            "token_type": [3 if i in special_ids else 1 for i in range(len(tokens))],
            "bos_id": tok.token_to_id(bos) if bos else -1, "eos_id": tok.token_to_id("<|endoftext|>")}
    texts = tests + SPECIAL_LINES
    dump(name + ".spec.json", spec)
    dump(name + ".ref.json", {"texts": texts, "ids": [tok.encode(t).ids for t in texts]})


byte_level("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), "gpt-2")
byte_level("llama3", pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), "llama-bpe",
    ignore_merges=True, bos="<|begin_of_text|>")
byte_level("qwen2", pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), "qwen2")
byte_level("smollm", pre_tokenizers.Sequence([
    pre_tokenizers.Digits(individual_digits=True),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), "smollm")

# SentencePiece BPE as Llama 2 was trained: byte fallback, digits split,
# identity normalisation, whitespace kept, dummy prefix.
model = io.BytesIO()
spm.SentencePieceTrainer.train(
    sentence_iterator=iter([l for t in train_text for l in t.split("\n") if l]), model_writer=model,
    vocab_size=1000, model_type="bpe", byte_fallback=True, split_digits=True,
    normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
    allow_whitespace_only_pieces=True, character_coverage=0.995, max_sentence_length=100000,
    minloglevel=2)
with open(os.path.join(OUT, "spm.model"), "wb") as f:
    f.write(model.getvalue())
sp = spm.SentencePieceProcessor(model_proto=model.getvalue())


def piece_type(i):
    if sp.is_unknown(i):
        return 2
    if sp.is_control(i):
        return 3
    if sp.is_unused(i):
        return 5
    if sp.is_byte(i):
        return 6
    return 1


n = sp.get_piece_size()
dump("spm.spec.json", {"model": "llama", "pre": "default", "tokens": [sp.id_to_piece(i) for i in range(n)],
                       "scores": [sp.get_score(i) for i in range(n)],
                       "token_type": [piece_type(i) for i in range(n)],
                       "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "unk_id": sp.unk_id()})
texts = tests + ["<s> not parsed </s>"]
dump("spm.ref.json", {"texts": texts, "ids": [sp.encode(t) for t in texts]})
