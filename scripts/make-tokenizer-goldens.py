#!/usr/bin/env python3
"""make-tokenizer-goldens.py: reference token ids for tests/test_tokenizer.c.

Trains small byte-level BPE tokenizers with the Hugging Face `tokenizers`
library on text that every Debian machine has (the common licenses and a few
Python standard-library sources), in the pre-tokenizer styles of the model
families spindle loads (GPT-2, Qwen2, SmolLM2, Llama 3), plus a few synthetic
pre-tokenizer mixes that exercise every Split behavior. It also trains a
SentencePiece-style BPE (byte_fallback with <0x00>..<0xFF> in the vocab, "▁"
for spaces, whitespace-run pieces "▁▁", "▁▁▁", ..., "\t\t", ... as Gemma's
vocabulary has) and writes it in the forms real files use: Gemma's Replace
normalizer with no pre-tokenizer, Llama 2's Prepend + Replace normalizers,
and the Metaspace pre-tokenizer (prepend_scheme first / always, split or not,
the older add_prefix_space spelling), with their decoders. For each tokenizer
and each test text it writes the ids of
    tokenizer.encode(text, add_special_tokens=False).ids
The HF library is the reference; the C tokenizer must match it token for token.

Output, in tests/tokenizer/ (or the folder given as the first argument):
    <name>.json                 a tokenizer.json (small: vocab ~3000)
    <text>.txt                  the test texts (UTF-8, read as raw bytes)
    <name>__<text>.decoded      tokenizer.decode(ids, skip_special_tokens=False)
    <name>__<text>.expected     header lines, then one id per line:
                                    tokenizer <path relative to the folder>
                                    text <file name>
                                    decoded <name>__<text>.decoded (HF decode of the ids)
                                    count <number of ids>
                                    ids
    smollm2__<text>.expected    only when models/smollm2/tokenizer.json exists

Usage: python3 scripts/make-tokenizer-goldens.py [out_dir]
"""
import glob
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "tokenizer")
SMOLLM2 = os.path.join(ROOT, "models", "smollm2", "tokenizer.json")

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A word that only the llama3-style tokenizer has as one vocab entry, without
# the merges that would build it: ignore_merges must emit it whole.
IGNORE_MERGES_WORD = "Ġxyzzyplugh"

# Some text in the scripts of the test text, so that the trained merges cover
# multi-byte characters too (not only their single bytes).
MULTILINGUAL = """
中文文本测试，这是一个简单的句子。我们正在训练一个分词器。中国人民银行今天发布了数据。
مرحبا بالعالم، هذا نص عربي بسيط لاختبار المقسم. اللغة العربية جميلة.
नमस्ते दुनिया, यह हिंदी में एक सरल वाक्य है। भारत एक बड़ा देश है।
Привет, мир! Это простой русский текст для проверки токенизатора. Москва — столица России.
Γειά σου κόσμε! Αυτό είναι ένα απλό ελληνικό κείμενο. Η Αθήνα είναι η πρωτεύουσα.
Café naïve résumé façade Zürich Ærøskøbing Straße œuvre.
"""

TEXT = (
    "Hello world! This is spindle's tokenizer test. DON'T PANIC, it'S fine; WE'LL see, I'M sure, "
    "they'RE here, we'VE done it, he'D go.\n"
    "The quick brown fox jumps over the lazy dog. Numbers: 0, 7, 42, 1234, 12345678901234567890, "
    "3.14159, -2.5e10, 1,000,000 and 2024-06-01T12:34:56Z.\n"
    "def tokenize(text: str) -> list[int]:\n"
    "    # a comment with trailing spaces   \n"
    "    if not text:\n"
    "\treturn []  # tab-indented\n"
    "\t\tx = {'a': 1, \"b\": [2, 3]}\n"
    "        return [ord(c) for c in text if c != '\\n']\n"
    "\n\n\n"
    "int main(void) { printf(\"%d\\n\", a[i] << 2 | b->c); return 0; }\r\n"
    "Windows line\r\nend\rsolo CR\n"
    "   leading spaces, trailing spaces   \n"
    "Tabs\tin\t\tbetween and mixed \t \t whitespace\u00a0no-break\u2003em-space\u3000ideographic.\n"
    + " " * 300 + "after 300 spaces\n"
    "中文：你好，世界！这是一个测试。分词器应该正确处理中文字符。\n"
    "العربية: مرحبا بالعالم! هذا اختبار.\n"
    "हिन्दी: नमस्ते दुनिया! यह एक परीक्षण है।\n"
    "Русский: Привет, мир! ЭТО ТЕСТ.\n"
    "Ελληνικά: Γειά σου κόσμε! ΑΥΤΌ ΕΊΝΑΙ ΤΕΣΤ.\n"
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 👩🏾‍💻 ❤️ 🇫🇷🇯🇵\n"
    "Combining: e\u0301 a\u0308 n\u0303 (decomposed) vs é ä ñ (precomposed); A\u030a\u0301 Z\u0335\u0327.\n"
    "Specials: <|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|><|endoftext|>"
    "text<|endoftext|>more <|endoftext|> spaced.\n"
    "Added: spindle_marker inside a sentence, spindle_markerspindle_marker doubled, xspindle_marker.\n"
    "Masks: before <|mask|> after, tight<|mask|>tight,   <|mask|>   spaced.\n"
    "Word: spindle alone, spindles plural, unspindle prefix, (spindle) punct.\n"
    "Magic: xyzzyplugh and Xyzzyplugh xyzzyplughs.\n"
    "Fullwidth ＡＢＣ１２３ and ligature ﬁ and superscript x² and roman Ⅻ and digits ٣٤٥ ५६.\n"
    "Unicode spaces:\u2028line sep\u2029para sep\u0085nel\u180emongolian\u200bzwsp.\n"
    "End with trailing spaces and newline   \n  "
)

# Edge texts: a long whitespace run (BPE must not blow up), and odd shapes.
SPACES = (" " * 10000 + "x\n" + "\t" * 500 + "y" + "\n" * 200 + " \n" * 50 + "z" + " " * 777)
EDGE = "<|endoftext|>"  # the whole text one special token
SHORT = " a"
# Starts with a special token (Metaspace "first" must not prepend after it),
# then whitespace runs of every length next to words, and byte-fallback text.
LEAD = ("<|im_start|>user  hi\t\tthere <|mask|>  x\n" + "".join(" " * k + "w" for k in range(1, 40))
        + "\n" + "".join("\t" * k + "t" for k in range(1, 12)) + "\n\n\n\n  \n\t \t  end  "
        + "数字 0123456789 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦀🦀 ▁literal▁ <0x41> x")


def training_files():
    files = sorted(glob.glob("/usr/share/common-licenses/*"))
    py = sorted(glob.glob("/usr/lib/python3*/"))
    if py:
        for name in ("string.py", "textwrap.py", "json/decoder.py", "csv.py", "heapq.py",
                     "argparse.py"):
            path = os.path.join(py[0], name)
            if os.path.exists(path):
                files.append(path)
    return [f for f in files if os.path.isfile(f)]


def corpus():
    for path in training_files():
        with open(path, encoding="utf-8", errors="replace") as f:
            yield f.read()
    for _ in range(20):
        yield MULTILINGUAL


def train(pre_tokenizer, normalizer=None, vocab_size=3000, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    # Added tokens after training: a special one that strips spaces on both
    # sides, a plain (non-special, normalized) one, and a single-word one.
    tok.add_special_tokens([AddedToken("<|mask|>", lstrip=True, rstrip=True, special=True)])
    tok.add_tokens([AddedToken("spindle_marker", special=False)])
    tok.add_tokens([AddedToken("spindle", single_word=True, special=False)])
    return tok


BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
# Whitespace runs that Gemma's vocabulary has as single pieces.
WS_RUNS = ["▁" * k for k in range(2, 32)] + ["\t" * k for k in range(2, 9)] + ["\n" * k for k in range(2, 6)]


def train_sentencepiece_style(vocab_size=3000):
    """BPE with byte_fallback, trained on Metaspace pre-tokens; then the byte
    tokens are made plain vocab entries (not added tokens, as in Gemma's and
    Llama 2's files), and whitespace-run pieces with their merges are added at
    the front of the merge list (SentencePiece converters give every split of
    a piece into two vocab pieces as a merge), before the added tokens."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=["<unk>"] + BYTE_TOKENS + SPECIALS,
                                  initial_alphabet=["\t", "\n"], limit_alphabet=400,
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    data = json.loads(tok.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in BYTE_TOKENS]
    vocab = data["model"]["vocab"]
    merges = data["model"]["merges"]
    if merges and not isinstance(merges[0], list):
        merges = [m.split(" ") for m in merges]
    for ch in ("▁", "\t", "\n"):
        assert ch in vocab, ch
    new_merges = []
    for run in WS_RUNS:
        if run not in vocab:
            vocab[run] = len(vocab)
        for k in range(1, len(run)):
            a, b = run[:k], run[k:]
            if a in vocab and b in vocab:
                new_merges.append([a, b])
    data["model"]["merges"] = new_merges + [m for m in merges if m not in new_merges]
    tok = Tokenizer.from_str(json.dumps(data, ensure_ascii=False))
    tok.add_special_tokens([AddedToken("<|mask|>", lstrip=True, rstrip=True, special=True)])
    tok.add_tokens([AddedToken("spindle_marker", special=False)])
    tok.add_tokens([AddedToken("spindle", single_word=True, special=False)])
    return tok


def set_json(**parts):
    """Sets top-level members (normalizer, pre_tokenizer, decoder) of the
    tokenizer.json: each value a tokenizers object, a dict, or None."""
    def edit(data):
        for key, value in parts.items():
            if value is None or isinstance(value, dict):
                data[key] = value
            else:
                data[key] = json.loads(value.__getstate__())
    return edit


def sentencepiece_cases(cases):
    sp = train_sentencepiece_style()
    replace_sp = normalizers.Replace(" ", "▁")
    sp_decoder = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    # Gemma (1, 2, 3), as transformers' GemmaConverter writes it: spaces -> "▁" in
    # the normalizer, no prefix, and a Split on " " that finds nothing left to
    # split, so a whole piece between added tokens is one BPE word.
    cases["gemma3style"] = reload(sp, set_json(
        normalizer=replace_sp, pre_tokenizer=pre_tokenizers.Split(" ", "merged_with_previous"),
        decoder=decoders.Sequence(sp_decoder)))
    # Llama 2 / older SentencePiece conversions: "▁" prepended to every piece of
    # text between added tokens, and the decoder strips one leading space.
    cases["llama2style"] = reload(sp, set_json(
        normalizer=normalizers.Sequence([normalizers.Prepend("▁"), replace_sp]), pre_tokenizer=None,
        decoder=decoders.Sequence(sp_decoder + [decoders.Strip(" ", 1, 0)])))
    # Metaspace pre-tokenizer, prefix only at the start of the input, no split
    # (whitespace runs reach BPE whole), as Mistral-style files have.
    cases["metaspace_first"] = reload(sp, set_json(
        normalizer=None, pre_tokenizer=pre_tokenizers.Metaspace(prepend_scheme="first", split=False),
        decoder=decoders.Sequence([decoders.Metaspace(prepend_scheme="first"), decoders.ByteFallback(),
                                   decoders.Fuse()])))
    # Metaspace with split and prefix on every piece; byte fallback decoded first.
    cases["metaspace_always"] = reload(sp, set_json(
        normalizer=normalizers.NFKC(),
        pre_tokenizer=pre_tokenizers.Metaspace(prepend_scheme="always", split=True),
        decoder=decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(prepend_scheme="always")])))
    # The older spelling (add_prefix_space, str_rep), prefix never after it, and
    # no decoder at all (HF then joins the tokens with spaces).
    cases["metaspace_legacy"] = reload(sp, set_json(
        normalizer=None,
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Metaspace", "replacement": "▁", "str_rep": "▁", "add_prefix_space": True},
            {"type": "Digits", "individual_digits": True}]},
        decoder=None))
    cases["metaspace_never"] = reload(sp, set_json(
        normalizer=None, pre_tokenizer=pre_tokenizers.Metaspace(prepend_scheme="never", split=True),
        decoder={"type": "Metaspace", "replacement": "▁", "add_prefix_space": True,
                 "prepend_scheme": "never"}))


def reload(tok, edit=None):
    """Round-trips through JSON, optionally editing the dict, and returns the
    HF tokenizer built from the final JSON (the reference) and the JSON text."""
    data = json.loads(tok.to_str())
    if edit:
        edit(data)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return Tokenizer.from_str(text), text


def string_merges(data):
    merges = data["model"]["merges"]
    if merges and isinstance(merges[0], list):
        for a, b in merges:
            assert " " not in a and " " not in b
        data["model"]["merges"] = [a + " " + b for a, b in merges]


def add_ignore_merges_word(data):
    """Adds IGNORE_MERGES_WORD to the vocab (no merges build it) with the first
    id after the vocab, moving the added tokens that live after the vocab up by
    one, so that the file stays consistent (HF re-derives added-token ids)."""
    data["model"]["ignore_merges"] = True
    vocab = data["model"]["vocab"]
    if IGNORE_MERGES_WORD not in vocab:
        new_id = len(vocab)
        for t in data["added_tokens"]:
            if t["content"] not in vocab:
                t["id"] += 1
        vocab[IGNORE_MERGES_WORD] = new_id


def shift_added_ids(data):
    """Writes wrong ids for the added tokens that are not in the vocab (as
    some hand-edited files do): HF ignores them and numbers the tokens after
    the vocab in file order; the C loader must do the same."""
    vocab = data["model"]["vocab"]
    for t in data["added_tokens"]:
        if t["content"] not in vocab:
            t["id"] += 1000
    # And one added token that repeats the content of a vocab entry.
    data["added_tokens"].append({"id": 77, "content": "Ġthe", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": True,
                                 "special": False})


def set_pre_tokenizer(pre):
    def edit(data):
        data["pre_tokenizer"] = json.loads(pre.__getstate__())
    return edit


def set_normalizer(norm):
    def edit(data):
        data["normalizer"] = json.loads(norm.__getstate__())
    return edit


def build_cases():
    cases = {}
    bl_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

    gpt2 = train(bl_regex)
    cases["gpt2"] = reload(gpt2)  # newer merges format: [["a","b"], ...]
    # Same model, "a b" string merges and add_prefix_space on.
    def gpt2_prefix(data):
        string_merges(data)
        data["pre_tokenizer"] = json.loads(
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True).__getstate__())
    cases["gpt2_prefix_strmerges"] = reload(gpt2, gpt2_prefix)
    cases["gpt2_wrong_added_ids"] = reload(gpt2, shift_added_ids)

    qwen2 = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizer=normalizers.NFC())
    cases["qwen2"] = reload(qwen2, string_merges)

    smol = train(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]))
    cases["smollm2style"] = reload(smol)

    llama3 = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ignore_merges=True)
    cases["llama3"] = reload(llama3, add_ignore_merges_word)

    # Synthetic mixes on the GPT-2 model: every Split behavior, String
    # patterns, invert, Digits without individual_digits, other normalizers.
    mix1 = pre_tokenizers.Sequence([
        pre_tokenizers.Split("\n", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[0-9]+"), behavior="merged_with_next"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(",", behavior="removed"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)])
    cases["mix_split1"] = reload(gpt2, set_pre_tokenizer(mix1))
    mix2 = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{L}+"), behavior="contiguous", invert=True),
        pre_tokenizers.Split(Regex(r"\s"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    def mix2_edit(data):
        set_pre_tokenizer(mix2)(data)
        set_normalizer(normalizers.Sequence([normalizers.NFKC()]))(data)
    cases["mix_split2"] = reload(gpt2, mix2_edit)
    mix3 = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="isolated"),
        pre_tokenizers.Split(Regex(r"(?i)the"), behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    def mix3_edit(data):
        set_pre_tokenizer(mix3)(data)
        set_normalizer(normalizers.Sequence([normalizers.NFD(), normalizers.NFC()]))(data)
    cases["mix_split3"] = reload(gpt2, mix3_edit)
    sentencepiece_cases(cases)
    return cases


def write_expected(path, tok_rel, text_name, text, tok):
    ids = tok.encode(text, add_special_tokens=False).ids
    decoded = tok.decode(ids, skip_special_tokens=False)
    dec_path = path[: -len(".expected")] + ".decoded"
    with open(dec_path + ".tmp", "w", encoding="utf-8", newline="") as f:
        f.write(decoded)
    os.replace(dec_path + ".tmp", dec_path)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"tokenizer {tok_rel}\ntext {text_name}\ndecoded {os.path.basename(dec_path)}\n")
        f.write(f"count {len(ids)}\nids\n")
        for i in ids:
            f.write(f"{i}\n")
    os.replace(tmp, path)
    return len(ids)


def main():
    os.makedirs(OUT, exist_ok=True)
    texts = {"text": TEXT, "spaces": SPACES, "edge": EDGE, "short": SHORT, "empty": "", "lead": LEAD}
    for name, text in texts.items():
        with open(os.path.join(OUT, name + ".txt"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    for name, (tok, js) in build_cases().items():
        path = os.path.join(OUT, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(js)
        size = os.path.getsize(path)
        assert size < 500_000, f"{path} is {size} bytes"
        for tname, text in texts.items():
            n = write_expected(os.path.join(OUT, f"{name}__{tname}.expected"), name + ".json",
                               tname + ".txt", text, tok)
            print(f"{name:24s} {tname:8s} {n:6d} ids  ({size // 1024} KB json)")
    if os.path.exists(SMOLLM2):
        tok = Tokenizer.from_file(SMOLLM2)
        rel = os.path.relpath(SMOLLM2, OUT)
        for tname, text in texts.items():
            n = write_expected(os.path.join(OUT, f"smollm2__{tname}.expected"), rel,
                               tname + ".txt", text, tok)
            print(f"{'smollm2':24s} {tname:8s} {n:6d} ids")
    else:
        print(f"note: {SMOLLM2} not found; no smollm2 goldens written")


if __name__ == "__main__":
    main()
