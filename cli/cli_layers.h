// cli_layers.h: which layers a command acts on. The method (teacher, oracle,
// indexer training, export, sparse prefill, eval) acts at full-attention
// layers only (docs/design.md, "Hybrid stacks"); every other layer kind runs
// unchanged. These helpers pick those layers from a model's layer kinds
// (model/config.h) and refuse a --layers list naming any other kind.
#pragma once
#include "config.h"

// (config_layer_kind_name and config_full_layers, model/config.h, name the
// kinds and list the full-attention layers.)

// Checks that each of layers[0..n) is a layer of the model (< n_layers) and a
// full-attention one. Returns 0, or -1 after "spindle CMD: FLAG: layer L is a
// sliding_attention layer ..." (or "does not exist"): the caller exits 2.
int cli_check_layers(const char *cmd, const char *flag, const int *layers, int n, const LayerKind *kinds,
                     int n_layers);

// A --layers value: comma-separated indices or ranges ("0,3,5-7") → the sorted
// distinct layers into out (room for max), each checked by cli_check_layers.
// value NULL: every full-attention layer (the default). Returns 0, or -1 after
// a message (malformed, empty, out of range, another kind, more than max, or
// a model without a full-attention layer): the caller exits 2.
int cli_layers(const char *cmd, const char *flag, const char *value, const LayerKind *kinds, int n_layers, int max,
               int *out, int *n);
