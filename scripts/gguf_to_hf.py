#!/usr/bin/env python3
"""Convert a llama- or qwen2-architecture GGUF into an HF folder: SmolLM2-135M-Instruct.Q4_1.gguf
(llama, LlamaForCausalLM) and Qwen2.5-Coder-1.5B-Instruct Q4_K_M (qwen2, Qwen2ForCausalLM).

Writes, into OUT_DIR:
  config.json            LlamaForCausalLM / Qwen2ForCausalLM config built from the GGUF metadata
  model.safetensors      every tensor dequantized (F32; --bf16: rounded to bfloat16), HF names;
                         written one tensor at a time, so memory stays near one tensor's size
  tokenizer.json         HF `tokenizers` byte-level BPE rebuilt from tokenizer.ggml.* metadata
  tokenizer_config.json  bos/eos/pad/unk, chat template
  generation_config.json bos/eos/pad ids

Usage:
  gguf_to_hf.py [--bf16] GGUF OUT_DIR  convert, then run the checks on OUT_DIR
  gguf_to_hf.py --verify OUT_DIR       only run the checks on an existing folder
  gguf_to_hf.py --check-qwen2-tokenizer OUT_DIR TEXT...
                                       OUT_DIR/tokenizer.json against transformers' own Qwen2Tokenizer
                                       (its normalizer, regex and byte level, written in transformers'
                                       code) built from the same vocabulary, merges and added tokens;
                                       needs transformers

Checks: expected shapes for every tensor, no NaN/Inf, no unused or missing
tensors, tokenizer.json loads with HF `tokenizers` and decode(encode(x)) == x on
sample texts, special tokens map to single ids.

Pre-tokenizers (tokenizer.ggml.pre): "smollm" is Digits(individual) + the GPT-2 ByteLevel regex;
"qwen2" is the NFC normalizer, a Split on Qwen2's regex (Isolated) and ByteLevel without its regex,
as Qwen2's own tokenizer.json has them. Control tokens (token_type 3) become special added tokens,
user-defined ones (4, e.g. <tool_call>) non-special added tokens; unused ones (5, the [PADn] fillers
up to the padded vocabulary) stay plain vocabulary entries that no merge produces.

Q/K rows (llama only; qwen2 GGUFs keep HF's row order, since llama.cpp runs qwen2 with NEOX,
i.e. rotate-half, RoPE): llama.cpp's convert_hf_to_gguf.py permutes the rows of attn_q / attn_k
so that GGML's "normal" RoPE (adjacent pairs) matches HF's rotate_half RoPE
(first half / second half of each head):
    w.reshape(n_head, 2, dim // n_head // 2, *rest).swapaxes(1, 2).reshape(w.shape)
with n_head = head_count for Q and head_count_kv for K. We apply the inverse:
    w.reshape(n_head, dim // n_head // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)
"""
import argparse
import json
import os
import sys

import numpy as np

# Qwen2's pre-tokenizer regex, as in its tokenizer.json (one \p{N} per piece: digits split one by one).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
ARCH_PRE = {"llama": "smollm", "qwen2": "qwen2"}  # the tokenizer.ggml.pre each architecture is built for
SAMPLE_TEXTS = [
    "Hello, world! This is SmolLM2 speaking.",
    "  leading spaces, tabs\tand\nnewlines\n\n  plus digits 1234567890 and 3.14159",
    "Unicode: café, naïve, Ελληνικά, 日本語, emoji 🙂, math ∑∫√",
    "def f(x):\n    return x ** 2  # comment\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]


def die(msg):
    print(f"gguf_to_hf: ERROR: {msg}", file=sys.stderr)
    sys.exit(1)


def field(reader, key, default=None, required=True):
    f = reader.fields.get(key)
    if f is None:
        if required:
            die(f"GGUF metadata key {key!r} missing")
        return default
    return f.contents()


def unpermute(w, n_head):
    """Inverse of llama.cpp convert_hf_to_gguf.py LlamaModel.permute."""
    dim = w.shape[0]
    if dim % (2 * n_head) != 0:
        die(f"cannot unpermute rows: {dim} rows, {n_head} heads")
    return w.reshape(n_head, dim // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute(w, n_head):
    """HF -> GGUF (llama.cpp), kept for the self-test of unpermute."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_TO_HF_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def hf_name(gguf_name):
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in GGUF_TO_HF_LAYER:
        return f"model.layers.{int(parts[1])}.{GGUF_TO_HF_LAYER[parts[2]]}"
    die(f"unknown GGUF tensor name {gguf_name!r}")


def expected_shapes(cfg):
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
        })
        if cfg["model_type"] == "qwen2":  # q/k/v always carry a bias in Qwen2, o_proj never
            shapes.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                           p + "self_attn.v_proj.bias": (kv,)})
    return shapes


def build_config(r, tensor_names):
    arch = field(r, "general.architecture")
    if arch not in ARCH_PRE:
        die(f"general.architecture is {arch!r}, only {sorted(ARCH_PRE)} are supported")
    n_head = int(field(r, f"{arch}.attention.head_count"))
    n_kv = int(field(r, f"{arch}.attention.head_count_kv", n_head, required=False))
    hidden = int(field(r, f"{arch}.embedding_length"))
    head_dim = hidden // n_head
    rope_dim = int(field(r, f"{arch}.rope.dimension_count", head_dim, required=False))
    if rope_dim != head_dim:
        die(f"partial RoPE (rope dim {rope_dim} != head dim {head_dim}) not supported")
    if f"{arch}.rope.scaling.type" in r.fields:
        die("RoPE scaling present in GGUF; not supported by this converter")
    tokens = field(r, "tokenizer.ggml.tokens")
    vocab = int(field(r, f"{arch}.vocab_size", len(tokens), required=False))
    if vocab != len(tokens):
        die(f"{arch}.vocab_size {vocab} != {len(tokens)} tokens")
    tied = "output.weight" not in tensor_names
    bos = int(field(r, "tokenizer.ggml.bos_token_id"))
    eos = int(field(r, "tokenizer.ggml.eos_token_id"))
    pad = field(r, "tokenizer.ggml.padding_token_id", None, required=False)
    n_layers = int(field(r, f"{arch}.block_count"))
    cfg = {
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"],
        "model_type": arch,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": None if pad is None else int(pad),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": int(field(r, f"{arch}.feed_forward_length")),
        "max_position_embeddings": int(field(r, f"{arch}.context_length")),
        "mlp_bias": False,
        "num_attention_heads": n_head,
        "num_hidden_layers": n_layers,
        "num_key_value_heads": n_kv,
        "pretraining_tp": 1,
        "rms_norm_eps": float(np.float32(field(r, f"{arch}.attention.layer_norm_rms_epsilon"))),
        "rope_scaling": None,
        "rope_theta": float(field(r, f"{arch}.rope.freq_base", 10000.0, required=False)),
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab,
    }
    if arch == "qwen2":
        # Qwen2: q/k/v biases are implied by the architecture (no flags); every layer is full attention.
        for k in ("attention_bias", "mlp_bias", "pretraining_tp"):
            del cfg[k]
        cfg.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": n_layers})
        head = {k: cfg.pop(k) for k in ("architectures", "model_type")}
        cfg = {**head, **dict(sorted(cfg.items()))}
    return cfg


def pre_tokenizer(pre):
    """(normalizer, pre_tokenizer, post_processor, decoder) of tokenizer.ggml.pre PRE."""
    if pre == "smollm":
        return (None,
                {"type": "Sequence", "pretokenizers": [
                    {"type": "Digits", "individual_digits": True},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return ({"type": "NFC"},
            {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
                byte_level]},
            dict(byte_level), dict(byte_level))


def build_tokenizer(r):
    arch = field(r, "general.architecture")
    model = field(r, "tokenizer.ggml.model")
    if model != "gpt2":
        die(f"tokenizer.ggml.model is {model!r}, expected 'gpt2' (byte-level BPE)")
    pre = field(r, "tokenizer.ggml.pre", None, required=False)
    if pre != ARCH_PRE[arch]:
        die(f"tokenizer.ggml.pre is {pre!r}, expected {ARCH_PRE[arch]!r} for {arch}: the pre-tokenizer "
            "rebuilt here is only right for that value")
    if field(r, "tokenizer.ggml.add_bos_token", False, required=False):
        die("tokenizer.ggml.add_bos_token is true; this converter writes no BOS post-processor")
    tokens = list(field(r, "tokenizer.ggml.tokens"))
    types = [int(t) for t in field(r, "tokenizer.ggml.token_type")]
    merges = list(field(r, "tokenizer.ggml.merges"))
    if len(types) != len(tokens):
        die("token_type length differs from tokens length")
    if len(set(tokens)) != len(tokens):
        die("duplicate token strings in vocabulary")
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for m in merges:
        a, sep, b = m.partition(" ")
        if not sep or " " in b or not a or not b:
            die(f"malformed merge {m!r}")
        if a not in vocab or b not in vocab or a + b not in vocab:
            die(f"merge {m!r} refers to tokens outside the vocabulary")
        pairs.append([a, b])
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == 3:  # CONTROL
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
        elif ty == 4:  # USER_DEFINED
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": False})
        elif ty not in (1, 5):  # NORMAL, UNUSED (padding entries: plain vocabulary)
            die(f"token {i} {t!r} has token_type {ty}, not handled (only 1, 3, 4, 5)")
    unk = field(r, "tokenizer.ggml.unknown_token_id", None, required=False)
    normalizer, pre_tok, post, decoder = pre_tokenizer(pre)
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tok,
        "post_processor": post,
        "decoder": decoder,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": pairs,
        },
    }
    bos = tokens[int(field(r, "tokenizer.ggml.bos_token_id"))]
    eos = tokens[int(field(r, "tokenizer.ggml.eos_token_id"))]
    pad_id = field(r, "tokenizer.ggml.padding_token_id", None, required=False)
    tcfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": None if pad_id is None else tokens[int(pad_id)],
        "unk_token": None if unk is None else tokens[int(unk)],
        "additional_special_tokens": [a["content"] for a in added if a["special"]],
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(field(r, f"{arch}.context_length")),
        "tokenizer_class": "GPT2Tokenizer" if arch == "llama" else "Qwen2Tokenizer",
        "vocab_size": len(tokens),
    }
    tmpl = field(r, "tokenizer.chat_template", None, required=False)
    if tmpl is not None:
        tcfg["chat_template"] = tmpl
    return tok, tcfg


def to_bf16(w):
    """float32 -> bfloat16 bits (uint16), rounded to nearest even (the values are finite)."""
    u = w.view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def write_safetensors(path, items):
    """Write a safetensors file one tensor at a time: items is a name-sorted list of (name, dtype
    "F32" / "BF16", shape, make) where make() returns the tensor's array. The header is the one the
    safetensors library writes for these tensors (compact JSON, {"format": "pt"} metadata, offsets
    in name order, space padding to a multiple of 8), so its bytes do not depend on how it is written."""
    width = {"F32": 4, "BF16": 2}
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, _ in items:
        n = width[dt] * int(np.prod(shape, dtype=np.int64))
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        for name, dt, shape, make in items:
            w = make()
            if tuple(w.shape) != tuple(shape):
                die(f"{name}: shape {w.shape}, header says {shape}")
            data = to_bf16(w) if dt == "BF16" else w
            f.write(np.ascontiguousarray(data).tobytes())
    os.replace(path + ".tmp", path)


def convert(gguf_path, out_dir, bf16=False):
    import gguf
    from gguf.quants import dequantize

    # self-test: unpermute really inverts llama.cpp's permute
    rng = np.random.default_rng(0)
    for nh in (1, 3, 9):
        w = rng.standard_normal((nh * 8, 5)).astype(np.float32)
        if not np.array_equal(unpermute(permute(w, nh), nh), w):
            die("unpermute is not the inverse of permute")

    r = gguf.GGUFReader(gguf_path)
    names = [t.name for t in r.tensors]
    cfg = build_config(r, names)
    tok, tcfg = build_tokenizer(r)
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    permuted = cfg["model_type"] == "llama"  # only llama.cpp's llama converter permutes Q/K rows
    if bf16:
        cfg["torch_dtype"] = "bfloat16"

    def dequantized(t):
        def make():
            w = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
            # GGUF stores ne0 (innermost) first; numpy data shape is reversed = HF order.
            w = w.reshape(tuple(int(x) for x in reversed(t.shape)))
            if permuted and t.name.endswith("attn_q.weight"):
                w = unpermute(w, n_head)
            elif permuted and t.name.endswith("attn_k.weight"):
                w = unpermute(w, n_kv)
            if not np.isfinite(w).all():
                die(f"{t.name} has NaN/Inf after dequantization")
            return w
        return make

    items, counts = {}, {}
    for t in r.tensors:
        name = hf_name(t.name)
        if name in items:
            die(f"duplicate tensor {name}")
        shape = tuple(int(x) for x in reversed(t.shape))
        items[name] = (name, "BF16" if bf16 else "F32", shape, dequantized(t))
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        print(f"  {t.name:28s} {t.tensor_type.name:5s} -> {name} {shape}")

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}
    if cfg["pad_token_id"] is not None:
        gen["pad_token_id"] = cfg["pad_token_id"]
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tcfg, f, ensure_ascii=False, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), [items[k] for k in sorted(items)])
    print(f"gguf_to_hf: wrote {out_dir} ({len(items)} tensors: "
          f"{', '.join(f'{k} {v}' for k, v in sorted(counts.items()))} -> {'bfloat16' if bf16 else 'float32'}; "
          f"{len(tok['model']['merges'])} merges, {len(tok['added_tokens'])} added tokens)")


def read_safetensors(path):
    """{name: (dtype, float32 array)} of a safetensors file of F32 / BF16 tensors, memory-mapped."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for k, h in header.items():
        lo, hi = h["data_offsets"]
        if h["dtype"] == "F32":
            w = raw[lo:hi].view(np.float32)
        elif h["dtype"] == "BF16":
            w = (raw[lo:hi].view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
        else:
            die(f"{path}: {k} has dtype {h['dtype']}, want F32 or BF16")
        out[k] = (h["dtype"], w.reshape(h["shape"]))
    return out


def verify(out_dir):
    from tokenizers import Tokenizer

    for fn in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        if not os.path.isfile(os.path.join(out_dir, fn)):
            die(f"{out_dir}/{fn} missing")
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    want = expected_shapes(cfg)
    want_dtype = {"float32": "F32", "bfloat16": "BF16"}.get(cfg.get("torch_dtype"))
    if want_dtype is None:
        die(f"{out_dir}/config.json: torch_dtype {cfg.get('torch_dtype')!r}, want float32 or bfloat16")
    n_params = 0
    tensors = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    keys = set(tensors)
    if keys != set(want):
        die(f"tensor set mismatch: missing {sorted(set(want) - keys)[:5]}, "
            f"unexpected {sorted(keys - set(want))[:5]}")
    for k in sorted(keys):
        dt, w = tensors[k]
        if dt != want_dtype:
            die(f"{k} has dtype {dt}, want {want_dtype} (config torch_dtype)")
        if tuple(w.shape) != want[k]:
            die(f"{k} has shape {w.shape}, want {want[k]}")
        if not np.isfinite(w).all():
            die(f"{k} has NaN/Inf")
        if not np.any(w):
            die(f"{k} is all zeros")
        n_params += w.size
    print(f"gguf_to_hf: check ok: {len(keys)} tensors, {n_params} parameters, {cfg['torch_dtype']}, all finite, "
          f"shapes match config")

    tk = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    if tk.get_vocab_size(with_added_tokens=True) != cfg["vocab_size"]:
        die(f"tokenizer vocab {tk.get_vocab_size(with_added_tokens=True)} != config {cfg['vocab_size']}")
    for text in SAMPLE_TEXTS:
        ids = tk.encode(text, add_special_tokens=False).ids
        back = tk.decode(ids, skip_special_tokens=False)
        if back != text:
            die(f"tokenizer round trip failed: {text!r} -> {ids} -> {back!r}")
    with open(os.path.join(out_dir, "tokenizer_config.json")) as f:
        tcfg = json.load(f)
    for key in ("bos_token", "eos_token"):
        ids = tk.encode(tcfg[key], add_special_tokens=False).ids
        if ids != [cfg[key + "_id"]]:
            die(f"{key} {tcfg[key]!r} encodes to {ids}, want [{cfg[key + '_id']}]")
    # digits are split individually (the "smollm" pre-tokenizer)
    ids = tk.encode("12345", add_special_tokens=False).ids
    if len(ids) != 5:
        die(f"digits not split individually: '12345' -> {ids}")
    print(f"gguf_to_hf: check ok: tokenizer loads ({cfg['vocab_size']} tokens), "
          f"{len(SAMPLE_TEXTS)} sample texts round-trip, special tokens are single ids, digits split")


def check_qwen2_tokenizer(out_dir, texts):
    """Encode each TEXT with OUT_DIR/tokenizer.json and with transformers' Qwen2Tokenizer built from
    the same vocabulary, merges and added tokens; exit 1 if any file differs."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import Qwen2Tokenizer

    with open(os.path.join(out_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ref = Qwen2Tokenizer(vocab=tj["model"]["vocab"], merges=[tuple(m) for m in tj["model"]["merges"]])
    ref.add_tokens([AddedToken(a["content"], special=a["special"], normalized=False) for a in tj["added_tokens"]])
    for a in tj["added_tokens"]:
        if ref.convert_tokens_to_ids(a["content"]) != a["id"]:
            die(f"added token {a['content']!r}: id {ref.convert_tokens_to_ids(a['content'])} in Qwen2Tokenizer, "
                f"{a['id']} in tokenizer.json")
    tk = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    total = bad = 0
    for path in texts:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        a = tk.encode(text, add_special_tokens=False).ids
        b = ref(text, add_special_tokens=False)["input_ids"]
        total += len(a)
        if a != b:
            bad += 1
            k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print(f"gguf_to_hf: {path}: first difference at token {k}: tokenizer.json {a[k:k + 5]}, "
                  f"Qwen2Tokenizer {b[k:k + 5]}")
    print(f"gguf_to_hf: check-qwen2-tokenizer: {len(texts) - bad}/{len(texts)} files identical token for token, "
          f"{total} tokens")
    return 1 if bad else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--check-qwen2-tokenizer":
        sys.exit(check_qwen2_tokenizer(sys.argv[2], sys.argv[3:]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verify", metavar="OUT_DIR", help="only check an existing HF folder")
    ap.add_argument("--bf16", action="store_true", help="store the dequantized weights rounded to bfloat16")
    ap.add_argument("gguf", nargs="?")
    ap.add_argument("out_dir", nargs="?")
    a = ap.parse_args()
    if a.verify:
        verify(a.verify)
        return
    if not a.gguf or not a.out_dir:
        ap.error("need GGUF and OUT_DIR (or --verify OUT_DIR)")
    convert(a.gguf, a.out_dir, a.bf16)
    verify(a.out_dir)


if __name__ == "__main__":
    main()
