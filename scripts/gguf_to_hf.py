#!/usr/bin/env python3
"""Convert a llama-architecture GGUF (e.g. SmolLM2-135M-Instruct.Q4_1.gguf) into an HF folder.

Writes, into OUT_DIR:
  config.json            LlamaForCausalLM config built from the GGUF metadata
  model.safetensors      every tensor dequantized to float32, HF llama names
  tokenizer.json         HF `tokenizers` BPE tokenizer rebuilt from tokenizer.ggml.* metadata
  tokenizer_config.json  bos/eos/pad/unk, chat template
  generation_config.json bos/eos ids

Usage:
  gguf_to_hf.py GGUF OUT_DIR      convert, then run the checks on OUT_DIR
  gguf_to_hf.py --verify OUT_DIR  only run the checks on an existing folder

Checks: expected shapes for every tensor, no NaN/Inf, no unused or missing
tensors, tokenizer.json loads with HF `tokenizers` and decode(encode(x)) == x on
sample texts, special tokens map to single ids.

Q/K rows: llama.cpp's convert_hf_to_gguf.py permutes the rows of attn_q / attn_k
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

EXPECTED_PRE = "smollm"
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
    return shapes


def build_config(r, tensor_names):
    arch = field(r, "general.architecture")
    if arch != "llama":
        die(f"general.architecture is {arch!r}, only 'llama' is supported")
    n_head = int(field(r, "llama.attention.head_count"))
    n_kv = int(field(r, "llama.attention.head_count_kv", n_head, required=False))
    hidden = int(field(r, "llama.embedding_length"))
    head_dim = hidden // n_head
    rope_dim = int(field(r, "llama.rope.dimension_count", head_dim, required=False))
    if rope_dim != head_dim:
        die(f"partial RoPE (rope dim {rope_dim} != head dim {head_dim}) not supported")
    if "llama.rope.scaling.type" in r.fields:
        die("RoPE scaling present in GGUF; not supported by this converter")
    tokens = field(r, "tokenizer.ggml.tokens")
    vocab = int(field(r, "llama.vocab_size", len(tokens), required=False))
    if vocab != len(tokens):
        die(f"llama.vocab_size {vocab} != {len(tokens)} tokens")
    tied = "output.weight" not in tensor_names
    bos = int(field(r, "tokenizer.ggml.bos_token_id"))
    eos = int(field(r, "tokenizer.ggml.eos_token_id"))
    pad = field(r, "tokenizer.ggml.padding_token_id", None, required=False)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": None if pad is None else int(pad),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": int(field(r, "llama.feed_forward_length")),
        "max_position_embeddings": int(field(r, "llama.context_length")),
        "mlp_bias": False,
        "num_attention_heads": n_head,
        "num_hidden_layers": int(field(r, "llama.block_count")),
        "num_key_value_heads": n_kv,
        "pretraining_tp": 1,
        "rms_norm_eps": float(np.float32(field(r, "llama.attention.layer_norm_rms_epsilon"))),
        "rope_scaling": None,
        "rope_theta": float(field(r, "llama.rope.freq_base", 10000.0, required=False)),
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab,
    }


def build_tokenizer(r):
    model = field(r, "tokenizer.ggml.model")
    if model != "gpt2":
        die(f"tokenizer.ggml.model is {model!r}, expected 'gpt2' (byte-level BPE)")
    pre = field(r, "tokenizer.ggml.pre", None, required=False)
    if pre != EXPECTED_PRE:
        die(f"tokenizer.ggml.pre is {pre!r}, expected {EXPECTED_PRE!r}: the pre-tokenizer "
            "rebuilt here (Digits + ByteLevel) is only right for that value")
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
        elif ty not in (1,):
            die(f"token {i} {t!r} has token_type {ty}, not handled (only 1, 3, 4)")
    unk = field(r, "tokenizer.ggml.unknown_token_id", None, required=False)
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            ],
        },
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
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
        "model_max_length": int(field(r, "llama.context_length")),
        "tokenizer_class": "GPT2Tokenizer",
        "vocab_size": len(tokens),
    }
    tmpl = field(r, "tokenizer.chat_template", None, required=False)
    if tmpl is not None:
        tcfg["chat_template"] = tmpl
    return tok, tcfg


def convert(gguf_path, out_dir):
    import gguf
    from gguf.quants import dequantize
    from safetensors.numpy import save_file

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

    tensors = {}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type)
        w = np.ascontiguousarray(w, dtype=np.float32)
        # GGUF stores ne0 (innermost) first; numpy data shape is reversed = HF order.
        want = tuple(int(x) for x in reversed(t.shape))
        if w.shape != want:
            w = w.reshape(want)
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, n_kv)
        name = hf_name(t.name)
        if name in tensors:
            die(f"duplicate tensor {name}")
        tensors[name] = np.ascontiguousarray(w)
        print(f"  {t.name:28s} {t.tensor_type.name:5s} -> {name} {w.shape}")

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
    # One metadata key only: safetensors keeps metadata in a hash map, so with several keys their
    # order in the header (and the file's sha256) would change from run to run.
    save_file({k: tensors[k] for k in sorted(tensors)}, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    print(f"gguf_to_hf: wrote {out_dir} ({len(tensors)} tensors)")


def verify(out_dir):
    from safetensors import safe_open
    from tokenizers import Tokenizer

    for fn in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        if not os.path.isfile(os.path.join(out_dir, fn)):
            die(f"{out_dir}/{fn} missing")
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    want = expected_shapes(cfg)
    n_params = 0
    with safe_open(os.path.join(out_dir, "model.safetensors"), framework="numpy") as sf:
        keys = set(sf.keys())
        if keys != set(want):
            die(f"tensor set mismatch: missing {sorted(set(want) - keys)[:5]}, "
                f"unexpected {sorted(keys - set(want))[:5]}")
        for k in sorted(keys):
            w = sf.get_tensor(k)
            if w.dtype != np.float32:
                die(f"{k} has dtype {w.dtype}, want float32")
            if tuple(w.shape) != want[k]:
                die(f"{k} has shape {w.shape}, want {want[k]}")
            if not np.isfinite(w).all():
                die(f"{k} has NaN/Inf")
            if not np.any(w):
                die(f"{k} is all zeros")
            n_params += w.size
    print(f"gguf_to_hf: check ok: {len(keys)} tensors, {n_params} parameters, float32, all finite, "
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verify", metavar="OUT_DIR", help="only check an existing HF folder")
    ap.add_argument("gguf", nargs="?")
    ap.add_argument("out_dir", nargs="?")
    a = ap.parse_args()
    if a.verify:
        verify(a.verify)
        return
    if not a.gguf or not a.out_dir:
        ap.error("need GGUF and OUT_DIR (or --verify OUT_DIR)")
    convert(a.gguf, a.out_dir)
    verify(a.out_dir)


if __name__ == "__main__":
    main()
