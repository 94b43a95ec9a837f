// sdpa.cu: dense causal GQA attention in bf16 through cuDNN's fused
// scaled-dot-product attention, driven through the cuDNN backend (graph) C API
// (sdpa_cuda.h). No cuDNN frontend: every descriptor is built here by hand.
//
// The graph. cuDNN 9 recognises flash attention as a fixed pattern of backend
// operations and runs the whole pattern as one fused kernel (the intermediates
// [1, Hq, T, T] marked virtual are never stored). This is the pattern the cuDNN
// frontend lowers its sdpa() node to for backends before 9.21 (this build has
// 9.19; the dedicated CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR of 9.13+ takes
// a causal mask only as a sub-graph, from 9.21 on, so it is not used):
//
//   S    = matmul(Q, Kᵀ)                 Q [1,Hq,T,dh] bf16, Kᵀ [1,Hkv,dh,T] bf16, S fp32
//   Ss   = S · scale                     pointwise MUL, scale a by-value fp32 scalar
//   row  = gen_index(Ss, axis 2)         pointwise GEN_INDEX → int32 (query index t)
//   col  = gen_index(Ss, axis 3)         pointwise GEN_INDEX → int32 (key index j)
//   keep = row ≥ col                     pointwise CMP_GE → boolean (causal, top-left;
//                                        the same as bottom-right for a square T×T)
//   Sm   = keep ? Ss : −∞                pointwise BINARY_SELECT, −∞ a by-value scalar
// and with a sliding window W (key j visible to query t iff t − W < j ≤ t),
// the left bound of the band, as the cuDNN frontend's composite diagonal-band
// mask lowers diagonal_band_left_bound = W (top-left aligned) for cuDNN < 9.21:
//   row2 = gen_index(Sm, axis 2)         pointwise GEN_INDEX → int32
//   col2 = gen_index(Sm, axis 3)         pointwise GEN_INDEX → int32
//   colw = col2 + W                      pointwise ADD, W a by-value fp32 scalar → fp32
//   keep2 = colw > row2                  pointwise CMP_GT → boolean (j > t − W)
//   Sm   ← keep2 ? Sm : −∞               pointwise BINARY_SELECT
// then, either way:
//   m    = max_j Sm                      reduction MAX → [1,Hq,T,1]
//   E    = exp(Sm − m)                   pointwise SUB, pointwise EXP
//   l    = Σ_j E                         reduction ADD → [1,Hq,T,1]
//   lse  = m + log(l)                    pointwise LOG, pointwise ADD → Stats (fp32, output)
//   P    = E / l                         pointwise DIV → bf16 (bmm2's A must be in the I/O type)
//   O    = matmul(P, V)                  V [1,Hkv,T,dh] bf16, O [1,Hq,T,dh] bf16
//
// GQA: K and V carry Hkv heads and Q carries Hq; the matmuls broadcast K/V head
// h/(Hq/Hkv) over the query heads (cuDNN requires Hq % Hkv == 0).
// Layouts: our row-major q [T, Hq·dh] is the 4-D tensor [B=1, H=Hq, S=T, D=dh]
// with strides (T·Hq·dh, dh, Hq·dh, 1) ("BSHD"); Kᵀ is K [T, Hkv·dh] viewed as
// [1, Hkv, dh, T] with strides (T·Hkv·dh, dh, 1, Hkv·dh); Stats [1, Hq, T, 1]
// with strides (Hq·T, T, 1, 1) is exactly our lse [Hq, T]. All intermediates
// are fp32 and virtual except P (bf16, virtual).
//
// Plans: the graph is built, handed to heuristics (mode A, then FALLBACK), and
// the first engine config whose execution plan finalizes is kept, with every
// descriptor it came from, in a small table keyed by (T, Hq, Hkv, dh, W) (W = 0
// for causal, and for any W ≥ T, where the band is the causal triangle); a shape
// cuDNN rejects is cached too, with the reason. The scale and −∞ are by-value
// tensors fed at execution, so one plan serves every scale. One cuDNN handle
// (default stream) and one workspace buffer (grown on demand) per process.
//
// Lengths in buckets: cuDNN compiles its fused kernel for each plan (hundreds of
// milliseconds), so a plan per distinct T would make every prompt of a tasks
// file, each of its own length, pay a compile. A pass of T tokens therefore runs
// on the plan of Tb = T rounded up to a multiple of SPINDLE_SDPA_BUCKET (default
// 1024; 1 plans every T exactly): q, k, v are copied into Tb-row scratch whose
// rows past T are zero, the Tb-row output and Stats are computed, and their
// first T rows copied out. Causality makes that exact: query t < T sees keys
// j ≤ t < T only, so the padded rows change nothing it computes (they are
// queries and keys no real row reads). A T that is already a multiple runs in
// place, without copies.
//
// Fallback: where cuDNN does not take a shape (or a windowed graph), the op
// still runs: q, k, v are widened to fp32 scratch, attention_forward_cuda (the
// fp32 flash kernel, with the window) computes out and lse, and out is
// rounded to bf16 — slower, and more exact than cuDNN's bf16 P, but the same
// function. sdpa_supported says which of the two paths a shape takes.
//
// Errors: building a plan never aborts; it stops at the first failing call and
// records "<what failed>: <status>: <cuDNN's last error message>", which
// sdpa_supported returns. SPINDLE_SDPA_DEBUG=1 prints each build (heuristics
// count, every rejected engine config and why, the chosen engine, workspace)
// to stderr. Executing aborts on any cuDNN error with the status, cuDNN's
// message, the shape, the statement, function, file and line.
#include <cudnn.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_check.cuh"
#include "env.h"
#include "ops_cuda.h"
#include "sdpa_cuda.h"

// ---- cuDNN status checks ---------------------------------------------------------------

// The shape being executed, printed by CUDNN_CHECK.
static char exec_shape[96];

#define CUDNN_CHECK(stmt)                                                                        \
    do {                                                                                         \
        cudnnStatus_t st_ = (stmt);                                                              \
        if (st_ != CUDNN_STATUS_SUCCESS) {                                                       \
            char msg_[512];                                                                      \
            cudnnGetLastErrorString(msg_, sizeof msg_);                                          \
            fprintf(stderr, "spindle: cuDNN error %s (%d) [%s] in %s at %s:%d: %s\n  cuDNN: %s\n", \
                    cudnnGetErrorString(st_), (int)st_, exec_shape, __func__, __FILE__, __LINE__, \
                    #stmt, msg_[0] ? msg_ : "(no message)");                                     \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

static int debug_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("SPINDLE_SDPA_DEBUG");
        on = e && e[0] && strcmp(e, "0") != 0;
    }
    return on;
}

static void debug(const char *fmt, ...) {
    if (!debug_enabled()) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sdpa: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

// ---- the handle ------------------------------------------------------------------------

static cudnnHandle_t handle;
static int handle_state;  // 0 not tried, 1 created, -1 failed (handle_why says why)
static char handle_why[256];

static int get_handle(void) {
    if (handle_state == 0) {
        cudnnStatus_t st = cudnnCreate(&handle);
        if (st == CUDNN_STATUS_SUCCESS) {
            handle_state = 1;
            debug("cudnnCreate: cuDNN runtime %zu, compiled against %d", cudnnGetVersion(), CUDNN_VERSION);
        } else {
            char msg[256];
            cudnnGetLastErrorString(msg, sizeof msg);
            snprintf(handle_why, sizeof handle_why, "cudnnCreate: %.60s: %.170s", cudnnGetErrorString(st), msg);
            handle_state = -1;
            (void)cudaGetLastError();  // do not leave a sticky error for later CUDA checks
        }
    }
    return handle_state == 1;
}

// ---- building: every failure is recorded, not fatal ------------------------------------------

// The descriptors of one graph (all kept alive while its plan lives) and the
// first failure while building it.
typedef struct {
    cudnnBackendDescriptor_t *descs;
    int n, cap;
    char why[384];
} Builder;

static void builder_free(Builder *b) {
    for (int i = b->n - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(b->descs[i]);
    free(b->descs);
    b->descs = NULL;
    b->n = b->cap = 0;
}

// Records st as the failure of `what` (only the first failure is kept). Returns 1 on success.
static int bcheck(Builder *b, cudnnStatus_t st, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS) return 1;
    char msg[256];
    cudnnGetLastErrorString(msg, sizeof msg);
    if (!b->why[0])  // bounded fields: what ≤ 100, status ≤ 60, message ≤ 210 characters
        snprintf(b->why, sizeof b->why, "%.100s: %.60s: %.210s", what, cudnnGetErrorString(st), msg[0] ? msg : "-");
    debug("FAILED %s: %s (%d): %s", what, cudnnGetErrorString(st), (int)st, msg);
    return 0;
}

// TRY(stmt, what): in a function returning int, return 0 when stmt fails.
#define TRY(stmt, what)                                       \
    do {                                                      \
        if (!bcheck(b, (stmt), what)) return 0;               \
    } while (0)

static int bnew(Builder *b, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d, const char *what) {
    *d = NULL;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        cudnnBackendDescriptor_t *p = (cudnnBackendDescriptor_t *)realloc(b->descs, sizeof *p * (size_t)cap);
        if (!p) abort();
        b->descs = p;
        b->cap = cap;
    }
    TRY(cudnnBackendCreateDescriptor(type, d), what);
    b->descs[b->n++] = *d;
    return 1;
}

static int set1(Builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, const void *value, const char *what) {
    TRY(cudnnBackendSetAttribute(d, name, type, 1, value), what);
    return 1;
}

static int setdesc(Builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                   cudnnBackendDescriptor_t value, const char *what) {
    TRY(cudnnBackendSetAttribute(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value), what);
    return 1;
}

// A 4-D tensor descriptor. 16-byte alignment: the base pointers handed to
// attention_forward_bf16_cuda must be 16-byte aligned (cudaMalloc gives 256).
static int tensor(Builder *b, cudnnBackendDescriptor_t *t, const char *what, int64_t uid, cudnnDataType_t dtype,
                  int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                  bool is_virtual, bool by_value) {
    const int64_t dims[4] = {d0, d1, d2, d3}, strides[4] = {s0, s1, s2, s3}, align = 16;
    if (!bnew(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t, what)) return 0;
    TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype), what);
    TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims), what);
    TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides), what);
    TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), what);
    TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), what);
    if (is_virtual) TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual), what);
    if (by_value) TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value), what);
    TRY(cudnnBackendFinalize(*t), what);
    return 1;
}

// A pointwise operation y = mode(x[, bb[, tt]]) with math precision prec;
// axis ≥ 0 only for GEN_INDEX. bb and tt may be NULL.
static int pointwise(Builder *b, cudnnBackendDescriptor_t *op, const char *what, cudnnPointwiseMode_t mode,
                     cudnnDataType_t prec, int64_t axis, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t bb,
                     cudnnBackendDescriptor_t tt, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t pw;
    if (!bnew(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw, what)) return 0;
    if (!set1(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode, what)) return 0;
    if (!set1(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &prec, what)) return 0;
    if (axis >= 0 && !set1(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis, what)) return 0;
    TRY(cudnnBackendFinalize(pw), what);
    if (!bnew(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, what)) return 0;
    if (bb && !setdesc(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bb, what)) return 0;
    if (tt && !setdesc(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tt, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, what)) return 0;
    TRY(cudnnBackendFinalize(*op), what);
    return 1;
}

// y = reduce(x) over the dimensions where y has extent 1 (fp32).
static int reduction(Builder *b, cudnnBackendDescriptor_t *op, const char *what, cudnnReduceTensorOp_t mode,
                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    if (!bnew(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &rd, what)) return 0;
    if (!set1(b, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode, what)) return 0;
    if (!set1(b, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp, what)) return 0;
    TRY(cudnnBackendFinalize(rd), what);
    if (!bnew(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, op, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, what)) return 0;
    TRY(cudnnBackendFinalize(*op), what);
    return 1;
}

// c = a · bm (batched over the leading dimensions), fp32 accumulation.
static int matmul(Builder *b, cudnnBackendDescriptor_t *op, const char *what, cudnnBackendDescriptor_t a,
                  cudnnBackendDescriptor_t bm, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    if (!bnew(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mm, what)) return 0;
    if (!set1(b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp, what)) return 0;
    TRY(cudnnBackendFinalize(mm), what);
    if (!bnew(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, op, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, bm, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, what)) return 0;
    if (!setdesc(b, *op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, what)) return 0;
    TRY(cudnnBackendFinalize(*op), what);
    return 1;
}

// Tensor unique ids: the non-virtual ones are the variant pack's.
enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_WINDOW,
    UID_S = 101, UID_SS, UID_ROW, UID_COL, UID_KEEP, UID_SM, UID_MAX, UID_SUB, UID_EXP, UID_SUM, UID_LOG, UID_P,
    UID_ROW2, UID_COL2, UID_COLW, UID_KEEP2, UID_SM2,
};
enum { N_IO = 8 };  // with the window's scalar (causal graphs pass the first 7)

// Builds and finalizes the operation graph of the comment at the top. 1 on success.
static int build_graph(Builder *b, cudnnBackendDescriptor_t *graph, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh,
                       int W) {
    const cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F32 = CUDNN_DATA_FLOAT, I32 = CUDNN_DATA_INT32,
                          BOOL = CUDNN_DATA_BOOLEAN;
    const bool V = true, NV = false;
    cudnnBackendDescriptor_t q, kt, v, o, stats, scale, neg_inf;  // non-virtual
    cudnnBackendDescriptor_t s, ss, row, col, keep, sm, mx, sub, ex, sum, lg, p;  // virtual
    // Inputs and outputs (see the layouts at the top).
    if (!tensor(b, &q, "tensor Q", UID_Q, BF, 1, Hq, T, dh, T * Hq * dh, dh, Hq * dh, 1, NV, NV)) return 0;
    if (!tensor(b, &kt, "tensor K^T", UID_K, BF, 1, Hkv, dh, T, T * Hkv * dh, dh, 1, Hkv * dh, NV, NV)) return 0;
    if (!tensor(b, &v, "tensor V", UID_V, BF, 1, Hkv, T, dh, T * Hkv * dh, dh, Hkv * dh, 1, NV, NV)) return 0;
    if (!tensor(b, &o, "tensor O", UID_O, BF, 1, Hq, T, dh, T * Hq * dh, dh, Hq * dh, 1, NV, NV)) return 0;
    if (!tensor(b, &stats, "tensor Stats", UID_STATS, F32, 1, Hq, T, 1, Hq * T, T, 1, 1, NV, NV)) return 0;
    if (!tensor(b, &scale, "tensor scale", UID_SCALE, F32, 1, 1, 1, 1, 1, 1, 1, 1, NV, true)) return 0;
    if (!tensor(b, &neg_inf, "tensor -inf", UID_NEG_INF, F32, 1, 1, 1, 1, 1, 1, 1, 1, NV, true)) return 0;
    // Intermediates: [1, Hq, T, T] row-major, and the per-row [1, Hq, T, 1].
    const int64_t a0 = Hq * T * T, a1 = T * T, a2 = T, r0 = Hq * T, r1 = T;
    if (!tensor(b, &s, "tensor S", UID_S, F32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    if (!tensor(b, &ss, "tensor S*scale", UID_SS, F32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    if (!tensor(b, &row, "tensor row index", UID_ROW, I32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    if (!tensor(b, &col, "tensor col index", UID_COL, I32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    if (!tensor(b, &keep, "tensor causal keep", UID_KEEP, BOOL, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    if (!tensor(b, &sm, "tensor masked S", UID_SM, F32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    if (!tensor(b, &mx, "tensor row max", UID_MAX, F32, 1, Hq, T, 1, r0, r1, 1, 1, V, NV)) return 0;
    if (!tensor(b, &sub, "tensor S-max", UID_SUB, F32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    if (!tensor(b, &ex, "tensor exp", UID_EXP, F32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    if (!tensor(b, &sum, "tensor row sum", UID_SUM, F32, 1, Hq, T, 1, r0, r1, 1, 1, V, NV)) return 0;
    if (!tensor(b, &lg, "tensor log sum", UID_LOG, F32, 1, Hq, T, 1, r0, r1, 1, 1, V, NV)) return 0;
    if (!tensor(b, &p, "tensor P", UID_P, BF, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    // The window's band (W > 0 only).
    cudnnBackendDescriptor_t wlen = NULL, row2 = NULL, col2 = NULL, colw = NULL, keep2 = NULL, sm2 = NULL;
    if (W > 0) {
        if (!tensor(b, &wlen, "tensor window", UID_WINDOW, F32, 1, 1, 1, 1, 1, 1, 1, 1, NV, true)) return 0;
        if (!tensor(b, &row2, "tensor band row index", UID_ROW2, I32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
        if (!tensor(b, &col2, "tensor band col index", UID_COL2, I32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
        if (!tensor(b, &colw, "tensor col+window", UID_COLW, F32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
        if (!tensor(b, &keep2, "tensor band keep", UID_KEEP2, BOOL, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
        if (!tensor(b, &sm2, "tensor band-masked S", UID_SM2, F32, 1, Hq, T, T, a0, a1, a2, 1, V, NV)) return 0;
    }

    enum { N_OPS = 19 };
    cudnnBackendDescriptor_t ops[N_OPS];
    int n = 0;
    if (!matmul(b, &ops[n++], "op bmm1 S=Q*K^T", q, kt, s)) return 0;
    if (!pointwise(b, &ops[n++], "op scale", CUDNN_POINTWISE_MUL, F32, -1, s, scale, NULL, ss)) return 0;
    if (!pointwise(b, &ops[n++], "op gen_index row", CUDNN_POINTWISE_GEN_INDEX, F32, 2, ss, NULL, NULL, row))
        return 0;
    if (!pointwise(b, &ops[n++], "op gen_index col", CUDNN_POINTWISE_GEN_INDEX, F32, 3, ss, NULL, NULL, col))
        return 0;
    if (!pointwise(b, &ops[n++], "op row>=col", CUDNN_POINTWISE_CMP_GE, BOOL, -1, row, col, NULL, keep)) return 0;
    if (!pointwise(b, &ops[n++], "op causal select", CUDNN_POINTWISE_BINARY_SELECT, F32, -1, ss, neg_inf, keep, sm))
        return 0;
    if (W > 0) {  // keep only j > t − W: col + W > row
        if (!pointwise(b, &ops[n++], "op band gen_index row", CUDNN_POINTWISE_GEN_INDEX, F32, 2, sm, NULL, NULL, row2))
            return 0;
        if (!pointwise(b, &ops[n++], "op band gen_index col", CUDNN_POINTWISE_GEN_INDEX, F32, 3, sm, NULL, NULL, col2))
            return 0;
        if (!pointwise(b, &ops[n++], "op col+window", CUDNN_POINTWISE_ADD, F32, 3, col2, wlen, NULL, colw)) return 0;
        if (!pointwise(b, &ops[n++], "op col+window>row", CUDNN_POINTWISE_CMP_GT, BOOL, -1, colw, row2, NULL, keep2))
            return 0;
        if (!pointwise(b, &ops[n++], "op band select", CUDNN_POINTWISE_BINARY_SELECT, F32, -1, sm, neg_inf, keep2,
                       sm2))
            return 0;
        sm = sm2;  // the max, the exponentials and the sums read the band-masked scores
    }
    if (!reduction(b, &ops[n++], "op row max", CUDNN_REDUCE_TENSOR_MAX, sm, mx)) return 0;
    if (!pointwise(b, &ops[n++], "op sub max", CUDNN_POINTWISE_SUB, F32, -1, sm, mx, NULL, sub)) return 0;
    if (!pointwise(b, &ops[n++], "op exp", CUDNN_POINTWISE_EXP, F32, -1, sub, NULL, NULL, ex)) return 0;
    if (!reduction(b, &ops[n++], "op row sum", CUDNN_REDUCE_TENSOR_ADD, ex, sum)) return 0;
    if (!pointwise(b, &ops[n++], "op log", CUDNN_POINTWISE_LOG, F32, -1, sum, NULL, NULL, lg)) return 0;
    if (!pointwise(b, &ops[n++], "op stats=max+log", CUDNN_POINTWISE_ADD, F32, -1, mx, lg, NULL, stats)) return 0;
    if (!pointwise(b, &ops[n++], "op P=exp/sum", CUDNN_POINTWISE_DIV, F32, -1, ex, sum, NULL, p)) return 0;
    if (!matmul(b, &ops[n++], "op bmm2 O=P*V", p, v, o)) return 0;

    const char *what = "operation graph";
    if (!bnew(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph, what)) return 0;
    TRY(cudnnBackendSetAttribute(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle), what);
    TRY(cudnnBackendSetAttribute(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops),
        "operation graph: set OPS");
    TRY(cudnnBackendFinalize(*graph), "operation graph: finalize (cuDNN rejects the graph)");
    return 1;
}

// Engine global index of an engine config (debug output only; -1 if unknown).
static int64_t engine_index(Builder *b, cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t engine;
    int64_t cnt = 0, idx = -1;
    if (!bnew(b, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine, "engine index")) return -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &engine) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &idx) !=
            CUDNN_STATUS_SUCCESS)
        return -1;
    return idx;
}

// Heuristics in the given mode; the first config whose execution plan
// finalizes becomes *plan. 1 on success.
static int find_plan(Builder *b, cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode, const char *mode_name,
                     cudnnBackendDescriptor_t *plan, int64_t *engine) {
    char what[96];
    snprintf(what, sizeof what, "heuristics mode %s", mode_name);
    cudnnBackendDescriptor_t heur;
    if (!bnew(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur, what)) return 0;
    if (!setdesc(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, what)) return 0;
    if (!set1(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode, what)) return 0;
    TRY(cudnnBackendFinalize(heur), what);
    int64_t count = 0;
    TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
        what);
    debug("%s: %lld engine configs", what, (long long)count);
    if (count <= 0) {
        if (!b->why[0]) snprintf(b->why, sizeof b->why, "%s: no engine config for this graph", what);
        return 0;
    }
    cudnnBackendDescriptor_t *cfgs = (cudnnBackendDescriptor_t *)malloc(sizeof *cfgs * (size_t)count);
    if (!cfgs) abort();
    int ok = 1;
    for (int64_t i = 0; i < count && ok; i++) ok = bnew(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i], what);
    int64_t got = 0;
    if (ok)
        ok = bcheck(b,
                    cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                             &got, cfgs),
                    what);
    int found = 0;
    for (int64_t i = 0; ok && i < got && !found; i++) {
        char pwhat[128];
        snprintf(pwhat, sizeof pwhat, "execution plan (%s config %lld of %lld)", mode_name, (long long)i + 1,
                 (long long)got);
        cudnnBackendDescriptor_t pl;
        if (!bnew(b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &pl, pwhat)) break;
        if (!set1(b, pl, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle, pwhat)) break;
        if (!setdesc(b, pl, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i], pwhat)) break;
        // A config the engine cannot run fails here; try the next one.
        if (!bcheck(b, cudnnBackendFinalize(pl), pwhat)) continue;
        *plan = pl;
        *engine = debug_enabled() ? engine_index(b, cfgs[i]) : -1;
        found = 1;
    }
    free(cfgs);
    return found;
}

// ---- the plan table ----------------------------------------------------------------------

typedef struct {
    int T, Hq, Hkv, dh, W;  // W: 0 causal, else the sliding window (< T)
    int ok;                           // 1: plan ready; 0: cuDNN does not take the shape (why)
    char why[384];
    cudnnBackendDescriptor_t plan;
    int64_t workspace;                // bytes
    Builder b;                        // every descriptor behind plan
} SdpaPlan;

enum { MAX_PLANS = 32 };
static SdpaPlan plans[MAX_PLANS];
static int n_plans, next_evict;

static void build_plan(SdpaPlan *e) {
    Builder *b = &e->b;
    memset(b, 0, sizeof *b);
    e->ok = 0;
    e->why[0] = 0;
    e->plan = NULL;
    e->workspace = 0;
    debug("building T=%d Hq=%d Hkv=%d dh=%d W=%d", e->T, e->Hq, e->Hkv, e->dh, e->W);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (e->T < 1 || e->Hq < 1 || e->Hkv < 1 || e->dh < 1) {
        snprintf(e->why, sizeof e->why, "empty shape");
        return;
    }
    if (e->Hq % e->Hkv != 0) {
        snprintf(e->why, sizeof e->why, "Hq=%d is not a multiple of Hkv=%d", e->Hq, e->Hkv);
        return;
    }
    if (e->dh % 8 != 0) {
        snprintf(e->why, sizeof e->why, "dh=%d is not a multiple of 8", e->dh);
        return;
    }
    if (!get_handle()) {
        snprintf(e->why, sizeof e->why, "%s", handle_why);
        return;
    }
    cudnnBackendDescriptor_t graph, plan = NULL;
    int64_t engine = -1;
    int ok = build_graph(b, &graph, e->T, e->Hq, e->Hkv, e->dh, e->W);
    if (ok) {
        // Only the first failure is kept (bcheck), so when both modes fail the
        // reason is that of mode A's best-ranked config.
        ok = find_plan(b, graph, CUDNN_HEUR_MODE_A, "A", &plan, &engine) ||
             find_plan(b, graph, CUDNN_HEUR_MODE_FALLBACK, "FALLBACK", &plan, &engine);
    }
    if (ok) {
        int64_t cnt = 0;
        ok = bcheck(b,
                    cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                             &cnt, &e->workspace),
                    "execution plan: get WORKSPACE_SIZE");
    }
    if (!ok) {
        snprintf(e->why, sizeof e->why, "%s", b->why[0] ? b->why : "unknown cuDNN failure");
        builder_free(b);
        (void)cudaGetLastError();
        debug("not supported: %s", e->why);
        return;
    }
    e->ok = 1;
    e->plan = plan;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    debug("plan ready: engine %lld, workspace %lld bytes, %d descriptors, built in %.1f ms", (long long)engine,
          (long long)e->workspace, b->n, 1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec));
}

// The table entry for a shape, built on first use.
// W is already normalised (0 for causal and for W ≥ T).
static SdpaPlan *plan_for(int T, int Hq, int Hkv, int dh, int W) {
    for (int i = 0; i < n_plans; i++)
        if (plans[i].T == T && plans[i].Hq == Hq && plans[i].Hkv == Hkv && plans[i].dh == dh && plans[i].W == W)
            return &plans[i];
    SdpaPlan *e;
    if (n_plans < MAX_PLANS) {
        e = &plans[n_plans++];
    } else {  // full: replace the oldest, after any work that may use it has finished
        e = &plans[next_evict];
        next_evict = (next_evict + 1) % MAX_PLANS;
        CUDA_CHECK(cudaDeviceSynchronize());
        builder_free(&e->b);
    }
    e->T = T;
    e->Hq = Hq;
    e->Hkv = Hkv;
    e->dh = dh;
    e->W = W;
    build_plan(e);
    return e;
}

// ---- public API ----------------------------------------------------------------------------

// The window as the plans key it: 0 for causal and for any W ≥ T.
static int norm_window(int window, int T) { return window > 0 && window < T ? window : 0; }

// The plan length of a T-token pass (the comment at the top: "Lengths in buckets").
static int bucket_len(int T) {
    static long bucket = 0;  // read once: the plans already built are keyed by it
    if (!bucket) bucket = env_long("SPINDLE_SDPA_BUCKET", 1024, 1, 1L << 24);
    const long tb = (T + bucket - 1) / bucket * bucket;
    return tb > INT_MAX ? T : (int)tb;
}

extern "C" int sdpa_supported(int T, int Hq, int Hkv, int dh, int window, char *why, size_t len) {
    SdpaPlan *e = plan_for(bucket_len(T), Hq, Hkv, dh, norm_window(window, T));
    if (why && len) snprintf(why, len, "%s", e->ok ? "" : e->why);
    return e->ok;
}

// Device scratch that outlives calls: the plan's workspace, and the Stats
// output when the caller does not want lse. Grown on demand, never freed.
static void *grow(void **buf, size_t *size, size_t need) {
    if (need > *size) {
        if (*buf) CUDA_CHECK(cudaFree(*buf));  // cudaFree waits for the work still using it
        *buf = NULL;
        CUDA_CHECK(cudaMalloc(buf, need));
        *size = need;
    }
    return *buf;
}

// The fallback: fp32 copies of q, k, v, the fp32 kernel with the window, the
// output rounded to bf16. Scratch is allocated and freed here (stream-ordered).
static void sdpa_fallback(void *out, float *lse, const void *q, const void *k, const void *v, int T, int Hq,
                          int Hkv, int dh, float scale, int W) {
    const int64_t nq = (int64_t)T * Hq * dh, nkv = (int64_t)T * Hkv * dh;
    float *q32 = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    float *k32 = (float *)cuda_malloc(sizeof(float) * (size_t)nkv);
    float *v32 = (float *)cuda_malloc(sizeof(float) * (size_t)nkv);
    float *o32 = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    cuda_bf16_to_f32(q32, q, nq);
    cuda_bf16_to_f32(k32, k, nkv);
    cuda_bf16_to_f32(v32, v, nkv);
    attention_forward_cuda(o32, lse, q32, k32, v32, T, Hq, Hkv, dh, scale, W);
    cuda_f32_to_bf16(out, o32, nq);
    cuda_free(q32), cuda_free(k32), cuda_free(v32), cuda_free(o32);
}

extern "C" void attention_forward_bf16_cuda(void *out, float *lse, const void *q, const void *k, const void *v,
                                            int T, int Hq, int Hkv, int dh, float scale, int window) {
    static void *workspace, *lse_scratch;
    static size_t workspace_size, lse_scratch_size;
    if (T <= 0) return;
    const int W = norm_window(window, T), Tb = bucket_len(T);  // W < T ≤ Tb: the same band at Tb
    snprintf(exec_shape, sizeof exec_shape, "sdpa T=%d (plan %d) Hq=%d Hkv=%d dh=%d W=%d", T, Tb, Hq, Hkv, dh, W);
    SdpaPlan *e = plan_for(Tb, Hq, Hkv, dh, W);
    if (!e->ok) {  // cuDNN does not take it: the fp32 kernel does (it aborts on shapes nothing takes)
        debug("fallback to the fp32 kernel for %s: %s", exec_shape, e->why);
        sdpa_fallback(out, lse, q, k, v, T, Hq, Hkv, dh, scale, W);
        return;
    }
    void *ws = e->workspace > 0 ? grow(&workspace, &workspace_size, (size_t)e->workspace) : NULL;
    // Padded to the plan's Tb rows (stream-ordered scratch), or in place.
    const size_t rq = (size_t)Hq * dh * 2, rkv = (size_t)Hkv * dh * 2, pad = (size_t)(Tb - T);
    void *qp = (void *)q, *kp = (void *)k, *vp = (void *)v, *op = out, *pad_buf = NULL;
    float *lse_p = lse;
    if (Tb != T) {
        char *b = (char *)cuda_malloc((size_t)Tb * (2 * rq + 2 * rkv) + (lse ? sizeof(float) * (size_t)Hq * Tb : 0));
        pad_buf = b;
        qp = b, kp = b + (size_t)Tb * rq, vp = b + (size_t)Tb * (rq + rkv), op = b + (size_t)Tb * (rq + 2 * rkv);
        if (lse) lse_p = (float *)(b + (size_t)Tb * (2 * rq + 2 * rkv));
        const void *src[3] = {q, k, v};
        void *dst[3] = {qp, kp, vp};
        const size_t row[3] = {rq, rkv, rkv};
        for (int i = 0; i < 3; i++) {
            CUDA_CHECK(cudaMemcpyAsync(dst[i], src[i], (size_t)T * row[i], cudaMemcpyDeviceToDevice, 0));
            CUDA_CHECK(cudaMemsetAsync((char *)dst[i] + (size_t)T * row[i], 0, pad * row[i], 0));
        }
    }
    float *stats = lse_p ? lse_p : (float *)grow(&lse_scratch, &lse_scratch_size, sizeof(float) * (size_t)Hq * Tb);

    // By-value scalars: read from host memory during cudnnBackendExecute.
    float scale_value = scale, neg_inf = -INFINITY, window_value = (float)W;  // W < T ≤ 2^24: exact in fp32
    int64_t uids[N_IO] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_WINDOW};
    void *ptrs[N_IO] = {qp, kp, vp, op, stats, &scale_value, &neg_inf, &window_value};
    const int64_t n_io = W > 0 ? N_IO : N_IO - 1;
    cudnnBackendDescriptor_t pack;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n_io, uids));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n_io, ptrs));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CUDNN_CHECK(cudnnBackendFinalize(pack));
    CUDNN_CHECK(cudnnBackendExecute(handle, e->plan, pack));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(pack));
    CUDA_CHECK(cudaGetLastError());
    if (pad_buf) {  // the first T rows out: O [T, Hq·dh], Stats [Hq, T] from [Hq, Tb]
        CUDA_CHECK(cudaMemcpyAsync(out, op, (size_t)T * rq, cudaMemcpyDeviceToDevice, 0));
        if (lse)
            CUDA_CHECK(cudaMemcpy2DAsync(lse, sizeof(float) * (size_t)T, lse_p, sizeof(float) * (size_t)Tb,
                                         sizeof(float) * (size_t)T, (size_t)Hq, cudaMemcpyDeviceToDevice, 0));
        cuda_free(pad_buf);
    }
}
