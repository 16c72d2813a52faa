/* backend/cuda/backend_cuda.cu: the CUDA implementation of mx_backend_i (mlxcel/backend.h):
 * device memory, weight upload, paged KV cache (bf16, or f32 with MLXCEL_CUDA_KV=f32), every op
 * as CUDA kernels on one stream, and CUDA graphs of repeated steps (step_begin/step_end in
 * mlxcel/backend_cuda.h). Matrix-vector products for decode (n <= 8 rows) are our own kernels
 * reading the packed weights once for all rows (bf16/f16/f32 dense, MLX affine q4/q8 fast, other
 * bit widths generic); larger batches dequantize slices of rows into a bf16 scratch buffer and
 * use cuBLAS tensor-core GEMM. It is not the model (models/), the sampler or the scheduler.
 * Measurements and what to speed up next: NOTES.md beside this file.
 *
 * Errors: ops return void; the first failure is kept in the context (mx_backend_cuda_status). */
#include <cuda_runtime.h>
#include <cudaTypedefs.h>   /* cuTensorMapEncodeTiled's type (taken through the runtime: no -lcuda) */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "mlxcel/backend.h"
#include "mlxcel/backend_cuda.h"
}
#include "backend/cuda/topk.h"

#ifndef MX_CUDA_ARCHS
#define MX_CUDA_ARCHS "sm_90a + PTX compute_90"
#endif

/* ------------------------------------------------------------------------------------------ */
/* context                                                                                     */

struct cu_stage {          /* host ints/floats copied to the device, reused while unchanged */
    void *h, *d;           /* pinned host copy of what was last uploaded; device copy */
    size_t cap, len;       /* bytes */
    cudaEvent_t ev;        /* recorded after the last upload from h */
    uint64_t stamp;        /* graph step that last used it */
};

/* CUDA graphs of repeated steps (mx_backend_cuda_step_begin/end): per key, the first step runs
 * eagerly and records a fingerprint of its op sequence, the second is captured into a graph,
 * later ones replay it (the ops then only refresh their host inputs in the pinned buffers that
 * the graph's copy nodes read). */
enum { G_EAGER = 0, G_WARMUP, G_CAPTURE, G_REPLAY };
#define MX_GRAPHS 32
struct cu_graph {
    uint64_t key;
    bool used, bad;
    cudaGraphExec_t exec;
    uint64_t *fp; int n_fp, cap_fp;
    uint64_t last_use;
    /* step_replay (c_step_replay): walked steps (captured or replayed) of this key whose host
     * inputs were exactly those step_replay was given; one that was not; the stages it reads */
    int fast_seen;
    bool fast_no;
    unsigned fast_stages;   /* FS_META | FS_IDS | FS_ROWS */
    size_t fast_len[3];     /* their bytes, as the graph's copy nodes copy them */
};
enum { FS_META = 1, FS_IDS = 2, FS_ROWS = 4 };

enum { SDT_BF16 = 0, SDT_F16 = 1 };

struct cu_weight {         /* what weight_prepare puts behind mx_weight.dev */
    int64_t rows, cols;
    int bits, gs;          /* bits 0: dense */
    mx_dtype dtype;        /* dense: F32/F16/BF16 */
    int sdt;               /* quantized: scale/bias storage SDT_* */
    void *w, *scales, *biases;
    float *bias;           /* [rows] or NULL */
    unsigned char tmw[2][128];   /* k_gemm_wg's TMA form: W's tensor maps (CUtensorMap), boxes of 8 words x 128 | 256
                                  * rows (2 | 4 warpgroups); has_tmw: made */
    bool has_tmw;
    uint32_t *sbp;         /* q4 where k_gemm_wg runs: (scale, bias) pairs [cols / gs][rows rounded up to 4] (a warp's
                            * 8 rows of a group in one 32-byte sector), else NULL */
};

#define MX_RF_CACHE 16   /* RoPE inv_freq tables kept on the device (never evicted) */
struct cu_rf { float *h, *d; int len; };
#define MX_SK_CACHE 512  /* attention sink tables kept on the device (never evicted) */
#define PROF_N 2048
#define PROF_LABELS 64
struct cu_prof {
    cudaEvent_t ev[PROF_N];
    const char *what[PROF_N];
    int n;
    const char *label[PROF_LABELS];
    double ms[PROF_LABELS];
    long count[PROF_LABELS];
    int nl;
    /* decode_layers (fd_args.prof): cycles summed over the blocks and launches, the largest
     * block's, launches, blocks */
    double fdsum[16], fdmax[16]; long fdlaunch; int fdgrid;   /* (FD_NPROF counters: checked where it is defined) */
};

struct gq_set {   /* blocks [blk0[k], blk0[k + 1]) along x do weight k; rb[k]: rows of the weights before k */
    const uint32_t *W[4];
    const void *S[4], *B[4];
    const uint32_t *SB[4];   /* k_gemm_wg: cu_weight.sbp */
    const float *bias[4];
    float *y[4];
    int rows[4], blk0[5], rb[5], nw;
    int rot;                 /* k_gemm_wg: block b starts its k loop at step b mod steps (MLXCEL_CUDA_GEMM_ROT) */
    unsigned *strk;          /* k_gemm_wg: stream-K's counters, one a tile (null: not stream-K; see there) */
    int act;                 /* k_gemm_wg<.., PAIR>: y[0] = act(gate) * up (an mx_act) */
    __nv_bfloat16 *xg;       /*   and that in gq order for the next GEMM (null: not) */
};

struct cu_fd;
#define APF_R 12   /* address ranges of the L2 prefetch across the attention (l2pf_args) */
struct cu_ctx {
    int dev;
    cudaDeviceProp prop;
    cudaStream_t st;
    cublasHandle_t blas;
    mx_status err;
    mx_kv_desc kv;
    void *kpool, *vpool;   /* [n_layers][n_blocks*block_size][n_kv_heads*head_dim] (kv_lay 0), or
                              [n_blocks][n_layers][block_size][n_kv_heads*head_dim] (kv_lay 1) */
    int kv_lay;            /* the pools' layout (MLXCEL_CUDA_KV_LAYOUT, read by kv_init): 1, a block's
                              rows of every layer side by side, so the attention of every layer
                              reads the same pages; 0, a layer's rows together. The kernels see
                              kv_lay 1 as layer 0's pool at block ids b * n_layers, each layer's
                              pool one block further: the block tables and slots are mapped on
                              upload (kv_blk, kv_slot) and nothing else changes. */
    cu_stage meta, ids, rows, tiles;
    bool attn_tiled;                       /* k_attn_tiled for prompts (MLXCEL_CUDA_ATTN=pertoken: off) */
    int attn_gqa;                          /* decode attention: a block per KV head's query heads when
                                              there are many blocks (1, default), never (0:
                                              MLXCEL_CUDA_ATTN_GQA=0), always (2: tests) */
    bool attn_vec;                         /* decode attention through k_attn_vec where it applies
                                              (MLXCEL_CUDA_ATTN_DEC=lanes: k_attn) */
    int attn_prep;                         /* batch-1 decode: the q/k preparation inside k_attn_vec
                                              (MLXCEL_CUDA_ATTN_PREP): 0 never (k_qk_prep before it),
                                              1 after a dense bf16 product (last_bf16) or where the
                                              heads have no norm (Llama-8B q4 +1.0%, thirtieth
                                              session), 2 always */
    bool last_bf16;                        /* the last product's weights were dense bf16 */
    unsigned *att_cnt;                     /* its per-KV-head block counters, ATT_CNT_MAX (zero between launches) */
    int n_attn_prep;                       /* attentions that did the preparation (tests) */
    int attn_early;                        /* one-token decode: k_attn_vec reads the block table and
                                              its first chunk of cached K/V before its PDL wait
                                              (MLXCEL_CUDA_ATTN_EARLY, on by default: +1.6-3.7%
                                              at batch 1 as the session that made it the
                                              default measured it; its log was lost, NOTES.md) */
    int n_attn_early;                      /* attentions that did (tests) */
    int asp_split, asp_min;                /* k_attn_vec's split of long contexts (asp_args): the most
                                              runs a head (MLXCEL_CUDA_ATT_SPLIT; 0 auto, 1 off) and
                                              the fewest positions a run (MLXCEL_CUDA_ATT_SPLIT_MIN) */
    float *asp_acc; float2 *asp_ml;        /* its scratch (ASP_ENT entries) */
    unsigned *asp_cnt;                     /* its counters (ASP_CNT, zero between launches) */
    int n_attn_split;                      /* attentions that split (tests) */
    int fast_replay;                       /* step_replay launches a key's graph without the walk of its
                                              ops (MLXCEL_CUDA_FAST_REPLAY, on by default since
                                              the twenty-second session: Qwen3-0.6B q4 batch 1
                                              +9-10%, NOTES.md; =0 walks every step) */
    int n_fast_replays;                    /* its launches (tests) */
    struct {                               /* greedy steps chained on the device (top1_launch,
                                              top1_wait, step_chain; MLXCEL_CUDA_CHAIN, on by
                                              default: NOTES.md) */
        int on;
        void *h[2]; size_t cap[2];         /* the result slots: pinned, written by the top-1 */
        cudaEvent_t ev[2];                 /* recorded after each slot's top-1 */
        int last_slot, last_rows, vocab;   /* the last top1_launch (-1: none since a chained step) */
        bool live;                         /* a chained step's writes into the stages may be in
                                              flight: the host reads them only after a sync */
        long steps;                        /* steps chained (tests) */
    } ch;
    const mx_step_inputs *sr_in;           /* the inputs step_replay was given for the step being walked */
    uint64_t sr_key;                       /* (its key) */
    int mv_dense_short;                    /* one-row dense bf16 matvecs of up to 4,096 columns in
                                              k_mv_dense_sk's U = 2 form (MLXCEL_CUDA_MV_DENSE_SHORT) */
    int n_dense_short;                     /* its launches (tests) */
    int64_t apf_cap;                       /* one-token decode: bytes of the next product's weights that
                                              extra blocks of the attention prefetch into L2
                                              (MLXCEL_CUDA_ATTN_L2PF, MiB; 0: off; apf_args) */
    int apf_layer;                         /* the layer of the last one-token attention until a product
                                              follows it (-1: none) */
    struct cu_apf { const void *p[APF_R]; int64_t n[APF_R]; int nr; } *apf;   /* per layer (apf_nl, set
                                              by kv_init): what the product after its attention read */
    int apf_nl;
    int n_apf;                             /* attentions that prefetched (tests) */
    int64_t apf_bytes;                     /* bytes the last of them asked for (tests) */
    bool attn_mma;                         /* k_attn_mma where it applies (MLXCEL_CUDA_ATTN=tiled|pertoken: off) */
    int gemm_mode;                         /* q4 above the matvecs (MLXCEL_CUDA_GEMM): GM_AUTO, GM_CUBLAS
                                              (dequantize + cuBLAS), GM_MMA (k_gemm_gq up to
                                              GQ_NMAX rows); see gq_rows */
    bool pdl;                              /* programmatic dependent launch (MLXCEL_CUDA_PDL=0: off) */
    int pdl_early;                         /* c_pdl_early in decode (see pdl_entry): MLXCEL_CUDA_PDL=2 (default)
                                              1, =3 2 (every kernel releases at entry), else 0 */
    int pdl_dev;                           /* the value c_pdl_early has on the device (-1: unknown) */
    int *pdl_host;                         /* pinned {0, 1, 2}: the sources of its copies (graph-capturable) */
    size_t dq_bytes;                       /* bf16 weight slice for cuBLAS (MLXCEL_CUDA_DQ_MB; default 256:
                                              slices that stay in L2 made the GEMMs slower, NOTES.md) */
    bool prof_on;                          /* MLXCEL_CUDA_PROFILE=1 */
    int graph_mode;                        /* decode steps as graphs: 0 never, 1 always (the default
                                            * since FAST_REPLAY took the walk out of a replay), 2 (auto)
                                            * while the weights prepared hold < graph_auto_bytes */
    int64_t graph_auto_bytes, wbytes;      /* that bound; bytes of the weights prepared */
    int n_graph_launches;                  /* (tests) */
    int gcap_nodes, gcap_edges[3];         /* the last captured graph: nodes; edges ordinary, programmatic
                                            * (from the kernel's trigger), programmatic at launch completion */
    cu_prof *prof;
    bool tiled_attr[2][3];                 /* its shared-memory limit raised (per T, NI) */
    cu_rf rf[MX_RF_CACHE]; int n_rf;
    cu_rf sk[MX_SK_CACHE]; int n_sk;   /* attention sink tables (one per layer) */
    int gmode; bool gbroken; int g_op; uint64_t g_step;
    cu_graph graphs[MX_GRAPHS], *gcur;
    cudaEvent_t g_done;
    struct {                               /* the time split of steps (mx_backend_cuda_step_timing) */
        bool on, pending[2];               /* timing; a step whose events are not read yet */
        bool pend_graph[2];                /* that step ran as a graph launch */
        cudaEvent_t e0[2], e1[2];          /* around the step's GPU work: two pairs, alternating
                                              (a chained step is launched before the last one
                                              ends, cur: the pair of the next step) */
        int cur;
        double t_begin;                    /* host clock at step_begin */
        mx_cuda_step_split acc;
    } stt;
    void *blas_ws;
    void *wscratch; size_t wscratch_cap;   /* dequantized weight slice (bf16) */
    void *xscratch; size_t xscratch_cap;   /* activations converted to bf16/f16 */
    void *gpart; size_t gpart_cap;         /* split-k partial sums of k_gemm_gq */
    bool gq_ok;                            /* k_gemm_gq's shared memory limit could be raised */
    int gq_bps[2];                         /* k_gemm_gq<64>, <128>: blocks a multiprocessor holds */
    bool wg_ok;                            /* k_gemm_wg runs here: its sm_90a code was loaded */
    int gq_rot;                            /* k_gemm_wg's k loop rotated by block (MLXCEL_CUDA_GEMM_ROT) */
    bool pair_on;                          /* gate/up + act_mul in one k_gemm_wg (MLXCEL_CUDA_GEMM_PAIR) */
    int n_pair;                            /* launches of that form (tests) */
    int strk_mode;                         /* stream-K for k_gemm_wg (MLXCEL_CUDA_GEMM_SK): 0 off, 1 where
                                            * the tiles leave a wave short (gq_gemm) */
    int strk_grid;                         /* (tests) > 0: stream-K wherever it applies, over this many blocks */
    int n_strk;                            /* stream-K launches (tests) */
    unsigned *strk_cnt;                    /* its counters, STRK_TILES, zero between launches */
    void *strk_part; size_t strk_part_cap; /* its blocks' slots of partial tiles */
    int wg_bps_sk[2][2];                   /* the same for its stream-K form (its grid: all resident at once) */
    bool wg32_ok;                          /* k_gemm_wg<32, ..>'s forms could be set up */
    int gemm_n32;                          /* 17..32 rows of x on them (MLXCEL_CUDA_GEMM_N32; else the 64-token form) */
    int gemm_tma;                          /* k_gemm_wg's stages copied by the tensor memory accelerator
                                              (MLXCEL_CUDA_GEMM_TMA: 0 none, 1 all, 2 x alone except in the
                                              32-token tiles' stream-K launches (the default), 3 x alone in
                                              every launch; where the maps could be made, else 0) */
    PFN_cuTensorMapEncodeTiled_v12000 tm_encode;   /* the driver's cuTensorMapEncodeTiled (NULL: no TMA form) */
    int n_tma;                             /* launches of the TMA form (tests) */
    int n32_wg;                            /* their warpgroups a block, 2 or 4 (MLXCEL_CUDA_GEMM_N32_WG); 0: by the
                                            * columns, as the other forms (4 from 4096) */
    int wg_bps32[2], wg_bps32_sk[2];       /* their blocks a multiprocessor, [nwg == 4], and of the stream-K form */
    int n_wg32;                            /* their launches (tests) */
    int wg_bps[2][2];                      /* k_gemm_wg<64 | 128, 2 | 4 warpgroups>: blocks a multiprocessor
                                            * holds, [nwg == 4][bn == 128] */
    void *xq; size_t xq_cap;               /* activations quantized to int8 (k_quant_x) */
    void *xq2; size_t xq2_cap;             /* the int8 form of a q4/q8 gate/up pair's act_mul output (pr), written
                                            * while the pair reads x's in xq */
    const float *xq2_src; int64_t xq2_count;   /* the activations whose int8 form xq2 holds */
    int mr_on;                             /* batch-1 q4/q8 matvecs through k_mv_ring (MLXCEL_CUDA_MV_RING) */
    int mr_kb, mr_slot, mr_warps;          /* its ring (KB a block), most code bytes a slot, warps a block */
    int mr_init[3];                        /* those three as init set them (the switches) */
    int n_ring;                            /* its launches (tests) */
    uint64_t mr_attr[2];                   /* its forms whose shared-memory limit was raised (bit a form) */
    int mr_bf;                             /* dense bf16 through k_mv_ring_bf: 0 never, 1 where it runs the norm, 2 always,
                                            * 3 where it runs the norm and for rows of more than 4096 columns
                                            * (MLXCEL_CUDA_MV_RING_BF16; the default) */
    int rn_on;                             /* a batch-1 rmsnorm in the next ring product's prologue (MLXCEL_CUDA_RING_NORM):
                                            * 0 never, 1 dense bf16 products only, 2 q4/q8 ones too */
    unsigned *rn_count;                    /* its block counter (zero between launches) */
    int n_ring_norm;                       /* ring launches that ran the norm (tests) */
    struct cu_pnorm { const float *a, *b; float *sum; const float *g; float eps, add_one; float *y; int d; bool on; } pn;
                                           /* that norm (one row) not yet launched: a product of y takes it */
    int ring_pair;                         /* a batch-1 gate/up product on the ring (dense bf16, q4, q8) and the
                                            * act_mul of its outputs in one launch (MLXCEL_CUDA_RING_PAIR) */
    int n_ring_pair;                       /* its launches (tests) */
    int ring_act;                          /* a batch-1 act_mul run in the prologue of the q4/q8 ring product that
                                            * reads its output (MLXCEL_CUDA_RING_ACT) */
    int n_ring_act;                        /* its launches (tests) */
    struct { int act; const float *gate, *up; float *y; int d; bool on; } pa;   /* such an act_mul
                                            * (one row, in place or not) not yet launched */
    struct { const cu_weight *w[2]; const float *x; float *y[2]; cu_pnorm pn; bool has_pn, on; } pb;
                                           /* such a product not yet launched (with the norm it took, has_pn):
                                            * a following act_mul of its outputs runs in it (pb_flush: as it is) */
    struct cu_scale { const float *a, *g; float eps, add_one; float *y; float *part; int np; };   /* a norm
                                            * whose scale a ring product applies (mr_norm's SC fields) */
    struct { const cu_weight *w[2]; const float *x; float *y[2]; bool on, in2, sc; cu_scale scn; } pr;
                                           /* the same for q4/q8 weights on x's int8 form (pr_flush): in xq,
                                            * or in xq2 (in2); sc: a form whose norm's scale the pair
                                            * applies (scn: pe_take) */
    int ring_epi;                          /* a batch-1 q4/q8 ring product, the residual add after it and the
                                            * rmsnorm of the sum in its epilogue, the norm's scale left to the
                                            * ring product that reads the norm's output (MLXCEL_CUDA_RING_EPI,
                                            * on by default since the twenty-third session: Qwen3-0.6B q4
                                            * batch 1 +3.0-4.4%, Llama-8B +0.2-1.2%, H100, NOTES.md) */
    int pair_half;                         /* a batch-1 q4/q8 gate/up pair on the ring as blocks of half the
                                            * warps and a small ring, two a multiprocessor, so that one fits
                                            * beside a block of the product before it (MLXCEL_CUDA_PAIR_HALF):
                                            * 0 never, 1 always, 2 (default) where the pair has two groups of
                                            * 32 rows a multiprocessor or more (every half block one at least:
                                            * Llama-8B q4 +0.45%, Qwen3-0.6B's smaller pair -4.3% always;
                                            * thirtieth session) */
    int epi_blocks;                        /* the most blocks of its first product, k_mv_ring<.., 4>
                                            * (MLXCEL_CUDA_EPI_BLOCKS; 0: three quarters of the multiprocessors,
                                            * a multiple of 8, epi_grid): fewer than one a multiprocessor leave
                                            * some free, where the product after it (a gate/up pair) starts
                                            * copying its weights before this one ends */
    int n_ring_epi, n_ring_sc;             /* launches of the two sides (tests) */
    int i8_epi;                            /* such a product the ring does not take (more than 4096 columns:
                                            * Llama-8B's down) on k_mv_i8<.., EPI> with the add and the
                                            * norm's parts in its epilogue (MLXCEL_CUDA_I8_EPI; i8e_launch) */
    unsigned *i8e_cnt;                     /* its counters, one a group of 32 rows (MR_PARTS; zero between launches) */
    int n_i8_epi;                          /* its launches (tests) */
    int ring_long;                         /* such a product of rows longer than 4,096 columns on the ring
                                            * with x staged in shared memory, k_mv_ring<.., 6> (MLXCEL_CUDA_
                                            * RING_LONG; before I8_EPI, which takes what it does not) */
    int n_ring_long;                       /* its launches (tests) */
    int mv_pf;                             /* k_mv_i8's L2 prefetch, steps ahead (MLXCEL_CUDA_MV_PF; c_mv_pf) */
    int mv_mma;                            /* k_mv_mma from this many rows of x up to MV_I8_MAX (MLXCEL_CUDA_MV_MMA;
                                            * 0: k_mv_i8 for all) */
    int mv_mma_wide;                       /* and above, up to MM_NMAX, ahead of the GEMMs (MLXCEL_CUDA_MV_MMA_WIDE) */
    int mm_pfx;                            /* k_mv_mma asks L1 for the next chunk's x (MLXCEL_CUDA_MV_MMA_PFX) */
    int mm_form;                           /* its form: 0 auto, 1 or 2 (MLXCEL_CUDA_MV_MMA_FORM; mv_mma_launch) */
    int mm_nst;                            /* its stages a warp, 2-4 (MLXCEL_CUDA_MV_MMA_STAGES) */
    bool mm_ok;                            /* k_mv_mma can run (sm_80 or later, its shared memory granted) */
    int n_mv_mma;                          /* its launches (tests) */
    int n_pair_half;                       /* launches of a pair in half blocks (tests) */
    float *epi_part;                       /* the parts of the sum of squares, 2 x MR_PARTS (alternate uses) */
    int epi_flip;
    bool pe_allow;                         /* c_matmul's product may wait (mv_i8) */
    struct {                               /* such a product not yet launched, with the add (stage 1) and the
                                            * norm (stage 2) after it that wait with it */
        const cu_weight *w; const int8_t *xq; const float2 *xds; float *y; bool in2;   /* in2: xq is xq2 */
        int stage; const float *ra, *rb; float *sum; int64_t count;                   /* the add: sum = ra + rb */
        const float *g; float eps, add_one; float *yn; int d;                          /* the norm of sum into yn */
        bool on;
        bool att;                          /* the product is o's in the deferred attention's epilogue (at,
                                            * MLXCEL_CUDA_ATT_O): xq, xds are the attention's int8 form */
        bool i8;                           /* the product runs on k_mv_i8<.., EPI> (MLXCEL_CUDA_I8_EPI) */
        bool xs;                           /* on k_mv_ring<.., 6>, x staged (MLXCEL_CUDA_RING_LONG) */
    } pe;
    int att_o;                             /* a batch-1 attention deferred until the o product of its output,
                                            * which then runs in its epilogue with the add and the norm after
                                            * it (MLXCEL_CUDA_ATT_O, k_attn_vec<.., OP>) */
    struct cu_at *at;                      /* the deferred attention (at_defer) */
    float *ao_part; size_t ao_part_cap;    /* its heads' parts of o */
    unsigned ao_attr;                      /* OP forms whose shared-memory limit was raised */
    int n_att_o;                           /* attentions with o in the epilogue (tests) */
    bool at_hold;                          /* c_matmul's g_op: the deferred attention stays */
    void *tk; size_t tk_cap;               /* topk: device results + scratch */
    void *tkh; size_t tkh_cap;             /* topk: pinned host copy of the results */
    int topk_one;                          /* topk in one launch (tk_one) with PDL, its results written
                                              straight into tkh when small (MLXCEL_CUDA_TOPK_ONE,
                                              on by default since the twenty-second session:
                                              +1.2-2.3% beside FAST_REPLAY, NOTES.md) */
    void *tkc; size_t tkc_cap;             /* its row counters (zero between launches) */
    int n_topk_one, n_topk_mapped;         /* its launches, and those that wrote into tkh (tests) */
    bool mv_f32;                           /* MLXCEL_PRECISE=1 / MLXCEL_CUDA_MV=f32: f32 matvecs */
    bool precise;                          /* MLXCEL_PRECISE=1: f32 activations in every product
                                            * (no GEMM on bf16) and an f32 KV cache */
    const float *xq_src; int64_t xq_count; /* the activations whose int8 form xq holds (an op that
                                            * wrote them also wrote that: rmsnorm, act_mul) */
    const float *xg_src; int64_t xg_count; /* the activations whose bf16 form in gq order xg holds
                                            * (rmsnorm, act_mul, or k_gemm_gq's own conversion) */
    void *xg; size_t xg_cap;
    void *xg2; size_t xg2_cap;             /* k_gemm_wg<.., PAIR>'s output in gq order, then swapped with xg */
    struct { const cu_weight *w[2]; const float *x; float *y[2]; int n; bool on; } pg;   /* a gate/up
                                            * product not yet launched: a following act_mul of its
                                            * outputs runs in its epilogue */
    struct cu_psum { const float *part; int nsplit, n, rows; float *y; };   /* split-k partial sums of
                                            * one weight's product into y [n][rows] (k_gq_sum) */
    struct { cu_psum p; bool on; } ps;     /* such a sum not yet launched (MLXCEL_CUDA_SUM_NORM): an add
                                            * of y followed by an rmsnorm of the sum reads the parts */
    bool sum_norm, ps_allow;               /* MLXCEL_CUDA_SUM_NORM; c_matmul's product may defer its sum */
    int n_sum_norm;                        /* rmsnorms that read the parts (tests) */
    struct { gq_set set; const float *part; int nsplit, n; bool on; } pq;   /* a q/k/v product's split-k
                                            * sum not yet launched (MLXCEL_CUDA_SUM_QKV): the attention's
                                            * q/k preparation adds the parts itself */
    bool sum_qkv, pq_allow;                /* MLXCEL_CUDA_SUM_QKV; c_matmul_multi's product may defer it */
    int n_sum_qkv;                         /* q/k preparations that read the parts (tests) */
    bool att_gq;                           /* the decode attention writes its output's gq form (MLXCEL_CUDA_ATT_GQ) */
    int n_cvt_gq;                          /* k_cvt_gq launches (tests) */
    struct { const float *a, *b; float *y; int64_t count; bool on; bool has_ps; cu_psum ps; } pend;   /* an add not yet
                                            * launched: the next rmsnorm of its sum fuses it */
    struct hop {                           /* per-head ops on q/k deferred until the attention */
        int kind;                          /* 1: rmsnorm in place, 2: rope (rot_dim == head_dim) */
        float *x; int rows, d;             /* rmsnorm: rows x d */
        const float *g; float eps, add_one;
        int n, heads; const float *f; float af; const int32_t *pos_d; uint64_t pos_hash;  /* rope */
    } hq[4];
    int n_hq;
    struct cu_fd *fd;                      /* decode_layers: the plan for one stack (c_decode_layers) */
    int fd_epoch;                          /* bumped by kv_init / kv_free: the model's weights may change */
    bool fused;                            /* decode_layers on (MLXCEL_CUDA_FUSED=1; off by default: slower so far) */
    int fused_pf;                          /* its L2 prefetch depth in chunks (MLXCEL_CUDA_FUSED_PF) */
    int fused_pmin;                        /* its attention's fewest positions a chunk (MLXCEL_CUDA_FUSED_PMIN) */
    int fused_slot;                        /* its ring's slot bytes, at least (MLXCEL_CUDA_FUSED_SLOT) */
    int n_fused;                           /* its launches (tests) */
    void *trace; const char *trace_path;   /* the wait trace's records and file (MLXCEL_CUDA_TRACE) */
    long trace_cap;                        /* its most records (MLXCEL_CUDA_TRACE_MAX) */
    void **owned; size_t n_owned, cap_owned;       /* device buffers of prepared weights */
    void **owned_h; size_t n_owned_h, cap_owned_h; /* host cu_weight structs */
};

/* Kernel launches: PL(c, kernel, grid, block, shared)(args...) is kernel<<<grid, block, shared,
 * c->st>>>(args...), with the programmatic-serialization attribute when c->pdl is on. */
template <typename... KArgs>
struct pdl_launch {
    cu_ctx *c;
    void (*k)(KArgs...);
    dim3 g, b;
    size_t shm;
    template <typename... Args> void operator()(Args &&...args) const {
        if (!c->pdl) { k<<<g, b, shm, c->st>>>(static_cast<KArgs>(args)...); return; }
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1] = {};
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = g; cfg.blockDim = b; cfg.dynamicSmemBytes = shm; cfg.stream = c->st;
        cfg.attrs = at; cfg.numAttrs = 1;
        cudaLaunchKernelEx(&cfg, k, static_cast<KArgs>(args)...);
    }
};
template <typename... KArgs>
static pdl_launch<KArgs...> PL(cu_ctx *c, void (*k)(KArgs...), dim3 g, dim3 b, size_t shm) {
    pdl_launch<KArgs...> l;
    l.c = c; l.k = k; l.g = g; l.b = b; l.shm = shm;
    return l;
}

/* k_mv_ring's defaults (MLXCEL_CUDA_MV_RING_KB, _SLOT, _WARPS): the ring's shared memory a block,
 * the most bytes of codes a slot takes (up to 4 rows a slot), warps a block */
#define MR_RING_KB 192
#define MR_RING_KB_MAX 220
#define MR_SLOT 4096
#define MR_WARPS 16

/* The MLXCEL_CUDA_* switches, each checked against its values in one place: unset or empty means
 * the default; anything else is an error naming the variable and what it takes. */
enum { GM_AUTO, GM_CUBLAS, GM_MMA, GM_WG, GM_NMODES };   /* MLXCEL_CUDA_GEMM, in k_gemm_modes' order */
static const char *const k_gemm_modes[] = {"auto", "cublas", "mma", "wgmma"};
struct cu_switches { int att_o, attn, attn_dec, attn_prep, gqa, gemm, gemm_rot, gemm_sk, gemm_n32, gemm_tma, n32_wg, gemm_pair, sum_norm, sum_qkv, att_gq, pdl, mv, profile, kv, kv_lay, graphs, fused, mv_ring, ring_norm, ring_bf, ring_pair, ring_act, ring_epi, i8_epi, ring_long, attn_early, dense_short, fast_replay, topk_one, chain, mv_mma_wide, mm_pfx, mm_form; long dq_mb, fused_pf, fused_pmin, fused_slot, mr_kb, mr_slot, mr_warps, attn_l2pf, trace_max, epi_blocks, mv_pf, mv_mma, mm_nst, att_split, att_split_min; int pair_half; };   /* kv, kv_lay: checked here, read by kv_init */
/* MLXCEL_CUDA_KV_LAYOUT's values (cu_ctx::kv_lay) and its default */
static const char *const k_kv_lays[] = {"layer", "block"};
#define KV_LAY_DEFAULT 0
static mx_status env_choice(const char *name, const char *const *vals, int n, int def, int *out) {
    const char *e = getenv(name);
    *out = def;
    if (!e || !*e) return MX_OK;
    for (int i = 0; i < n; i++)
        if (!strcmp(e, vals[i])) { *out = i; return MX_OK; }
    char list[160] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s%s", i ? ", " : "", vals[i], i == def ? " (default)" : "");
    return mx_errorf(MX_ERR_INVALID_ARG, "%s=%.40s: expected one of %s", name, e, list);
}
/* an integer switch in [lo, hi] (unset or empty: def) */
static mx_status env_long(const char *name, long lo, long hi, long def, const char *unit, long *out) {
    const char *e = getenv(name);
    *out = def;
    if (!e || !*e) return MX_OK;
    char *end;
    errno = 0;
    const long v = strtol(e, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return mx_errorf(MX_ERR_INVALID_ARG, "%s=%.40s: expected %s from %ld to %ld (default %ld)", name, e, unit, lo, hi, def);
    *out = v;
    return MX_OK;
}
/* k_attn_vec's split of long contexts (asp_args) */
#define ASP_SMAX 32          /* the most runs a head (MLXCEL_CUDA_ATT_SPLIT's most) */
#define ASP_MIN_DEFAULT 256  /* the fewest positions a run (MLXCEL_CUDA_ATT_SPLIT_MIN) */
#define ASP_ENT 16384        /* scratch entries (token, query head, run) of up to 256 values */
#define ASP_CNT 4096         /* counters (token, first query head of a block) */
#define MV_PF_MAX 8          /* MLXCEL_CUDA_MV_PF's most (k_mv_i8's L2 prefetch, c_mv_pf) */
#define MV_I8_MAX_SW 16      /* MLXCEL_CUDA_MV_MMA's most: MV_I8_MAX (checked there) */
#define MV_MMA_DEFAULT 8     /* k_mv_mma from 8 rows of x (NOTES.md, thirty-sixth session) */
#define MV_MMA_STAGES_DEFAULT 2   /* its stages a warp (thirty-seventh session: 8 rows +3% against 4; 16 fit only 2) */
#define RING_LONG_MAX 16384   /* k_mv_ring<.., 6>'s most columns (x's int8 form staged in shared memory) */
#define EPI_BLOCKS_MAX 160   /* MLXCEL_CUDA_EPI_BLOCKS's most: MR_PARTS (mv_ring.cuh, checked there) */
#define PAIR_HALF_KB 76      /* MLXCEL_CUDA_PAIR_HALF: a block's ring (two 4.6 KB slots a warp of 8) */
static mx_status read_switches(cu_switches *sw) {
    static const char *const attn[] = {"mma", "tiled", "pertoken"}, *const attn_dec[] = {"vec", "lanes"},
                             *const onoff[] = {"0", "1"}, *const gqa[] = {"0", "1", "2"}, *const tma_modes[] = {"0", "1", "2", "3"},
                             *const pdl[] = {"0", "1", "2", "3"},
                             *const mv[] = {"i8", "f32"}, *const kv[] = {"bf16", "f32"},
                             *const off_on_auto[] = {"0", "1", "auto"}, *const ring_bf[] = {"0", "norm", "1", "long"},
                             *const ring_norm[] = {"0", "bf16", "1"}, *const mm_forms[] = {"auto", "1", "2"}, *const n32_wgs[] = {"auto", "2", "4"};
    mx_status st;
    if ((st = env_choice("MLXCEL_CUDA_ATTN", attn, 3, 0, &sw->attn)) ||
        (st = env_choice("MLXCEL_CUDA_ATTN_DEC", attn_dec, 2, 0, &sw->attn_dec)) ||
        (st = env_choice("MLXCEL_CUDA_ATTN_GQA", gqa, 3, 1, &sw->gqa)) ||
        (st = env_choice("MLXCEL_CUDA_ATTN_PREP", ring_norm, 3, 1, &sw->attn_prep)) ||
        (st = env_choice("MLXCEL_CUDA_ATTN_EARLY", onoff, 2, 1, &sw->attn_early)) ||
        (st = env_choice("MLXCEL_CUDA_GEMM", k_gemm_modes, GM_NMODES, GM_AUTO, &sw->gemm)) ||
        (st = env_choice("MLXCEL_CUDA_GEMM_ROT", onoff, 2, 1, &sw->gemm_rot)) ||
        (st = env_choice("MLXCEL_CUDA_GEMM_SK", onoff, 2, 1, &sw->gemm_sk)) ||
        (st = env_choice("MLXCEL_CUDA_GEMM_N32", onoff, 2, 1, &sw->gemm_n32)) ||
        (st = env_choice("MLXCEL_CUDA_GEMM_TMA", tma_modes, 4, 2, &sw->gemm_tma)) ||
        (st = env_choice("MLXCEL_CUDA_GEMM_N32_WG", n32_wgs, 3, 0, &sw->n32_wg)) ||
        (st = env_choice("MLXCEL_CUDA_GEMM_PAIR", onoff, 2, 0, &sw->gemm_pair)) ||
        (st = env_choice("MLXCEL_CUDA_SUM_NORM", onoff, 2, 1, &sw->sum_norm)) ||
        (st = env_choice("MLXCEL_CUDA_SUM_QKV", onoff, 2, 1, &sw->sum_qkv)) ||
        (st = env_choice("MLXCEL_CUDA_ATT_GQ", onoff, 2, 1, &sw->att_gq)) ||
        (st = env_choice("MLXCEL_CUDA_PDL", pdl, 4, 2, &sw->pdl)) ||
        (st = env_choice("MLXCEL_CUDA_MV", mv, 2, 0, &sw->mv)) ||
        (st = env_choice("MLXCEL_CUDA_PROFILE", onoff, 2, 0, &sw->profile)) ||
        (st = env_choice("MLXCEL_CUDA_KV", kv, 2, 0, &sw->kv)) ||
        (st = env_choice("MLXCEL_CUDA_KV_LAYOUT", k_kv_lays, 2, KV_LAY_DEFAULT, &sw->kv_lay)) ||
        (st = env_choice("MLXCEL_CUDA_GRAPHS", off_on_auto, 3, 1, &sw->graphs)) ||
        (st = env_choice("MLXCEL_CUDA_FUSED", onoff, 2, 0, &sw->fused)) ||
        (st = env_choice("MLXCEL_CUDA_MV_RING", onoff, 2, 1, &sw->mv_ring)) ||
        (st = env_choice("MLXCEL_CUDA_RING_NORM", ring_norm, 3, 1, &sw->ring_norm)) ||
        (st = env_choice("MLXCEL_CUDA_MV_RING_BF16", ring_bf, 4, 3, &sw->ring_bf)) ||
        (st = env_choice("MLXCEL_CUDA_RING_PAIR", onoff, 2, 1, &sw->ring_pair)) ||
        (st = env_choice("MLXCEL_CUDA_RING_ACT", onoff, 2, 0, &sw->ring_act)) ||
        (st = env_choice("MLXCEL_CUDA_RING_EPI", onoff, 2, 1, &sw->ring_epi)) ||
        (st = env_choice("MLXCEL_CUDA_I8_EPI", onoff, 2, 1, &sw->i8_epi)) ||
        (st = env_choice("MLXCEL_CUDA_RING_LONG", onoff, 2, 1, &sw->ring_long)) ||
        (st = env_choice("MLXCEL_CUDA_ATT_O", onoff, 2, 0, &sw->att_o)) ||
        (st = env_choice("MLXCEL_CUDA_MV_DENSE_SHORT", onoff, 2, 0, &sw->dense_short)) ||
        (st = env_choice("MLXCEL_CUDA_FAST_REPLAY", onoff, 2, 1, &sw->fast_replay)) ||
        (st = env_choice("MLXCEL_CUDA_TOPK_ONE", onoff, 2, 1, &sw->topk_one)) ||
        (st = env_choice("MLXCEL_CUDA_CHAIN", onoff, 2, 1, &sw->chain)) ||
        (st = env_choice("MLXCEL_CUDA_MV_MMA_WIDE", onoff, 2, 0, &sw->mv_mma_wide)) ||
        (st = env_choice("MLXCEL_CUDA_MV_MMA_PFX", onoff, 2, 0, &sw->mm_pfx)) ||
        (st = env_choice("MLXCEL_CUDA_MV_MMA_FORM", mm_forms, 3, 0, &sw->mm_form)) ||
        (st = env_choice("MLXCEL_CUDA_PAIR_HALF", off_on_auto, 3, 2, &sw->pair_half)))
        return st;
    if ((st = env_long("MLXCEL_CUDA_FUSED_PF", 0, 64, 0, "chunks", &sw->fused_pf)) ||
        (st = env_long("MLXCEL_CUDA_FUSED_PMIN", 1, 1 << 20, 60, "positions", &sw->fused_pmin)) ||
        (st = env_long("MLXCEL_CUDA_FUSED_SLOT", 4096, 1 << 17, 32768, "bytes", &sw->fused_slot)) ||
        (st = env_long("MLXCEL_CUDA_MV_RING_KB", 8, MR_RING_KB_MAX, MR_RING_KB, "KB", &sw->mr_kb)) ||
        (st = env_long("MLXCEL_CUDA_MV_RING_SLOT", 512, 65536, MR_SLOT, "bytes", &sw->mr_slot)) ||
        (st = env_long("MLXCEL_CUDA_MV_RING_WARPS", 1, 16, MR_WARPS, "warps", &sw->mr_warps)) ||
        (st = env_long("MLXCEL_CUDA_DQ_MB", 1, 65536, 256, "MiB", &sw->dq_mb)) ||
        (st = env_long("MLXCEL_CUDA_ATTN_L2PF", 0, 1024, 0, "MiB", &sw->attn_l2pf)) ||
        (st = env_long("MLXCEL_CUDA_TRACE_MAX", 1024, 1L << 27, 4L << 20, "records", &sw->trace_max)) ||
        (st = env_long("MLXCEL_CUDA_EPI_BLOCKS", 0, EPI_BLOCKS_MAX, 0, "blocks (0: 3/4 of the multiprocessors)", &sw->epi_blocks)) ||
        (st = env_long("MLXCEL_CUDA_MV_PF", 0, MV_PF_MAX, 1, "steps ahead", &sw->mv_pf)) ||
        (st = env_long("MLXCEL_CUDA_MV_MMA", 0, MV_I8_MAX_SW, MV_MMA_DEFAULT, "rows of x (0: off)", &sw->mv_mma)) ||
        (st = env_long("MLXCEL_CUDA_MV_MMA_STAGES", 2, 4, MV_MMA_STAGES_DEFAULT, "stages a warp", &sw->mm_nst)) ||
        (st = env_long("MLXCEL_CUDA_ATT_SPLIT", 0, ASP_SMAX, 0, "runs a head (0: auto, 1: off)", &sw->att_split)) ||
        (st = env_long("MLXCEL_CUDA_ATT_SPLIT_MIN", 16, 1 << 20, ASP_MIN_DEFAULT, "positions a run", &sw->att_split_min)))
        return st;
    return MX_OK;
}

static void prof_collect(cu_ctx *c);
static void prof_mark(cu_ctx *c, const char *what) {
    cu_prof *p = c->prof;
    if (c->gmode != G_EAGER && c->gmode != G_REPLAY) return;   /* no events inside a capture */
    if (p->n == PROF_N) prof_collect(c);
    if (p->n == 0) {   /* the first interval after a collect holds host time: its own label */
        cudaEventRecord(p->ev[0], c->st);
        p->what[0] = NULL;
        p->n = 1;
    }
    cudaEventRecord(p->ev[p->n], c->st);
    p->what[p->n++] = what;
}

/* Waits for the recorded events and adds their intervals to the per-label totals. */
static void prof_collect(cu_ctx *c) {
    cu_prof *p = c->prof;
    if (!p || p->n < 2) { if (p) p->n = 0; return; }
    cudaEventSynchronize(p->ev[p->n - 1]);
    for (int i = 1; i < p->n; i++) {
        float ms = 0.f;
        if (cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]) != cudaSuccess) { cudaGetLastError(); continue; }
        int l = 0;
        while (l < p->nl && strcmp(p->label[l], p->what[i])) l++;
        if (l == p->nl) {
            if (p->nl == PROF_LABELS) continue;
            p->label[p->nl++] = p->what[i];
        }
        p->ms[l] += ms; p->count[l]++;
    }
    p->n = 0;
}

static void prof_report(cu_ctx *c) {
    cu_prof *p = c->prof;
    prof_collect(c);
    double tot = 0;
    for (int l = 0; l < p->nl; l++) tot += p->ms[l];
    fprintf(stderr, "cuda profile: %.1f ms in %d labels (time from the previous launch's end to this one's)\n", tot, p->nl);
    if (c->gcap_nodes)
        fprintf(stderr, "cuda profile: last captured step: %d nodes; edges %d ordinary, %d programmatic, %d at launch completion\n",
                c->gcap_nodes, c->gcap_edges[0], c->gcap_edges[1], c->gcap_edges[2]);
    if (p->fdlaunch > 0 && p->fdsum[6] > 0) {
        /* (the counters fused_decode.cuh's k_fused_decode keeps; null: not a time to print) */
        static const char *const what[16] = {"data wait (a warp)", "rows (a warp)", "grid barriers", "prologues",
                                              "attention", "producer, ring full", NULL, NULL, "epilogues", "prologues, own loads",
                                              "barrier after q/k/v", "  after the attention", "  after o", "  after gate/up", "  after down", NULL};
        const double nspc = p->fdsum[7] / p->fdsum[6], n = (double)p->fdlaunch;
        fprintf(stderr, "cuda profile: decode_layers: %ld launches, %.2f us each (%.2f GHz); per block, mean (largest):\n",
                p->fdlaunch, p->fdsum[7] / n / p->fdgrid / 1e3, 1.0 / nspc);
        for (int k = 0; k < 16; k++)
            if (what[k]) fprintf(stderr, "cuda profile:   %-22s %9.2f us (%9.2f)\n", what[k], p->fdsum[k] * nspc / n / p->fdgrid / 1e3,
                    p->fdmax[k] * nspc / n / 1e3);
    }
    for (int k = 0; k < p->nl; k++) {   /* largest first */
        int b = k;
        for (int l = k + 1; l < p->nl; l++) if (p->ms[l] > p->ms[b]) b = l;
        const char *tl = p->label[k]; double tm = p->ms[k]; long tc = p->count[k];
        p->label[k] = p->label[b]; p->ms[k] = p->ms[b]; p->count[k] = p->count[b];
        p->label[b] = tl; p->ms[b] = tm; p->count[b] = tc;
        fprintf(stderr, "cuda profile: %-28s %8ld x %9.2f us = %10.2f ms %5.1f%%\n", p->label[k], p->count[k],
                1e3 * p->ms[k] / (double)p->count[k], p->ms[k], tot > 0 ? 100.0 * p->ms[k] / tot : 0.0);
    }
}

/* a graph entry taken anew: nothing recorded, nothing learned for step_replay */
static void g_reset(cu_graph *g) {
    g->bad = false; g->n_fp = 0;
    g->fast_seen = 0; g->fast_no = false; g->fast_stages = 0;
}
/* Drop every captured graph (device buffers they name are about to change). */
static void g_invalidate(cu_ctx *c) {
    for (int i = 0; i < MX_GRAPHS; i++) {
        cu_graph *g = &c->graphs[i];
        if (g->exec) { cudaStreamSynchronize(c->st); cudaGraphExecDestroy(g->exec); }
        g->exec = NULL;
        g->used = false;
        g_reset(g);
    }
}

static void cu_fail(cu_ctx *c, mx_status s, const char *what, cudaError_t e) {
    if (c->err == MX_OK) {
        c->err = s;
        mx_errorf(s, "cuda: %s: %s", what, e == cudaSuccess ? "failed" : cudaGetErrorString(e));
        MX_LOGE("cuda: %s: %s", what, e == cudaSuccess ? "failed" : cudaGetErrorString(e));
    }
}
#define CK(c, call, what) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { cu_fail(c, MX_ERR_INTERNAL, what, e_); } } while (0)
/* MLXCEL_CUDA_PROFILE=1: an event after every eager launch; the time since the previous event is
 * charged to the launch's label, and the totals go to stderr when the backend is freed (run with
 * MLXCEL_CUDA_GRAPHS=0 for the kernels of decode steps, which are otherwise one graph launch). */
#define LAUNCHED(c, what) do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) cu_fail(c, MX_ERR_INTERNAL, what, e_); \
                               else if ((c)->prof) prof_mark(c, what); } while (0)

static bool own(cu_ctx *c, void ***arr, size_t *n, size_t *cap, void *p) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        void **na = (void **)realloc(*arr, nc * sizeof(void *));
        if (!na) return false;
        *arr = na; *cap = nc;
    }
    (*arr)[(*n)++] = p;
    return true;
}

static void *dev_alloc_owned(cu_ctx *c, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) { cudaGetLastError(); return NULL; }
    if (!own(c, &c->owned, &c->n_owned, &c->cap_owned, p)) { cudaFree(p); return NULL; }
    return p;
}

/* Upload `bytes` from host `src` through stage s, skipping the copy when the last upload had
 * the same content. Returns the device pointer (NULL on failure). */
static void *stage_up(cu_ctx *c, cu_stage *s, const void *src, size_t bytes) {
    if (bytes == 0) bytes = 4, src = NULL;
    if (c->gmode == G_CAPTURE || c->gmode == G_REPLAY) {
        /* the graph holds one copy node per stage, from s->h: the first use in a step writes
         * s->h (and, capturing, adds the node); later uses in the step must match it */
        bool first = s->stamp != c->g_step;
        s->stamp = c->g_step;
        if (!first || !s->d || bytes > s->cap) {
            if (first || s->len != bytes || (src && memcmp(s->h, src, bytes))) c->gbroken = true;
            return s->d;
        }
        /* (replaying: the last copy out of s->h may be an op's upload after the last replay) */
        if (c->gmode == G_REPLAY && s->ev) cudaEventSynchronize(s->ev);
        if (src) memcpy(s->h, src, bytes); else memset(s->h, 0, bytes);
        s->len = bytes;
        if (c->gmode == G_CAPTURE) CK(c, cudaMemcpyAsync(s->d, s->h, bytes, cudaMemcpyHostToDevice, c->st), "upload");
        return s->d;
    }
    if (s->d && s->len == bytes && src && memcmp(s->h, src, bytes) == 0) return s->d;
    if (bytes > s->cap) {
        g_invalidate(c);   /* captured copy nodes name the old buffers */
        cudaStreamSynchronize(c->st);
        if (s->h) cudaFreeHost(s->h);
        if (s->d) cudaFree(s->d);
        s->h = s->d = NULL; s->cap = 0; s->len = 0;
        size_t cap = bytes < 4096 ? 4096 : bytes * 2;
        if (cudaMallocHost(&s->h, cap) != cudaSuccess || cudaMalloc(&s->d, cap) != cudaSuccess) {
            cu_fail(c, MX_ERR_NOMEM, "staging buffer", cudaGetLastError());
            return NULL;
        }
        s->cap = cap;
        if (!s->ev && cudaEventCreateWithFlags(&s->ev, cudaEventDisableTiming) != cudaSuccess) {
            cu_fail(c, MX_ERR_INTERNAL, "event", cudaGetLastError());
            return NULL;
        }
    } else {
        cudaEventSynchronize(s->ev);   /* the previous copy out of s->h has finished */
    }
    if (src) memcpy(s->h, src, bytes); else memset(s->h, 0, bytes);
    s->len = bytes;
    CK(c, cudaMemcpyAsync(s->d, s->h, bytes, cudaMemcpyHostToDevice, c->st), "upload");
    CK(c, cudaEventRecord(s->ev, c->st), "event record");
    return s->d;
}

static void *scratch(cu_ctx *c, void **p, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return *p;
    if (c->gmode == G_CAPTURE || c->gmode == G_REPLAY) { c->gbroken = true; return *p; }
    g_invalidate(c);
    cudaStreamSynchronize(c->st);
    if (*p) cudaFree(*p);
    *p = NULL; *cap = 0;
    if (cudaMalloc(p, bytes) != cudaSuccess) { *p = NULL; cu_fail(c, MX_ERR_NOMEM, "scratch buffer", cudaGetLastError()); return NULL; }
    *cap = bytes;
    return *p;
}

/* ------------------------------------------------------------------------------------------ */
/* small device helpers                                                                        */

__device__ __forceinline__ float ld_s(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float ld_s(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float ld_s(const float *p) { return *p; }
__device__ __forceinline__ void st_kv(float *p, float v) { *p = v; }
__device__ __forceinline__ void st_kv(__nv_bfloat16 *p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void st_kv(__half *p, float v) { *p = __float2half(v); }
/* one u32 word of dense weights to floats */
__device__ __forceinline__ void unpack_word(uint32_t w, float *f, const float *) { f[0] = __uint_as_float(w); }
__device__ __forceinline__ void unpack_word(uint32_t w, float *f, const __nv_bfloat16 *) {
    f[0] = __uint_as_float(w << 16); f[1] = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void unpack_word(uint32_t w, float *f, const __half *) {
    __half2 h; memcpy(&h, &w, 4);
    float2 r = __half22float2(h); f[0] = r.x; f[1] = r.y;
}
/* one 16-byte vector of dense values (8 bf16/f16 or 4 f32) to floats */
template <typename T>
__device__ __forceinline__ void unpack_vec(const uint4 &q, float *f) {
    constexpr int PW = 4 / (int)sizeof(T);   /* values a word */
    unpack_word(q.x, f, (const T *)nullptr); unpack_word(q.y, f + PW, (const T *)nullptr);
    unpack_word(q.z, f + 2 * PW, (const T *)nullptr); unpack_word(q.w, f + 3 * PW, (const T *)nullptr);
}

/* k_mv_i8's L2 prefetch (MLXCEL_CUDA_MV_PF=N, default 1, 0 none): each lane asks the L2 for its
 * codes, scales and biases N steps of its loop ahead (prefetch.global.L2, a hint), so that more of a
 * row is in flight than the registers of one step hold: a step loads, waits, then computes, and a
 * row of 14,336 columns (Llama-8B's down) is 3.5 such round trips a warp. Read once a launch.
 * Measured (H100, Llama-8B q4 batch 1, two rounds): 0 461.7 / 463.3 tok/s, 1 474.9 / 475.8 (+2.8%),
 * 2 475.2 / 475.3, 3 471.8 / 471.8; batch 4 +0.4% at 2. */
__constant__ int c_mv_pf;
__device__ __forceinline__ void pf_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
__device__ __forceinline__ uint4 ld_stream(const void *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over the block (blockDim.x a multiple of 32, <= 1024); all threads get the result. */
__device__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : 0.f;
    return warp_sum(t);
}

/* value k of a row of `bits`-bit codes packed low bits first in u32 words */
__device__ __forceinline__ uint32_t qget(const uint32_t *row, int64_t k, int bits) {
    int64_t off = k * bits;
    int64_t wi = off >> 5; int sh = (int)(off & 31);
    uint32_t v = row[wi] >> sh;
    if (sh + bits > 32) v |= row[wi + 1] << (32 - sh);
    return v & ((1u << bits) - 1u);
}

template <typename ST>
__device__ __forceinline__ float dq_elem(const cu_weight &w, const uint32_t *W, const ST *S, const ST *B,
                                         int64_t r, int64_t k) {
    int64_t ng = w.cols / w.gs;
    const uint32_t *row = W + r * (w.cols * w.bits / 32);
    float s = ld_s(S + r * ng + k / w.gs), b = ld_s(B + r * ng + k / w.gs);
    return s * (float)qget(row, k, w.bits) + b;
}

/* ------------------------------------------------------------------------------------------ */
/* matrix-vector products for n <= 8 rows of x: one warp per weight row, 16-byte streaming loads */

#define MV_WARPS 8
#define MV_R 2      /* weight rows per warp: each x value loaded once serves MV_R rows */

__device__ __forceinline__ uint32_t ld_stream32(const uint32_t *p) {
    uint32_t r;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

/* Quantized q4/q8, one u32 word (8 or 4 codes of one group) per lane per step, so that a warp
 * reads 128 contiguous bytes of a row per load and the matching x values contiguously.
 * A code q becomes a float f = f0 + q/K with one byte permute (q4: after splitting the word
 * into its even and odd nibbles, one per byte): q4 puts the nibble in bits 16-19 under exponent
 * byte 0x3F (f = 0.5 + q/256); q8 puts the byte under 2^23 and subtracts 2^23 (f = q exactly).
 * So over a word sum (s q + b) x = K s * sum f x + (b - K s f0) * sum x, where sum x is shared
 * by the MV_R rows. MU words per row are loaded before any is used. */
/* Programmatic dependent launch (on by default; MLXCEL_CUDA_PDL=0 turns it off): a kernel may
 * then be launched while the previous one in the stream finishes, and waits here, before
 * touching memory, until that one has completed and its writes are visible. Without PDL the wait
 * returns at once.
 * c_pdl_early (MLXCEL_CUDA_PDL=2, the default: 1; =1 waits only: 0; =3: 2): in decode (see pdl_mode)
 * every kernel also releases its dependents (after its wait, or with 2 before it; the weight
 * loaders below before it either way), and the decode matvecs (k_mv_i8, k_mv_dense_sk)
 * issue their first weight loads before the wait, so that weights stream in while the small
 * kernel before them runs. Weights are never written by kernels, so reading them before the wait
 * is safe; everything else (x, outputs) comes after it. Measured on the H200: Llama-8B q4 decode
 * 398 -> 438 tok/s, Qwen3-0.6B 949 -> 1,066; prompts 5% slower, hence off for them. */
__constant__ int c_pdl_early;
#ifdef MLXCEL_CUDA_TRACE
/* The wait trace (a build with -DMLXCEL_CUDA_TRACE=ON, run with MLXCEL_CUDA_TRACE=FILE): thread 0
 * of every block that waits here records its grid (%gridid: one a launch; a graph's replays reuse
 * their nodes' ids), its multiprocessor, the time it reached the wait, the time the wait let it go
 * (%globaltimer, ns) and the time a load from the L2 issued then came back (t2: what the kernel's
 * first loads after the wait wait for, e.g. behind the weight copies the block issued before it),
 * so that the order of a step's kernels, how early each started and when each could go on (its
 * predecessor done) can be read off a replayed step (tools/cuda_trace.py). */
struct cu_trace_rec { unsigned long long grid, t0, t1, t2; unsigned sm, blk; };
static_assert(sizeof(cu_trace_rec) == 40, "the trace file's record: 40 bytes");
__device__ cu_trace_rec *g_trace;   /* null: not tracing */
__device__ unsigned g_trace_n, g_trace_cap;
__device__ __forceinline__ unsigned long long trace_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#endif
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifdef MLXCEL_CUDA_TRACE
    const unsigned long long t0 = trace_now();
#endif
    asm volatile("griddepcontrol.wait;" ::: "memory");
#ifdef MLXCEL_CUDA_TRACE
    const unsigned long long t1 = trace_now();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        cu_trace_rec *const tr = (cu_trace_rec *)__ldcg((const unsigned long long *)&g_trace);   /* (an L2 round trip) */
        if (tr) {
            const unsigned long long t2 = trace_now();   /* (after the branch on the load: it has come back) */
            unsigned long long grid;
            unsigned sm;
            asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
            asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
            const unsigned i = atomicAdd(&g_trace_n, 1u);
            if (i < g_trace_cap) { cu_trace_rec r = {grid, t0, t1, t2, sm, blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)}; tr[i] = r; }
        }
    }
#endif
#endif
}
__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (c_pdl_early) asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
/* the release of a kernel that waits first: before its wait with c_pdl_early 2 (MLXCEL_CUDA_PDL=3:
 * its dependents may then become resident, and load what they load before their own wait, while
 * this one still waits), else after it. The release only lets the next kernel's blocks be
 * scheduled: that kernel's wait still returns only once this one has completed. */
__device__ __forceinline__ void pdl_release_at_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (c_pdl_early == 2) asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
__device__ __forceinline__ void pdl_release_after_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (c_pdl_early == 1) asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
__device__ __forceinline__ void pdl_entry() {
    pdl_release_at_entry();
    pdl_wait();
    pdl_release_after_wait();
}
/* the entry of a kernel that may load weights before the wait (with c_pdl_early): returns
 * whether it has waited already; if not, it must pdl_wait() before reading anything else */
__device__ __forceinline__ bool pdl_entry_weights_first() {
    const bool early = c_pdl_early;
    pdl_release();
    if (!early) pdl_wait();
    return !early;
}

template <int BITS, typename ST, int NB>
__global__ void __launch_bounds__(MV_WARPS * 32)
k_mv_q(const uint32_t *__restrict__ W, const ST *__restrict__ S, const ST *__restrict__ B,
       const float *__restrict__ bias, const float *__restrict__ x, float *__restrict__ y,
       int rows, int cols, int gs_shift, int n) {
    pdl_entry();
    constexpr int VPW = 32 / BITS, MU = 8;
    constexpr float QK = BITS == 4 ? 256.f : 1.f, QF0 = BITS == 4 ? 0.5f : 0.f;
    const int nw = cols / VPW, ng = cols >> gs_shift, lane = threadIdx.x & 31;
    const int nwarps = gridDim.x * MV_WARPS;
    for (int r0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * MV_R; r0 < rows; r0 += nwarps * MV_R) {
        const uint32_t *wr[MV_R];
        const ST *sr[MV_R], *br[MV_R];
#pragma unroll
        for (int r = 0; r < MV_R; r++) {
            int rr = min(r0 + r, rows - 1);
            wr[r] = W + (size_t)rr * nw; sr[r] = S + (size_t)rr * ng; br[r] = B + (size_t)rr * ng;
        }
        float acc[MV_R][NB];
#pragma unroll
        for (int r = 0; r < MV_R; r++)
#pragma unroll
            for (int t = 0; t < NB; t++) acc[r][t] = 0.f;
        for (int w0 = lane; w0 < nw; w0 += 32 * MU) {
            uint32_t q[MV_R][MU];
#pragma unroll
            for (int u = 0; u < MU; u++)
#pragma unroll
                for (int r = 0; r < MV_R; r++) q[r][u] = (w0 + 32 * u < nw) ? ld_stream32(wr[r] + w0 + 32 * u) : 0u;
#pragma unroll
            for (int u = 0; u < MU; u++) {
                const int w = w0 + 32 * u;
                if (w >= nw) break;
                const int g = (w * VPW) >> gs_shift;
                float sc[MV_R], bc[MV_R], f[MV_R][VPW];
#pragma unroll
                for (int r = 0; r < MV_R; r++) {
                    sc[r] = ld_s(sr[r] + g) * QK; bc[r] = ld_s(br[r] + g) - sc[r] * QF0;
                    const uint32_t wd = q[r][u];
                    if (BITS == 4) {
                        const uint32_t lo = wd & 0x0f0f0f0fu, hi = (wd >> 4) & 0x0f0f0f0fu;
#pragma unroll
                        for (int b = 0; b < 4; b++) {
                            f[r][2 * b] = __uint_as_float(__byte_perm(lo, 0x3f000000u, 0x7044u | (b << 8)));
                            f[r][2 * b + 1] = __uint_as_float(__byte_perm(hi, 0x3f000000u, 0x7044u | (b << 8)));
                        }
                    } else {
#pragma unroll
                        for (int b = 0; b < 4; b++) f[r][b] = __uint_as_float(__byte_perm(wd, 0x4b000000u, 0x7440u | b)) - 8388608.f;
                    }
                }
#pragma unroll
                for (int t = 0; t < NB; t++) {
                    if (t >= n) break;
                    const float4 *xp = (const float4 *)(x + (size_t)t * cols + (size_t)w * VPW);
                    float xv[VPW];
#pragma unroll
                    for (int i = 0; i < VPW / 4; i++) {
                        float4 a = __ldg(xp + i);
                        xv[4 * i] = a.x; xv[4 * i + 1] = a.y; xv[4 * i + 2] = a.z; xv[4 * i + 3] = a.w;
                    }
                    float sx = 0.f;
#pragma unroll
                    for (int j = 0; j < VPW; j++) sx += xv[j];
#pragma unroll
                    for (int r = 0; r < MV_R; r++) {
                        float d = 0.f;
#pragma unroll
                        for (int j = 0; j < VPW; j++) d = fmaf(f[r][j], xv[j], d);
                        acc[r][t] = fmaf(sc[r], d, fmaf(bc[r], sx, acc[r][t]));
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MV_R; r++)
#pragma unroll
            for (int t = 0; t < NB; t++) {
                if (t >= n) break;
                float a = warp_sum(acc[r][t]);
                if (lane == 0 && r0 + r < rows) y[(size_t)t * rows + r0 + r] = a + (bias ? bias[r0 + r] : 0.f);
            }
    }
}

/* Dense bf16/f16/f32, split over the block's warps: a block takes R rows, its 8 warps interleave
 * over the 16-byte vectors of those rows (warp w, lane l: vectors 32 w + l + 256 j), each lane
 * issuing up to U vectors of every row before using any; partial sums meet in shared memory.
 * Against k_mv_dense (one warp a row pair over all columns) this keeps 4x more loads in flight
 * for the Llama-8B shapes (a 4096-column bf16 row is two vectors a lane). Up to 4 weights sharing
 * x (q/k/v, gate/up) in one launch: blocks [blk0[k], blk0[k + 1]) do weight k.
 * U: vectors of a row a lane loads before using any. U = 2 (MLXCEL_CUDA_MV_DENSE_SHORT, one row of
 * x, rows of up to 2 x 256 vectors: 4,096 bf16 columns, where U = 4 issues no more loads) holds
 * half the weight registers (64 registers a thread instead of 101 for bf16), so twice the blocks
 * fit an SM and load their rows before the PDL wait; the sums are the same, term for term. */
struct dn_set {
    const void *W[4];
    const float *bias[4];
    float *y[4];
    int rows[4], blk0[5], nw;
};
template <typename WT, int NB, int R, int U = 4>
__global__ void __launch_bounds__(MV_WARPS * 32)
k_mv_dense_sk(const dn_set set, const float *__restrict__ x, int cols, int n) {
    bool waited = pdl_entry_weights_first();
    constexpr int VPV = 16 / sizeof(WT), STEP = MV_WARPS * 32;
    __shared__ float part[MV_WARPS][R][NB];
    int k = 0;
#pragma unroll
    for (int i = 1; i < 4; i++) if (i < set.nw && (int)blockIdx.x >= set.blk0[i]) k = i;
    const WT *__restrict__ W = (const WT *)set.W[k];
    const float *__restrict__ bias = set.bias[k];
    float *__restrict__ y = set.y[k];
    const int rows = set.rows[k];
    const int nvec = cols / VPV, lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const int r0 = ((int)blockIdx.x - set.blk0[k]) * R;
    const uint4 *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = (const uint4 *)(W + (size_t)min(r0 + r, rows - 1) * cols);
    float acc[R][NB];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NB; t++) acc[r][t] = 0.f;
    for (int v0 = wp * 32 + lane; v0 < nvec; v0 += STEP * U) {
        uint4 q[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (v0 + STEP * u < nvec) q[u][r] = ld_stream(wr[r] + v0 + STEP * u);
        if (!waited) { pdl_wait(); waited = true; }   /* x below is the previous kernel's output */
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int v = v0 + STEP * u;
            if (v >= nvec) break;
#pragma unroll
            for (int t = 0; t < NB; t++) {   /* x loaded once for the R rows */
                if (t >= n) break;
                const float4 *xp = (const float4 *)(x + (size_t)t * cols + (size_t)v * VPV);
                float4 xv[VPV / 4];
#pragma unroll
                for (int i = 0; i < VPV / 4; i++) xv[i] = __ldg(xp + i);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float f[VPV];
                    unpack_vec<WT>(q[u][r], f);
                    float d = acc[r][t];
#pragma unroll
                    for (int i = 0; i < VPV / 4; i++) {
                        d = fmaf(f[4 * i], xv[i].x, d); d = fmaf(f[4 * i + 1], xv[i].y, d);
                        d = fmaf(f[4 * i + 2], xv[i].z, d); d = fmaf(f[4 * i + 3], xv[i].w, d);
                    }
                    acc[r][t] = d;
                }
            }
        }
    }
    if (!waited) pdl_wait();   /* this warp had no vectors: before the block's writes */
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NB; t++) {
            const float a = warp_sum(acc[r][t]);
            if (lane == 0) part[wp][r][t] = a;
        }
    __syncthreads();
    if (threadIdx.x < R * NB) {
        const int r = threadIdx.x / NB, t = threadIdx.x % NB;
        if (t < n && r0 + r < rows) {
            float a = 0.f;
#pragma unroll
            for (int w = 0; w < MV_WARPS; w++) a += part[w][r][t];
            y[(size_t)t * rows + r0 + r] = a + (bias ? bias[r0 + r] : 0.f);
        }
    }
}

/* Dense bf16/f16/f32: a 16-byte vector (8, 8 or 4 values) per lane per step, MV_R rows a warp. */
template <typename WT, int NB>
__global__ void __launch_bounds__(MV_WARPS * 32)
k_mv_dense(const WT *__restrict__ W, const float *__restrict__ bias, const float *__restrict__ x,
           float *__restrict__ y, int rows, int cols, int n) {
    pdl_entry();
    constexpr int VPV = 16 / sizeof(WT), MU = 2;
    const int nvec = cols / VPV, lane = threadIdx.x & 31;
    const int nwarps = gridDim.x * MV_WARPS;
    for (int r0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * MV_R; r0 < rows; r0 += nwarps * MV_R) {
        const uint4 *wr[MV_R];
#pragma unroll
        for (int r = 0; r < MV_R; r++) wr[r] = (const uint4 *)(W + (size_t)min(r0 + r, rows - 1) * cols);
        float acc[MV_R][NB];
#pragma unroll
        for (int r = 0; r < MV_R; r++)
#pragma unroll
            for (int t = 0; t < NB; t++) acc[r][t] = 0.f;
        for (int v0 = lane; v0 < nvec; v0 += 32 * MU) {
            uint4 q[MV_R][MU];
#pragma unroll
            for (int u = 0; u < MU; u++)
#pragma unroll
                for (int r = 0; r < MV_R; r++)
                    if (v0 + 32 * u < nvec) q[r][u] = ld_stream(wr[r] + v0 + 32 * u);
#pragma unroll
            for (int u = 0; u < MU; u++) {
                const int v = v0 + 32 * u;
                if (v >= nvec) break;
                float f[MV_R][VPV];
#pragma unroll
                for (int r = 0; r < MV_R; r++) unpack_vec<WT>(q[r][u], f[r]);
#pragma unroll
                for (int t = 0; t < NB; t++) {
                    if (t >= n) break;
                    const float4 *xp = (const float4 *)(x + (size_t)t * cols + (size_t)v * VPV);
#pragma unroll
                    for (int i = 0; i < VPV / 4; i++) {
                        float4 xv = __ldg(xp + i);
#pragma unroll
                        for (int r = 0; r < MV_R; r++) {
                            float d = acc[r][t];
                            d = fmaf(f[r][4 * i], xv.x, d); d = fmaf(f[r][4 * i + 1], xv.y, d);
                            d = fmaf(f[r][4 * i + 2], xv.z, d); d = fmaf(f[r][4 * i + 3], xv.w, d);
                            acc[r][t] = d;
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MV_R; r++)
#pragma unroll
            for (int t = 0; t < NB; t++) {
                if (t >= n) break;
                float a = warp_sum(acc[r][t]);
                if (lane == 0 && r0 + r < rows) y[(size_t)t * rows + r0 + r] = a + (bias ? bias[r0 + r] : 0.f);
            }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* matrix-vector products on int8 activations (decode, n <= MV_I8_MAX rows of x): x is first
 * quantized per group of 32 values (k_quant_x: int8 codes, scale amax/127, and the scaled code
 * sum); then each lane takes one group of 32 weights of a row (q4: 16 bytes, q8: 32 bytes) and
 * multiplies codes with DP4A: sum (s q + b) x ~= s dx sum(q xi) + b dx sum(xi) (the group-bias
 * term uses the quantized activation sum, as the CPU's fast path does, so the zero-point does
 * not amplify the rounding). Rows of several weights sharing x (q/k/v, gate/up) go in one
 * launch (mv_set). Error: about 1e-3 of a row's scale, like bf16 activations. */

#define MV_I8_MAX 16
static_assert(MV_I8_MAX == MV_I8_MAX_SW, "MLXCEL_CUDA_MV_MMA's range is the int8 matvecs'");

__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {   /* u8x4 . s8x4 + c */
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
/* x's 32 int8 values of a group (xa, xb) as 8 words; for q4 (BITS 4) in nibble order: word 2h holds
 * values 8h + 0, 2, 4, 6, word 2h + 1 the odd ones, so that a code word's low and high nibbles
 * multiply them without byte permutes (dot_q4n; the integer dot products are the same) */
template <int BITS>
__device__ __forceinline__ void x_words(const uint4 xa, const uint4 xb, uint32_t *xw) {
    const uint32_t v[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
    for (int h = 0; h < 4; h++) {
        xw[2 * h] = BITS == 4 ? __byte_perm(v[2 * h], v[2 * h + 1], 0x6420) : v[2 * h];
        xw[2 * h + 1] = BITS == 4 ? __byte_perm(v[2 * h], v[2 * h + 1], 0x7531) : v[2 * h + 1];
    }
}
/* the integer dot product of a group's 32 q4 codes (16 bytes, two a byte) with x's words in nibble
 * order (x_words<4>), and of 32 q8 codes (two 16-byte vectors) with x's words in order */
__device__ __forceinline__ int dot_q4n(const uint4 w, const uint32_t *xw) {
    const uint32_t wd[4] = {w.x, w.y, w.z, w.w};
    int ia = 0;
#pragma unroll
    for (int h = 0; h < 4; h++) {
        ia = dp4a_us(wd[h] & 0x0f0f0f0fu, xw[2 * h], ia);
        ia = dp4a_us((wd[h] >> 4) & 0x0f0f0f0fu, xw[2 * h + 1], ia);
    }
    return ia;
}
__device__ __forceinline__ int dot_q8(const uint4 w0, const uint4 w1, const uint32_t *xw) {
    const uint32_t wd[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    int ia = 0;
#pragma unroll
    for (int h = 0; h < 8; h++) ia = dp4a_us(wd[h], xw[h], ia);
    return ia;
}

/* warp-wide: the 32 consecutive values v of lanes 0..31 (the group of element i) to int8 codes,
 * with the scale amax/127 and the code sum times the scale */
__device__ __forceinline__ void quant_group(float v, int8_t *xq, float2 *xds, size_t i) {
    const float amax = warp_max(fabsf(v));
    const int q = __float2int_rn(v * (amax > 0.f ? 127.f / amax : 0.f));
    xq[i] = (int8_t)q;
    const int s = __reduce_add_sync(0xffffffffu, q);
    if ((threadIdx.x & 31) == 0) { float dx = amax * (1.f / 127.f); xds[i >> 5] = make_float2(dx, dx * (float)s); }
}

/* warp-wide, N groups of 32 side by side (independent shuffle chains): the lane's values v[u] to
 * int8 codes q[u], with each group's largest magnitude am[u] and code sum sq[u] (quant_group's
 * arithmetic; the caller stores them in its layout) */
template <int N>
__device__ __forceinline__ void quant_groups(const float *v, float *am, int *q, int *sq) {
#pragma unroll
    for (int u = 0; u < N; u++) am[u] = fabsf(v[u]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int u = 0; u < N; u++) am[u] = fmaxf(am[u], __shfl_xor_sync(0xffffffffu, am[u], off));
#pragma unroll
    for (int u = 0; u < N; u++) {
        q[u] = __float2int_rn(v[u] * (am[u] > 0.f ? 127.f / am[u] : 0.f));
        sq[u] = __reduce_add_sync(0xffffffffu, q[u]);
    }
}

/* x [n, K] f32 -> xq [n, K] int8, xds [n, K/32] (dx, dx * sum of codes); one warp a group */
__global__ void k_quant_x(const float *__restrict__ x, int8_t *__restrict__ xq, float2 *__restrict__ xds, int n, int K) {
    pdl_entry();
    const int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31, ng = K >> 5;
    if (gw >= n * ng) return;
    const size_t o = (size_t)(gw / ng) * K + ((size_t)(gw % ng) << 5) + lane;
    quant_group(x[o], xq, xds, o);
}

struct mv_set {           /* up to 4 weights of one format sharing x; blocks [blk0[k], blk0[k+1]) do weight k */
    const uint32_t *W[4];
    const void *S[4], *B[4];
    const float *bias[4];
    float *y[4];
    int rows[4], blk0[5], nw;
};

/* k_mv_i8<.., EPI> (MLXCEL_CUDA_I8_EPI, host pe_defer / i8e_launch): a batch-1 product of one
 * weight whose rows are a multiple of 32 with the residual add and the next rmsnorm's inputs in its
 * epilogue, as k_mv_ring<.., 4> leaves them, for the products the ring does not take (Llama-8B's
 * down, 14,336 columns): the grid and the rows of a block as without it (MV_WARPS rows, one a
 * warp, so the blocks still fit beside the kernel before and load their first weights early);
 * the blocks of a group of 32 rows count themselves in cnt[group] (the last resets it), and the
 * last one's first warp adds the residual to the group's 32 outputs (sum = a + y), stores the
 * int8 form of sum * (g + add_one) (quant_group's) and the group's sum of squares, part[group]. */
struct i8e_args {
    const float *a;               /* the residual added to y */
    float *sum;                   /* a + y (may be a itself) */
    const float *g;               /* the next norm's gamma (null: 1), plus add_one */
    float add_one;
    int8_t *oq; float2 *ods;      /* the int8 form of sum * (g + add_one) */
    float *part;                  /* each group's sum of squares of the sum */
    unsigned *cnt;                /* blocks of each group done (zero between launches) */
};
template <int BITS, typename ST, int R, int NB, bool EPI = false>
__global__ void __launch_bounds__(MV_WARPS * 32)
k_mv_i8(const mv_set set, const int8_t *__restrict__ xq, const float2 *__restrict__ xds, int cols, int gs_shift, int n,
        const i8e_args e) {
    bool waited = pdl_entry_weights_first();
    constexpr int U = 4, V = BITS / 4;   /* x-groups per lane per batch; uint4 per x-group */
    int k = 0;
#pragma unroll
    for (int i = 1; i < 4; i++) if (i < set.nw && (int)blockIdx.x >= set.blk0[i]) k = i;
    const int rows = set.rows[k], lane = threadIdx.x & 31;
    const int r0 = (((int)blockIdx.x - set.blk0[k]) * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (r0 >= rows) { if (!waited) pdl_wait(); return; }
    const int ngx = cols >> 5, ngw = cols >> gs_shift;
    const uint4 *wr[R];
    const ST *sr[R], *br[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int rr = min(r0 + r, rows - 1);
        wr[r] = (const uint4 *)(set.W[k] + (size_t)rr * (cols / (32 / BITS)));
        sr[r] = (const ST *)set.S[k] + (size_t)rr * ngw;
        br[r] = (const ST *)set.B[k] + (size_t)rr * ngw;
    }
    float acc[R][NB];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NB; t++) acc[r][t] = 0.f;
    const int pfd = c_mv_pf;
    for (int gb = lane; gb < ngx; gb += 32 * U) {
        uint4 wq[R][U][V];
        float sc[R][U], bc[R][U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int g = gb + 32 * u;
            const bool ok = g < ngx;
#pragma unroll
            for (int r = 0; r < R; r++) {
#pragma unroll
                for (int h = 0; h < V; h++) wq[r][u][h] = ok ? ld_stream(wr[r] + (size_t)g * V + h) : make_uint4(0, 0, 0, 0);
                const int wg = (g << 5) >> gs_shift;
                sc[r][u] = ok ? ld_s(sr[r] + wg) : 0.f;
                bc[r][u] = ok ? ld_s(br[r] + wg) : 0.f;
            }
        }
        /* the L2 prefetch: steps 1..pfd ahead at the first step, then step pfd ahead (none at 0) */
        for (int j = gb == lane || pfd == 0 ? 1 : pfd; j <= pfd; j++)
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int g = gb + 32 * (U * j + u);
                if (g >= ngx) break;
                const int wg = (g << 5) >> gs_shift;
#pragma unroll
                for (int r = 0; r < R; r++) {
#pragma unroll
                    for (int h = 0; h < V; h++) pf_l2(wr[r] + (size_t)g * V + h);
                    pf_l2(sr[r] + wg); pf_l2(br[r] + wg);
                }
            }
        if (!waited) { pdl_wait(); waited = true; }   /* x below is the previous kernel's output */
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int g = gb + 32 * u;
            if (g >= ngx) break;
            uint32_t wb[R][8];   /* the 32 codes of the group as bytes, in order */
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (BITS == 4) {
                    const uint32_t wd[4] = {wq[r][u][0].x, wq[r][u][0].y, wq[r][u][0].z, wq[r][u][0].w};
#pragma unroll
                    for (int h = 0; h < 4; h++) {
                        const uint32_t lo = wd[h] & 0x0f0f0f0fu, hi = (wd[h] >> 4) & 0x0f0f0f0fu;
                        wb[r][2 * h] = __byte_perm(lo, hi, 0x5140);
                        wb[r][2 * h + 1] = __byte_perm(lo, hi, 0x7362);
                    }
                } else {
                    wb[r][0] = wq[r][u][0].x; wb[r][1] = wq[r][u][0].y; wb[r][2] = wq[r][u][0].z; wb[r][3] = wq[r][u][0].w;
                    wb[r][4] = wq[r][u][V - 1].x; wb[r][5] = wq[r][u][V - 1].y; wb[r][6] = wq[r][u][V - 1].z; wb[r][7] = wq[r][u][V - 1].w;
                }
            }
#pragma unroll
            for (int t = 0; t < NB; t++) {
                if (t >= n) break;
                const uint4 *xp = (const uint4 *)(xq + (size_t)t * cols + ((size_t)g << 5));
                const uint4 xa = __ldg(xp), xb = __ldg(xp + 1);
                const float2 ds = __ldg(xds + (size_t)t * ngx + g);
                const uint32_t xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
                for (int r = 0; r < R; r++) {
                    int ia = 0;
#pragma unroll
                    for (int j = 0; j < 8; j++) ia = dp4a_us(wb[r][j], xv[j], ia);
                    acc[r][t] = fmaf(sc[r][u] * ds.x, (float)ia, fmaf(bc[r][u], ds.y, acc[r][t]));
                }
            }
        }
    }
    if (!waited) pdl_wait();   /* (no k steps: cols 0) before any write */
    const float *bias = set.bias[k];
    float *y = set.y[k];
    if constexpr (EPI) {   /* (R 1, NB 1, one weight, rows a multiple of 32: every warp has a row) */
        static_assert(R == 1 && NB == 1 && 32 % MV_WARPS == 0, "EPI: a row a warp, whole groups of blocks");
        __shared__ float eo[MV_WARPS];
        __shared__ bool elast;
        const int wid = (int)(threadIdx.x >> 5), rb = r0 - wid, gi = rb >> 5, i = (gi << 5) + lane;
        const float v = warp_sum(acc[0][0]) + (bias ? bias[r0] : 0.f);
        /* warp 0: the group's residual and gamma, loaded now (their round trip overlaps the count's) */
        float ea = 0.f, eg = 1.f;
        if (wid == 0) { ea = e.a[i]; eg = e.g ? e.g[i] + e.add_one : 1.f; }
        if (lane == 0) { y[r0] = v; eo[wid] = v; __threadfence(); }
        __syncthreads();
        if (threadIdx.x == 0) {
            elast = atomicAdd(e.cnt + gi, 1u) == 32 / MV_WARPS - 1;
            if (elast) e.cnt[gi] = 0;
        }
        __syncthreads();
        if (!elast || wid) return;
        __threadfence();
        const float h = ea + (i >= rb && i < rb + MV_WARPS ? eo[i - rb] : __ldcg(y + i));
        e.sum[i] = h;
        const float ss = warp_sum(h * h);
        quant_group(h * eg, e.oq, e.ods, (size_t)i);
        if (lane == 0) e.part[gi] = ss;
        return;
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NB; t++) {
            if (t >= n) break;
            const float a = warp_sum(acc[r][t]);
            if (lane == 0 && r0 + r < rows) y[(size_t)t * rows + r0 + r] = a + (bias ? bias[r0 + r] : 0.f);
        }
}

/* ------------------------------------------------------------------------------------------ */
/* mma.sync m16n8k16, bf16 in, f32 accumulate: d += a b */
__device__ __forceinline__ void gm_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* a warp's 16 rows x 8 NT tokens of results to y[token][row] (+ bias when not null) */
template <int NT>
__device__ __forceinline__ void gm_store(const float (*acc)[4], const float *__restrict__ bias, float *__restrict__ y,
                                         int rows, int n, int m0, int n0, int g, int c) {
    const int r0 = m0 + g, r1 = m0 + g + 8;
    const float b0 = bias && r0 < rows ? bias[r0] : 0.f, b1 = bias && r1 < rows ? bias[r1] : 0.f;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int tk = n0 + t * 8 + c;   /* C: rows g / g+8, tokens c, c+1 */
        if (r0 < rows) {
            if (tk < n) y[(size_t)tk * rows + r0] = acc[t][0] + b0;
            if (tk + 1 < n) y[(size_t)(tk + 1) * rows + r0] = acc[t][1] + b0;
        }
        if (r1 < rows) {
            if (tk < n) y[(size_t)tk * rows + r1] = acc[t][2] + b1;
            if (tk + 1 < n) y[(size_t)(tk + 1) * rows + r1] = acc[t][3] + b1;
        }
    }
}

/* cp.async: 16 bytes global -> shared without a register round trip; groups committed and waited.
 * The _sa forms take the shared-memory address as a 32-bit value (no conversion at each copy, for
 * loops that work their addresses out once); the others convert a generic pointer. */
__device__ __forceinline__ void cp_async16_sa(unsigned sa, const void *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
/* zero fill: src_bytes 0 writes 16 zero bytes (nothing read) */
__device__ __forceinline__ void cp_async16z_sa(unsigned sa, const void *gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(gmem), "r"(src_bytes) : "memory");
}
/* 4 bytes, zero fill as above (src_bytes 0 or 4) */
__device__ __forceinline__ void cp_async4z_sa(unsigned sa, const void *gmem, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(sa), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    cp_async16_sa((unsigned)__cvta_generic_to_shared(smem), gmem);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ void cp_async4z(void *smem, const void *gmem, int src_bytes) {
    cp_async4z_sa((unsigned)__cvta_generic_to_shared(smem), gmem, src_bytes);
}
__device__ __forceinline__ void cp_async16z(void *smem, const void *gmem, int src_bytes) {
    cp_async16z_sa((unsigned)__cvta_generic_to_shared(smem), gmem, src_bytes);
}

/* mbarriers and bulk copies (sm_90): the rings, the fused decode kernel, k_gemm_wg's TMA form */
__device__ __forceinline__ uint32_t fd_sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void fd_mbar_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(fd_sa(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void fd_mbar_expect(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fd_sa(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void fd_mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(fd_sa(b)) : "memory");
}
__device__ __forceinline__ uint64_t fd_now() { uint64_t t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t; }
/* (a wait of 10 s stops the kernel: a broken invariant, which would otherwise hang the device) */
__device__ __forceinline__ void fd_mbar_wait(uint64_t *b, uint32_t parity) {
    uint32_t ok = 0;
    uint64_t t0 = 0;
    for (int spin = 0; !ok; spin++) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok) : "r"(fd_sa(b)), "r"(parity) : "memory");
        if (!ok && (spin & 255) == 255) {
            const uint64_t t = fd_now();
            if (!t0) t0 = t; else if (t - t0 > 10000000000ull) __trap();
        }
    }
}
__device__ __forceinline__ void fd_bulk(void *dst, const void *src, uint32_t bytes, uint64_t *bar, uint64_t pol) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 ::"r"(fd_sa(dst)), "l"(src), "r"(bytes), "r"(fd_sa(bar)), "l"(pol) : "memory");
}
/* the _sa forms of k_gemm_wg's TMA form: shared-memory addresses as 32-bit values. A 2D box of a
 * tensor map (a CUtensorMap kernel parameter, __grid_constant__) at element coordinates (c0, c1);
 * a plain bulk copy (16-byte multiples); both complete on the mbarrier bar as bytes */
__device__ __forceinline__ void tma2d_sa(unsigned dst, const void *map, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_sa(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

/* q4 GEMM on tensor cores with the packed weights read once and dequantized in registers
 * (where gq_rows takes it: by default 17..64 rows, and up to 128 for >= 4096 columns): y_k[n, rows_k] = x[n, cols] W_k^T for the up to 4 weights of a set
 * (q/k/v, gate/up) in one launch.
 *
 * The k order inside the mma fragments is free as long as the weights and x agree, so it is
 * chosen to fit the packed words: lane (g, cq) of a warp holds words 2cq and 2cq + 1 of a 64-wide
 * k step (codes 16cq .. 16cq + 15, always one group: gs >= 16) of its rows g and g + 8; a word's
 * nibbles p and p + 4 become one bf16 pair with a mask, an OR under the exponent of 128, one
 * subtract and one fma with the group's scale and bias (exact up to the final bf16 rounding, as
 * the dequantize kernels). Logical k L = 16s + 8h + 2cq + e of the step (mma k step s, fragment
 * half h, element e) is code P = 16cq + 8(s >> 1) + 2(s & 1) + h + 4e; x is written in that
 * order by k_cvt_gq (gq_perm), so its tiles load with ldmatrix unchanged.
 *
 * Block: 4 warps along rows (GQ_WR = 32 rows each: two row tiles share every x fragment, so
 * that ldmatrix reads 128 bytes of shared memory per mma; GQ_BM = 128) x BN / 64 warps along
 * tokens (64 each: 8 mma tiles of 8 tokens); GQ_ST stages of packed weights (GQ_BM rows x 32
 * bytes) and x (BN tokens x 64 values, rows padded to 144 bytes so that ldmatrix rows fall on
 * distinct banks) copied by cp.async while earlier stages compute. k may be split over blockIdx.z (partial sums, added
 * in split order by k_gq_sum). */
#define GQ_WR 32   /* weight rows a warp (two row tiles of 16) */
#define GQ_BM (4 * GQ_WR)
#define GQ_BK 64
#define GQ_ST 4
#define GQ_XS 72   /* x tile row stride in bf16 */
#define GQ_NMAX 128


__device__ __forceinline__ int gq_perm(int P) {   /* code P of a 64-wide step -> its logical k */
    const int cq = P >> 4, sh = (P >> 3) & 1, q = P & 7, e = q >> 2, p = q & 3;
    return 16 * (2 * sh + (p >> 1)) + 8 * (p & 1) + 2 * cq + e;
}

/* element i of row-major activations (rows of a multiple of 64) into their bf16 gq-order copy */
__device__ __forceinline__ void st_gq(__nv_bfloat16 *xg, size_t i, float v) {
    xg[(i & ~(size_t)63) + gq_perm((int)(i & 63))] = __float2bfloat16(v);
}

/* the activation of act_mul (an mx_act), also k_gemm_wg's fused gate/up epilogue */
__device__ __forceinline__ float act_f(int act, float g) {
    switch (act) {
    case MX_ACT_SILU: return g / (1.f + expf(-g));
    case MX_ACT_GELU_TANH: return g / (1.f + expf(-1.5957691216057308f * (g + 0.044715f * g * g * g)));
    case MX_ACT_GELU: return 0.5f * g * erfcf(g * -0.7071067811865476f);
    default: return g > 0.f ? g : 0.f;
    }
}

/* x [n, cols] f32 -> bf16 with each 64-wide step in gq_perm order */
__global__ void k_cvt_gq(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y, int64_t total) {
    pdl_entry();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) st_gq(y, (size_t)i, x[i]);
}

/* nibbles p and p + 4 of w as the bf16 pair (s q + b); bf16 scales: in bf16x2 arithmetic,
 * f16 scales: in f32 */
__device__ __forceinline__ uint32_t gq_deq(uint32_t w, int p, __nv_bfloat162 s2, __nv_bfloat162 b2) {
    uint32_t t;   /* (128 + q0, 128 + q1): (w & mask) | exponent in one LOP3 (ptxas made it two) */
    asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xEA;" : "=r"(t) : "r"(w >> (4 * p)));
    __nv_bfloat162 v;
    memcpy(&v, &t, 4);
    v = __hfma2(__hsub2(v, __float2bfloat162_rn(128.f)), s2, b2);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}
__device__ __forceinline__ uint32_t gq_deq(uint32_t w, int p, float2 sb) {
    const float f0 = fmaf(sb.x, (float)((w >> (4 * p)) & 15u), sb.y), f1 = fmaf(sb.x, (float)((w >> (4 * p + 16)) & 15u), sb.y);
    __nv_bfloat162 h = __floats2bfloat162_rn(f0, f1);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
template <typename ST> struct gq_sc;   /* a row's scale and bias in the form gq_deq takes */
template <> struct gq_sc<__nv_bfloat16> {
    __nv_bfloat162 s, b;
    __device__ void load(const void *S, const void *B, size_t i) {
        const __nv_bfloat16 sv = ((const __nv_bfloat16 *)S)[i], bv = ((const __nv_bfloat16 *)B)[i];
        s = __halves2bfloat162(sv, sv); b = __halves2bfloat162(bv, bv);
    }
    __device__ void load_pair(uint32_t v) {   /* scale in the low half, bias in the high */
        const uint32_t ss = __byte_perm(v, 0, 0x1010), bb = __byte_perm(v, 0, 0x3232);
        memcpy(&s, &ss, 4); memcpy(&b, &bb, 4);
    }
    __device__ uint32_t deq(uint32_t w, int p) const { return gq_deq(w, p, s, b); }
};
template <> struct gq_sc<__half> {
    float2 sb;
    __device__ void load(const void *S, const void *B, size_t i) {
        sb = make_float2(__half2float(((const __half *)S)[i]), __half2float(((const __half *)B)[i]));
    }
    __device__ void load_pair(uint32_t v) {
        __half2 h;
        memcpy(&h, &v, 4);
        sb = __half22float2(h);
    }
    __device__ uint32_t deq(uint32_t w, int p) const { return gq_deq(w, p, sb); }
};

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *smem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

template <int BN, typename ST>
__global__ void __launch_bounds__(128 * (BN / 64), BN == 128 ? 2 : 3)
k_gemm_gq(const gq_set set, const __nv_bfloat16 *__restrict__ x, int cols, int n, int gs_shift, int kchunk,
          float *__restrict__ part) {
    pdl_entry();
    constexpr int T = 128 * (BN / 64), WSZ = GQ_BM * 8, XSZ = BN * GQ_XS;   /* u32 words, bf16 values a stage */
    extern __shared__ __align__(16) unsigned char gq_smem[];
    uint32_t *wsm = (uint32_t *)gq_smem;
    __nv_bfloat16 *xsm = (__nv_bfloat16 *)(gq_smem + GQ_ST * WSZ * 4);
    int k = 0;
#pragma unroll
    for (int i = 1; i < 4; i++) if (i < set.nw && (int)blockIdx.x >= set.blk0[i]) k = i;
    const int rows = set.rows[k], tid = threadIdx.x, lane = tid & 31, wm = (tid >> 5) & 3, wn = tid >> 7;
    const int g = lane >> 2, cq = lane & 3;
    const int mb = ((int)blockIdx.x - set.blk0[k]) * GQ_BM, nb = blockIdx.y * BN;
    const uint32_t *W = set.W[k];
    const int wpr = cols / 8, ngw = cols >> gs_shift;
    const int kbeg = blockIdx.z * kchunk, kend = min(cols, kbeg + kchunk), nk = (kend - kbeg) / GQ_BK;
    auto issue = [&](int it) {
        const int st = it % GQ_ST, k0 = kbeg + it * GQ_BK;
#pragma unroll
        for (int u = tid; u < GQ_BM * 2; u += T) {   /* GQ_BM rows x 2 halves of 16 bytes */
            const int r = u >> 1, h = u & 1;
            cp_async16(&wsm[st * WSZ + r * 8 + h * 4], W + (size_t)min(mb + r, rows - 1) * wpr + k0 / 8 + h * 4);
        }
#pragma unroll
        for (int u = tid; u < BN * 8; u += T) {   /* BN tokens x 8 pieces of 16 bytes */
            const int t = u >> 3, c8 = u & 7, tk = nb + t;
            cp_async16z(&xsm[st * XSZ + t * GQ_XS + c8 * 8], x + (size_t)min(tk, n - 1) * cols + k0 + c8 * 8, tk < n ? 16 : 0);
        }
    };
#pragma unroll
    for (int st = 0; st < GQ_ST - 1; st++) {
        if (st < nk) issue(st);
        cp_async_commit();
    }
    /* this lane's rows: g + 8 j of the warp's GQ_WR rows (j = 2 m + h: row tile m, fragment half h) */
    constexpr int NR = GQ_WR / 8;
    size_t so[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) so[j] = (size_t)min(mb + wm * GQ_WR + g + 8 * j, rows - 1) * ngw;
    gq_sc<ST> sc[NR], scn[NR];
    {
        const int gi = (kbeg + 16 * cq) >> gs_shift;
#pragma unroll
        for (int j = 0; j < NR; j++) sc[j].load(set.S[k], set.B[k], so[j] + gi);
    }
    float acc[NR / 2][8][4];
#pragma unroll
    for (int m = 0; m < NR / 2; m++)
#pragma unroll
        for (int t = 0; t < 8; t++) acc[m][t][0] = acc[m][t][1] = acc[m][t][2] = acc[m][t][3] = 0.f;
    /* this lane's ldmatrix row: matrix lane >> 3 (tokens + 8 for matrices 2, 3; k + 8 for 1, 3) */
    const int lrow = wn * 64 + ((lane >> 4) << 3) + (lane & 7), lk = ((lane >> 3) & 1) * 8;
    for (int it = 0; it < nk; it++) {
        cp_async_wait<GQ_ST - 2>();
        __syncthreads();   /* step it landed for all; step it - 1's buffers are free again */
        if (it + GQ_ST - 1 < nk) issue(it + GQ_ST - 1);
        cp_async_commit();
        if (it + 1 < nk) {
            const int gi = (kbeg + (it + 1) * GQ_BK + 16 * cq) >> gs_shift;
#pragma unroll
            for (int j = 0; j < NR; j++) scn[j].load(set.S[k], set.B[k], so[j] + gi);
        }
        const int st = it % GQ_ST;
        uint2 wv[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) wv[j] = *(const uint2 *)&wsm[st * WSZ + (wm * GQ_WR + g + 8 * j) * 8 + 2 * cq];
        const __nv_bfloat16 *xs = xsm + st * XSZ + lrow * GQ_XS + lk;
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const int p = 2 * (s & 1);
            uint32_t a[NR / 2][4];
#pragma unroll
            for (int m = 0; m < NR / 2; m++) {
                const uint32_t wl = (s >> 1) ? wv[2 * m].y : wv[2 * m].x, wh = (s >> 1) ? wv[2 * m + 1].y : wv[2 * m + 1].x;
                a[m][0] = sc[2 * m].deq(wl, p); a[m][1] = sc[2 * m + 1].deq(wh, p);
                a[m][2] = sc[2 * m].deq(wl, p + 1); a[m][3] = sc[2 * m + 1].deq(wh, p + 1);
            }
#pragma unroll
            for (int t2 = 0; t2 < 4; t2++) {
                uint32_t b[4];
                ldsm_x4(b, xs + t2 * 16 * GQ_XS + 16 * s);
#pragma unroll
                for (int m = 0; m < NR / 2; m++) {
                    gm_mma(acc[m][2 * t2], a[m], b[0], b[1]);
                    gm_mma(acc[m][2 * t2 + 1], a[m], b[2], b[3]);
                }
            }
        }
        if (it + 1 < nk) {
#pragma unroll
            for (int j = 0; j < NR; j++) sc[j] = scn[j];
        }
    }
    cp_async_wait<0>();
    if (gridDim.z == 1) {
#pragma unroll
        for (int m = 0; m < NR / 2; m++)
            gm_store<8>(acc[m], set.bias[k], set.y[k], rows, n, mb + wm * GQ_WR + 16 * m, nb + wn * 64, g, 2 * cq);
        return;
    }
    /* split k: this split's partial sums to part[z] (the weights' outputs one after another, n x
     * rows_k each), added in split order by k_gq_sum */
    const size_t ptot = (size_t)n * set.rb[set.nw], pk = (size_t)n * set.rb[k];
#pragma unroll
    for (int m = 0; m < NR / 2; m++)
        gm_store<8>(acc[m], nullptr, part + blockIdx.z * ptot + pk, rows, n, mb + wm * GQ_WR + 16 * m, nb + wn * 64, g, 2 * cq);
}

/* the split-k partial sums of k_gemm_gq summed in split order (deterministic) + bias into y_k
 * (a kernel of its own: the last block of a tile adding them alone was 2.5x slower on the
 * Qwen3-0.6B shapes, one multiprocessor reading all splits of a tile) */
__global__ void k_gq_sum(const gq_set set, const float *__restrict__ part, int nsplit, int n) {
    pdl_entry();
    const int64_t total = (int64_t)n * set.rb[set.nw], i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int k = 0;
#pragma unroll
    for (int j = 1; j < 4; j++) if (j < set.nw && i >= (int64_t)n * set.rb[j]) k = j;
    const int64_t li = i - (int64_t)n * set.rb[k];
    float a = 0.f;
    for (int z = 0; z < nsplit; z++) a += part[(size_t)z * total + i];
    set.y[k][li] = a + (set.bias[k] ? set.bias[k][li % set.rows[k]] : 0.f);
}
/* k_gq_sum four values a thread (every weight's rows a multiple of 4, outputs 16-byte aligned):
 * the same sums in the same order (Llama-8B o projection at 128 rows: 7.2 us in scalar form) */
__global__ void k_gq_sum4(const gq_set set, const float *__restrict__ part, int nsplit, int n) {
    pdl_entry();
    const int64_t total = (int64_t)n * set.rb[set.nw], i = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= total) return;
    int k = 0;
#pragma unroll
    for (int j = 1; j < 4; j++) if (j < set.nw && i >= (int64_t)n * set.rb[j]) k = j;
    const int64_t li = i - (int64_t)n * set.rb[k];
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int z = 0; z < nsplit; z++) {
        const float4 p = __ldcs((const float4 *)(part + (size_t)z * total + i));   /* read once */
        a.x += p.x; a.y += p.y; a.z += p.z; a.w += p.w;
    }
    if (set.bias[k]) {
        const float *b = set.bias[k] + li % set.rows[k];
        a.x += b[0]; a.y += b[1]; a.z += b[2]; a.w += b[3];
    } else {
        a.x += 0.f; a.y += 0.f; a.z += 0.f; a.w += 0.f;   /* k_gq_sum's "+ 0.f" without a bias */
    }
    *(float4 *)(set.y[k] + li) = a;
}

/* The same product as k_gemm_gq (q4 weights read packed, dequantized in registers in the gq k
 * order; x in gq order), with Hopper's warpgroup MMA (wgmma, sm_90a) instead of mma.sync; the
 * default on an sm_90 GPU (gq_gemm).
 * Block: NWG warpgroups of 4 warps, 64 weight rows each (BM = 64 NWG rows: 256 for weights of
 * >= 4096 columns, 128 below), all BN tokens (64 or 128). A k16 step of a warpgroup is one
 * wgmma.m64nBNk16: its A operand is the warps' dequantized weights in registers (warp w's 16 rows
 * in mma.sync's m16n8k16 A layout, so the gq k order holds unchanged), its B operand the x tile,
 * read by the tensor cores straight from shared memory through a matrix descriptor: no ldmatrix,
 * and one instruction does the work of BN / 8 mma.sync a warp. The accumulators are laid out as
 * mma.sync's C, tile by tile of 8 tokens (tools/cuda_probe/wgmma_probe.cu checked both layouts
 * and the descriptor on the H200).
 * x tile of a stage: no swizzle, K-major "core matrices" of 8 tokens x 8 k (16 bytes a token, 128
 * bytes each); core (k / 8, t / 8) at byte (t / 8) * 1024 + (k / 8) * 128, so a k16 step is 2
 * cores along k (the descriptor's LBO = 128) by BN / 8 along tokens (SBO = 1024).
 * wgmma runs asynchronously. The 32- and 64-token tiles dequantize a k step's 16 A words at once
 * and issue its four wgmmas back to back as one group, waited for (wait_group 0) before the next
 * step writes the words again, a block barrier and the copies' issue later; the 128-token tiles
 * (64 accumulators a thread: no room for 16 words) alternate two sets of 4, each wgmma its own
 * group, waited (wait_group 1) before its set is written again. x and weight stages are refilled
 * WG_ST - 2 stages ahead, so the buffer a refill overwrites was read by a wgmma that had completed
 * before the block barrier. cp.async writes are made visible to the tensor cores (the
 * async proxy) by fence.proxy.async before that barrier.
 * Scales and biases come from cu_weight.sbp, (scale, bias) pairs group-major, so that a warp's 8
 * rows of a group are one 32-byte sector (the [row][group] arrays cost a sector a row and stage).
 * What limits it (ncu, Llama-8B at 128 rows): L2 traffic of the x tiles (16 KB a stage for 8 KB of
 * weights); without any copies the same loop runs at ~485 TFLOP/s, with them ~240. Each block
 * starts its k loop at its own step (set.rot), so that the blocks do not all copy the same x tile
 * at once: gate/up 126.5 -> 103.4 us, 290 TFLOP/s. (Sharing x tiles among the blocks of a thread
 * block cluster through distributed shared memory was slower: NOTES.md.) */
/* stages: 7 (4 warpgroups) or 5 (2, two blocks a multiprocessor). (The 32- and 64-token tiles'
 * stages are smaller, so more would fit: 12 / 10 on 4 warpgroups, 10 / 7 on 2 were 2-4% slower at
 * 17-64 rows on an H100, the fortieth session; bn is kept for such a choice.) */
#define WG_ST(bn, nwg) ((nwg) == 4 ? 7 : 5)
#define STRK_TILES 4096   /* stream-K: tiles of a launch at most (its counters) */
#define WG_XB(bn) ((bn) * GQ_BK * 2)   /* bytes of an x stage */
#define WG_WB(nwg) ((nwg) * 64 * 32)   /* bytes of a weight stage */
#define WG_SB(nwg) (4 * (nwg) * 64 * 4)   /* bytes of a stage's (scale, bias) pairs: up to 4 groups x the rows */
#define WG_STB(bn, nwg) ((size_t)WG_ST(bn, nwg) * (WG_XB(bn) + WG_WB(nwg) + WG_SB(nwg)))   /* the stages' bytes */
#define WG_SMEM(bn, nwg) (WG_STB(bn, nwg) + 256)   /* + the TMA form's mbarriers (2 a stage) */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {   /* no swizzle, LBO 128, SBO 1024 */
    return (uint64_t)((saddr >> 4) & 0x3FFF) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32);
}
/* the TMA forms' x stage: one box of 64 columns x BN tokens, 128 bytes a token, with the 128-byte
 * swizzle (the 16-byte pieces of token t's row XORed with t % 8; the stage 1024-aligned): SBO 1024
 * (8 tokens), LBO unused; a k16 step is 32 bytes on inside the swizzled row */
__device__ __forceinline__ uint64_t wg_desc_sw(uint32_t saddr) {
    return (uint64_t)((saddr >> 4) & 0x3FFF) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
#define WG_D8(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
template <int BN> __device__ __forceinline__ void wg_mma(float *d, const uint32_t *a, uint64_t desc);
template <> __device__ __forceinline__ void wg_mma<32>(float *d, const uint32_t *a, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "{%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
                 : WG_D8(0), WG_D8(8)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
template <> __device__ __forceinline__ void wg_mma<64>(float *d, const uint32_t *a, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
                 : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
template <> __device__ __forceinline__ void wg_mma<128>(float *d, const uint32_t *a, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
                 : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
#undef WG_D8
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
#endif

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

struct wg_maps {   /* k_gemm_wg's TMA form: the set's weights (boxes of 8 words x BM rows) and x's */
    CUtensorMap w[4], x;
};
template <int BN, int NWG, typename ST, bool PAIR = false, bool SK = false, int TM = 0>
__global__ void __launch_bounds__(128 * NWG, NWG == 2 ? 2 : 1)
k_gemm_wg(const gq_set set, const __nv_bfloat16 *__restrict__ x, int cols, int n, int gs_shift, int kchunk,
          float *__restrict__ part, const __grid_constant__ wg_maps tm) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    pdl_entry();
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    constexpr int NST = WG_ST(BN, NWG), WG_D = NST - 2, T = 128 * NWG, BM = 64 * NWG, WWB = WG_WB(NWG);
    /* shared memory: NST x tiles, then NST weight stages (BM rows x 8 words), then NST stages of
     * (scale, bias) pairs ([group][BM rows]) */
    /* PAIR (gate/up with the activation fused, nw = 2, equal rows; experimental, off by default:
     * as fast as the two launches so far, NOTES.md): block b takes rows [b BM / 2, (b + 1) BM / 2) of both weights, gate
     * in the first half of its warpgroups, up in the second, and multiplies them in its epilogue
     * (k_act_mul's arithmetic) */
    constexpr int HB = PAIR ? BM / 2 : BM;   /* rows of a weight in a block */
    const int tid = threadIdx.x, lane = tid & 31, wr = tid >> 5;   /* wr: 16-row slice of the block */
    const int g = lane >> 2, cq = lane & 3, nb = blockIdx.y * BN, wpr = cols / 8, nka = cols / GQ_BK;
    const int ng = gs_shift >= 6 ? 1 : GQ_BK >> gs_shift;   /* groups of (scale, bias) a k step */
    /* stream-K (SK, with set.strk; one tile of tokens, no split, not PAIR): the (tile, k step) units of the
     * launch in tile-major order, dealt evenly to the blocks ([b U / G, (b + 1) U / G) to block b),
     * so that a launch of fewer tiles than multiprocessors (gate/up of Llama-8B: 112 on 132) keeps
     * them all busy. A block's run is segments: the end of a tile (the block's first segment),
     * whole tiles, and the start of a tile (its last). A tile's later parts go to their blocks'
     * slots of part (each block writes at most one, its first segment) and count up set.strk[tile];
     * the block of the tile's first part (the last to come to it, at the end of its run) waits for
     * them, adds them in k order (deterministic) and stores the tile. Every block of the grid is
     * resident at once (G <= the slots of the occupancy), so the wait ends. */
    static_assert(!(SK && PAIR), "stream-K has no fused pair form");
    /* TM: 0 every stage by cp.async; 1 the TMA form below; 2 x alone by TMA (its box and the
     * full mbarrier as in 1), the weights and pairs by cp.async with the block barrier as in 0 */
    constexpr bool TMA = TM == 1, XT = TM >= 1;
    static_assert(!(TMA && (PAIR || BN > 64)) && !(XT && PAIR), "the TMA forms: no fused pair form; 1: 32- and 64-token tiles");
    /* TMA: the stages are filled by the tensor memory accelerator, issued by thread 0: a step's
     * weights as one box of W's map (BM rows x 8 words, the cp.async form's layout; rows past the
     * weight's read as zeros), x as one box of 64 columns x BN tokens, swizzled (tokens past n
     * zeros: wg_desc_sw) and the (scale, bias) pairs as one bulk copy a group,
     * all completing on the stage's "full" mbarrier. Each warp releases a stage on its "empty"
     * mbarrier once its wgmmas that read it have completed; thread 0 waits for that before it
     * refills the stage. No block barrier in the k loop, and no per-thread copies (~770 cp.async
     * a step a block in the other form). The stages and their phases run on across stream-K's
     * segments (tst, tround: thread 0's next stage to fill and how many times it went round; tcs,
     * tph: the next stage to read and its phase). Not in the 128-token tiles, which keep a wgmma
     * in flight through the loop: a release between two made ptxas serialize them (C7513). */
    uint64_t *const fullb = (uint64_t *)(wg_smem + WG_STB(BN, NWG)), *const emptyb = fullb + NST;
    [[maybe_unused]] int tst = 0, tround = 0, tcs = 0;
    [[maybe_unused]] unsigned tph = 0, xph = 0;   /* xph (TM 2): bit st, the phase of stage st's next x */
    if constexpr (XT) {
        if (tid == 0) {
            for (int i = 0; i < NST; i++) { fd_mbar_init(fullb + i, 1); fd_mbar_init(emptyb + i, T / 32); }
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        if constexpr (!SK) __syncthreads();   /* (stream-K's below) */
    }
    /* the block's next unit: in shared memory, not a register held through the k loop (the
     * stream-K form is at the 128-register bound; held, it spilled in the loop) */
    __shared__ int sk_next;
    if constexpr (SK) {
        if (tid == 0) sk_next = (int)((int64_t)blockIdx.x * (set.blk0[set.nw] * nka) / gridDim.x);
        __syncthreads();
    }
    for (;;) {   /* segments (without stream-K: one) */
    int tile, kbeg, nk;
    if constexpr (SK) {
        const int su = *(volatile int *)&sk_next, su_end = (int)((int64_t)(blockIdx.x + 1) * (set.blk0[set.nw] * nka) / gridDim.x);
        /* TMA: no block barrier in the k loop, so thread 0 could otherwise write the next unit
         * (after a short segment) before every thread has read this one */
        if constexpr (TMA) __syncthreads();
        if (su >= su_end) return;
        tile = su / nka;
        const int ka = su - tile * nka;
        nk = min(nka - ka, su_end - su);
        kbeg = ka * GQ_BK;
    } else {
        tile = blockIdx.x;
        kbeg = blockIdx.z * kchunk;
        nk = (min(cols, kbeg + kchunk) - kbeg) / GQ_BK;
    }
    int k = 0;
#pragma unroll
    for (int i = 1; i < 4; i++) if (!PAIR && i < set.nw && tile >= set.blk0[i]) k = i;
    const int rows = set.rows[k];
    const int mb = (tile - set.blk0[k]) * HB;
    const uint32_t *W = set.W[k];
    const int kw = PAIR && 16 * wr >= HB ? 1 : k;                  /* the warp's weight (PAIR: rows alike) */
    const int wrow = PAIR ? mb + 16 * wr - kw * HB : mb + 16 * wr; /* the warp's first row in its weight */
    /* the k step of iteration it: rotated by the block's index (set.rot), so that the blocks do not
     * all read the same x tile from L2 at the same time (stream-K's segments start apart anyway) */
    const int r0it = !SK && set.rot && nk > 0 ? (int)(blockIdx.x % (unsigned)nk) : 0;
    /* What this thread copies into a stage, worked out once a segment; a copy then adds the k step's
     * k0 and the stage's offset. (Recomputed at every copy, with the stage as it % NST, that
     * integer work was more than half of the loop's instructions: SASS of the 32-row form, ~275 a
     * thread a k step for 32 weights.) Shared-memory addresses as 32-bit values. */
    const unsigned smb = (unsigned)__cvta_generic_to_shared(wg_smem);
    const unsigned wsb = smb + NST * WG_XB(BN), sbb = wsb + NST * WWB;   /* the weight stages, the pairs' */
    static_assert(T % (2 * BN) == 0, "a thread's x pieces: one token, columns T / BN pieces apart");
    constexpr int XI = BN * 8 >= T ? BN * 8 / T : 1;   /* x's 16-byte pieces a thread a stage */
    const bool xon = BN * 8 >= T || tid < BN * 8;       /* (32 tokens on 4 warpgroups: half the threads) */
    const uint32_t *wsrc;            /* weights: row tid / 2, half tid % 2 (BM rows x 2 halves of 16 bytes) */
    unsigned wdst;
    {
        const int r = tid >> 1, h = tid & 1;
        if constexpr (PAIR) {   /* (gate's HB rows, then up's) */
            const int kr = r >= HB ? 1 : 0;
            wsrc = set.W[kr] + (size_t)min(mb + r - kr * HB, rows - 1) * wpr + h * 4;
        } else {
            wsrc = W + (size_t)min(mb + r, rows - 1) * wpr + h * 4;
        }
        wdst = wsb + (r * 8 + h * 4) * 4;
    }
    const __nv_bfloat16 *xsrc;   /* x: token t, pieces c8, c8 + T / BN, ..; lane pairs read 32 bytes */
    unsigned xdst;
    int xbytes;
    {
        const int t = (tid >> 1) % BN, c8 = 2 * (tid / (2 * BN)) + (tid & 1), tk = nb + t;
        xsrc = x + (size_t)min(tk, n - 1) * cols + c8 * 8;
        xdst = smb + (t >> 3) * 1024 + c8 * 128 + (t & 7) * 16;
        xbytes = tk < n ? 16 : 0;
    }
    /* the (scale, bias) pairs of the step's groups (SB[group * rows4 + row], rows4 the rows rounded
     * up to 4 with zeros), [group][BM rows], zero past the rows: read from shared memory after the
     * stage's barrier (loaded from L2 one step ahead, their latency was the most sampled stall, ncu
     * at Llama-8B's 128 rows). Four rows' pairs a 16-byte copy, by the first ng * BM / 4 threads (one
     * pair a thread, four times the copies, stalled on the shared-memory pipe's queue: ncu's
     * mio_throttle at 32 rows) */
    const uint32_t *sbsrc;
    unsigned sbdst;
    int sbbytes;
    bool sbq;
    const int rows4 = (rows + 3) & ~3;
    {
        const int jv = tid / (BM / 4), rl = (tid % (BM / 4)) * 4, wk = PAIR ? (rl >= HB ? 1 : 0) : k, row = PAIR ? mb + rl - wk * HB : mb + rl;
        sbsrc = set.SB[wk] + (size_t)jv * rows4 + (row < rows4 ? row : 0);
        sbdst = sbb + (jv * BM + rl) * 4;
        sbbytes = row < rows4 ? 16 : 0;
        sbq = jv < ng;
    }
    /* the next k step to copy, as its first column from kbeg (the rotation wraps it to 0 once):
     * each copy's address is then a base plus a 32-bit offset (the bases hold kbeg) */
    wsrc += kbeg / 8;
    xsrc += kbeg;
    const unsigned kcend = (unsigned)nk * GQ_BK;
    unsigned kc = (unsigned)r0it * GQ_BK;
    auto issue = [&](int st) {   /* k step kc into stage st, then kc to the next */
        cp_async16_sa(wdst + st * WWB, wsrc + (kc >> 3));
        if constexpr (XT) {   /* (TM 2) x: thread 0, one box */
            if (tid == 0) {
                fd_mbar_expect(fullb + st, WG_XB(BN));
                tma2d_sa(smb + st * WG_XB(BN), &tm.x, kbeg + (int)kc, nb, fd_sa(fullb + st));
            }
            __syncwarp();   /* (the warp whole again before its wgmmas) */
        } else if (xon) {
#pragma unroll
            for (int j = 0; j < XI; j++) cp_async16z_sa(xdst + st * WG_XB(BN) + j * (T / BN) * 128, xsrc + kc + j * (T / BN) * 8, xbytes);
        }
        if (sbq) cp_async16z_sa(sbdst + st * WG_SB(NWG), sbsrc + (((unsigned)kbeg + kc) >> gs_shift) * (unsigned)rows4, sbbytes);
        kc += GQ_BK;
        if (kc == kcend) kc = 0;
    };
    [[maybe_unused]] const unsigned sbn = (unsigned)min(BM, rows4 - mb) * 4;   /* TMA: a group's pairs (16-byte multiples) */
    auto issue_t = [&]() {   /* TMA, thread 0: k step kc into stage tst, then kc and tst to the next */
        if (tround) fd_mbar_wait(emptyb + tst, (tround - 1) & 1);   /* its previous step's wgmmas have completed */
        const unsigned bar = fd_sa(fullb + tst);
        fd_mbar_expect(fullb + tst, WWB + WG_XB(BN) + ng * sbn);
        const int col = kbeg + (int)kc;
        tma2d_sa(wsb + tst * WWB, &tm.w[k], col / 8, mb, bar);
        tma2d_sa(smb + tst * WG_XB(BN), &tm.x, col, nb, bar);
        for (int j = 0; j < ng; j++) bulk_sa(sbb + tst * WG_SB(NWG) + j * BM * 4, set.SB[k] + (size_t)((col >> gs_shift) + j) * rows4 + mb, sbn, bar);
        kc += GQ_BK;
        if (kc == kcend) kc = 0;
        if (++tst == NST) { tst = 0; tround++; }
    };
    if constexpr (TMA) {
        if (tid == 0)
            for (int st = 0; st < WG_D && st < nk; st++) issue_t();
    } else {
#pragma unroll
        for (int st = 0; st < WG_D; st++) {
            if (st < nk) issue(st);
            cp_async_commit();
        }
    }
    /* this lane's rows: g and g + 8 of its warp's 16 (block rows 16 wr + g, + 8); their (scale,
     * bias) pairs are in the stage (the group-major pairs: the original [row][group] arrays cost a
     * 32-byte sector a row a stage, as much L2 traffic as the x tiles). A k step is 64 columns from
     * a multiple of 64, so the lane's group in it (its 16 columns from 16 cq) is the same at every
     * step. */
    const int jc = gs_shift >= 6 ? 0 : (16 * cq) >> gs_shift;
    const unsigned char *sbl = wg_smem + (sbb - smb) + (jc * BM + 16 * wr + g) * 4;   /* + stage */
    const unsigned char *wl0 = wg_smem + (wsb - smb) + ((16 * wr + g) * 8 + 2 * cq) * 4;   /* rows g; g + 8 at + 256 */
    gq_sc<ST> s0, s1;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
    [[maybe_unused]] uint32_t a[2][4];   /* (the 128-token form's A words) */
    /* TMA: a warp's release of the stage before the current one (its wgmmas have completed) */
    [[maybe_unused]] auto release_prev = [&]() {
        __syncwarp();
        if (lane == 0) fd_mbar_arrive(emptyb + (tcs == 0 ? NST - 1 : tcs - 1));
    };
    for (int it = 0, cst = 0, ist = WG_D; it < nk; it++) {   /* cst: the stage of step it; ist: of it + WG_D */
        if constexpr (TMA) {
            fd_mbar_wait(fullb + tcs, tph);   /* stage it landed */
            cst = tcs;
        } else {
            cp_async_wait<WG_D - 1>();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   /* this thread's copies, seen by wgmma */
            __syncthreads();   /* stage it landed for all; stage it - 2 no longer read (its wgmmas completed) */
            if constexpr (XT) {   /* (TM 2) and its x (the wait's loop inside the asm: fd_mbar_wait's
                                   * timer and trap there made ptxas serialize the wgmmas, C7517) */
                asm volatile("{ .reg .pred p; WX_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra WX_%=; }"
                             ::"r"(fd_sa(fullb + cst)), "r"((xph >> cst) & 1) : "memory");
                xph ^= 1u << cst;
            }
        }
        /* the step's words and pairs from shared memory first: the copies' issue below hides
         * their latency (the asm's memory clobbers keep the compiler from moving them over it) */
        s0.load_pair(*(const uint32_t *)(sbl + cst * WG_SB(NWG)));
        s1.load_pair(*(const uint32_t *)(sbl + cst * WG_SB(NWG) + 32));
        const uint2 wl = *(const uint2 *)(wl0 + cst * WWB), wh = *(const uint2 *)(wl0 + cst * WWB + 256);
        if constexpr (TMA) {
            if (tid == 0 && it + WG_D < nk) issue_t();
            __syncwarp();
        } else {
            if (it + WG_D < nk) issue(ist);
            cp_async_commit();
        }
        const uint64_t desc = XT ? wg_desc_sw(smb + cst * WG_XB(BN)) : wg_desc(smb + cst * WG_XB(BN));
        constexpr int DS = XT ? 2 : 16;   /* a k16 step along the descriptor (16-byte units): 32 bytes swizzled, else 2 core matrices */
        auto deq4 = [&](int s, uint32_t *o) {   /* the 4 A words of k16 step s */
            const int p = 2 * (s & 1);
            const uint32_t l = (s >> 1) ? wl.y : wl.x, h = (s >> 1) ? wh.y : wh.x;
            o[0] = s0.deq(l, p); o[1] = s1.deq(h, p);
            o[2] = s0.deq(l, p + 1); o[3] = s1.deq(h, p + 1);
        };
        if constexpr (BN <= 64) {
            /* the step's four wgmmas back to back, one group: the step's 16 A words dequantized
             * first, once the previous step's group (which read them) has completed. That wait
             * comes a barrier and the copies after the group's issue; waiting for the wgmma two
             * back before each of four (the form below) chained every step's wgmmas. */
            uint32_t af[16];
            wg_wait<0>();
            if constexpr (TMA) if (it > 0) release_prev();
#pragma unroll
            for (int s = 0; s < 4; s++) deq4(s, af + 4 * s);
            wg_fence();
#pragma unroll
            for (int s = 0; s < 4; s++) wg_mma<BN>(d, af + 4 * s, desc + (uint64_t)(s * DS));   /* k16 step s */
            wg_commit();
        } else {
#pragma unroll
            for (int s = 0; s < 4; s++) {
                wg_wait<1>();   /* the wgmma that read a[s & 1] (step s - 2) has completed */
                deq4(s, a[s & 1]);
                wg_fence();
                wg_mma<BN>(d, a[s & 1], desc + (uint64_t)(s * DS));
                wg_commit();
            }
        }
        if constexpr (TMA) {
            if (++tcs == NST) { tcs = 0; tph ^= 1; }
        } else {
            cst = cst + 1 == NST ? 0 : cst + 1;
            ist = ist + 1 == NST ? 0 : ist + 1;
        }
    }
    wg_wait<0>();
    if constexpr (TMA) {
        if (nk > 0) release_prev();   /* the last step's stage */
    } else {
        cp_async_wait<0>();
    }
    const float(*acc)[4] = (const float(*)[4])d;
    if constexpr (PAIR) {   /* (never split along k) */
        /* every warp's tile (+ bias) into shared memory, then all the block's threads take four
         * rows of a token at a time: act(gate) * up and up stored as float4 and the product's gq
         * form (the gate warpgroups alone, a value at a time, took 45 us of 148 at Llama-8B's
         * 128 x 14336 x 4096: latency-bound at two warps a scheduler) */
        __syncthreads();   /* every warpgroup's wgmmas completed: the stages are free */
        constexpr int RS = HB + 4;   /* no bank conflicts; rows of 16-byte multiples */
        static_assert((size_t)2 * BN * RS * 4 <= WG_SMEM(BN, NWG), "the gate and up tiles fit in the stages' shared memory");
        float *tg = (float *)wg_smem, *tu = tg + BN * RS;   /* [BN tokens][RS]: gate + bias, up + bias */
        {
            float *tw = kw ? tu : tg;
            const int lr = 16 * wr - kw * HB + g;   /* the lane's rows lr, lr + 8 among the block's of its weight */
            const float *bias = set.bias[kw];
            const float b0 = bias && wrow + g < rows ? bias[wrow + g] : 0.f, b1 = bias && wrow + g + 8 < rows ? bias[wrow + g + 8] : 0.f;
#pragma unroll
            for (int t = 0; t < BN / 8; t++) {
                const int tk = 8 * t + 2 * cq;
                tw[tk * RS + lr] = acc[t][0] + b0; tw[(tk + 1) * RS + lr] = acc[t][1] + b0;
                tw[tk * RS + lr + 8] = acc[t][2] + b1; tw[(tk + 1) * RS + lr + 8] = acc[t][3] + b1;
            }
        }
        __syncthreads();
        float *y0 = set.y[0], *y1 = set.y[1];
        const bool v4 = rows % 4 == 0 && (((uintptr_t)y0 | (uintptr_t)y1) & 15) == 0;
#pragma unroll 4
        for (int u = tid; u < BN * (HB / 4); u += T) {
            const int tl = u / (HB / 4), c4 = 4 * (u % (HB / 4)), tk = nb + tl, row = mb + c4;
            if (tk >= n || row >= rows) continue;
            const float4 gv = *(const float4 *)&tg[tl * RS + c4], uv = *(const float4 *)&tu[tl * RS + c4];
            const float4 v = make_float4(act_f(set.act, gv.x) * uv.x, act_f(set.act, gv.y) * uv.y,
                                         act_f(set.act, gv.z) * uv.z, act_f(set.act, gv.w) * uv.w);
            const size_t o = (size_t)tk * rows + row;
            if (v4) {
                *(float4 *)(y0 + o) = v; *(float4 *)(y1 + o) = uv;
                if (set.xg) { st_gq(set.xg, o, v.x); st_gq(set.xg, o + 1, v.y); st_gq(set.xg, o + 2, v.z); st_gq(set.xg, o + 3, v.w); }
            } else {
                const float vs[4] = {v.x, v.y, v.z, v.w}, us[4] = {uv.x, uv.y, uv.z, uv.w};
                for (int j = 0; j < 4 && row + j < rows; j++) {
                    y0[o + j] = vs[j]; y1[o + j] = us[j];
                    if (set.xg) st_gq(set.xg, o + j, vs[j]);
                }
            }
        }
        return;
    }
    if constexpr (!SK) {
        if (gridDim.z == 1) {
            gm_store<BN / 8>(acc, set.bias[k], set.y[k], rows, n, wrow, nb, g, 2 * cq);
            return;
        }
        const size_t ptot = (size_t)n * set.rb[set.nw], pk = (size_t)n * set.rb[k];
        gm_store<BN / 8>(acc, nullptr, part + blockIdx.z * ptot + pk, rows, n, wrow, nb, g, 2 * cq);
        return;
    } else {
    /* stream-K: this segment's place in its tile; the next segment's unit (every thread read this
     * one's before the k loop's barriers; the barrier at the end publishes it) */
    if (tid == 0) sk_next = tile * nka + kbeg / GQ_BK + nk;
    constexpr int NV = BN / 8;   /* float4s of a thread's accumulators */
    const bool first = kbeg == 0, last = kbeg + nk * GQ_BK == cols;
    if (!first) {   /* a later part: to this block's slot, [NV][T] float4s, and counted */
        float4 *slot = (float4 *)part + (size_t)blockIdx.x * NV * T;
#pragma unroll
        for (int v = 0; v < NV; v++) __stcg(slot + v * T + tid, make_float4(d[4 * v], d[4 * v + 1], d[4 * v + 2], d[4 * v + 3]));
        __threadfence();
        __syncthreads();
        if (tid == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(set.strk + tile) : "memory");
    } else {
        if (!last) {   /* the first part: wait for the later ones, add them in k order */
            const int64_t U = (int64_t)set.blk0[set.nw] * nka, tend = (int64_t)(tile + 1) * nka;
            unsigned later = 0;
            for (int64_t b = blockIdx.x + 1; b < gridDim.x && b * U / gridDim.x < tend; b++) later++;
            if (tid == 0) {
                uint64_t t0 = 0;
                for (int spin = 0; ld_acquire_gpu(set.strk + tile) < later; spin++)
                    if ((spin & 1023) == 1023) {   /* a lost part would hang the stream: fail instead */
                        uint64_t t;
                        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                        if (!t0) t0 = t; else if (t - t0 > 10000000000ull) __trap();
                    }
                set.strk[tile] = 0;   /* for the next launch (no part of this one counts it again) */
            }
            __syncthreads();
            for (unsigned j = 1; j <= later; j++) {
                const float4 *slot = (const float4 *)part + (size_t)(blockIdx.x + j) * NV * T;
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    const float4 p = __ldcg(slot + v * T + tid);
                    d[4 * v] += p.x; d[4 * v + 1] += p.y; d[4 * v + 2] += p.z; d[4 * v + 3] += p.w;
                }
            }
        }
        gm_store<BN / 8>(acc, set.bias[k], set.y[k], rows, n, wrow, nb, g, 2 * cq);
    }
    __syncthreads();   /* every warp's wgmmas of the segment completed: the stages are free */
    }
    }
#else
    __trap();   /* launched only where the sm_90a code was loaded (wg_ok) */
#endif
}

/* The rotation of RoPE's pair (x0, x1) by (cs, sn), rounded the same way in every kernel that
 * does it (k_rope, the q/k preparation in k_qk_prep and in the decode attention, the fused decode
 * step): x0 cs - x1 sn and x1 cs + x0 sn written with `a * b - c * d` leave ptxas free to fuse
 * either product into the subtraction, and it chose differently in k_qk_prep and in k_attn_vec's
 * PREP form (the twenty-second session: the cuda_attn_prep cases with a rotation differed in the
 * last bit); the intrinsics fix one order: the second product rounded, the first fused. */
__device__ __forceinline__ void rope_rot(float x0, float x1, float cs, float sn, float &r0, float &r1) {   /* (r0, r1 may alias x0, x1's sources) */
    r0 = __fmaf_rn(x0, cs, -__fmul_rn(x1, sn));
    r1 = __fmaf_rn(x1, cs, __fmul_rn(x0, sn));
}

/* Any layout, any n: one warp per (row, x row); used for bit widths other than 4/8 and for
 * shapes the vector kernels do not take (cols not a multiple of 32). */
#include "backend/cuda/fused_decode.cuh"   /* the decode_layers kernel */
#include "backend/cuda/mv_ring.cuh"        /* the batch-1 matvec on bulk-copied weights */
#include "backend/cuda/mv_mma.cuh"         /* the products of a few rows of x on int8 tensor cores */
static_assert(EPI_BLOCKS_MAX == MR_PARTS, "MLXCEL_CUDA_EPI_BLOCKS's range: the parts a consumer sums");

template <typename ST>
__global__ void k_mv_generic(cu_weight w, const float *__restrict__ x, float *__restrict__ y, int n) {
    pdl_entry();
    int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (gw >= w.rows * (int64_t)n) return;
    int64_t r = gw % w.rows, t = gw / w.rows;
    const float *xr = x + t * w.cols;
    float acc = 0.f;
    for (int64_t k = lane; k < w.cols; k += 32) {
        float v;
        if (w.bits) v = dq_elem<ST>(w, (const uint32_t *)w.w, (const ST *)w.scales, (const ST *)w.biases, r, k);
        else if (w.dtype == MX_DTYPE_F32) v = ((const float *)w.w)[r * w.cols + k];
        else if (w.dtype == MX_DTYPE_F16) v = __half2float(((const __half *)w.w)[r * w.cols + k]);
        else v = __bfloat162float(((const __nv_bfloat16 *)w.w)[r * w.cols + k]);
        acc = fmaf(v, xr[k], acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) y[t * w.rows + r] = acc + (w.bias ? w.bias[r] : 0.f);
}

/* Dequantize rows [r0, r0+nr) to bf16 (or f16 dense to itself is not needed). */
template <typename ST>
__global__ void k_dequant_rows(cu_weight w, int64_t r0, int64_t nr, __nv_bfloat16 *out) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t total = nr * w.cols;
    if (i >= total) return;
    int64_t r = r0 + i / w.cols, k = i % w.cols;
    float v;
    if (w.bits) v = dq_elem<ST>(w, (const uint32_t *)w.w, (const ST *)w.scales, (const ST *)w.biases, r, k);
    else v = ((const float *)w.w)[r * w.cols + k];
    out[i] = __float2bfloat16(v);
}

/* q4/q8 rows [r0, r0+nr) to bf16, one u32 word (8 or 4 values) per thread, 16/8-byte stores. */
template <int BITS, typename ST>
__global__ void k_dequant_q(const uint32_t *__restrict__ W, const ST *__restrict__ S, const ST *__restrict__ B,
                            int64_t r0, int64_t nr, int cols, int gs_shift, __nv_bfloat16 *__restrict__ out) {
    pdl_entry();
    constexpr int VPW = 32 / BITS;
    const int nw = cols / VPW, ng = cols >> gs_shift;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nr * nw) return;
    int64_t r = r0 + i / nw;
    int w = (int)(i % nw), g = (w * VPW) >> gs_shift;
    uint32_t q = __ldcs(W + r0 * nw + i);   /* read once: evict first, keep L2 for the bf16 slice */
    float sc = ld_s(S + r * ng + g), bi = ld_s(B + r * ng + g);
    __align__(16) __nv_bfloat16 v[VPW];
#pragma unroll
    for (int j = 0; j < VPW; j++) v[j] = __float2bfloat16(fmaf(sc, (float)((q >> (BITS * j)) & ((1u << BITS) - 1u)), bi));
    if (VPW == 8) *(uint4 *)(out + i * VPW) = *(const uint4 *)v;
    else *(uint2 *)(out + i * VPW) = *(const uint2 *)v;
}

/* The q4/q8 weights of a set (same cols, group size, scale type) dequantized in one launch into
 * consecutive bf16 slices of out: weight k's rows start at word wbeg[k] (words of VPW values). */
struct dq_set {
    const uint32_t *W[4];
    const void *S[4], *B[4];
    int64_t wbeg[5];
    int nw;
};
template <int BITS, typename ST>
__global__ void k_dequant_set(const dq_set set, int cols, int gs_shift, __nv_bfloat16 *__restrict__ out) {
    pdl_entry();
    constexpr int VPW = 32 / BITS;
    const int nw = cols / VPW, ng = cols >> gs_shift;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= set.wbeg[set.nw]) return;
    int k = 0;
#pragma unroll
    for (int j = 1; j < 4; j++) if (j < set.nw && i >= set.wbeg[j]) k = j;
    const int64_t li = i - set.wbeg[k], r = li / nw;
    const int w = (int)(li % nw), g = (w * VPW) >> gs_shift;
    const uint32_t q = __ldcs(set.W[k] + li);
    const float sc = ld_s((const ST *)set.S[k] + r * ng + g), bi = ld_s((const ST *)set.B[k] + r * ng + g);
    __align__(16) __nv_bfloat16 v[VPW];
#pragma unroll
    for (int j = 0; j < VPW; j++) v[j] = __float2bfloat16(fmaf(sc, (float)((q >> (BITS * j)) & ((1u << BITS) - 1u)), bi));
    if (VPW == 8) *(uint4 *)(out + i * VPW) = *(const uint4 *)v;
    else *(uint2 *)(out + i * VPW) = *(const uint2 *)v;
}

template <typename T>
__global__ void k_cvt(const float *__restrict__ x, T *__restrict__ y, int64_t n) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) st_kv(y + i, x[i]);
}

__global__ void k_add_bias(float *y, const float *bias, int64_t rows, int64_t total) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] += bias[i % rows];
}

/* ------------------------------------------------------------------------------------------ */
/* embedding, norms, rope, elementwise                                                         */

template <typename ST>
__global__ void k_embed(cu_weight w, const int32_t *ids, float *out) {
    pdl_entry();
    int64_t t = blockIdx.x;
    int64_t r = ids[t];
    for (int64_t k = threadIdx.x; k < w.cols; k += blockDim.x) {
        float v;
        if (r < 0 || r >= w.rows) v = 0.f;   /* logged on the host */
        else if (w.bits) v = dq_elem<ST>(w, (const uint32_t *)w.w, (const ST *)w.scales, (const ST *)w.biases, r, k);
        else if (w.dtype == MX_DTYPE_F32) v = ((const float *)w.w)[r * w.cols + k];
        else if (w.dtype == MX_DTYPE_F16) v = __half2float(((const __half *)w.w)[r * w.cols + k]);
        else v = __bfloat162float(((const __nv_bfloat16 *)w.w)[r * w.cols + k]);
        out[t * w.cols + k] = v;
    }
}

/* y = rmsnorm(x) (x2: of x + x2, the sum also stored to xsum); xq: also the int8 form of y
 * (d a multiple of 32, blockDim a multiple of 32, so that each warp step is one group) */
__global__ void k_rmsnorm(const float *x, const float *x2, float *xsum, const float *g, float eps, float add_one,
                          float *y, int d, int8_t *xq, float2 *xds, __nv_bfloat16 *xg) {
    pdl_entry();
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * d;
    float *yr = y + (size_t)blockIdx.x * d;
    float ss = 0.f;
    if (x2) {
        const float *x2r = x2 + (size_t)blockIdx.x * d;
        float *sr = xsum + (size_t)blockIdx.x * d;
        for (int i = threadIdx.x; i < d; i += blockDim.x) { float v = xr[i] + x2r[i]; sr[i] = v; ss = fmaf(v, v, ss); }
        xr = sr;
    } else {
        for (int i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    }
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float v = xr[i] * inv * (g ? g[i] + add_one : 1.f);
        yr[i] = v;
        if (xq) quant_group(v, xq, xds, (size_t)blockIdx.x * d + i);
        if (xg) st_gq(xg, (size_t)blockIdx.x * d + i, v);
    }
}

/* x2 as the split-k partial sums of a product (MLXCEL_CUDA_SUM_NORM): x2[i] = the sum over z of
 * p[z stride + i] in split order (k_gq_sum's arithmetic), also stored to sum (the product's output;
 * null where the norm's output replaces it) */
struct rn_part { const float *p; int nsplit; int64_t stride; float *sum; };

/* k_rmsnorm with the row in registers (VPT values a thread, d <= VPT * blockDim): every load is
 * issued before the first store, so the loads of a row are not serialized behind stores that
 * might alias them (in-place norms), and the gamma load overlaps the reduction. */
template <int VPT, bool PARTS = false>
__global__ void k_rmsnorm_r(const float *x, const float *x2, float *xsum, const float *g, float eps, float add_one,
                            float *y, int d, int8_t *xq, float2 *xds, __nv_bfloat16 *xg, const rn_part pp) {
    pdl_entry();
    __shared__ float sh[32];
    const size_t base = (size_t)blockIdx.x * d;
    float v[VPT], gv[VPT], ps[VPT];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        const bool ok = i < d;
        v[j] = ok ? x[base + i] : 0.f;
        if (x2) v[j] += ok ? x2[base + i] : 0.f;
        gv[j] = g ? (ok ? g[i] + add_one : 0.f) : 1.f;
    }
    if constexpr (PARTS) {   /* splits outside, values inside: VPT loads in flight a step */
#pragma unroll
        for (int j = 0; j < VPT; j++) ps[j] = 0.f;
#pragma unroll 2
        for (int z = 0; z < pp.nsplit; z++)
#pragma unroll
            for (int j = 0; j < VPT; j++) {
                const int i = threadIdx.x + j * blockDim.x;
                if (i < d) ps[j] += pp.p[(size_t)z * pp.stride + base + i];
            }
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            ps[j] += 0.f;   /* k_gq_sum's "+ 0.f" without a bias */
            v[j] += ps[j];
        }
    }
#pragma unroll
    for (int j = 0; j < VPT; j++) ss = fmaf(v[j], v[j], ss);
    if (PARTS || x2) {
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            const int i = threadIdx.x + j * blockDim.x;
            if (i < d) {
                xsum[base + i] = v[j];
                if (PARTS && pp.sum) pp.sum[base + i] = ps[j];   /* the product's output (apart from the rest: host) */
            }
        }
    }
    ss = block_sum(ss, sh);
    const float inv = rsqrtf(ss / d + eps);
    float o[VPT];
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        o[j] = v[j] * inv * gv[j];
        if (i < d) y[base + i] = o[j];
        if (xg && i < d) st_gq(xg, base + i, o[j]);
    }
    if (!xq) return;
    /* the int8 form, the VPT groups of a warp side by side */
    float am[VPT];
    int qv[VPT], qs[VPT];
    quant_groups<VPT>(o, am, qv, qs);
#pragma unroll
    for (int j = 0; j < VPT; j++) {
        const int i = threadIdx.x + j * blockDim.x;   /* d % 32 == 0: whole warps in or out */
        if (i < d) {
            xq[base + i] = (int8_t)qv[j];
            if ((threadIdx.x & 31) == 0) { float dx = am[j] * (1.f / 127.f); xds[(base + i) >> 5] = make_float2(dx, dx * (float)qs[j]); }
        }
    }
}

__global__ void k_layernorm(const float *x, const float *g, const float *b, float eps, float *y, int d) {
    pdl_entry();
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * d;
    float *yr = y + (size_t)blockIdx.x * d;
    float s = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
    float mean = block_sum(s, sh) / d;
    float v = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) { float t = xr[i] - mean; v = fmaf(t, t, v); }
    float inv = rsqrtf(block_sum(v, sh) / d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        yr[i] = (xr[i] - mean) * inv * (g ? g[i] : 1.f) + (b ? b[i] : 0.f);
}

__global__ void k_rope(float *x, int n_heads, int head_dim, int half, const float *inv_freq, float attn_factor,
                       const int32_t *pos) {
    pdl_entry();
    int t = blockIdx.x, h = blockIdx.y;
    float *xr = x + ((size_t)t * n_heads + h) * head_dim;
    float p = (float)pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf(p * inv_freq[i], &s, &c);
        s *= attn_factor; c *= attn_factor;
        rope_rot(xr[i], xr[i + half], c, s, xr[i], xr[i + half]);
    }
}

__global__ void k_act_mul(int act, const float *gate, const float *up, int64_t stride, float *y, int n, int d,
                          int8_t *xq, float2 *xds, __nv_bfloat16 *xg) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * d) return;
    int64_t r = i / d, c = i % d;
    const float v = act_f(act, gate[r * stride + c]) * up[r * stride + c];
    y[i] = v;
    if (xq) quant_group(v, xq, xds, (size_t)i);   /* d % 32 == 0: whole warps are in range */
    if (xg) st_gq(xg, (size_t)i, v);
}
/* k_act_mul four values a thread, without the int8 form (n > MV_I8_MAX) and with 32-bit indices
 * (n d < 2^31, d, stride multiples of 4, 16-byte aligned rows): the same values (Llama-8B at 128
 * rows, 14,336 wide: 12.5 us in the scalar form, its 64-bit divisions a value) */
__global__ void k_act_mul4(int act, const float *gate, const float *up, int stride, float *y, int n, int d,
                           __nv_bfloat16 *xg) {
    pdl_entry();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n * (d / 4)) return;
    const int i = 4 * j, r = i / d, c = i - r * d;
    const float4 g = *(const float4 *)(gate + (size_t)r * stride + c), u = *(const float4 *)(up + (size_t)r * stride + c);
    const float4 v = make_float4(act_f(act, g.x) * u.x, act_f(act, g.y) * u.y, act_f(act, g.z) * u.z, act_f(act, g.w) * u.w);
    *(float4 *)(y + i) = v;
    if (xg) { st_gq(xg, (size_t)i, v.x); st_gq(xg, (size_t)i + 1, v.y); st_gq(xg, (size_t)i + 2, v.z); st_gq(xg, (size_t)i + 3, v.w); }
}
__global__ void k_act(int act, const float *x, float *y, int64_t n) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = act_f(act, x[i]);
}
__global__ void k_add(const float *a, const float *b, float *y, int64_t n) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}
__global__ void k_scale(const float *x, float s, float *y, int64_t n) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}
__global__ void k_softcap(float *x, float cap, int64_t n) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}
__global__ void k_gather(const float *src, const int32_t *rows, int d, float *dst) {
    pdl_entry();
    int t = blockIdx.x;
    const float *s = src + (size_t)rows[t] * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) dst[(size_t)t * d + i] = s[i];
}

/* ------------------------------------------------------------------------------------------ */
/* paged attention                                                                             */

template <typename T>
__global__ void k_kv_write(const float *k, const float *v, T *kp, T *vp, const int32_t *slot, int kvdim, int n, int64_t nslots) {
    pdl_entry();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * kvdim) return;
    int64_t t = i / kvdim, e = i % kvdim;
    int64_t s = slot[t];
    if (s < 0 || s >= nslots) return;
    st_kv(kp + s * kvdim + e, k[i]);
    st_kv(vp + s * kvdim + e, v[i]);
}

#define ATT_MAXI 8   /* head_dim <= 256 */

/* Decode attention helpers shared by k_attn and k_attn_vec. A token outside the sequences: zeros
 * (as the CPU reference), with the int8 form when asked. */
__device__ void att_zero(float *out, int8_t *xq, float2 *xds, size_t ob, int count) {
    for (int d = threadIdx.x; d < count; d += blockDim.x) {
        out[ob + d] = 0.f;
        if (xq) { xq[ob + d] = 0; if (!((ob + d) & 31)) xds[(ob + d) >> 5] = make_float2(0.f, 0.f); }
    }
}
/* The W warps' partial results (maximum sm, sum sl, unnormalized output sacc[(w G + g) stride + d]
 * for query head h0 + g) merged into out[ob + g D + d]: every thread takes output values d, whole
 * warps stepping together, so with xq each warp step is one group of 32 for the int8 form (D % 32
 * == 0 with xq). The sink (gpt-oss) joins the denominator. With xg (rows of a multiple of 64) the
 * output is also stored in the gq-order bf16 form k_cvt_gq would make of it. */
template <int W, int G>
__device__ __forceinline__ void att_merge(const float (*sm)[G], const float (*sl)[G], const float *sacc, int stride, int D,
                                          const float *sinks, int h0, float *out, size_t ob, int8_t *xq, float2 *xds,
                                          __nv_bfloat16 *xg, float *so = nullptr) {
#pragma unroll
    for (int g = 0; g < G; g++) {
        float M = -INFINITY;
        for (int j = 0; j < W; j++) M = fmaxf(M, sm[j][g]);
        float L = 0.f, cj[W];
#pragma unroll
        for (int j = 0; j < W; j++) { cj[j] = sm[j][g] == -INFINITY ? 0.f : __expf(sm[j][g] - M); L += sl[j][g] * cj[j]; }
        if (sinks && M != -INFINITY) L += __expf(sinks[h0 + g] - M);
        const size_t og = ob + (size_t)g * D;
        for (int d0 = 0; d0 < D; d0 += W * 32) {
            const int d = d0 + threadIdx.x;
            if (xq && d0 + (int)(threadIdx.x & ~31) >= D) break;
            float a = 0.f;
            if (d < D) {
#pragma unroll
                for (int j = 0; j < W; j++) a += sacc[(size_t)(j * G + g) * stride + d] * cj[j];
                a = L > 0.f ? a / L : 0.f;
                out[og + d] = a;
                if (so) so[(size_t)g * D + d] = a;   /* (k_attn_vec<.., OP>: the block's output for its epilogue) */
                if (xg) st_gq(xg, og + d, a);   /* the bf16 gq-order form for the o projection's GEMM */
            }
            if (xq) quant_group(a, xq, xds, og + d);
        }
    }
}

/* One block per (token, head); warps take positions in turn with an online softmax, lanes split
 * head_dim; the warps' partial results are merged at the end. */
/* NI: head values per lane (head_dim <= 32 * NI). The sequence's block table is first copied to
 * shared memory (sbt_n entries; 0: read from global memory), and each step loads the K and V
 * rows of its ATT_P positions before using any, so a step waits for memory once. */
#define ATT_SBT_MAX 4096
#define ATT_CNT_MAX 256   /* KV heads the q/k preparation inside the decode attention takes */
template <typename T, int ATT_WARPS, int ATT_P, int NI, int G>
__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attn(const float *q, const T *kp, const T *vp, float *out, const int32_t *pos, const int32_t *seq,
       const int32_t *bt, int n_seqs, int max_blocks, int block_size, int n_blocks, int n_heads, int n_kv, int D, float scale,
       int window, float softcap, const float *sinks, int8_t *xq, float2 *xds, __nv_bfloat16 *xg, int sbt_n) {
    pdl_entry();
    __shared__ float sm[ATT_WARPS][G], sl[ATT_WARPS][G], sacc[ATT_WARPS][G][NI * 32];
    extern __shared__ int32_t sbt[];
    /* G query heads of one KV head a block (GQA): each K/V row read once for the G of them */
    const int t = blockIdx.x, h0 = blockIdx.y * G, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int kvh = h0 / (n_heads / n_kv), kvdim = n_kv * D;
    const int ni = (D + 31) / 32;
    if (seq[t] < 0 || seq[t] >= n_seqs || pos[t] < 0) { att_zero(out, xq, xds, ((size_t)t * n_heads + h0) * D, G * D); return; }
    float qv[G][NI], acc[G][NI];
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float *qr = q + ((size_t)t * n_heads + h0 + g) * D;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            int d = lane + 32 * i;
            qv[g][i] = (i < ni && d < D) ? qr[d] * scale : 0.f;
            acc[g][i] = 0.f;
        }
    }
    const int p_end = min(pos[t], max_blocks * block_size - 1);
    const int p0 = window > 0 ? max(0, pos[t] - window + 1) : 0;
    const int32_t *btr = bt + (size_t)seq[t] * max_blocks;
    if (sbt_n > 0) {
        const int nb = min(p_end / block_size + 1, sbt_n);
        for (int i = threadIdx.x; i < nb; i += blockDim.x) sbt[i] = btr[i];
        __syncthreads();
        btr = sbt;
    }
    float m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) { m[g] = -INFINITY; l[g] = 0.f; }
    /* ATT_P positions per warp and step: their loads and reductions overlap */
    for (int p = p0 + w * ATT_P; p <= p_end; p += ATT_WARPS * ATT_P) {
        bool ok[ATT_P];
        float kk[ATT_P][NI], vv[ATT_P][NI];
#pragma unroll
        for (int j = 0; j < ATT_P; j++) {
            int pj = p + j, blk = pj <= p_end ? btr[pj / block_size] : -1;
            ok[j] = blk >= 0 && blk < n_blocks;   /* as the CPU reference: bad blocks are skipped */
            int64_t s = ok[j] ? (int64_t)blk * block_size + pj % block_size : 0;
            const T *kr = kp + s * kvdim + (size_t)kvh * D, *vr = vp + s * kvdim + (size_t)kvh * D;
#pragma unroll
            for (int i = 0; i < NI; i++) {
                const int d = lane + 32 * i;
                const bool in = i < ni && d < D;
                kk[j][i] = in ? ld_s(kr + d) : 0.f;
                vv[j][i] = in ? ld_s(vr + d) : 0.f;
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float dot[ATT_P];
#pragma unroll
            for (int j = 0; j < ATT_P; j++) dot[j] = 0.f;
#pragma unroll
            for (int i = 0; i < NI; i++)
#pragma unroll
                for (int j = 0; j < ATT_P; j++) dot[j] = fmaf(qv[g][i], kk[j][i], dot[j]);
            float mx = m[g];
#pragma unroll
            for (int j = 0; j < ATT_P; j++) {
                dot[j] = warp_sum(dot[j]);
                if (softcap > 0.f) dot[j] = softcap * tanhf(dot[j] / softcap);
                if (!ok[j]) dot[j] = -INFINITY;
                mx = fmaxf(mx, dot[j]);
            }
            if (mx == -INFINITY) continue;
            float corr = __expf(m[g] - mx), e[ATT_P];
            l[g] *= corr;
#pragma unroll
            for (int j = 0; j < ATT_P; j++) { e[j] = __expf(dot[j] - mx); l[g] += e[j]; }
#pragma unroll
            for (int i = 0; i < NI; i++) {
                float a = acc[g][i] * corr;
#pragma unroll
                for (int j = 0; j < ATT_P; j++) a = fmaf(e[j], vv[j][i], a);
                acc[g][i] = a;
            }
            m[g] = mx;
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (lane == 0) { sm[w][g] = m[g]; sl[w][g] = l[g]; }
#pragma unroll
        for (int i = 0; i < NI; i++) if (i < ni) sacc[w][g][lane + 32 * i] = acc[g][i];
    }
    __syncthreads();
    att_merge<ATT_WARPS, G>(sm, sl, &sacc[0][0][0], NI * 32, D, sinks, h0, out, ((size_t)t * n_heads + h0) * D, xq, xds, xg);
}

/* Sums N values over the lanes that differ in bits O, O/2, .., 1 by halving exchanges: at bit o
 * the pair (lane, lane ^ o) swaps halves, the lane with bit o keeping the upper half (base grows
 * by its size); once one value is left it is summed outright. After it v[0 .. max(N / 2O, 1)) of a
 * lane are the sums of values base .. of the original numbering. */
template <int N, int O>
__device__ __forceinline__ void halve_sum(float *v, int lane, int &base) {
    if constexpr (O > 0) {
        const bool up = lane & O;
        if constexpr (N > 1) {
#pragma unroll
            for (int i = 0; i < N / 2; i++) {
                const float send = up ? v[i] : v[i + N / 2], keep = up ? v[i + N / 2] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            if (up) base += N / 2;
            halve_sum<N / 2, O / 2>(v, lane, base);
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
            halve_sum<1, O / 2>(v, lane, base);
        }
    }
}

/* The q/k preparation before attention in one kernel, for the ops the backend deferred
 * (c_rmsnorm per head in place, c_rope with rot_dim == head_dim): block (t, hh) takes head hh of
 * q (hh < nh), of k (nh <= hh < nh + nkv; also stored to the cache at slot[t]) or of v (stored
 * to the cache); thread i holds the pair (i, i + D/2): norm over the head, then the rotation,
 * with the arithmetic of k_rmsnorm_r / k_rope.
 * With part (MLXCEL_CUDA_SUM_QKV): q, k and v are the split-k partial sums of their product
 * (c_matmul_multi's, deferred), added here in split order with k_gq_sum's arithmetic; the sums
 * of v are stored to v (those of q and k end as the prepared q and k, as without it).
 * For one token after a dense bf16 q/k/v product (MLXCEL_CUDA_ATTN_PREP), the decode attention
 * does the same itself (k_attn_vec<.., PREP>) and k_qk_prep is not launched. */
struct qk_prep_args {
    float *q, *k; const float *v;
    const float *qg, *kg; float qeps, keps, qa1, ka1; int qnorm, knorm;
    const float *qf, *kf; float qaf, kaf; int qrope, krope;
    int nh, nkv, D;
    const float *part; float *vw; int nsplit; int64_t ptot, kofs, vofs;   /* kofs, vofs: k's, v's parts */
};
/* value j of the output buf (q, k or v) or, with a.part, the sum of its parts at ofs + j */
__device__ __forceinline__ float qk_in(const qk_prep_args &a, const float *buf, int64_t ofs, int64_t j) {
    if (!a.part) return buf[j];
    float s = 0.f;
    for (int z = 0; z < a.nsplit; z++) s += a.part[(size_t)z * a.ptot + ofs + j];
    return s + 0.f;   /* k_gq_sum's "+ 0.f" without a bias */
}
/* Head hd of q (isq) or k of token t prepared, in steps around the sum of squares over the head
 * (a block reduction whose arithmetic its callers share): qk_load gives thread i (ok: i < D/2) the
 * pair (i, i + D/2), qk_finish norms it (with that sum, when the head has a norm) and rotates it
 * with what qk_begin read and computed: its pair of the norm's weights and its rotation. qk_begin
 * reads only weights, constant tables and the token's position (uploaded before the step's
 * kernels), so it may run before the PDL wait, off the chain of dependent loads.
 * Shared by k_qk_prep and the decode attention that does the preparation itself
 * (k_attn_vec<.., PREP>). */
struct qk_pre { float g0, g1, cs, sn; };
__device__ __forceinline__ qk_pre qk_begin(const qk_prep_args &a, bool isq, int t, int i, bool ok, const int32_t *pos) {
    const int half = a.D / 2;
    qk_pre r = {1.f, 1.f, 1.f, 0.f};
    if (isq ? a.qnorm : a.knorm) {
        const float *g = isq ? a.qg : a.kg;
        const float a1 = isq ? a.qa1 : a.ka1;
        r.g0 = g ? (ok ? g[i] + a1 : 0.f) : 1.f; r.g1 = g ? (ok ? g[i + half] + a1 : 0.f) : 1.f;
    }
    if (ok && (isq ? a.qrope : a.krope)) {
        const float *f = isq ? a.qf : a.kf;
        const float af = isq ? a.qaf : a.kaf;
        float sn, cs;
        sincosf((float)pos[t] * f[i], &sn, &cs);
        r.sn = sn * af; r.cs = cs * af;
    }
    return r;
}
__device__ __forceinline__ void qk_load(const qk_prep_args &a, bool isq, int hd, int t, int i, bool ok, float &x0, float &x1) {
    const int half = a.D / 2;
    const int64_t j = isq ? ((int64_t)t * a.nh + hd) * a.D : ((int64_t)t * a.nkv + hd) * a.D;
    const float *xr = (isq ? a.q : a.k) + j;
    const int64_t po = isq ? 0 : a.kofs;
    x0 = ok ? qk_in(a, xr, po + j, i) : 0.f; x1 = ok ? qk_in(a, xr, po + j, i + half) : 0.f;
}
__device__ __forceinline__ void qk_finish(const qk_prep_args &a, bool isq, bool ok, const qk_pre &r, float ss, float &x0,
                                          float &x1) {
    if (isq ? a.qnorm : a.knorm) {
        const float inv = rsqrtf(ss / a.D + (isq ? a.qeps : a.keps));
        x0 = x0 * inv * r.g0; x1 = x1 * inv * r.g1;
    }
    if (ok && (isq ? a.qrope : a.krope)) {
        rope_rot(x0, x1, r.cs, r.sn, x0, x1);
    }
}
/* The o projection in a one-token attention's epilogue (MLXCEL_CUDA_ATT_O, k_attn_vec<.., OP>; host
 * at_take / ao_launch). Each block (one query head h0) copies its head's columns of o's q4 weight
 * (rows x D codes, D / gs scales and biases a row) into shared memory with cp.async before the PDL
 * wait (weights are never written), and after the attention multiplies them with the int8 form of
 * its output (quant_group's, the o product's input form; the ring's arithmetic a group of 32:
 * fmaf(s dx, codes . x, fmaf(b, dx sum(x), acc))), storing the head's part of o, part[h0][rows].
 * The last block of the grid to finish (a counter, reset by it) adds the parts in head order (o's
 * output y), then the residual (sum = a + y, the decoder's add) and leaves what the o ring's
 * epilogue (k_mv_ring<.., 4>) leaves for the norm after the add: the int8 form of sum * (g +
 * add_one) and its sum of squares (one part), read by the gate/up pair (k_mv_ring<.., SC>). So o
 * is not a launch of its own. Only q4 weights without a bias whose slice fits shared memory
 * (Qwen3-0.6B: 1,024 rows, 72 KB a head). */
struct ao_args {
    const uint8_t *W, *S, *B;     /* o's codes, scales, biases */
    int rows, row_wb, row_sb;     /* o's rows; bytes a row of codes, of scales */
    int gs_shift, f16;            /* log2 of the group size (32 or 64); scales and biases f16 (else bf16) */
    int sofs;                     /* the slice's offset in the dynamic shared memory (after the block table) */
    float *part;                  /* [n_heads][rows]: each head's product */
    unsigned *cnt;                /* blocks done (zero between launches) */
    const float *a, *g;           /* the residual added to o; the next norm's gamma (null: 1) */
    float add_one;
    float *y, *sum;               /* o's output; a + y */
    int8_t *oq; float2 *ods;      /* the int8 form of sum * (g + add_one) */
    float *ss;                    /* its sum of squares (one part) */
};
#define AO_SLICE_MAX (96 << 10)   /* the most bytes of a head's slice of o (codes, scales, biases) */
#define AO_SMEM_MAX (AO_SLICE_MAX + ATT_SBT_MAX * 4 + 16)
static size_t ao_slice_bytes(int rows, int D, int gsh) { return (size_t)rows * ((size_t)D / 2 + 2 * (size_t)((D >> gsh) * 2)); }

/* The L2 prefetch across a one-token attention (MLXCEL_CUDA_ATTN_L2PF, host apf_args): extra
 * blocks of the attention's grid ask the L2 for the weights of the product that followed this
 * layer's attention in the previous step (the o projection), so that the HBM, idle while the
 * attention runs, streams them, and the product reads them from the L2. The blocks wait for the
 * kernel before (the q/k/v product: its streaming is done), lane 0 of each warp issues its chunks
 * (cp.async.bulk.prefetch.L2, a hint: it writes nothing and waits for nothing, so every result is
 * what it is without it) and the block exits. Up to APF_R address ranges (codes, scales, biases of
 * up to 4 weights), each cut into chunks of L2PF_CHUNK bytes; c0: the ranges' first chunks. The
 * ranges are read with static indices only (unrolled), so the parameter stays in parameter space. */
#define L2PF_CHUNK 16384u
struct l2pf_args {
    const uint8_t *p[APF_R];
    uint32_t n[APF_R];        /* bytes of each range, a multiple of 16 */
    uint32_t c0[APF_R + 1];   /* chunks before each range; c0[APF_R]: all */
    int nblk;                 /* extra blocks (0: none) */
};
__device__ __forceinline__ void l2pf_run(const l2pf_args &a, int b) {
    pdl_wait();   /* the product before has finished streaming its weights */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x & 31) return;
    const uint32_t nwarp = (uint32_t)a.nblk * (blockDim.x >> 5), tot = a.c0[APF_R];
    for (uint32_t i = (uint32_t)b * (blockDim.x >> 5) + (threadIdx.x >> 5); i < tot; i += nwarp) {
#pragma unroll
        for (int r = 0; r < APF_R; r++)
            if (i >= a.c0[r] && i < a.c0[r + 1]) {
                const uint32_t o = (i - a.c0[r]) * L2PF_CHUNK, len = min(L2PF_CHUNK, a.n[r] - o);
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a.p[r] + o), "r"(len) : "memory");
            }
    }
#endif
}
/* (host) a one-token product after the attention of layer apf_layer: its weights' ranges noted
 * for that layer (codes, and the scales and biases of quantized ones), whatever path it takes */
static void apf_note(cu_ctx *c, int nw, const cu_weight *const *w, int n) {
    const int l = c->apf_layer;
    if (l < 0) return;
    c->apf_layer = -1;
    if (n != 1 || l >= c->apf_nl || !c->apf) return;
    cu_ctx::cu_apf e;
    memset(&e, 0, sizeof e);
    for (int k = 0; k < nw && e.nr + 3 <= APF_R; k++) {
        const int64_t cells = w[k]->rows * w[k]->cols;
        e.p[e.nr] = w[k]->w;
        e.n[e.nr++] = w[k]->bits ? cells * w[k]->bits / 8 : cells * (int64_t)mx_dtype_size(w[k]->dtype);
        if (w[k]->bits) {
            const int64_t sb = cells / w[k]->gs * 2;
            e.p[e.nr] = w[k]->scales; e.n[e.nr++] = sb;
            e.p[e.nr] = w[k]->biases; e.n[e.nr++] = sb;
        }
    }
    c->apf[l] = e;
}
/* (host) the prefetch of layer's attention: up to apf_cap bytes of the ranges noted for it, each
 * range's first bytes in the same share (its rows from the start); false: none */
static bool apf_args(cu_ctx *c, int layer, l2pf_args *a) {
    memset(a, 0, sizeof *a);
    if (c->apf_cap <= 0 || layer < 0 || layer >= c->apf_nl || !c->apf || !c->apf[layer].nr) return false;
    const cu_ctx::cu_apf &e = c->apf[layer];
    int64_t tot = 0;
    for (int r = 0; r < e.nr; r++) tot += e.n[r];
    const double f = tot > c->apf_cap ? (double)c->apf_cap / (double)tot : 1.0;
    uint32_t ch = 0;
    int64_t bytes = 0;
    for (int r = 0; r < APF_R; r++) {
        a->c0[r] = ch;
        if (r >= e.nr || ((uintptr_t)e.p[r] & 15)) continue;
        const int64_t nb = (int64_t)((double)e.n[r] * f) & ~(int64_t)15;   /* (<= apf_cap <= 1 GiB: fits a u32) */
        a->p[r] = (const uint8_t *)e.p[r];
        a->n[r] = (uint32_t)nb;
        ch += (uint32_t)((nb + L2PF_CHUNK - 1) / L2PF_CHUNK);
        bytes += nb;
    }
    a->c0[APF_R] = ch;
    if (!ch) return false;
    /* 16 warps a block, a chunk a warp, no more blocks than multiprocessors */
    const int64_t nb = (ch + 15) / 16;
    a->nblk = (int)(nb < c->prop.multiProcessorCount ? nb : c->prop.multiProcessorCount);
    c->apf_bytes = bytes;
    return true;
}

/* Decode attention with 16-byte K/V loads. A K or V row (D values) is LPK lanes' 16-byte vectors, so
 * one warp load covers KPL = 32 / LPK keys; a warp takes chunks of U loads (CH keys) in turn and
 * issues all of a chunk's K and V loads before using any. Then:
 * - the G x U partial dots of a lane are summed over the LPK lanes of a key by halving exchanges
 *   (halve_sum: about G U shuffles instead of G U log2(LPK)), after which each lane holds whole dots;
 * - the scores go to shared memory ss[w][g][key group][u], where lane i of a segment of CH lanes
 *   takes entry i of head g's chunk: maximum and sum over the segment, one exponential a lane; the
 *   probabilities replace the scores there;
 * - each lane reads the probabilities of its keys back and accumulates its VPL values of the
 *   output (p v); at the end the key groups of a warp, then the warps (att_merge), are merged.
 * The G query heads of a KV head share every load (GQA); the cache's block size is a power of two
 * (bshift). On the H200, Qwen3-0.6B with 128 sequences of 128-256 positions: 27 us a layer at 55%
 * of the DRAM peak, against 58 us (26%) for k_attn, which reads 2-4 bytes a lane and reduces over
 * the warp for every key and head. */
/* A (token, query heads) pair's positions split over gridDim.z blocks (MLXCEL_CUDA_ATT_SPLIT; host
 * asp_plan): with few (token, head) blocks and long contexts one block a head streams its K/V
 * from a few multiprocessors (Llama-8B q4 batch 1 on an H100: 490 tok/s at 0-128 positions, 313
 * at 2048, the attention ~17 ns a position a layer). Each block takes one run of the positions,
 * merges its warps into (maximum, sum, unnormalized output) and stores them in its slot of the
 * scratch; the last block of the pair to finish (a counter, reset by it) merges the runs in order
 * into the output. The runs are cut on the device from the token's own positions (the graph
 * replays one grid for every step): np positions make min(S, floor(np / minspan)) runs of whole
 * chunks of a warp; blocks past the last run exit at once. One run: the kernel as
 * without the split. */
struct asp_args {
    float *acc;            /* [ASP_ENT][D]: a run's unnormalized output */
    float2 *ml;            /* [ASP_ENT]: its maximum and sum */
    unsigned *cnt;         /* [ASP_CNT]: runs done (zero between launches) */
    int S, minspan;        /* gridDim.z (1: no split); the fewest positions a run */
};
/* the runs of np positions (whole warp chunks of ch positions): how many (1: none) and their length */
__device__ __forceinline__ int asp_runs(const asp_args &sp, int np, int ch, int *span) {
    *span = np;
    if (sp.S <= 1 || np <= sp.minspan) return 1;
    int ns = min(sp.S, np / sp.minspan);
    int len = (np + ns - 1) / ns;
    len = (len + ch - 1) / ch * ch;
    ns = (np + len - 1) / len;
    *span = len;
    return ns;
}
/* (k_attn_vec, a split head: the last run's block) the runs' results merged into out as
 * att_merge stores a head's output, with the sink in the denominator */
template <int G>
__device__ __forceinline__ void asp_merge(const asp_args &sp, int nsp, size_t e0, int D, const float *sinks, int h0, float *out,
                                          size_t ob, int8_t *xq, float2 *xds, __nv_bfloat16 *xg) {
    __shared__ float cz[G][ASP_SMAX], lz[G];
    if ((int)threadIdx.x < G) {
        const int g = threadIdx.x;
        const size_t e = e0 + (size_t)g * sp.S;
        float M = -INFINITY;
        for (int z = 0; z < nsp; z++) M = fmaxf(M, __ldcg(&sp.ml[e + z]).x);
        float L = 0.f;
        for (int z = 0; z < nsp; z++) {
            const float2 ml = __ldcg(&sp.ml[e + z]);
            const float c = ml.x == -INFINITY ? 0.f : __expf(ml.x - M);
            cz[g][z] = c;
            L += ml.y * c;
        }
        if (sinks && M != -INFINITY) L += __expf(sinks[h0 + g] - M);
        lz[g] = L;
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; g++) {
        const size_t og = ob + (size_t)g * D, e = e0 + (size_t)g * sp.S;
        const float L = lz[g];
        for (int d0 = 0; d0 < D; d0 += blockDim.x) {
            const int d = d0 + threadIdx.x;
            if (xq && d0 + (int)(threadIdx.x & ~31) >= D) break;
            float a = 0.f;
            if (d < D) {
                for (int z = 0; z < nsp; z++) a += __ldcg(&sp.acc[(e + z) * D + d]) * cz[g][z];
                a = L > 0.f ? a / L : 0.f;
                out[og + d] = a;
                if (xg) st_gq(xg, og + d, a);
            }
            if (xq) quant_group(a, xq, xds, og + d);
        }
    }
}

template <typename T, int D, int G, int W, int U, bool PREP = false, bool EARLY = false, bool PF = false, bool OP = false>
__global__ void __launch_bounds__(W * 32)
k_attn_vec(const float *q, T *kp, T *vp, float *out, const int32_t *pos, const int32_t *seq,
           const int32_t *bt, int n_seqs, int max_blocks, int bshift, int n_blocks, int n_heads, int n_kv, float scale,
           int window, float softcap, const float *sinks, int8_t *xq, float2 *xds, __nv_bfloat16 *xg, int sbt_n,
           const qk_prep_args pa, const int32_t *slot, int64_t nslots, unsigned *cnt, const l2pf_args pf, const ao_args ao,
           const asp_args sp) {
    /* PF (one token, with EARLY): blocks past the query heads prefetch the next product's weights
     * (those of the first run) */
    if constexpr (PF)
        if ((int)blockIdx.y * G >= n_heads) { if (blockIdx.z == 0) l2pf_run(pf, (int)blockIdx.y - n_heads / G); return; }
    constexpr int VPL = 16 / (int)sizeof(T), LPK = D / VPL, KPL = 32 / LPK, CH = KPL * U;
    constexpr int NV = G * U, REM = NV >= LPK ? NV / LPK : 1, E = G * CH, NJ = (E + 31) / 32, SEG = CH < 32 ? CH : 32;
    static_assert(D % VPL == 0 && LPK >= 1 && LPK <= 32 && 32 % LPK == 0, "a K row is 1..32 lanes' 16-byte vectors");
    static_assert(CH <= 32 && (CH & (CH - 1)) == 0 && U <= 32, "a chunk is at most 32 keys, a power of two");
    __shared__ float sm[W][G], sl[W][G];
    __shared__ __align__(16) float sacc[W][G][D];
    __shared__ __align__(16) float ss[W][G][KPL][U];
    extern __shared__ int32_t sbt[];
    const int t = blockIdx.x, h0 = blockIdx.y * G, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int kvh = h0 / (n_heads / n_kv), kvdim = n_kv * D, bmask = (1 << bshift) - 1;
    /* EARLY (one token, MLXCEL_CUDA_ATTN_EARLY): before the PDL wait, the block table (to shared
     * memory) and each warp's first chunk of K/V, which no kernel of this step writes: pos, seq,
     * slot and the table were uploaded by a copy before this step's kernels, and the only cache
     * slot a one-token step writes is the token's own (slot[t], by the q/k preparation before this
     * kernel, or by this kernel with PREP). Keys at that slot are marked (epend) and loaded after
     * the wait, as every key is without EARLY. */
    const int kg = lane / LPK, d0 = (lane % LPK) * VPL;   /* this lane's key within a load, first value */
    /* the token's keys p0..p_end and its block table btr (in shared memory when it fits) */
    int p_end = -1, p0 = 0;
    const int32_t *btr = bt;
    /* the split (sp.S > 1): this block's run of the token's positions, the runs (nsp; 1: no split)
     * and whether this block has none (a token outside the sequences: one run, block 0's) */
    int nsp = 1, sp0 = 0, sp_end = -1;
    bool sp_none = false;
    const auto att_split = [&]() {
        if (sp.S <= 1) return;
        if (seq[t] < 0 || seq[t] >= n_seqs || pos[t] < 0) { sp_none = blockIdx.z > 0; return; }
        const int e = min(pos[t], (max_blocks << bshift) - 1), b = window > 0 ? max(0, pos[t] - window + 1) : 0;
        int span;
        nsp = asp_runs(sp, e - b + 1, CH, &span);
        sp0 = b + (int)blockIdx.z * span;
        sp_end = min(e, sp0 + span - 1);
        sp_none = (int)blockIdx.z >= nsp;
    };
    const auto att_span = [&]() {
        p_end = min(pos[t], (max_blocks << bshift) - 1);
        p0 = window > 0 ? max(0, pos[t] - window + 1) : 0;
        if (nsp > 1) { p0 = sp0; p_end = sp_end; }
        btr = bt + (size_t)seq[t] * max_blocks;
        if (sbt_n > 0) {
            const int nb = min((p_end >> bshift) + 1, sbt_n);
            for (int i = (nsp > 1 ? p0 >> bshift : 0) + threadIdx.x; i < nb; i += blockDim.x) sbt[i] = btr[i];
            __syncthreads();
            btr = sbt;
        }
    };
    /* OP: the head's columns of o's weight into shared memory (issued before the wait), and the
     * epilogue (see ao_args) */
    static_assert(!OP || (EARLY && G == 1 && (D == 64 || D == 128) && W * 32 >= D), "OP: one query head, EARLY, D 64 or 128");
    constexpr int AO_CB = D / 2, AO_NP = AO_CB / 16, AO_PER = 8 / AO_NP;   /* q4: bytes a row, 16-byte pieces, rows a swizzle step */
    __shared__ __align__(16) float ao_so[OP ? D : 1];
    __shared__ __align__(16) int8_t ao_q[OP ? D : 1];
    __shared__ float2 ao_ds[OP ? D / 32 : 1];
    __shared__ float ao_sh[OP ? W : 1];
    __shared__ bool ao_last;
    const auto ao_fetch = [&]() {
        if constexpr (OP) {
            uint8_t *wsm = (uint8_t *)sbt + ao.sofs;
            const int rows = ao.rows, sbb = (D >> ao.gs_shift) * 2, n4 = sbb >> 2;
            /* piece pc of row r at piece pc ^ ((r / AO_PER) % AO_NP): a quarter warp's 16-byte loads of
             * consecutive rows fall in distinct banks */
            for (int j = threadIdx.x; j < rows * AO_NP; j += blockDim.x) {
                const int r = j / AO_NP, pc = j % AO_NP;
                cp_async16(wsm + (size_t)r * AO_CB + ((pc ^ ((r / AO_PER) & (AO_NP - 1))) << 4),
                           ao.W + (size_t)r * ao.row_wb + (size_t)h0 * AO_CB + (pc << 4));
            }
            uint8_t *ssm = wsm + (size_t)rows * AO_CB, *bsm = ssm + (size_t)rows * sbb;
            const size_t s0 = (size_t)((h0 * D) >> ao.gs_shift) * 2;
            for (int j = threadIdx.x; j < rows * n4; j += blockDim.x) {
                const int r = j / n4, pc = j % n4;
                cp_async4z(ssm + (size_t)r * sbb + 4 * pc, ao.S + (size_t)r * ao.row_sb + s0 + 4 * pc, 4);
                cp_async4z(bsm + (size_t)r * sbb + 4 * pc, ao.B + (size_t)r * ao.row_sb + s0 + 4 * pc, 4);
            }
            cp_async_commit();
        }
    };
    const auto ao_end = [&]() {
        if constexpr (OP) {
            cp_async_wait<0>();
            __syncthreads();   /* ao_so (att_merge's or zeros) and every thread's copies */
            constexpr int NG = D / 32;
            if (w < NG) quant_group(ao_so[32 * w + lane], ao_q, ao_ds, (size_t)(32 * w + lane));
            __syncthreads();
            uint32_t xw[NG][8];   /* x of each group in nibble order (x_words) */
            float2 dsg[NG];
#pragma unroll
            for (int g = 0; g < NG; g++) {
                x_words<4>(*(const uint4 *)(ao_q + 32 * g), *(const uint4 *)(ao_q + 32 * g + 16), xw[g]);
                dsg[g] = ao_ds[g];
            }
            const uint8_t *wsm = (const uint8_t *)sbt + ao.sofs;
            const int rows = ao.rows, sbe = D >> ao.gs_shift;
            const unsigned short *ssm = (const unsigned short *)(wsm + (size_t)rows * AO_CB), *bsm = ssm + (size_t)rows * sbe;
            for (int r = threadIdx.x; r < rows; r += blockDim.x) {
                float acc = 0.f;
#pragma unroll
                for (int g = 0; g < NG; g++) {
                    const int ia = dot_q4n(*(const uint4 *)(wsm + (size_t)r * AO_CB + ((g ^ ((r / AO_PER) & (AO_NP - 1))) << 4)), xw[g]);
                    const int si = r * sbe + ((32 * g) >> ao.gs_shift);
                    const float s = ao.f16 ? __half2float(__ushort_as_half(ssm[si])) : __bfloat162float(__ushort_as_bfloat16(ssm[si]));
                    const float b = ao.f16 ? __half2float(__ushort_as_half(bsm[si])) : __bfloat162float(__ushort_as_bfloat16(bsm[si]));
                    acc = fmaf(s * dsg[g].x, (float)ia, fmaf(b, dsg[g].y, acc));
                }
                ao.part[(size_t)h0 * rows + r] = acc;
            }
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) {
                ao_last = atomicAdd(ao.cnt, 1u) == gridDim.y - 1;
                if (ao_last) *ao.cnt = 0;
            }
            __syncthreads();
            if (!ao_last) return;
            __threadfence();
            /* the last block: o = the heads' parts in order, sum = a + o, and the next norm's inputs;
             * a thread's rows two at a time, their residuals, gammas and up to 16 heads' parts loaded
             * before any is used (one round trip, not one a head) */
            float ss = 0.f;
            for (int r0 = threadIdx.x; r0 < rows; r0 += 2 * blockDim.x) {   /* (rows % 32 == 0: whole warps) */
                const int r1 = r0 + blockDim.x;
                const bool has1 = r1 < rows;   /* (uniform in the warp) */
                const float a0 = ao.a[r0], a1v = has1 ? ao.a[r1] : 0.f;
                const float g0 = ao.g ? ao.g[r0] + ao.add_one : 1.f, g1 = ao.g && has1 ? ao.g[r1] + ao.add_one : 1.f;
                float o0 = 0.f, o1 = 0.f;
                for (int hc = 0; hc < n_heads; hc += 16) {
                    float p0[16], p1[16];
#pragma unroll
                    for (int j = 0; j < 16; j++) {
                        const bool ok = hc + j < n_heads;
                        p0[j] = ok ? __ldcg(ao.part + (size_t)(hc + j) * rows + r0) : 0.f;
                        p1[j] = ok && has1 ? __ldcg(ao.part + (size_t)(hc + j) * rows + r1) : 0.f;
                    }
#pragma unroll
                    for (int j = 0; j < 16; j++)
                        if (hc + j < n_heads) { o0 += p0[j]; o1 += p1[j]; }
                }
                ao.y[r0] = o0;
                const float hs0 = a0 + o0;
                ao.sum[r0] = hs0;
                ss = fmaf(hs0, hs0, ss);
                quant_group(hs0 * g0, ao.oq, ao.ods, (size_t)r0);
                if (has1) {
                    ao.y[r1] = o1;
                    const float hs1 = a1v + o1;
                    ao.sum[r1] = hs1;
                    ss = fmaf(hs1, hs1, ss);
                    quant_group(hs1 * g1, ao.oq, ao.ods, (size_t)r1);
                }
            }
            ss = warp_sum(ss);
            if (lane == 0) ao_sh[w] = ss;
            __syncthreads();
            if (threadIdx.x == 0) {
                float t2 = 0.f;
                for (int j = 0; j < W; j++) t2 += ao_sh[j];
                *ao.ss = t2;
            }
        }
    };
    uint4 ekr[EARLY ? U : 1], evr[EARLY ? U : 1];
    uint32_t eok = 0, epend = 0;
    constexpr int PH = D / 2;
    const int prole = (int)threadIdx.x / PH, pi = (int)threadIdx.x % PH;   /* PREP: group 0 q, 1 k, 2 v, 3 and up none */
    qk_pre ppre = {};   /* (PREP) qk_begin's part of the q/k preparation, before the wait */
    if constexpr (PREP)
        if (prole < 2) ppre = qk_begin(pa, prole == 0, t, pi, true, pos);
    if constexpr (EARLY) {
        pdl_release_at_entry();
        att_split();
        if (sp_none) return;
        if (!(seq[t] < 0 || seq[t] >= n_seqs || pos[t] < 0)) {
            att_span();
            const int64_t cur = slot[t];
            const int c0 = p0 + w * CH;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int pj = c0 + u * KPL + kg, blk = pj <= p_end ? btr[pj >> bshift] : -1;
                const bool ok = blk >= 0 && blk < n_blocks;
                eok |= (uint32_t)ok << u;
                ekr[u] = evr[u] = make_uint4(0, 0, 0, 0);
                if (ok) {
                    const size_t sl = (size_t)blk << bshift | (size_t)(pj & bmask), o = sl * kvdim + (size_t)kvh * D + d0;
                    if ((int64_t)sl == cur) epend |= 1u << u;
                    else { ekr[u] = *(const uint4 *)(kp + o); evr[u] = *(const uint4 *)(vp + o); }
                }
            }
        }
        if constexpr (OP) ao_fetch();
        pdl_wait();
        pdl_release_after_wait();
    } else {
        pdl_entry();
        att_split();
        if (sp_none) return;
    }
    /* PREP (one token, G = 1, MLXCEL_CUDA_ATTN_PREP): the deferred q/k norms and ropes and the cache
     * write of k_qk_prep done here, by three groups of D/2 threads side by side: the block's query
     * head (in place: no other block reads it), its KV head's new key and its new value (both in
     * shared memory, rounded as the cache holds them, read instead of the cache at their slot). The
     * KV head's first block writes them to the cache. The query head goes to shared memory too
     * (qnew, read by the loop below: not back from the L2). After the prologue the KV head's blocks
     * count themselves in cnt[kvh] (each has read k), and the last one stores the prepared k in place
     * at its end and resets the count: the count's round trip runs under the attention. */
    static_assert(!PREP || (G == 1 && 3 * PH <= W * 32 && PH % 32 == 0), "PREP: one query head; D/2 whole warps");
    __shared__ __align__(16) T knew[PREP ? D : 1], vnew[PREP ? D : 1];
    __shared__ __align__(16) float qnew[PREP ? D : 1];   /* the prepared query head, read below instead of q */
    __shared__ float psh[PREP ? W : 1];
    __shared__ bool plast;
    unsigned pold = 0;   /* (PREP, thread 0) the KV head's count before this block's */
    int64_t pslot = -1;
    float px0 = 0.f, px1 = 0.f;   /* this thread's pair of its group's head, prepared */
    if constexpr (PREP) {
        const int64_t s = slot[t];
        pslot = s >= 0 && s < nslots ? s : -1;
        if (prole == 0) qk_load(pa, true, h0, t, pi, true, px0, px1);
        else if (prole == 1) qk_load(pa, false, kvh, t, pi, true, px0, px1);
        else if (prole == 2) {
            const float *vr = pa.v + ((int64_t)t * n_kv + kvh) * D;
            px0 = vr[pi]; px1 = vr[pi + PH];
        }
        float ss = 0.f;
        if (pa.qnorm || pa.knorm) {   /* block_sum's arithmetic over each group's warps */
            constexpr int NWR = PH / 32;
            const float v = warp_sum(fmaf(px1, px1, px0 * px0));
            if (lane == 0) psh[w] = v;
            __syncthreads();
            if (prole < 2) ss = warp_sum(lane < NWR ? psh[prole * NWR + lane] : 0.f);
        }
        if (prole < 2) qk_finish(pa, prole == 0, true, ppre, ss, px0, px1);
        if (prole == 0) {
            if (nsp == 1) {   /* (split: the last run's block, once every run has read q) */
                float *xr = pa.q + ((int64_t)t * n_heads + h0) * D;
                xr[pi] = px0; xr[pi + PH] = px1;
            }
            qnew[pi] = px0; qnew[pi + PH] = px1;
        } else if (prole <= 2) {
            T *sn = prole == 1 ? knew : vnew;
            st_kv(&sn[pi], px0); st_kv(&sn[pi + PH], px1);
            if (pslot >= 0 && h0 % (n_heads / n_kv) == 0 && blockIdx.z == 0) {
                T *cd = (prole == 1 ? kp : vp) + pslot * kvdim + (size_t)kvh * D;
                st_kv(cd + pi, px0); st_kv(cd + pi + PH, px1);
            }
        }
        __syncthreads();   /* the new key and value, and this block's q, before the loads below */
        /* every thread's read of the raw k is done: the count now, its answer used at the end (the
         * round trip under the attention, not after it) */
        if (threadIdx.x == 0) pold = atomicAdd(&cnt[kvh], 1u);
    }
    /* (PREP) the prepared k stored by the KV head's last block (the last to count) */
    const auto prep_end = [&]() {
        if constexpr (PREP) {
            if (threadIdx.x == 0) {
                plast = pold == (unsigned)((n_heads / n_kv) * nsp) - 1;   /* (every run of every query head) */
                if (plast) cnt[kvh] = 0;
            }
            __syncthreads();
            if (plast && prole == 1) {
                float *kr = pa.k + ((int64_t)t * n_kv + kvh) * D;
                kr[pi] = px0; kr[pi + PH] = px1;
            }
        }
    };
    if (seq[t] < 0 || seq[t] >= n_seqs || pos[t] < 0) {
        att_zero(out, xq, xds, ((size_t)t * n_heads + h0) * D, G * D);
        prep_end();
        if constexpr (OP) {
            for (int d = threadIdx.x; d < D; d += blockDim.x) ao_so[d] = 0.f;
            ao_end();
        }
        return;
    }
    float qv[G][VPL], acc[G][VPL];
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float4 *qr = PREP ? (const float4 *)(qnew + d0) : (const float4 *)(q + ((size_t)t * n_heads + h0 + g) * D + d0);
#pragma unroll
        for (int i = 0; i < VPL / 4; i++) {
            const float4 a = qr[i];
            qv[g][4 * i] = a.x * scale; qv[g][4 * i + 1] = a.y * scale; qv[g][4 * i + 2] = a.z * scale; qv[g][4 * i + 3] = a.w * scale;
        }
#pragma unroll
        for (int j = 0; j < VPL; j++) acc[g][j] = 0.f;
    }
    /* softmax state of entry slot j of this lane (head (lane + 32 j) / CH; the same on its segment) */
    float mj[NJ], lj[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) { mj[j] = -INFINITY; lj[j] = 0.f; }
    if constexpr (!EARLY) att_span();   /* (EARLY: before the wait) */
    float *ssw = &ss[w][0][0][0];
    bool efirst = EARLY;
    for (int c0 = p0 + w * CH; c0 <= p_end; c0 += W * CH) {
        uint4 kr[U], vr[U];
        uint32_t okm = 0;
        bool pre = false;
        if constexpr (EARLY) pre = efirst;
        if (pre) {   /* the chunk loaded before the wait; the keys at the token's slot now */
            efirst = false;
            okm = eok;
#pragma unroll
            for (int u = 0; u < U; u++) {
                kr[u] = ekr[u]; vr[u] = evr[u];
                if (epend >> u & 1u) {
                    const int pj = c0 + u * KPL + kg;
                    const size_t sl = (size_t)btr[pj >> bshift] << bshift | (size_t)(pj & bmask), o = sl * kvdim + (size_t)kvh * D + d0;
                    if (PREP && (int64_t)sl == pslot) {
                        kr[u] = *(const uint4 *)(knew + d0);
                        vr[u] = *(const uint4 *)(vnew + d0);
                    } else {
                        kr[u] = *(const uint4 *)(kp + o);
                        vr[u] = *(const uint4 *)(vp + o);
                    }
                }
            }
        } else {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int pj = c0 + u * KPL + kg, blk = pj <= p_end ? btr[pj >> bshift] : -1;
            const bool ok = blk >= 0 && blk < n_blocks;   /* as the CPU reference: bad blocks are skipped */
            okm |= (uint32_t)ok << u;
            kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
            if (ok) {
                const size_t sl = (size_t)blk << bshift | (size_t)(pj & bmask), o = sl * kvdim + (size_t)kvh * D + d0;
                if (PREP && (int64_t)sl == pslot) {   /* the new key and value */
                    kr[u] = *(const uint4 *)(knew + d0);
                    vr[u] = *(const uint4 *)(vnew + d0);
                } else {
                    kr[u] = *(const uint4 *)(kp + o);
                    vr[u] = *(const uint4 *)(vp + o);
                }
            }
        }
        }
        float v[NV];   /* partial dots: v[g U + u] */
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[VPL];
            unpack_vec<T>(kr[u], kf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float d = 0.f;
#pragma unroll
                for (int j = 0; j < VPL; j++) d = fmaf(qv[g][j], kf[j], d);
                v[g * U + u] = d;
            }
        }
        /* halving exchanges over the key's LPK lanes: the lane with bit o keeps the upper half */
        int base = 0;
        halve_sum<NV, LPK / 2>(v, lane, base);
#pragma unroll
        for (int r = 0; r < REM; r++) {   /* whole dots v[r]: head g, load u of this lane's key group */
            const int idx = base + r, g = idx / U, u = idx % U;
            float d = v[r];
            if (softcap > 0.f) d = softcap * tanhf(d / softcap);
            ssw[(g * KPL + kg) * U + u] = (okm >> u & 1u) ? d : -INFINITY;
        }
        __syncwarp();
        float corr[G];
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int i = lane + 32 * j;
            const float sc = i < E ? ssw[i] : -INFINITY;
            float mx = sc;
#pragma unroll
            for (int o = 1; o < SEG; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mn = fmaxf(mj[j], mx);
            const float cj = mn == -INFINITY ? 1.f : __expf(mj[j] - mn);
            const float e = mn == -INFINITY ? 0.f : __expf(sc - mn);
            lj[j] = lj[j] * cj + e;
            mj[j] = mn;
            if (i < E) ssw[i] = e;
#pragma unroll
            for (int g = 0; g < G; g++)   /* head g's segment starts at entry g CH */
                if ((g * CH) / 32 == j) corr[g] = __shfl_sync(0xffffffffu, cj, (g * CH) % 32);
        }
        __syncwarp();
#pragma unroll
        for (int g = 0; g < G; g++)
#pragma unroll
            for (int j = 0; j < VPL; j++) acc[g][j] *= corr[g];
        float e[G][U];
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float *er = ssw + (g * KPL + kg) * U;
            if constexpr (U % 4 == 0) {
#pragma unroll
                for (int u = 0; u < U; u += 4) {
                    const float4 a = *(const float4 *)(er + u);
                    e[g][u] = a.x; e[g][u + 1] = a.y; e[g][u + 2] = a.z; e[g][u + 3] = a.w;
                }
            } else {
#pragma unroll
                for (int u = 0; u < U; u++) e[g][u] = er[u];
            }
        }
        __syncwarp();   /* read before the next chunk's scores overwrite them */
#pragma unroll
        for (int u = 0; u < U; u++) {
            float vf[VPL];
            unpack_vec<T>(vr[u], vf);
#pragma unroll
            for (int g = 0; g < G; g++)
#pragma unroll
                for (int j = 0; j < VPL; j++) acc[g][j] = fmaf(e[g][u], vf[j], acc[g][j]);
        }
    }
    /* the sums over each head's segment; the key groups of the warp add their outputs */
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int o = 1; o < SEG; o <<= 1) lj[j] += __shfl_xor_sync(0xffffffffu, lj[j], o);
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float mg = __shfl_sync(0xffffffffu, mj[(g * CH) / 32], (g * CH) % 32);
        const float lg = __shfl_sync(0xffffffffu, lj[(g * CH) / 32], (g * CH) % 32);
#pragma unroll
        for (int o = LPK; o < 32; o <<= 1)
#pragma unroll
            for (int j = 0; j < VPL; j++) acc[g][j] += __shfl_xor_sync(0xffffffffu, acc[g][j], o);
        if (lane < LPK) {
#pragma unroll
            for (int i = 0; i < VPL / 4; i++)
                *(float4 *)&sacc[w][g][d0 + 4 * i] = make_float4(acc[g][4 * i], acc[g][4 * i + 1], acc[g][4 * i + 2], acc[g][4 * i + 3]);
        }
        if (lane == 0) { sm[w][g] = mg; sl[w][g] = lg; }
    }
    __syncthreads();
    if (nsp > 1) {   /* (never with OP: the host does not split it) */
        /* this run's (maximum, sum, output) over the warps into its scratch slot; the last run's
         * block merges them */
        const size_t e0 = ((size_t)t * n_heads + h0) * sp.S;
        float cj[W];
#pragma unroll
        for (int g = 0; g < G; g++) {
            float M = -INFINITY, L = 0.f;
#pragma unroll
            for (int j = 0; j < W; j++) M = fmaxf(M, sm[j][g]);
#pragma unroll
            for (int j = 0; j < W; j++) { cj[j] = sm[j][g] == -INFINITY ? 0.f : __expf(sm[j][g] - M); L += sl[j][g] * cj[j]; }
            const size_t e = e0 + (size_t)g * sp.S + blockIdx.z;
            for (int d = threadIdx.x; d < D; d += blockDim.x) {
                float a = 0.f;
#pragma unroll
                for (int j = 0; j < W; j++) a += sacc[j][g][d] * cj[j];
                sp.acc[e * D + d] = a;
            }
            if (threadIdx.x == 0) sp.ml[e] = make_float2(M, L);
        }
        __threadfence();
        __syncthreads();
        __shared__ bool slast;
        if (threadIdx.x == 0) {
            unsigned *sc = &sp.cnt[(size_t)t * n_heads + h0];
            slast = atomicAdd(sc, 1u) == (unsigned)nsp - 1;
            if (slast) *sc = 0;
        }
        __syncthreads();
        if (slast) {
            __threadfence();
            asp_merge<G>(sp, nsp, e0, D, sinks, h0, out, ((size_t)t * n_heads + h0) * D, xq, xds, xg);
            if constexpr (PREP)
                if (prole == 0) {   /* every run has read the raw q (before counting itself) */
                    float *xr = pa.q + ((int64_t)t * n_heads + h0) * D;
                    xr[pi] = px0; xr[pi + PH] = px1;
                }
        }
        prep_end();
        return;
    }
    att_merge<W, G>(sm, sl, &sacc[0][0][0], D, D, sinks, h0, out, ((size_t)t * n_heads + h0) * D, xq, xds, xg, OP ? ao_so : nullptr);
    prep_end();
    ao_end();
}

template <typename T>
__global__ void k_qk_prep(const qk_prep_args a, T *kp, T *vp, const int32_t *slot, const int32_t *pos, int64_t nslots) {
    __shared__ float sh[32];
    const int t = blockIdx.x, hh = blockIdx.y, half = a.D / 2, i = threadIdx.x;
    const bool ok = i < half;
    const int kvdim = a.nkv * a.D;
    const int64_t s = slot[t];   /* (before the wait: the meta arrays, like qk_begin's reads) */
    const bool store = s >= 0 && s < nslots;
    const bool isq = hh < a.nh;
    const qk_pre pre = hh < a.nh + a.nkv ? qk_begin(a, isq, t, i, ok, pos) : qk_pre{};
    pdl_entry();
    if (hh >= a.nh + a.nkv) {   /* v head */
        const int vh = hh - a.nh - a.nkv;
        const int64_t j = (int64_t)t * kvdim + (int64_t)vh * a.D;
        if (ok && (store || a.part)) {
            const float v0 = qk_in(a, a.v, a.vofs, j + i), v1 = qk_in(a, a.v, a.vofs, j + i + half);
            if (a.part) { a.vw[j + i] = v0; a.vw[j + i + half] = v1; }
            if (store) {
                st_kv(vp + s * kvdim + (size_t)vh * a.D + i, v0);
                st_kv(vp + s * kvdim + (size_t)vh * a.D + i + half, v1);
            }
        }
        return;
    }
    const int hd = isq ? hh : hh - a.nh;
    float x0, x1;
    qk_load(a, isq, hd, t, i, ok, x0, x1);
    const float ss = (isq ? a.qnorm : a.knorm) ? block_sum(fmaf(x1, x1, x0 * x0), sh) : 0.f;
    qk_finish(a, isq, ok, pre, ss, x0, x1);
    if (!ok) return;
    float *xr = (isq ? a.q : a.k) + (isq ? ((int64_t)t * a.nh + hd) * a.D : ((int64_t)t * a.nkv + hd) * a.D);
    xr[i] = x0; xr[i + half] = x1;
    if (!isq && store) {
        st_kv(kp + s * kvdim + (size_t)hd * a.D + i, x0);
        st_kv(kp + s * kvdim + (size_t)hd * a.D + i + half, x1);
    }
}

/* Prompt attention, tiled (MLXCEL_CUDA_ATTN=tiled; not yet the default: written after the last
 * GPU run of its session, see NOTES.md). Block (tile, head): up to ATT_TQ tokens of one sequence
 * (the queries, in shared memory) against that sequence's keys ATT_TK at a time (K and V rows
 * in shared memory, each loaded once for all the tile's queries, instead of once per query as
 * k_attn does). 8 warps, 8 queries each; in a key tile lane j owns key j for the scores
 * (online softmax per query with warp reductions), then every lane accumulates its head values
 * d = lane + 32 i over the tile's keys. Same masking, softcap, sinks and int8 epilogue as k_attn. */
#define ATT_TQ 64
#define ATT_TK 32
/* The cache slots of keys k0 .. k0 + nk - 1 of a sequence (block table btr) for a key tile, by
 * the block's first nk threads: -1 past kmax and for blocks outside the pool (skipped, as the CPU
 * reference does). */
__device__ __forceinline__ void att_tile_slots(int *sslot, int nk, int k0, int kmax, const int32_t *btr, int block_size,
                                               int n_blocks) {
    if ((int)threadIdx.x < nk) {
        const int p = k0 + threadIdx.x;
        const int blk = p <= kmax ? btr[p / block_size] : -1;
        sslot[threadIdx.x] = blk >= 0 && blk < n_blocks ? blk * block_size + p % block_size : -1;
    }
}

template <typename T, int NI>
__global__ void __launch_bounds__(256)
k_attn_tiled(const float *q, const T *kp, const T *vp, float *out, const int32_t *pos, const int32_t *seq,
             const int32_t *bt, const int2 *tiles, int max_blocks, int block_size, int n_blocks, int n_heads,
             int n_kv, int D, float scale, int window, float softcap, const float *sinks, int8_t *xq, float2 *xds) {
    pdl_entry();
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const int DP = D + 4;                       /* padded rows: float4 reads without bank conflicts */
    float *sq = smem, *sk = sq + ATT_TQ * DP, *sv = sk + ATT_TK * DP;
    int *sslot = (int *)(sv + ATT_TK * DP);
    __shared__ int s_kmin, s_kmax;
    const int2 tile = tiles[blockIdx.x];
    const int t0 = tile.x, nt = tile.y, h = blockIdx.y;
    const int kvh = h / (n_heads / n_kv), kvdim = n_kv * D, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int32_t *btr = bt + (size_t)seq[t0] * max_blocks;
    const int pmax = max_blocks * block_size - 1;
    if (threadIdx.x == 0) { s_kmin = INT_MAX; s_kmax = -1; }
    for (int e = threadIdx.x; e < ATT_TQ * D; e += blockDim.x) {
        const int r = e / D, d = e % D;
        sq[r * DP + d] = r < nt ? q[((size_t)(t0 + r) * n_heads + h) * D + d] * scale : 0.f;
    }
    __syncthreads();
    if ((int)threadIdx.x < nt) {
        const int p = pos[t0 + threadIdx.x];
        atomicMax(&s_kmax, min(p, pmax));
        atomicMin(&s_kmin, window > 0 ? max(0, p - window + 1) : 0);
    }
    int qp[8];
    float m[8], l[8], acc[8][NI];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int r = w * 8 + j;
        qp[j] = r < nt ? pos[t0 + r] : -1;
        m[j] = -INFINITY; l[j] = 0.f;
#pragma unroll
        for (int i = 0; i < NI; i++) acc[j][i] = 0.f;
    }
    __syncthreads();
    const int kmin = s_kmin, kmax = s_kmax;
    for (int k0 = kmin; k0 <= kmax; k0 += ATT_TK) {
        att_tile_slots(sslot, ATT_TK, k0, kmax, btr, block_size, n_blocks);
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_TK * D; e += blockDim.x) {
            const int j = e / D, d = e % D, sl = sslot[j];
            float kv = 0.f, vv = 0.f;
            if (sl >= 0) {
                const size_t o = (size_t)sl * kvdim + (size_t)kvh * D + d;
                kv = ld_s(kp + o); vv = ld_s(vp + o);
            }
            sk[j * DP + d] = kv; sv[j * DP + d] = vv;
        }
        __syncthreads();
        /* scores: lane = key */
        float sc[8];
#pragma unroll
        for (int j = 0; j < 8; j++) sc[j] = 0.f;
        const float4 *kr = (const float4 *)(sk + lane * DP);
        for (int d4 = 0; d4 < D / 4; d4++) {
            const float4 kk = kr[d4];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float4 qq = ((const float4 *)(sq + (w * 8 + j) * DP))[d4];
                sc[j] = fmaf(qq.x, kk.x, fmaf(qq.y, kk.y, fmaf(qq.z, kk.z, fmaf(qq.w, kk.w, sc[j]))));
            }
        }
        const int kpos = k0 + lane;
        const bool kvalid = sslot[lane] >= 0;
        float pj[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const bool ok = kvalid && kpos <= qp[j] && (window <= 0 || kpos > qp[j] - window);
            float s = sc[j];
            if (softcap > 0.f) s = softcap * tanhf(s / softcap);
            s = ok ? s : -INFINITY;
            const float mnew = fmaxf(m[j], warp_max(s));
            if (mnew == -INFINITY) { pj[j] = 0.f; continue; }
            const float corr = m[j] == -INFINITY ? 0.f : __expf(m[j] - mnew);
            pj[j] = ok ? __expf(s - mnew) : 0.f;
            l[j] = l[j] * corr + warp_sum(pj[j]);
#pragma unroll
            for (int i = 0; i < NI; i++) acc[j][i] *= corr;
            m[j] = mnew;
        }
        for (int kj = 0; kj < ATT_TK; kj++) {
            float vr[NI];
#pragma unroll
            for (int i = 0; i < NI; i++) { const int d = lane + 32 * i; vr[i] = d < D ? sv[kj * DP + d] : 0.f; }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float p = __shfl_sync(0xffffffffu, pj[j], kj);
#pragma unroll
                for (int i = 0; i < NI; i++) acc[j][i] = fmaf(p, vr[i], acc[j][i]);
            }
        }
        __syncthreads();   /* the tile's K/V are consumed before the next load */
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int r = w * 8 + j;
        if (r >= nt) break;   /* the same for the whole warp */
        float L = l[j];
        if (sinks && m[j] != -INFINITY) L += __expf(sinks[h] - m[j]);
        const size_t ob = ((size_t)(t0 + r) * n_heads + h) * D;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int d = lane + 32 * i;
            if (xq && 32 * i >= D) break;
            const float a = d < D && L > 0.f ? acc[j][i] / L : 0.f;
            if (d < D) out[ob + d] = a;
            if (xq) quant_group(a, xq, xds, ob + d);
        }
    }
}

/* Prompt attention on tensor cores (bf16 KV cache; head sizes 32, 64, 128), FlashAttention-2
 * style: a block per (tile of up to 64 consecutive tokens of one sequence, head), 4 warps of 16
 * queries; K and V (transposed) tiles of AM_TK keys in shared memory; S = Q K^T and O += P V by
 * mma.sync m16n8k16 (bf16 in, f32 accumulate), the online softmax on the S fragments, P kept in
 * registers as the A operand of the second product. Q (pre-scaled) and P are rounded to bf16.
 * Fragments (PTX ISA, m16n8k16; g = lane / 4, c2 = 2 (lane % 4)): A regs {row g, col c2},
 * {g+8, c2}, {g, c2+8}, {g+8, c2+8}; B regs {k c2, n g}, {k c2+8, n g}; C {row g, cols c2, c2+1},
 * {row g+8, cols c2, c2+1}; each register holds two consecutive columns (A, C) or k (B). */
#define AM_TK 32
template <int D>
__global__ void __launch_bounds__(128)
k_attn_mma(const float *q, const __nv_bfloat16 *kp, const __nv_bfloat16 *vp, float *out, const int32_t *pos,
           const int32_t *seq, const int32_t *bt, const int2 *tiles, int max_blocks, int block_size, int n_blocks,
           int n_heads, int n_kv, float scale, int window, float softcap, const float *sinks) {
    pdl_entry();
    constexpr int QS = D + 8, KS = D + 8, VS = AM_TK + 8;   /* padded rows: fragment reads hit 32 banks */
    __shared__ __align__(16) __nv_bfloat16 sq[64 * QS];
    __shared__ __align__(16) __nv_bfloat16 sk[AM_TK * KS];
    __shared__ __align__(16) __nv_bfloat16 svt[D * VS];
    __shared__ int sslot[AM_TK];
    __shared__ int s_kmin, s_kmax;
    const int2 tile = tiles[blockIdx.x];
    const int t0 = tile.x, nt = tile.y, h = blockIdx.y;
    const int kvh = h / (n_heads / n_kv), kvdim = n_kv * D;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c2 = 2 * (lane & 3);
    const int32_t *btr = bt + (size_t)seq[t0] * max_blocks;
    const int pmax = max_blocks * block_size - 1;
    if (threadIdx.x == 0) { s_kmin = INT_MAX; s_kmax = -1; }
    for (int e = threadIdx.x; e < 64 * (D / 2); e += 128) {
        const int r = e / (D / 2), d = 2 * (e % (D / 2));
        float2 v = make_float2(0.f, 0.f);
        if (r < nt) v = *(const float2 *)(q + ((size_t)(t0 + r) * n_heads + h) * D + d);
        *(__nv_bfloat162 *)(sq + r * QS + d) = __floats2bfloat162_rn(v.x * scale, v.y * scale);
    }
    __syncthreads();
    if ((int)threadIdx.x < nt) {
        const int p = pos[t0 + threadIdx.x];
        atomicMax(&s_kmax, min(p, pmax));
        atomicMin(&s_kmin, window > 0 ? max(0, p - window + 1) : 0);
    }
    const int rq = w * 16 + g;   /* this lane's query rows: rq and rq + 8 of the tile */
    uint32_t qa[D / 16][4];
#pragma unroll
    for (int s = 0; s < D / 16; s++) {
        qa[s][0] = *(const uint32_t *)(sq + rq * QS + 16 * s + c2);
        qa[s][1] = *(const uint32_t *)(sq + (rq + 8) * QS + 16 * s + c2);
        qa[s][2] = *(const uint32_t *)(sq + rq * QS + 16 * s + 8 + c2);
        qa[s][3] = *(const uint32_t *)(sq + (rq + 8) * QS + 16 * s + 8 + c2);
    }
    const int qp0 = rq < nt ? pos[t0 + rq] : -1, qp1 = rq + 8 < nt ? pos[t0 + rq + 8] : -1;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    __syncthreads();
    const int kmin = s_kmin, kmax = s_kmax;
    for (int k0 = kmin; k0 <= kmax; k0 += AM_TK) {
        att_tile_slots(sslot, AM_TK, k0, kmax, btr, block_size, n_blocks);
        __syncthreads();
        for (int e = threadIdx.x; e < AM_TK * (D / 8); e += 128) {   /* 8 values (16 bytes) a step; the lanes
                                                                   * of a warp take different keys, so
                                                                   * that the transposed V stores do not
                                                                   * share banks */
            const int j = e % AM_TK, d8 = 8 * (e / AM_TK), sl = sslot[j];
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (sl >= 0) {
                const size_t o_ = (size_t)sl * kvdim + (size_t)kvh * D + d8;
                kv = *(const uint4 *)(kp + o_);
                vv = *(const uint4 *)(vp + o_);
            }
            *(uint4 *)(sk + j * KS + d8) = kv;
            const __nv_bfloat16 *vh = (const __nv_bfloat16 *)&vv;
#pragma unroll
            for (int i = 0; i < 8; i++) svt[(d8 + i) * VS + j] = vh[i];
        }
        __syncthreads();
        float s[AM_TK / 8][4];
#pragma unroll
        for (int j = 0; j < AM_TK / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
            for (int j = 0; j < AM_TK / 8; j++) {
                const __nv_bfloat16 *kb = sk + (8 * j + g) * KS + 16 * ks + c2;
                gm_mma(s[j], qa[ks], *(const uint32_t *)kb, *(const uint32_t *)(kb + 8));
            }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < AM_TK / 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int kk = 8 * j + c2 + (i & 1), kpos = k0 + kk, qpp = i < 2 ? qp0 : qp1;
                const bool ok = sslot[kk] >= 0 && kpos <= qpp && (window <= 0 || kpos > qpp - window);
                float v = s[j][i];
                if (softcap > 0.f) v = softcap * tanhf(v / softcap);
                v = ok ? v : -INFINITY;
                s[j][i] = v;
                if (i < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float cr0 = mn0 == -INFINITY ? 1.f : __expf(m0 - mn0), cr1 = mn1 == -INFINITY ? 1.f : __expf(m1 - mn1);
        m0 = mn0; m1 = mn1;
        l0 *= cr0; l1 *= cr1;
#pragma unroll
        for (int j = 0; j < AM_TK / 8; j++) {
            s[j][0] = mn0 == -INFINITY ? 0.f : __expf(s[j][0] - mn0);
            s[j][1] = mn0 == -INFINITY ? 0.f : __expf(s[j][1] - mn0);
            s[j][2] = mn1 == -INFINITY ? 0.f : __expf(s[j][2] - mn1);
            s[j][3] = mn1 == -INFINITY ? 0.f : __expf(s[j][3] - mn1);
            l0 += s[j][0] + s[j][1];
            l1 += s[j][2] + s[j][3];
        }
#pragma unroll
        for (int j = 0; j < D / 8; j++) { o[j][0] *= cr0; o[j][1] *= cr0; o[j][2] *= cr1; o[j][3] *= cr1; }
#pragma unroll
        for (int s2 = 0; s2 < AM_TK / 16; s2++) {
            uint32_t pa[4];
            __nv_bfloat162 hp[4] = {__floats2bfloat162_rn(s[2 * s2][0], s[2 * s2][1]), __floats2bfloat162_rn(s[2 * s2][2], s[2 * s2][3]),
                                    __floats2bfloat162_rn(s[2 * s2 + 1][0], s[2 * s2 + 1][1]),
                                    __floats2bfloat162_rn(s[2 * s2 + 1][2], s[2 * s2 + 1][3])};
            memcpy(pa, hp, sizeof pa);
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                const __nv_bfloat16 *vb = svt + (8 * j + g) * VS + 16 * s2 + c2;
                gm_mma(o[j], pa, *(const uint32_t *)vb, *(const uint32_t *)(vb + 8));
            }
        }
        __syncthreads();   /* the tile's K/V are consumed before the next load */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1); l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if (sinks) {
        if (m0 != -INFINITY) l0 += __expf(sinks[h] - m0);
        if (m1 != -INFINITY) l1 += __expf(sinks[h] - m1);
    }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int r = rq + 8 * hf;
        if (r >= nt) continue;
        const float L = hf ? l1 : l0, inv = L > 0.f ? 1.f / L : 0.f;
        float *ob = out + ((size_t)(t0 + r) * n_heads + h) * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++) *(float2 *)(ob + 8 * j + c2) = make_float2(o[j][2 * hf] * inv, o[j][2 * hf + 1] * inv);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* vtable                                                                                      */

static inline unsigned nblk(int64_t n, int b) { return (unsigned)((n + b - 1) / b); }

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}
static uint64_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
#define PU(p) ((uint64_t)(uintptr_t)(p))

/* In a graph step: record (warm-up, capture) or check (replay) this op's fingerprint. Returns
 * true when the op should go on (eager, warm-up, capture, or replay of an op with host inputs). */
static void at_flush(cu_ctx *c);
static bool at_pending(const cu_ctx *c);
static bool at_take(cu_ctx *c, const cu_weight *w, const float *x, float *y, int n);
static int at_heads(const cu_ctx *c);
static bool g_op(cu_ctx *c, const uint64_t *v, size_t n) {
    const bool hold = c->at_hold;   /* (MLXCEL_CUDA_ATT_O: only c_matmul may take a deferred attention) */
    c->at_hold = false;
    if (!hold && at_pending(c)) at_flush(c);
    if (c->gmode == G_EAGER) return true;
    uint64_t h = fnv(v, n * 8, 1469598103934665603ull);
    cu_graph *g = c->gcur;
    if (c->gmode == G_REPLAY) {
        if (c->g_op >= g->n_fp || g->fp[c->g_op] != h) c->gbroken = true;
        c->g_op++;
        return !c->gbroken;
    }
    if (g->n_fp == g->cap_fp) {
        int nc = g->cap_fp ? g->cap_fp * 2 : 256;
        uint64_t *nf = (uint64_t *)realloc(g->fp, (size_t)nc * 8);
        if (!nf) { c->gbroken = true; return true; }
        g->fp = nf; g->cap_fp = nc;
    }
    if (c->gmode == G_CAPTURE && (c->g_op >= g->n_fp || g->fp[c->g_op] != h)) c->gbroken = true;
    if (c->gmode == G_WARMUP) g->fp[g->n_fp++] = h;
    c->g_op++;
    return true;
}
/* ops without host inputs: nothing to do in a replay */
#define GOP_PURE(c, ...) do { uint64_t v_[] = {__VA_ARGS__}; if (!g_op(c, v_, sizeof v_ / 8) || (c)->gmode == G_REPLAY) return; } while (0)
/* ops with host inputs: go on to refresh them, then stop before launching when replaying */
#define GOP_HOST(c, ...) do { uint64_t v_[] = {__VA_ARGS__}; if (!g_op(c, v_, sizeof v_ / 8)) return; } while (0)
#define REPLAY_STOP(c) do { if ((c)->gmode == G_REPLAY) return; } while (0)

static void xq_forget(cu_ctx *c) {
    c->xq_src = NULL; c->xq_count = 0; c->xg_src = NULL; c->xg_count = 0; c->xq2_src = NULL; c->xq2_count = 0;
}
/* a product wrote y[0, count): the cached forms of activations there are stale (called by
 * c_matmul / c_matmul_multi after each product, the one place that drops them for outputs) */
static void forget_overlap(cu_ctx *c, const float *y, int64_t count) {
    if (c->xq_src && y < c->xq_src + c->xq_count && c->xq_src < y + count) { c->xq_src = NULL; c->xq_count = 0; }
    if (c->xg_src && y < c->xg_src + c->xg_count && c->xg_src < y + count) { c->xg_src = NULL; c->xg_count = 0; }
    if (c->xq2_src && y < c->xq2_src + c->xq2_count && c->xq2_src < y + count) { c->xq2_src = NULL; c->xq2_count = 0; }
}
/* the int8 buffer for `count` activations: codes, then (dx, dx*sum) per group of 32; in xq, or in
 * xq2 (second: the act_mul output of a q4/q8 gate/up pair, written while the pair reads xq) */
static bool xq_buf(cu_ctx *c, int64_t count, int8_t **q, float2 **ds, bool second = false) {
    size_t qb = ((size_t)count + 15) & ~(size_t)15;
    char *buf = (char *)scratch(c, second ? &c->xq2 : &c->xq, second ? &c->xq2_cap : &c->xq_cap,
                                qb + (size_t)(count / 32) * sizeof(float2));
    if (!buf) return false;
    *q = (int8_t *)buf; *ds = (float2 *)(buf + qb);
    return true;
}
static void pg_flush(cu_ctx *c);
static void pb_flush(cu_ctx *c);
static void pr_flush(cu_ctx *c);
static void pa_flush(cu_ctx *c);
static void psum_launch(cu_ctx *c, const cu_ctx::cu_psum *p);
static void pn_flush(cu_ctx *c);
static void pe_flush(cu_ctx *c);
static void at_flush(cu_ctx *c);
static void pend_flush(cu_ctx *c) {
    at_flush(c);   /* (a deferred attention: before anything reads its output or the cache) */
    pe_flush(c);   /* (first: it was deferred before anything else waited, and leaves an add and a norm) */
    pb_flush(c);   /* (first: it may take the norm) */
    pr_flush(c);
    pa_flush(c);
    pn_flush(c);
    pg_flush(c);
    if (c->ps.on) { c->ps.on = false; psum_launch(c, &c->ps.p); }
    if (!c->pend.on) return;
    c->pend.on = false;
    if (c->pend.has_ps) { c->pend.has_ps = false; psum_launch(c, &c->pend.ps); }   /* b, the product's output */
    PL(c, k_add, nblk(c->pend.count, 256), 256, 0)(c->pend.a, c->pend.b, c->pend.y, c->pend.count);
    LAUNCHED(c, "add");
}
static void hq_flush(cu_ctx *c);
static void launch_rmsnorm(cu_ctx *c, const float *x, const float *x2, float *xsum, const float *gd, float eps,
                           float add_one, float *y, int n, int d, int8_t *xq, float2 *xds, __nv_bfloat16 *xg,
                           const rn_part *pp = NULL);
/* an op other than the ones that use them: launch the deferred ops, forget the int8 form */
/* a chained step's writes into the stages' pinned copies done before the host reads or writes them */
#define CHAIN_SETTLE(c) do { if ((c)->ch.live) { cudaStreamSynchronize((c)->st); (c)->ch.live = false; } } while (0)
#define OP_ENTER(c) do { CHAIN_SETTLE(c); hq_flush(c); pend_flush(c); xq_forget(c); } while (0)
#define FLUSH_ALL(c) do { hq_flush(c); pend_flush(c); } while (0)

static void *c_alloc(void *ctx, size_t bytes) {
    void *p = NULL;
    (void)ctx;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) { cudaGetLastError(); return NULL; }
    return p;
}
static void c_free(void *ctx, void *p) { cu_ctx *c = (cu_ctx *)ctx; OP_ENTER(c); if (p) cudaFree(p); }
static void c_write(void *ctx, void *dst, const void *src, size_t bytes) {
    cu_ctx *c = (cu_ctx *)ctx;
    OP_ENTER(c);
    CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->st), "write");
}
static void c_read(void *ctx, void *dst, const void *src, size_t bytes) {
    cu_ctx *c = (cu_ctx *)ctx;
    FLUSH_ALL(c);
    CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->st), "read");
    CK(c, cudaStreamSynchronize(c->st), "read sync");
    if (c->prof) prof_collect(c);
}
static void c_sync(void *ctx) {
    cu_ctx *c = (cu_ctx *)ctx;
    FLUSH_ALL(c);
    CK(c, cudaStreamSynchronize(c->st), "sync");
    if (c->prof) prof_collect(c);
}

static void *up_copy(cu_ctx *c, const void *src, size_t bytes) {
    void *d = dev_alloc_owned(c, bytes);
    if (!d) return NULL;
    /* on the backend's stream and waited for: a plain cudaMemcpy from pageable memory may return
     * before its DMA lands, and it is ordered on the legacy stream, which the backend's
     * non-blocking stream does not wait for (a kernel then read a half-uploaded table) */
    if (cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice, c->st) != cudaSuccess ||
        cudaStreamSynchronize(c->st) != cudaSuccess) { cudaGetLastError(); return NULL; }
    return d;
}

static float h_load(mx_dtype t, const void *p, int64_t i) {
    if (t == MX_DTYPE_F32) return ((const float *)p)[i];
    if (t == MX_DTYPE_F16) return mx_f16_to_f32(((const uint16_t *)p)[i]);
    return mx_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* f32 copy of a host vector of F32/F16/BF16 on the device */
static float *up_f32(cu_ctx *c, mx_dtype t, const void *src, int64_t n) {
    float *tmp = (float *)malloc((size_t)n * sizeof(float) + 4);
    if (!tmp) return NULL;
    for (int64_t i = 0; i < n; i++) tmp[i] = h_load(t, src, i);
    float *d = (float *)up_copy(c, tmp, (size_t)n * sizeof(float));
    free(tmp);
    return d;
}

/* (scale, bias) pairs of a q4 weight for k_gemm_wg, group-major: [ngw][rows] */
static uint32_t *up_pairs(cu_ctx *c, const uint16_t *s, const uint16_t *b, int64_t rows, int64_t ngw) {
    const int64_t rows4 = (rows + 3) & ~(int64_t)3;   /* a group's pairs padded to 16 bytes (zeros) */
    uint32_t *t = (uint32_t *)calloc((size_t)rows4 * (size_t)ngw, 4);
    if (!t) return NULL;
    for (int64_t gi = 0; gi < ngw; gi++)
        for (int64_t r = 0; r < rows; r++) t[gi * rows4 + r] = s[r * ngw + gi] | (uint32_t)b[r * ngw + gi] << 16;
    uint32_t *d = (uint32_t *)up_copy(c, t, (size_t)rows4 * (size_t)ngw * 4);
    free(t);
    return d;
}

static bool fdtype_ok(mx_dtype t) { return t == MX_DTYPE_F32 || t == MX_DTYPE_F16 || t == MX_DTYPE_BF16; }

static mx_status c_weight_prepare(void *ctx, mx_weight *w) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (w->dev) return MX_OK;
    if (w->rows <= 0 || w->cols <= 0 || w->rows > INT32_MAX || w->cols > INT32_MAX)
        return mx_errorf(MX_ERR_INVALID_ARG, "cuda: weight %lldx%lld: bad shape", (long long)w->rows, (long long)w->cols);
    cu_weight *cw = (cu_weight *)calloc(1, sizeof *cw);
    if (!cw || !own(c, &c->owned_h, &c->n_owned_h, &c->cap_owned_h, cw)) { free(cw); return mx_errorf(MX_ERR_NOMEM, "cuda: weight struct"); }
    cw->rows = w->rows; cw->cols = w->cols; cw->bits = w->bits; cw->gs = w->group_size; cw->dtype = w->dtype;
    size_t n = (size_t)w->rows * (size_t)w->cols;
    if (w->bits) {
        int b = w->bits;
        if (b != 2 && b != 3 && b != 4 && b != 5 && b != 6 && b != 8)
            return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: %d-bit weights are not supported", b);
        if (w->group_size <= 0 || w->cols % w->group_size || (w->cols * b) % 32 || !fdtype_ok(w->scale_dtype))
            return mx_errorf(MX_ERR_INVALID_ARG, "cuda: quantized weight %lldx%lld: bad group size %d or scale dtype",
                             (long long)w->rows, (long long)w->cols, w->group_size);
        int64_t ns = w->rows * (w->cols / w->group_size);
        /* the form k_gemm_wg reads its scales in (gq_gemm takes q4 with groups of >= 16); not made
         * when MLXCEL_CUDA_GEMM at init keeps k_gemm_wg out (mma, cublas: 4 bytes a group saved) */
        const bool pairs = c->wg_ok && (c->gemm_mode == GM_AUTO || c->gemm_mode == GM_WG) && b == 4 &&
                           w->group_size >= 16 && w->cols % GQ_BK == 0;
        cw->w = up_copy(c, w->w, (size_t)w->rows * (size_t)(w->cols * b / 32) * 4);
        if (w->scale_dtype == MX_DTYPE_F32) {
            /* f16 keeps more mantissa than bf16 when the values fit */
            float mx = 0.f;
            for (int64_t i = 0; i < ns; i++) {
                float a = fabsf(((const float *)w->scales)[i]), bb = fabsf(((const float *)w->biases)[i]);
                mx = fmaxf(mx, fmaxf(a, bb));
            }
            cw->sdt = mx < 60000.f ? SDT_F16 : SDT_BF16;
            uint16_t *t = (uint16_t *)malloc((size_t)ns * 4);
            if (!t) return mx_errorf(MX_ERR_NOMEM, "cuda: scale conversion");
            for (int64_t i = 0; i < ns; i++) {
                float a = ((const float *)w->scales)[i], bb = ((const float *)w->biases)[i];
                t[i] = cw->sdt == SDT_F16 ? mx_f32_to_f16(a) : mx_f32_to_bf16(a);
                t[ns + i] = cw->sdt == SDT_F16 ? mx_f32_to_f16(bb) : mx_f32_to_bf16(bb);
            }
            cw->scales = up_copy(c, t, (size_t)ns * 2);
            cw->biases = up_copy(c, t + ns, (size_t)ns * 2);
            if (pairs) cw->sbp = up_pairs(c, t, t + ns, w->rows, w->cols / w->group_size);
            free(t);
        } else {
            cw->sdt = w->scale_dtype == MX_DTYPE_F16 ? SDT_F16 : SDT_BF16;
            cw->scales = up_copy(c, w->scales, (size_t)ns * 2);
            cw->biases = up_copy(c, w->biases, (size_t)ns * 2);
            if (pairs) cw->sbp = up_pairs(c, (const uint16_t *)w->scales, (const uint16_t *)w->biases, w->rows, w->cols / w->group_size);
        }
        if (!cw->w || !cw->scales || !cw->biases || (pairs && !cw->sbp))
            return mx_errorf(MX_ERR_NOMEM, "cuda: out of device memory for a weight");
        if (pairs && c->tm_encode) {   /* k_gemm_wg's TMA form: W as [rows][cols / 8 words], a box of 8 words x 128 | 256 rows */
            CUtensorMap m[2];
            const cuuint64_t dim[2] = {(cuuint64_t)(w->cols / 8), (cuuint64_t)w->rows}, stride[1] = {(cuuint64_t)(w->cols / 8) * 4};
            const cuuint32_t es[2] = {1, 1};
            cw->has_tmw = true;
            for (int i = 0; i < 2 && cw->has_tmw; i++) {
                const cuuint32_t box[2] = {8, i ? 256u : 128u};
                cw->has_tmw = c->tm_encode(&m[i], CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, cw->w, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
                memcpy(cw->tmw[i], &m[i], sizeof m[i]);
            }
        }
    } else {
        if (!fdtype_ok(w->dtype)) return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: dense weight dtype %s", mx_dtype_name(w->dtype));
        cw->w = up_copy(c, w->w, n * mx_dtype_size(w->dtype));
        if (!cw->w) return mx_errorf(MX_ERR_NOMEM, "cuda: out of device memory for a weight");
    }
    c->wbytes += w->bits ? (int64_t)(n / 8 * w->bits) : (int64_t)(n * mx_dtype_size(w->dtype));   /* the weights a step reads */
    if (w->bias) {
        if (!fdtype_ok(w->bias_dtype)) return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: bias dtype %s", mx_dtype_name(w->bias_dtype));
        cw->bias = up_f32(c, w->bias_dtype, w->bias, w->rows);
        if (!cw->bias) return mx_errorf(MX_ERR_NOMEM, "cuda: out of device memory for a bias");
    }
    w->dev = cw;
    return MX_OK;
}

static mx_status c_vec_prepare(void *ctx, mx_vec *v) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (v->dev) return MX_OK;
    if (v->n <= 0 || !fdtype_ok(v->dtype)) return mx_errorf(MX_ERR_INVALID_ARG, "cuda: vector of %lld %s", (long long)v->n, mx_dtype_name(v->dtype));
    v->dev = up_f32(c, v->dtype, v->data, v->n);
    return v->dev ? MX_OK : mx_errorf(MX_ERR_NOMEM, "cuda: out of device memory for a vector");
}

static const cu_weight *get_w(cu_ctx *c, const mx_weight *w) {
    if (!w->dev && c_weight_prepare(c, (mx_weight *)w) != MX_OK) { cu_fail(c, MX_ERR_INTERNAL, mx_last_error(), cudaSuccess); return NULL; }
    return (const cu_weight *)w->dev;
}
static const float *get_v(cu_ctx *c, const mx_vec *v) {
    if (!v) return NULL;
    if (!v->dev && c_vec_prepare(c, (mx_vec *)v) != MX_OK) { cu_fail(c, MX_ERR_INTERNAL, mx_last_error(), cudaSuccess); return NULL; }
    return (const float *)v->dev;
}

/* the engine's block ids and slots as the kernels address the pools (kv_lay): under layout 1 a
 * block id b is b * n_layers and a slot s is its block's so mapped plus s % block_size; ids and
 * slots outside the pool become -1, which every kernel skips, as it skips them unmapped */
static inline int32_t kv_blk_of(int lay, const mx_kv_desc &k, int32_t b) {
    if (!lay) return b;
    return b >= 0 && b < k.n_blocks ? b * k.n_layers : -1;
}
static inline int32_t kv_slot_of(int lay, const mx_kv_desc &k, int32_t s) {
    if (!lay) return s;
    const int bs = k.block_size;
    if (s < 0 || (int64_t)s >= (int64_t)k.n_blocks * bs) return -1;
    return (s / bs) * k.n_layers * bs + s % bs;
}
/* slots between one layer's pool and the next's; block ids and slots in all, as mapped (the
 * kernels' bounds) */
static inline int64_t kv_lstride_of(int lay, const mx_kv_desc &k) { return lay ? k.block_size : (int64_t)k.n_blocks * k.block_size; }
static inline int kv_nblocks_of(int lay, const mx_kv_desc &k) { return k.n_blocks * (lay ? k.n_layers : 1); }
static inline int64_t kv_nslots_of(int lay, const mx_kv_desc &k) { return (int64_t)kv_nblocks_of(lay, k) * k.block_size; }
/* the layout kv_init takes for MLXCEL_CUDA_KV_LAYOUT's value lay: block ids as mapped must stay
 * int32, else the layer-major one */
static inline int kv_lay_for(int lay, const mx_kv_desc &k) {
    return lay == 1 && (int64_t)k.n_blocks * k.n_layers * k.block_size <= INT32_MAX;
}
static inline int32_t kv_blk(const cu_ctx *c, int32_t b) { return kv_blk_of(c->kv_lay, c->kv, b); }
static inline int32_t kv_slot(const cu_ctx *c, int32_t s) { return kv_slot_of(c->kv_lay, c->kv, s); }
/* slots between layers, slots in all, block ids in all (as mapped) */
static inline int64_t kv_lstride(const cu_ctx *c) { return kv_lstride_of(c->kv_lay, c->kv); }
static inline int64_t kv_nslots(const cu_ctx *c) { return kv_nslots_of(c->kv_lay, c->kv); }
static inline int kv_nblocks(const cu_ctx *c) { return kv_nblocks_of(c->kv_lay, c->kv); }
static mx_status c_kv_init(void *ctx, mx_kv_desc *d) {
    cu_ctx *c = (cu_ctx *)ctx;
    static const char *const kvs[] = {"bf16", "f32"};
    int kv, lay;   /* read here, not at init: tests switch them between caches */
    mx_status kst = env_choice("MLXCEL_CUDA_KV", kvs, 2, 0, &kv);
    if (kst != MX_OK) return kst;
    if ((kst = env_choice("MLXCEL_CUDA_KV_LAYOUT", k_kv_lays, 2, KV_LAY_DEFAULT, &lay)) != MX_OK) return kst;
    mx_dtype t = (kv == 1 || c->precise) ? MX_DTYPE_F32 : MX_DTYPE_BF16;
    if (d->n_layers <= 0 || d->n_kv_heads <= 0 || d->head_dim <= 0 || d->head_dim > 32 * ATT_MAXI ||
        d->block_size <= 0 || d->n_blocks <= 0)
        return mx_errorf(MX_ERR_INVALID_ARG, "cuda: kv cache: bad geometry (head_dim %d, at most %d)", d->head_dim, 32 * ATT_MAXI);
    OP_ENTER(c);
    g_invalidate(c);
    c->fd_epoch++;
    if (c->kpool) { cudaFree(c->kpool); cudaFree(c->vpool); c->kpool = c->vpool = NULL; }
    size_t per = (size_t)d->n_blocks * d->block_size * d->n_kv_heads * d->head_dim * mx_dtype_size(t);
    size_t bytes = per * d->n_layers;
    if (cudaMalloc(&c->kpool, bytes) != cudaSuccess || cudaMalloc(&c->vpool, bytes) != cudaSuccess) {
        cudaGetLastError();
        if (c->kpool) cudaFree(c->kpool);
        c->kpool = c->vpool = NULL;
        return mx_errorf(MX_ERR_NOMEM, "cuda: kv cache of 2 x %.2f GiB does not fit in device memory", bytes / 1073741824.0);
    }
    cudaMemsetAsync(c->kpool, 0, bytes, c->st);   /* on the backend's stream (see up_copy) */
    cudaMemsetAsync(c->vpool, 0, bytes, c->st);
    cudaStreamSynchronize(c->st);
    d->dtype = t;
    c->kv = *d;
    c->kv_lay = kv_lay_for(lay, *d);
    /* the L2 prefetch's table (a layer's product after its attention): learned anew */
    free(c->apf);
    c->apf = (cu_ctx::cu_apf *)calloc((size_t)d->n_layers, sizeof *c->apf);
    c->apf_nl = c->apf ? d->n_layers : 0;
    c->apf_layer = -1;
    return MX_OK;
}
static void c_kv_free(void *ctx) {
    cu_ctx *c = (cu_ctx *)ctx;
    OP_ENTER(c);
    g_invalidate(c);
    c->fd_epoch++;
    cudaStreamSynchronize(c->st);
    if (c->kpool) cudaFree(c->kpool);
    if (c->vpool) cudaFree(c->vpool);
    c->kpool = c->vpool = NULL;
    memset(&c->kv, 0, sizeof c->kv);
    free(c->apf);
    c->apf = NULL; c->apf_nl = 0; c->apf_layer = -1;
}

#define MV_NB_CASES(K, ...) \
    switch (nb) { case 1: PL(c, K<__VA_ARGS__, 1>, grid, MV_WARPS * 32, 0)ARGS; break; \
                  case 2: PL(c, K<__VA_ARGS__, 2>, grid, MV_WARPS * 32, 0)ARGS; break; \
                  case 4: PL(c, K<__VA_ARGS__, 4>, grid, MV_WARPS * 32, 0)ARGS; break; \
                  default: PL(c, K<__VA_ARGS__, 8>, grid, MV_WARPS * 32, 0)ARGS; break; }

static int log2_exact(int v) {   /* -1 unless v is a power of two */
    if (v <= 0 || (v & (v - 1))) return -1;
    int s = 0;
    while (v > 1) { v >>= 1; s++; }
    return s;
}

/* a ring kernel form's shared-memory limit raised to bytes, once (bit form of mr_attr); false
 * where the device refuses it: the rings are then off for good (the register forms from now on) */
static bool mr_raise(cu_ctx *c, const void *fn, int form, int bytes) {
    if (c->mr_attr[form >> 6] & ((uint64_t)1 << (form & 63))) return true;
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
        cudaGetLastError();
        c->mr_on = 0;
        return false;
    }
    c->mr_attr[form >> 6] |= (uint64_t)1 << (form & 63);
    return true;
}

/* The blocks of a ring launch, one a multiprocessor (all resident at once), dealt to the nw weights
 * by their rows, whole units of rs rows: weight k gets blocks blk0[k] .. blk0[k + 1] - 1 (blk0[nw]:
 * the grid). Returns the most rows a block takes. */
static int64_t mr_deal(const cu_ctx *c, int nw, const cu_weight *const *w, int rs, int *blk0) {
    const int nsm = c->prop.multiProcessorCount;
    int64_t tot = 0, run = 0;
    for (int k = 0; k < nw; k++) tot += w[k]->rows;
    blk0[0] = 0;
    for (int k = 0; k < nw; k++) {
        int64_t nb = w[k]->rows * nsm / tot;
        if (nb < 1) nb = 1;
        if (nb > (w[k]->rows + rs - 1) / rs) nb = (w[k]->rows + rs - 1) / rs;
        if ((w[k]->rows + nb - 1) / nb > run) run = (w[k]->rows + nb - 1) / nb;
        blk0[k + 1] = blk0[k] + (int)nb;
    }
    return run;
}
/* Slots a warp: as many as the ring holds (fit, at most MR_MAXSLOTS) but no more than a warp's
 * items (need: a small matrix then takes less shared memory, so its blocks fit beside the kernel
 * before it and all its copies go out at once, before that kernel ends); fewer than a warp's items
 * need two at least, else 0 (the ring does not apply). */
static int mr_slots(int fit, int need) {
    if (fit > MR_MAXSLOTS) fit = MR_MAXSLOTS;
    if (fit >= need) return need;
    return fit < 2 ? 0 : fit;
}

/* a ring product may run the norm nm of its x (K values) in its prologue: the norm's buffers
 * 16-byte aligned and apart from the product's outputs (blocks write those while others read a) */
static bool rn_apart(const mr_norm *nm, int64_t K, int nw, const cu_weight *const *w, float *const *ys) {
    const float *bufs[4] = {nm->a, nm->b, nm->sum, nm->y};
    if (((uintptr_t)nm->a | (uintptr_t)nm->b | (uintptr_t)nm->sum | (uintptr_t)nm->y | (uintptr_t)nm->g) & 15) return false;
    for (int k = 0; k < nw; k++)
        for (int i = 0; i < 4; i++)
            if (bufs[i] && ys[k] < bufs[i] + K && bufs[i] < ys[k] + w[k]->rows) return false;
    return true;
}

/* The batch-1 dense bf16 form on bulk-copied weights (k_mv_ring_bf, mv_ring.cuh): false (nothing
 * launched) where it does not apply (switched off, a device before sm_90, columns not a multiple
 * of 256 or x too large for shared memory beside two slots a warp, pointers not 16-byte aligned,
 * an output over x). Rows of up to MLXCEL_CUDA_MV_RING_SLOT bytes go 4, 2 or 1 a slot (the most
 * that leave two slots a warp); longer rows are cut into segments of about that size.
 * pair >= 0 (an mx_act): a gate/up pair (nw 2, equal rows, outputs apart) with the act_mul of
 * its outputs in place over ys[0] in the same launch (k_mv_ring_bf<.., PAIR>); dry: only whether
 * it applies (nothing launched, no state changed) */
static bool mv_ring_bf(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, const mr_norm *nm,
                       int pair = -1, bool dry = false) {
    const int64_t K = w[0]->cols;
    if (!c->mr_on || c->prop.major < 9 || nw < 1 || nw > 4 || K % 256 || ((uintptr_t)x & 15)) return false;
    if (pair >= 0 && (nw != 2 || w[1]->rows != w[0]->rows || (ys[0] < ys[1] + w[1]->rows && ys[1] < ys[0] + w[0]->rows)))
        return false;
    const int nwarp = c->mr_warps;
    if (nm && (K > 256 * nwarp || !rn_apart(nm, K, nw, w, ys))) return false;
    for (int k = 0; k < nw; k++) {
        if (w[k]->bits || w[k]->dtype != MX_DTYPE_BF16 || w[k]->cols != K || ((uintptr_t)w[k]->w & 15)) return false;
        if (ys[k] < x + K && x < ys[k] + w[k]->rows) return false;   /* blocks write y while others stage x */
    }
    const int64_t optin = (int64_t)c->prop.sharedMemPerBlockOptin - 1024, xb = K * 4, rowb = K * 2;   /* (-1024: static) */
    int64_t ring = (int64_t)c->mr_kb << 10;
    if (ring > optin - xb) ring = optin - xb;
    auto slots_of = [&](int64_t b) { return ring > 0 ? (int)(ring / (nwarp * (b + 8))) : 0; };   /* (+8: a slot's mbarrier) */
    mrb_set set;
    memset(&set, 0, sizeof set);
    int rs = 1;
    set.cols = (int)K; set.seg = (int)K; set.nseg = 1;
    if (rowb <= c->mr_slot) {
        rs = 4;
        while (rs > 1 && (rs * rowb > c->mr_slot || slots_of(rs * rowb) < 2)) rs /= 2;
    } else {   /* segments of a row: as many as the slot cap asks, each a multiple of 256 columns */
        const int64_t ns = (rowb + c->mr_slot - 1) / c->mr_slot;
        set.seg = (int)((K / ns + 255) / 256 * 256);
        set.nseg = (int)((K + set.seg - 1) / set.seg);
    }
    set.slot_b = rs * set.seg * 2;
    /* (a pair: the blocks take runs of both weights' rows, as many as one weight's) */
    const int64_t run = mr_deal(c, pair >= 0 ? 1 : nw, w, rs, set.blk0);
    const int blk = set.blk0[pair >= 0 ? 1 : nw];
    for (int k = 0; k < nw; k++) {
        set.W[k] = (const uint8_t *)w[k]->w; set.bias[k] = w[k]->bias; set.y[k] = ys[k]; set.rows[k] = (int)w[k]->rows;
    }
    set.nw = nw;
    set.act = pair;
    const int per = (pair >= 0 ? 2 : 1) * set.nseg;   /* items a unit of rs rows */
    if (!(set.slots = mr_slots(slots_of(set.slot_b), (int)(((run + rs - 1) / rs + nwarp - 1) / nwarp) * per))) return false;
    const size_t shm = (size_t)xb + (size_t)nwarp * set.slots * (set.slot_b + 8);
    typedef void (*mrb_fn)(const mrb_set, const float *, const mr_norm);
    static const mrb_fn forms[2][3] = {{k_mv_ring_bf<1, false>, k_mv_ring_bf<2, false>, k_mv_ring_bf<4, false>},
                                       {k_mv_ring_bf<1, true>, k_mv_ring_bf<2, true>, k_mv_ring_bf<4, true>}};
    const int ri = rs == 4 ? 2 : rs == 2 ? 1 : 0, pi = pair >= 0;
    const int form = (pi ? 28 : 12) + ri;   /* (bits 0-11 and 16-27: k_mv_ring's forms) */
    if (dry) return true;
    if (!mr_raise(c, (const void *)forms[pi][ri], form, (int)optin)) return false;
    mr_norm no;
    memset(&no, 0, sizeof no);
    PL(c, forms[pi][ri], (unsigned)blk, nwarp * 32, shm)(set, x, nm ? *nm : no);
    LAUNCHED(c, pi ? (nm ? "matvec (bf16 gate/up, bulk-copied) + rmsnorm + act_mul" : "matvec (bf16 gate/up, bulk-copied) + act_mul")
                   : nm ? "matvec (bf16, bulk-copied weights) + rmsnorm" : "matvec (bf16, bulk-copied weights)");
    c->n_ring++;
    if (nm) c->n_ring_norm++;
    if (pi) c->n_ring_pair++;
    return true;
}

/* up to 4 dense bf16 weights of equal columns sharing x, n <= 8 rows: one k_mv_dense_sk launch
 * (q/k/v, gate/up as one: under ncu the 1024-row k and v of Llama-8B took 5.3 us each alone, 38%
 * of copy bandwidth; Llama-8B bf16 decode 218.9 -> 226.4 tok/s, Qwen3-0.6B bf16 840 -> 866, in one
 * run). False (nothing launched) when the weights do not qualify. */
static bool mv_dense_set(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n) {
    if (nw < 1 || nw > 4 || n < 1 || n > 8 || ((uintptr_t)x & 15)) return false;
    for (int k = 0; k < nw; k++)
        if (w[k]->bits || w[k]->dtype != MX_DTYPE_BF16 || w[k]->cols != w[0]->cols || w[k]->cols % 8) return false;
    /* batch 1 on bulk-copied weights (MLXCEL_CUDA_MV_RING_BF16): 1 all; 3 (the default) the
     * products of rows longer than 4096 columns (Llama-8B's down: decode +1.6-2.1% in one run,
     * thirteenth session) besides those that run the norm of their x (rn_product); the o
     * projection there was 1.2% slower, all others 2% (eleventh session) */
    if (n == 1 && (c->mr_bf == 2 || (c->mr_bf == 3 && w[0]->cols > 4096)) && mv_ring_bf(c, nw, w, x, ys, NULL)) return true;
    /* R rows a block: 4 up to 2 rows of x, else 2 (measured: Llama-8B bf16 decode 193 -> 217 tok/s
     * against k_mv_dense) */
    const int R = n <= 2 ? 4 : 2, cols = (int)w[0]->cols;
    dn_set set;
    memset(&set, 0, sizeof set);
    for (int k = 0; k < nw; k++) {
        if (nw > 1 && ys[k] < x + (size_t)n * cols && x < ys[k] + (size_t)n * w[k]->rows) return false;   /* an output over x */
        set.W[k] = w[k]->w; set.bias[k] = w[k]->bias; set.y[k] = ys[k]; set.rows[k] = (int)w[k]->rows;
        set.blk0[k + 1] = set.blk0[k] + (int)nblk(w[k]->rows, R);
    }
    set.nw = nw;
    typedef __nv_bfloat16 T;
    const unsigned grid = (unsigned)set.blk0[nw];
    if (n <= 1 && c->mv_dense_short && cols <= 2 * MV_WARPS * 32 * (int)(16 / sizeof(T))) {
        PL(c, (k_mv_dense_sk<T, 1, 4, 2>), grid, MV_WARPS * 32, 0)(set, x, cols, n);
        c->n_dense_short++;
    } else if (n <= 1) PL(c, k_mv_dense_sk<T, 1, 4>, grid, MV_WARPS * 32, 0)(set, x, cols, n);
    else if (n <= 2) PL(c, k_mv_dense_sk<T, 2, 4>, grid, MV_WARPS * 32, 0)(set, x, cols, n);
    else if (n <= 4) PL(c, k_mv_dense_sk<T, 4, 2>, grid, MV_WARPS * 32, 0)(set, x, cols, n);
    else PL(c, k_mv_dense_sk<T, 8, 2>, grid, MV_WARPS * 32, 0)(set, x, cols, n);
    LAUNCHED(c, "matvec (dense, split)");
    return true;
}

static bool mv_fast(cu_ctx *c, const cu_weight *w, const float *x, float *y, int n) {
    int nb = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8;
    int rows = (int)w->rows, cols = (int)w->cols;
    unsigned grid = nblk(rows, MV_WARPS * MV_R);
    unsigned cap = (unsigned)c->prop.multiProcessorCount * 8;
    if (grid > cap) grid = cap;
    if (((uintptr_t)x & 15)) return false;
    if (w->bits == 4 || w->bits == 8) {
        int gsh = log2_exact(w->gs);
        if (gsh < 3 || cols % 8) return false;
        const uint32_t *W = (const uint32_t *)w->w;
#define ARGS (W, S, B, w->bias, x, y, rows, cols, gsh, n)
        if (w->sdt == SDT_BF16) {
            const __nv_bfloat16 *S = (const __nv_bfloat16 *)w->scales, *B = (const __nv_bfloat16 *)w->biases;
            if (w->bits == 4) { MV_NB_CASES(k_mv_q, 4, __nv_bfloat16) } else { MV_NB_CASES(k_mv_q, 8, __nv_bfloat16) }
        } else {
            const __half *S = (const __half *)w->scales, *B = (const __half *)w->biases;
            if (w->bits == 4) { MV_NB_CASES(k_mv_q, 4, __half) } else { MV_NB_CASES(k_mv_q, 8, __half) }
        }
#undef ARGS
        LAUNCHED(c, "matvec (quantized)");
        return true;
    }
    if (w->bits || cols % 8) return false;
    if (mv_dense_set(c, 1, &w, x, &y, n)) return true;
#define ARGS ((const T *)w->w, w->bias, x, y, rows, cols, n)
    if (w->dtype == MX_DTYPE_BF16) { typedef __nv_bfloat16 T; MV_NB_CASES(k_mv_dense, T) }
    else if (w->dtype == MX_DTYPE_F16) { typedef __half T; MV_NB_CASES(k_mv_dense, T) }
    else { typedef float T; MV_NB_CASES(k_mv_dense, T) }
#undef ARGS
    LAUNCHED(c, "matvec (dense)");
    return true;
}

static bool mv_i8_ok(const cu_ctx *c, const cu_weight *w, const cu_weight *w0, int n) {
    return !c->mv_f32 && n <= MV_I8_MAX && (w->bits == 4 || w->bits == 8) && w->cols % 32 == 0 &&
           log2_exact(w->gs) >= 5 && w->bits == w0->bits && w->gs == w0->gs && w->sdt == w0->sdt && w->cols == w0->cols;
}

#define I8_CASES(BITS, ST) \
    switch (n <= 1 ? 0 : n <= 2 ? 1 : n <= 4 ? 2 : n <= 8 ? 3 : 4) { \
    case 0: PL(c, k_mv_i8<BITS, ST, 1, 1>, blk, MV_WARPS * 32, 0)(set, xq, xds, cols, gsh, n, noe); break; \
    case 1: PL(c, k_mv_i8<BITS, ST, 2, 2>, blk, MV_WARPS * 32, 0)(set, xq, xds, cols, gsh, n, noe); break; \
    case 2: PL(c, k_mv_i8<BITS, ST, 2, 4>, blk, MV_WARPS * 32, 0)(set, xq, xds, cols, gsh, n, noe); break; \
    case 3: PL(c, k_mv_i8<BITS, ST, 2, 8>, blk, MV_WARPS * 32, 0)(set, xq, xds, cols, gsh, n, noe); break; \
    default: PL(c, k_mv_i8<BITS, ST, 2, 16>, blk, MV_WARPS * 32, 0)(set, xq, xds, cols, gsh, n, noe); break; }

/* The batch-1 form on bulk-copied weights (k_mv_ring, mv_ring.cuh): false (nothing launched)
 * where it does not apply (switched off, a device before sm_90, rows longer than 4096 columns,
 * rows or pointers not 16-byte aligned for the copies, a ring that holds neither all of a warp's
 * items nor two slots). The weights share the format (mv_i8_ok). nm: the prologue computes x, the
 * norm (pro 1) or the act_mul (pro 2) it describes; pro 3: a gate/up pair (nw 2, equal rows, a
 * multiple of 32, outputs apart) on x's int8 form xq and the act_mul of its outputs in place over
 * ys[0] (nm: its activation, and where the int8 form of its output goes, apart from xq); pro 4: one
 * weight (rows a multiple of 32) whose output y is added to nm->a into nm->sum, with each block's
 * sum of squares of that sum into nm->part and the int8 form of sum * (g + add_one) into nm->oq /
 * nm->ods (the residual add and the rmsnorm after the product, but the norm's scale: MLXCEL_CUDA_
 * RING_EPI, pe_take); pro 6: pro 4 for rows longer than 4,096 columns (up to RING_LONG_MAX), x's
 * int8 form staged in shared memory (MLXCEL_CUDA_RING_LONG; the parts: epi_parts). sc (pro 0 or 3): x (xq, xds) is such a form, scaled here by the norm's
 * scale from the parts nm->part (nm->np of them; eps and the norm's output nm->y, stored from
 * nm->a and nm->g). dry: 1 only whether it applies (nothing launched, no state changed), 2 also
 * the form's shared-memory limit raised (nothing launched). */
/* the blocks of a ring launch that takes runs of whole groups of 32 rows (mr_pair_block): one a
 * group, at most one a multiprocessor (two with MLXCEL_CUDA_PAIR_HALF's half blocks) */
static int64_t group_grid(const cu_ctx *c, int64_t rows, bool half) {
    const int64_t ng = rows / 32, nsm = (half ? 2 : 1) * (int64_t)c->prop.multiProcessorCount;
    return ng < nsm ? ng : nsm;
}
static int epi_grid(const cu_ctx *c, int64_t rows);
/* the blocks of the product with the add's epilogue, one a part of the norm's sum of squares: at most
 * EPI_BLOCKS (epi_grid) on the ring, one a group of 32 rows with long rows (xs: k_mv_ring<.., 6>,
 * 9 KB a row at Llama-8B's down) */
static int epi_parts(const cu_ctx *c, int64_t rows, bool xs) { return xs ? (int)group_grid(c, rows, false) : epi_grid(c, rows); }
static bool mv_ring(cu_ctx *c, int nw, const cu_weight *const *w, const int8_t *xq, const float2 *xds, float *const *ys,
                    const mr_norm *nm, int pro = 1, int dry = 0, bool sc = false) {
    const int64_t K = w[0]->cols;
    const bool xs = nm && pro == 6;   /* (rows longer than 4,096 columns: x staged in shared memory) */
    if (!c->mr_on || c->prop.major < 9 || (K > 4096 && !xs) || K > RING_LONG_MAX || (xs && !c->ring_long)) return false;
    const bool pair = nm && pro == 3, epi = nm && (pro == 4 || pro == 6);
    if (pair && (nw != 2 || w[1]->rows != w[0]->rows || w[0]->rows % 32 || w[0]->rows > (int64_t)32 * 32 * c->prop.multiProcessorCount ||
                 (ys[0] < ys[1] + w[1]->rows && ys[1] < ys[0] + w[0]->rows) || (((uintptr_t)nm->oq | (uintptr_t)nm->ods) & 15)))
        return false;
    if (epi && (nw != 1 || sc || w[0]->rows % 32 || w[0]->rows > (int64_t)32 * 32 * c->prop.multiProcessorCount || !nm->part ||
                (((uintptr_t)nm->oq | (uintptr_t)nm->ods) & 15)))
        return false;
    if (sc && (!nm || (pro != 0 && pro != 3) || !nm->part || nm->np < 1 || nm->np > MR_PARTS || !rn_apart(nm, K, nw, w, ys))) return false;
    if (nm && !pair && !epi && !sc && (K > 256 * c->mr_warps || K % 32 || !rn_apart(nm, K, nw, w, ys))) return false;
    const int bits = w[0]->bits, gs = (int)w[0]->gs, gsh = log2_exact(w[0]->gs);
    mr_set set;
    memset(&set, 0, sizeof set);
    set.row_wb = (int)(K * bits / 8); set.row_sb = (int)(K / gs * 2); set.ng = (int)(K / 32);
    if (set.row_wb % 16 || set.row_sb % 16) return false;
    for (int k = 0; k < nw; k++)
        if (((uintptr_t)w[k]->w | (uintptr_t)w[k]->scales | (uintptr_t)w[k]->biases) & 15) return false;
    /* rows a slot: the most (4, 2, 1) whose codes fit the slot cap and leave two slots a warp. A pair
     * with MLXCEL_CUDA_PAIR_HALF: blocks of half the warps and a ring of PAIR_HALF_KB, two a
     * multiprocessor (as many copies in flight as one block of all the warps), so that one fits beside
     * a block of o's product (Llama-8B q4: 75 + 87 registers a thread at 512 and 256 threads, ~147 +
     * ~74 KB) and starts copying its weights before that product ends. */
    const bool half = pair && c->mr_warps >= 2 &&
                      (c->pair_half == 1 || (c->pair_half == 2 && w[0]->rows / 32 >= 2 * (int64_t)c->prop.multiProcessorCount));
    int nwarp = half ? c->mr_warps / 2 : c->mr_warps;
    const int ring = half ? PAIR_HALF_KB << 10 : c->mr_kb << 10;
    auto slots_of = [&](int r) { return ring / (nwarp * (r * (set.row_wb + 2 * set.row_sb) + 8)); };   /* (+8: a slot's mbarrier) */
    while (xs && nwarp > 4 && slots_of(1) < 2) nwarp /= 2;   /* (long rows: fewer warps, two slots each) */
    int rs = 4;
    while (rs > 1 && (rs * set.row_wb > c->mr_slot || slots_of(rs) < 2)) rs /= 2;
    set.slot_b = rs * (set.row_wb + 2 * set.row_sb);
    int64_t run;
    if (pair || epi) {   /* (the blocks take runs of whole groups of 32 rows of both weights: mr_pair_block) */
        const int64_t ng = w[0]->rows / 32, nb = epi ? epi_parts(c, w[0]->rows, xs) : group_grid(c, w[0]->rows, half);
        run = (ng + nb - 1) / nb * 32;
        set.blk0[0] = 0; set.blk0[1] = set.blk0[2] = (int)nb;
        if (epi && dry == 0 && nm->np != (int)nb) return false;   /* (the parts it leaves: epi_parts) */
    } else {
        run = mr_deal(c, nw, w, rs, set.blk0);
    }
    const int blk = set.blk0[pair ? 1 : nw];
    for (int k = 0; k < nw; k++) {
        set.W[k] = (const uint8_t *)w[k]->w; set.S[k] = (const uint8_t *)w[k]->scales; set.B[k] = (const uint8_t *)w[k]->biases;
        set.bias[k] = w[k]->bias; set.y[k] = ys[k]; set.rows[k] = (int)w[k]->rows;
    }
    set.nw = nw;
    if (!(set.slots = mr_slots(slots_of(rs), (int)(((run + rs - 1) / rs * (pair ? 2 : 1) + nwarp - 1) / nwarp)))) return false;
    size_t shm = (size_t)nwarp * set.slots * (set.slot_b + 8);
    if (xs) shm = ((shm + 15) & ~(size_t)15) + (size_t)K + (size_t)K / 32 * 8 + (size_t)run * 4;   /* x's int8 form, then the rows' sums */
    else if (pair || epi) shm = ((shm + 15) & ~(size_t)15) + (size_t)run * (pair ? 8 : 4);   /* the sums of the block's rows (gate's and up's) */
    else if (nm && !sc) shm = ((shm + 15) & ~(size_t)15) + (size_t)K + (size_t)K / 32 * 8;   /* x's int8 form, after the ring */
    const size_t optin = c->prop.sharedMemPerBlockOptin - 1024;   /* (-1024: static) */
    if (shm > optin) return false;
    const bool bf = w[0]->sdt == SDT_BF16;
    typedef void (*mr_fn)(const mr_set, const int8_t *, const float2 *, int, const mr_norm);
#define MR_RS(B, T, N, SC) {k_mv_ring<B, T, 1, N, SC>, k_mv_ring<B, T, 2, N, SC>, k_mv_ring<B, T, 4, N, SC>}
#define MR_N(N, SC) {{MR_RS(4, __half, N, SC), MR_RS(4, __nv_bfloat16, N, SC)}, {MR_RS(8, __half, N, SC), MR_RS(8, __nv_bfloat16, N, SC)}}
    static const mr_fn forms[8][2][2][3] = {MR_N(0, false), MR_N(1, false), MR_N(2, false), MR_N(3, false), MR_N(4, false),
                                            MR_N(0, true), MR_N(3, true), MR_N(6, false)};
#undef MR_N
#undef MR_RS
    /* (form bits 0-11 without a prologue, 16-27 with the norm, 32-43 with the act_mul before, 48-59
     * the pair with the act_mul after, 64-75 the add and the norm's parts after, 80-91 x scaled,
     * 96-107 the pair on x scaled, 112-123 the add's epilogue on long rows; 12-14 and 28-30:
     * k_mv_ring_bf's) */
    const int p = nm ? (pro == 2 || pro == 3 || pro == 4 || pro == 6 || sc ? pro : 1) : 0, ri = rs == 4 ? 2 : rs == 2 ? 1 : 0;
    const int fi = sc ? (p == 3 ? 6 : 5) : p == 6 ? 7 : p;
    const int form = ((bits == 8) * 2 + bf) * 3 + ri + 16 * fi;
    const mr_fn kf = forms[fi][bits == 8][bf][ri];
    if (dry == 1) return true;
    if (!mr_raise(c, (const void *)kf, form, (int)optin)) return false;
    if (dry) return true;
    mr_norm no;
    memset(&no, 0, sizeof no);
    PL(c, kf, (unsigned)blk, nwarp * 32, shm)(set, xq, xds, gsh, nm ? *nm : no);
    LAUNCHED(c, p == 6 ? "matvec (int8 activations in shared memory, bulk-copied weights) + add + rmsnorm parts"
                : p == 4 ? "matvec (int8 activations, bulk-copied weights) + add + rmsnorm parts"
                : p == 3 ? (sc ? "matvec (int8 activations scaled, gate/up, bulk-copied weights) + act_mul"
                           : "matvec (int8 activations, gate/up, bulk-copied weights) + act_mul")
                : p == 2 ? "matvec (int8 activations, bulk-copied weights) + act_mul"
                : sc ? "matvec (int8 activations scaled, bulk-copied weights)"
                : p ? "matvec (int8 activations, bulk-copied weights) + rmsnorm" : "matvec (int8 activations, bulk-copied weights)");
    c->n_ring++;
    if (p == 1) c->n_ring_norm++;
    if (p == 2) c->n_ring_act++;
    if (p == 3) c->n_ring_pair++;
    if (p == 4) c->n_ring_epi++;
    if (p == 6) c->n_ring_long++;
    if (sc) c->n_ring_sc++;
    if (half) c->n_pair_half++;
    return true;
}

static bool pe_defer(cu_ctx *c, const cu_weight *w, const int8_t *xq, const float2 *xds, float *y);
static void mv_i8_regs(cu_ctx *c, int nw, const cu_weight *const *w, const int8_t *xq, const float2 *xds, float *const *ys, int n,
                       const i8e_args *e = NULL);
/* nw (<= 4) q4/q8 weights of one format on x [n, cols] through int8 activations, one quantize
 * and one matvec launch. False (nothing launched) when the weights do not qualify. Above
 * MV_I8_MAX rows only k_mv_mma takes them (MLXCEL_CUDA_MV_MMA_WIDE, mv_mma_wide). */
static bool mv_mma_wide(const cu_ctx *c, int nw, const cu_weight *const *w, int n);
static bool mv_i8(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n) {
    if (nw < 1 || nw > 4) return false;
    const bool wide = n > MV_I8_MAX;
    if (wide && !mv_mma_wide(c, nw, w, n)) return false;
    for (int k = 0; k < nw; k++) if (!mv_i8_ok(c, w[k], w[0], wide ? 1 : n)) return false;
    const int cols = (int)w[0]->cols, ngx = cols / 32;
    int8_t *xq; float2 *xds;
    if (n == 1 && c->xq2_src == x && c->xq2_count == cols) {   /* the act_mul of a gate/up pair wrote it (pr) */
        if (!xq_buf(c, cols, &xq, &xds, true)) return true;
    } else if (!xq_buf(c, (int64_t)n * cols, &xq, &xds)) {
        return true;   /* failure recorded */
    } else if (c->xq_src != x || c->xq_count != (int64_t)n * cols) {
        PL(c, k_quant_x, nblk((int64_t)n * ngx * 32, 256), 256, 0)(x, xq, xds, n, cols);
        LAUNCHED(c, "quantize activations");
        c->xq_src = x; c->xq_count = (int64_t)n * cols;
    }
    if (n == 1 && nw == 1 && pe_defer(c, w[0], xq, xds, ys[0])) return true;
    if (n == 1 && mv_ring(c, nw, w, xq, xds, ys, NULL)) return true;
    mv_i8_regs(c, nw, w, xq, xds, ys, n);
    return true;   /* (an output over x: the caller's forget_overlap drops the int8 form) */
}
/* a set of nw q4/q8 weights for k_mv_i8 / k_mv_mma, blocks of rpb rows each; returns the blocks */
static unsigned mv_set_fill(mv_set *set, int nw, const cu_weight *const *w, float *const *ys, int rpb) {
    memset(set, 0, sizeof *set);
    unsigned blk = 0;
    for (int k = 0; k < nw; k++) {
        set->W[k] = (const uint32_t *)w[k]->w; set->S[k] = w[k]->scales; set->B[k] = w[k]->biases;
        set->bias[k] = w[k]->bias; set->y[k] = ys[k]; set->rows[k] = (int)w[k]->rows; set->blk0[k] = (int)blk;
        blk += nblk(w[k]->rows, rpb);
    }
    set->blk0[nw] = (int)blk; set->nw = nw;
    return blk;
}
/* k_mv_mma's part (mv_mma.cuh): the bytes of a row's scales in a chunk of its codes where the weights
 * of the set (one format: mv_i8_ok) qualify, else 0: a device before sm_80, rows that are not whole
 * chunks of 128 code bytes, scales of under 4 bytes a chunk (q8 in groups of 128), weights not
 * aligned for the copies */
static int mm_fits(const cu_ctx *c, int nw, const cu_weight *const *w) {
    if (!c->mm_ok) return 0;
    const int bits = w[0]->bits, cols = (int)w[0]->cols, gs = (int)w[0]->gs;
    if (bits != 4 && bits != 8) return 0;
    const int ck = MM_CB * 8 / bits, sb = 2 * ck / gs;
    if (cols % ck || sb < 4 || sb > 16) return 0;
    for (int k = 0; k < nw; k++)
        if (((uintptr_t)w[k]->w & 15) || ((uintptr_t)w[k]->scales & 3) || ((uintptr_t)w[k]->biases & 3)) return 0;
    return sb;
}
/* k_mv_mma's tiles of x for n rows (8 each), its shared memory for nst stages a warp, and the stages
 * it runs: MLXCEL_CUDA_MV_MMA_STAGES, fewer where that many do not fit (x staged too, MM_XS); 0 where
 * not even 2 do */
static int mm_nt(int n) { return n <= 8 ? 1 : n <= 16 ? 2 : 4; }
static int mm_rt(const cu_ctx *c, int n) { return c->mm_form == 2 || (c->mm_form == 0 && n > 8) ? 2 : 1; }   /* the form */
static size_t mm_smem_bytes(int bits, int n, int rt, int nst) {
    return (size_t)MM_WARPS * nst * (MM_STAGE(rt) + MM_XST(bits, mm_nt(n)));
}
static int mm_stages(const cu_ctx *c, int bits, int n, int rt) {
    int nst = c->mm_nst;
    while (nst >= 2 && mm_smem_bytes(bits, n, rt, nst) > c->prop.sharedMemPerBlockOptin) nst--;
    return nst >= 2 ? nst : 0;
}
/* the products of nw weights (mm_fits gave sb) on x's int8 form, n <= MM_NMAX rows, in one launch
 * of form rt (mm_rt) with nst stages a warp (mm_stages).
 * Form 1: a warp 16 rows, 4 warps a row tile along k. Form 2: a warp 32 rows (x loaded once for both
 * tiles), one block a multiprocessor, and the warps along k (1-8) that give the fewest
 * waves times a warp's chunks plus its pipeline's fill (3 chunks). MLXCEL_CUDA_MV_MMA_FORM=auto (the
 * default): form 2 above 8 rows of x (on an H100 at 16 rows: Llama-8B q4 +52%, Qwen3-0.6B +6%; at 8
 * the two even), form 1 up to 8. */
static void mv_mma_launch(cu_ctx *c, int nw, const cu_weight *const *w, const int8_t *xq, const float2 *xds, float *const *ys,
                          int n, int sb, int rt, int nst) {
    const int rw = 16 * rt, cols = (int)w[0]->cols, nch = cols / (MM_CB * 8 / w[0]->bits);
    const size_t shm = mm_smem_bytes(w[0]->bits, n, rt, nst);
    int kwn = 4;
    if (rt == 2) {
        int64_t tiles = 0;
        for (int k = 0; k < nw; k++) tiles += nblk(w[k]->rows, rw);
        const int64_t bps = (int64_t)c->prop.sharedMemPerMultiprocessor / ((int64_t)shm + 1024);
        const int64_t slots = (int64_t)c->prop.multiProcessorCount * (bps > 1 ? bps : 1);
        double best = 1e30;
        for (int q = 1; q <= 8 && q <= nch; q *= 2) {
            const int64_t blocks = (tiles * q + MM_WARPS - 1) / MM_WARPS;
            const double cost = (double)((blocks + slots - 1) / slots) * ((nch + q - 1) / q + 3);
            if (cost < best) { best = cost; kwn = q; }
        }
    }
    mv_set set;
    const unsigned blk = mv_set_fill(&set, nw, w, ys, rw * (MM_WARPS / kwn));
    const int gsh = log2_exact(w[0]->gs);
#define MML(B, T, NT, RT) PL(c, k_mv_mma<B, T, NT, RT>, blk, MM_WARPS * 32, shm)(set, xq, xds, cols, gsh, sb, n, kwn, c->mm_pfx, nst)
#define MMR(B, T, NT) do { if (rt == 2) MML(B, T, NT, 2); else MML(B, T, NT, 1); } while (0)
#define MMN(B, T) do { if (nt == 1) MMR(B, T, 1); else if (nt == 2) MMR(B, T, 2); else MMR(B, T, 4); } while (0)
    const int nt = mm_nt(n);
    if (w[0]->sdt == SDT_BF16) { if (w[0]->bits == 4) MMN(4, __nv_bfloat16); else MMN(8, __nv_bfloat16); }
    else { if (w[0]->bits == 4) MMN(4, __half); else MMN(8, __half); }
#undef MMN
#undef MMR
#undef MML
    c->n_mv_mma++;
    LAUNCHED(c, "matvec (int8 tensor cores)");
}
/* mv_i8_regs's products on int8 tensor cores for c->mv_mma .. MV_I8_MAX rows of x (MLXCEL_CUDA_MV_MMA),
 * up to MM_NMAX with MLXCEL_CUDA_MV_MMA_WIDE: false (nothing launched) where they do not qualify
 * (mm_fits) */
static bool mv_mma(cu_ctx *c, int nw, const cu_weight *const *w, const int8_t *xq, const float2 *xds, float *const *ys, int n) {
    if (!c->mv_mma || n < c->mv_mma || n > (c->mv_mma_wide ? MM_NMAX : MV_I8_MAX)) return false;
    const int sb = mm_fits(c, nw, w);
    if (!sb || ((uintptr_t)xq & 15) || ((uintptr_t)xds & 15)) return false;   /* (x's 16-byte copies) */
    const int rt = mm_rt(c, n), nst = mm_stages(c, w[0]->bits, n, rt);
    if (!nst) return false;
    mv_mma_launch(c, nw, w, xq, xds, ys, n, sb, rt, nst);
    return true;
}
/* MLXCEL_CUDA_MV_MMA_WIDE: whether k_mv_mma takes MV_I8_MAX + 1 .. MM_NMAX rows of x too, ahead of
 * the GEMMs (then mv_i8 quantizes x and mv_mma launches it) */
static bool mv_mma_wide(const cu_ctx *c, int nw, const cu_weight *const *w, int n) {
    return c->mv_mma_wide && c->mv_mma && n <= MM_NMAX && mm_fits(c, nw, w);
}
/* the register form of mv_i8 on x's int8 form xq / xds */
/* (e: one weight, one row of x, k_mv_i8<.., EPI> with those arguments; i8e_launch) */
static void mv_i8_regs(cu_ctx *c, int nw, const cu_weight *const *w, const int8_t *xq, const float2 *xds, float *const *ys, int n,
                       const i8e_args *e) {
    if (!e && mv_mma(c, nw, w, xq, xds, ys, n)) return;
    const int cols = (int)w[0]->cols, gsh = log2_exact(w[0]->gs);
    const int R = n >= 2 ? 2 : 1;
    mv_set set;
    const unsigned blk = mv_set_fill(&set, nw, w, ys, MV_WARPS * R);
    if (e) {
#define I8E(B, T) PL(c, k_mv_i8<B, T, 1, 1, true>, blk, MV_WARPS * 32, 0)(set, xq, xds, cols, gsh, 1, *e)
        if (w[0]->sdt == SDT_BF16) { if (w[0]->bits == 4) I8E(4, __nv_bfloat16); else I8E(8, __nv_bfloat16); }
        else { if (w[0]->bits == 4) I8E(4, __half); else I8E(8, __half); }
#undef I8E
        LAUNCHED(c, "matvec (int8 activations) + add + norm parts");
        return;
    }
    i8e_args noe;
    memset(&noe, 0, sizeof noe);
    if (w[0]->sdt == SDT_BF16) { if (w[0]->bits == 4) { I8_CASES(4, __nv_bfloat16) } else { I8_CASES(8, __nv_bfloat16) } }
    else { if (w[0]->bits == 4) { I8_CASES(4, __half) } else { I8_CASES(8, __half) } }
    LAUNCHED(c, "matvec (int8 activations)");
}

static void mm_impl(cu_ctx *c, const cu_weight *w, const float *x, float *y, int n, int *xb_have);
static bool mm_set_gemm(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n);
struct gq_pair { int act; bool dry; };
static bool gq_gemm(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n,
                    const gq_pair *pair = NULL);
static bool gq_rows(const cu_ctx *c, int n, int64_t cols);
static void pdl_mode(cu_ctx *c, bool small);
struct mr_norm;
static bool rn_take(cu_ctx *c, const float *x, int n, mr_norm *nm, int *d);
static bool pa_product(cu_ctx *c, const cu_weight *w, const float *x, float *y, int n);
static void am_launch(cu_ctx *c, int act, const float *gate, const float *up, int64_t stride, float *y, int n, int d);
static void pn_norm(const cu_ctx *c, const cu_ctx::cu_pnorm *pn, mr_norm *nm);
static void multi_run(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n);
static bool rn_product(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, const mr_norm *nm, int d);
static bool pe_take(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n);
static void c_matmul(void *ctx, const mx_weight *wt, const float *x, float *y, int n) {
    cu_ctx *c = (cu_ctx *)ctx;
    pdl_mode(c, n <= MV_I8_MAX);   /* before GOP_PURE: also ahead of a replayed graph */
    c->at_hold = true;   /* (g_op clears it) */
    GOP_PURE(c, 1, PU(wt), PU(x), PU(y), (uint64_t)n);
    const cu_weight *w = get_w(c, wt);
    if (at_pending(c)) {   /* a deferred attention (MLXCEL_CUDA_ATT_O): o of its output takes it, else it runs now */
        if (w && at_take(c, w, x, y, n)) { forget_overlap(c, y, w->rows); return; }
        at_flush(c);
    }
    c->last_bf16 = w && !w->bits && w->dtype == MX_DTYPE_BF16;
    if (w) apf_note(c, 1, &w, n);
    mr_norm nm;
    int d;
    if (w && pe_take(c, 1, &w, x, &y, n)) return;   /* x is the output of a norm that waits in a product's epilogue */
    if (w && rn_take(c, x, n, &nm, &d)) {   /* x is the deferred norm's output */
        FLUSH_ALL(c);
        if (rn_product(c, 1, &w, x, &y, &nm, d)) { forget_overlap(c, y, (int64_t)n * w->rows); return; }
    }
    if (w && pa_product(c, w, x, y, n)) { forget_overlap(c, y, (int64_t)n * w->rows); return; }
    FLUSH_ALL(c);
    if (!w || n <= 0) return;
    int xb_have = 0;
    c->ps_allow = true;   /* a split-k sum may wait for the add that reads y (MLXCEL_CUDA_SUM_NORM) */
    c->pe_allow = true;   /* a ring product may wait for the add and the norm after it (MLXCEL_CUDA_RING_EPI) */
    mm_impl(c, w, x, y, n, &xb_have);
    c->ps_allow = c->pe_allow = false;
    forget_overlap(c, y, (int64_t)n * w->rows);
}

static void c_matmul_multi(void *ctx, int nw, const mx_weight *const *ws, const float *x, float *const *ys, int n) {
    cu_ctx *c = (cu_ctx *)ctx;
    pdl_mode(c, n <= MV_I8_MAX);
    GOP_PURE(c, 13, (uint64_t)nw, nw > 0 ? PU(ws[0]) : 0, nw > 1 ? PU(ws[1]) : 0, nw > 2 ? PU(ws[2]) : 0,
             nw > 3 ? PU(ws[3]) : 0, PU(x), nw > 0 ? PU(ys[0]) : 0, nw > 1 ? PU(ys[1]) : 0, nw > 2 ? PU(ys[2]) : 0,
             nw > 3 ? PU(ys[3]) : 0, (uint64_t)n);
    if (nw < 1 || nw > 4 || n <= 0) { FLUSH_ALL(c); return; }
    const cu_weight *w[4];
    for (int k = 0; k < nw; k++) if (!(w[k] = get_w(c, ws[k]))) { FLUSH_ALL(c); return; }
    c->last_bf16 = !w[0]->bits && w[0]->dtype == MX_DTYPE_BF16;
    apf_note(c, nw, w, n);
    multi_run(c, nw, w, x, ys, n);
}
/* a batch-1 dense bf16 gate/up pair the ring takes (with the norm pn of x it took, or none):
 * deferred (true), so that an act_mul of its outputs runs in the same launch */
static bool pb_defer(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n,
                     const cu_ctx::cu_pnorm *pn) {
    if (!c->ring_pair || nw != 2 || n != 1 || w[0]->bits || w[1]->bits || w[0]->dtype != MX_DTYPE_BF16 ||
        w[1]->dtype != MX_DTYPE_BF16 || (pn ? !c->mr_bf || w[0]->cols != (int64_t)pn->d : c->mr_bf != 2))
        return false;
    mr_norm nm;
    if (pn) pn_norm(c, pn, &nm);
    if (!mv_ring_bf(c, 2, w, x, ys, pn ? &nm : NULL, 0, true)) return false;
    c->pb.w[0] = w[0]; c->pb.w[1] = w[1]; c->pb.x = x; c->pb.y[0] = ys[0]; c->pb.y[1] = ys[1];
    c->pb.has_pn = pn != NULL;
    if (pn) c->pb.pn = *pn;
    c->pb.on = true;
    return true;
}
/* a deferred gate/up pair issued as the product it was (not deferred again) */
static void pair_as_product(cu_ctx *c, const cu_weight *const *w, const float *x, float *const *y) {
    const int rp = c->ring_pair;
    c->ring_pair = 0;
    multi_run(c, 2, w, x, y, 1);
    c->ring_pair = rp;
}
/* the deferred gate/up pair as it is: its norm waits again, and the product is issued as then */
static void pb_flush(cu_ctx *c) {
    if (!c->pb.on) return;
    c->pb.on = false;
    if (c->pb.has_pn) { c->pn = c->pb.pn; c->pn.on = true; }
    pair_as_product(c, c->pb.w, c->pb.x, c->pb.y);
}
/* a batch-1 q4/q8 gate/up pair the ring takes, on x's int8 form (the norm before it wrote it, or
 * it is quantized here as mv_i8 would): deferred (true), so that an act_mul of its outputs runs in
 * the same launch (k_mv_ring<.., 3>) */
static bool pr_defer(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n) {
    if (!c->ring_pair || nw != 2 || n != 1 || !mv_i8_ok(c, w[0], w[0], 1) || !mv_i8_ok(c, w[1], w[0], 1)) return false;
    const int64_t K = w[0]->cols;
    int8_t *xq; float2 *xds;
    if (!xq_buf(c, K, &xq, &xds)) return false;
    mr_norm nm;
    memset(&nm, 0, sizeof nm);
    nm.oq = xq; nm.ods = xds;   /* (any 16-byte aligned pointers: only the dry run sees them) */
    if (!mv_ring(c, 2, w, xq, xds, ys, &nm, 3, true)) return false;
    if (c->xq_src != x || c->xq_count != K) {
        PL(c, k_quant_x, nblk(K, 256), 256, 0)(x, xq, xds, 1, (int)K);
        LAUNCHED(c, "quantize activations");
        c->xq_src = x; c->xq_count = K;
    }
    c->pr.w[0] = w[0]; c->pr.w[1] = w[1]; c->pr.x = x; c->pr.y[0] = ys[0]; c->pr.y[1] = ys[1];
    c->pr.in2 = c->pr.sc = false;
    c->pr.on = true;
    return true;
}
static void sc_norm(const cu_ctx::cu_scale *s, mr_norm *nm) {
    memset(nm, 0, sizeof *nm);
    nm->a = s->a; nm->g = s->g; nm->eps = s->eps; nm->add_one = s->add_one; nm->y = s->y; nm->part = s->part; nm->np = s->np;
}
/* the deferred q4/q8 pair as it is (x's int8 form is still in xq, or xq2: nothing ran since); on
 * the form before its norm's scale (sc), the two products on it without the act_mul */
static void pr_flush(cu_ctx *c) {
    if (!c->pr.on) return;
    c->pr.on = false;
    if (c->pr.sc) {
        int8_t *xq; float2 *xds;
        mr_norm nm;
        sc_norm(&c->pr.scn, &nm);
        if (xq_buf(c, c->pr.w[0]->cols, &xq, &xds, c->pr.in2) && mv_ring(c, 2, c->pr.w, xq, xds, c->pr.y, &nm, 0, 0, true)) {
            for (int k = 0; k < 2; k++) forget_overlap(c, c->pr.y[k], c->pr.w[k]->rows);
        } else {
            cu_fail(c, MX_ERR_INTERNAL, "gate/up product on a scaled int8 form", cudaSuccess);   /* (checked when taken: not expected) */
        }
        return;
    }
    pair_as_product(c, c->pr.w, c->pr.x, c->pr.y);
}

/* MLXCEL_CUDA_RING_EPI: a batch-1 q4/q8 ring product of one weight (o, down), the residual add of
 * its output and the rmsnorm of the sum in one launch (k_mv_ring<.., 4>), which leaves the norm's
 * output as the int8 form of sum * (g + add_one) and each block's sum of squares; the ring product
 * that reads the norm's output (q/k/v, gate/up, the LM head) sums those parts and scales x by the
 * norm's scale (k_mv_ring<.., SC>), and stores the norm's output. So the norm is not a kernel of its
 * own, and neither side has a counter or a block-wide reduction on its path. The product waits
 * (pe_defer), then the add (pe_add) and the norm (pe_norm) wait with it, until a product of the
 * norm's output takes them (pe_take); any other op launches them as they were (pe_flush). */
/* The blocks of k_mv_ring<.., 4> (mv_ring's pair geometry): a group of 32 rows a block at most, and
 * at most MLXCEL_CUDA_EPI_BLOCKS, by default three quarters of the multiprocessors (a multiple of 8:
 * 96 of 132), so that the gate/up pair after it finds a quarter of them free and starts copying its
 * weights while this one runs. Llama-8B q4's o (128 groups) on 96 blocks: decode +0.8-1.5% in four
 * rounds over two calls (H100: 460.4-461.0 tok/s against 454.2-456.8 on 128 blocks; the pair's
 * `next` 25.4 us against 28.6, o's 6.5 against 4.8, the attention's 5.1 against 4.2, in the wait
 * trace); 112 blocks 459.3-459.6; 64 blocks 449 (o and the attention slower by more than the pair
 * gains), 32 436. Qwen3-0.6B's o and down (32 groups) are below it (16 blocks: -8%). Twenty-fourth
 * session, NOTES.md. */
static int epi_grid(const cu_ctx *c, int64_t rows) {
    const int cap = c->epi_blocks > 0 ? c->epi_blocks : c->prop.multiProcessorCount * 3 / 4 / 8 * 8;
    const int64_t nb = group_grid(c, rows, false);
    return (int)(cap > 0 && nb > cap ? cap : nb);
}
/* the product (c_matmul's, through mv_i8, on x's int8 form xq / xds): deferred (true) */
static bool pe_defer(cu_ctx *c, const cu_weight *w, const int8_t *xq, const float2 *xds, float *y) {
    if (!c->ring_epi || !c->pe_allow || !c->epi_part || c->pe.on || c->mv_f32) return false;
    mr_norm nm;
    memset(&nm, 0, sizeof nm);
    nm.oq = (int8_t *)xq; nm.ods = (float2 *)xds; nm.part = c->epi_part;   /* (the dry run: any aligned pointers) */
    bool i8 = false, xs = false;
    if (w->cols > 4096 && epi_parts(c, w->rows, true) <= MR_PARTS && mv_ring(c, 1, &w, xq, xds, &y, &nm, 6, 1)) {
        xs = true;   /* (rows longer than 4,096 columns on the ring, x staged: MLXCEL_CUDA_RING_LONG) */
    } else if (epi_parts(c, w->rows, false) > MR_PARTS || !mv_ring(c, 1, &w, xq, xds, &y, &nm, 4, 1)) {
        /* k_mv_i8<.., EPI>: a group of 32 rows a part */
        if (!c->i8_epi || !c->i8e_cnt || w->rows % 32 || w->rows / 32 > MR_PARTS || !mv_i8_ok(c, w, w, 1)) return false;
        i8 = true;
    }
    c->pe.w = w; c->pe.xq = xq; c->pe.xds = xds; c->pe.y = y; c->pe.in2 = (const void *)xq == c->xq2;
    c->pe.stage = 0; c->pe.on = true; c->pe.att = false; c->pe.i8 = i8; c->pe.xs = xs;
    return true;
}
/* the waiting product on k_mv_i8<.., EPI> with the add and the norm's inputs pn (a k_mv_ring<.., 4>'s,
 * a part a group of 32 rows) */
static void i8e_launch(cu_ctx *c, const cu_weight *w, const int8_t *xq, const float2 *xds, float *y, const mr_norm *pn) {
    const i8e_args e = {pn->a, pn->sum, pn->g, pn->add_one, pn->oq, pn->ods, pn->part, c->i8e_cnt};
    mv_i8_regs(c, 1, &w, xq, xds, &y, 1, &e);   /* (one row of x: the grid of MV_WARPS rows a block) */
    c->n_i8_epi++;
}
static bool apart(const float *a, const float *b, int64_t n) { return !(a < b + n && b < a + n); }
/* y = a + b of the waiting product's output and another buffer (the residual), y that one or apart */
static bool pe_add(cu_ctx *c, const float *a, const float *b, float *y, int64_t count) {
    if (!c->pe.on || c->pe.stage != 0 || count != c->pe.w->rows) return false;
    const float *py = c->pe.y, *r = a == py ? b : b == py ? a : NULL;
    if (!r || !apart(r, py, count) || (y != r && (!apart(y, r, count) || !apart(y, py, count)))) return false;
    c->pe.ra = a; c->pe.rb = b; c->pe.sum = y; c->pe.count = count; c->pe.stage = 1;
    return true;
}
/* the one-row rmsnorm of that sum, into a buffer apart from it */
static bool pe_norm(cu_ctx *c, const float *x, const float *gd, float eps, float add_one, float *y, int n, int d) {
    if (!c->pe.on || c->pe.stage != 1 || x != c->pe.sum || n != 1 || d != c->pe.count || !apart(y, x, d)) return false;
    c->pe.g = gd; c->pe.eps = eps; c->pe.add_one = add_one; c->pe.yn = y; c->pe.d = d; c->pe.stage = 2;
    return true;
}
static void add_run(cu_ctx *c, const float *a, const float *b, float *y, int64_t count);
static void rms_run(cu_ctx *c, const float *x, const float *gd, float eps, float add_one, float *y, int n, int d);
/* the waiting product launched as it is, then the add and the norm that waited with it */
static void at_launch(cu_ctx *c, const ao_args *ao);
static void pe_flush(cu_ctx *c) {
    if (!c->pe.on) return;
    c->pe.on = false;
    if (c->pe.att) { c->pe.att = false; at_launch(c, NULL); }   /* (the attention whose output o reads) */
    const cu_weight *w = c->pe.w;
    float *y = c->pe.y;
    if (!mv_ring(c, 1, &w, c->pe.xq, c->pe.xds, &y, NULL)) mv_i8_regs(c, 1, &w, c->pe.xq, c->pe.xds, &y, 1);
    forget_overlap(c, y, w->rows);
    if (c->pe.stage >= 1) add_run(c, c->pe.ra, c->pe.rb, c->pe.sum, c->pe.count);
    if (c->pe.stage >= 2) rms_run(c, c->pe.sum, c->pe.g, c->pe.eps, c->pe.add_one, c->pe.yn, 1, c->pe.d);
}
/* nw ring products of x, the waiting norm's output: the waiting product with the add and the norm's
 * parts in its epilogue, then these on its int8 form scaled (a gate/up pair waits for its act_mul
 * as pr_defer's); true: taken */
static bool pe_take(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n) {
    if (!c->pe.on || c->pe.stage != 2 || x != c->pe.yn || n != 1 || nw < 1 || nw > 4) return false;
    const int d = c->pe.d;
    for (int k = 0; k < nw; k++) if (!mv_i8_ok(c, w[k], w[0], 1) || w[k]->cols != (int64_t)d) return false;
    int8_t *oq; float2 *ods;
    if (!xq_buf(c, d, &oq, &ods, !c->pe.in2)) return false;   /* (the buffer the product does not read) */
    float *part = c->epi_part + (c->epi_flip ? MR_PARTS : 0);
    const cu_weight *pw = c->pe.w;
    float *py = c->pe.y;
    const bool att = c->pe.att;
    const bool i8 = c->pe.i8;
    const bool xs = c->pe.xs;
    const int np = att ? 1 : i8 ? (int)(pw->rows / 32) : epi_parts(c, pw->rows, xs);
    mr_norm pn;
    memset(&pn, 0, sizeof pn);
    pn.a = c->pe.ra == py ? c->pe.rb : c->pe.ra; pn.sum = c->pe.sum; pn.g = c->pe.g; pn.add_one = c->pe.add_one;
    pn.oq = oq; pn.ods = ods; pn.part = part; pn.np = np;
    const cu_ctx::cu_scale scs = {c->pe.sum, c->pe.g, c->pe.eps, c->pe.add_one, c->pe.yn, part, np};
    mr_norm sc, scp;
    sc_norm(&scs, &sc);
    scp = sc; scp.oq = oq; scp.ods = ods;   /* (the pair's output form goes elsewhere; the dry run checks alignment) */
    if (!att && !i8 && !mv_ring(c, 1, &pw, c->pe.xq, c->pe.xds, &py, &pn, xs ? 6 : 4, 2)) return false;
    bool pair = nw == 2 && c->ring_pair && mv_ring(c, 2, w, oq, ods, ys, &scp, 3, 2, true);
    if (!mv_ring(c, nw, w, oq, ods, ys, &sc, 0, 2, true)) return false;   /* (also pr_flush's form for a pair) */
    if (att) {   /* o in the attention's epilogue, which leaves what k_mv_ring<.., 4> would (one part) */
        float *ap = (float *)scratch(c, (void **)&c->ao_part, &c->ao_part_cap, (size_t)at_heads(c) * pw->rows * sizeof(float));
        if (!ap) return false;
        ao_args ao;
        memset(&ao, 0, sizeof ao);
        ao.W = (const uint8_t *)pw->w; ao.S = (const uint8_t *)pw->scales; ao.B = (const uint8_t *)pw->biases;
        ao.rows = (int)pw->rows; ao.row_wb = (int)(pw->cols / 2); ao.row_sb = (int)(pw->cols / pw->gs * 2);
        ao.gs_shift = log2_exact(pw->gs); ao.f16 = pw->sdt == SDT_F16;
        ao.part = ap; ao.cnt = c->att_cnt + ATT_CNT_MAX;
        ao.a = pn.a; ao.g = pn.g; ao.add_one = pn.add_one; ao.y = py; ao.sum = pn.sum; ao.oq = oq; ao.ods = ods; ao.ss = part;
        c->pe.on = c->pe.att = false;
        c->epi_flip ^= 1;
        at_launch(c, &ao);
    } else {
        c->pe.on = false;
        c->epi_flip ^= 1;
        if (i8) i8e_launch(c, pw, c->pe.xq, c->pe.xds, py, &pn);
        else mv_ring(c, 1, &pw, c->pe.xq, c->pe.xds, &py, &pn, xs ? 6 : 4);
    }
    xq_forget(c);   /* (the other buffer holds the sum's form before the scale; y, the sum and the norm's output changed) */
    if (pair) {
        c->pr.w[0] = w[0]; c->pr.w[1] = w[1]; c->pr.x = x; c->pr.y[0] = ys[0]; c->pr.y[1] = ys[1];
        c->pr.in2 = !c->pe.in2; c->pr.sc = true; c->pr.scn = scs; c->pr.on = true;
        return true;
    }
    mv_ring(c, nw, w, oq, ods, ys, &sc, 0, 0, true);
    for (int k = 0; k < nw; k++) forget_overlap(c, ys[k], w[k]->rows);
    return true;
}
/* c_matmul_multi's products (the weights found) */
static void multi_run(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n) {
    mr_norm nm;
    int d;
    if (pe_take(c, nw, w, x, ys, n)) return;
    if (rn_take(c, x, n, &nm, &d)) {   /* x is the deferred norm's output */
        const cu_ctx::cu_pnorm pn = c->pn;   /* (what rn_take read) */
        FLUSH_ALL(c);
        if (pb_defer(c, nw, w, x, ys, n, &pn)) return;
        if (rn_product(c, nw, w, x, ys, &nm, d)) {
            for (int k = 0; k < nw; k++) forget_overlap(c, ys[k], (int64_t)n * w[k]->rows);
            return;
        }
    }
    FLUSH_ALL(c);
    if (pb_defer(c, nw, w, x, ys, n, NULL) || pr_defer(c, nw, w, x, ys, n)) return;
    /* a gate/up pair the fused form takes (MLXCEL_CUDA_GEMM_PAIR=1): deferred, so that a
     * following act_mul of its outputs runs in the GEMM's epilogue (any other op launches it as it
     * is first) */
    static const gq_pair dry = {0, true};
    if (nw == 2 && c->pair_on && gq_gemm(c, 2, w, x, ys, n, &dry)) {
        c->pg.w[0] = w[0]; c->pg.w[1] = w[1]; c->pg.x = x; c->pg.y[0] = ys[0]; c->pg.y[1] = ys[1]; c->pg.n = n;
        c->pg.on = true;
        return;
    }
    bool done = mv_i8(c, nw, w, x, ys, n) || mv_dense_set(c, nw, w, x, ys, n);
    if (!done) {
        c->pq_allow = true;   /* a q/k/v sum may wait for the attention's q/k preparation (MLXCEL_CUDA_SUM_QKV) */
        done = gq_gemm(c, nw, w, x, ys, n);
        c->pq_allow = false;
    }
    if (!done && !mm_set_gemm(c, nw, w, x, ys, n)) {
        int xb_have = 0;   /* x converted for cuBLAS once for the weights of the set */
        for (int k = 0; k < nw; k++) {
            mm_impl(c, w[k], x, ys[k], n, &xb_have);
            forget_overlap(c, ys[k], (int64_t)n * w[k]->rows);   /* before the next weight reads x */
            if (ys[k] < x + (size_t)n * w[k]->cols && x < ys[k] + (size_t)n * w[k]->rows) xb_have = 0;
        }
        return;
    }
    for (int k = 0; k < nw; k++) forget_overlap(c, ys[k], (int64_t)n * w[k]->rows);
}

/* Above the matvecs and up to GQ_NMAX rows of x, q4 weights (one, or a set sharing x) through
 * k_gemm_gq where gq_rows takes them: x converted once (k_cvt_gq) unless the op that wrote it
 * left the gq-order form, one launch for the set, k split so that the blocks fill whole waves.
 * False (nothing done) when the weights do not qualify. */
static bool gq_rows(const cu_ctx *c, int n, int64_t cols) {   /* x of n rows x cols can go to k_gemm_gq */
    if (!c->gq_ok || n <= MV_I8_MAX || n > GQ_NMAX || c->precise || cols % GQ_BK) return false;
    /* auto: where the wgmma form runs, always (H100, 128 sequences of Qwen3-0.6B q4 after 128-token
     * prompts, its 1024-3072 columns: 44,030 tok/s against 36,235 through the dequantize + cuBLAS
     * path, with x by TMA; 38,781 without); elsewhere above 64 rows only for weights of 4096
     * columns or more (on the H200 at 128 rows the cuBLAS path was 3% faster for Qwen3-0.6B's,
     * k_gemm_gq 1-7% faster for Llama-3.1-8B's; at 32-64 rows k_gemm_gq was 33-69% faster for both) */
    return c->gemm_mode == GM_MMA || c->gemm_mode == GM_WG || (c->gemm_mode == GM_AUTO && (n <= 64 || cols >= 4096 || c->wg_ok));
}
/* the split-k partial sums of a set added into its outputs: four values a thread where every
 * weight's rows allow it */
static void gq_sum_launch(cu_ctx *c, const gq_set &set, const float *part, int nsplit, int n) {
    bool v4 = true;
    for (int k = 0; k < set.nw; k++) v4 = v4 && set.rows[k] % 4 == 0 && ((uintptr_t)set.y[k] & 15) == 0;
    if (v4) PL(c, k_gq_sum4, nblk((int64_t)n * set.rb[set.nw] / 4, 256), 256, 0)(set, part, nsplit, n);
    else PL(c, k_gq_sum, nblk((int64_t)n * set.rb[set.nw], 256), 256, 0)(set, part, nsplit, n);
    LAUNCHED(c, "gemm split-k sum");
}
/* pair (gate/up, nw = 2, equal rows, the wgmma form, no split of k): ys[0] = act(gate) * up and
 * ys[1] = up in one launch (k_gemm_wg<.., PAIR>), with ys[0]'s gq-order form for the next GEMM;
 * false (nothing done) where that form does not apply; pair->dry: only whether it does. */
static bool gq_gemm(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n,
                    const gq_pair *pair) {
    if (!gq_rows(c, n, w[0]->cols)) return false;
    if (pair && (nw != 2 || w[0]->rows != w[1]->rows || (ys[0] < ys[1] + (size_t)n * w[1]->rows && ys[1] < ys[0] + (size_t)n * w[0]->rows)))
        return false;
    const cu_weight *w0 = w[0];
    const int gsh = log2_exact(w0->gs);
    const int64_t cols = w0->cols;
    if (w0->bits != 4 || gsh < 4 || (w0->sdt != SDT_BF16 && w0->sdt != SDT_F16)) return false;
    gq_set set;
    memset(&set, 0, sizeof set);
    set.nw = nw;
    set.rot = c->gq_rot;
    for (int k = 0; k < nw; k++) {
        if (w[k]->bits != 4 || w[k]->gs != w0->gs || w[k]->sdt != w0->sdt || w[k]->cols != cols) return false;
        if (ys[k] < x + (size_t)n * cols && x < ys[k] + (size_t)n * w[k]->rows) return false;
        set.W[k] = (const uint32_t *)w[k]->w; set.S[k] = w[k]->scales; set.B[k] = w[k]->biases;
        set.bias[k] = w[k]->bias; set.y[k] = ys[k]; set.rows[k] = (int)w[k]->rows;
        set.rb[k + 1] = set.rb[k] + (int)w[k]->rows;
    }
    /* the wgmma form where its code runs (sm_90a) unless mma.sync is asked for, and the weights
     * have their scale pairs (not made when the mode at init kept the wgmma form out) */
    bool wg = c->wg_ok && (c->gemm_mode == GM_AUTO || c->gemm_mode == GM_WG);
    for (int k = 0; k < nw; k++) if (!w[k]->sbp) wg = false;
    if (pair && !wg) return false;
    /* tokens a block: up to 32 rows of x the wgmma form's 32-token tiles (half the tensor-core
     * work of the 64-token ones, and half the x copies), not in the fused pair form */
    const int bn = n <= 32 && wg && !pair && c->wg32_ok && c->gemm_n32 ? 32 : n <= 64 ? 64 : 128;
    /* 4 warpgroups (256 rows) a block for >= 4096 columns: each x tile serves twice the rows,
     * and x's L2 traffic is what limits it (Llama-8B, 128 rows: 11,563 tok/s against 10,164 with 2);
     * 2 for smaller weights, which then make enough blocks (Qwen3-0.6B, 32 rows: 17,459 / 16,849) */
    const int nwg = bn == 32 && c->n32_wg ? c->n32_wg : cols >= 4096 ? 4 : 2, bm = wg ? 64 * nwg : GQ_BM;
    for (int k = 0; k < nw; k++) {
        set.blk0[k + 1] = pair ? (int)nblk(w[0]->rows, bm / 2) : set.blk0[k] + (int)nblk(w[k]->rows, bm);
        set.SB[k] = w[k]->sbp;
    }
    const int64_t tiles = (int64_t)set.blk0[nw] * nblk(n, bn), ksteps = cols / GQ_BK;
    /* the split of k: fewest waves of blocks per unit of work, each split costing 5% more (its
     * partial sums written and read, then summed by one more launch), at most ksteps / 4 splits
     * (the stages need a run; rounding can leave the last split shorter) */
    const int64_t slots = (int64_t)(bn == 32 ? c->wg_bps32[nwg == 4] : (wg ? c->wg_bps[nwg == 4] : c->gq_bps)[bn == 128]) * c->prop.multiProcessorCount;
    int ns = 1;
    double best = 1e30;
    for (int s = 1; s <= 16 && (s == 1 || s <= ksteps / 4); s++) {
        const double cost = (double)((tiles * s + slots - 1) / slots) / s * (1.0 + 0.05 * (s - 1));
        if (cost < best - 1e-9) { best = cost; ns = s; }
    }
    /* stream-K (k_gemm_wg) where the tiles, unsplit, leave the last wave of blocks short by more
     * than 2% and a tile is shared by few blocks (at least half a wave of tiles: each part of a
     * tile is one more partial tile through L2, and its first part's block adds them alone).
     * Llama-8B gate/up at 32 sequences: 112 tiles on 132 multiprocessors. Only in the 64-token
     * form: the 128-token one, at the 128-register bound, spilled 88 bytes in its stream-K form
     * and was slower than without (Llama-8B, 128 sequences: 13,883 against 14,389 tok/s) */
    int sk_grid = 0;
    const int64_t sk_slots = wg && bn <= 64 ? (int64_t)(bn == 32 ? c->wg_bps32_sk[nwg == 4] : c->wg_bps_sk[nwg == 4][0]) * c->prop.multiProcessorCount : 0;
    if (wg && !pair && nblk(n, bn) == 1 && c->strk_cnt && set.blk0[nw] <= STRK_TILES && sk_slots > 0) {
        if (c->strk_grid > 0) { sk_grid = (int)(c->strk_grid < sk_slots ? c->strk_grid : sk_slots); ns = 1; }
        else if (c->strk_mode && ns == 1 && 2 * tiles >= sk_slots && (double)((tiles + sk_slots - 1) / sk_slots) * sk_slots > 1.02 * tiles)
            sk_grid = (int)sk_slots;
    }
    if (sk_grid > tiles * ksteps) sk_grid = (int)(tiles * ksteps);   /* every block a unit at least (the waits count on it) */
    const int kchunk = (int)((ksteps + ns - 1) / ns) * GQ_BK, nsplit = (int)((cols + kchunk - 1) / kchunk);
    if (pair && (nsplit > 1 || pair->dry)) return nsplit == 1;
    if (sk_grid) { set.strk = c->strk_cnt; set.rot = 0; }
    if (pair) {   /* the output's gq form in the second buffer, which then becomes the first */
        set.act = pair->act;
        if (gq_rows(c, n, w[0]->rows) &&
            !(set.xg = (__nv_bfloat16 *)scratch(c, &c->xg2, &c->xg2_cap, (size_t)n * w[0]->rows * 2))) return true;
    }
    float *part = NULL;
    if (nsplit > 1 && !(part = (float *)scratch(c, &c->gpart, &c->gpart_cap, (size_t)nsplit * n * set.rb[nw] * 4))) return true;
    if (sk_grid && !(part = (float *)scratch(c, &c->strk_part, &c->strk_part_cap, (size_t)sk_grid * 64 * nwg * bn * 4))) return true;
    __nv_bfloat16 *xb = (__nv_bfloat16 *)scratch(c, &c->xg, &c->xg_cap, (size_t)n * cols * 2);
    if (!xb) return true;   /* failure recorded */
    if (c->xg_src != x || c->xg_count != (int64_t)n * cols) {   /* else the op that wrote x wrote it too */
        PL(c, k_cvt_gq, nblk((int64_t)n * cols, 256), 256, 0)(x, xb, (int64_t)n * cols);
        c->n_cvt_gq++;
        LAUNCHED(c, "convert activations (gq order)");
        c->xg_src = x; c->xg_count = (int64_t)n * cols;
    }
    const dim3 grid(sk_grid ? (unsigned)sk_grid : (unsigned)set.blk0[nw], nblk(n, bn), (unsigned)nsplit);
    const size_t shm = (size_t)GQ_ST * (GQ_BM * 8 * 4 + (size_t)bn * GQ_XS * 2);
    /* the TMA forms (MLXCEL_CUDA_GEMM_TMA): 1 where every weight of the set has its maps (32 and 64
     * tokens), 2 anywhere; x's map made here ([n][cols] bf16, a box of 64 columns x bn tokens,
     * swizzled) */
    wg_maps tmp;
    memset(&tmp, 0, sizeof tmp);
    int tma = wg && !pair && c->tm_encode ? c->gemm_tma : 0;
    if (tma == 1 && bn > 64) tma = 0;
    /* 2: the 32-token tiles' stream-K launches on the cp.async form (Llama-8B q4 on an H100, x by TMA
     * in every launch against stream-K launches on cp.async: 17 / 32 sequences 4,625 / 8,368 tok/s
     * against 4,784 / 8,461, 48 / 64 sequences (64-token tiles) 11,550 / 14,926 against 11,310 /
     * 14,068); 3: x by TMA in every launch */
    if (tma == 3) tma = 2;
    else if (tma == 2 && sk_grid && bn == 32) tma = 0;
    for (int k = 0; k < nw && tma == 1; k++) {
        if (!w[k]->has_tmw) tma = 0;
        else memcpy(&tmp.w[k], w[k]->tmw[nwg == 4], sizeof tmp.w[k]);
    }
    if (tma) {
        const cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)n}, stride[1] = {(cuuint64_t)cols * 2};
        const cuuint32_t box[2] = {64, (cuuint32_t)bn}, es[2] = {1, 1};
        if (c->tm_encode(&tmp.x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, xb, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) tma = 0;
    }
    if (tma) c->n_tma++;
#define GQ_ARGS (set, xb, (int)cols, n, gsh, kchunk, part)
#define WG_ARGS (set, xb, (int)cols, n, gsh, kchunk, part, tmp)
    if (wg) {
/* (the stream-K form is instantiated for 32 and 64 tokens only: B <= 64 as its SK argument) */
/* (TMA form 1: 32 and 64 tokens only, B <= 64 as its condition; T64: B, where that holds) */
#define T64(B) (B <= 64 ? B : 64)
#define WGL(B, NW, T) do { if (tma == 1 && B <= 64) { if (sk_grid) PL(c, k_gemm_wg<T64(B), NW, T, false, true, 1>, grid, 128 * NW, WG_SMEM(B, NW))WG_ARGS; \
                                      else PL(c, k_gemm_wg<T64(B), NW, T, false, false, 1>, grid, 128 * NW, WG_SMEM(B, NW))WG_ARGS; } \
                           else if (tma == 2) { if (sk_grid && B <= 64) PL(c, k_gemm_wg<B, NW, T, false, B <= 64, 2>, grid, 128 * NW, WG_SMEM(B, NW))WG_ARGS; \
                                                else PL(c, k_gemm_wg<B, NW, T, false, false, 2>, grid, 128 * NW, WG_SMEM(B, NW))WG_ARGS; } \
                           else if (sk_grid && B <= 64) PL(c, k_gemm_wg<B, NW, T, false, B <= 64>, grid, 128 * NW, WG_SMEM(B, NW))WG_ARGS; \
                           else PL(c, k_gemm_wg<B, NW, T>, grid, 128 * NW, WG_SMEM(B, NW))WG_ARGS; } while (0)
#define WGP(B, NW, T) PL(c, k_gemm_wg<B, NW, T, true>, grid, 128 * NW, WG_SMEM(B, NW))WG_ARGS
        if (pair) {
            if (nwg == 4) {
                if (w0->sdt == SDT_F16) { if (bn == 64) WGP(64, 4, __half); else WGP(128, 4, __half); }
                else { if (bn == 64) WGP(64, 4, __nv_bfloat16); else WGP(128, 4, __nv_bfloat16); }
            } else {
                if (w0->sdt == SDT_F16) { if (bn == 64) WGP(64, 2, __half); else WGP(128, 2, __half); }
                else { if (bn == 64) WGP(64, 2, __nv_bfloat16); else WGP(128, 2, __nv_bfloat16); }
            }
        } else if (bn == 32) {
            if (nwg == 4) { if (w0->sdt == SDT_F16) WGL(32, 4, __half); else WGL(32, 4, __nv_bfloat16); }
            else { if (w0->sdt == SDT_F16) WGL(32, 2, __half); else WGL(32, 2, __nv_bfloat16); }
            c->n_wg32++;
        } else if (nwg == 4) {
            if (w0->sdt == SDT_F16) { if (bn == 64) WGL(64, 4, __half); else WGL(128, 4, __half); }
            else { if (bn == 64) WGL(64, 4, __nv_bfloat16); else WGL(128, 4, __nv_bfloat16); }
        } else {
            if (w0->sdt == SDT_F16) { if (bn == 64) WGL(64, 2, __half); else WGL(128, 2, __half); }
            else { if (bn == 64) WGL(64, 2, __nv_bfloat16); else WGL(128, 2, __nv_bfloat16); }
        }
#undef WGL
#undef WGP
#undef WG_ARGS
#undef T64
    } else if (w0->sdt == SDT_F16) {
        if (bn == 64) PL(c, k_gemm_gq<64, __half>, grid, 128, shm)GQ_ARGS;
        else PL(c, k_gemm_gq<128, __half>, grid, 256, shm)GQ_ARGS;
    } else {
        if (bn == 64) PL(c, k_gemm_gq<64, __nv_bfloat16>, grid, 128, shm)GQ_ARGS;
        else PL(c, k_gemm_gq<128, __nv_bfloat16>, grid, 256, shm)GQ_ARGS;
    }
#undef GQ_ARGS
    LAUNCHED(c, pair ? "gemm (q4, wgmma, gate/up with the activation)" : sk_grid ? (tma ? "gemm (q4, wgmma, stream-K, TMA)" : "gemm (q4, wgmma, stream-K)")
                : tma ? "gemm (q4, wgmma, TMA)" : wg ? "gemm (q4, wgmma)" : "gemm (q4, mma)");   /* (either TMA form) */
    if (sk_grid) { c->n_strk++; part = NULL; }   /* (no split sums follow) */
    if (pair) {   /* x's gq form was read from c->xg: the new one (if made) takes its place */
        c->n_pair++;
        if (set.xg) {
            void *t = c->xg; c->xg = c->xg2; c->xg2 = t;
            size_t tc = c->xg_cap; c->xg_cap = c->xg2_cap; c->xg2_cap = tc;
        }
        forget_overlap(c, ys[0], (int64_t)n * w[0]->rows);
        forget_overlap(c, ys[1], (int64_t)n * w[1]->rows);
        xq_forget(c);
        if (set.xg) { c->xg_src = ys[0]; c->xg_count = (int64_t)n * w[0]->rows; }
    }
    if (part) {
        if (nw == 1 && !set.bias[0] && c->ps_allow && c->sum_norm) {   /* c_matmul's: the sum deferred */
            c->ps.p.part = part; c->ps.p.nsplit = nsplit; c->ps.p.n = n; c->ps.p.rows = set.rows[0]; c->ps.p.y = set.y[0];
            c->ps.on = true;
            return true;
        }
        if (nw == 3 && c->pq_allow && c->sum_qkv && !set.bias[0] && !set.bias[1] && !set.bias[2]) {
            c->pq.set = set; c->pq.part = part; c->pq.nsplit = nsplit; c->pq.n = n;   /* c_matmul_multi's q/k/v */
            c->pq.on = true;
            return true;
        }
        gq_sum_launch(c, set, part, nsplit, n);
    }
    return true;
}

/* a deferred split-k sum (one weight, no bias) launched as gq_gemm would have */
static void psum_launch(cu_ctx *c, const cu_ctx::cu_psum *p) {
    gq_set set;
    memset(&set, 0, sizeof set);
    set.nw = 1; set.rows[0] = p->rows; set.rb[1] = p->rows; set.y[0] = p->y;
    gq_sum_launch(c, set, p->part, p->nsplit, p->n);
}

/* the deferred gate/up product (c_matmul_multi) as it is */
static void pg_flush(cu_ctx *c) {
    if (!c->pg.on) return;
    c->pg.on = false;
    if (!gq_gemm(c, 2, c->pg.w, c->pg.x, c->pg.y, c->pg.n)) { cu_fail(c, MX_ERR_INTERNAL, "deferred gate/up product", cudaSuccess); return; }
    for (int k = 0; k < 2; k++) forget_overlap(c, c->pg.y[k], (int64_t)c->pg.n * c->pg.w[k]->rows);
}

/* Above the matvecs, the q4/q8 weights of a set (q/k/v, gate/up) in few launches: x converted
 * once, all weights dequantized by one kernel into consecutive bf16 slices, and weights of equal
 * rows whose outputs lie at a constant positive distance in one strided-batched cuBLAS call (the
 * small GEMMs of a 0.6B model are latency-bound: one launch for two halves the cost). False
 * (nothing done) when the set does not qualify; the per-weight path then runs. */
static bool mm_set_gemm(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, int n) {
    if (nw < 2 || n <= MV_I8_MAX || c->precise) return false;
    const cu_weight *w0 = w[0];
    const int gsh = log2_exact(w0->gs);
    if ((w0->bits != 4 && w0->bits != 8) || gsh < 3 || w0->cols % (32 / w0->bits)) return false;
    int64_t rows_all = 0;
    for (int k = 0; k < nw; k++) {
        if (w[k]->bits != w0->bits || w[k]->gs != w0->gs || w[k]->sdt != w0->sdt || w[k]->cols != w0->cols) return false;
        if (ys[k] < x + (size_t)n * w0->cols && x < ys[k] + (size_t)n * w[k]->rows) return false;
        rows_all += w[k]->rows;
    }
    const int64_t cols = w0->cols;
    if ((size_t)rows_all * cols * 2 > c->dq_bytes) return false;
    void *xb = scratch(c, &c->xscratch, &c->xscratch_cap, (size_t)n * cols * 2);
    if (!xb) return true;   /* failure recorded */
    void *wb = scratch(c, &c->wscratch, &c->wscratch_cap, (size_t)rows_all * cols * 2);
    if (!wb) return true;
    PL(c, k_cvt<__nv_bfloat16>, nblk((int64_t)n * cols, 256), 256, 0)(x, (__nv_bfloat16 *)xb, (int64_t)n * cols);
    LAUNCHED(c, "convert activations");
    dq_set set;
    memset(&set, 0, sizeof set);
    set.nw = nw;
    const int vpw = 32 / w0->bits;
    for (int k = 0; k < nw; k++) {
        set.W[k] = (const uint32_t *)w[k]->w; set.S[k] = w[k]->scales; set.B[k] = w[k]->biases;
        set.wbeg[k + 1] = set.wbeg[k] + w[k]->rows * cols / vpw;
    }
    const unsigned gq = nblk(set.wbeg[nw], 256);
    if (w0->sdt == SDT_F16) {
        if (w0->bits == 4) PL(c, k_dequant_set<4, __half>, gq, 256, 0)(set, (int)cols, gsh, (__nv_bfloat16 *)wb);
        else PL(c, k_dequant_set<8, __half>, gq, 256, 0)(set, (int)cols, gsh, (__nv_bfloat16 *)wb);
    } else {
        if (w0->bits == 4) PL(c, k_dequant_set<4, __nv_bfloat16>, gq, 256, 0)(set, (int)cols, gsh, (__nv_bfloat16 *)wb);
        else PL(c, k_dequant_set<8, __nv_bfloat16>, gq, 256, 0)(set, (int)cols, gsh, (__nv_bfloat16 *)wb);
    }
    LAUNCHED(c, "dequantize (set)");
    const float one = 1.f, zero = 0.f;
    const __nv_bfloat16 *wk = (const __nv_bfloat16 *)wb;
    for (int k = 0; k < nw;) {
        const int64_t rows = w[k]->rows;
        cublasStatus_t bs;
        /* this weight and the next as one batch of 2 when they allow it */
        const bool pair = k + 1 < nw && w[k + 1]->rows == rows && ys[k + 1] > ys[k];
        if (pair) {
            bs = cublasGemmStridedBatchedEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)cols, &one,
                                            wk, CUDA_R_16BF, (int)cols, (long long)rows * cols, xb, CUDA_R_16BF, (int)cols, 0,
                                            &zero, ys[k], CUDA_R_32F, (int)rows, (long long)(ys[k + 1] - ys[k]), 2,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        } else {
            bs = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)cols, &one, wk, CUDA_R_16BF, (int)cols,
                              xb, CUDA_R_16BF, (int)cols, &zero, ys[k], CUDA_R_32F, (int)rows, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT);
        }
        if (bs != CUBLAS_STATUS_SUCCESS) { cu_fail(c, MX_ERR_INTERNAL, "cublas gemm (set)", cudaSuccess); return true; }
        if (c->prof) prof_mark(c, pair ? "gemm (cuBLAS, set of 2)" : "gemm (cuBLAS, set)");
        const int used = pair ? 2 : 1;
        for (int j = k; j < k + used; j++) {
            if (!w[j]->bias) continue;
            PL(c, k_add_bias, nblk(w[j]->rows * n, 256), 256, 0)(ys[j], w[j]->bias, w[j]->rows, w[j]->rows * n);
            LAUNCHED(c, "bias");
        }
        wk += (size_t)used * rows * cols;
        k += used;
    }
    return true;
}

/* xb_have: in, whether c->xscratch already holds x as bf16 (1) or f16 (2) (0: no); out, the same
 * after this product */
static void mm_impl(cu_ctx *c, const cu_weight *w, const float *x, float *y, int n, int *xb_have) {
    if (mv_i8(c, 1, &w, x, &y, n)) return;
    if (n <= 8 && mv_fast(c, w, x, y, n)) return;
    if (n <= 8 || c->precise) {   /* precise: f32 FMA chains for any n (slow; for parity checks) */
        int64_t warps = w->rows * n;
        if (w->sdt == SDT_F16) PL(c, k_mv_generic<__half>, nblk(warps * 32, 256), 256, 0)(*w, x, y, n);
        else PL(c, k_mv_generic<__nv_bfloat16>, nblk(warps * 32, 256), 256, 0)(*w, x, y, n);
        LAUNCHED(c, "matvec (generic)");
        return;
    }
    if (gq_gemm(c, 1, &w, x, &y, n)) return;   /* (its x form is in c->xg: xscratch unchanged) */
    /* GEMM through cuBLAS: y[n, rows] = x[n, cols] W^T, column-major view: C[rows, n] = W^T' ... */
    const float one = 1.f, zero = 0.f;
    int64_t rows = w->rows, cols = w->cols;
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    if (!w->bits && w->dtype == MX_DTYPE_F32) {
        bs = cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)cols, &one, (const float *)w->w, (int)cols,
                         x, (int)cols, &zero, y, (int)rows);
    } else {
        bool f16 = !w->bits && w->dtype == MX_DTYPE_F16;
        const size_t xbytes = (size_t)n * cols * 2;
        if (xbytes > c->xscratch_cap) *xb_have = 0;
        void *xb = scratch(c, &c->xscratch, &c->xscratch_cap, xbytes);
        if (!xb) return;
        if (*xb_have != (f16 ? 2 : 1)) {
            if (f16) PL(c, k_cvt<__half>, nblk((int64_t)n * cols, 256), 256, 0)(x, (__half *)xb, (int64_t)n * cols);
            else PL(c, k_cvt<__nv_bfloat16>, nblk((int64_t)n * cols, 256), 256, 0)(x, (__nv_bfloat16 *)xb, (int64_t)n * cols);
            LAUNCHED(c, "convert activations");
            *xb_have = f16 ? 2 : 1;
        }
        cudaDataType_t dt = f16 ? CUDA_R_16F : CUDA_R_16BF;
        if (!w->bits) {
            bs = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)cols, &one, w->w, dt, (int)cols,
                              xb, dt, (int)cols, &zero, y, CUDA_R_32F, (int)rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (c->prof) prof_mark(c, "gemm (cuBLAS, dense)");
        } else {
            const size_t cap_bytes = c->dq_bytes;
            int64_t chunk = (int64_t)(cap_bytes / ((size_t)cols * 2));
            if (chunk < 64) chunk = 64;
            if (chunk > rows) chunk = rows;
            void *wb = scratch(c, &c->wscratch, &c->wscratch_cap, (size_t)chunk * cols * 2);
            if (!wb) return;
            for (int64_t r0 = 0; r0 < rows && bs == CUBLAS_STATUS_SUCCESS; r0 += chunk) {
                int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
                cu_weight wd = *w;
                int gsh = log2_exact(w->gs);
                unsigned gq = nblk(nr * cols / (32 / (w->bits ? w->bits : 32)), 256);
                if ((w->bits == 4 || w->bits == 8) && gsh >= 3) {
                    const uint32_t *W = (const uint32_t *)w->w;
                    if (w->sdt == SDT_F16) {
                        if (w->bits == 4) PL(c, k_dequant_q<4, __half>, gq, 256, 0)(W, (const __half *)w->scales, (const __half *)w->biases, r0, nr, (int)cols, gsh, (__nv_bfloat16 *)wb);
                        else PL(c, k_dequant_q<8, __half>, gq, 256, 0)(W, (const __half *)w->scales, (const __half *)w->biases, r0, nr, (int)cols, gsh, (__nv_bfloat16 *)wb);
                    } else {
                        if (w->bits == 4) PL(c, k_dequant_q<4, __nv_bfloat16>, gq, 256, 0)(W, (const __nv_bfloat16 *)w->scales, (const __nv_bfloat16 *)w->biases, r0, nr, (int)cols, gsh, (__nv_bfloat16 *)wb);
                        else PL(c, k_dequant_q<8, __nv_bfloat16>, gq, 256, 0)(W, (const __nv_bfloat16 *)w->scales, (const __nv_bfloat16 *)w->biases, r0, nr, (int)cols, gsh, (__nv_bfloat16 *)wb);
                    }
                } else if (w->sdt == SDT_F16) PL(c, k_dequant_rows<__half>, nblk(nr * cols, 256), 256, 0)(wd, r0, nr, (__nv_bfloat16 *)wb);
                else PL(c, k_dequant_rows<__nv_bfloat16>, nblk(nr * cols, 256), 256, 0)(wd, r0, nr, (__nv_bfloat16 *)wb);
                LAUNCHED(c, "dequantize");
                bs = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)cols, &one, wb, CUDA_R_16BF, (int)cols,
                                  xb, CUDA_R_16BF, (int)cols, &zero, y + r0, CUDA_R_32F, (int)rows, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT);
                if (c->prof) prof_mark(c, "gemm (cuBLAS, q)");
            }
        }
    }
    if (bs != CUBLAS_STATUS_SUCCESS) { cu_fail(c, MX_ERR_INTERNAL, "cublas gemm", cudaSuccess); return; }
    if (w->bias) {
        PL(c, k_add_bias, nblk(rows * n, 256), 256, 0)(y, w->bias, rows, rows * n);
        LAUNCHED(c, "bias");
    }
}

static void c_embed(void *ctx, const mx_weight *wt, const int32_t *ids_host, int n, float *out) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_HOST(c, 2, PU(wt), PU(out), (uint64_t)n);
    OP_ENTER(c);
    const cu_weight *w = get_w(c, wt);
    if (!w || n <= 0) return;
    for (int i = 0; i < n; i++)
        if (ids_host[i] < 0 || ids_host[i] >= w->rows)
            MX_LOGE("cuda embed: token id %d out of range [0, %lld)", ids_host[i], (long long)w->rows);
    const int32_t *d = (const int32_t *)stage_up(c, &c->ids, ids_host, (size_t)n * 4);
    if (!d) return;
    REPLAY_STOP(c);
    if (w->sdt == SDT_F16) PL(c, k_embed<__half>, n, 256, 0)(*w, d, out);
    else PL(c, k_embed<__nv_bfloat16>, n, 256, 0)(*w, d, out);
    LAUNCHED(c, "embed");
}

static int norm_threads(int d) { int t = ((d + 31) / 32) * 32; return t > 1024 ? 1024 : t < 32 ? 32 : t; }

static void rn_launch(cu_ctx *c, const float *x, const float *x2, float *xsum, const float *gd, float eps, float add_one,
                      float *y, int n, int d, const rn_part *pp);
static void c_rmsnorm(void *ctx, const float *x, const mx_vec *g, float eps, float add_one, float *y, int n, int d) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_PURE(c, 3, PU(x), PU(g), fbits(eps), fbits(add_one), PU(y), (uint64_t)n, (uint64_t)d);
    const float *gd = get_v(c, g);
    if (g && !gd) return;
    if (pe_norm(c, x, gd, eps, add_one, y, n, d)) return;   /* (waits with the product and the add before it) */
    rms_run(c, x, gd, eps, add_one, y, n, d);
}
static void rms_run(cu_ctx *c, const float *x, const float *gd, float eps, float add_one, float *y, int n, int d) {
    /* the add just before, of whose sum this is the norm, runs in the same kernel */
    const float *x2 = NULL;
    float *xsum = NULL;
    rn_part pp = {NULL, 0, 0, NULL};
    /* the parts only where the norm of the sum reads them (launch_rmsnorm's register form), its
     * output either apart from the product's or over it exactly (the decoder's h = norm(x + h)) */
    if (c->pend.on && c->pend.has_ps &&
        (c->pend.y != x || d > 8192 || c->pend.count != (int64_t)n * d ||
         (y != c->pend.b && y < c->pend.b + c->pend.count && c->pend.b < y + c->pend.count)))
        pend_flush(c);
    if (c->pend.on && c->pend.y == x && c->pend.count == (int64_t)n * d && n > 0 && d > 0) {
        x = c->pend.a; x2 = c->pend.b; xsum = c->pend.y;
        if (c->pend.has_ps) {   /* x2 = the parts' sum, also stored to the product's output */
            pp.p = c->pend.ps.part; pp.nsplit = c->pend.ps.nsplit; pp.stride = (int64_t)n * d;
            pp.sum = y == c->pend.ps.y ? NULL : c->pend.ps.y;   /* (over it: the norm's output is what stays) */
            x2 = NULL;
            c->pend.has_ps = false;
            c->n_sum_norm++;
        }
        c->pend.on = false;
    }
    /* an in-place norm of rows of <= 256 (per-head q/k norms) waits for the attention */
    if (!x2 && !pp.p && x == y && n > 0 && d > 0 && d <= 256 && d % 2 == 0 && c->n_hq < 4 && c->gmode != G_REPLAY) {
        bool other = false;   /* only q/k ops may be in the queue: a norm of another buffer flushes */
        for (int i = 0; i < c->n_hq; i++) if (c->hq[i].x == y && c->hq[i].kind == 1) other = true;
        if (!other) {
            pend_flush(c);
            xq_forget(c);
            cu_ctx::hop *o = &c->hq[c->n_hq++];
            memset(o, 0, sizeof *o);
            o->kind = 1; o->x = y; o->rows = n; o->d = d; o->g = gd; o->eps = eps; o->add_one = add_one;
            return;
        }
    }
    OP_ENTER(c);
    if (n <= 0 || d <= 0) return;
    /* one row, the norm of a ring product's x: deferred, for the product's prologue (rn_take) */
    if (n == 1 && !pp.p && c->rn_on && c->rn_count && c->mr_on && c->prop.major >= 9 && !c->mv_f32 &&
        d % 256 == 0 && d <= 256 * c->mr_warps && !((uintptr_t)gd & 15)) {
        c->pn.a = x; c->pn.b = x2; c->pn.sum = xsum; c->pn.g = gd; c->pn.eps = eps; c->pn.add_one = add_one;
        c->pn.y = y; c->pn.d = d; c->pn.on = true;
        return;
    }
    rn_launch(c, x, x2, xsum, gd, eps, add_one, y, n, d, pp.p ? &pp : NULL);
}
/* the rmsnorm kernel, with the int8 and bf16 forms of y the next product reads */
static void rn_launch(cu_ctx *c, const float *x, const float *x2, float *xsum, const float *gd, float eps, float add_one,
                      float *y, int n, int d, const rn_part *pp) {
    int8_t *xq = NULL; float2 *xds = NULL;
    if (!c->mv_f32 && n <= MV_I8_MAX && d % 32 == 0 && !xq_buf(c, (int64_t)n * d, &xq, &xds)) return;
    __nv_bfloat16 *xg = NULL;
    if (gq_rows(c, n, d) && !(xg = (__nv_bfloat16 *)scratch(c, &c->xg, &c->xg_cap, (size_t)n * d * 2))) return;
    launch_rmsnorm(c, x, x2, xsum, gd, eps, add_one, y, n, d, xq, xds, xg, pp);
    if (xq) { c->xq_src = y; c->xq_count = (int64_t)n * d; }
    if (xg) { c->xg_src = y; c->xg_count = (int64_t)n * d; }
}
/* the deferred norm: launched (flush), or taken by a product of its output (rn_take) */
static void pn_flush(cu_ctx *c) {
    if (!c->pn.on) return;
    c->pn.on = false;
    rn_launch(c, c->pn.a, c->pn.b, c->pn.sum, c->pn.g, c->pn.eps, c->pn.add_one, c->pn.y, 1, c->pn.d, NULL);
}
static void pn_norm(const cu_ctx *c, const cu_ctx::cu_pnorm *pn, mr_norm *nm) {
    nm->a = pn->a; nm->b = pn->b; nm->sum = pn->sum; nm->g = pn->g; nm->eps = pn->eps;
    nm->add_one = pn->add_one; nm->y = pn->y; nm->count = c->rn_count;
}
static bool rn_take(cu_ctx *c, const float *x, int n, mr_norm *nm, int *d) {
    if (!c->pn.on || c->pn.y != x || n != 1) return false;
    c->pn.on = false;
    *d = c->pn.d;
    pn_norm(c, &c->pn, nm);
    return true;
}
/* a product of x = the deferred norm's output: through a ring form that runs the norm (true), or
 * the norm launched and false (the caller goes on with x in memory) */
static bool rn_product(cu_ctx *c, int nw, const cu_weight *const *w, const float *x, float *const *ys, const mr_norm *nm, int d) {
    bool q = true, b = true;
    for (int k = 0; k < nw; k++) {
        q = q && mv_i8_ok(c, w[k], w[0], 1);
        b = b && !w[k]->bits && w[k]->dtype == MX_DTYPE_BF16;
        if (w[k]->cols != w[0]->cols) q = b = false;
    }
    if (nw >= 1 && nw <= 4 && w[0]->cols == (int64_t)d &&
        ((q && c->rn_on == 2 && mv_ring(c, nw, w, NULL, NULL, ys, nm)) || (b && c->mr_bf && mv_ring_bf(c, nw, w, x, ys, nm))))
        return true;
    rn_launch(c, nm->a, nm->b, nm->sum, nm->g, nm->eps, nm->add_one, nm->y, 1, d, NULL);
    return false;
}
static void c_layernorm(void *ctx, const float *x, const mx_vec *g, const mx_vec *b, float eps, float *y, int n, int d) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_PURE(c, 4, PU(x), PU(g), PU(b), fbits(eps), PU(y), (uint64_t)n, (uint64_t)d);
    OP_ENTER(c);
    if (n <= 0 || d <= 0) return;
    const float *gd = get_v(c, g), *bd = get_v(c, b);
    if ((g && !gd) || (b && !bd)) return;
    PL(c, k_layernorm, n, norm_threads(d) > 256 ? 256 : norm_threads(d), 0)(x, gd, bd, eps, y, d);
    LAUNCHED(c, "layernorm");
}

/* The meta arrays on the device: pos | slot | seq | block_tables (int32). */
struct dmeta { const int32_t *pos, *slot, *seq, *bt; };
/* the attention metadata as one upload: pos, slot, seq (n each; slot and seq 0 when absent), the
 * block tables */
static size_t meta_bytes(const mx_attn_meta *m) { return ((size_t)3 * m->n_tokens + (size_t)m->n_seqs * m->max_blocks) * 4; }
/* a slot (what = 1) or a block table's entry (2) as the kernels take it (kv_slot, kv_blk) */
static inline int32_t kv_map(const cu_ctx *c, int what, int32_t v) { return what == 1 ? kv_slot(c, v) : kv_blk(c, v); }
static void ints_map(const cu_ctx *c, int what, int32_t *h, const int32_t *v, size_t k) {
    if (!c->kv_lay) { memcpy(h, v, k * 4); return; }
    for (size_t i = 0; i < k; i++) h[i] = kv_map(c, what, v[i]);
}
static void meta_compose(const cu_ctx *c, const mx_attn_meta *m, int32_t *tmp) {
    const int n = m->n_tokens;
    const size_t nbt = (size_t)m->n_seqs * m->max_blocks;
    memcpy(tmp, m->pos, (size_t)n * 4);
    if (m->slot) ints_map(c, 1, tmp + n, m->slot, (size_t)n); else memset(tmp + n, 0, (size_t)n * 4);
    if (m->seq) memcpy(tmp + 2 * n, m->seq, (size_t)n * 4); else memset(tmp + 2 * n, 0, (size_t)n * 4);
    if (nbt) ints_map(c, 2, tmp + 3 * n, m->block_tables, nbt);
}
/* whether h holds k ints equal to v (to zeros when v is absent, as meta_compose writes them) */
static bool ints_same(const int32_t *h, const int32_t *v, size_t k) {
    if (v) return !memcmp(h, v, k * 4);
    for (size_t i = 0; i < k; i++) if (h[i]) return false;
    return true;
}
/* the same for slots (what = 1) or block tables (2), as ints_map writes them */
static bool ints_same_map(const cu_ctx *c, int what, const int32_t *h, const int32_t *v, size_t k) {
    if (!c->kv_lay || !v) return ints_same(h, v, k);
    for (size_t i = 0; i < k; i++)
        if (h[i] != kv_map(c, what, v[i])) return false;
    return true;
}
/* whether h (meta_bytes(m) bytes) is meta_compose(c, m), compared piece by piece */
static bool meta_same(const cu_ctx *c, const int32_t *h, const mx_attn_meta *m) {
    const size_t n = (size_t)m->n_tokens, nbt = (size_t)m->n_seqs * m->max_blocks;
    return ints_same(h, m->pos, n) && ints_same_map(c, 1, h + n, m->slot, n) && ints_same(h + 2 * n, m->seq, n) &&
           (!nbt || ints_same_map(c, 2, h + 3 * n, m->block_tables, nbt));
}
static bool meta_up(cu_ctx *c, const mx_attn_meta *m, dmeta *out) {
    int n = m->n_tokens;
    size_t bytes = meta_bytes(m);
    /* compose in a host temp only when it differs: compare piecewise against the pinned copy */
    cu_stage *s = &c->meta;
    /* in a captured or replayed step every call goes through stage_up (the copy node) */
    const bool same = s->d && s->len == bytes && c->gmode != G_CAPTURE && c->gmode != G_REPLAY &&
                      meta_same(c, (const int32_t *)s->h, m);
    if (!same) {
        int32_t *tmp = (int32_t *)malloc(bytes);
        if (!tmp) { cu_fail(c, MX_ERR_NOMEM, "meta", cudaSuccess); return false; }
        meta_compose(c, m, tmp);
        void *d = stage_up(c, s, tmp, bytes);
        free(tmp);
        if (!d) return false;
    }
    const int32_t *d = (const int32_t *)s->d;
    out->pos = d; out->slot = d + n; out->seq = d + 2 * n; out->bt = d + 3 * n;
    return true;
}

/* A small constant host table (RoPE inv_freq, attention sinks) on the device: found by content
 * among the `*n` kept in tab[cap], else uploaded once and kept for the backend's life. Inside a
 * captured or replayed step a new table breaks the step (uploads are not allowed there); a full
 * cache fails the op. NULL when the op must stop. */
static const float *const_table(cu_ctx *c, cu_rf *tab, int *n, int cap, const float *h, int len, const char *what) {
    for (int i = 0; i < *n; i++)
        if (tab[i].len == len && !memcmp(tab[i].h, h, (size_t)len * 4)) return tab[i].d;
    if (c->gmode == G_CAPTURE || c->gmode == G_REPLAY || *n == cap) {
        c->gbroken = c->gmode != G_EAGER && c->gmode != G_WARMUP;
        if (*n == cap) {
            char m[128];
            snprintf(m, sizeof m, "%s: more than %d distinct tables", what, cap);
            cu_fail(c, MX_ERR_UNSUPPORTED, m, cudaSuccess);
        }
        return NULL;
    }
    cu_rf *e = &tab[*n];
    e->h = (float *)malloc((size_t)len * 4);
    e->d = (float *)dev_alloc_owned(c, (size_t)len * 4);
    if (!e->h || !e->d) { free(e->h); e->h = NULL; cu_fail(c, MX_ERR_NOMEM, what, cudaSuccess); return NULL; }
    memcpy(e->h, h, (size_t)len * 4);
    CK(c, cudaMemcpyAsync(e->d, e->h, (size_t)len * 4, cudaMemcpyHostToDevice, c->st), what);
    CK(c, cudaStreamSynchronize(c->st), what);
    e->len = len;
    (*n)++;
    return e->d;
}

static void c_rope(void *ctx, float *x, int n, int n_heads, int head_dim, const mx_rope *r, const mx_attn_meta *meta) {
    cu_ctx *c = (cu_ctx *)ctx;
    int half = r->rot_dim / 2;
    GOP_HOST(c, 5, PU(x), (uint64_t)n, (uint64_t)n_heads, (uint64_t)head_dim, (uint64_t)r->rot_dim,
             half > 0 ? fnv(r->inv_freq, (size_t)half * 4, 1469598103934665603ull) : 0, fbits(r->attn_factor),
             (uint64_t)meta->n_tokens, (uint64_t)meta->n_seqs, (uint64_t)meta->max_blocks);
    pend_flush(c);
    xq_forget(c);
    if (n <= 0) return;
    if (half <= 0 || r->rot_dim > head_dim) { cu_fail(c, MX_ERR_INVALID_ARG, "rope: rot_dim", cudaSuccess); return; }
    /* inv_freq tables stay on the device for the backend's life (models have one or two) */
    const float *f = const_table(c, c->rf, &c->n_rf, MX_RF_CACHE, r->inv_freq, half, "rope: inv_freq");
    if (!f) return;
    const uint64_t ph = fnv(meta->pos, (size_t)meta->n_tokens * 4, (uint64_t)meta->n_tokens);
    for (int i = 0; i < c->n_hq; i++)   /* a queued rope of other positions runs first */
        if (c->hq[i].kind == 2 && c->hq[i].pos_hash != ph) { hq_flush(c); break; }
    dmeta dm;
    if (!meta_up(c, meta, &dm)) return;
    REPLAY_STOP(c);
    if (r->rot_dim == head_dim && head_dim <= 256 && c->n_hq < 4) {   /* waits for the attention */
        cu_ctx::hop *o = &c->hq[c->n_hq++];
        memset(o, 0, sizeof *o);
        o->kind = 2; o->x = x; o->n = n; o->heads = n_heads; o->d = head_dim; o->f = f; o->af = r->attn_factor;
        o->pos_d = dm.pos; o->pos_hash = ph;
        return;
    }
    hq_flush(c);
    dim3 grid((unsigned)n, (unsigned)n_heads);
    PL(c, k_rope, grid, half >= 64 ? 64 : 32, 0)(x, n_heads, head_dim, half, f, r->attn_factor, dm.pos);
    LAUNCHED(c, "rope");
}

static void launch_rmsnorm(cu_ctx *c, const float *x, const float *x2, float *xsum, const float *gd, float eps,
                           float add_one, float *y, int n, int d, int8_t *xq, float2 *xds, __nv_bfloat16 *xg,
                           const rn_part *pp) {
    if (d <= 8192) {   /* the row in registers: up to 4 values a thread (8 past 4096) */
        int th = ((d + 3) / 4 + 31) / 32 * 32;
        if (th > 1024) th = 1024;
        const int vpt = (d + th - 1) / th;
        const rn_part p = pp ? *pp : rn_part{NULL, 0, 0, NULL};
#define RN(V) do { if (pp) PL(c, k_rmsnorm_r<V, true>, n, th, 0)(x, x2, xsum, gd, eps, add_one, y, d, xq, xds, xg, p); \
                   else PL(c, k_rmsnorm_r<V>, n, th, 0)(x, x2, xsum, gd, eps, add_one, y, d, xq, xds, xg, p); } while (0)
        if (vpt <= 1) RN(1);
        else if (vpt <= 2) RN(2);
        else if (vpt <= 4) RN(4);
        else RN(8);
#undef RN
    } else {   /* (no rn_part here: c_rmsnorm launches the sum first) */
        PL(c, k_rmsnorm, n, norm_threads(d) > 256 ? 256 : norm_threads(d), 0)(x, x2, xsum, gd, eps, add_one, y, d, xq, xds, xg);
    }
    LAUNCHED(c, "rmsnorm");
}

/* the deferred q/k/v sum (MLXCEL_CUDA_SUM_QKV) launched as gq_gemm would have: before the queued
 * per-head ops (hq_flush) and before any other op (OP_ENTER, FLUSH_ALL) */
static void pq_flush(cu_ctx *c) {
    if (!c->pq.on) return;
    c->pq.on = false;
    gq_sum_launch(c, c->pq.set, c->pq.part, c->pq.nsplit, c->pq.n);
}
/* Launch the deferred per-head ops as they were called (their consumer was not an attention
 * they could be fused into), after the sum of their q/k/v product if that waits. */
static void hq_flush(cu_ctx *c) {
    pq_flush(c);
    const int nq = c->n_hq;
    c->n_hq = 0;
    for (int i = 0; i < nq; i++) {
        const cu_ctx::hop *o = &c->hq[i];
        if (o->kind == 1) {
            launch_rmsnorm(c, o->x, NULL, NULL, o->g, o->eps, o->add_one, o->x, o->rows, o->d, NULL, NULL, NULL);
        } else {
            const int half = o->d / 2;
            PL(c, k_rope, dim3((unsigned)o->n, (unsigned)o->heads), half >= 64 ? 64 : 32, 0)(o->x, o->heads, o->d, half, o->f, o->af, o->pos_d);
            LAUNCHED(c, "rope");
        }
    }
}

/* Can the queued per-head ops be done by k_qk_prep for this attention? Fills a. */
static bool hq_fusable(const cu_ctx *c, const float *q, const float *k, int n, const mx_attn_params *p, uint64_t ph,
                       qk_prep_args *a) {
    if (c->n_hq == 0 || q == k || p->head_dim % 2 || p->head_dim > 256) return false;
    memset(a, 0, sizeof *a);
    int seen_rope_q = 0, seen_rope_k = 0;
    const int D = p->head_dim;
    for (int i = 0; i < c->n_hq; i++) {
        const cu_ctx::hop *o = &c->hq[i];
        const bool isq = o->x == q;
        if (!isq && o->x != k) return false;
        const int heads = isq ? p->n_heads : p->n_kv_heads;
        if (o->kind == 1) {
            if (o->rows != n * heads || o->d != D || (isq ? a->qnorm : a->knorm) || (isq ? seen_rope_q : seen_rope_k)) return false;
            if (isq) { a->qnorm = 1; a->qg = o->g; a->qeps = o->eps; a->qa1 = o->add_one; }
            else { a->knorm = 1; a->kg = o->g; a->keps = o->eps; a->ka1 = o->add_one; }
        } else {
            if (o->n != n || o->heads != heads || o->d != D || o->pos_hash != ph || (isq ? seen_rope_q : seen_rope_k)) return false;
            if (isq) { seen_rope_q = 1; a->qrope = 1; a->qf = o->f; a->qaf = o->af; }
            else { seen_rope_k = 1; a->krope = 1; a->kf = o->f; a->kaf = o->af; }
        }
    }
    a->nh = p->n_heads; a->nkv = p->n_kv_heads; a->D = D;
    return true;
}

/* Prompt attention through k_attn_tiled: tiles of up to ATT_TQ consecutive tokens of one sequence.
 * False (nothing launched) when the batch does not suit it (few tokens a tile, e.g. decode rows;
 * tokens k_attn answers with zeros; head sizes it does not take; inside a graph step). */
template <typename T>
static bool launch_attn_tiled(cu_ctx *c, const float *q, float *out, const mx_attn_params *p, const mx_attn_meta *meta,
                              const dmeta &dm, T *kp, T *vp, const float *sk, int8_t *xq, float2 *xds) {
    const int n = meta->n_tokens, D = p->head_dim;
    if (c->gmode != G_EAGER || n < 16 || D % 4 || D > 256 || !meta->seq) return false;
    for (int t = 0; t < n; t++)
        if (meta->seq[t] < 0 || meta->seq[t] >= meta->n_seqs || meta->pos[t] < 0) return false;
    int2 *tl = (int2 *)malloc((size_t)n * sizeof(int2));
    if (!tl) return false;
    int nt = 0;
    for (int t = 0; t < n;) {
        int e = t + 1;
        while (e < n && e - t < ATT_TQ && meta->seq[e] == meta->seq[t]) e++;
        tl[nt++] = make_int2(t, e - t);
        t = e;
    }
    if (nt * 4 > n) { free(tl); return false; }   /* under 4 tokens a tile on average */
    const int2 *td = (const int2 *)stage_up(c, &c->tiles, tl, (size_t)nt * sizeof(int2));
    free(tl);
    if (!td) return false;
    if (c->attn_mma && sizeof(T) == 2 && !xq && (D == 32 || D == 64 || D == 128)) {   /* tensor cores */
        const dim3 grid((unsigned)nt, (unsigned)p->n_heads);
        const __nv_bfloat16 *kb = reinterpret_cast<const __nv_bfloat16 *>(kp), *vb = reinterpret_cast<const __nv_bfloat16 *>(vp);
#define MARGS (q, kb, vb, out, dm.pos, dm.seq, dm.bt, td, meta->max_blocks, c->kv.block_size, kv_nblocks(c), p->n_heads, \
               p->n_kv_heads, p->scale, p->sliding_window, p->softcap, sk)
        if (D == 32) PL(c, k_attn_mma<32>, grid, 128, 0)MARGS;
        else if (D == 64) PL(c, k_attn_mma<64>, grid, 128, 0)MARGS;
        else PL(c, k_attn_mma<128>, grid, 128, 0)MARGS;
#undef MARGS
        LAUNCHED(c, "attention (mma)");
        return true;
    }
    const int ni = D <= 64 ? 0 : D <= 128 ? 1 : 2, ti = sizeof(T) == 4 ? 0 : 1;
    const size_t shm = ((size_t)(ATT_TQ + 2 * ATT_TK) * (D + 4) + ATT_TK) * sizeof(float);
    const void *fn = ni == 0 ? (const void *)k_attn_tiled<T, 2> : ni == 1 ? (const void *)k_attn_tiled<T, 4> : (const void *)k_attn_tiled<T, 8>;
    if (!c->tiled_attr[ti][ni]) {   /* the limit for the bucket's largest D (32 NI), so any D of it fits */
        const size_t shm_cap = ((size_t)(ATT_TQ + 2 * ATT_TK) * (32 * (2 << ni) + 4) + ATT_TK) * sizeof(float);
        if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm_cap) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        c->tiled_attr[ti][ni] = true;
    }
    dim3 grid((unsigned)nt, (unsigned)p->n_heads);
#define TARGS (q, kp, vp, out, dm.pos, dm.seq, dm.bt, td, meta->max_blocks, c->kv.block_size, kv_nblocks(c), p->n_heads, \
               p->n_kv_heads, D, p->scale, p->sliding_window, p->softcap, sk, xq, xds)
    if (ni == 0) PL(c, k_attn_tiled<T, 2>, grid, 256, shm)TARGS;
    else if (ni == 1) PL(c, k_attn_tiled<T, 4>, grid, 256, shm)TARGS;
    else PL(c, k_attn_tiled<T, 8>, grid, 256, shm)TARGS;
#undef TARGS
    LAUNCHED(c, "attention (tiled)");
    return true;
}

/* Decode attention through k_attn_vec, for head sizes whose K row is 1..32 lanes' 16-byte vectors
 * (bf16 cache: 64, 128, 256; f32: 64, 128); false: not taken. Few blocks (wide): 16 warps a
 * (token, head) with short chunks; else 4 warps a (token, G query heads), 8 loads a chunk where a
 * K row is 16 lanes or fewer (bf16 128: 16 keys a chunk), else 4. */
template <typename T, int D>
static void launch_attn_vec_d(cu_ctx *c, dim3 grid, int G, bool wide, bool early, size_t shm, const float *q, T *kp, T *vp,
                              float *out, const dmeta &dm, const mx_attn_meta *meta, const mx_attn_params *p, const float *sk,
                              int8_t *xq, float2 *xds, __nv_bfloat16 *xg, int sbt_n, const qk_prep_args *pa, int64_t nslots,
                              const l2pf_args *pf, const ao_args *ao, const asp_args &sp) {
    constexpr int U = D * (int)sizeof(T) <= 256 ? 8 : 4, U4 = 4;   /* G = 4: 4 loads a chunk (registers) */
    qk_prep_args none;
    memset(&none, 0, sizeof none);
    l2pf_args nopf;
    memset(&nopf, 0, sizeof nopf);
    ao_args noao;
    memset(&noao, 0, sizeof noao);
#define VEC_ARGS (q, kp, vp, out, dm.pos, dm.seq, dm.bt, meta->n_seqs, meta->max_blocks, bshift, kv_nblocks(c), \
                  p->n_heads, p->n_kv_heads, p->scale, p->sliding_window, p->softcap, sk, xq, xds, xg, sbt_n, \
                  pa ? *pa : none, dm.slot, nslots, c->att_cnt, pf ? *pf : nopf, ao ? *ao : noao, sp)
    const int bshift = log2_exact(c->kv.block_size);
    /* OP (MLXCEL_CUDA_ATT_O; ao_form checked the rest): the o projection in the epilogue, its slice after the table */
    if constexpr (sizeof(T) == 2 && (D == 64 || D == 128)) {
        if (ao) {
            const void *fn = pa ? (const void *)k_attn_vec<T, D, 1, 16, 2, true, true, false, true>
                                : (const void *)k_attn_vec<T, D, 1, 16, 2, false, true, false, true>;
            const unsigned bit = 1u << ((D == 128 ? 2 : 0) + (pa ? 1 : 0));
            if (!(c->ao_attr & bit)) {
                if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, AO_SMEM_MAX) != cudaSuccess) {
                    cudaGetLastError();
                    cu_fail(c, MX_ERR_INTERNAL, "attention with the o projection: shared memory refused", cudaSuccess);
                    return;
                }
                c->ao_attr |= bit;
            }
            if (pa) PL(c, (k_attn_vec<T, D, 1, 16, 2, true, true, false, true>), grid, 512, shm)VEC_ARGS;
            else PL(c, (k_attn_vec<T, D, 1, 16, 2, false, true, false, true>), grid, 512, shm)VEC_ARGS;
            return;
        }
    }
    const dim3 gpf(grid.x, grid.y + (pf ? (unsigned)pf->nblk : 0u), grid.z);   /* (PF: the prefetch blocks after the heads) */
    if (wide && early && pf && pa) PL(c, (k_attn_vec<T, D, 1, 16, 2, true, true, true>), gpf, 512, shm)VEC_ARGS;
    else if (wide && early && pf) PL(c, (k_attn_vec<T, D, 1, 16, 2, false, true, true>), gpf, 512, shm)VEC_ARGS;
    else if (wide && early && pa) PL(c, (k_attn_vec<T, D, 1, 16, 2, true, true>), grid, 512, shm)VEC_ARGS;
    else if (wide && early) PL(c, (k_attn_vec<T, D, 1, 16, 2, false, true>), grid, 512, shm)VEC_ARGS;
    else if (wide && pa) PL(c, (k_attn_vec<T, D, 1, 16, 2, true>), grid, 512, shm)VEC_ARGS;
    else if (wide) PL(c, k_attn_vec<T, D, 1, 16, 2>, grid, 512, shm)VEC_ARGS;
    else if (G == 2) PL(c, k_attn_vec<T, D, 2, 4, U>, grid, 128, shm)VEC_ARGS;
    else if (G == 1) PL(c, k_attn_vec<T, D, 1, 4, U>, grid, 128, shm)VEC_ARGS;
    else if constexpr (D <= 128) PL(c, k_attn_vec<T, D, 4, 4, U4>, grid, 128, shm)VEC_ARGS;   /* launch_attn: G = 4 up to 128 */
#undef VEC_ARGS
}
/* whether launch_attn_vec takes this head size and cache */
static bool attn_vec_takes(const cu_ctx *c, int hd, size_t tsize) {
    return c->attn_vec && log2_exact(c->kv.block_size) >= 0 && (hd == 64 || hd == 128 || (hd == 256 && tsize == 2));
}
/* pa: the q/k preparation in the kernel (wide only; see k_attn_vec's PREP) */
template <typename T>
static bool launch_attn_vec(cu_ctx *c, int layer, const float *q, float *out, const mx_attn_params *p, const mx_attn_meta *meta,
                            const dmeta &dm, T *kp, T *vp, const float *sk, int8_t *xq, float2 *xds,
                            __nv_bfloat16 *xg, dim3 grid, int G, bool wide, int sbt_n, size_t shm,
                            const qk_prep_args *pa, int64_t nslots, const ao_args *ao, const asp_args &sp) {
    const int hd = p->head_dim;
    if (!attn_vec_takes(c, hd, sizeof(T))) return false;
    /* one token: the early K/V loads (EARLY), only in the 16-warp form; with them, the L2
     * prefetch of the next product's weights (PF) where one was seen after this layer */
    const bool early = wide && c->attn_early && grid.x == 1;
    l2pf_args pfa;
    const bool pf = !ao && early && G == 1 && apf_args(c, layer, &pfa);
#define VEC_D(D) launch_attn_vec_d<T, D>(c, grid, G, wide, early, shm, q, kp, vp, out, dm, meta, p, sk, xq, xds, xg, sbt_n, pa, nslots, \
                                         pf ? &pfa : NULL, ao, sp)
    if (hd == 64) VEC_D(64);
    else if (hd == 128) VEC_D(128);
    else if constexpr (sizeof(T) == 2) VEC_D(256);
#undef VEC_D
    if (pa) c->n_attn_prep++;
    if (early) c->n_attn_early++;
    if (pf) c->n_apf++;
    if (ao) c->n_att_o++;
    if (sp.S > 1) c->n_attn_split++;
    LAUNCHED(c, ao ? "attention (vec) + o" : sp.S > 1 ? (pa ? "attention (vec, split) + q/k prep" : "attention (vec, split)")
                : pa ? "attention (vec) + q/k prep" : "attention (vec)");
    return true;
}

/* The split of each (token, query heads) block's positions over runs (asp_args): the most runs a
 * head, from the blocks there are without it (n tokens x n_heads / G) against two a multiprocessor,
 * or MLXCEL_CUDA_ATT_SPLIT's count, and no more than the block tables' max_pos positions make runs
 * of the minimum; S = 1 (none) where the scratch is missing or too small, or the switch is 1. The
 * device cuts the runs from each token's positions. */
static asp_args asp_plan(cu_ctx *c, int n, int n_heads, int G, int64_t max_pos, bool ok) {
    asp_args a;
    memset(&a, 0, sizeof a);
    a.S = 1;
    a.minspan = c->asp_min;
    if (!ok || !c->asp_acc || c->asp_split == 1 || (int64_t)n * n_heads > ASP_CNT) return a;
    const int64_t base = (int64_t)n * (n_heads / G), want = 2 * (int64_t)c->prop.multiProcessorCount;
    int64_t S = c->asp_split > 1 ? c->asp_split : (want + base - 1) / base;
    /* no more runs than the block tables' positions allow (a cache sized for fewer than two runs:
     * none, so the short benchmarks and sequences launch what they did without the split) */
    const int64_t cap = ASP_ENT / ((int64_t)n * n_heads), fit = max_pos / a.minspan;
    if (S > fit) S = fit;
    if (S > ASP_SMAX) S = ASP_SMAX;
    if (S > cap) S = cap;
    if (S < 2) return a;
    a.S = (int)S;
    a.acc = c->asp_acc; a.ml = c->asp_ml; a.cnt = c->asp_cnt;
    return a;
}

template <typename T>
static bool launch_attn(cu_ctx *c, int layer, const float *q, const float *k, const float *v, float *out,
                        const mx_attn_params *p, const mx_attn_meta *meta, const dmeta &dm, T *kp, T *vp, int64_t nslots,
                        const qk_prep_args *pa, const float *sk, int8_t *xq, float2 *xds, __nv_bfloat16 *xg,
                        const ao_args *ao = NULL) {
    const int n = meta->n_tokens, kvdim = p->n_kv_heads * p->head_dim;
    /* few (token, head) blocks (decode): 16 warps a block share the positions, 8 each per step;
     * else 4 warps, 4 positions each */
    const bool wide = (int64_t)n * p->n_heads < 4 * c->prop.multiProcessorCount && c->attn_gqa != 2;
    /* one token (batch-1 decode): the q/k preparation inside the attention (MLXCEL_CUDA_ATTN_PREP),
     * where k_attn_vec takes it (not with the q/k/v product's parts, which k_qk_prep sums) */
    const bool prep_in = pa && n == 1 && wide && (c->attn_prep == 2 || (c->attn_prep == 1 && (c->last_bf16 || (!pa->qnorm && !pa->knorm)))) && c->att_cnt && !pa->part && p->n_kv_heads <= ATT_CNT_MAX &&
                         attn_vec_takes(c, p->head_dim, sizeof(T));
    if (prep_in) {
    } else if (pa) {
        dim3 g((unsigned)n, (unsigned)(p->n_heads + 2 * p->n_kv_heads));
        PL(c, k_qk_prep<T>, g, (p->head_dim / 2 + 31) / 32 * 32, 0)(*pa, kp, vp, dm.slot, dm.pos, nslots);
        LAUNCHED(c, "q/k prep");
    } else if (!pa) {
        PL(c, k_kv_write<T>, nblk((int64_t)n * kvdim, 256), 256, 0)(k, v, kp, vp, dm.slot, kvdim, n, nslots);
        LAUNCHED(c, "kv write");
    }
    if (c->attn_tiled && launch_attn_tiled<T>(c, q, out, p, meta, dm, kp, vp, sk, xq, xds)) return false;   /* (no xg form) */
    dim3 grid((unsigned)n, (unsigned)p->n_heads);
    /* many (token, head) blocks (batched decode): the query heads of a KV head in one block, so
     * that each K/V row is read once for them (GQA), while there are still 4 blocks an SM */
    const int grp = p->n_heads / p->n_kv_heads;
    int G = 1;
    if (!wide && c->attn_gqa) {
        const int64_t bl = 4 * (int64_t)c->prop.multiProcessorCount;
        const bool any = c->attn_gqa == 2;   /* tests: whatever the block count */
        if (grp % 4 == 0 && p->head_dim <= 128 && (any || (int64_t)n * p->n_heads / 4 >= bl)) G = 4;
        else if (grp % 2 == 0 && (any || (int64_t)n * p->n_heads / 2 >= bl)) G = 2;
    }
    grid.y = (unsigned)(p->n_heads / G);
    const int sbt_n = meta->max_blocks <= ATT_SBT_MAX ? meta->max_blocks : 0;
    size_t shm = (size_t)(sbt_n > 0 ? sbt_n : 1) * 4;
    ao_args aov;
    if (ao) {   /* the slice after the table (ao_form: it fits) */
        aov = *ao;
        aov.sofs = (int)((shm + 15) & ~(size_t)15);
        shm = (size_t)aov.sofs + ao_slice_bytes(aov.rows, p->head_dim, aov.gs_shift);
    }
    asp_args sp = asp_plan(c, n, p->n_heads, G, (int64_t)meta->max_blocks * c->kv.block_size,
                           !ao && attn_vec_takes(c, p->head_dim, sizeof(T)));
    grid.z = (unsigned)sp.S;
    if (launch_attn_vec<T>(c, layer, q, out, p, meta, dm, kp, vp, sk, xq, xds, xg, grid, G, wide, sbt_n, shm, prep_in ? pa : NULL,
                           nslots, ao ? &aov : NULL, sp))
        return true;
    grid.z = 1;
    if (ao) {   /* (at_deferrable said k_attn_vec takes it: not expected) */
        cu_fail(c, MX_ERR_INTERNAL, "attention with the o projection: no such form", cudaSuccess);
        return false;
    }
#define ATT_ARGS (q, kp, vp, out, dm.pos, dm.seq, dm.bt, meta->n_seqs, meta->max_blocks, c->kv.block_size, kv_nblocks(c), \
                  p->n_heads, p->n_kv_heads, p->head_dim, p->scale, p->sliding_window, p->softcap, sk, xq, xds, xg, sbt_n)
#define ATT_NI(W, P, G) \
    if (p->head_dim <= 64) PL(c, k_attn<T, W, P, 2, G>, grid, W * 32, shm)ATT_ARGS; \
    else if (p->head_dim <= 128) PL(c, k_attn<T, W, P, 4, G>, grid, W * 32, shm)ATT_ARGS; \
    else PL(c, k_attn<T, W, P, 8, (G > 2 ? 2 : G)>, grid, W * 32, shm)ATT_ARGS;   /* G = 4 only up to 128 */
    if (wide) { ATT_NI(16, 8, 1) }
    else if (G == 4) { ATT_NI(4, 4, 4) }
    else if (G == 2) { ATT_NI(4, 4, 2) }
    else { ATT_NI(4, 4, 1) }
#undef ATT_NI
#undef ATT_ARGS
    LAUNCHED(c, "attention");
    return true;
}

/* A batch-1 attention deferred (MLXCEL_CUDA_ATT_O): launch_attn's arguments, kept until the next op.
 * An o product of its output takes it (at_take): the product, and the residual add and the rmsnorm
 * after it, then wait as a ring product does (pe, with pe.att), and a gate/up pair (or any product)
 * of the norm's output launches the attention with o in its epilogue (ao_args), which leaves what
 * k_mv_ring<.., 4> leaves, and the pair on the scaled form after it (pe_take). Any other op
 * launches the attention as it was first (at_flush; g_op and pend_flush), and a product that does
 * not take it runs after it as before; the add and the norm after o wait as without the switch
 * (pe_flush with pe.att: the attention, then o, the add and the norm as they are). */
struct cu_at {
    bool on;
    int layer;
    const float *q, *k, *v; float *out;
    mx_attn_params p; mx_attn_meta meta; dmeta dm;
    void *kp, *vp; int64_t nslots;
    bool has_pa; qk_prep_args pa;
    const float *sk; int8_t *xq; float2 *xds; __nv_bfloat16 *xg;
    bool last_bf16;   /* (c->last_bf16 then: launch_attn's choice of the q/k preparation) */
};
/* the attention in c->at launched (with o in its epilogue: ao), and what follows it noted */
static void at_launch(cu_ctx *c, const ao_args *ao) {
    cu_at *a = c->at;
    a->on = false;
    const int n = a->meta.n_tokens;
    const int64_t od = (int64_t)a->p.n_heads * a->p.head_dim;
    int8_t *xq = ao ? NULL : a->xq;
    float2 *xds = ao ? NULL : a->xds;
    bool wrote_xg;
    const bool lb = c->last_bf16;
    c->last_bf16 = a->last_bf16;
    if (c->kv.dtype == MX_DTYPE_F32)
        wrote_xg = launch_attn<float>(c, a->layer, a->q, a->k, a->v, a->out, &a->p, &a->meta, a->dm, (float *)a->kp, (float *)a->vp,
                                      a->nslots, a->has_pa ? &a->pa : NULL, a->sk, xq, xds, a->xg);
    else
        wrote_xg = launch_attn<__nv_bfloat16>(c, a->layer, a->q, a->k, a->v, a->out, &a->p, &a->meta, a->dm, (__nv_bfloat16 *)a->kp,
                                              (__nv_bfloat16 *)a->vp, a->nslots, a->has_pa ? &a->pa : NULL, a->sk, xq, xds, a->xg, ao);
    c->last_bf16 = lb;
    if (xq) { c->xq_src = a->out; c->xq_count = od * n; }
    if (a->xg && wrote_xg) { c->xg_src = a->out; c->xg_count = od * n; }
    /* (MLXCEL_CUDA_ATTN_L2PF) the product after a one-token attention is noted for its layer */
    c->apf_layer = n == 1 && c->apf_cap > 0 && a->layer < c->apf_nl ? a->layer : -1;
}
static void at_flush(cu_ctx *c) { if (c->at && c->at->on) at_launch(c, NULL); }
static bool at_pending(const cu_ctx *c) { return c->at && c->at->on; }
static int at_heads(const cu_ctx *c) { return c->at->p.n_heads; }
/* whether the attention in c->at runs as k_attn_vec's one-token EARLY form (launch_attn's choice)
 * with the int8 form of its output, a bf16 cache, and what o's epilogue needs */
static bool at_deferrable(const cu_ctx *c, const cu_at *a) {
    const int n = a->meta.n_tokens, D = a->p.head_dim;
    if (!c->att_o || n != 1 || c->kv.dtype != MX_DTYPE_BF16 || !a->xq || (D != 64 && D != 128) || !c->att_cnt ||
        !c->ring_epi || !c->epi_part || c->mv_f32 || !c->attn_early || c->apf_cap > 0 || c->pe.on)
        return false;
    const bool wide = (int64_t)n * a->p.n_heads < 4 * c->prop.multiProcessorCount && c->attn_gqa != 2;
    return wide && attn_vec_takes(c, D, 2);
}
/* o's weight (w, x the deferred attention's output into y): its product, and the add and norm after
 * it, wait in the attention's epilogue (true); false: not taken (nothing done) */
static bool at_take(cu_ctx *c, const cu_weight *w, const float *x, float *y, int n) {
    const cu_at *a = c->at;
    if (!a || !a->on || n != 1 || x != a->out || c->pe.on) return false;
    const int D = a->p.head_dim, gsh = log2_exact(w->gs);
    if (w->bits != 4 || w->bias || (w->sdt != SDT_BF16 && w->sdt != SDT_F16) || w->cols != (int64_t)a->p.n_heads * D ||
        w->rows % 32 || w->rows <= 0 || w->rows > (1 << 20) || gsh < 5 || (D >> gsh) < 2 || (w->cols * 4 / 8) % 16 ||
        (w->cols >> gsh) * 2 % 4 || ((uintptr_t)w->w & 15) || (((uintptr_t)w->scales | (uintptr_t)w->biases) & 3) ||
        ao_slice_bytes((int)w->rows, D, gsh) > AO_SLICE_MAX)
        return false;
    c->pe.w = w; c->pe.xq = a->xq; c->pe.xds = a->xds; c->pe.y = y; c->pe.in2 = (const void *)a->xq == c->xq2;
    c->pe.stage = 0; c->pe.on = true; c->pe.att = true; c->pe.i8 = false; c->pe.xs = false;
    c->at->on = false;   /* (its arguments stay: pe.att) */
    return true;
}

static void c_attention(void *ctx, int layer, const float *q, const float *k, const float *v, float *out,
                        const mx_attn_params *p, const mx_attn_meta *meta) {
    cu_ctx *c = (cu_ctx *)ctx;
    int n = meta->n_tokens;
    GOP_HOST(c, 6, (uint64_t)layer, PU(q), PU(k), PU(v), PU(out), (uint64_t)p->n_heads, (uint64_t)p->n_kv_heads,
             (uint64_t)p->head_dim, fbits(p->scale), (uint64_t)p->sliding_window, fbits(p->softcap), (uint64_t)n,
             (uint64_t)meta->n_seqs, (uint64_t)meta->max_blocks,
             p->sinks ? fnv(p->sinks, (size_t)p->n_heads * 4, 1469598103934665603ull) : 0);
    pend_flush(c);
    xq_forget(c);
    if (n <= 0) return;
    /* attention sinks: [n_heads] tables stay on the device for the backend's life */
    const float *sk = NULL;
    if (p->sinks && !(sk = const_table(c, c->sk, &c->n_sk, MX_SK_CACHE, p->sinks, p->n_heads, "attention: sink"))) return;
    if (!c->kpool || layer < 0 || layer >= c->kv.n_layers || p->n_kv_heads != c->kv.n_kv_heads ||
        p->head_dim != c->kv.head_dim || p->n_kv_heads <= 0 || p->n_heads % p->n_kv_heads) {
        cu_fail(c, MX_ERR_INVALID_ARG, "attention: kv cache not initialised or geometry mismatch", cudaSuccess);
        return;
    }
    /* the queued q/k norms and ropes (and the cache write) in one kernel, when they fit */
    const uint64_t ph = fnv(meta->pos, (size_t)n * 4, (uint64_t)n);
    qk_prep_args pa;
    const bool fuse = hq_fusable(c, q, k, n, p, ph, &pa);
    if (!fuse) hq_flush(c);
    /* the q/k/v product's parts, when its outputs are these q, k, v (MLXCEL_CUDA_SUM_QKV) */
    const gq_set &qs = c->pq.set;
    const bool parts = fuse && c->pq.on && c->gmode != G_REPLAY && qs.y[0] == q && qs.y[1] == k && qs.y[2] == v &&
                       c->pq.n == n && qs.rows[0] == p->n_heads * p->head_dim && qs.rows[1] == p->n_kv_heads * p->head_dim &&
                       qs.rows[2] == p->n_kv_heads * p->head_dim;
    if (!parts) pq_flush(c);
    dmeta dm;
    if (!meta_up(c, meta, &dm)) return;
    REPLAY_STOP(c);
    c->n_hq = 0;
    const int kvdim = p->n_kv_heads * p->head_dim;
    const size_t per = (size_t)kv_lstride(c) * kvdim;   /* a layer's pool from the last one's */
    const int64_t nslots = kv_nslots(c);
    int8_t *xq = NULL; float2 *xds = NULL;   /* the int8 form of the output, for the o projection */
    if (!c->mv_f32 && n <= MV_I8_MAX && p->head_dim % 32 == 0 && !xq_buf(c, (int64_t)n * p->n_heads * p->head_dim, &xq, &xds)) return;
    /* and the gq-order form, for the GEMM on packed weights (the decode kernels write it) */
    const int64_t od = (int64_t)p->n_heads * p->head_dim;
    __nv_bfloat16 *xg = NULL;
    if (c->att_gq && gq_rows(c, n, od) && !(xg = (__nv_bfloat16 *)scratch(c, &c->xg, &c->xg_cap, (size_t)n * od * 2))) return;
    if (fuse) { pa.q = (float *)q; pa.k = (float *)k; pa.v = v; }
    if (parts) {
        pa.part = c->pq.part; pa.vw = (float *)v; pa.nsplit = c->pq.nsplit;
        pa.ptot = (int64_t)n * qs.rb[3]; pa.kofs = (int64_t)n * qs.rb[1]; pa.vofs = (int64_t)n * qs.rb[2];
        c->pq.on = false;
        c->n_sum_qkv++;
    }
    cu_at *a = c->at;
    a->layer = layer; a->q = q; a->k = k; a->v = v; a->out = out; a->p = *p; a->meta = *meta; a->dm = dm;
    a->kp = (char *)c->kpool + per * layer * (c->kv.dtype == MX_DTYPE_F32 ? 4 : 2);
    a->vp = (char *)c->vpool + per * layer * (c->kv.dtype == MX_DTYPE_F32 ? 4 : 2);
    a->nslots = nslots; a->has_pa = fuse; if (fuse) a->pa = pa;
    a->sk = sk; a->xq = xq; a->xds = xds; a->xg = xg; a->last_bf16 = c->last_bf16;
    /* MLXCEL_CUDA_ATT_O: one token whose attention k_attn_vec's EARLY form would run, deferred until
     * the next op (an o product of its output takes it: at_take) */
    if (at_deferrable(c, a)) { a->on = true; return; }
    at_launch(c, NULL);
}


static void c_act_mul(void *ctx, mx_act act, const float *gate, const float *up, int64_t stride, float *y, int n, int d) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_PURE(c, 7, (uint64_t)act, PU(gate), PU(up), (uint64_t)stride, PU(y), (uint64_t)n, (uint64_t)d);
    /* in place on the outputs of the deferred gate/up product: one launch for both (the memory
     * then holds what the two ops would have left) */
    if (c->pg.on && gate == c->pg.y[0] && up == c->pg.y[1] && y == gate && n == c->pg.n && n > 0 &&
        d == (int)c->pg.w[0]->rows && stride == d) {
        hq_flush(c);
        c->pg.on = false;
        const gq_pair pr = {(int)act, false};
        if (gq_gemm(c, 2, c->pg.w, c->pg.x, c->pg.y, n, &pr)) return;
        c->pg.on = true;   /* (not expected: the dry run said it applies) the two ops as they are */
    }
    /* in place on the outputs of the deferred batch-1 bf16 gate/up pair: in its launch */
    if (c->pb.on && gate == c->pb.y[0] && up == c->pb.y[1] && y == gate && n == 1 && d == (int)c->pb.w[0]->rows &&
        stride == d) {
        hq_flush(c);
        mr_norm nm;
        if (c->pb.has_pn) pn_norm(c, &c->pb.pn, &nm);
        if (mv_ring_bf(c, 2, c->pb.w, c->pb.x, c->pb.y, c->pb.has_pn ? &nm : NULL, (int)act)) {
            c->pb.on = false;
            for (int k = 0; k < 2; k++) forget_overlap(c, c->pb.y[k], c->pb.w[k]->rows);
            xq_forget(c);   /* (no int8 form of y: a q4/q8 product of it quantizes it itself) */
            return;
        }
    }
    /* in place on the outputs of the deferred batch-1 q4/q8 gate/up pair: in its launch, which also
     * writes the int8 form of y (into xq2 when the pair reads x's from xq, else into xq) */
    if (c->pr.on && gate == c->pr.y[0] && up == c->pr.y[1] && y == gate && n == 1 && d == (int)c->pr.w[0]->rows &&
        stride == d) {
        hq_flush(c);
        c->pr.on = false;
        int8_t *xq, *oq; float2 *xds, *ods;
        mr_norm nm;
        if (c->pr.sc) sc_norm(&c->pr.scn, &nm);
        else memset(&nm, 0, sizeof nm);
        nm.act = (int)act;
        if (xq_buf(c, c->pr.w[0]->cols, &xq, &xds, c->pr.in2) && xq_buf(c, d, &oq, &ods, !c->pr.in2)) {
            nm.oq = oq; nm.ods = ods;
            if (mv_ring(c, 2, c->pr.w, xq, xds, c->pr.y, &nm, 3, 0, c->pr.sc)) {
                for (int k = 0; k < 2; k++) forget_overlap(c, c->pr.y[k], c->pr.w[k]->rows);
                if (c->pr.in2) { c->xq_src = y; c->xq_count = d; }
                else { c->xq2_src = y; c->xq2_count = d; }
                return;
            }
        }
        c->pr.on = true;   /* (not expected: the dry run said it applies) the two ops as they are */
    }
    OP_ENTER(c);
    /* one row for a q4/q8 ring product (MLXCEL_CUDA_RING_ACT): deferred, for its prologue (pa_product) */
    if (n == 1 && c->ring_act && c->mr_on && c->prop.major >= 9 && !c->mv_f32 && c->rn_count && d % 32 == 0 &&
        d <= 4096 && d <= 256 * c->mr_warps && stride == d && !(((uintptr_t)gate | (uintptr_t)up | (uintptr_t)y) & 15)) {
        c->pa.act = (int)act; c->pa.gate = gate; c->pa.up = up; c->pa.y = y; c->pa.d = d; c->pa.on = true;
        return;
    }
    am_launch(c, (int)act, gate, up, stride, y, n, d);
}
/* the act_mul kernel, with the int8 and bf16 forms of y the next product reads */
static void am_launch(cu_ctx *c, int act, const float *gate, const float *up, int64_t stride, float *y, int n, int d) {
    if (n <= 0 || d <= 0) return;
    int8_t *xq = NULL; float2 *xds = NULL;
    if (!c->mv_f32 && n <= MV_I8_MAX && d % 32 == 0 && !xq_buf(c, (int64_t)n * d, &xq, &xds)) return;
    __nv_bfloat16 *xg = NULL;
    if (gq_rows(c, n, d) && !(xg = (__nv_bfloat16 *)scratch(c, &c->xg, &c->xg_cap, (size_t)n * d * 2))) return;
    const bool v4 = !xq && (int64_t)n * d < ((int64_t)1 << 31) && d % 4 == 0 && stride % 4 == 0 && stride < ((int64_t)1 << 31) &&
                    (((uintptr_t)gate | (uintptr_t)up | (uintptr_t)y) & 15) == 0;
    if (v4) PL(c, k_act_mul4, nblk((int64_t)n * d / 4, 256), 256, 0)(act, gate, up, (int)stride, y, n, d, xg);
    else PL(c, k_act_mul, nblk((int64_t)n * d, 256), 256, 0)(act, gate, up, stride, y, n, d, xq, xds, xg);
    LAUNCHED(c, "act_mul");
    if (xq) { c->xq_src = y; c->xq_count = (int64_t)n * d; }
    if (xg) { c->xg_src = y; c->xg_count = (int64_t)n * d; }
}
/* the deferred act_mul: launched (flush), or taken by a product of its output (pa_product) */
static void pa_flush(cu_ctx *c) {
    if (!c->pa.on) return;
    c->pa.on = false;
    am_launch(c, c->pa.act, c->pa.gate, c->pa.up, c->pa.d, c->pa.y, 1, c->pa.d);
}
/* a product of x = the deferred act_mul's output: through the q4/q8 ring that runs it in its
 * prologue (true), or the act_mul launched and false (the caller goes on with x in memory) */
static bool pa_product(cu_ctx *c, const cu_weight *w, const float *x, float *y, int n) {
    if (!c->pa.on || c->pa.y != x || n != 1) return false;
    c->pa.on = false;   /* (not launched by the flush of what else waits) */
    FLUSH_ALL(c);
    mr_norm nm;
    memset(&nm, 0, sizeof nm);
    nm.a = c->pa.gate; nm.b = c->pa.up; nm.y = c->pa.y; nm.count = c->rn_count; nm.act = c->pa.act;
    if (w->cols == (int64_t)c->pa.d && mv_i8_ok(c, w, w, 1) && mv_ring(c, 1, &w, NULL, NULL, &y, &nm, 2)) return true;
    c->pa.on = true;
    pa_flush(c);
    return false;
}
static void c_act(void *ctx, mx_act act, const float *x, float *y, int64_t count) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_PURE(c, 8, (uint64_t)act, PU(x), PU(y), (uint64_t)count);
    OP_ENTER(c);
    if (count <= 0) return;
    PL(c, k_act, nblk(count, 256), 256, 0)((int)act, x, y, count);
    LAUNCHED(c, "act");
}
static void c_add(void *ctx, const float *a, const float *b, float *y, int64_t count) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_PURE(c, 9, PU(a), PU(b), PU(y), (uint64_t)count);
    if (pe_add(c, a, b, y, count)) return;   /* (waits with the product whose output it adds) */
    add_run(c, a, b, y, count);
}
static void add_run(cu_ctx *c, const float *a, const float *b, float *y, int64_t count) {
    /* one operand the output of a product whose split-k sum waits (MLXCEL_CUDA_SUM_NORM), the other
     * and y apart from it: the add waits with it, for an rmsnorm of y that reads the parts */
    if (c->ps.on && count == (int64_t)c->ps.p.n * c->ps.p.rows && (a == c->ps.p.y) != (b == c->ps.p.y)) {
        const float *o = a == c->ps.p.y ? b : a, *py = c->ps.p.y;
        if (!(o < py + count && py < o + count) && !(y < py + count && py < y + count)) {
            const cu_ctx::cu_psum p = c->ps.p;
            c->ps.on = false;
            OP_ENTER(c);   /* whatever else waits (nothing, after c_matmul's flush) */
            c->pend.a = o; c->pend.b = py; c->pend.y = y; c->pend.count = count; c->pend.on = true;   /* (a + b = b + a) */
            c->pend.has_ps = true; c->pend.ps = p;
            return;
        }
    }
    OP_ENTER(c);
    if (count <= 0) return;
    /* deferred: launched by the next op, or fused into the next rmsnorm of y */
    c->pend.a = a; c->pend.b = b; c->pend.y = y; c->pend.count = count; c->pend.on = true;
}
static void c_scale(void *ctx, const float *x, float s, float *y, int64_t count) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_PURE(c, 10, PU(x), fbits(s), PU(y), (uint64_t)count);
    OP_ENTER(c);
    if (count <= 0) return;
    PL(c, k_scale, nblk(count, 256), 256, 0)(x, s, y, count);
    LAUNCHED(c, "scale");
}
static void c_gather_rows(void *ctx, const float *src, const int32_t *rows_host, int n, int d, float *dst) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_HOST(c, 11, PU(src), (uint64_t)n, (uint64_t)d, PU(dst));
    OP_ENTER(c);
    if (n <= 0 || d <= 0) return;
    const int32_t *r = (const int32_t *)stage_up(c, &c->rows, rows_host, (size_t)n * 4);
    if (!r) return;
    REPLAY_STOP(c);
    PL(c, k_gather, n, 256, 0)(src, r, d, dst);
    LAUNCHED(c, "gather_rows");
}
static void c_softcap(void *ctx, float *x, float cap, int64_t count) {
    cu_ctx *c = (cu_ctx *)ctx;
    GOP_PURE(c, 12, PU(x), fbits(cap), (uint64_t)count);
    OP_ENTER(c);
    if (count <= 0 || cap == 0.f) return;
    PL(c, k_softcap, nblk(count, 256), 256, 0)(x, cap, count);
    LAUNCHED(c, "softcap");
}

/* Sampling candidates on the device (topk.cu); only k values, ids and the lse per row come back. */
static void topk_none(int n_rows, int k, float *vals_host, int32_t *ids_host, float *lse_host) {
    /* on failure: "no candidates" (the sampler then reads the row); the error stays in c->err */
    for (size_t i = 0; i < (size_t)n_rows * (k > 0 ? k : 0); i++) { vals_host[i] = -INFINITY; ids_host[i] = -1; }
    for (int r = 0; r < n_rows; r++) lse_host[r] = NAN;
}
static void c_topk_run(cu_ctx *c, const float *logits, int n_rows, int vocab, int k, float *vals_host, int32_t *ids_host,
                       float *lse_host);
static void c_topk(void *ctx, const float *logits, int n_rows, int vocab, int k, float *vals_host, int32_t *ids_host,
                   float *lse_host) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (n_rows <= 0) return;
    mx_status before = c->err;
    c_topk_run(c, logits, n_rows, vocab, k, vals_host, ids_host, lse_host);
    if (c->err != before || c->err) topk_none(n_rows, k, vals_host, ids_host, lse_host);
}
/* the most result bytes (k values and ids a row, the lse) the one-launch topk writes straight into
 * pinned host memory: a batch-1 step's (12 bytes for greedy, 516 for k 64) and a few rows more;
 * larger results go to device memory and are copied (many small writes across the bus would be
 * slower than one copy) */
#define TK_MAPPED 8192
/* the topk of logits' n_rows rows launched, its results (n_rows * k values, then ids, then n_rows
 * lse) left in pinned host memory hdst (hcap bytes) once the stream gets there; false on failure */
static bool topk_enqueue(cu_ctx *c, const float *logits, int n_rows, int vocab, int k, void *hdst, size_t hcap) {
    if (n_rows <= 0 || vocab <= 0 || k < 1 || k > MX_TOPK_MAX) { cu_fail(c, MX_ERR_INVALID_ARG, "topk: bad arguments", cudaSuccess); return false; }
    if (c->gmode == G_CAPTURE || c->gmode == G_REPLAY) { c->gbroken = true; return false; }
    size_t need = 0;
    if (mx_cuda_topk(c->st, logits, n_rows, vocab, k, NULL, NULL, NULL, NULL, 0, &need) < 0) {
        cu_fail(c, MX_ERR_INVALID_ARG, "topk: bad arguments", cudaSuccess);
        return false;
    }
    const size_t nv = (size_t)n_rows * k, out = (nv * 8 + (size_t)n_rows * 4 + 255) & ~(size_t)255;
    const size_t res = nv * 8 + (size_t)n_rows * 4;
    if (hcap < res) { cu_fail(c, MX_ERR_INTERNAL, "topk: staging too small", cudaSuccess); return false; }
    char *d = (char *)scratch(c, &c->tk, &c->tk_cap, out + need);
    if (!d) return false;
    /* the results: into device memory and copied, or (one launch, up to TK_MAPPED bytes) written
     * by the device straight into the pinned staging */
    char *o = d;
    int rc;
    if (c->topk_one) {
        const size_t cb = (size_t)(n_rows < 256 ? 256 : n_rows) * sizeof(unsigned);
        const bool fresh = c->tkc_cap < cb;
        unsigned *cnt = (unsigned *)scratch(c, &c->tkc, &c->tkc_cap, cb);
        if (!cnt) return false;
        if (fresh) CK(c, cudaMemsetAsync(cnt, 0, c->tkc_cap, c->st), "topk counters");   /* zero once: each launch leaves them so */
        char *hd = NULL;
        if (res <= TK_MAPPED) {
            if (cudaHostGetDevicePointer((void **)&hd, hdst, 0) == cudaSuccess) o = hd;
            else cudaGetLastError();   /* (not mapped: copied) */
        }
        rc = mx_cuda_topk_one(c->st, logits, n_rows, vocab, k, (float *)o, (int32_t *)(o + nv * 4), (float *)(o + nv * 8),
                              d + out, need, &need, cnt, c->pdl);
        if (rc != 0) cudaMemsetAsync(cnt, 0, c->tkc_cap, c->st);   /* a launch that failed may have left counts */
        else { c->n_topk_one++; c->n_topk_mapped += o != d; }
    } else {
        rc = mx_cuda_topk(c->st, logits, n_rows, vocab, k, (float *)o, (int32_t *)(o + nv * 4), (float *)(o + nv * 8), d + out,
                          need, &need);
    }
    if (rc != 0) { cu_fail(c, MX_ERR_INTERNAL, "topk", rc > 0 ? (cudaError_t)rc : cudaSuccess); return false; }
    if (o == d) CK(c, cudaMemcpyAsync(hdst, d, res, cudaMemcpyDeviceToHost, c->st), "topk copy");
    return !c->err;
}
/* pinned host memory of at least `bytes` in *h (capacity *cap); false on failure */
static bool pinned_at_least(cu_ctx *c, void **h, size_t *cap, size_t bytes, const char *what) {
    if (*cap >= bytes) return true;
    if (*h) { cudaStreamSynchronize(c->st); cudaFreeHost(*h); }
    *h = NULL; *cap = 0;
    if (cudaMallocHost(h, bytes) != cudaSuccess) { *h = NULL; cu_fail(c, MX_ERR_NOMEM, what, cudaGetLastError()); return false; }
    *cap = bytes;
    return true;
}
static void c_topk_run(cu_ctx *c, const float *logits, int n_rows, int vocab, int k, float *vals_host, int32_t *ids_host,
                       float *lse_host) {
    FLUSH_ALL(c);
    if (c->gmode == G_CAPTURE || c->gmode == G_REPLAY) { c->gbroken = true; return; }
    CHAIN_SETTLE(c);
    const size_t nv = (size_t)n_rows * (k > 0 ? k : 0);
    if (n_rows > 0 && k > 0 && k <= MX_TOPK_MAX && !pinned_at_least(c, &c->tkh, &c->tkh_cap, (nv * 8 + (size_t)n_rows * 4 + 255) & ~(size_t)255, "topk staging"))
        return;
    if (!topk_enqueue(c, logits, n_rows, vocab, k, c->tkh, c->tkh_cap)) return;
    CK(c, cudaStreamSynchronize(c->st), "topk sync");
    if (c->prof) prof_collect(c);
    if (c->err) return;
    memcpy(vals_host, c->tkh, nv * 4);
    memcpy(ids_host, (char *)c->tkh + nv * 4, nv * 4);
    memcpy(lse_host, (char *)c->tkh + nv * 8, (size_t)n_rows * 4);
}

/* ------------------------------------------------------------------------------------------ */
/* decode_layers: a plain decoder's layers (and head) for one decode token in one kernel          */

struct cu_fd {                         /* the plan for one stack */
    const void *layers, *head, *fnorm; int nl, epoch;   /* what it was made for */
    bool ok;                           /* the kernel takes it */
    int fmt, grid, has_head; size_t smem;
    fd_args a;                         /* all but the per-call fields */
    fd_layer *dl;                      /* device [nl] */
    void *buf;                         /* its activations, partials and counters */
    unsigned long long *prof;          /* MLXCEL_CUDA_PROFILE: [grid][FD_NPROF] cycles */
    long launches;
};
static_assert(sizeof(((cu_prof *)0)->fdsum) / sizeof(double) == FD_NPROF, "cu_prof keeps every decode_layers counter");
static void fd_release(cu_ctx *c) {
    if (!c->fd) return;
    cudaStreamSynchronize(c->st);
    cu_fd *f = c->fd;
    if (f->prof && c->prof && f->launches) {   /* into the profile's totals */
        unsigned long long *h = (unsigned long long *)calloc((size_t)f->grid * FD_NPROF, 8);
        if (h && cudaMemcpy(h, f->prof, (size_t)f->grid * FD_NPROF * 8, cudaMemcpyDeviceToHost) == cudaSuccess) {
            for (int k = 0; k < FD_NPROF; k++) {
                double mx = 0;
                for (int b = 0; b < f->grid; b++) {
                    c->prof->fdsum[k] += (double)h[b * FD_NPROF + k];
                    if ((double)h[b * FD_NPROF + k] > mx) mx = (double)h[b * FD_NPROF + k];
                }
                c->prof->fdmax[k] += mx;
            }
            c->prof->fdlaunch += f->launches;
            c->prof->fdgrid = f->grid;
        }
        cudaGetLastError();
        free(h);
    }
    if (f->prof) cudaFree(f->prof);
    if (f->dl) cudaFree(f->dl);
    if (f->buf) cudaFree(f->buf);
    free(f);
    c->fd = NULL;
}
static const void *fd_kernel(int fmt) {
    return fmt == FD_Q4 ? (const void *)k_fused_decode<FD_Q4> : fmt == FD_Q8 ? (const void *)k_fused_decode<FD_Q8>
                                                                            : (const void *)k_fused_decode<FD_BF16>;
}
/* the weight's format as the kernel takes it (-1: not); gs, sdt of quantized weights */
static int fd_fmt(const cu_weight *w, int *gs, int *sdt) {
    if (!w) return -1;
    if (w->bits == 4 || w->bits == 8) {
        if (w->gs != 32 && w->gs != 64 && w->gs != 128) return -1;
        *gs = w->gs; *sdt = w->sdt;
        return w->bits == 4 ? FD_Q4 : FD_Q8;
    }
    if (w->bits == 0 && w->dtype == MX_DTYPE_BF16) { *gs = 0; *sdt = 0; return FD_BF16; }
    return -1;
}
static fd_mat fd_matof(const cu_weight *w) {
    fd_mat m;
    m.w = (const uint8_t *)w->w; m.s = (const uint8_t *)w->scales; m.b = (const uint8_t *)w->biases;
    m.bias = w->bias; m.rows = (int)w->rows;
    return m;
}
/* The plan for s, or why not (logged at debug level once per stack): formats, shapes, shared
 * memory. Uploads the layer table and allocates the buffers (outside graph capture only). */
static void fd_build(cu_ctx *c, const mx_dstack *s, cu_fd *f) {
    const char *why = NULL;
    const int H = s->hidden, nh = s->n_heads, nkv = s->n_kv_heads, D = s->head_dim, I = s->inter, nl = s->n_layers;
    const int QD = nh * D, KD = nkv * D;
    int fmt = -1, gs = 0, sdt = 0, G = nkv > 0 ? nh / nkv : 0;
    fd_layer *hl = NULL;
    fd_args &a = f->a;
    memset(&a, 0, sizeof a);
    if (c->prop.major < 9) { why = "needs sm_90"; goto no; }
    if (nl <= 0 || H < 32 || H % 32 || I % 32 || I <= 0 || nkv <= 0 || nh % nkv || (D != 32 && D != 64 && D != 128) || G * D > 512 || G > 8)
        { why = "shape"; goto no; }
    if (!c->kpool || c->kv.n_kv_heads != nkv || c->kv.head_dim != D || c->kv.n_layers < nl) { why = "kv cache"; goto no; }
    if (!(hl = (fd_layer *)calloc((size_t)nl, sizeof *hl))) { why = "memory"; goto no; }
    for (int l = 0; l < nl; l++) {
        const mx_dlayer *L = &s->layers[l];
        const mx_weight *ws[7] = {L->q, L->k, L->v, L->o, L->gate, L->up, L->down};
        const int64_t rows[7] = {QD, KD, KD, H, I, I, H}, cols[7] = {H, H, H, QD, H, H, I};
        fd_mat *ms[7] = {&hl[l].q, &hl[l].k, &hl[l].v, &hl[l].o, &hl[l].gate, &hl[l].up, &hl[l].down};
        for (int i = 0; i < 7; i++) {
            const cu_weight *w = ws[i] ? get_w(c, ws[i]) : NULL;
            int g2 = 0, s2 = 0;
            const int f2 = fd_fmt(w, &g2, &s2);
            if (f2 < 0 || w->rows != rows[i] || w->cols != cols[i]) { why = "weight format or shape"; goto no; }
            if (fmt < 0) { fmt = f2; gs = g2; sdt = s2; }
            if (f2 != fmt || g2 != gs || s2 != sdt) { why = "mixed weight formats"; goto no; }
            *ms[i] = fd_matof(w);
        }
        if ((L->q_norm != NULL) != (s->layers[0].q_norm != NULL) || (L->k_norm != NULL) != (L->q_norm != NULL)) { why = "q/k norms"; goto no; }
        hl[l].ln1 = get_v(c, L->ln1); hl[l].ln2 = get_v(c, L->ln2);
        hl[l].qn = L->q_norm ? get_v(c, L->q_norm) : NULL; hl[l].kn = L->k_norm ? get_v(c, L->k_norm) : NULL;
        if (!hl[l].ln1 || !hl[l].ln2 || L->ln1->n != H || L->ln2->n != H || (L->q_norm && (L->q_norm->n != D || L->k_norm->n != D || !hl[l].qn || !hl[l].kn)))
            { why = "norms"; goto no; }
    }
    f->has_head = 0;
    if (s->lm_head && s->final_norm && s->final_norm->n == H) {
        const cu_weight *w = get_w(c, s->lm_head);
        int g2 = 0, s2 = 0;
        if (fd_fmt(w, &g2, &s2) == fmt && g2 == gs && s2 == sdt && w->cols == H && w->rows <= INT32_MAX && (a.fnorm = get_v(c, s->final_norm))) {
            a.head = fd_matof(w);
            f->has_head = 1;
        }
    }
    {
        const int gsh = gs ? log2_exact(gs) : 0;
        const int Ks[3] = {H, QD, I};   /* the products' column counts */
        /* rows of a chunk start where its scale bytes are 16-byte aligned */
        int ra = 1;
        if (fmt != FD_BF16) {
            for (int i = 0; i < 3; i++) {
                const int sb = (Ks[i] >> gsh) * 2;
                int r = 1;
                while ((r * sb) % 16) r *= 2;
                if (r > ra) ra = r;
            }
        }
        if (QD % ra || KD % ra || H % ra || I % ra || (f->has_head && a.head.rows % ra)) { why = "rows not aligned for bulk copies"; goto no; }
        const int kmax = H > QD ? (H > I ? H : I) : (QD > I ? QD : I);
        const size_t fixed = FD_FIXED;
        static_assert(FD_FIXED % 16 == 0, "the union region is 16-byte aligned");
        /* bf16: the row being normed and its gammas (f32), then the activations (fused_decode.cuh,
         * fd_x); q4/q8: the activations, then (16-byte aligned) a block's results of a stage's rows
         * before the epilogue, whole groups of 32 of H or I rows */
        const int grid = c->prop.multiProcessorCount;
        const int hi_ = H > I ? H : I, ebuf = fmt == FD_BF16 ? 0 : (hi_ / 32 + grid - 1) / grid * 32;
        const size_t ux = fmt == FD_BF16 ? (size_t)H * 8 + (size_t)kmax * 2 : (size_t)kmax + (size_t)kmax / 32 * 8 + 16 + (size_t)ebuf * 4;
        if (fmt != FD_BF16 && H / 32 > FD_PMAX) { why = "hidden size above the parts of a sum"; goto no; }
        const size_t ua = ((size_t)G * D + 2 * D + 2 * FD_CW * G + (size_t)FD_CW * G * D + (size_t)FD_NCMAX * G * 2 + FD_BTMAX) * 4;
        const size_t U = ux > ua ? ux : ua;
        int maxrow = 0;
        for (int i = 0; i < 3; i++) {
            const fd_geo g = fd_geometry(fmt, Ks[i], gsh, 1 << 30, 1);
            if (g.rowb + 2 * g.sb > maxrow) maxrow = g.rowb + 2 * g.sb;
        }
        int slot = maxrow > c->fused_slot ? maxrow : c->fused_slot;
        slot = (slot + 127) & ~127;
        const size_t optin = c->prop.sharedMemPerBlockOptin;
        int nslot = optin > fixed + U ? (int)((optin - fixed - U) / slot) : 0;
        if (nslot > FD_MAXSLOT) nslot = FD_MAXSLOT;
        if (nslot < 2) { why = "shared memory"; goto no; }
        for (int i = 0; i < 3; i++) {
            const fd_geo g = fd_geometry(fmt, Ks[i], gsh, slot, ra);
            if (g.rt < 1) { why = "chunk geometry"; goto no; }
        }
        f->smem = (size_t)nslot * slot + fixed + U;
        const void *k = fd_kernel(fmt);
        int nb = 0;
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)f->smem) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, FD_THREADS, f->smem) != cudaSuccess || nb < 1) {
            cudaGetLastError();
            why = "kernel attributes";
            goto no;
        }
        a.gs_shift = gsh; a.sdt = sdt; a.slot_bytes = slot; a.nslot = nslot; a.ra = ra; a.pf = c->fused_pf; a.pmin = c->fused_pmin;
    }
    {
        const float *inv = const_table(c, c->rf, &c->n_rf, MX_RF_CACHE, s->inv_freq, D / 2, "decode_layers: rope");
        if (!inv) { why = "rope table"; goto no; }
        a.inv_freq = inv;
    }
    {   /* the layer table and the buffers */
        const size_t al = 64;   /* floats: 256-byte pieces */
#define FD_SZ(n) ((((size_t)(n)) + al - 1) / al * al)
        const size_t nap = (size_t)nkv * FD_NCMAX * G * (D + 2);
        /* q4/q8: the stages' int8 inputs (K + K / 4 bytes each: FD_SZ(K / 2) floats) and two sets of parts */
        const size_t ngx = fmt == FD_BF16 ? 0 : FD_SZ(H / 2) * 2 + FD_SZ(I / 2) + FD_SZ(QD / 2) + FD_SZ(FD_PMAX) * 2;
        const size_t nf = FD_SZ(H) * 3 + FD_SZ(QD) * 2 + FD_SZ(KD) * 2 + FD_SZ(I) + FD_SZ(nap) + ngx;
        const size_t bytes = nf * 4 + (size_t)(2 + nkv) * 4;
#undef FD_SZ
        if (cudaMalloc((void **)&f->dl, (size_t)nl * sizeof *hl) != cudaSuccess || cudaMalloc(&f->buf, bytes) != cudaSuccess) {
            cudaGetLastError();
            why = "device memory";
            goto no;
        }
        if (cudaMemcpyAsync(f->dl, hl, (size_t)nl * sizeof *hl, cudaMemcpyHostToDevice, c->st) != cudaSuccess ||
            cudaMemsetAsync(f->buf, 0, bytes, c->st) != cudaSuccess || cudaStreamSynchronize(c->st) != cudaSuccess) {
            cudaGetLastError();
            why = "upload";
            goto no;
        }
        float *p = (float *)f->buf;
        auto take = [&](size_t n) { float *r = p; p += (n + al - 1) / al * al; return r; };
        a.y = take(H); a.o = take(H); a.d = take(H); a.q = take(QD); a.att = take(QD);
        a.k = take(KD); a.v = take(KD); a.act = take(I); a.apart = take(nap);
        if (fmt != FD_BF16) {
            a.gx[0] = (uint8_t *)take(H / 2); a.gx[1] = (uint8_t *)take(H / 2);
            a.gx[2] = (uint8_t *)take(I / 2); a.gx[3] = (uint8_t *)take(QD / 2);
            a.part[0] = take(FD_PMAX); a.part[1] = take(FD_PMAX);
        }
        a.ctr = (unsigned *)p;
    }
    if (c->prof) {
        const size_t pb = (size_t)c->prop.multiProcessorCount * FD_NPROF * 8;
        if (cudaMalloc((void **)&f->prof, pb) != cudaSuccess || cudaMemset(f->prof, 0, pb) != cudaSuccess) {
            cudaGetLastError();
            f->prof = NULL;
        }
        a.prof = f->prof;
    }
    a.L = f->dl; a.nl = nl;
    a.kp = c->kpool; a.vp = c->vpool; a.kv_f32 = c->kv.dtype == MX_DTYPE_F32;
    a.nslots = kv_nslots(c); a.lstr = kv_lstride(c); a.bs = c->kv.block_size; a.nblocks = kv_nblocks(c);
    a.rope_af = s->rope_factor; a.scale = s->attn_scale;
    a.H = H; a.nh = nh; a.nkv = nkv; a.D = D; a.I = I; a.act_kind = (int)s->act;
    a.eps = s->eps; a.a1 = s->add_one;
    f->fmt = fmt;
    f->grid = c->prop.multiProcessorCount;
    f->ok = true;
    free(hl);
    MX_LOGD("decode_layers: %d layers in one kernel (%s, %d slots of %d bytes, %zu bytes of shared memory%s)", nl,
            fmt == FD_Q4 ? "q4" : fmt == FD_Q8 ? "q8" : "bf16", a.nslot, a.slot_bytes, f->smem, f->has_head ? ", with the head" : "");
    return;
no:
    free(hl);
    f->ok = false;
    MX_LOGD("decode_layers: not taken (%s); the layers run op by op", why);
}

static int c_decode_layers(void *ctx, const mx_dstack *s, float *x, float *logits, const mx_attn_meta *meta) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (!c->fused || c->mv_f32 || c->precise || !s || meta->n_tokens != 1) return 0;
    cu_fd *f = c->fd;
    if (!f || f->layers != (const void *)s->layers || f->nl != s->n_layers || f->head != (const void *)s->lm_head ||
        f->fnorm != (const void *)s->final_norm || f->epoch != c->fd_epoch) {
        if (c->gmode == G_CAPTURE || c->gmode == G_REPLAY) { c->gbroken = true; return 0; }   /* made in eager steps */
        OP_ENTER(c);
        fd_release(c);
        if (!(f = c->fd = (cu_fd *)calloc(1, sizeof *f))) return 0;
        f->layers = s->layers; f->nl = s->n_layers; f->head = s->lm_head; f->fnorm = s->final_norm; f->epoch = c->fd_epoch;
        fd_build(c, s, f);
    }
    if (!f->ok) return 0;
    if (meta->n_seqs < 1 || !meta->seq || meta->seq[0] < 0 || meta->seq[0] >= meta->n_seqs || meta->pos[0] < 0 || !meta->slot) return 0;
    uint64_t v_[] = {41, PU(s->layers), (uint64_t)s->n_layers, PU(s->lm_head), PU(x), PU(logits),
                     (uint64_t)meta->n_seqs, (uint64_t)meta->max_blocks};
    if (!g_op(c, v_, sizeof v_ / 8)) return 0;
    OP_ENTER(c);
    dmeta dm;
    if (!meta_up(c, meta, &dm)) return 0;
    const int ret = f->has_head ? 2 : 1;
    if (c->gmode == G_REPLAY) return ret;
    fd_args a = f->a;
    a.x = x; a.logits = logits;
    a.pos = dm.pos; a.slot = dm.slot; a.seq = dm.seq; a.bt = dm.bt; a.maxb = meta->max_blocks;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(f->grid); cfg.blockDim = dim3(FD_THREADS); cfg.dynamicSmemBytes = f->smem; cfg.stream = c->st;
    cfg.attrs = at; cfg.numAttrs = c->pdl ? 1 : 0;
    if (f->fmt == FD_Q4) cudaLaunchKernelEx(&cfg, k_fused_decode<FD_Q4>, a);
    else if (f->fmt == FD_Q8) cudaLaunchKernelEx(&cfg, k_fused_decode<FD_Q8>, a);
    else cudaLaunchKernelEx(&cfg, k_fused_decode<FD_BF16>, a);
    LAUNCHED(c, "decode_layers");
    c->n_fused++;
    f->launches++;
    return ret;
}

extern "C" mx_status mx_backend_cuda_step_begin(mx_backend *b, uint64_t key);
extern "C" mx_status mx_backend_cuda_step_end(mx_backend *b);
static mx_status c_step_begin(void *ctx, uint64_t key) {
    mx_backend b; b.i = NULL; b.ctx = ctx;
    return mx_backend_cuda_step_begin(&b, key);
}
static mx_status c_step_end(void *ctx) {
    mx_backend b; b.i = NULL; b.ctx = ctx;
    return mx_backend_cuda_step_end(&b);
}
static mx_status c_step_replay(void *ctx, uint64_t key, const mx_step_inputs *in);
static mx_status c_top1_launch(void *ctx, const float *logits, int n_rows, int vocab, int slot);
static mx_status c_top1_wait(void *ctx, int slot, int n_rows, float *vals_host, int32_t *ids_host, float *lse_host);
static mx_status c_step_chain(void *ctx, uint64_t key, const mx_step_inputs *in);

static const mx_backend_i g_cuda_i = {
    "cuda", c_alloc, c_free, c_write, c_read, c_sync, c_weight_prepare, c_vec_prepare, c_kv_init, c_kv_free,
    c_matmul, c_embed, c_rmsnorm, c_layernorm, c_rope, c_attention, c_act_mul, c_act, c_add, c_scale,
    c_gather_rows, c_softcap, NULL /* set_precision */, c_step_begin, c_step_end, c_matmul_multi, c_topk,
    c_decode_layers, c_step_replay, c_top1_launch, c_top1_wait, c_step_chain,
};

/* ------------------------------------------------------------------------------------------ */
/* init / free                                                                                 */

extern "C" const char *mx_backend_cuda_archs(void) { return MX_CUDA_ARCHS; }

/* where a cache row lies in a pool (rows from its start) under MLXCEL_CUDA_KV_LAYOUT's value lay, as
 * the kernels address it: a layer's base (kv_lstride) plus the mapped slot (by_table 0: kv_slot of
 * slot) or the mapped block id of slot / block_size, times block_size, plus the offset (by_table 1:
 * the attention's reads through the block table). -1 where the kernels skip it. No GPU needed. */
extern "C" int64_t mx_backend_cuda_kv_row(int lay, const mx_kv_desc *d, int layer, int32_t slot, int by_table) {
    const int l = kv_lay_for(lay, *d), bs = d->block_size;
    int64_t m;
    if (by_table) {
        const int32_t b = slot < 0 ? -1 : kv_blk_of(l, *d, slot / bs);
        if (b < 0 || b >= kv_nblocks_of(l, *d)) return -1;   /* (k_attn's bound) */
        m = (int64_t)b * bs + slot % bs;
    } else {
        m = kv_slot_of(l, *d, slot);
        if (m < 0 || m >= kv_nslots_of(l, *d)) return -1;   /* (k_kv_write's bound) */
    }
    return (int64_t)layer * kv_lstride_of(l, *d) + m;
}
extern "C" mx_status mx_backend_cuda_check_env(void) {
    cu_switches sw;
    return read_switches(&sw);
}

/* c_pdl_early, the device-wide switch read by pdl_entry (the last backend that sets it wins), on
 * for decode-sized products (<= MV_I8_MAX rows of x) and off for larger ones (prompts: early
 * release slowed them by 5%). Changed by a copy on the backend's stream only when the kind of
 * product changes, from pinned memory so that a step being captured into a graph can hold it. */
static void pdl_mode(cu_ctx *c, bool small) {
    const int want = c->pdl && small ? c->pdl_early : 0;
    if (want == c->pdl_dev || !c->pdl_host) return;
    CK(c, cudaMemcpyToSymbolAsync(c_pdl_early, &c->pdl_host[want], sizeof(int), 0, cudaMemcpyHostToDevice, c->st),
       "PDL switch");
    c->pdl_dev = want;
}
/* the switch written now and waited for (init, and tests changing it between kernels) */
/* MLXCEL_CUDA_TRACE=FILE (MLXCEL_CUDA_TRACE_MAX records, 1,024 to 2^27, default 4M): the wait trace (pdl_wait)
 * into a buffer, written to FILE when the backend is freed: "MXTRACE2", the count (u64), then the
 * records (grid u64, t0 u64, t1 u64, t2 u64, sm u32, block u32). A build without -DMLXCEL_CUDA_TRACE=ON
 * says so and traces nothing. */
static void trace_init(cu_ctx *c) {
    const char *path = getenv("MLXCEL_CUDA_TRACE");
    if (!path || !*path) return;
#ifdef MLXCEL_CUDA_TRACE
    const unsigned cap = (unsigned)c->trace_cap, zero = 0;   /* (read_switches checked its range) */
    if (cudaMalloc(&c->trace, (size_t)cap * sizeof(cu_trace_rec)) != cudaSuccess) {
        cudaGetLastError();
        c->trace = NULL;
        fprintf(stderr, "cuda trace: no memory for %u records\n", cap);
        return;
    }
    cudaMemcpyToSymbol(g_trace, &c->trace, sizeof c->trace);
    cudaMemcpyToSymbol(g_trace_cap, &cap, sizeof cap);
    cudaMemcpyToSymbol(g_trace_n, &zero, sizeof zero);
    c->trace_path = path;
#else
    (void)c;
    fprintf(stderr, "cuda trace: this build has no trace (configure with -DMLXCEL_CUDA_TRACE=ON); MLXCEL_CUDA_TRACE ignored\n");
#endif
}
static void trace_write(cu_ctx *c) {
#ifdef MLXCEL_CUDA_TRACE
    if (!c->trace) return;
    unsigned n = 0;
    void *none = NULL;
    cudaDeviceSynchronize();
    cudaMemcpyFromSymbol(&n, g_trace_n, sizeof n);
    cudaMemcpyToSymbol(g_trace, &none, sizeof none);
    const unsigned cap = (unsigned)c->trace_cap, k = n < cap ? n : cap;   /* (trace_init's) */
    cu_trace_rec *h = (cu_trace_rec *)malloc((size_t)k * sizeof *h + 1);
    FILE *f = h ? fopen(c->trace_path, "wb") : NULL;
    if (f && cudaMemcpy(h, c->trace, (size_t)k * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess) {
        const unsigned long long cnt = k;
        fwrite("MXTRACE2", 1, 8, f);
        fwrite(&cnt, 8, 1, f);
        fwrite(h, sizeof *h, k, f);
        fprintf(stderr, "cuda trace: %u records (of %u) into %s\n", k, n, c->trace_path);
    } else {
        fprintf(stderr, "cuda trace: could not write %s\n", c->trace_path);
    }
    if (f) fclose(f);
    free(h);
    cudaFree(c->trace);
    c->trace = NULL;
#else
    (void)c;
#endif
}
static void set_mv_pf_symbol(cu_ctx *c) {
    if (cudaMemcpyToSymbol(c_mv_pf, &c->mv_pf, sizeof(int)) != cudaSuccess) cudaGetLastError();
}
static void set_pdl_early_symbol(cu_ctx *c) {
    c->pdl_dev = -1;
    pdl_mode(c, true);
    if (cudaStreamSynchronize(c->st) != cudaSuccess) cudaGetLastError();
}

extern "C" mx_status mx_backend_cuda_init(mx_backend *out) {
    out->i = NULL; out->ctx = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: no usable GPU (%s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device found");
    }
    int dev = 0;
    const char *de = getenv("MLXCEL_CUDA_DEVICE");
    if (de && *de) {
        char *end; long v = strtol(de, &end, 10);
        if (*end || v < 0 || v >= count)
            return mx_errorf(MX_ERR_INVALID_ARG, "MLXCEL_CUDA_DEVICE=%s: not a device index below %d", de, count);
        dev = (int)v;
    }
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
        return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: device %d: %s", dev, cudaGetErrorString(e));
    /* does this binary hold code the device can run? */
    cudaFuncAttributes fa;
    e = cudaFuncGetAttributes(&fa, (const void *)k_add);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: this binary was built for %s, which does not cover the GPU %s (sm_%d%d): "
                         "rebuild with CMAKE_CUDA_ARCHITECTURES including %d%d (%s)", MX_CUDA_ARCHS, prop.name,
                         prop.major, prop.minor, prop.major, prop.minor, cudaGetErrorString(e));
    }
    cu_ctx *c = (cu_ctx *)calloc(1, sizeof *c);
    if (!c) return mx_errorf(MX_ERR_NOMEM, "cuda: context");
    if (!(c->at = (cu_at *)calloc(1, sizeof *c->at))) { free(c); return mx_errorf(MX_ERR_NOMEM, "cuda: context"); }
    c->dev = dev; c->prop = prop;
    {
        cu_switches sw;
        const mx_status st = read_switches(&sw);
        if (st != MX_OK) { free(c->at); free(c); return st; }
        const char *pe = getenv("MLXCEL_PRECISE");
        c->precise = pe && !strcmp(pe, "1");
        c->attn_tiled = sw.attn != 2;
        c->attn_mma = sw.attn == 0;
        c->attn_gqa = sw.gqa;
        c->attn_prep = sw.attn_prep;
        c->attn_early = sw.attn_early;
        c->apf_cap = (int64_t)sw.attn_l2pf << 20;
        c->mv_dense_short = sw.dense_short;
        c->fast_replay = sw.fast_replay;
        c->topk_one = sw.topk_one;
        c->ch.on = sw.chain;
        c->ch.last_slot = -1;
        c->apf_layer = -1;
        c->attn_vec = sw.attn_dec == 0;
        c->gemm_mode = sw.gemm;
        c->gq_rot = sw.gemm_rot;
        c->strk_mode = sw.gemm_sk;
        c->gemm_n32 = sw.gemm_n32;
        c->gemm_tma = sw.gemm_tma;
        c->n32_wg = sw.n32_wg ? 2 * sw.n32_wg : 0;   /* ("2" is choice 1, "4" choice 2) */
        c->pair_on = sw.gemm_pair;
        c->sum_norm = sw.sum_norm;
        c->sum_qkv = sw.sum_qkv;
        c->att_gq = sw.att_gq;
        c->pdl = sw.pdl != 0;
        c->pdl_early = sw.pdl >= 2 ? sw.pdl - 1 : 0;
        c->pdl_dev = -1;
        c->dq_bytes = (size_t)sw.dq_mb << 20;
        c->mv_f32 = c->precise || sw.mv == 1;
        c->prof_on = sw.profile;
        c->graph_mode = sw.graphs;
        c->graph_auto_bytes = (int64_t)1 << 30;
        c->fused = sw.fused;
        c->fused_pf = (int)sw.fused_pf;
        c->fused_pmin = (int)sw.fused_pmin;
        c->fused_slot = (int)sw.fused_slot;
        c->mr_on = sw.mv_ring;
        c->mr_kb = (int)sw.mr_kb; c->mr_slot = (int)sw.mr_slot; c->mr_warps = (int)sw.mr_warps;
        c->mr_init[0] = c->mr_kb; c->mr_init[1] = c->mr_warps; c->mr_init[2] = c->mr_slot;
        c->rn_on = sw.ring_norm;
        c->mr_bf = sw.ring_bf;
        c->ring_pair = sw.ring_pair;
        c->ring_act = sw.ring_act;
        c->ring_epi = sw.ring_epi;
        c->i8_epi = sw.i8_epi;
        c->ring_long = sw.ring_long;
        c->att_o = sw.att_o;
        c->epi_blocks = (int)sw.epi_blocks;
        c->mv_pf = (int)sw.mv_pf;
        c->mv_mma = (int)sw.mv_mma;
        c->mv_mma_wide = sw.mv_mma_wide;
        c->mm_pfx = sw.mm_pfx;
        c->mm_form = sw.mm_form;
        c->mm_nst = (int)sw.mm_nst;
        c->pair_half = sw.pair_half;
        c->trace_cap = sw.trace_max;
        c->asp_split = (int)sw.att_split;
        c->asp_min = (int)sw.att_split_min;
    }
    if ((e = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) != cudaSuccess) {
        free(c->at); free(c);
        return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: stream: %s", cudaGetErrorString(e));
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(c->st); free(c->at); free(c);
        return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: cuBLAS could not start");
    }
    cublasSetStream(c->blas, c->st);
    /* a fixed cuBLAS workspace, so that GEMMs can be captured into graphs */
    if (cudaMalloc(&c->blas_ws, (size_t)32 << 20) == cudaSuccess) cublasSetWorkspace(c->blas, c->blas_ws, (size_t)32 << 20);
    else { cudaGetLastError(); c->blas_ws = NULL; }
    cudaEventCreateWithFlags(&c->g_done, cudaEventDisableTiming);
    if (cudaHostAlloc((void **)&c->pdl_host, 3 * sizeof(int), cudaHostAllocDefault) == cudaSuccess) {
        c->pdl_host[0] = 0; c->pdl_host[1] = 1; c->pdl_host[2] = 2;
    } else { cudaGetLastError(); c->pdl_host = NULL; }   /* then c_pdl_early stays 0 */
    {   /* k_mv_mma's stages take more than the default 48 KiB of shared memory */
#define MMF(RT, NT) (const void *)k_mv_mma<4, __nv_bfloat16, NT, RT>, (const void *)k_mv_mma<4, __half, NT, RT>, \
                    (const void *)k_mv_mma<8, __nv_bfloat16, NT, RT>, (const void *)k_mv_mma<8, __half, NT, RT>
        const void *mm[2][12] = {{MMF(1, 1), MMF(1, 2), MMF(1, 4)}, {MMF(2, 1), MMF(2, 2), MMF(2, 4)}};
#undef MMF
        c->mm_ok = c->prop.major >= 8;
        for (int f = 0; f < 2 && c->mm_ok; f++)
            for (int i = 0; i < 12 && c->mm_ok; i++)
                if (cudaFuncSetAttribute(mm[f][i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->prop.sharedMemPerBlockOptin) !=
                    cudaSuccess) {
                    cudaGetLastError();
                    c->mm_ok = false;
                }
    }
    {   /* k_gemm_gq's stages take more than the default 48 KiB of shared memory */
        const void *gq[] = {(const void *)k_gemm_gq<64, __nv_bfloat16>, (const void *)k_gemm_gq<128, __nv_bfloat16>,
                            (const void *)k_gemm_gq<64, __half>, (const void *)k_gemm_gq<128, __half>};
        c->gq_ok = true;
        for (int i = 0; i < 4; i++)
            if (cudaFuncSetAttribute(gq[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)(GQ_ST * (GQ_BM * 8 * 4 + GQ_NMAX * GQ_XS * 2))) != cudaSuccess) {
                cudaGetLastError();
                c->gq_ok = false;
            }
        for (int i = 0; i < 2 && c->gq_ok; i++) {
            const int bn = i ? 128 : 64;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c->gq_bps[i], gq[i], 128 * (bn / 64),
                                                              (size_t)GQ_ST * (GQ_BM * 8 * 4 + (size_t)bn * GQ_XS * 2)) != cudaSuccess ||
                c->gq_bps[i] < 1) {
                cudaGetLastError();
                c->gq_ok = false;
            }
        }
    }
    if (c->gq_ok && c->prop.major == 9 && c->prop.minor == 0) {   /* k_gemm_wg: sm_90a code only */
        const void *wgk[] = {(const void *)k_gemm_wg<64, 2, __nv_bfloat16>, (const void *)k_gemm_wg<128, 2, __nv_bfloat16>,
                             (const void *)k_gemm_wg<64, 2, __half>, (const void *)k_gemm_wg<128, 2, __half>,
                             (const void *)k_gemm_wg<64, 4, __nv_bfloat16>, (const void *)k_gemm_wg<128, 4, __nv_bfloat16>,
                             (const void *)k_gemm_wg<64, 4, __half>, (const void *)k_gemm_wg<128, 4, __half>};
        /* stream-K: the 64-token forms only (gq_gemm) */
        const void *wgs[] = {(const void *)k_gemm_wg<64, 2, __nv_bfloat16, false, true>, NULL,
                             (const void *)k_gemm_wg<64, 2, __half, false, true>, NULL,
                             (const void *)k_gemm_wg<64, 4, __nv_bfloat16, false, true>, NULL,
                             (const void *)k_gemm_wg<64, 4, __half, false, true>, NULL};
        const void *wgp[] = {(const void *)k_gemm_wg<64, 2, __nv_bfloat16, true>, (const void *)k_gemm_wg<128, 2, __nv_bfloat16, true>,
                             (const void *)k_gemm_wg<64, 2, __half, true>, (const void *)k_gemm_wg<128, 2, __half, true>,
                             (const void *)k_gemm_wg<64, 4, __nv_bfloat16, true>, (const void *)k_gemm_wg<128, 4, __nv_bfloat16, true>,
                             (const void *)k_gemm_wg<64, 4, __half, true>, (const void *)k_gemm_wg<128, 4, __half, true>};
        c->wg_ok = true;
        for (int i = 0; i < 8 && c->wg_ok; i++) {
            cudaFuncAttributes fa;
            const int bn = i & 1 ? 128 : 64, nw4 = i >= 4 ? 4 : 2;
            int *bps = &c->wg_bps[i >= 4][i & 1];
            /* binaryVersion 90: the sm_90a cubin (not the compute_90 PTX, whose body traps) */
            if (cudaFuncGetAttributes(&fa, wgk[i]) != cudaSuccess || fa.binaryVersion != 90 ||
                cudaFuncSetAttribute(wgk[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM(bn, nw4)) != cudaSuccess ||
                cudaFuncSetAttribute(wgp[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM(bn, nw4)) != cudaSuccess ||
                (wgs[i] && cudaFuncSetAttribute(wgs[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM(bn, nw4)) != cudaSuccess) ||
                ((i & 2) == 0 && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(bps, wgk[i], 128 * nw4, WG_SMEM(bn, nw4)) != cudaSuccess ||
                                  *bps < 1 ||
                                  (wgs[i] && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c->wg_bps_sk[i >= 4][i & 1], wgs[i], 128 * nw4,
                                                                                           WG_SMEM(bn, nw4)) != cudaSuccess)))) {
                cudaGetLastError();
                c->wg_ok = false;
            }
        }
    }
    if (c->wg_ok) {   /* the 32-token forms (17..32 rows of x), as the others: [i & 1] f16 scales, [i >= 2] 4 warpgroups */
        const void *k32[] = {(const void *)k_gemm_wg<32, 2, __nv_bfloat16>, (const void *)k_gemm_wg<32, 2, __half>,
                             (const void *)k_gemm_wg<32, 4, __nv_bfloat16>, (const void *)k_gemm_wg<32, 4, __half>};
        const void *s32[] = {(const void *)k_gemm_wg<32, 2, __nv_bfloat16, false, true>, (const void *)k_gemm_wg<32, 2, __half, false, true>,
                             (const void *)k_gemm_wg<32, 4, __nv_bfloat16, false, true>, (const void *)k_gemm_wg<32, 4, __half, false, true>};
        c->wg32_ok = true;
        for (int i = 0; i < 4 && c->wg32_ok; i++) {
            const int nw4 = i >= 2 ? 4 : 2;
            cudaFuncAttributes fa;
            if (cudaFuncGetAttributes(&fa, k32[i]) != cudaSuccess || fa.binaryVersion != 90 ||
                cudaFuncSetAttribute(k32[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM(32, nw4)) != cudaSuccess ||
                cudaFuncSetAttribute(s32[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM(32, nw4)) != cudaSuccess ||
                ((i & 1) == 0 && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c->wg_bps32[i >= 2], k32[i], 128 * nw4, WG_SMEM(32, nw4)) != cudaSuccess ||
                                  c->wg_bps32[i >= 2] < 1 ||
                                  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c->wg_bps32_sk[i >= 2], s32[i], 128 * nw4, WG_SMEM(32, nw4)) != cudaSuccess))) {
                cudaGetLastError();
                c->wg32_ok = false;
            }
        }
    }
    if (c->wg_ok) {   /* the TMA form (MLXCEL_CUDA_GEMM_TMA): the driver's cuTensorMapEncodeTiled, the forms' shared memory */
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
                  q == cudaDriverEntryPointSuccess && fn;
#define TMAF(B, NW, T, SKF, M) {(const void *)k_gemm_wg<B, NW, T, false, SKF, M>, B, NW, SKF}
#define TMA4(B, SKF, M) TMAF(B, 2, __nv_bfloat16, SKF, M), TMAF(B, 2, __half, SKF, M), TMAF(B, 4, __nv_bfloat16, SKF, M), TMAF(B, 4, __half, SKF, M)
        const struct { const void *f; int bn, nwg; bool sk; } tf[] = {
            TMA4(32, false, 1), TMA4(64, false, 1), TMA4(32, true, 1), TMA4(64, true, 1),
            TMA4(32, false, 2), TMA4(64, false, 2), TMA4(128, false, 2), TMA4(32, true, 2), TMA4(64, true, 2)};
#undef TMA4
#undef TMAF
        for (size_t i = 0; i < sizeof tf / sizeof tf[0] && ok; i++) {
            ok = cudaFuncSetAttribute(tf[i].f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM(tf[i].bn, tf[i].nwg)) == cudaSuccess;
            int bps = 0;   /* stream-K needs every block of its grid resident: its slots, the lower of the two forms' */
            if (ok && tf[i].sk) {
                ok = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, tf[i].f, 128 * tf[i].nwg, WG_SMEM(tf[i].bn, tf[i].nwg)) == cudaSuccess && bps >= 1;
                int *slot = tf[i].bn == 32 ? &c->wg_bps32_sk[tf[i].nwg == 4] : &c->wg_bps_sk[tf[i].nwg == 4][0];
                if (ok && bps < *slot) *slot = bps;
            }
        }
        cudaGetLastError();
        c->tm_encode = ok ? (PFN_cuTensorMapEncodeTiled_v12000)fn : NULL;
    }
    if (c->wg_ok) {   /* stream-K's counters (without them it does not run) */
        if (cudaMalloc((void **)&c->strk_cnt, STRK_TILES * sizeof(unsigned)) != cudaSuccess ||
            cudaMemsetAsync(c->strk_cnt, 0, STRK_TILES * sizeof(unsigned), c->st) != cudaSuccess) {
            cudaGetLastError();
            if (c->strk_cnt) cudaFree(c->strk_cnt);
            c->strk_cnt = NULL;
        }
    }
    /* (entry ATT_CNT_MAX: the counter of k_attn_vec<.., OP>) */
    if (cudaMalloc((void **)&c->att_cnt, (ATT_CNT_MAX + 1) * sizeof(unsigned)) != cudaSuccess ||
        cudaMemsetAsync(c->att_cnt, 0, (ATT_CNT_MAX + 1) * sizeof(unsigned), c->st) != cudaSuccess) {   /* (without: k_qk_prep) */
        cudaGetLastError();
        if (c->att_cnt) cudaFree(c->att_cnt);
        c->att_cnt = NULL;
    }
    /* the attention's split scratch (without it: no split) */
    if (cudaMalloc((void **)&c->asp_acc, (size_t)ASP_ENT * 256 * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&c->asp_ml, (size_t)ASP_ENT * sizeof(float2)) != cudaSuccess ||
        cudaMalloc((void **)&c->asp_cnt, (size_t)ASP_CNT * sizeof(unsigned)) != cudaSuccess ||
        cudaMemsetAsync(c->asp_cnt, 0, (size_t)ASP_CNT * sizeof(unsigned), c->st) != cudaSuccess) {
        cudaGetLastError();
        if (c->asp_acc) cudaFree(c->asp_acc);
        if (c->asp_ml) cudaFree(c->asp_ml);
        if (c->asp_cnt) cudaFree(c->asp_cnt);
        c->asp_acc = NULL; c->asp_ml = NULL; c->asp_cnt = NULL;
    }
    if (cudaMalloc((void **)&c->rn_count, sizeof(unsigned)) != cudaSuccess ||
        cudaMemsetAsync(c->rn_count, 0, sizeof(unsigned), c->st) != cudaSuccess) {   /* (without it: no norm in the rings) */
        cudaGetLastError();
        if (c->rn_count) cudaFree(c->rn_count);
        c->rn_count = NULL;
    }
    if (cudaMalloc((void **)&c->epi_part, 2 * MR_PARTS * sizeof(float)) != cudaSuccess) {   /* (without: no RING_EPI) */
        cudaGetLastError();
        c->epi_part = NULL;
    }
    if (cudaMalloc((void **)&c->i8e_cnt, MR_PARTS * sizeof(unsigned)) != cudaSuccess ||
        cudaMemsetAsync(c->i8e_cnt, 0, MR_PARTS * sizeof(unsigned), c->st) != cudaSuccess) {   /* (without: no I8_EPI) */
        cudaGetLastError();
        if (c->i8e_cnt) cudaFree(c->i8e_cnt);
        c->i8e_cnt = NULL;
    }
    set_pdl_early_symbol(c);
    set_mv_pf_symbol(c);
    trace_init(c);
    if (c->prof_on && (c->prof = (cu_prof *)calloc(1, sizeof *c->prof)))
        for (int i = 0; i < PROF_N; i++) cudaEventCreate(&c->prof->ev[i]);
    out->i = &g_cuda_i; out->ctx = c;
    char d[256];
    mx_backend_cuda_describe(out, d, sizeof d);
    MX_LOGI("device: %s", d);
    return MX_OK;
}

extern "C" void mx_backend_cuda_describe(const mx_backend *b, char *buf, size_t n) {
    const cu_ctx *c = (const cu_ctx *)b->ctx;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    snprintf(buf, n, "%.100s, sm_%d%d, %.1f GiB (%.1f free), %d SMs; built for %s", c->prop.name, c->prop.major,
             c->prop.minor, tot / 1073741824.0, fr / 1073741824.0, c->prop.multiProcessorCount, MX_CUDA_ARCHS);
}

/* The switches below (tests, comparisons): pending work flushed and captured graphs dropped
 * before a kernel choice changes. */
static cu_ctx *switch_ctx(mx_backend *b) {
    cu_ctx *c = (cu_ctx *)b->ctx;
    FLUSH_ALL(c);
    g_invalidate(c);
    return c;
}
extern "C" void mx_backend_cuda_set_pdl(mx_backend *b, bool on) { switch_ctx(b)->pdl = on; }
extern "C" void mx_backend_cuda_set_pdl_early(mx_backend *b, bool on) {
    cu_ctx *c = switch_ctx(b);
    cudaStreamSynchronize(c->st);   /* no kernel in flight reads the switch while it changes */
    c->pdl_early = on ? 1 : 0;
    set_pdl_early_symbol(c);
}
extern "C" void mx_backend_cuda_set_pdl_entry(mx_backend *b, bool on) {
    cu_ctx *c = switch_ctx(b);
    cudaStreamSynchronize(c->st);
    c->pdl_early = on ? 2 : 1;
    set_pdl_early_symbol(c);
}
extern "C" mx_status mx_backend_cuda_set_gemm(mx_backend *b, const char *mode) {
    for (int i = 0; i < GM_NMODES; i++)
        if (mode && !strcmp(mode, k_gemm_modes[i])) { switch_ctx(b)->gemm_mode = i; return MX_OK; }
    return mx_errorf(MX_ERR_INVALID_ARG, "GEMM mode %.40s: expected auto, cublas, mma or wgmma", mode ? mode : "(null)");
}
extern "C" bool mx_backend_cuda_has_wgmma(mx_backend *b) { return switch_ctx(b)->wg_ok; }
extern "C" void mx_backend_cuda_set_gemm_pair(mx_backend *b, bool on) { switch_ctx(b)->pair_on = on; }
extern "C" void mx_backend_cuda_set_graphs(mx_backend *b, int mode, int64_t auto_bytes) {
    cu_ctx *c = switch_ctx(b);
    c->graph_mode = mode < 0 ? 0 : mode > 2 ? 2 : mode;
    c->graph_auto_bytes = auto_bytes;
}
extern "C" int mx_backend_cuda_graph_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_graph_launches; }
extern "C" bool mx_backend_cuda_set_gemm_rot(mx_backend *b, bool on) {
    cu_ctx *c = switch_ctx(b);
    const bool was = c->gq_rot != 0;
    c->gq_rot = on;
    return was;
}
extern "C" int mx_backend_cuda_pair_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_pair; }
extern "C" int mx_backend_cuda_set_gemm_sk(mx_backend *b, int mode, int grid) {
    cu_ctx *c = switch_ctx(b);
    const int was = c->strk_mode;
    c->strk_mode = mode != 0;
    c->strk_grid = grid > 0 ? grid : 0;
    return was;
}
extern "C" int mx_backend_cuda_sk_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_strk; }
extern "C" bool mx_backend_cuda_set_gemm_n32(mx_backend *b, bool on) {
    cu_ctx *c = switch_ctx(b);
    const bool was = c->gemm_n32 != 0;
    c->gemm_n32 = on;
    return was;
}
extern "C" int mx_backend_cuda_n32_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_wg32; }
extern "C" int mx_backend_cuda_set_gemm_tma(mx_backend *b, int mode) {
    cu_ctx *c = switch_ctx(b);
    const int was = c->gemm_tma;
    c->gemm_tma = mode >= 0 && mode <= 3 ? mode : 0;
    return was;
}
extern "C" int mx_backend_cuda_tma_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_tma; }
extern "C" bool mx_backend_cuda_set_mv_ring(mx_backend *b, bool on, int kb, int warps, int slot) {
    cu_ctx *c = switch_ctx(b);
    const bool was = c->mr_on != 0;
    c->mr_on = on;
    if (kb > 0) c->mr_kb = kb < 8 ? 8 : kb > MR_RING_KB_MAX ? MR_RING_KB_MAX : kb;
    else if (kb < 0) c->mr_kb = c->mr_init[0];
    if (warps > 0) c->mr_warps = warps > 16 ? 16 : warps;
    else if (warps < 0) c->mr_warps = c->mr_init[1];
    if (slot > 0) c->mr_slot = slot < 512 ? 512 : slot > 65536 ? 65536 : slot;
    else if (slot < 0) c->mr_slot = c->mr_init[2];
    return was;
}
extern "C" int mx_backend_cuda_ring_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_ring; }
/* a switch of values 0..hi set to mode (clamped); the previous value */
static int set_mode(int *sw, int mode, int hi) {
    const int was = *sw;
    *sw = mode < 0 ? 0 : mode > hi ? hi : mode;
    return was;
}
static int set_mode3(int *sw, int mode) { return set_mode(sw, mode, 2); }
static bool set_flag(int *sw, bool on) { return set_mode(sw, on ? 1 : 0, 1) != 0; }
extern "C" int mx_backend_cuda_set_mv_ring_bf16(mx_backend *b, int mode) { return set_mode(&switch_ctx(b)->mr_bf, mode, 3); }
extern "C" int mx_backend_cuda_set_ring_norm(mx_backend *b, int mode) { return set_mode3(&switch_ctx(b)->rn_on, mode); }
extern "C" int mx_backend_cuda_ring_norm_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_ring_norm; }
extern "C" bool mx_backend_cuda_set_ring_pair(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->ring_pair, on); }
extern "C" int mx_backend_cuda_ring_pair_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_ring_pair; }
extern "C" bool mx_backend_cuda_set_ring_act(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->ring_act, on); }
extern "C" int mx_backend_cuda_ring_act_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_ring_act; }
extern "C" bool mx_backend_cuda_set_ring_epi(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->ring_epi, on); }
extern "C" int mx_backend_cuda_set_epi_blocks(mx_backend *b, int n) { return set_mode(&switch_ctx(b)->epi_blocks, n, EPI_BLOCKS_MAX); }
extern "C" int mx_backend_cuda_set_pair_half(mx_backend *b, int mode) { return set_mode3(&switch_ctx(b)->pair_half, mode); }
extern "C" int mx_backend_cuda_pair_half_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_pair_half; }
extern "C" int mx_backend_cuda_ring_epi_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_ring_epi; }
extern "C" bool mx_backend_cuda_set_i8_epi(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->i8_epi, on); }
extern "C" int mx_backend_cuda_set_mv_pf(mx_backend *b, int steps) {
    cu_ctx *c = switch_ctx(b);
    const int was = c->mv_pf;
    cudaStreamSynchronize(c->st);   /* no kernel in flight reads it while it changes */
    c->mv_pf = steps < 0 ? 0 : steps > MV_PF_MAX ? MV_PF_MAX : steps;
    set_mv_pf_symbol(c);
    return was;
}
extern "C" int mx_backend_cuda_set_mv_mma(mx_backend *b, int rows) { return set_mode(&switch_ctx(b)->mv_mma, rows, MV_I8_MAX); }
extern "C" bool mx_backend_cuda_set_mv_mma_wide(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->mv_mma_wide, on); }
extern "C" int mx_backend_cuda_set_mv_mma_form(mx_backend *b, int form) {
    cu_ctx *c = switch_ctx(b);
    const int was = c->mm_form;
    c->mm_form = form == 1 || form == 2 ? form : 0;
    return was;
}
extern "C" int mx_backend_cuda_set_mv_mma_stages(mx_backend *b, int stages) {
    cu_ctx *c = switch_ctx(b);
    const int was = c->mm_nst;
    c->mm_nst = stages < 2 ? 2 : stages > MM_ST ? MM_ST : stages;
    return was;
}
extern "C" int mx_backend_cuda_mv_mma_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_mv_mma; }
extern "C" int mx_backend_cuda_i8_epi_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_i8_epi; }
extern "C" bool mx_backend_cuda_set_ring_long(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->ring_long, on); }
extern "C" int mx_backend_cuda_ring_long_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_ring_long; }
extern "C" bool mx_backend_cuda_set_att_o(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->att_o, on); }
extern "C" int mx_backend_cuda_att_o_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_att_o; }
extern "C" int mx_backend_cuda_ring_sc_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_ring_sc; }
extern "C" void mx_backend_cuda_set_sum_norm(mx_backend *b, bool on) { switch_ctx(b)->sum_norm = on; }
extern "C" void mx_backend_cuda_set_sum_qkv(mx_backend *b, bool on) { switch_ctx(b)->sum_qkv = on; }
extern "C" int mx_backend_cuda_sum_qkv_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_sum_qkv; }
extern "C" void mx_backend_cuda_set_att_gq(mx_backend *b, bool on) { switch_ctx(b)->att_gq = on; }
extern "C" int mx_backend_cuda_cvt_gq_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_cvt_gq; }
extern "C" int mx_backend_cuda_sum_norm_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_sum_norm; }
extern "C" void mx_backend_cuda_set_tiled_attention(mx_backend *b, bool on) { switch_ctx(b)->attn_tiled = on; }
extern "C" void mx_backend_cuda_set_mma_attention(mx_backend *b, bool on) { switch_ctx(b)->attn_mma = on; }
extern "C" void mx_backend_cuda_set_vec_attention(mx_backend *b, bool on) { switch_ctx(b)->attn_vec = on; }
extern "C" int mx_backend_cuda_set_attn_prep(mx_backend *b, int mode) { return set_mode3(&switch_ctx(b)->attn_prep, mode); }
extern "C" int mx_backend_cuda_attn_prep_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_attn_prep; }
extern "C" bool mx_backend_cuda_set_attn_early(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->attn_early, on); }
extern "C" int mx_backend_cuda_attn_early_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_attn_early; }
extern "C" int mx_backend_cuda_set_attn_split(mx_backend *b, int splits, int min_span) {
    cu_ctx *c = switch_ctx(b);
    const int was = c->asp_split;
    if (splits >= 0) c->asp_split = splits > ASP_SMAX ? ASP_SMAX : splits;
    if (min_span >= 0) c->asp_min = min_span < 16 ? 16 : min_span;
    return was;
}
extern "C" int mx_backend_cuda_attn_split_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_attn_split; }
extern "C" int mx_backend_cuda_set_attn_l2pf(mx_backend *b, int mib) {
    cu_ctx *c = switch_ctx(b);
    const int was = (int)(c->apf_cap >> 20);
    c->apf_cap = (int64_t)(mib < 0 ? 0 : mib > 1024 ? 1024 : mib) << 20;
    return was;
}
extern "C" int mx_backend_cuda_attn_l2pf_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_apf; }
extern "C" int64_t mx_backend_cuda_attn_l2pf_bytes(mx_backend *b) { return ((const cu_ctx *)b->ctx)->apf_bytes; }
extern "C" bool mx_backend_cuda_set_mv_dense_short(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->mv_dense_short, on); }
extern "C" bool mx_backend_cuda_set_fast_replay(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->fast_replay, on); }
extern "C" int mx_backend_cuda_fast_replays(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_fast_replays; }
extern "C" bool mx_backend_cuda_set_topk_one(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->topk_one, on); }
extern "C" bool mx_backend_cuda_set_chain(mx_backend *b, bool on) { return set_flag(&switch_ctx(b)->ch.on, on); }
extern "C" long mx_backend_cuda_chain_steps(mx_backend *b) { return ((const cu_ctx *)b->ctx)->ch.steps; }
extern "C" void mx_backend_cuda_topk_one_launches(mx_backend *b, int *launches, int *mapped) {
    const cu_ctx *c = (const cu_ctx *)b->ctx;
    *launches = c->n_topk_one;
    *mapped = c->n_topk_mapped;
}
extern "C" int mx_backend_cuda_mv_dense_short_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_dense_short; }
extern "C" void mx_backend_cuda_set_gqa_attention(mx_backend *b, int mode) {
    switch_ctx(b)->attn_gqa = mode < 0 ? 0 : mode > 2 ? 2 : mode;
}
extern "C" void mx_backend_cuda_set_fused(mx_backend *b, bool on) { switch_ctx(b)->fused = on; }
extern "C" int mx_backend_cuda_fused_launches(mx_backend *b) { return ((const cu_ctx *)b->ctx)->n_fused; }
extern "C" void mx_backend_cuda_set_exact_matvec(mx_backend *b, bool on) {
    cu_ctx *c = switch_ctx(b);
    xq_forget(c);
    c->mv_f32 = on;
}

extern "C" mx_status mx_backend_cuda_status(const mx_backend *b) {
    const cu_ctx *c = (const cu_ctx *)b->ctx;
    return c ? c->err : MX_ERR_INVALID_ARG;
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* the benchmark helpers' timing: run once to warm up, then the median of 9 timed runs on the
 * context's stream, in ms; 0 where a run failed */
template <typename F> static float bench_median_ms(cu_ctx *c, F run) {
    cudaEvent_t e0, e1;
    float ms[9];
    if (cudaEventCreate(&e0) != cudaSuccess) return 0;
    if (cudaEventCreate(&e1) != cudaSuccess) { cudaEventDestroy(e0); return 0; }
    run();
    for (int i = 0; i < 9; i++) {
        cudaEventRecord(e0, c->st);
        run();
        cudaEventRecord(e1, c->st);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms[i], e0, e1);
    }
    const bool ok = cudaGetLastError() == cudaSuccess;
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    if (!ok) return 0;
    qsort(ms, 9, sizeof ms[0], cmp_f);
    return ms[4];
}

/* The read-only rate (mx_backend_cuda_bench_read): what a decode step's weights could stream at,
 * as against the copy's read + write. Form 0: 16-byte loads, 8 in flight a thread, streaming
 * (evict-first) through L1; form 1: bulk copies (cp.async.bulk, as the rings) of 32 KB chunks into
 * 6 slots of shared memory a block, one block a multiprocessor, nothing computed on them. Each
 * folds what it read into one word, stored only if it takes a value no buffer here holds, so that
 * the loads are not removed. */
__global__ void __launch_bounds__(512) k_read_ldg(const uint4 *__restrict__ p, size_t n16, unsigned *out) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + 7 * stride < n16; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) { const uint4 v = __ldcs(p + i); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
    if (acc == 0x9e3779b9u) out[0] = acc;
}
#define RD_CHUNK 32768
#define RD_SLOTS 6
__global__ void __launch_bounds__(32) k_read_bulk(const unsigned char *__restrict__ p, size_t nchunk, unsigned *out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char rd_smem[];
    __shared__ __align__(8) uint64_t full[RD_SLOTS];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < RD_SLOTS; s++) fd_mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    unsigned acc = 0;
    size_t k = 0;   /* chunks this block issued */
    for (size_t c = blockIdx.x; c < nchunk; c += gridDim.x, k++) {
        const int s = (int)(k % RD_SLOTS);
        if (k >= RD_SLOTS) {   /* the slot's previous chunk landed: fold one word of it */
            fd_mbar_wait(&full[s], (uint32_t)((k / RD_SLOTS - 1) & 1));
            acc ^= *(const unsigned *)(rd_smem + (size_t)s * RD_CHUNK);
        }
        fd_mbar_expect(&full[s], RD_CHUNK);
        fd_bulk(rd_smem + (size_t)s * RD_CHUNK, p + c * RD_CHUNK, RD_CHUNK, &full[s], pol);
    }
    for (size_t j = k > RD_SLOTS ? k - RD_SLOTS : 0; j < k; j++) {   /* the last copies in flight */
        const int s = (int)(j % RD_SLOTS);
        fd_mbar_wait(&full[s], (uint32_t)((j / RD_SLOTS) & 1));
        acc ^= *(const unsigned *)(rd_smem + (size_t)s * RD_CHUNK);
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
#else
    (void)p; (void)nchunk; (void)out;
#endif
}

/* read-only GB/s of `bytes` (a multiple of RD_CHUNK), the median of 9 passes; form 0 or 1 as above
 * (1 needs sm_90: 0 returned below it); 0 where the buffer could not be had */
extern "C" double mx_backend_cuda_bench_read(const mx_backend *b, size_t bytes, int form) {
    cu_ctx *c = (cu_ctx *)b->ctx;
    void *src = NULL;
    unsigned *out = NULL;
    double r = 0;
    bytes -= bytes % RD_CHUNK;
    if (form == 1 && c->prop.major < 9) return 0;
    if (bytes && cudaMalloc(&src, bytes) == cudaSuccess && cudaMalloc(&out, 4) == cudaSuccess &&
        (form == 0 || cudaFuncSetAttribute(k_read_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, RD_SLOTS * RD_CHUNK) == cudaSuccess)) {
        cudaMemsetAsync(src, 1, bytes, c->st);
        const float ms = bench_median_ms(c, [&] {
            if (form == 0) k_read_ldg<<<c->prop.multiProcessorCount * 4, 512, 0, c->st>>>((const uint4 *)src, bytes / 16, out);
            else k_read_bulk<<<c->prop.multiProcessorCount, 32, RD_SLOTS * RD_CHUNK, c->st>>>((const unsigned char *)src, bytes / RD_CHUNK, out);
        });
        if (ms > 0) r = bytes / (ms * 1e-3) / 1e9;
    }
    cudaGetLastError();
    if (src) cudaFree(src);
    if (out) cudaFree(out);
    return r;
}

/* What a persistent decode kernel's synchronization costs (mx_backend_cuda_bench_sync): the grid
 * barrier of k_fused_decode (one block a multiprocessor, a counter), alone and with an exchange of
 * partial rows (each block writes its share of np rows of h floats, the barrier, then every block
 * reads and sums all np rows: a residual update by partial sums), and a cluster's barrier alone and
 * with a distributed-shared-memory exchange (every block reads 64 floats of each block of its
 * cluster). Each kernel runs `rounds` of them; the host times it. */
#define SB_SMEM (160 * 1024)   /* dynamic shared memory a block: one block a multiprocessor */
/* a cluster's barrier, then (dsmem) each of the first 64 x 8 threads reads one float of a block of
 * the cluster's buffer `mine` (64 floats a block, written before the barrier) */
__device__ __forceinline__ float sb_cluster_xchg(const float *mine, bool dsmem) {
    float v = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned csize;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(csize));
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (dsmem && threadIdx.x < 64 * csize) {
        const unsigned rank = threadIdx.x / 64;
        uint32_t la = (uint32_t)__cvta_generic_to_shared(mine + threadIdx.x % 64), ra;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(la), "r"(rank));
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    }
#else
    (void)mine; (void)dsmem;
#endif
    return v;
}
/* a grid exchange (round r of a kernel whose blocks are all resident): this block's share of np
 * rows of h floats to buf, the grid barrier (ctr counts arrivals), then the sum of the np rows to
 * sm[0..h) */
__device__ __forceinline__ void sb_grid_xchg(unsigned *ctr, unsigned target, float *buf, int h, int np, int r, float *sm) {
    const unsigned G = gridDim.x;
    if (np > 0) {
        const int n = np * h, lo = (int)((long long)n * blockIdx.x / G), hi = (int)((long long)n * (blockIdx.x + 1) / G);
        for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) buf[i] = (float)(r + i);
    }
    __syncthreads();
    if (threadIdx.x == 0) fd_grid_arrive_wait(ctr, target);   /* (k_fused_decode's barrier) */
    __syncthreads();
    if (np > 0) {
        for (int i = threadIdx.x; i < h; i += blockDim.x) {
            float v = 0.f;
            for (int k = 0; k < np; k++) v += __ldcg(buf + (size_t)k * h + i);
            sm[i] = v;
        }
        __syncthreads();
    }
}
__global__ void __launch_bounds__(512, 1) k_sync_grid(unsigned *ctr, int rounds, float *part, int h, int np, float *out) {
    extern __shared__ __align__(16) float sb_sm[];
    float acc = 0.f;
    for (int r = 0; r < rounds; r++) {
        sb_grid_xchg(ctr, (unsigned)(r + 1) * gridDim.x, part + (size_t)(r & 1) * np * h, h, np, r, sb_sm);
        if (np > 0) acc += sb_sm[(threadIdx.x * 7 + r) % h];
    }
    if (acc == 1.2345f) out[0] = acc;
}
/* the skeleton of a layer of the two-barrier layout (NOTES.md, forty-third session): two cluster
 * exchanges, a grid exchange of np rows of h, two cluster exchanges, a grid exchange; a round a
 * layer */
__global__ void __launch_bounds__(512, 1) k_sync_layer(unsigned *ctr, int rounds, float *part, int h, int np, float *out) {
    extern __shared__ __align__(16) float sb_sm[];
    float acc = 0.f;
    for (int r = 0; r < rounds; r++) {
        for (int half = 0; half < 2; half++) {
            const int x = 2 * r + half;
            for (int k = 0; k < 2; k++) {
                float *mine = sb_sm + h + ((2 * x + k) & 1) * 64;
                if (threadIdx.x < 64) mine[threadIdx.x] = (float)(x + threadIdx.x);
                acc += sb_cluster_xchg(mine, true);
            }
            sb_grid_xchg(ctr, (unsigned)(x + 1) * gridDim.x, part + (size_t)(x & 1) * np * h, h, np, x, sb_sm);
            acc += sb_sm[(threadIdx.x * 7 + x) % h];
        }
    }
    sb_cluster_xchg(sb_sm, false);   /* (no block leaves while another of its cluster may read its shared memory) */
    if (acc == 1.2345f) out[0] = acc;
}
__global__ void __launch_bounds__(512, 1) k_sync_cluster(int rounds, int dsmem, float *out) {
    extern __shared__ __align__(16) float sb_sm[];
    float acc = 0.f;
    for (int r = 0; r < rounds; r++) {
        float *mine = sb_sm + (r & 1) * 64;
        if (dsmem && threadIdx.x < 64) mine[threadIdx.x] = (float)(r + threadIdx.x);
        acc += sb_cluster_xchg(mine, dsmem != 0);
    }
    sb_cluster_xchg(sb_sm, false);   /* (no block leaves while another of its cluster may read its shared memory) */
    if (acc == 1.2345f) out[0] = acc;
}

/* us a round of each (see above), into us[0..8]: [0] the grid barrier, [1] it with 8 rows of
 * 1024 floats, [2] 8 rows of 4096, [3] the clusters of 8's barrier, [4] with the exchange, [5] the
 * clusters of 16's, [6] with the exchange, [7] / [8] a layer's skeleton (k_sync_layer, 8 rows of
 * 1024) on every resident cluster of 8 / 16; clusters[0, 1]: the clusters of 8 and 16 that can be
 * resident at once (one block a multiprocessor). A figure that could not be had: -1. */
extern "C" mx_status mx_backend_cuda_bench_sync(const mx_backend *b, int rounds, double us[9], int clusters[2]) {
    cu_ctx *c = (cu_ctx *)b->ctx;
    for (int i = 0; i < 9; i++) us[i] = -1;
    clusters[0] = clusters[1] = 0;
    if (c->prop.major < 9) return mx_errorf(MX_ERR_UNSUPPORTED, "cuda: bench_sync needs sm_90");
    unsigned *ctr = NULL;
    float *part = NULL, *out = NULL;
    const int G = c->prop.multiProcessorCount;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    auto timed = [&](auto launch) {   /* us a round, the kernel run twice (the first warms up) */
        float ms = -1.f;
        for (int k = 0; k < 2; k++) {
            cudaMemsetAsync(ctr, 0, 4, c->st);
            cudaEventRecord(e0, c->st);
            launch();
            cudaEventRecord(e1, c->st);
            if (cudaEventSynchronize(e1) != cudaSuccess) return -1.0;
            cudaEventElapsedTime(&ms, e0, e1);
        }
        return (double)ms * 1e3 / rounds;
    };
    if (cudaMalloc(&ctr, 4) == cudaSuccess && cudaMalloc(&part, (size_t)2 * 8 * 4096 * 4) == cudaSuccess && cudaMalloc(&out, 4) == cudaSuccess &&
        cudaFuncSetAttribute(k_sync_grid, cudaFuncAttributeMaxDynamicSharedMemorySize, SB_SMEM) == cudaSuccess &&
        cudaFuncSetAttribute(k_sync_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, SB_SMEM) == cudaSuccess &&
        cudaFuncSetAttribute(k_sync_cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
        cudaFuncSetAttribute(k_sync_layer, cudaFuncAttributeMaxDynamicSharedMemorySize, SB_SMEM) == cudaSuccess &&
        cudaFuncSetAttribute(k_sync_layer, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
        static const int rows[3][2] = {{0, 0}, {8, 1024}, {8, 4096}};
        for (int k = 0; k < 3; k++)
            us[k] = timed([&] { k_sync_grid<<<G, 512, SB_SMEM, c->st>>>(ctr, rounds, part, rows[k][1], rows[k][0], out); });
        for (int k = 0; k < 2; k++) {
            const unsigned cs = k == 0 ? 8 : 16;
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = cs; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
            cfg.blockDim = dim3(512); cfg.dynamicSmemBytes = SB_SMEM; cfg.stream = c->st;
            cfg.attrs = at; cfg.numAttrs = 1;
            cfg.gridDim = dim3(cs * (G / cs));
            int nc = 0;
            if (cudaOccupancyMaxActiveClusters(&nc, k_sync_cluster, &cfg) != cudaSuccess || nc <= 0) { cudaGetLastError(); continue; }
            clusters[k] = nc;
            cfg.gridDim = dim3(cs * (unsigned)nc);
            for (int d = 0; d < 2; d++)
                us[3 + 2 * k + d] = timed([&] { cudaLaunchKernelEx(&cfg, k_sync_cluster, rounds, d, out); });
            us[7 + k] = timed([&] { cudaLaunchKernelEx(&cfg, k_sync_layer, ctr, rounds, part, 1024, 8, out); });
        }
    }
    const bool ok = cudaGetLastError() == cudaSuccess;
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    if (ctr) cudaFree(ctr);
    if (part) cudaFree(part);
    if (out) cudaFree(out);
    return ok ? MX_OK : mx_errorf(MX_ERR_INTERNAL, "cuda: bench_sync: a CUDA error");
}

extern "C" double mx_backend_cuda_bench_copy(const mx_backend *b, size_t bytes) {
    cu_ctx *c = (cu_ctx *)b->ctx;
    void *src = NULL, *dst = NULL;
    double r = 0;
    if (cudaMalloc(&src, bytes) == cudaSuccess && cudaMalloc(&dst, bytes) == cudaSuccess) {
        cudaMemsetAsync(src, 1, bytes, c->st);
        const float ms = bench_median_ms(c, [&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->st); });
        if (ms > 0) r = 2.0 * bytes / (ms * 1e-3) / 1e9;
    }
    cudaGetLastError();
    if (src) cudaFree(src);
    if (dst) cudaFree(dst);
    return r;
}

/* How stream capture recorded a step's dependencies (MLXCEL_CUDA_PROFILE prints it): kernels
 * launched with programmatic stream serialization should chain by programmatic edges; ordinary
 * ones would serialize a replay more than the stream does (a replay was 1-2% slower than the same
 * launches for Llama-8B: NOTES.md). */
static void graph_census(cu_ctx *c, cudaGraph_t graph) {
    size_t nn = 0, ne = 0;
    c->gcap_nodes = 0; c->gcap_edges[0] = c->gcap_edges[1] = c->gcap_edges[2] = 0;
    if (cudaGraphGetNodes(graph, NULL, &nn) != cudaSuccess || cudaGraphGetEdges(graph, NULL, NULL, NULL, &ne) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    c->gcap_nodes = (int)nn;
    cudaGraphNode_t *from = (cudaGraphNode_t *)malloc((ne + 1) * sizeof *from), *to = (cudaGraphNode_t *)malloc((ne + 1) * sizeof *to);
    cudaGraphEdgeData *ed = (cudaGraphEdgeData *)malloc((ne + 1) * sizeof *ed);
    size_t got = ne;
    if (from && to && ed && cudaGraphGetEdges(graph, from, to, ed, &got) == cudaSuccess) {
        for (size_t i = 0; i < got && i < ne; i++) {
            const int k = ed[i].type != cudaGraphDependencyTypeProgrammatic ? 0
                          : ed[i].from_port == cudaGraphKernelNodePortLaunchCompletion ? 2 : 1;
            c->gcap_edges[k]++;
        }
    } else cudaGetLastError();
    free(from); free(to); free(ed);
}

extern "C" void mx_backend_cuda_graph_census(mx_backend *b, int *nodes, int *edges3) {
    const cu_ctx *c = (const cu_ctx *)b->ctx;
    *nodes = c->gcap_nodes;
    for (int i = 0; i < 3; i++) edges3[i] = c->gcap_edges[i];
}

/* Step timing (mx_backend_cuda_step_timing): the host clock at step_begin; events around the
 * step's GPU work (from step_begin for steps run op by op, around the graph launch for replayed
 * ones), read at the next step_begin or when asked, by then long done in a decode
 * loop that reads each step's result */
static double stt_now() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void stt_collect_one(cu_ctx *c, int i) {
    if (!c->stt.pending[i]) return;
    c->stt.pending[i] = false;
    float ms = 0.f;
    if (cudaEventSynchronize(c->stt.e1[i]) != cudaSuccess || cudaEventElapsedTime(&ms, c->stt.e0[i], c->stt.e1[i]) != cudaSuccess) {
        cudaGetLastError();
        return;   /* (not counted) */
    }
    mx_cuda_step_split *a = &c->stt.acc;
    a->steps++;
    a->gpu_s += 1e-3 * ms;
    if (c->stt.pend_graph[i]) { a->graph_steps++; a->graph_gpu_s += 1e-3 * ms; }
}
static void stt_collect(cu_ctx *c) { stt_collect_one(c, c->stt.cur); stt_collect_one(c, c->stt.cur ^ 1); }
/* e0: where the step's GPU work starts (step_begin; for a graph step again just before its launch,
 * when the host's walk is over) */
static void stt_start(cu_ctx *c, bool graph) {
    if (!c->stt.on) return;
    stt_collect_one(c, c->stt.cur);   /* (the pair's last step: two steps ago) */
    if (graph) {
        const double w = stt_now() - c->stt.t_begin;
        c->stt.acc.walk_s += w; c->stt.acc.graph_walk_s += w;
    }
    if (cudaEventRecord(c->stt.e0[c->stt.cur], c->st) != cudaSuccess) cudaGetLastError();
}
/* e1: the end of the step's work (after its graph launch, or at step_end op by op) */
static void stt_end(cu_ctx *c, bool graph) {
    if (!c->stt.on) return;
    if (!graph) c->stt.acc.walk_s += stt_now() - c->stt.t_begin;
    const int i = c->stt.cur;
    if (cudaEventRecord(c->stt.e1[i], c->st) != cudaSuccess) { cudaGetLastError(); return; }
    c->stt.pending[i] = true; c->stt.pend_graph[i] = graph;
    c->stt.cur ^= 1;
}
extern "C" mx_status mx_backend_cuda_step_timing(mx_backend *b, bool on) {
    cu_ctx *c = (cu_ctx *)b->ctx;
    if (c->gmode != G_EAGER) return mx_errorf(MX_ERR_INVALID_ARG, "cuda: step timing switched inside a step");
    if (on && !c->stt.e0[0]) {
        bool ok = true;
        for (int i = 0; i < 2; i++)
            ok = ok && cudaEventCreate(&c->stt.e0[i]) == cudaSuccess && cudaEventCreate(&c->stt.e1[i]) == cudaSuccess;
        if (!ok) {
            cudaGetLastError();
            for (int i = 0; i < 2; i++) {
                if (c->stt.e0[i]) cudaEventDestroy(c->stt.e0[i]);
                if (c->stt.e1[i]) cudaEventDestroy(c->stt.e1[i]);
                c->stt.e0[i] = c->stt.e1[i] = NULL;
            }
            return mx_errorf(MX_ERR_NOMEM, "cuda: step timing: no events");
        }
    }
    CHAIN_SETTLE(c);
    c->stt.on = on; c->stt.pending[0] = c->stt.pending[1] = false;
    memset(&c->stt.acc, 0, sizeof c->stt.acc);
    return MX_OK;
}
extern "C" void mx_backend_cuda_step_split_get(mx_backend *b, mx_cuda_step_split *out) {
    cu_ctx *c = (cu_ctx *)b->ctx;
    if (c->gmode == G_EAGER) stt_collect(c);
    *out = c->stt.acc;
}

/* (MLXCEL_CUDA_FAST_REPLAY) a captured or walked graph step's host inputs uploaded at its start, from
 * step_replay's inputs: the graph's copy nodes then come before its first kernel, not between its
 * kernels, where each cut the chain of programmatic launches (the attention metadata at layer 0's
 * attention, the logit rows before the head); the ops' own uploads later in the step find them
 * there and check that they are the same (a difference breaks the step, as any difference does) */
static void sr_upload(cu_ctx *c, const mx_step_inputs *in) {
    if (in->n_tokens > 0 && in->tokens) stage_up(c, &c->ids, in->tokens, (size_t)in->n_tokens * 4);
    dmeta dm;
    if (in->meta && in->meta->n_tokens > 0) meta_up(c, in->meta, &dm);
    /* the logit rows only where an op of the step uploads them too (a gather: its stage exists from
     * the step's eager run); a decode step whose rows are all of its rows has none (the decoder
     * skips the gather), and a stage first made inside a capture would break the step */
    if (in->n_rows > 0 && in->rows && c->rows.d) stage_up(c, &c->rows, in->rows, (size_t)in->n_rows * 4);
}

/* whether decode steps run as graphs (MLXCEL_CUDA_GRAPHS: 1; auto only below a size of weights) */
static bool graphs_on(const cu_ctx *c) { return c->graph_mode && !(c->graph_mode == 2 && c->wbytes >= c->graph_auto_bytes); }
/* the graph entry of a key (NULL: none) */
static cu_graph *graph_of(cu_ctx *c, uint64_t key) {
    for (int i = 0; i < MX_GRAPHS; i++)
        if (c->graphs[i].used && c->graphs[i].key == key) return &c->graphs[i];
    return NULL;
}
extern "C" mx_status mx_backend_cuda_step_begin(mx_backend *b, uint64_t key) {
    cu_ctx *c = (cu_ctx *)b->ctx;
    /* step_replay's inputs for this step, kept for step_end only when it walks a graph step */
    const mx_step_inputs *sri = c->sr_key == key ? c->sr_in : NULL;
    c->sr_in = NULL;
    if (c->gmode != G_EAGER) return mx_errorf(MX_ERR_INVALID_ARG, "cuda: step_begin inside a step");
    OP_ENTER(c);
    if (c->stt.on) {
        stt_collect(c);
        c->stt.t_begin = stt_now();
        stt_start(c, false);   /* (a graph step records it again just before its launch) */
    }
    /* auto (2): graphs only below a size of weights, the default while a replay still waited for
     * the host's walk of the ops; with FAST_REPLAY, replays are at least as fast as op by op for
     * every shape measured, so the default is 1 (NOTES.md, twenty-second session) */
    if (!graphs_on(c)) return MX_OK;
    cu_graph *g = NULL, *lru = NULL;   /* the key's entry; else a free one, else the least recently used */
    for (int i = 0; i < MX_GRAPHS && !g; i++) {
        cu_graph *e = &c->graphs[i];
        if (e->used && e->key == key) g = e;
        else if (!lru || (lru->used && (!e->used || e->last_use < lru->last_use))) lru = e;
    }
    c->g_step++;
    if (!g) {
        g = lru;
        if (g->exec) { cudaStreamSynchronize(c->st); cudaGraphExecDestroy(g->exec); g->exec = NULL; }
        g->used = true; g->key = key;
        g_reset(g);
        c->gmode = G_WARMUP;
    } else if (g->bad) {
        c->gmode = G_EAGER;
    } else if (!g->exec) {
        if (cudaStreamBeginCapture(c->st, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
            cudaGetLastError(); g->bad = true; c->gmode = G_EAGER;
        } else c->gmode = G_CAPTURE;
    } else {
        cudaEventSynchronize(c->g_done);   /* the last replay has read the pinned inputs */
        c->gmode = G_REPLAY;
    }
    g->last_use = c->g_step;
    c->gcur = g; c->g_op = 0; c->gbroken = false;
    if (c->gmode == G_CAPTURE || c->gmode == G_REPLAY) {
        c->sr_in = sri; c->sr_key = key;
        if (sri && c->fast_replay) sr_upload(c, sri);
    }
    return MX_OK;
}

/* A captured or replayed step that did not launch wrote its inputs into the stages' pinned copies,
 * which no copy then took to the device: their next uploads must not be skipped as unchanged (the
 * caller runs the same step again op by op, with the same inputs) */
static void stage_forget(cu_ctx *c) {
    cu_stage *st[] = {&c->meta, &c->ids, &c->rows, &c->tiles};
    for (int i = 0; i < 4; i++) st[i]->len = 0;
}
/* A step's graph launched; timed (step timing) or not; the pinned stages' events recorded after it:
 * their next writes wait for it to have read them */
static void graph_launch(cu_ctx *c, cu_graph *g, bool timed, const char *what) {
    if (timed) stt_start(c, true);
    const double t0 = c->stt.on && timed ? stt_now() : 0;
    CK(c, cudaGraphLaunch(g->exec, c->st), "graph launch");
    if (c->stt.on && timed) c->stt.acc.graph_launch_s += stt_now() - t0;
    if (timed) stt_end(c, true);
    c->n_graph_launches++;
    if (c->prof) prof_mark(c, what);
    CK(c, cudaEventRecord(c->g_done, c->st), "event");
    cu_stage *st[] = {&c->meta, &c->ids, &c->rows};
    for (int i = 0; i < 3; i++) if (st[i]->ev) cudaEventRecord(st[i]->ev, c->st);
}

/* step_replay's inputs against what the ops of a walked step (captured or replayed) uploaded: each
 * stage the step read is stamped with the step and holds its bytes. True when they are equal and
 * the step read no other stage; *stages, *len: what it read. */
static bool sr_check(cu_ctx *c, const mx_step_inputs *in, unsigned *stages, size_t len[3]) {
    unsigned used = 0;
    len[0] = len[1] = len[2] = 0;
    if (c->tiles.stamp == c->g_step) return false;
    if (c->meta.stamp == c->g_step) {
        used |= FS_META;
        const size_t mb = in->meta ? meta_bytes(in->meta) : 0;
        if (!mb || c->meta.len != mb || !meta_same(c, (const int32_t *)c->meta.h, in->meta)) return false;
        len[0] = mb;
    }
    if (c->ids.stamp == c->g_step) {
        used |= FS_IDS;
        const size_t ib = (size_t)(in->n_tokens > 0 ? in->n_tokens : 0) * 4;
        if (!ib || !in->tokens || c->ids.len != ib || memcmp(c->ids.h, in->tokens, ib)) return false;
        len[1] = ib;
    }
    if (c->rows.stamp == c->g_step) {
        used |= FS_ROWS;
        const size_t rb = (size_t)(in->n_rows > 0 ? in->n_rows : 0) * 4;
        if (!rb || !in->rows || c->rows.len != rb || memcmp(c->rows.h, in->rows, rb)) return false;
        len[2] = rb;
    }
    *stages = used;
    return true;
}
static void sr_note(cu_ctx *c, cu_graph *g, const mx_step_inputs *in) {
    if (!in || g->fast_no) return;
    unsigned st = 0;
    size_t len[3];
    if (sr_check(c, in, &st, len) &&
        (g->fast_seen == 0 || (st == g->fast_stages && !memcmp(len, g->fast_len, sizeof len)))) {
        g->fast_stages = st;
        memcpy(g->fast_len, len, sizeof len);
        g->fast_seen++;
    } else {
        g->fast_no = true;
    }
}

/* the key's graph g launched from the inputs alone (step_replay, step_chain), the stages it copies
 * written for it */
static void fast_launch(cu_ctx *c, cu_graph *g, const char *what) {
    c->g_step++;
    cu_stage *st[] = {&c->meta, &c->ids, &c->rows};
    for (int i = 0; i < 3; i++)
        if ((g->fast_stages >> i) & 1) { st[i]->len = g->fast_len[i]; st[i]->stamp = c->g_step; }
    g->last_use = c->g_step;
    xq_forget(c);   /* (as the walk's ops do) */
    graph_launch(c, g, true, what);
    c->n_fast_replays++;
}

/* whether the key's graph g may be launched from the inputs alone (step_replay, step_chain): its
 * captured step and a replayed one were walked with such inputs (sr_note), of these sizes */
static bool step_fast_ok(cu_ctx *c, cu_graph *g, const mx_step_inputs *in) {
    if (g->bad || !g->exec || g->fast_no || g->fast_seen < 2) return false;
    const unsigned fs = g->fast_stages;
    const size_t mb = (fs & FS_META) ? meta_bytes(in->meta) : 0, ib = (size_t)in->n_tokens * 4, rb = (size_t)in->n_rows * 4;
    return !(((fs & FS_META) && (mb != g->fast_len[0] || mb > c->meta.cap)) ||
             ((fs & FS_IDS) && (in->n_tokens <= 0 || ib != g->fast_len[1] || ib > c->ids.cap)) ||
             ((fs & FS_ROWS) && (in->n_rows <= 0 || rb != g->fast_len[2] || rb > c->rows.cap)));
}

/* step_replay (MLXCEL_CUDA_FAST_REPLAY=1): the key's graph launched with new host inputs, without
 * the walk of its ops (~400 host calls a step for Qwen3-0.6B, during which the GPU has nothing of
 * the step to run). Taken only for a key whose captured step and at least one replayed step were
 * walked with step_replay's inputs equal, byte for byte, to what their ops uploaded (sr_note), with
 * no other stage read; else the caller walks the step, which is then compared. */
static mx_status c_step_replay(void *ctx, uint64_t key, const mx_step_inputs *in) {
    cu_ctx *c = (cu_ctx *)ctx;
    c->sr_in = NULL;
    if (!in || c->err || c->gmode != G_EAGER || !graphs_on(c))
        return MX_ERR_UNSUPPORTED;   /* (after a failure: the walk, whose step_end reports it) */
    cu_graph *g = graph_of(c, key);
    c->sr_in = in; c->sr_key = key;   /* the walk that follows compares them */
    if (!c->fast_replay || !g || !step_fast_ok(c, g, in)) return MX_ERR_UNSUPPORTED;
    const unsigned fs = g->fast_stages;
    const size_t ib = (size_t)in->n_tokens * 4, rb = (size_t)in->n_rows * 4;
    c->sr_in = NULL;
    OP_ENTER(c);   /* what an op before deferred runs before the step (as in step_begin) */
    if (c->stt.on) { stt_collect(c); c->stt.t_begin = stt_now(); }
    cu_stage *st[] = {&c->meta, &c->ids, &c->rows};
    for (int i = 0; i < 3; i++)   /* the last copy out of each (recorded after every graph launch and upload) */
        if (((fs >> i) & 1) && st[i]->ev) cudaEventSynchronize(st[i]->ev);
    if (fs & FS_META) meta_compose(c, in->meta, (int32_t *)c->meta.h);
    if (fs & FS_IDS) memcpy(c->ids.h, in->tokens, ib);
    if (fs & FS_ROWS) memcpy(c->rows.h, in->rows, rb);
    fast_launch(c, g, "step (graph, step_replay)");
    return MX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* greedy steps chained on the device (mx_model_greedy_launch)                                  */

/* top1_launch: k = 1 into result slot `slot`, not waited for; n_rows 0: whether it takes them */
static mx_status c_top1_launch(void *ctx, const float *logits, int n_rows, int vocab, int slot) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (!c->ch.on || c->err || c->gmode != G_EAGER || slot < 0 || slot > 1 || n_rows < 0 || n_rows > MX_CHAIN_MAX) return MX_ERR_UNSUPPORTED;
    if (n_rows == 0) return MX_OK;
    FLUSH_ALL(c);
    if (!pinned_at_least(c, &c->ch.h[slot], &c->ch.cap[slot], (size_t)MX_CHAIN_MAX * 12, "top-1 results")) return c->err;
    if (!c->ch.ev[slot] && cudaEventCreateWithFlags(&c->ch.ev[slot], cudaEventDisableTiming) != cudaSuccess) {
        c->ch.ev[slot] = NULL;
        cu_fail(c, MX_ERR_INTERNAL, "event", cudaGetLastError());
        return c->err;
    }
    if (!topk_enqueue(c, logits, n_rows, vocab, 1, c->ch.h[slot], c->ch.cap[slot])) return c->err ? c->err : MX_ERR_INTERNAL;
    CK(c, cudaEventRecord(c->ch.ev[slot], c->st), "event");
    if (c->prof) prof_mark(c, "top-1 (chain)");
    c->ch.last_slot = slot; c->ch.last_rows = n_rows; c->ch.vocab = vocab;
    return c->err;
}
static mx_status c_top1_wait(void *ctx, int slot, int n_rows, float *vals_host, int32_t *ids_host, float *lse_host) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (slot < 0 || slot > 1 || !c->ch.ev[slot] || n_rows < 1 || n_rows > MX_CHAIN_MAX)
        return mx_errorf(MX_ERR_INVALID_ARG, "cuda: top1_wait: no results in slot %d", slot);
    CK(c, cudaEventSynchronize(c->ch.ev[slot]), "top-1 wait");
    if (c->prof) prof_collect(c);
    if (c->err) return c->err;
    const char *h = (const char *)c->ch.h[slot];
    memcpy(vals_host, h, (size_t)n_rows * 4);
    memcpy(ids_host, h + (size_t)n_rows * 4, (size_t)n_rows * 4);
    memcpy(lse_host, h + (size_t)n_rows * 8, (size_t)n_rows * 4);
    return MX_OK;
}

/* a chained step's inputs: its tokens (the last top-1's ids, read from the pinned result slot)
 * and positions and KV slots (from the host, by value) written into the stages' pinned copies,
 * which the step's graph copies to the device first. An id outside the vocabulary (a NaN row) is
 * fed as 0 (the caller drops that step). */
struct chain_args { int n, vocab; int32_t pos[MX_CHAIN_MAX], slot[MX_CHAIN_MAX]; };
__global__ void k_chain_feed(chain_args a, const int32_t *__restrict__ ids, int32_t *meta_h, int32_t *ids_h) {
    const int i = threadIdx.x;
    if (i < a.n) {
        const int32_t t = ids[i];
        ids_h[i] = t >= 0 && t < a.vocab ? t : 0;
        meta_h[i] = a.pos[i];
        meta_h[a.n + i] = a.slot[i];
    }
    __threadfence_system();   /* (before the graph's copies read them) */
}

/* step_chain: step_replay of a step whose tokens are the last top1_launch's ids */
static mx_status c_step_chain(void *ctx, uint64_t key, const mx_step_inputs *in) {
    cu_ctx *c = (cu_ctx *)ctx;
    const int n = in ? in->n_tokens : 0;
    if (!c->ch.on || c->err || c->gmode != G_EAGER || !graphs_on(c) ||
        c->ch.last_slot < 0 || n < 1 || n > MX_CHAIN_MAX || c->ch.last_rows != n || in->n_rows != n || !in->rows || !in->meta ||
        in->meta->n_tokens != n || !in->meta->slot)
        return MX_ERR_UNSUPPORTED;
    for (int i = 0; i < n; i++) if (in->rows[i] != i) return MX_ERR_UNSUPPORTED;
    cu_graph *g = graph_of(c, key);
    const unsigned fs = g ? g->fast_stages : 0;
    if (!c->fast_replay || !g || (fs & (FS_META | FS_IDS)) != (FS_META | FS_IDS) || !step_fast_ok(c, g, in)) return MX_ERR_UNSUPPORTED;
    /* what the device does not write must be what the pinned copies hold: the sequence ids and
     * block tables (after the positions and slots), the logit rows (the host wrote them last
     * for a step of this key, and no write since; reading them while the device reads is safe) */
    const mx_attn_meta *m = in->meta;
    const int32_t *mh = (const int32_t *)c->meta.h;
    if (c->meta.len != meta_bytes(m) || !ints_same(mh + 2 * n, m->seq, (size_t)n) ||
        !ints_same_map(c, 2, mh + 3 * n, m->block_tables, (size_t)m->n_seqs * m->max_blocks) ||
        ((fs & FS_ROWS) && (c->rows.len != (size_t)n * 4 || memcmp(c->rows.h, in->rows, (size_t)n * 4))))
        return MX_ERR_UNSUPPORTED;
    int32_t *md = NULL, *idd = NULL, *res = NULL;
    if (cudaHostGetDevicePointer((void **)&md, c->meta.h, 0) != cudaSuccess || cudaHostGetDevicePointer((void **)&idd, c->ids.h, 0) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&res, c->ch.h[c->ch.last_slot], 0) != cudaSuccess) {
        cudaGetLastError();
        return MX_ERR_UNSUPPORTED;
    }
    c->sr_in = NULL;
    FLUSH_ALL(c);
    if (c->stt.on) c->stt.t_begin = stt_now();
    chain_args a;
    a.n = n; a.vocab = c->ch.vocab;
    for (int i = 0; i < n; i++) { a.pos[i] = m->pos[i]; a.slot[i] = kv_slot(c, m->slot[i]); }
    k_chain_feed<<<1, 32, 0, c->st>>>(a, res + n, md, idd);   /* (the ids follow the n values) */
    CK(c, cudaGetLastError(), "chain feed");
    fast_launch(c, g, "step (graph, chained)");
    c->ch.live = true;
    c->ch.last_slot = -1;   /* (the next chained step takes the next top-1's ids) */
    c->ch.steps++;
    return c->err;
}

extern "C" mx_status mx_backend_cuda_step_end(mx_backend *b) {
    cu_ctx *c = (cu_ctx *)b->ctx;
    const mx_step_inputs *sri = c->sr_in;   /* (step_replay's inputs for this walked step) */
    c->sr_in = NULL;
    if (c->gmode != G_REPLAY) OP_ENTER(c);   /* the deferred add belongs to this step */
    int mode = c->gmode;
    cu_graph *g = c->gcur;
    c->gmode = G_EAGER; c->gcur = NULL;
    if (mode == G_EAGER || mode == G_WARMUP) {
        if (mode == G_WARMUP && c->gbroken) g->bad = true;
        stt_end(c, false);
        return c->err;
    }
    if (mode == G_CAPTURE) {
        cudaGraph_t graph = NULL;
        cudaError_t e = cudaStreamEndCapture(c->st, &graph);
        if (e == cudaSuccess && !c->gbroken && c->g_op == g->n_fp) {
            graph_census(c, graph);
            e = cudaGraphInstantiate(&g->exec, graph, 0);
        }
        else if (e == cudaSuccess) e = cudaErrorUnknown;
        if (graph) cudaGraphDestroy(graph);
        if (e != cudaSuccess) {
            cudaGetLastError();
            g->bad = true; g->exec = NULL;
            stage_forget(c);
            return mx_errorf(MX_ERR_INTERNAL, "cuda: capturing a step into a graph failed (%s); its ops did not run",
                             c->gbroken ? "the op sequence differed from the first step of this key" : cudaGetErrorString(e));
        }
    } else if (c->gbroken || c->g_op != g->n_fp) {
        g->bad = true;
        stage_forget(c);
        return mx_errorf(MX_ERR_INTERNAL, "cuda: step differs from the graph of its key (op %d of %d); its ops did not run",
                         c->g_op, g->n_fp);
    }
    sr_note(c, g, sri);   /* a captured or replayed step, walked: may step_replay take the key? */
    graph_launch(c, g, mode == G_REPLAY, "step (graph)");   /* (a capturing step, with its instantiation, is not timed) */
    return c->err;
}

static void stage_free(cu_stage *s) {
    if (s->h) cudaFreeHost(s->h);
    if (s->d) cudaFree(s->d);
    if (s->ev) cudaEventDestroy(s->ev);
    memset(s, 0, sizeof *s);
}

extern "C" void mx_backend_cuda_free(mx_backend *b) {
    if (!b || !b->ctx) return;
    cu_ctx *c = (cu_ctx *)b->ctx;
    FLUSH_ALL(c);   /* deferred work first (its launches still mark the profile) */
    cudaStreamSynchronize(c->st);
    trace_write(c);
    fd_release(c);   /* (its counters into the profile) */
    if (c->prof) {
        prof_report(c);
        for (int i = 0; i < PROF_N; i++) cudaEventDestroy(c->prof->ev[i]);
        free(c->prof);
        c->prof = NULL;
    }
    c_kv_free(c);
    stage_free(&c->meta); stage_free(&c->ids); stage_free(&c->rows); stage_free(&c->tiles);
    for (int i = 0; i < c->n_rf; i++) free(c->rf[i].h);
    for (int i = 0; i < c->n_sk; i++) free(c->sk[i].h);
    for (int i = 0; i < MX_GRAPHS; i++) {
        if (c->graphs[i].exec) cudaGraphExecDestroy(c->graphs[i].exec);
        free(c->graphs[i].fp);
    }
    if (c->g_done) cudaEventDestroy(c->g_done);
    for (int i = 0; i < 2; i++) {
        if (c->stt.e0[i]) cudaEventDestroy(c->stt.e0[i]);
        if (c->stt.e1[i]) cudaEventDestroy(c->stt.e1[i]);
    }
    if (c->blas_ws) cudaFree(c->blas_ws);
    if (c->wscratch) cudaFree(c->wscratch);
    if (c->xscratch) cudaFree(c->xscratch);
    if (c->gpart) cudaFree(c->gpart);
    if (c->strk_part) cudaFree(c->strk_part);
    if (c->strk_cnt) cudaFree(c->strk_cnt);
    if (c->rn_count) cudaFree(c->rn_count);
    if (c->epi_part) cudaFree(c->epi_part);
    if (c->i8e_cnt) cudaFree(c->i8e_cnt);
    if (c->att_cnt) cudaFree(c->att_cnt);
    if (c->asp_acc) cudaFree(c->asp_acc);
    if (c->asp_ml) cudaFree(c->asp_ml);
    if (c->asp_cnt) cudaFree(c->asp_cnt);
    if (c->ao_part) cudaFree(c->ao_part);
    free(c->at);
    if (c->xq) cudaFree(c->xq);
    if (c->xq2) cudaFree(c->xq2);
    if (c->xg) cudaFree(c->xg);
    if (c->xg2) cudaFree(c->xg2);
    if (c->tk) cudaFree(c->tk);
    if (c->tkh) cudaFreeHost(c->tkh);
    if (c->tkc) cudaFree(c->tkc);
    for (int i = 0; i < 2; i++) {
        if (c->ch.h[i]) cudaFreeHost(c->ch.h[i]);
        if (c->ch.ev[i]) cudaEventDestroy(c->ch.ev[i]);
    }
    if (c->pdl_host) cudaFreeHost(c->pdl_host);
    for (size_t i = 0; i < c->n_owned; i++) cudaFree(c->owned[i]);
    for (size_t i = 0; i < c->n_owned_h; i++) free(c->owned_h[i]);
    free(c->owned); free(c->owned_h);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->st);
    free(c);
    b->ctx = NULL; b->i = NULL;
}

/* Free/total memory of the device mx_backend_cuda_init would open (MLXCEL_CUDA_DEVICE or 0). */
extern "C" bool mx_backend_cuda_meminfo(uint64_t *free_bytes, uint64_t *total_bytes) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) { cudaGetLastError(); return false; }
    int dev = 0;
    const char *e = getenv("MLXCEL_CUDA_DEVICE");
    if (e && *e) dev = atoi(e);
    if (dev < 0 || dev >= count || cudaSetDevice(dev) != cudaSuccess) { cudaGetLastError(); return false; }
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) { cudaGetLastError(); return false; }
    *free_bytes = f;
    *total_bytes = t;
    return true;
}
