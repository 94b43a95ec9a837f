// emu_indexer.cpp: the indexer's CUDA twin (kernels/cuda/indexer.cu: the fused
// distillation loss and its gradients through the projections, the block
// objectives, the mass recall, the per-query and block-shared selection) run on
// host threads (tests/emu/cuda_runtime.h, cuBLAS as OpenBLAS: tests/emu/cublas_v2.h)
// against its CPU twin (kernels/cpu/indexer_cpu.c) on the same inputs, with
// the twin test's tolerances: the loss relative 1e-4, every gradient within
// 1e-3 of the largest, recall 1e-4, the selections set for set (the twin's
// fp32 scores; ties at the k-th value may swap). Shapes: one and several query
// tiles (32 rows), key tiles and key chunks (256 keys), sparse query sets (query_frac), d_I 16 / 64
// (scores on tensor cores, 3xTF32) and 12 (fp32 FMAs) with partial RoPE and both key norms, head
// sizes 16 and 64 (the bf16 teacher on mma.sync at 64), GQA groups 1 and 2; the gradients in query
// chunks of one tile (SPINDLE_KL_ROWS=32) and the block objectives' in chunks of whole blocks
// (and of one block, fewer rows than it holds), and the same bits on a second run. The loss's
// tolerances would let a tf32 product with one correction term missing through, so the score tile
// that every pass shares (tile_scores) is also checked alone against dot products in double, at
// fp32 accuracy.
// Indexing, masks, barriers and the algebra of the kernels and their host code
// without a GPU; nothing about speed, and the TF32 GEMM is fp32 here.
// Build and run: scripts/emulate-cuda.sh indexer [--quick].
#include <cstdio>

#include "cublas_v2.h"
#include "indexer.cu"
#include "indexer_block_tc.cu"
#include "indexer_block_wg.cu"
#include "indexer_refine.cu"
#include "indexer_select_fused.cu"
#include "ops_cuda.h"
#include "topk.cu"

#include "emu_harness.h"

cublasHandle_t cuda_cublas_handle(void) { return nullptr; }
extern "C" {
#include "indexer_ops.h"
void cuda_f32_to_bf16(void *dst, const float *src, int64_t n) { cuda_f32_to_half(dst, src, n, HALF_BF16); }
// out[T, C_out] = in[T, C_in]·wᵀ + bias (cuBLAS's row-major GEMM in the twin).
void matmul_forward_cuda(float *out, const float *in, const float *w, const float *bias, int T, int C_in, int C_out) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, C_out, C_in, 1.0f, in, C_in, w, C_in, 0.0f, out, C_out);
    if (bias)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C_out; c++) out[(size_t)t * C_out + c] += bias[c];
}
}

// A teacher for T positions: q, k random (bf16-representable, so the bf16 teacher sees the same values),
// lse_{h,t} = log Σ_{j≤t} exp(s·q_{h,t}·k_{h/G,j}) in double.
struct Teacher {
    std::vector<float> q, k, lse;
};
static Teacher teacher(int T, int Hq, int Hkv, int dh, float s) {
    Teacher te{fill((int64_t)T * Hq * dh, -1, 1), fill((int64_t)T * Hkv * dh, -1, 1), std::vector<float>((size_t)Hq * T)};
    for (auto *v : {&te.q, &te.k})
        for (auto &e : *v) e = bf16r(e);
    const int G = Hq / Hkv;
    for (int h = 0; h < Hq; h++)
        for (int t = 0; t < T; t++) {
            double m = -1e300, sum = 0;
            std::vector<double> z((size_t)t + 1);
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int c = 0; c < dh; c++) d += (double)te.q[((size_t)t * Hq + h) * dh + c] * te.k[((size_t)j * Hkv + h / G) * dh + c];
                z[j] = s * d, m = std::max(m, z[j]);
            }
            for (int j = 0; j <= t; j++) sum += exp(z[j] - m);
            te.lse[(size_t)h * T + t] = (float)(m + log(sum));
        }
    return te;
}

// max |a − b| / max |b| over the whole gradient buffer.
static void check_loss(int T, int dm, int dI, int drope, IndexerNorm norm, int Hq, int Hkv, int dh, double frac, int bf16,
                       IndexerObjectiveKind kind) {
    IndexerConfig cfg = indexer_config_default(dm);
    cfg.d_index = dI, cfg.d_rope = drope, cfg.key_norm = norm;
    const int64_t np = indexer_n_params(&cfg);
    std::vector<float> params((size_t)np);
    indexer_init(&cfg, params.data(), 7 + T);
    for (auto &p : params) p += 0.05f * (urand() - 0.5f);  // norms away from exactly 1 / 0
    auto x = fill((int64_t)T * dm, -1, 1);
    const float s = 1.0f / sqrtf((float)dh);
    Teacher te = teacher(T, Hq, Hkv, dh, s);
    std::vector<int> qs;
    for (int t = 0; t < T; t++)
        if (t == T - 1 || urand() < frac) qs.push_back(t);
    const int nq = (int)qs.size();
    IndexerObjective obj = indexer_objective_default();
    obj.kind = kind, obj.bsel = 16, obj.block_weight = 0.5;
    std::vector<float> g_cpu((size_t)np, 0.0f);
    double parts_cpu[2], parts_gpu[2];
    const double l_cpu = indexer_objective_loss_cpu(g_cpu.data(), parts_cpu, &cfg, &obj, params.data(), x.data(), te.q.data(),
                                                    te.k.data(), te.lse.data(), T, Hq, Hkv, dh, s, qs.data(), nq);
    float *d_params = (float *)cuda_malloc(sizeof(float) * np), *d_x = (float *)cuda_malloc(sizeof(float) * x.size());
    float *d_tq = (float *)cuda_malloc(sizeof(float) * te.q.size()), *d_tk = (float *)cuda_malloc(sizeof(float) * te.k.size());
    float *d_lse = (float *)cuda_malloc(sizeof(float) * te.lse.size()), *d_g = (float *)cuda_malloc(sizeof(float) * np);
    int32_t *d_q = (int32_t *)cuda_malloc(sizeof(int32_t) * nq);
    memcpy(d_params, params.data(), sizeof(float) * np), memcpy(d_x, x.data(), sizeof(float) * x.size());
    memcpy(d_tq, te.q.data(), sizeof(float) * te.q.size()), memcpy(d_tk, te.k.data(), sizeof(float) * te.k.size());
    memcpy(d_lse, te.lse.data(), sizeof(float) * te.lse.size()), memcpy(d_q, qs.data(), sizeof(int32_t) * nq);
    memset(d_g, 0, sizeof(float) * np);
    const double l_gpu = kind == INDEXER_OBJ_QUERY
                             ? indexer_kl_loss_cuda(d_g, &cfg, d_params, d_x, d_tq, d_tk, d_lse, T, Hq, Hkv, dh, s, d_q, nq, bf16)
                             : indexer_objective_loss_cuda(d_g, parts_gpu, &cfg, &obj, d_params, d_x, d_tq, d_tk, d_lse, T,
                                                           Hq, Hkv, dh, s, d_q, nq, bf16);
    char what[200];
    snprintf(what, sizeof what, "%s loss T %d nq %d d_I %d rope %d %s Hq %d Hkv %d dh %d%s",
             kind == INDEXER_OBJ_QUERY ? "kl" : kind == INDEXER_OBJ_BLOCK ? "block" : "mix", T, nq, dI, drope,
             norm == INDEXER_NORM_LAYER ? "layer" : norm == INDEXER_NORM_RMS ? "rms" : "none", Hq, Hkv, dh, bf16 ? " bf16 teacher" : "");
    expect(what, fabs(l_gpu - l_cpu) / std::max(fabs(l_cpu), 1e-12), 1e-4);
    snprintf(what + strlen(what), sizeof what - strlen(what), ": gradients");
    expect(what, rel_err(d_g, g_cpu.data(), np), 1e-3);
    {  // loss and gradients are the same bits on a second run (no float atomics in any objective)
        float *d_g2 = (float *)cuda_malloc(sizeof(float) * np);
        memset(d_g2, 0, sizeof(float) * np);
        double parts2[2] = {0, 0};
        const double l2 = kind == INDEXER_OBJ_QUERY
                              ? indexer_kl_loss_cuda(d_g2, &cfg, d_params, d_x, d_tq, d_tk, d_lse, T, Hq, Hkv, dh, s, d_q, nq, bf16)
                              : indexer_objective_loss_cuda(d_g2, parts2, &cfg, &obj, d_params, d_x, d_tq, d_tk, d_lse, T,
                                                            Hq, Hkv, dh, s, d_q, nq, bf16);
        const bool same = l2 == l_gpu && !memcmp(d_g2, d_g, sizeof(float) * np) &&
                          (kind == INDEXER_OBJ_QUERY || !memcmp(parts2, parts_gpu, sizeof parts2));
        snprintf(what + strlen(what), sizeof what - strlen(what), ", again: the same bits");
        expect(what, same ? 0 : 1, 0);
        cuda_free(d_g2);
    }
    if (kind == INDEXER_OBJ_QUERY && !bf16) {  // the recall of the same indexer, k = 8
        std::vector<float> r_cpu((size_t)nq);
        const double m_cpu = indexer_mass_recall_cpu(r_cpu.data(), &cfg, params.data(), x.data(), te.q.data(), te.k.data(),
                                                     te.lse.data(), T, Hq, Hkv, dh, s, qs.data(), nq, 8);
        float *d_r = (float *)cuda_malloc(sizeof(float) * nq);
        indexer_mass_recall_cuda(d_r, &cfg, d_params, d_x, d_tq, d_tk, d_lse, T, Hq, Hkv, dh, s, d_q, nq, 8);
        snprintf(what, sizeof what, "mass recall k 8 T %d nq %d d_I %d (mean %.4f)", T, nq, dI, m_cpu);
        expect(what, rel_err(d_r, r_cpu.data(), nq), 1e-4);
        cuda_free(d_r);
    }
    for (void *p : {(void *)d_params, (void *)d_x, (void *)d_tq, (void *)d_tk, (void *)d_lse, (void *)d_g, (void *)d_q}) cuda_free(p);
}

// One tile of scores through tile_scores (staged as every loss pass stages it): out[i·BK + j] for
// query row i, key row j.
__global__ void tile_scores_probe_kernel(float *out, const float *qr, const float *kr, int nr, int nk, int dI,
                                         float c_col) {
    DYNAMIC_SMEM(smem);
    float *Qs = smem, *Ks = Qs + ix_tile_floats(dI), *Ss = Ks + ix_tile_floats(dI);
    const int i = threadIdx.x / 8, l = threadIdx.x % 8;
    stage_ix_rows(Qs, qr, 0, nr, dI);
    stage_ix_rows(Ks, kr, 0, nk, dI);
    __syncthreads();
    float s[KPT];
    tile_scores(s, Ss, Qs, Ks, i, l, dI, c_col);
    for (int m = 0; m < KPT; m++) out[i * BK + l + 8 * m] = s[m];
}

// tile_scores against c_col·q·k in double for random fp32 q, k (not tf32 values: the low parts count),
// nr < BQ query rows and nk < BK keys (the zero rows must stay 0): max |s − ref| / (c_col·Σ_c |q_c·k_c|)
// within 2e-6, the size of fp32 rounding (3xTF32 drops terms near 2^-21 relative; tf32 alone, or one
// correction term missing, errs near 2^-12).
static void check_tile_scores(int dI) {
    const int nr = BQ - 3, nk = BK - 5, rf = ix_row_floats(dI);
    const float c_col = 1.0f / sqrtf((float)dI);
    auto q = fill((int64_t)BQ * dI, -1, 1), k = fill((int64_t)BK * dI, -1, 1);
    float *d_q = (float *)cuda_malloc(sizeof(float) * BQ * dI), *d_k = (float *)cuda_malloc(sizeof(float) * BK * dI);
    float *d_qr = (float *)cuda_malloc(sizeof(float) * BQ * rf), *d_kr = (float *)cuda_malloc(sizeof(float) * BK * rf);
    float *d_s = (float *)cuda_malloc(sizeof(float) * BQ * BK);
    memcpy(d_q, q.data(), sizeof(float) * BQ * dI), memcpy(d_k, k.data(), sizeof(float) * BK * dI);
    if (ix_tc(dI)) tf32_split_rows(d_qr, d_q, BQ, dI), tf32_split_rows(d_kr, d_k, BK, dI);
    else memcpy(d_qr, d_q, sizeof(float) * BQ * dI), memcpy(d_kr, d_k, sizeof(float) * BK * dI);
    launch_checked(tile_scores_probe_kernel, 1, NT, lse_smem(dI), d_s, d_qr, d_kr, nr, nk, dI, c_col);
    double err = 0;
    for (int i = 0; i < BQ; i++)
        for (int j = 0; j < BK; j++) {
            double dot = 0, mag = 0;
            for (int c = 0; i < nr && j < nk && c < dI; c++) {
                dot += (double)q[(size_t)i * dI + c] * k[(size_t)j * dI + c];
                mag += fabs((double)q[(size_t)i * dI + c] * k[(size_t)j * dI + c]);
            }
            const double e = fabs(d_s[i * BK + j] - c_col * dot) / (mag > 0 ? c_col * mag : 1.0);
            if (!(e <= err)) err = e;  // NaN too
        }
    char what[120];
    snprintf(what, sizeof what, "tile scores d_I %d (%s)", dI, ix_tc(dI) ? "tensor cores, 3xTF32" : "fp32 FMAs");
    expect(what, err, 2e-6);
    cuda_free(d_q), cuda_free(d_k), cuda_free(d_qr), cuda_free(d_kr), cuda_free(d_s);
}

// tf32_rna (cvt.rna.tf32.f32; emulated, tests/emu/emu_mma.h) on values at and beside a tie: to nearest,
// ties away from zero, 10 mantissa bits, the low 13 bits zero.
static void check_tf32_rna() {
    const float u = ldexpf(1.0f, -10), h = ldexpf(1.0f, -11), e = ldexpf(1.0f, -23);  // ulp, half, fp32 ulp
    const float in[] = {1 + h, -(1 + h), 1 + h - e, 1 + u + h, 1 + u + h - e, 3 + 3 * h, 0.0f};
    const float want[] = {1 + u, -(1 + u), 1, 1 + 2 * u, 1 + u, 3 + 4 * h, 0.0f};
    int bad = 0;
    for (int i = 0; i < 7; i++) bad += tf32_rna(in[i]) != want[i];
    expect("tf32_rna: ties away from zero, 10 mantissa bits", bad, 0);
}

// indexer_select_cuda (fp32 scores) against indexer_select_cpu: rows equal as sets.
static void check_select(int T, int dm, int dI, int k, int bsel) {
    IndexerConfig cfg = indexer_config_default(dm);
    cfg.d_index = dI, cfg.d_rope = dI / 2;
    const int64_t np = indexer_n_params(&cfg);
    std::vector<float> params((size_t)np);
    indexer_init(&cfg, params.data(), 99 + T);
    auto x = fill((int64_t)T * dm, -1, 1);
    const int rows = (T + bsel - 1) / bsel;
    std::vector<int> sel((size_t)rows * k), n_sel((size_t)rows);
    indexer_select_cpu(sel.data(), n_sel.data(), &cfg, params.data(), x.data(), T, k, bsel);
    float *d_params = (float *)cuda_malloc(sizeof(float) * np), *d_x = (float *)cuda_malloc(sizeof(float) * x.size());
    memcpy(d_params, params.data(), sizeof(float) * np), memcpy(d_x, x.data(), sizeof(float) * x.size());
    int32_t *d_sel = (int32_t *)cuda_malloc(sizeof(int32_t) * sel.size()), *d_n = (int32_t *)cuda_malloc(sizeof(int32_t) * rows);
    indexer_select_cuda(d_sel, d_n, &cfg, d_params, d_x, T, k, bsel, IX_SCORES_FP32);
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        bool ok = d_n[r] == n_sel[r];
        for (int i = 0; ok && i < k; i++) ok = d_sel[(size_t)r * k + i] == sel[(size_t)r * k + i];
        bad += !ok;
    }
    char what[160];
    snprintf(what, sizeof what, "select T %d d_I %d k %d bsel %d: %d of %d rows differ", T, dI, k, bsel, bad, rows);
    expect(what, bad, 0);
    cuda_free(d_params), cuda_free(d_x), cuda_free(d_sel), cuda_free(d_n);
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_indexer");
    openblas_set_num_threads(1);
    // The loss: one query tile and one key tile; several of each (nq > 32, T > 32); a sparse query set.
    check_loss(20, 24, 16, 8, INDEXER_NORM_LAYER, 4, 2, 16, 1.0, 0, INDEXER_OBJ_QUERY);
    check_loss(80, 32, 16, 8, INDEXER_NORM_RMS, 2, 2, 16, 1.0, 0, INDEXER_OBJ_QUERY);
    check_loss(96, 32, 64, 32, INDEXER_NORM_LAYER, 4, 2, 64, 0.4, 1, INDEXER_OBJ_QUERY);  // bf16 teacher, mma.sync
    // The bf16 teacher's 64-key super-tiles at d_h 128: two key chunks, a last super-tile of one partial
    // key tile (300 = 4·64 + 44), the block objective's column sums.
    check_loss(300, 16, 16, 8, INDEXER_NORM_LAYER, 4, 2, 128, 0.2, 1, INDEXER_OBJ_BLOCK);
    check_loss(64, 24, 16, 0, INDEXER_NORM_NONE, 2, 1, 16, 0.6, 0, INDEXER_OBJ_BLOCK);
    check_loss(72, 24, 16, 8, INDEXER_NORM_LAYER, 2, 2, 16, 0.7, 0, INDEXER_OBJ_MIX);
    check_loss(300, 16, 16, 8, INDEXER_NORM_LAYER, 2, 1, 16, 0.15, 0, INDEXER_OBJ_QUERY);  // two key chunks (256 keys)
    setenv("SPINDLE_KL_ROWS", "32", 1);  // query chunks of one tile: G and its GEMMs chunk by chunk
    check_loss(130, 24, 16, 8, INDEXER_NORM_RMS, 4, 2, 16, 0.8, 0, INDEXER_OBJ_QUERY);
    // The block objectives in chunks of whole blocks (16 queries: two blocks a chunk), with two key chunks;
    // then chunks of 8 rows, fewer than a block holds (one block a chunk).
    check_loss(300, 16, 16, 8, INDEXER_NORM_LAYER, 2, 1, 16, 0.2, 0, INDEXER_OBJ_BLOCK);
    setenv("SPINDLE_KL_ROWS", "8", 1);
    check_loss(72, 24, 16, 8, INDEXER_NORM_RMS, 2, 2, 16, 0.9, 0, INDEXER_OBJ_MIX);
    unsetenv("SPINDLE_KL_ROWS");
    check_select(70, 24, 16, 8, 1);
    check_select(70, 24, 16, 8, 16);
    if (!quick) {
        check_loss(150, 32, 64, 32, INDEXER_NORM_LAYER, 4, 2, 16, 0.3, 0, INDEXER_OBJ_QUERY);
        check_loss(130, 32, 64, 32, INDEXER_NORM_RMS, 4, 4, 64, 1.0, 1, INDEXER_OBJ_QUERY);
        check_loss(140, 24, 16, 8, INDEXER_NORM_LAYER, 4, 2, 16, 0.5, 0, INDEXER_OBJ_MIX);
        check_select(200, 32, 64, 20, 1);
        check_select(200, 32, 64, 20, 64);
    }
    // The score tile every loss pass shares: tensor cores at d_I 8 (one k-step), 24 (odd k-steps), 64,
    // 256 (MAX_DI); fp32 FMAs at 12. Then the loss at d_I 12 (fp32 scores) and 24 (three k-steps).
    check_tf32_rna();
    for (int dI : {8, 24, 64, 256, 12}) check_tile_scores(dI);
    check_loss(70, 24, 12, 4, INDEXER_NORM_RMS, 2, 1, 16, 0.7, 0, INDEXER_OBJ_MIX);
    if (!quick) {
        check_loss(110, 24, 24, 8, INDEXER_NORM_LAYER, 2, 2, 16, 0.6, 0, INDEXER_OBJ_MIX);
        check_loss(90, 24, 12, 4, INDEXER_NORM_LAYER, 2, 1, 64, 0.8, 1, INDEXER_OBJ_QUERY);  // bf16 teacher
        setenv("SPINDLE_KL_ROWS", "32", 1);  // the bf16 teacher at d_h 256, G chunk by chunk
        check_loss(100, 24, 16, 8, INDEXER_NORM_RMS, 2, 2, 256, 0.9, 1, INDEXER_OBJ_MIX);
        unsetenv("SPINDLE_KL_ROWS");
    }
    printf("emu_indexer: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
