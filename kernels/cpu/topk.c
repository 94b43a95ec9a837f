// topk.c: see topk.h. Quickselect with a Hoare partition around a
// median-of-three pivot (expected O(n)), then a sort of the k winners.
#include "topk.h"

#include <stdlib.h>

// Candidate a ranks before b: larger value, or equal value and lower index.
static inline int ranks_before(const float *val, int a, int b) {
    return val[a] > val[b] || (val[a] == val[b] && a < b);
}

// Rearranges idx[0..n) so that its first k entries are the k best.
static void select_top(int *idx, int n, int k, const float *val) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, a = idx[lo], b = idx[mid], c = idx[hi];
        int pivot = ranks_before(val, a, b) ? (ranks_before(val, b, c) ? b : ranks_before(val, a, c) ? c : a)
                                            : (ranks_before(val, a, c) ? a : ranks_before(val, b, c) ? c : b);
        int i = lo, j = hi;
        while (i <= j) {
            while (ranks_before(val, idx[i], pivot)) i++;
            while (ranks_before(val, pivot, idx[j])) j--;
            if (i <= j) {
                int tmp = idx[i];
                idx[i++] = idx[j];
                idx[j--] = tmp;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int topk_support(int *sel, const float *val, int n_cand, int k) {
    for (int j = 0; j < n_cand; j++) sel[j] = j;
    if (n_cand <= k) return n_cand;
    select_top(sel, n_cand, k, val);
    qsort(sel, (size_t)k, sizeof *sel, cmp_int);
    return k;
}
