/* mlxcel/backend_cuda.h: the CUDA backend's entry points (backend/cuda) and device selection
 * (backend/select.c: CPU or GPU from MLXCEL_DEVICE and what the machine has). The op set itself
 * is mlxcel/backend.h; this header adds only what a caller needs to pick and describe a device.
 *
 * mx_backend_cuda_* exist only in builds made with -DMLXCEL_CUDA=ON (MLXCEL_HAVE_CUDA defined);
 * mx_backend_auto_* exist in every build.
 *
 * Thread safety: init/free from one thread; a backend instance is used by one thread at a time. */
#ifndef MLXCEL_BACKEND_CUDA_H
#define MLXCEL_BACKEND_CUDA_H

#include "mlxcel/backend.h"

/* Open the first CUDA device (or MLXCEL_CUDA_DEVICE=N). Fails with MX_ERR_UNSUPPORTED and a
 * message (mx_last_error) when there is no usable GPU, or when the compiled architectures do
 * not cover the GPU (the message names both). Logs the device, its memory and the compiled
 * architectures at info level. */
mx_status mx_backend_cuda_init(mx_backend *out);
void mx_backend_cuda_free(mx_backend *b);
/* The compiled CUDA architectures, e.g. "sm_90a + PTX compute_90". */
const char *mx_backend_cuda_archs(void);
/* One line describing the device ("NVIDIA H200, sm_90, 139.8 GiB (139.2 free), 132 SMs; built
 * for ..."), written to buf. */
void mx_backend_cuda_describe(const mx_backend *b, char *buf, size_t n);
/* Ops return no status; the first failure of an asynchronous op (launch error, out of memory
 * in a scratch buffer, bad argument) is kept here until read. MX_OK when all went well. */
mx_status mx_backend_cuda_status(const mx_backend *b);
/* CUDA graphs for repeated steps (decode). Wrap the ops of one forward pass in
 * step_begin(key) ... step_end: the first step with a key runs normally and records the op
 * sequence, the second is captured into a CUDA graph and launched, later ones launch the graph
 * (the ops then only refresh their host inputs: attention metadata, token ids, gathered rows).
 * The key must determine the op sequence and its buffers and sizes (e.g. n_tokens, n_seqs and
 * max_blocks of a decode batch, with the model's fixed activation buffers); only ops may run
 * inside a step: no alloc/free/write/read/sync (read the logits after step_end). If a step
 * differs from its key's first one, step_end returns MX_ERR_INTERNAL, the step's ops did not run
 * (run them again outside a step) and the key runs without a graph from then on.
 * MLXCEL_CUDA_GRAPHS=auto (the default) takes graphs only while the weights prepared on the
 * backend hold less than 1 GiB: for larger models the kernels, not their launches, bound a step,
 * and replays measured 1-2% slower than the same launches (Llama-3.1-8B q4 on an H200).
 * MLXCEL_CUDA_GRAPHS=1 always takes them, 0 never (steps then run op by op). */
mx_status mx_backend_cuda_step_begin(mx_backend *b, uint64_t key);
mx_status mx_backend_cuda_step_end(mx_backend *b);
/* The graph policy (tests): mode 0 never, 1 always, 2 auto with that bound in bytes. */
void mx_backend_cuda_set_graphs(mx_backend *b, int mode, int64_t auto_bytes);
/* The time split of steps (mlxcel bench --split): with timing on, each step_begin ... step_end
 * adds the host time from step_begin to the step's launch (walk_s: the ops' host work; for a
 * replayed step the GPU has nothing of the step to run meanwhile) and the GPU time of the step's
 * work (gpu_s: events around the graph launch for replayed steps; from step_begin to step_end
 * for steps run op by op, which includes the waits for the host's launches), and the same for the
 * replayed steps alone (graph_*; a step that captures a graph, with its instantiation, is not
 * counted). A step is counted once its events are read: at the next step_begin
 * or by step_split_get (which waits for the last step). step_timing(on) resets the sums; it may
 * not be called inside a step (MX_ERR_INVALID_ARG). Timing records two events a step, nothing
 * inside a graph. */
typedef struct mx_cuda_step_split {
    long steps, graph_steps;
    double walk_s, gpu_s;              /* all counted steps */
    double graph_walk_s, graph_gpu_s;  /* the steps launched as graphs */
    double graph_launch_s;             /* the host's time inside their graph launch calls */
} mx_cuda_step_split;
mx_status mx_backend_cuda_step_timing(mx_backend *b, bool on);
void mx_backend_cuda_step_split_get(mx_backend *b, mx_cuda_step_split *out);
/* step_replay (the backend op): a recorded decode step launched again from its host inputs alone,
 * without the walk of its ops, once its captured step and a replayed one were walked with those
 * inputs equal, byte for byte, to what the ops uploaded (the key's later steps then skip ~400 host
 * calls for Qwen3-0.6B, during which the GPU had nothing to run); with it on, a walked graph step
 * also uploads those inputs at its start, so that its graph's copies precede its first kernel.
 * Off by default until measured on a GPU; MLXCEL_CUDA_FAST_REPLAY=1 at init. Returns the previous setting (setting it drops the
 * recorded graphs); the count is of such launches (they count as graph launches too). */
bool mx_backend_cuda_set_fast_replay(mx_backend *b, bool on);
int mx_backend_cuda_fast_replays(mx_backend *b);
/* The topk op in one launch (both phases: the block that finishes a row's last chunk merges it),
 * launched with PDL, its results written by the device straight into pinned host memory when
 * they are small (8 KB: a batch-1 step's), so a decode step's tail is one kernel and no copy.
 * The same results, bit for bit, as the two-launch form. Off by default until measured on a GPU;
 * MLXCEL_CUDA_TOPK_ONE=1 at init. Returns the previous setting; the counts are of its launches and
 * of those that wrote into host memory. */
bool mx_backend_cuda_set_topk_one(mx_backend *b, bool on);
void mx_backend_cuda_topk_one_launches(mx_backend *b, int *launches, int *mapped);
/* Greedy steps chained on the device (the top1_launch, top1_wait and step_chain ops; used by
 * mx_model_greedy_launch): a step that step_replay would take is launched right after the last
 * step's top-1, its tokens fed from the top-1's results by a small kernel that also writes its
 * positions and KV slots into the pinned stages its graph copies, so that the host reads each
 * token while the next step runs. On by default (the twenty-sixth session: +1.7% against the
 * host reading each token on Qwen3-0.6B q4 batch 1); MLXCEL_CUDA_CHAIN=0 at init turns it off:
 * the ops then take nothing, and generation waits for each token. Returns the previous setting (setting
 * it drops the recorded graphs); the count is of the steps chained. */
bool mx_backend_cuda_set_chain(mx_backend *b, bool on);
long mx_backend_cuda_chain_steps(mx_backend *b);
/* How many steps ran as a graph launch so far (tests). */
int mx_backend_cuda_graph_launches(mx_backend *b);
/* The last graph captured: its nodes, and its edges by kind: edges3[0] ordinary, [1] programmatic
 * (the next kernel may start at the previous one's trigger), [2] programmatic at the previous
 * one's launch completion. MLXCEL_CUDA_PROFILE=1 prints them at exit too. */
void mx_backend_cuda_graph_census(mx_backend *b, int *nodes, int *edges3);
/* Check the MLXCEL_CUDA_* switches (ATTN, ATTN_GQA, GEMM, PDL, MV, PROFILE, KV, GRAPHS, FUSED, DQ_MB)
 * against their values without opening a device: MX_ERR_INVALID_ARG naming the variable and what
 * it takes. mx_backend_cuda_init checks the same; mx_backend_auto_init checks them first. */
mx_status mx_backend_cuda_check_env(void);
/* Tests (no GPU needed): where the cache row of `slot` in `layer` lies in a KV pool of geometry d,
 * in rows from the pool's start, under MLXCEL_CUDA_KV_LAYOUT's value lay (0 layer, 1 block), as the
 * kernels address it: through the slot (by_table 0, the cache writes) or through the block table
 * (by_table 1, the attention's reads). -1 where the kernels skip it. */
int64_t mx_backend_cuda_kv_row(int lay, const mx_kv_desc *d, int layer, int32_t slot, int by_table);
/* Benchmark helper: device-to-device copy rate in GB/s (bytes read + bytes written, median of
 * 9 copies of `bytes`), the memory-bandwidth ceiling that kernel figures are compared with. */
double mx_backend_cuda_bench_copy(const mx_backend *b, size_t bytes);
/* Benchmark helper: the read-only rate in GB/s (median of 9 passes over `bytes`): form 0 16-byte
 * loads from every thread, form 1 bulk copies into shared memory as the batch-1 rings stream their
 * weights (sm_90; 0 below it). The ceiling a decode step's weight reads can reach. */
double mx_backend_cuda_bench_read(const mx_backend *b, size_t bytes, int form);
/* Benchmark helper: what a persistent decode kernel's synchronization costs, us a round (`rounds`
 * a kernel): us[0] a grid barrier of one block a multiprocessor, us[1] / us[2] it with an exchange
 * of 8 partial rows of 1024 / 4096 floats (written by all blocks, then read and summed by each),
 * us[3] / us[4] a cluster of 8's barrier without / with a distributed-shared-memory exchange, us[5] /
 * us[6] the same for clusters of 16, us[7] / us[8] a layer's skeleton of the layout NOTES.md's
 * forty-third session proposes (four cluster exchanges and two of 8 rows of 1024 floats over the
 * grid) on every resident cluster of 8 / 16; clusters[0, 1] how many clusters of 8 / 16 are
 * resident at once. -1: not measured. Needs sm_90 (MX_ERR_UNSUPPORTED below it). */
mx_status mx_backend_cuda_bench_sync(const mx_backend *b, int rounds, double us[9], int clusters[2]);
/* Matrix-vector products (n <= 16 rows) of q4/q8 weights quantize the activations to int8 per
 * group of 32 by default (DP4A; error like bf16 activations). On: f32 activations instead (the
 * default under MLXCEL_PRECISE=1 or MLXCEL_CUDA_MV=f32). For tests and comparisons. */
void mx_backend_cuda_set_exact_matvec(mx_backend *b, bool on);
/* Prompt attention through the tiled kernel (shared K/V tiles for up to 64 tokens of a sequence)
 * instead of one block per (token, head); on by default, MLXCEL_CUDA_ATTN=pertoken turns it off. */
void mx_backend_cuda_set_tiled_attention(mx_backend *b, bool on);
/* Within the tiled prompt attention, the tensor-core kernel (bf16 KV cache, head size 32/64/128);
 * on by default, MLXCEL_CUDA_ATTN=tiled (CUDA cores) or =pertoken turns it off. */
void mx_backend_cuda_set_mma_attention(mx_backend *b, bool on);
/* Decode attention through the kernel with 16-byte K/V loads (head sizes 64 and 128, and 256 with
 * the bf16 cache; a power-of-two cache block size); on by default, MLXCEL_CUDA_ATTN_DEC=lanes at
 * init (or off here) keeps the kernel whose lanes split a head's values (any head size). */
void mx_backend_cuda_set_vec_attention(mx_backend *b, bool on);
/* One-token decode: the deferred q/k norms and ropes and the cache write done inside that kernel
 * (its 16-warp form) instead of a q/k preparation kernel before it: 1 (default) where the product
 * before it (q/k/v) had dense bf16 weights or the heads have no q/k norm (measured faster there;
 * after q4 products with q/k norms, Qwen3-0.6B's, slower), 2 always, 0 never;
 * MLXCEL_CUDA_ATTN_PREP=bf16|1|0 at init sets the same. Returns the previous mode; the count is
 * of attentions that did it. */
int mx_backend_cuda_set_attn_prep(mx_backend *b, int mode);
int mx_backend_cuda_attn_prep_launches(mx_backend *b);
/* One-token decode: the decode attention (its 16-warp form) reads the block table and its first
 * chunk of cached keys and values before it waits for the kernel before it (PDL), all but the
 * token's own slot, which that kernel may be writing. On by default; MLXCEL_CUDA_ATTN_EARLY=0 at
 * init turns it off. Returns the previous setting; the count is of attentions that did it. */
bool mx_backend_cuda_set_attn_early(mx_backend *b, bool on);
int mx_backend_cuda_attn_early_launches(mx_backend *b);
/* Decode attention over long contexts with few (token, head) blocks (batch 1..few): each head's
 * positions split over up to SPLITS blocks, runs of at least MIN_SPAN positions, merged by the
 * last block of the head (the same output up to float rounding). SPLITS 0: as many as fill two
 * blocks a multiprocessor (the default; MLXCEL_CUDA_ATT_SPLIT at init), 1: off; MIN_SPAN 256 by
 * default (MLXCEL_CUDA_ATT_SPLIT_MIN); a negative argument leaves that setting. Returns the
 * previous SPLITS; the count is of attentions launched split (each of their tokens cuts its own
 * runs, one where it has few positions). */
int mx_backend_cuda_set_attn_split(mx_backend *b, int splits, int min_span);
int mx_backend_cuda_attn_split_launches(mx_backend *b);
/* One-token decode with the early loads above: extra blocks of the attention's grid prefetch into
 * L2 up to MIB MiB of the weights of the product that followed the same layer's attention in the
 * previous step (a hint: no result changes). Off (0) by default until measured on a GPU;
 * MLXCEL_CUDA_ATTN_L2PF=MiB at init. Returns the previous setting; the count is of attentions that
 * prefetched, the bytes those the last of them asked for. */
int mx_backend_cuda_set_attn_l2pf(mx_backend *b, int mib);
int mx_backend_cuda_attn_l2pf_launches(mx_backend *b);
int64_t mx_backend_cuda_attn_l2pf_bytes(mx_backend *b);
/* One-row dense bf16 matvecs (k_mv_dense_sk, not on the bulk-copy ring) of up to 4,096 columns in
 * a form with half the weight registers, so that twice the blocks load their rows before the PDL
 * wait (the o projection during the attention); the same sums. Off by default until measured on
 * a GPU; MLXCEL_CUDA_MV_DENSE_SHORT=1 at init. Returns the previous setting; the count is of its
 * launches. */
bool mx_backend_cuda_set_mv_dense_short(mx_backend *b, bool on);
int mx_backend_cuda_mv_dense_short_launches(mx_backend *b);
/* Decode attention with the query heads of a KV head in one block (each K/V row read once for
 * them): 1 (default) when the batch has enough blocks for it, 0 never (MLXCEL_CUDA_ATTN_GQA=0 at
 * init), 2 always (for tests). */
void mx_backend_cuda_set_gqa_attention(mx_backend *b, int mode);
/* How q4 products of more than 16 rows run (MLXCEL_CUDA_GEMM at init takes the same names):
 * "auto" (default): 17..64 rows, and 65..128 rows of weights with >= 4096 columns, through the
 * tensor-core GEMM on packed weights (weights dequantized in registers, cp.async stages, a set of
 * weights in one launch; on an sm_90 GPU its wgmma form), the rest dequantized to bf16 for
 * cuBLAS; "cublas": always the latter; "mma": the GEMM on packed weights with mma.sync for every
 * 17..128 rows; "wgmma": the same with its wgmma form where the GPU runs it (else mma.sync).
 * The wgmma form reads a second copy of the scales (4 bytes a group), made as weights are
 * prepared unless the mode at init (MLXCEL_CUDA_GEMM) is mma or cublas; weights prepared then keep
 * the mma.sync form. Anything else is MX_ERR_INVALID_ARG. */
mx_status mx_backend_cuda_set_gemm(mx_backend *b, const char *mode);
/* Whether the wgmma form of the GEMM on packed weights runs on this GPU (sm_90 with the sm_90a
 * code loaded). */
bool mx_backend_cuda_has_wgmma(mx_backend *b);
/* Experimental, off by default (MLXCEL_CUDA_GEMM_PAIR=1 at init turns it on): a gate/up product
 * (matmul_multi of two q4 weights of equal rows, 17..128 rows of x, the wgmma form without a split
 * of k) followed by act_mul in place on its outputs runs as one launch, the activation in the
 * GEMM's epilogue. The memory then holds what the two ops leave (up in its buffer, act(gate) * up
 * in gate's). Correct on the H200, and as fast as the two launches there since its epilogue runs on
 * all warps (Llama-8B, 128 sequences: 14,016 / 14,013 against 14,003 / 13,988 tok/s; 32 sequences
 * 0.2-0.7% slower); see src/backend/cuda/NOTES.md. */
void mx_backend_cuda_set_gemm_pair(mx_backend *b, bool on);
/* How many gate/up products ran in that fused form so far (tests). */
int mx_backend_cuda_pair_launches(mx_backend *b);
/* The wgmma GEMM's k loop rotated by block (MLXCEL_CUDA_GEMM_ROT, on by default): each block
 * starts at its own step, so a row's sum is taken in an order that depends on its block. Returns
 * the previous setting (tests switch it off to compare forms whose blocks differ). */
bool mx_backend_cuda_set_gemm_rot(mx_backend *b, bool on);
/* Stream-K for the wgmma GEMM on packed q4 weights (MLXCEL_CUDA_GEMM_SK, on by default): where a
 * product's tiles (256 or 128 weight rows by all of its 17..128 rows of x) leave the last wave of
 * blocks short and there are at least half a wave of them, one block a slot of the GPU takes an
 * equal run of (tile, k step) units; a tile shared by blocks is summed in k order by the block of
 * its first part (deterministic for a GPU). mode 0 turns it off; grid > 0 (tests) takes it
 * wherever the form applies, over that many blocks (at most the slots). Returns the previous mode. */
int mx_backend_cuda_set_gemm_sk(mx_backend *b, int mode, int grid);
/* How many products ran that way so far (tests). */
int mx_backend_cuda_sk_launches(mx_backend *b);
/* 17..32 rows of x through the wgmma GEMM's 32-token tiles (MLXCEL_CUDA_GEMM_N32, on by default;
 * off: its 64-token tiles, half of each empty). Returns the previous setting. */
bool mx_backend_cuda_set_gemm_n32(mx_backend *b, bool on);
/* How many products ran on the 32-token tiles so far (tests). */
int mx_backend_cuda_n32_launches(mx_backend *b);
/* The wgmma GEMM's stages copied by the tensor memory accelerator (MLXCEL_CUDA_GEMM_TMA, 2 by
 * default, src/backend/cuda/NOTES.md). 0: every thread's cp.async. 1: the 32- and 64-token tiles'
 * whole stages (14% slower in the forty-first session): one thread issues a k step's copies (tensor
 * maps of the weights, made at load, and of x, made at each launch), completion and release on
 * mbarriers, no block barrier in the k loop. 2: x alone, one swizzled box a step by one thread, in
 * every tile but the 32-token tiles' stream-K launches (those as 0); the weights and pairs by
 * cp.async as in 0. 3: as 2 in every launch. Where the maps cannot be made the cp.async form runs.
 * Returns the previous mode. */
int mx_backend_cuda_set_gemm_tma(mx_backend *b, int mode);
/* How many products ran in either TMA form so far (tests). */
int mx_backend_cuda_tma_launches(mx_backend *b);
/* The batch-1 q4/q8 matvec on weights bulk-copied into shared memory (MLXCEL_CUDA_MV_RING, on by
 * default on sm_90 and later; rows of at most 4096 columns): one block a multiprocessor, a ring of
 * slots a warp. on false: the register form (k_mv_i8) for all; kb, warps, slot > 0 set the ring's
 * kilobytes a block, warps a block and the most code bytes a slot takes (as
 * MLXCEL_CUDA_MV_RING_KB, _WARPS, _SLOT; 0 keeps the current value, < 0 restores the one of init).
 * The results are bit for bit those of the register form. Returns the previous on/off. */
bool mx_backend_cuda_set_mv_ring(mx_backend *b, bool on, int kb, int warps, int slot);
/* How many products ran that way so far (tests). */
int mx_backend_cuda_ring_launches(mx_backend *b);
/* Dense bf16 batch-1 products through the ring (k_mv_ring_bf; MLXCEL_CUDA_MV_RING_BF16): 0 never,
 * 1 ("norm") only those that run the rmsnorm of their x (q/k/v, gate/up, the LM head), 3 ("long",
 * the default) those and the products of rows longer than 4096 columns (Llama-8B's down), 2 ("1")
 * all; returns the previous mode. */
int mx_backend_cuda_set_mv_ring_bf16(mx_backend *b, int mode);
/* The batch-1 rmsnorm of a product's x run in that product's prologue, one launch for both
 * (MLXCEL_CUDA_RING_NORM): 0 never, 1 ("bf16", the default) for dense bf16 products (k_mv_ring_bf),
 * 2 ("1") also q4/q8 ones (k_mv_ring; at parity with the norm kernel on Llama-8B and Qwen3-0.6B
 * q4 since the fourteenth session, slower before; not the default). Returns the previous mode.
 * Then: how many ring launches ran the norm (tests). */
int mx_backend_cuda_set_ring_norm(mx_backend *b, int mode);
int mx_backend_cuda_ring_norm_launches(mx_backend *b);
/* A batch-1 gate/up pair on the ring, of dense bf16 weights (k_mv_ring_bf) or q4/q8 ones of rows
 * a multiple of 32 (k_mv_ring, which also writes the int8 form of the act_mul's output that the
 * down product reads), and the act_mul of its outputs in place (y = act(gate) * up over gate) in
 * one launch (MLXCEL_CUDA_RING_PAIR, on by default): the product waits for the next op, and runs
 * as it is if that is not such an act_mul. The memory then holds what the two ops leave, bit for
 * bit. Returns the previous on/off. Then: how many launches ran a pair that way (tests). */
bool mx_backend_cuda_set_ring_pair(mx_backend *b, bool on);
int mx_backend_cuda_ring_pair_launches(mx_backend *b);
/* A batch-1 act_mul (y = act(gate) * up) run in the prologue of the q4/q8 ring product (k_mv_ring)
 * that reads y (MLXCEL_CUDA_RING_ACT; off by default: Qwen3-0.6B q4 decode 8-11% slower on the
 * H200): the act_mul waits for the next op, and launches as it is if that is not such a product.
 * The memory then holds what the two ops leave, bit for bit. Returns the previous on/off. Then: how many launches ran it (tests). */
bool mx_backend_cuda_set_ring_act(mx_backend *b, bool on);
int mx_backend_cuda_ring_act_launches(mx_backend *b);
/* A batch-1 q4/q8 ring product of one weight (o, down; rows a multiple of 32), the residual add of
 * its output and the rmsnorm of the sum in one launch, which leaves the norm's output as the int8
 * form of sum * (g + add_one) and the parts of the sum of squares; the q4/q8 ring product that reads
 * the norm's output applies the norm's scale and stores the norm's output (MLXCEL_CUDA_RING_EPI).
 * On by default (Qwen3-0.6B q4 decode 3-4% faster on an H100; MLXCEL_CUDA_RING_EPI=0 at init: off).
 * The three ops wait for the fourth, and run as they are if it is not such a product. The memory
 * then holds what the ops leave (the norm's output and what follows within rounding: the sum of
 * squares is reduced in another order, x quantized before the scale). Returns the previous on/off.
 * Then: launches of the product with the add (tests), and of products on the scaled form. */
bool mx_backend_cuda_set_ring_epi(mx_backend *b, bool on);
int mx_backend_cuda_ring_epi_launches(mx_backend *b);
int mx_backend_cuda_ring_sc_launches(mx_backend *b);
/* With RING_EPI, a q4/q8 product the ring does not take (rows longer than 4096 columns, e.g.
 * Llama-8B's down; rows a multiple of 32, at most 5,120) with the add and the norm's parts in the
 * epilogue of the register matvec instead (a counter a group of 32 rows; MLXCEL_CUDA_I8_EPI=0 at
 * init: off). Returns the previous on/off; then its launches (tests). */
bool mx_backend_cuda_set_i8_epi(mx_backend *b, bool on);
int mx_backend_cuda_i8_epi_launches(mx_backend *b);
/* With RING_EPI, such a product of rows longer than 4,096 columns (at most 16,384; Llama-8B's down)
 * on the bulk-copy ring instead, x's int8 form staged in its shared memory, one block a group of 32
 * rows (MLXCEL_CUDA_RING_LONG=0 at init: off, I8_EPI then). The same bits as the register matvec.
 * Returns the previous on/off; then its launches (tests). */
bool mx_backend_cuda_set_ring_long(mx_backend *b, bool on);
int mx_backend_cuda_ring_long_launches(mx_backend *b);
/* The batch-1..16 q4/q8 register matvec (k_mv_i8) asking the L2 for its weights `steps` steps of
 * its loop ahead (1 by default: Llama-8B q4 decode +2.8% on an H100; 0 none; at most 8;
 * MLXCEL_CUDA_MV_PF at init). Only timing changes. Returns the previous value. */
int mx_backend_cuda_set_mv_pf(mx_backend *b, int steps);
/* The q4/q8 products of `rows` .. 16 rows of x (decode of a few sequences) on int8 tensor cores
 * (k_mv_mma: mma.m16n8k32, 16 weight rows x 8 rows of x a group of 32 columns, the weights streamed
 * through shared memory) instead of k_mv_i8's DP4A; 0: k_mv_i8 for all. The same int8 form of x and
 * the same terms, summed in another order. Default 8 (MLXCEL_CUDA_MV_MMA at init; on an H100 at 8
 * and 16 sequences Qwen3-0.6B q4 decode +48% / +117%, Llama-8B q4 +19% / +104%; at 4, +17% / -5%;
 * at 2, even / -18%). MLXCEL_CUDA_MV_MMA_PFX=1 at init: each warp asks L1 for its next chunk's x.
 * Returns the previous value; then its launches (tests). */
int mx_backend_cuda_set_mv_mma(mx_backend *b, int rows);
int mx_backend_cuda_mv_mma_launches(mx_backend *b);
/* k_mv_mma's form: 1 (a warp 16 rows, 4 warps a row tile along k), 2 (a warp 32 rows sharing each
 * load of x, one 180 KB block a multiprocessor, 1-8 warps along k chosen by the weights' shape) or
 * 0, auto (the default: 2 above 8 rows of x, 1 up to 8; MLXCEL_CUDA_MV_MMA_FORM=auto|1|2 at init).
 * The same sums per (row, group); the order of the warps' partial sums differs. Returns the
 * previous form. */
int mx_backend_cuda_set_mv_mma_form(mx_backend *b, int form);
/* k_mv_mma's stages a warp, 2-4 (default 2; MLXCEL_CUDA_MV_MMA_STAGES at init), fewer where that
 * many do not fit (a stage holds the chunk of x too, up to 16 rows of x): fewer take less shared
 * memory, so that more blocks fit a multiprocessor. Only timing changes. Returns the previous. */
int mx_backend_cuda_set_mv_mma_stages(mx_backend *b, int stages);
/* k_mv_mma for 17..32 rows of x too (x quantized to int8 for it), ahead of the tensor-core GEMMs;
 * off by default (MLXCEL_CUDA_MV_MMA_WIDE at init). Returns the previous on/off. */
bool mx_backend_cuda_set_mv_mma_wide(mx_backend *b, bool on);
/* A batch-1 attention (one token, a bf16 cache, head size 64 or 128, the EARLY form) and the q4 o
 * product of its output in one launch (MLXCEL_CUDA_ATT_O; with MLXCEL_CUDA_RING_EPI; off by default): the attention
 * waits for the next op; an o product of its output (q4, no bias, a head's columns of it at most 96 KB:
 * Qwen3-0.6B's 72 KB) takes it, and with the residual add and the rmsnorm after it waits as the ring
 * product above does. The product that reads the norm's output then launches the attention, whose
 * blocks each multiply their head's output by their columns of o (in shared memory, copied before the
 * wait on the kernel before) and whose last block adds the heads' parts, the residual, and leaves the
 * norm's inputs as the ring product's epilogue does. Off by default (MLXCEL_CUDA_ATT_O=1 at init: on).
 * o's output is the heads' parts added in head order (the ring's int8 arithmetic a group of 32, summed
 * in another order: within rounding of the product's). Returns the previous on/off; then the
 * attentions launched with o (tests). */
bool mx_backend_cuda_set_att_o(mx_backend *b, bool on);
int mx_backend_cuda_att_o_launches(mx_backend *b);
/* The most blocks of that first product (0, the default: three quarters of the multiprocessors, a
 * multiple of 8; never more than one a multiprocessor or one a group of 32 rows; MLXCEL_CUDA_EPI_BLOCKS
 * at init): fewer than one a multiprocessor leave some free, on which the product after the norm (a
 * gate/up pair) starts copying its weights before the first ends (Llama-8B q4 decode ~1% faster on
 * an H100 at 96 of 132). Returns the previous. */
int mx_backend_cuda_set_epi_blocks(mx_backend *b, int n);
/* A batch-1 q4/q8 gate/up pair on the ring as blocks of half the ring's warps with a small ring, two a
 * multiprocessor, so that one fits beside a block of the product before it and starts copying its
 * weights before that one ends: 2 (default) where the pair has at least two groups of 32 rows a
 * multiprocessor (Llama-8B: +0.45% on an H100; Qwen3-0.6B's pair, fewer groups than multiprocessors,
 * measured 4.3% slower in half blocks), 1 always, 0 never (MLXCEL_CUDA_PAIR_HALF=auto|1|0 at init).
 * The same bits either way. Returns the previous mode. */
int mx_backend_cuda_set_pair_half(mx_backend *b, int mode);
int mx_backend_cuda_pair_half_launches(mx_backend *b);
/* On by default (MLXCEL_CUDA_SUM_NORM=0 at init turns it off; Llama-8B, 128 sequences: 13,525
 * against 13,266 tok/s on the H200): a product split along k by the GEMM on packed q4 weights (one weight, no bias,
 * 17..128 rows of x), then an add of its output, then an rmsnorm of that sum: the rmsnorm reads
 * the split's partial sums itself (the same sums, in the same order), and the separate sum
 * kernel is not launched. The memory then holds what the three ops leave. */
void mx_backend_cuda_set_sum_norm(mx_backend *b, bool on);
/* How many rmsnorms read partial sums that way so far (tests). */
int mx_backend_cuda_sum_norm_launches(mx_backend *b);
/* On by default (MLXCEL_CUDA_SUM_QKV=0 at init turns it off): a q/k/v product (three weights,
 * no bias) split along k by the GEMM on packed q4 weights, then the per-head norms and ropes of
 * q and k, then the attention of those q, k, v: the attention's q/k preparation (one kernel, with
 * the cache write) adds the split's partial sums itself, and the separate sum kernel is not
 * launched. The memory then holds what the ops leave (v: the sums). */
void mx_backend_cuda_set_sum_qkv(mx_backend *b, bool on);
/* How many q/k preparations read partial sums that way so far (tests). */
int mx_backend_cuda_sum_qkv_launches(mx_backend *b);
/* On by default (MLXCEL_CUDA_ATT_GQ=0 at init turns it off): the decode attention kernels, for
 * more than 16 tokens, also store their output in the bf16 form the GEMM on packed q4 weights
 * reads (k order permuted within each 64), so the o projection does not convert it first. */
void mx_backend_cuda_set_att_gq(mx_backend *b, bool on);
/* How many conversions of activations to that form ran so far (tests). */
int mx_backend_cuda_cvt_gq_launches(mx_backend *b);
/* Programmatic dependent launch for the backend's kernels: each may start while the previous
 * kernel finishes and waits for it on the device. On by default; MLXCEL_CUDA_PDL=0 at init turns
 * it off. */
void mx_backend_cuda_set_pdl(mx_backend *b, bool on);
/* With PDL, in decode (products of <= 16 rows) kernels also release their dependents at entry
 * and the matvecs load their first weights before waiting for the previous kernel. On by default
 * (MLXCEL_CUDA_PDL=2); MLXCEL_CUDA_PDL=1 at init waits only. */
void mx_backend_cuda_set_pdl_early(mx_backend *b, bool on);
/* The early release (as set_pdl_early(on)) with every kernel releasing before its own wait (on;
 * MLXCEL_CUDA_PDL=3 at init), so that the next kernel's blocks may become resident and start
 * their loads of weights and cache while this one still waits; off: after its wait (=2). */
void mx_backend_cuda_set_pdl_entry(mx_backend *b, bool on);

/* Experimental, off by default (MLXCEL_CUDA_FUSED=1 at init turns it on): the decode_layers op, a
 * plain pre-norm decoder's layers and head for one decode token as one persistent kernel that
 * streams the weights through shared memory with bulk copies (q4/q8 with groups of 32/64/128, or
 * bf16 weights; head size 32/64/128, up to 8 query heads a KV head; sm_90). Correct on the H200,
 * but slower there than the ops so far (src/backend/cuda/NOTES.md). Off, such steps run op by op.
 * MLXCEL_CUDA_FUSED_PF=N (0..64, default 0) also prefetches N chunks of weights into L2 ahead of
 * its ring (slower so far too). */
void mx_backend_cuda_set_fused(mx_backend *b, bool on);
/* How many times decode_layers ran its kernel so far (tests). */
int mx_backend_cuda_fused_launches(mx_backend *b);

/* Pick the backend: MLXCEL_DEVICE=cpu forces the CPU, =gpu forces the GPU (an error if this
 * build has no CUDA or no usable GPU is present), unset/"auto"/"" takes the GPU when one is
 * usable and the CPU otherwise. Any other value is MX_ERR_INVALID_ARG. */
mx_status mx_backend_auto_init(mx_backend *out);
/* Free a backend made by mx_backend_auto_init (either kind). */
void mx_backend_auto_free(mx_backend *b);
/* Free and total memory of the GPU the auto choice would use (MLXCEL_DEVICE honoured); false
 * when this build has no CUDA backend, there is no usable GPU, or MLXCEL_DEVICE=cpu. */
bool mx_backend_gpu_memory(uint64_t *free_bytes, uint64_t *total_bytes);
#ifdef MLXCEL_HAVE_CUDA
bool mx_backend_cuda_meminfo(uint64_t *free_bytes, uint64_t *total_bytes);
#endif
/* True when b is the CUDA backend. */
bool mx_backend_is_gpu(const mx_backend *b);

#endif
