// topk.h: the top-k selection shared by the oracle and the indexer (CPU twin).
// Tie rule: larger value first, then lower index. Selections come back sorted
// ascending by key index.
#pragma once

// sel ← the top k of candidates 0..n_cand−1 by val (all of them when
// n_cand ≤ k), sorted ascending; returns the count. sel has room for n_cand.
int topk_support(int *sel, const float *val, int n_cand, int k);
