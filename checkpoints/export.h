// export.h: trained indexers as safetensors + config.json, and loading them.
//
// INDEXER/model.safetensors holds, per trained layer l, F32 tensors
//   model.layers.{l}.self_attn.indexer.wq.weight     [H·d_I, d_model]
//   model.layers.{l}.self_attn.indexer.wk.weight     [d_I, d_model]
//   model.layers.{l}.self_attn.indexer.k_norm.weight [d_I]   (unless key_norm none)
//   model.layers.{l}.self_attn.indexer.k_norm.bias   [d_I]   (LayerNorm)
//   model.layers.{l}.self_attn.indexer.ww.weight     [H, d_model] (expanded)
// and INDEXER/config.json the base checkpoint's fingerprint, the layers, the
// indexer configuration (kernels/indexer.h), default k and b_sel, steps, tokens.
#pragma once
#include <stdint.h>

#include "indexer.h"
#include "status.h"

// Exports the checkpoint of at_step (−1: the newest; 0: the initialisation)
// of run_dir into out_dir (created via out_dir.tmp + rename; an existing
// out_dir is refused). The spindle layout (above).
int export_indexer(const char *run_dir, const char *out_dir, int64_t at_step, int default_k, int default_bsel,
                   Status *st);

// The tensor names, shapes and config keys an export is written under
// (docs/formats.md, "Export layouts"):
//   SPINDLE  spindle's own (above; what `--indexer` loads);
//   DSA      DeepSeek-V3.2's indexer (transformers deepseek_v32): wq_b, wk,
//            k_norm (LayerNorm), weights_proj; head-expanded indexers with a
//            LayerNorm key of eps 1e-6 only;
//   QSA      the GQA indexer of Qwen4-Exp (transformers qwen4_exp): fused
//            index_qk_proj, q_layernorm / k_layernorm (RMSNorm, gain 1 + w);
//            head-collapsed indexers with an RMSNorm key only.
// A run whose indexer a layout cannot express is refused (exit 1, naming the
// run's config.json and the field) before anything is written.
typedef enum { EXPORT_LAYOUT_SPINDLE = 0, EXPORT_LAYOUT_DSA = 1, EXPORT_LAYOUT_QSA = 2 } ExportLayout;

// The layout of a name ("spindle" | "dsa" | "qsa"), or -1.
int export_layout_parse(const char *name);

int export_indexer_as(const char *run_dir, const char *out_dir, int64_t at_step, int default_k, int default_bsel,
                      ExportLayout layout, Status *st);

// Loads an exported indexer folder (an IndexerSet, kernels/indexer.h) for a model of n_model_layers layers whose
// fingerprint is expect_fp (NULL: not checked; a mismatch is refused, naming
// both). Release with indexer_set_free.
int indexer_set_load(IndexerSet *s, const char *dir, int n_model_layers, const char *expect_fp, Status *st);
void indexer_set_free(IndexerSet *s);
