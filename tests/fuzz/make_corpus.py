#!/usr/bin/env python3
"""make_corpus.py: writes the seed corpus of the fuzz targets under
tests/fuzz/corpus/NAME/ (safetensors, config, tokenizer, ids): small valid
inputs of every shape the parsers accept, and the bad inputs found so far:
refuse-* must stay a clean refusal (tests/fuzz/driver.c checks it), slow-* must
stay fast. Run from the repository
root; files are rewritten, others are left alone."""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- safetensors -------------------------------------------------------------------

def st(header, data, raw=None, pad=True):
    h = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(shape, off):
    return {"dtype": "F32", "shape": shape, "data_offsets": off}


floats = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
put("safetensors", "one_f32", st({"a": f32([2, 2], [0, 16])}, floats))
put("safetensors", "mixed_dtypes", st({
    "__metadata__": {"format": "pt"},
    "w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
    "h": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]},
    "s": {"dtype": "F32", "shape": [], "data_offsets": [12, 16]},
    "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [16, 16]},
    "i": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]},
}, bytes(range(24))))
put("safetensors", "reverse_order", st({"b": f32([2], [8, 16]), "a": f32([2], [0, 8])}, floats))
put("safetensors", "empty", st({}, b""))
put("safetensors", "unpadded", st({"a": f32([1], [0, 4])}, floats[:4], pad=False))
# Refused by the reference library (safetensors 0.8.0); each must stay refused.
put("safetensors", "refuse-alias", st({"a": f32([2], [0, 8]), "b": f32([2], [0, 8])}, floats[:8]))
put("safetensors", "refuse-overlap", st({"a": f32([2], [0, 8]), "b": f32([2], [4, 12])}, floats[:12]))
put("safetensors", "refuse-gap", st({"a": f32([1], [0, 4]), "b": f32([1], [8, 12])}, floats[:12]))
put("safetensors", "refuse-trailing-data", st({"a": f32([2], [0, 8])}, floats))
put("safetensors", "refuse-not-from-zero", st({"a": f32([2], [8, 16])}, floats))
put("safetensors", "refuse-fractional-offset", st(None, floats[:8],
    raw=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}}'))
put("safetensors", "refuse-exponent-offset", st(None, floats[:8],
    raw=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8e0]}}'))
put("safetensors", "refuse-fractional-shape", st(None, floats[:8],
    raw=b'{"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}'))
hdr = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\0\0\0'
put("safetensors", "refuse-nul-padding", struct.pack("<Q", len(hdr)) + hdr + floats[:8])
put("safetensors", "refuse-metadata-number", st({"__metadata__": {"x": 1}, "a": f32([2], [0, 8])}, floats[:8]))
put("safetensors", "refuse-bad-utf8-name", st(None, floats[:8],
    raw=b'{"\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'))

# --- config.json ---------------------------------------------------------------------

base = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu",
}


def cfg(name, **kw):
    c = dict(base)
    for k, v in kw.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    put("config", name, json.dumps(c, indent=1))


cfg("llama")
cfg("qwen2", model_type="qwen2", rope_theta=1e6)
cfg("qwen3", model_type="qwen3", head_dim=32, attention_bias=False)
cfg("linear", rope_scaling={"rope_type": "linear", "factor": 2.0})
cfg("llama3", rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 128})
cfg("yarn", rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                          "beta_fast": 32, "beta_slow": 1})
cfg("rope_parameters", rope_theta=None, rope_parameters={"rope_type": "default", "rope_theta": 50000.0})
cfg("refuse-head-dim-4096", head_dim=4096)
cfg("refuse-eps-zero", rms_norm_eps=0)
cfg("refuse-eps-negative", rms_norm_eps=-1e-6)
cfg("refuse-theta-tiny", rope_theta=1e-300)
cfg("refuse-yarn-beta-zero", rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 128, "beta_fast": 0})
cfg("refuse-linear-factor-tiny", rope_scaling={"rope_type": "linear", "factor": 1e-300})
# Gemma 3: legacy keys (sliding_window_pattern, rope_local_base_freq) and transformers-5
# keys (layer_types, rope_parameters per layer kind), and their refusals.
gemma = {"model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh", "hidden_act": None,
         "num_hidden_layers": 4, "head_dim": 16, "num_key_value_heads": 1, "sliding_window": 8,
         "query_pre_attn_scalar": 16, "rope_theta": 1e6, "tie_word_embeddings": None}
cfg("gemma3-legacy", **gemma, rope_local_base_freq=1e4, sliding_window_pattern=2,
    rope_scaling={"rope_type": "linear", "factor": 8.0}, final_logit_softcapping=30.0)
cfg("gemma3-new", **dict(gemma, rope_theta=None),
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                     "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
cfg("gemma3-nested", model_type="gemma3", text_config=dict(base, **{k: v for k, v in gemma.items() if v is not None}))
cfg("refuse-gemma3-layer-type", **gemma, layer_types=["sliding_attention", "chunked_attention",
                                                       "sliding_attention", "full_attention"])
cfg("refuse-gemma3-layer-count", **gemma, layer_types=["sliding_attention", "full_attention"])
cfg("refuse-gemma3-attn-softcap", **gemma, attn_logit_softcapping=50.0)
cfg("refuse-gemma3-local-theta", **gemma, rope_local_base_freq=1e-300)

# Qwen3-Next / Qwen3.5: layer_types or full_attention_interval, Gated DeltaNet sizes, MoE, and refusals.
hyb = {"head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
       "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4, "rope_theta": None,
       "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}}
cfg("qwen3_5-types", model_type="qwen3_5_text", **hyb, layer_types=["linear_attention", "full_attention"])
cfg("qwen3_5-nested", model_type="qwen3_5", text_config=dict(base, model_type="qwen3_5_text", **{
    k: v for k, v in hyb.items() if v is not None}, full_attention_interval=2))
cfg("qwen3_next-moe", model_type="qwen3_next", **hyb, full_attention_interval=2, num_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32, mlp_only_layers=[1])
cfg("refuse-qwen3_5-heads", model_type="qwen3_5_text", **dict(hyb, linear_num_key_heads=3))
cfg("refuse-qwen3_next-topk", model_type="qwen3_next", **hyb, num_experts=2, num_experts_per_tok=3)
cfg("refuse-qwen3_5-layer-type", model_type="qwen3_5_text", **hyb, layer_types=["linear_attention",
                                                                                 "sliding_attention"])

# --- tokenizer.json ------------------------------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


byte_chars = [bytes_to_unicode()[b] for b in range(256)]
vocab = {c: i for i, c in enumerate(byte_chars)}
merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l"), ("o", "r"), ("1", "2")]
for a, b in merges:
    vocab.setdefault(a + b, len(vocab))


def tok(name, text=None, added=(), normalizer=None, pre=None, model_extra=None, merges_=merges, vocab_=vocab):
    t = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": list(added),
        "normalizer": normalizer,
        "pre_tokenizer": pre or {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                 "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": dict({"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                       "vocab": vocab_, "merges": [f"{a} {b}" for a, b in merges_]}, **(model_extra or {})),
    }
    data = json.dumps(t, ensure_ascii=False).encode()
    if text is not None:
        data += b"\0" + text.encode()
    put("tokenizer", name, data)


def added(content, id_, special=False, lstrip=False, rstrip=False, single_word=False, normalized=None):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": (not special) if normalized is None else normalized, "special": special}


eot = added("<|endoftext|>", len(vocab), special=True)
tok("bytes_merges", "the other 12 tell the truth<|endoftext|>the end")
tok("added_special", "a<|endoftext|>b <|endoftext|> c", added=[eot])
tok("added_strip", "x\t\t\ty \t z\t", added=[added("\t", 9, lstrip=True, rstrip=True)])
tok("single_word", "ab xy ab, yab", added=[added("ab", len(vocab), single_word=True)])
tok("nfc", "Cafe\u0301 \u00c5ngstr\u00f6m", normalizer={"type": "NFC"})
tok("sequence_norm", "\ufb01ne \u2460", normalizer={"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "NFC"}]})
tok("split_digits", "abc 12345 def 7", pre={"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]})
tok("split_regex", "I'm here: 1234 cats!!", pre={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]})
tok("split_string", "a-b--c", pre={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]})
fb_vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3}
fb_vocab.update({f"<0x{b:02X}>": 4 + b for b in range(256)})
tok("byte_fallback", "abc\u00e9", pre={"type": "Split", "pattern": {"String": " "}, "behavior": "Removed",
                                        "invert": False},
    model_extra={"byte_fallback": True, "unk_token": "<unk>", "fuse_unk": True}, merges_=[("a", "b")],
    vocab_=fb_vocab)
# Found by fuzzing and by the issue: each must stay a clean refusal (or, for the
# whitespace token, finish in linear time).
tok("refuse-id-1e9", "x", vocab_=dict(vocab, **{"zz": 1000000000}), merges_=[])
tok("refuse-id-beyond-model", "x", added=[added("<big>", 5000, special=True)], vocab_=dict(vocab, **{"<big>": 5000}))
tok("slow-tabs-lstrip-rstrip", "\t" * 20000, added=[added("\t", 9, lstrip=True, rstrip=True)])

# --- ids -------------------------------------------------------------------------------

put("ids", "spaces", "1 2 3 4\n5 6\n")
put("ids", "commas", "10,20,30,\n40 , 50\n")
put("ids", "one", "999")
put("ids", "refuse-out-of-range", "1 2 1000\n")
put("ids", "refuse-int32-overflow", "4294967296 1\n")
put("ids", "refuse-not-integer", "1 2.5 3\n")
put("ids", "refuse-empty", "")
