#!/usr/bin/env python3
"""gemma3_gguf_to_hf.py: Gemma 3 270M (base) from its Q4_K_M GGUF to a Hugging Face folder.

  python3 scripts/gemma3_gguf_to_hf.py GGUF OUT_DIR          convert
  python3 scripts/gemma3_gguf_to_hf.py --check-tokenizer GGUF OUT_DIR TEXT...
                                                            tokenizer.json vs SentencePiece's own rule

What OUT_DIR receives:
  model.safetensors   every tensor dequantized to float32 (F32; --bf16 writes a bfloat16 copy instead),
                      HF Gemma3ForCausalLM names; the norm weights as HF holds them (llama.cpp stores
                      1 + w for every Gemma RMSNorm weight: w = stored - 1, in float32)
  config.json         gemma3_text: 18 layers, every 6th global (5, 11, 17: full_attention) and the rest
                      sliding_attention with window 512; RoPE base 1e6 (global) and 1e4 (local); neither
                      the pattern nor the local base is in the GGUF metadata (they are Gemma 3's published
                      configuration); query_pre_attn_scalar 256, GeGLU (gelu_pytorch_tanh), tied head
  tokenizer.json      built from the GGUF's SentencePiece vocabulary (tokenizer.ggml.model "llama": the
                      score-ordered SentencePiece BPE): pieces respelled with U+2581 where llama.cpp stored
                      literal spaces (the whitespace-run pieces 138-167), merges derived from the piece
                      scores (a merge's rank is the score of the piece it makes), byte fallback,
                      Replace(" " -> U+2581) normalizer and no pre-tokenizer (Gemma adds no space prefix),
                      control pieces as special added tokens (matched in the raw text) and user-defined
                      pieces (newline runs, the whitespace-run pieces 138-167, HTML tags) as added tokens
                      matched in the normalized text before BPE, as SentencePiece matches them
  tokenizer_config.json, generation_config.json

--check-tokenizer encodes each TEXT file with HF `tokenizers` on OUT_DIR/tokenizer.json and with an
independent implementation of SentencePiece's BPE rule (repeatedly merge the adjacent pair whose
concatenation is the highest-scoring piece, leftmost first; unknown symbols fall back to <0xNN>
bytes; user-defined pieces split the text first) and reports the agreement.
"""
import heapq
import json
import os
import re
import sys

import numpy as np

SLIDING_PATTERN = 6        # every 6th layer is global (Gemma 3)
ROPE_LOCAL_BASE = 10000.0  # RoPE base of the sliding-window layers (Gemma 3)
SPACE = "\u2581"


def die(msg):
    print(f"gemma3_gguf_to_hf: ERROR: {msg}", file=sys.stderr)
    sys.exit(1)


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        if default is None:
            die(f"GGUF metadata has no {key}")
        return default
    return f.contents()


# token_type (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
NORMAL, UNKNOWN, CONTROL, USER, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def vocab_of(r):
    """Pieces (respelled), scores and token types from the GGUF's SentencePiece metadata."""
    f = r.fields["tokenizer.ggml.tokens"]
    pieces = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    sc = r.fields["tokenizer.ggml.scores"]
    scores = [float(sc.parts[i][0]) for i in sc.data]
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    # llama.cpp wrote the whitespace-run pieces with literal spaces; SentencePiece spells them with U+2581.
    pieces = [p.replace(" ", SPACE) if t in (NORMAL, USER) else p for p, t in zip(pieces, types)]
    if len(set(pieces)) != len(pieces):
        die("the respelled vocabulary has duplicate pieces")
    return pieces, scores, types


def build_tokenizer(r):
    pieces, scores, types = vocab_of(r)
    vocab = {p: i for i, p in enumerate(pieces)}
    normal = {p for p, t in zip(pieces, types) if t == NORMAL}
    # Merges: every split of a normal piece into two normal pieces, ranked by the merged piece's score
    # (highest first; within one piece, by the ids of its halves), as SentencePiece's BPE applies them.
    merges = []
    for p in normal:
        i = vocab[p]
        local = [(vocab[p[:k]], vocab[p[k:]], p[:k], p[k:]) for k in range(1, len(p))
                 if p[:k] in normal and p[k:] in normal]
        local.sort()
        merges.extend((-scores[i], i, n, a, b) for n, (_, _, a, b) in enumerate(local))
    merges.sort()
    added = []
    for i, (p, t) in enumerate(zip(pieces, types)):
        if t in (CONTROL, USER, UNKNOWN):
            added.append({"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": t == USER, "special": t != USER})
    unk = int(field(r, "tokenizer.ggml.unknown_token_id"))
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": pieces[unk], "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for _, _, _, a, b in merges]},
    }


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", name)
    if not m:
        die(f"unexpected tensor {name}")
    l, part = m.groups()
    table = {
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
        "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    }
    if part not in table:
        die(f"unexpected tensor {name}")
    return f"model.layers.{l}.{table[part]}.weight"


def build_config(r):
    n_layers = int(field(r, "gemma3.block_count"))
    head_dim = int(field(r, "gemma3.attention.key_length"))
    layer_types = ["full_attention" if (l + 1) % SLIDING_PATTERN == 0 else "sliding_attention"
                   for l in range(n_layers)]
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "vocab_size": len(r.fields["tokenizer.ggml.tokens"].data),
        "hidden_size": int(field(r, "gemma3.embedding_length")),
        "intermediate_size": int(field(r, "gemma3.feed_forward_length")),
        "num_hidden_layers": n_layers,
        "num_attention_heads": int(field(r, "gemma3.attention.head_count")),
        "num_key_value_heads": int(field(r, "gemma3.attention.head_count_kv")),
        "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": int(field(r, "gemma3.context_length")),
        "rms_norm_eps": float(np.float32(field(r, "gemma3.attention.layer_norm_rms_epsilon"))),
        "rope_theta": float(field(r, "gemma3.rope.freq_base")),
        "rope_local_base_freq": ROPE_LOCAL_BASE,
        "rope_scaling": None,
        "sliding_window": int(field(r, "gemma3.attention.sliding_window")),
        "layer_types": layer_types,
        "query_pre_attn_scalar": head_dim,
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "bos_token_id": int(field(r, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(r, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(field(r, "tokenizer.ggml.padding_token_id")),
        "torch_dtype": "float32",
        "use_bidirectional_attention": False,
    }


def convert(gguf_path, out_dir, bf16=False):
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.numpy import save_file

    r = GGUFReader(gguf_path)
    if field(r, "general.architecture") != "gemma3":
        die(f"{gguf_path}: general.architecture is {field(r, 'general.architecture')}, not gemma3")
    cfg = build_config(r)
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    counts = {}
    for t in r.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        shape = [int(s) for s in reversed(t.shape)] if w.ndim > 1 else [int(t.shape[0])]
        w = w.reshape(shape)
        name = hf_name(t.name)
        if name.endswith("norm.weight"):
            w = w - np.float32(1.0)  # llama.cpp stores 1 + w
        tensors[name] = np.ascontiguousarray(w)
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    n_expect = 2 + 13 * cfg["num_hidden_layers"]
    if len(tensors) != n_expect:
        die(f"{gguf_path}: {len(tensors)} tensors, expected {n_expect}")
    if bf16:
        import ml_dtypes  # noqa: F401  (numpy bfloat16)
        tensors = {k: v.astype("bfloat16") for k, v in tensors.items()}
        cfg["torch_dtype"] = "bfloat16"
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok = build_tokenizer(r)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    pieces = list(tok["model"]["vocab"])
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GemmaTokenizerFast", "add_bos_token": True, "add_eos_token": False,
                   "bos_token": pieces[cfg["bos_token_id"]], "eos_token": pieces[cfg["eos_token_id"]],
                   "pad_token": pieces[cfg["pad_token_id"]], "unk_token": tok["model"]["unk_token"],
                   "model_max_length": cfg["max_position_embeddings"]}, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
                   "pad_token_id": cfg["pad_token_id"]}, f, indent=2)
    print(f"gemma3_gguf_to_hf: {len(tensors)} tensors ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})"
          f" -> {'bfloat16' if bf16 else 'float32'}; {len(tok['model']['merges'])} merges, "
          f"{len(tok['added_tokens'])} added tokens; layer types: "
          f"{', '.join(str(l) for l, t in enumerate(cfg['layer_types']) if t == 'full_attention')} global")


# --- SentencePiece's BPE rule, written independently of tokenizer.json -----------------------------

def spm_encode(text, vocab, scores, normal, user_re):
    """ids of text by SentencePiece's BPE: spaces -> U+2581, user-defined pieces split first, then the
    adjacent pair whose concatenation is the highest-scoring normal piece merges (leftmost on ties)."""
    out = []
    pos = 0
    text = text.replace(" ", SPACE)
    for m in list(user_re.finditer(text)) + [None]:
        seg = text[pos:m.start()] if m else text[pos:]
        out.extend(spm_segment(seg, vocab, scores, normal))
        if m:
            out.append(vocab[m.group(0)])
            pos = m.end()
    return out


def spm_segment(s, vocab, scores, normal):
    if not s:
        return []
    sym = list(s)  # one symbol per code point
    prev = list(range(-1, len(sym) - 1))
    nxt = list(range(1, len(sym) + 1))
    nxt[-1] = -1
    alive = [True] * len(sym)
    heap = []

    def push(i, j):
        p = sym[i] + sym[j]
        if p in normal:
            heapq.heappush(heap, (-scores[vocab[p]], i, j, p))

    for i in range(len(sym) - 1):
        push(i, i + 1)
    while heap:
        _, i, j, p = heapq.heappop(heap)
        if not alive[i] or not alive[j] or nxt[i] != j or sym[i] + sym[j] != p:
            continue
        sym[i] = p
        alive[j] = False
        nxt[i] = nxt[j]
        if nxt[j] != -1:
            prev[nxt[j]] = i
        if prev[i] != -1:
            push(prev[i], i)
        if nxt[i] != -1:
            push(i, nxt[i])
    ids = []
    i = 0
    while i != -1:
        p = sym[i]
        if p in vocab:
            ids.append(vocab[p])
        else:
            ids.extend(vocab[f"<0x{b:02X}>"] for b in p.encode("utf-8"))
        i = nxt[i]
    return ids


def check_tokenizer(gguf_path, out_dir, texts):
    from gguf import GGUFReader
    from tokenizers import Tokenizer

    r = GGUFReader(gguf_path)
    pieces, scores, types = vocab_of(r)
    vocab = {p: i for i, p in enumerate(pieces)}
    normal = {p for p, t in zip(pieces, types) if t == NORMAL}
    users = sorted((p for p, t in zip(pieces, types) if t in (USER, CONTROL)), key=len, reverse=True)
    user_re = re.compile("|".join(re.escape(u) for u in users))
    tk = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    total = same = n_files = n_same_files = 0
    for path in texts:
        text = open(path, encoding="utf-8", newline="").read()  # bytes as they are: \r\n stays
        a = spm_encode(text, vocab, scores, normal, user_re)
        b = tk.encode(text, add_special_tokens=False).ids
        n_files += 1
        total += len(a)
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        if a == b:
            same += len(a)
            n_same_files += 1
        else:
            print(f"check-tokenizer: {path}: first difference at token {k} of {len(a)} (SentencePiece) / "
                  f"{len(b)} (tokenizer.json): {a[k:k + 5]} vs {b[k:k + 5]}")
        dec = tk.decode(b, skip_special_tokens=False)
        if dec != text.replace(SPACE, " "):  # a literal U+2581 in the text decodes as a space, as in SentencePiece
            print(f"check-tokenizer: {path}: decoding does not give the text back")
            n_same_files -= 1 if a == b else 0
    print(f"check-tokenizer: {n_same_files}/{n_files} files identical token for token and round-tripping; "
          f"{same}/{total} tokens in identical files")
    return 0 if n_same_files == n_files else 1


def main():
    a = sys.argv[1:]
    if len(a) >= 3 and a[0] == "--check-tokenizer":
        sys.exit(check_tokenizer(a[1], a[2], a[3:]))
    bf16 = "--bf16" in a
    a = [x for x in a if x != "--bf16"]
    if len(a) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    convert(a[0], a[1], bf16)


if __name__ == "__main__":
    main()
