/* backend/cuda/fused_decode.cuh: the decode_layers op's kernel, included by backend_cuda.cu (it
 * uses that file's device helpers; the host side, c_decode_layers, is there too). One persistent
 * kernel runs every layer of a plain pre-norm decoder for ONE token, and the final norm + LM head:
 *
 * - one block per multiprocessor, 16 warps. Warp 0 streams the block's share of every weight of
 *   the whole step, in the order the block uses them, into a ring of shared-memory slots with
 *   bulk copies (cp.async.bulk, completion on an mbarrier per slot). It never waits for
 *   activations, only for free slots, so weights keep streaming while the other warps wait at the
 *   dependencies between stages: the memory pipe stays full across what would be kernel
 *   boundaries (which is where the op-by-op path loses a third of a token at batch 1).
 * - warps 1..15 (the consumers) compute. Per layer, in five stages separated by grid-wide barriers
 *   (a counter; all blocks are resident, one per multiprocessor):
 *     1. every block: residual add + rmsnorm of the whole row into shared memory (int8 groups of
 *        32 for q4/q8 weights, as the matvecs' activations; f32 for bf16), then its rows of q/k/v;
 *     2. attention: tasks (KV head, chunk of positions) over the blocks; q/k norms, RoPE and the
 *        cache write of the current token in the task that holds it; a chunk's partial softmax
 *        goes to memory and the last task of a KV head (a counter) merges them;
 *     3. the attention output quantized, then the block's rows of o;
 *     4. residual add + rmsnorm, then gate and up rows in pairs with act(gate) * up stored;
 *     5. that quantized, then the block's rows of down.
 *   Then the final residual add + norm and the block's rows of the LM head.
 *   q4/q8 (forty-second session): each stage's epilogue makes the next stage's input, so that its
 *   prologue is one load (load_q) rather than a norm and a quantization of the whole row in every
 *   block: o's and down's blocks take whole groups of 32 rows, add the residual, store their part
 *   of the next norm's sum of squares and the int8 form of h * (gamma + add_one) (the norm's scale
 *   goes into the group scales when loaded: the op path's RING_EPI arithmetic); gate/up's blocks the
 *   act_mul's int8 form; the attention its output's. Only the first layer's norm is made from x.
 *   A block's rows of a stage are a contiguous range (balanced to a row), streamed in chunks of up
 *   to FD_MAXRT rows that fill a slot. Each row is one warp's (the block's rows of a stage dealt
 *   round-robin over the warps), so the warps go through the chunks independently: a warp releases
 *   a slot when its rows there are done, and the slot is refilled once all 15 have.
 * - the residual stream alternates between x and a scratch row y so that no stage overwrites a
 *   row another block is still reading; each block writes its slice of the new row.
 * Not here: batches of more than one token, windows, softcaps, sinks, partial rotary, MoE (the
 * host checks the stack and returns 0 for those; the model then runs its ops). */

#define FD_THREADS 512
#define FD_CW 15                   /* consumer warps */
#define FD_CT (FD_CW * 32)         /* consumer threads */
#define FD_MAXSLOT 8
#define FD_NPROF 16                /* profile counters (MLXCEL_CUDA_PROFILE) */
#define FD_MAXRT 64                /* rows of a chunk */
#define FD_RPW ((FD_MAXRT + FD_CW - 1) / FD_CW)   /* a warp's rows of a chunk, at most */
#define FD_GSM ((FD_CW * FD_RPW + 3) & ~3)        /* floats of the gate sums (keeps what follows aligned) */
#define FD_FIXED (2 * FD_MAXSLOT * 8 + FD_NPROF * 8 + (FD_GSM + 32 + 4) * 4)   /* bytes between the ring and the union region */
#define FD_QN 16                   /* groups a warp quantizes side by side */
#define FD_XR 4                    /* q4/q8: x units a lane keeps in registers for a stage */
#define FD_NCMAX 32                /* position chunks of a KV head in the attention stage */
#define FD_PPW 4                   /* positions a warp loads at once in the attention (bf16 cache; f32: half) */
#define FD_BTMAX 64                /* block-table entries of an attention task kept in shared memory */
#define FD_LDN 16                  /* loads a thread has in flight in the prologues */
#define FD_PMAX 256                /* q4/q8: the most groups of 32 in H (parts of a sum of squares, 8 a lane) */
enum { FD_Q4 = 0, FD_Q8 = 1, FD_BF16 = 2 };

struct fd_mat {                    /* one weight on the device */
    const uint8_t *w;              /* [rows][rowb]: packed codes (q4/q8) or bf16 values */
    const uint8_t *s, *b;          /* q4/q8: [rows][cols / gs] scales, biases (2 bytes each) */
    const float *bias;             /* [rows] or null */
    int rows;
};
struct fd_layer {
    fd_mat q, k, v, o, gate, up, down;
    const float *ln1, *ln2, *qn, *kn;   /* qn, kn: per-head q/k norms, null for none */
};
struct fd_args {
    const fd_layer *L; int nl;
    fd_mat head; const float *fnorm;   /* head.w null: layers only */
    float *x, *y;                      /* the residual row [H] (in and out) and its alternate */
    float *q, *k, *v, *att, *o, *act, *d, *logits;
    float *apart;                      /* attention partials [nkv][FD_NCMAX][G][D + 2] */
    unsigned *ctr;                     /* [0] grid barrier, [1] exits, [2 + j] KV head j's chunks done */
    unsigned long long *prof;          /* null, or [grid][FD_NPROF] cycle counts (MLXCEL_CUDA_PROFILE) */
    void *kp, *vp; int kv_f32;         /* the cache pools: layer l's at l * lstr slots (kv_lay) */
    int64_t nslots, lstr; int bs, nblocks, maxb;
    const int32_t *pos, *slot, *seq, *bt;   /* the token's position and slot; block tables [n_seqs][maxb] */
    const float *inv_freq; float rope_af, scale;
    int H, nh, nkv, D, I, act_kind;
    float eps, a1;
    int gs_shift, sdt;                 /* q4/q8: log2 of the group size, the scales' SDT_* */
    int slot_bytes, nslot, ra;         /* ring geometry; ra: row alignment of chunks */
    int pf;                            /* chunks prefetched into L2 ahead of the ring (0: none) */
    int pmin;                          /* the fewest positions a chunk of the attention has (when there are more) */
    /* q4/q8 (the epilogues): a stage's input in its int8 form, in the fd_x layout (fd_gx), written
     * by the stage before: [0] q/k/v's and the head's (the residual times the next norm's gamma,
     * before its scale), [1] gate/up's (likewise), [2] down's (the act_mul), [3] o's (the attention) */
    uint8_t *gx[4];
    float *part[2];                    /* [H / 32] each group's sum of squares of the residual: [0] for gx[0]'s norm, [1] gx[1]'s */
};

/* a chunk's geometry for weights of K columns: packed row bytes, scale bytes a row, units of a row
 * (x groups of 32 or vectors of 8), rows a chunk */
struct fd_geo { int rowb, sb, nunit, rt; };
__host__ __device__ inline fd_geo fd_geometry(int fmt, int K, int gs_shift, int slot_bytes, int ra) {
    fd_geo g;
    g.rowb = fmt == FD_Q4 ? K / 2 : fmt == FD_Q8 ? K : 2 * K;
    g.sb = fmt == FD_BF16 ? 0 : (K >> gs_shift) * 2;
    g.nunit = fmt == FD_BF16 ? K / 8 : K / 32;
    int rt = slot_bytes / (g.rowb + 2 * g.sb);
    if (rt > FD_MAXRT) rt = FD_MAXRT;
    g.rt = rt - rt % ra;
    return g;
}
/* the first row of block b's share of R rows (multiples of ra) */
__host__ __device__ inline int fd_split(int R, int b, int nb, int ra) {
    return (int)((long long)(R / ra) * b / nb) * ra;
}

/* The chunks of a stage for this block: f(weight, index in m, first row, rows, geometry, the
 * stage's rows before this chunk) for each, in order; the blocks' runs of rows start at multiples
 * of sra (a multiple of a.ra, the chunks' alignment). nm weights whose rows follow each other
 * (q | k | v), or a pair (gate, up) whose chunks alternate over the same rows. The producer and
 * the consumers walk the same sequence. */
template <class F>
__device__ __forceinline__ void fd_chunks(const fd_args &a, int fmt, const fd_mat *m, int nm, bool pair, int K, int sra, F f) {
    const fd_geo g = fd_geometry(fmt, K, a.gs_shift, a.slot_bytes, a.ra);
    /* the weights' rows read once, into registers (f's stores may alias the layer table, which the
     * loop would otherwise load again at every chunk) */
    const int n0 = m[0].rows, n1 = nm > 1 ? m[1].rows : 0, n2 = nm > 2 ? m[2].rows : 0;
    const int R = pair ? n0 : n0 + n1 + n2;
    const int lo = fd_split(R, blockIdx.x, gridDim.x, sra), hi = fd_split(R, blockIdx.x + 1, gridDim.x, sra);
    int base = 0, w = 0, wr = n0;   /* wr: the rows of m[w] */
    for (int r = lo; r < hi;) {
        while (!pair && r >= base + wr) { base += wr; w++; wr = w == 1 ? n1 : n2; }
        const int end = pair ? hi : min(hi, base + wr);
        const int n = min(g.rt, end - r);
        if (pair) { f(m[0], 0, r, n, g, r - lo); f(m[1], 1, r, n, g, r - lo); }
        else f(m[w], w, r - base, n, g, r - lo);
        r += n;
    }
}

/* ---- the grid barrier (sm_90; the mbarrier and bulk-copy helpers fd_* are in backend_cuda.cu) ---- */
__device__ __forceinline__ void fd_cbar() { asm volatile("bar.sync 1, %0;" ::"n"(FD_CT) : "memory"); }

/* one thread for its block: the arrival at a grid barrier (release), then the wait until ctr
 * reaches target (acquire); a wait of over 10 s traps (a block that never arrives) */
__device__ __forceinline__ void fd_grid_arrive_wait(unsigned *ctr, unsigned target) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
    uint64_t t0 = 0;
    for (int spin = 0; ld_acquire_gpu(ctr) < target; spin++)
        if ((spin & 1023) == 1023) {
            const uint64_t t = fd_now();
            if (!t0) t0 = t; else if (t - t0 > 10000000000ull) __trap();
        }
}
/* all consumers of all blocks: the target-th arrival of every block (the counter is zeroed by the
 * last block to leave the kernel). The consumer barrier orders the block's writes before thread
 * 0's release; its acquire and the second barrier order the reads after. */
__device__ __forceinline__ void fd_grid_sync(unsigned *ctr, unsigned target, int ctid) {
    fd_cbar();
    if (ctid == 0) fd_grid_arrive_wait(ctr, target);
    fd_cbar();
}

__device__ __forceinline__ float fd_h2f(uint16_t h, int sdt) {
    return sdt == SDT_BF16 ? __uint_as_float((uint32_t)h << 16) : __half2float(__ushort_as_half(h));
}

/* The chunks of the whole step, in the consumers' order, to f. */
/* the split alignment of o's, gate/up's and down's rows: q4/q8 blocks take whole groups of 32 rows,
 * whose int8 form their epilogues write */
template <int FMT> __device__ __forceinline__ int fd_sra(const fd_args &a) { return FMT == FD_BF16 || a.ra >= 32 ? a.ra : 32; }
template <int FMT, class F>
__device__ __forceinline__ void fd_all_chunks(const fd_args &a, F f) {
    const int sra = fd_sra<FMT>(a);
    for (int l = 0; l < a.nl; l++) {
        const fd_layer &L = a.L[l];
        const fd_mat qkv[3] = {L.q, L.k, L.v}, gu[2] = {L.gate, L.up};
        fd_chunks(a, FMT, qkv, 3, false, a.H, a.ra, f);
        fd_chunks(a, FMT, &L.o, 1, false, a.nh * a.D, sra, f);
        fd_chunks(a, FMT, gu, 2, true, a.H, sra, f);
        fd_chunks(a, FMT, &L.down, 1, false, a.I, sra, f);
    }
    if (a.head.w) fd_chunks(a, FMT, &a.head, 1, false, a.H, a.ra, f);
}
/* The producer (lane 0 of warp 0): every chunk of the step into the ring, in the consumers' order;
 * *issued counts them. */
template <int FMT>
__device__ void fd_produce(const fd_args &a, uint8_t *ring, uint64_t *full, uint64_t *empty, unsigned long long *sprof,
                           volatile int *issued) {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    const bool prof = a.prof != nullptr;
    int ci = 0, s = 0;
    uint32_t par = 1u;   /* the parity of slot s's next empty phase */
    fd_all_chunks<FMT>(a, [&](const fd_mat &m, int, int r0, int n, const fd_geo &g, int) {
        const long long w0 = prof ? clock64() : 0;
        fd_mbar_wait(&empty[s], par);
        if (prof) sprof[5] += (unsigned long long)(clock64() - w0);
        uint8_t *dst = ring + (size_t)s * a.slot_bytes;
        const uint32_t wb = (uint32_t)n * g.rowb, sbb = (uint32_t)n * g.sb;
        fd_mbar_expect(&full[s], wb + 2 * sbb);
        fd_bulk(dst, m.w + (size_t)r0 * g.rowb, wb, &full[s], pol);
        if (FMT != FD_BF16) {
            fd_bulk(dst + wb, m.s + (size_t)r0 * g.sb, sbb, &full[s], pol);
            fd_bulk(dst + wb + sbb, m.b + (size_t)r0 * g.sb, sbb, &full[s], pol);
        }
        if (++s == a.nslot) { s = 0; par ^= 1u; }
        ci++;
        *issued = ci;
    });
}
/* The prefetcher (lane 1 of warp 0): the a.pf chunks after those the ring can take next into L2,
 * so that HBM keeps streaming while the ring is full (the consumers waiting at a dependency): the
 * copy of a prefetched chunk into its slot then comes from L2. */
template <int FMT>
__device__ void fd_prefetch(const fd_args &a, volatile int *issued) {
    int pi = 0;
    fd_all_chunks<FMT>(a, [&](const fd_mat &m, int, int r0, int n, const fd_geo &g, int) {
        if (pi < *issued + a.nslot) { pi++; return; }   /* its copy into the ring comes first */
        while (pi >= *issued + a.nslot + a.pf) __nanosleep(128);
        const uint32_t wb = (uint32_t)n * g.rowb, sbb = (uint32_t)n * g.sb;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(m.w + (size_t)r0 * g.rowb), "r"(wb) : "memory");
        if (FMT != FD_BF16) {
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(m.s + (size_t)r0 * g.sb), "r"(sbb) : "memory");
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(m.b + (size_t)r0 * g.sb), "r"(sbb) : "memory");
        }
        pi++;
    });
}
/* The activations of a stage in shared memory. q4/q8: int8 groups of 32 split in halves, the
 * first 16 codes of every group in lo, the last 16 in hi (a lane's 16-byte loads of consecutive
 * groups are then conflict-free), and per group (dx, dx * sum of codes). bf16: the values rounded
 * to bf16 (16 bytes a unit of 8). */
struct fd_x { uint8_t *lo, *hi; float2 *ds; __nv_bfloat16 *b; };
/* the fd_x of K values at b (global: a.gx): lo, hi K / 2 bytes each, then the K / 32 (dx, dx * sum) */
__device__ __forceinline__ fd_x fd_gx(uint8_t *b, int K) {
    fd_x x;
    x.lo = b; x.hi = b + K / 2; x.ds = (float2 *)(b + K); x.b = nullptr;
    return x;
}
/* a lane's x codes for one unit, in registers (q4/q8; the unit's (dx, dx * sum) come from x.ds) */
struct fd_xu { uint4 lo, hi; };

/* unit u (of 32 values) of row r of a chunk (n rows at src), q4/q8, against x */
template <int FMT>
__device__ __forceinline__ float fd_unit_q(const uint8_t *src, int r, int u, int n, const fd_geo &g, const fd_xu &x,
                                           float2 ds, int gs_shift, int sdt) {
    const uint32_t xv[8] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w, x.hi.x, x.hi.y, x.hi.z, x.hi.w};
    int ia;
    if (FMT == FD_Q4) {   /* x in fd_xpos order: word 2h holds values 8h + 0, 2, 4, 6, word 2h + 1 the odd ones */
        ia = dot_q4n(*(const uint4 *)(src + (size_t)r * g.rowb + (size_t)u * 16), xv);
    } else {
        const uint4 *wp = (const uint4 *)(src + (size_t)r * g.rowb + (size_t)u * 32);
        ia = dot_q8(wp[0], wp[1], xv);
    }
    const int gi = (u * 32) >> gs_shift, ngr = g.sb / 2;
    const uint16_t *S = (const uint16_t *)(src + (size_t)n * g.rowb) + (size_t)r * ngr + gi;
    const float sc = fd_h2f(S[0], sdt), bc = fd_h2f(S[(size_t)n * ngr], sdt);
    return fmaf(sc * ds.x, (float)ia, bc * ds.y);
}
__device__ __forceinline__ fd_xu fd_xload(const fd_x &x, int u) {
    fd_xu r;
    r.lo = ((const uint4 *)x.lo)[u]; r.hi = ((const uint4 *)x.hi)[u];
    return r;
}
/* unit u (of 8 values) of row r, bf16 weights against bf16 x, f32 products */
__device__ __forceinline__ float fd_unit_b(const uint8_t *src, int r, int u, const fd_geo &g, const fd_x &x) {
    const uint4 w = *(const uint4 *)(src + (size_t)r * g.rowb + (size_t)u * 16);
    const uint4 xv = ((const uint4 *)x.b)[u];
    float f[8], xf[8];
    unpack_vec<__nv_bfloat16>(w, f);
    unpack_vec<__nv_bfloat16>(xv, xf);
    float d = f[0] * xf[0];
#pragma unroll
    for (int i = 1; i < 8; i++) d = fmaf(f[i], xf[i], d);
    return d;
}

/* the byte of element e (0..31) of a group in x: natural order for q8; for q4 the order in
 * which a packed word's low nibbles (its even values) and high nibbles (odd) meet the codes */
template <int FMT> __device__ __forceinline__ int fd_xpos(int e) {
    return FMT == FD_Q4 ? (((e >> 3) * 2 + (e & 1)) << 2) + ((e >> 1) & 3) : e;
}
/* warp-wide: groups grp[u] (the lane's values v[u], ok[u]: a group of the row) into their int8
 * form (quant_groups), N groups side by side, stored in the x layout */
template <int FMT, int N>
__device__ __forceinline__ void fd_quant_n(const float *v, const int *grp, const bool *ok, const fd_x &x) {
    const int lane = threadIdx.x & 31, pos = fd_xpos<FMT>(lane);
    float am[N];
    int q[N], sq[N];
    quant_groups<N>(v, am, q, sq);
#pragma unroll
    for (int u = 0; u < N; u++) {
        if (!ok[u]) continue;
        (pos < 16 ? x.lo : x.hi)[grp[u] * 16 + (pos & 15)] = (uint8_t)(int8_t)q[u];
        if (lane == 0) { const float dx = am[u] * (1.f / 127.f); x.ds[grp[u]] = make_float2(dx, dx * (float)sq[u]); }
    }
}

/* warp-wide: one group grp (the lane's value v) into its int8 form in x (fd_quant_n of one group) */
template <int FMT>
__device__ __forceinline__ void fd_quant1(float v, int grp, const fd_x &x) {
    const bool ok = true;
    fd_quant_n<FMT, 1>(&v, &grp, &ok, x);
}

/* sum over the consumer threads (all get it) */
__device__ __forceinline__ float fd_csum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[(threadIdx.x >> 5) - 1] = v;
    fd_cbar();
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < FD_CW; w++) t += red[w];
    fd_cbar();
    return t;
}

/* warp-wide (the 32 lanes hold values i0 .. i0 + 31 of a group, lane order): the attention's
 * output value v of element i, to a.att, or quantized into o's input (a.gx[3]) */
template <int FMT>
__device__ __forceinline__ void fd_att_out(const fd_args &a, bool qo, size_t i, float v) {
    if (FMT != FD_BF16 && qo) {
        fd_quant1<FMT>(v, (int)(i >> 5), fd_gx(a.gx[3], a.nh * a.D));
    } else {
        a.att[i] = v;
    }
}

/* n 32-bit words from p (aligned to their size when n is 2 or 4) */
template <int n>
__device__ __forceinline__ void fd_ldw(const uint32_t *p, uint32_t *w) {
    if (n == 4) { const uint4 v = *(const uint4 *)p; w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w; }
    else if (n == 2) { const uint2 v = *(const uint2 *)p; w[0] = v.x; w[1] = v.y; }
    else {
#pragma unroll
        for (int i = 0; i < n; i++) w[i] = p[i];
    }
}

/* the attention tasks: NC chunks of P positions for each KV head, task t = chunk t / nkv of KV
 * head t % nkv, tasks dealt over the blocks */
struct fd_att_plan { int L, NC, P; };
__device__ __forceinline__ fd_att_plan fd_att_tasks(const fd_args &a) {
    fd_att_plan p;
    p.L = a.pos[0] + 1;
    int NC = min((p.L + a.pmin - 1) / a.pmin, min(FD_NCMAX, max(1, (int)gridDim.x / a.nkv)));
    p.P = (p.L + NC - 1) / NC;
    p.NC = (p.L + p.P - 1) / p.P;
    return p;
}
/* before the q/k/v barrier: the cached K/V rows this block's attention tasks will read, into L2 */
__device__ __forceinline__ void fd_att_prefetch(const fd_args &a, int layer, int ctid) {
    const fd_att_plan tp = fd_att_tasks(a);
    const int kvdim = a.nkv * a.D, esz = a.kv_f32 ? 4 : 2, lines = (a.D * esz + 127) / 128, pos = tp.L - 1;
    const int32_t *btr = a.bt + (size_t)a.seq[0] * a.maxb;
    const size_t lofs = (size_t)layer * a.lstr * kvdim;
    for (int t = blockIdx.x; t < a.nkv * tp.NC; t += gridDim.x) {
        const int j = t % a.nkv, c = t / a.nkv, p0 = c * tp.P, p1 = min(tp.L, p0 + tp.P);
        for (int e = ctid; e < (p1 - p0) * 2 * lines; e += FD_CT) {
            const int p = p0 + e / (2 * lines), kvsel = (e / lines) & 1, ln = e % lines;
            if (p == pos) continue;
            const int32_t blk = btr[p / a.bs];
            if (blk < 0 || blk >= a.nblocks) continue;
            const char *base = (const char *)(kvsel ? a.vp : a.kp);
            const char *ptr = base + ((lofs + ((size_t)blk * a.bs + p % a.bs) * kvdim + (size_t)j * a.D) * esz) + ln * 128;
            asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
        }
    }
}

/* The attention of the token for layer `layer` (consumers of every block; tasks over blocks). Its
 * output goes to a.att, or (q4/q8, qo) in its int8 form to qo (o's input; a warp holds a group of
 * 32 values of a head where the results are made). */
template <int FMT, int NI, bool KVF>
__device__ void fd_attention(const fd_args &a, int layer, float *U, int *flag, bool qo) {
    constexpr int D = 32 * NI, GMAX = NI == 4 ? 4 : 8;   /* G <= GMAX (the host checks) */
    const int lane = threadIdx.x & 31, cw = (threadIdx.x >> 5) - 1, ctid = threadIdx.x - 32;
    const int G = a.nh / a.nkv, kvdim = a.nkv * D;
    const fd_layer &Ly = a.L[layer];
    const fd_att_plan tp = fd_att_tasks(a);
    const int L = tp.L, NC = tp.NC, P = tp.P, pos = L - 1;
    const int32_t *btr = a.bt + (size_t)a.seq[0] * a.maxb;
    const int64_t cslot = a.slot[0];
    float *qs = U, *ks = qs + G * D, *vs = ks + D, *wm = vs + D, *wl = wm + FD_CW * G, *wacc = wl + FD_CW * G;
    float *sml = wacc + (size_t)FD_CW * G * D;   /* [NC][G][2] the chunks' maxima and sums (merge) */
    int *sbt = (int *)(sml + FD_NCMAX * G * 2);  /* [FD_BTMAX] the task's block-table entries */
    const size_t lofs = (size_t)layer * a.lstr * kvdim;
    for (int t = blockIdx.x; t < a.nkv * NC; t += gridDim.x) {
        const int j = t % a.nkv, c = t / a.nkv;
        const int p0 = c * P, p1 = min(L, p0 + P);
        const bool last = p1 == L;
        const int b0 = p0 / a.bs;   /* the task's block-table entries (their loads beside q/k/v's) */
        for (int e = ctid; e < FD_BTMAX && b0 + e <= (p1 - 1) / a.bs; e += FD_CT) sbt[e] = btr[b0 + e];
        /* q heads of KV head j (normed, roped, scaled), and the token's k, v in the last chunk */
        for (int h = cw; h < G + 2; h += FD_CW) {
            if (h >= G && !last) continue;
            const bool isq = h < G, isv = h == G + 1;
            const float *src = isq ? a.q + (size_t)(j * G + h) * D : (isv ? a.v : a.k) + (size_t)j * D;
            float x[NI];
#pragma unroll
            for (int i = 0; i < NI; i++) x[i] = __ldcg(src + lane * NI + i);
            float *row = isq ? qs + h * D : isv ? vs : ks;
            if (!isv) {
                const float *gn = isq ? Ly.qn : Ly.kn;
                if (gn) {
                    float ss = 0.f;
#pragma unroll
                    for (int i = 0; i < NI; i++) ss = fmaf(x[i], x[i], ss);
                    const float inv = rsqrtf(warp_sum(ss) / D + a.eps);
#pragma unroll
                    for (int i = 0; i < NI; i++) x[i] = x[i] * inv * (gn[lane * NI + i] + a.a1);
                }
#pragma unroll
                for (int i = 0; i < NI; i++) row[lane * NI + i] = x[i];
                __syncwarp();
                for (int i2 = lane; i2 < D / 2; i2 += 32) {
                    float sn, cs;
                    sincosf((float)pos * a.inv_freq[i2], &sn, &cs);
                    sn *= a.rope_af; cs *= a.rope_af;
                    rope_rot(row[i2], row[i2 + D / 2], cs, sn, row[i2], row[i2 + D / 2]);
                }
                __syncwarp();
#pragma unroll
                for (int i = 0; i < NI; i++) x[i] = row[lane * NI + i];
            }
            if (isq) {
#pragma unroll
                for (int i = 0; i < NI; i++) row[lane * NI + i] = x[i] * a.scale;
            } else if (cslot >= 0 && cslot < a.nslots) {   /* the cache row, and the value as stored */
                const size_t o = lofs + (size_t)cslot * kvdim + (size_t)j * D + lane * NI;
#pragma unroll
                for (int i = 0; i < NI; i++) {
                    if (a.kv_f32) {
                        ((float *)(isv ? a.vp : a.kp))[o + i] = x[i];
                        row[lane * NI + i] = x[i];
                    } else {
                        const __nv_bfloat16 b = __float2bfloat16(x[i]);
                        ((__nv_bfloat16 *)(isv ? a.vp : a.kp))[o + i] = b;
                        row[lane * NI + i] = __bfloat162float(b);
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < NI; i++) row[lane * NI + i] = x[i];
            }
        }
        fd_cbar();
        /* the chunk's positions, PPW a warp at a time (their K/V loads in flight together, kept in
         * the cache's form until used): online softmax per query head */
        constexpr int PPW = KVF ? FD_PPW / 2 : FD_PPW, RW = KVF ? NI : (NI + 1) / 2;   /* RW: 32-bit words of a lane's K (or V) */
        float m[GMAX], l[GMAX], acc[GMAX][NI];
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            m[g] = -INFINITY; l[g] = 0.f;
#pragma unroll
            for (int i = 0; i < NI; i++) acc[g][i] = 0.f;
        }
        for (int pb = p0 + cw; pb < p1; pb += PPW * FD_CW) {
            uint32_t kr[PPW][RW], vr[PPW][RW];
            bool ok[PPW], cur[PPW];
#pragma unroll
            for (int q = 0; q < PPW; q++) {
                const int p = pb + q * FD_CW;
                ok[q] = p < p1; cur[q] = ok[q] && p == pos;
#pragma unroll
                for (int w = 0; w < RW; w++) kr[q][w] = vr[q][w] = 0u;
                if (ok[q] && !cur[q]) {
                    const int e = p / a.bs - b0;
                    const int32_t blk = e < FD_BTMAX ? sbt[e] : btr[p / a.bs];
                    ok[q] = blk >= 0 && blk < a.nblocks;
                    const size_t o = lofs + ((size_t)(ok[q] ? blk : 0) * a.bs + p % a.bs) * kvdim + (size_t)j * D + lane * NI;
                    if (!KVF && NI == 1) {
                        kr[q][0] = ((const unsigned short *)a.kp)[o]; vr[q][0] = ((const unsigned short *)a.vp)[o];
                    } else {
                        const size_t ow = KVF ? o : o / 2;
                        fd_ldw<RW>((const uint32_t *)a.kp + ow, kr[q]); fd_ldw<RW>((const uint32_t *)a.vp + ow, vr[q]);
                    }
                }
            }
#pragma unroll
            for (int q = 0; q < PPW; q++) {
                if (!ok[q]) continue;
                float kv[NI], vv[NI];
#pragma unroll
                for (int i = 0; i < NI; i++) {
                    if (cur[q]) { kv[i] = ks[lane * NI + i]; vv[i] = vs[lane * NI + i]; }
                    else if (KVF) { kv[i] = __uint_as_float(kr[q][i]); vv[i] = __uint_as_float(vr[q][i]); }
                    else {   /* bf16 value i: the low or high half of word i / 2 */
                        const uint32_t kw = kr[q][i / 2], vw = vr[q][i / 2];
                        kv[i] = __uint_as_float((i & 1) ? (kw & 0xffff0000u) : (kw << 16));
                        vv[i] = __uint_as_float((i & 1) ? (vw & 0xffff0000u) : (vw << 16));
                    }
                }
#pragma unroll
                for (int g = 0; g < GMAX; g++) {
                    if (g >= G) break;
                    float d = 0.f;
#pragma unroll
                    for (int i = 0; i < NI; i++) d = fmaf(qs[g * D + lane * NI + i], kv[i], d);
                    const float s = warp_sum(d);
                    const float mn = fmaxf(m[g], s), cr = __expf(m[g] - mn), e = __expf(s - mn);
                    l[g] = l[g] * cr + e;
#pragma unroll
                    for (int i = 0; i < NI; i++) acc[g][i] = fmaf(acc[g][i], cr, e * vv[i]);
                    m[g] = mn;
                }
            }
        }
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (g >= G) break;
            if (lane == 0) { wm[cw * G + g] = m[g]; wl[cw * G + g] = l[g]; }
#pragma unroll
            for (int i = 0; i < NI; i++) wacc[(size_t)(cw * G + g) * D + lane * NI + i] = acc[g][i];
        }
        fd_cbar();
        /* the warps merged: the chunk's result, or its partial for the KV head's last task */
        float *ap = a.apart + ((size_t)j * FD_NCMAX) * G * (D + 2);
        for (int e = ctid; e < G * D; e += FD_CT) {
            const int g = e / D, d = e % D;
            float M = -INFINITY;
            for (int w = 0; w < FD_CW; w++) M = fmaxf(M, wm[w * G + g]);
            float Ls = 0.f, A = 0.f;
            for (int w = 0; w < FD_CW; w++) {
                const float cf = wm[w * G + g] == -INFINITY ? 0.f : __expf(wm[w * G + g] - M);
                Ls = fmaf(wl[w * G + g], cf, Ls);
                A = fmaf(wacc[(size_t)(w * G + g) * D + d], cf, A);
            }
            if (NC == 1) {
                fd_att_out<FMT>(a, qo, (size_t)(j * G + g) * D + d, Ls > 0.f ? A / Ls : 0.f);
            } else {
                float *pp = ap + ((size_t)c * G + g) * (D + 2);
                pp[d] = A;
                if (d == 0) { pp[D] = M; pp[D + 1] = Ls; }
            }
        }
        if (NC > 1) {
            fd_cbar();
            if (ctid == 0) {   /* release of the block's partials; the last task acquires them all */
                unsigned old;
                asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(&a.ctr[2 + j]) : "memory");
                *flag = old == (unsigned)NC - 1;
            }
            fd_cbar();
            if (*flag) {
                for (int e = ctid; e < NC * G; e += FD_CT) {
                    const float *pp = ap + (size_t)e * (D + 2);
                    sml[2 * e] = __ldcg(pp + D); sml[2 * e + 1] = __ldcg(pp + D + 1);
                }
                fd_cbar();
                for (int e = ctid; e < G * D; e += FD_CT) {
                    const int g = e / D, d = e % D;
                    float M = -INFINITY;
                    for (int cc = 0; cc < NC; cc++) M = fmaxf(M, sml[2 * (cc * G + g)]);
                    float Ls = 0.f, A = 0.f;
                    for (int c0 = 0; c0 < NC; c0 += 8) {   /* eight loads in flight */
                        float av[8];
#pragma unroll
                        for (int u = 0; u < 8; u++)
                            av[u] = c0 + u < NC ? __ldcg(ap + ((size_t)(c0 + u) * G + g) * (D + 2) + d) : 0.f;
#pragma unroll
                        for (int u = 0; u < 8; u++) {
                            if (c0 + u >= NC) break;
                            const float mc = sml[2 * ((c0 + u) * G + g)], cf = mc == -INFINITY ? 0.f : __expf(mc - M);
                            Ls = fmaf(sml[2 * ((c0 + u) * G + g) + 1], cf, Ls);
                            A = fmaf(av[u], cf, A);
                        }
                    }
                    fd_att_out<FMT>(a, qo, (size_t)(j * G + g) * D + d, Ls > 0.f ? A / Ls : 0.f);
                }
                if (ctid == 0) a.ctr[2 + j] = 0;
            }
        }
        fd_cbar();
    }
}

/* fd_attention for the head size a.D (32, 64 or 128) */
template <int FMT, bool KVF>
__device__ __forceinline__ void fd_attention_d(const fd_args &a, int layer, float *U, int *flag, bool qo) {
    if (a.D == 32) fd_attention<FMT, 1, KVF>(a, layer, U, flag, qo);
    else if (a.D == 64) fd_attention<FMT, 2, KVF>(a, layer, U, flag, qo);
    else fd_attention<FMT, 4, KVF>(a, layer, U, flag, qo);
}

template <int FMT>
__global__ void __launch_bounds__(FD_THREADS, 1) k_fused_decode(const fd_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t fsm[];
    uint8_t *ring = fsm;
    uint64_t *full = (uint64_t *)(fsm + (size_t)a.nslot * a.slot_bytes), *empty = full + FD_MAXSLOT;
    unsigned long long *sprof = (unsigned long long *)(empty + FD_MAXSLOT);   /* [FD_NPROF] this block's counters */
    float *gsm = (float *)(sprof + FD_NPROF);               /* [FD_CW][FD_RPW] gate sums of a pair's rows */
    float *red = gsm + FD_GSM;                              /* [32] */
    int *flag = (int *)(red + 32);                          /* [4]: [0] the attention's last-task flag, [1] chunks issued */
    volatile int *issued = flag + 1;
    float *U = (float *)(flag + 4);                         /* the union region (16-byte aligned) */
    if (threadIdx.x == 0) {
        for (int s = 0; s < a.nslot; s++) { fd_mbar_init(&full[s], 1); fd_mbar_init(&empty[s], FD_CW); }
        for (int k = 0; k < FD_NPROF; k++) sprof[k] = 0;
        *issued = 0;
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp == 0) {   /* weights only: they may stream before the previous kernel is done */
        if (lane == 0) fd_produce<FMT>(a, ring, full, empty, sprof, issued);
        else if (lane == 1 && a.pf > 0) fd_prefetch<FMT>(a, issued);
        return;
    }
    pdl_wait();
    /* profile (a.prof): sprof[0, 1] the second consumer warp's waits for data and its rows, [2, 3, 4]
     * thread 0's grid barriers, prologues, attention, [5] the producer's waits for a free slot, [6]
     * cycles and [7] ns from here to the end (thread 0), [8] thread 0's epilogues (q4/q8), [9] its
     * prologues' loads (q4/q8, before the block barrier), [10-14]
     * its waits at the barriers after q/k/v, the attention, o, gate/up and down */
    const bool prof = a.prof != nullptr;
    if (prof && threadIdx.x == 32) { sprof[6] = (unsigned long long)clock64(); sprof[7] = fd_now(); }
#define FD_PROF(k, t0) do { if (prof && (threadIdx.x & 31) == 0 && ((k) >= 2 ? threadIdx.x == 32 : threadIdx.x == 64)) \
                                sprof[k] += (unsigned long long)(clock64() - (t0)); } while (0)
    const int cw = warp - 1, ctid = threadIdx.x - 32;
    const int H = a.H, G = gridDim.x;
    /* bf16: a row being normed (xf) with its gammas (xg), then the stage's activations (fd_x);
     * q4/q8: the activations alone (norm_in reads the row again from memory instead: the shared
     * memory goes to the ring) */
    const int kmax = max(H, max(a.nh * a.D, a.I));
    float *xf = U, *xg = U + H;
    fd_x X;
    X.lo = (uint8_t *)(U + (FMT == FD_BF16 ? 2 * H : 0)); X.hi = X.lo + kmax / 2; X.ds = (float2 *)(X.hi + kmax / 2);
    X.b = (__nv_bfloat16 *)(U + 2 * H);
    /* q4/q8: the block's results of a stage's rows before its epilogue (after X, 16-byte aligned) */
    float *ebuf = (float *)(((uintptr_t)(X.ds + kmax / 32) + 15) & ~(uintptr_t)15);
    constexpr bool EPI = FMT != FD_BF16;
    const int sra = fd_sra<FMT>(a);
    int cs = 0;          /* the next chunk's slot, */
    uint32_t cpar = 0u;  /* the parity of its full phase (no division a chunk) */
    unsigned nsync = 0;
    auto gsync = [&](int stage) {   /* (stage 0-4: the barrier after q/k/v, the attention, o, gate/up, down) */
        const long long t0 = clock64();
        nsync++;
        fd_grid_sync(&a.ctr[0], nsync * (unsigned)G, ctid);
        FD_PROF(2, t0);
        FD_PROF(10 + stage, t0);
    };
    const int s0 = (int)((long long)H * blockIdx.x / G), s1 = (int)((long long)H * (blockIdx.x + 1) / G);
    /* rmsnorm of rin (+ din), this block's slice of the sum stored to wout, into the activations
     * (loads FD_LDN a thread in flight; the op's arithmetic: x * inv * (g + add_one)) */
    auto norm_in = [&](const float *rin, const float *din, float *wout, const float *g) {
        const long long t0 = clock64();
        float ss = 0.f;
        for (int i0 = ctid; i0 < H; i0 += FD_CT * FD_LDN) {
            float r[FD_LDN], gv[FD_LDN];
#pragma unroll
            for (int u = 0; u < FD_LDN; u++) {
                const int i = i0 + u * FD_CT;
                r[u] = i < H ? __ldcg(rin + i) + (din ? __ldcg(din + i) : 0.f) : 0.f;
                gv[u] = FMT == FD_BF16 && i < H ? g[i] : 0.f;   /* (q4/q8: read in the second pass) */
            }
#pragma unroll
            for (int u = 0; u < FD_LDN; u++) {
                const int i = i0 + u * FD_CT;
                if (i >= H) break;
                if (FMT == FD_BF16) { xf[i] = r[u]; xg[i] = gv[u] + a.a1; }
                ss = fmaf(r[u], r[u], ss);
                if (wout && i >= s0 && i < s1) wout[i] = r[u];
            }
        }
        ss = fd_csum(ss, red);
        const float inv = rsqrtf(ss / H + a.eps);
        if (FMT == FD_BF16) {
            for (int i = ctid; i < H; i += FD_CT) X.b[i] = __float2bfloat16(xf[i] * inv * xg[i]);
        } else {
            for (int g0 = cw; g0 < H / 32; g0 += FD_CW * FD_QN) {
                float v[FD_QN]; int grp[FD_QN]; bool ok[FD_QN];
#pragma unroll
                for (int u = 0; u < FD_QN; u++) {
                    grp[u] = g0 + u * FD_CW; ok[u] = grp[u] < H / 32;
                    const int i = (ok[u] ? grp[u] : 0) * 32 + lane;   /* (the same values as the first pass) */
                    const float r = __ldcg(rin + i) + (din ? __ldcg(din + i) : 0.f);
                    v[u] = r * inv * (g[i] + a.a1);
                }
                fd_quant_n<FMT, FD_QN>(v, grp, ok, X);
            }
        }
        fd_cbar();
        FD_PROF(3, t0);
    };
    auto load_in = [&](const float *src, int K) {   /* a product's input as it is */
        const long long t0 = clock64();
        if (FMT == FD_BF16) {
            for (int i0 = ctid; i0 < K; i0 += FD_CT * FD_LDN) {
                float r[FD_LDN];
#pragma unroll
                for (int u = 0; u < FD_LDN; u++) r[u] = i0 + u * FD_CT < K ? __ldcg(src + i0 + u * FD_CT) : 0.f;
#pragma unroll
                for (int u = 0; u < FD_LDN; u++) if (i0 + u * FD_CT < K) X.b[i0 + u * FD_CT] = __float2bfloat16(r[u]);
            }
        } else {
            const int ng = K / 32;
            for (int g0 = cw; g0 < ng; g0 += FD_CW * FD_QN) {
                float v[FD_QN]; int grp[FD_QN]; bool ok[FD_QN];
#pragma unroll
                for (int u = 0; u < FD_QN; u++) {
                    grp[u] = g0 + u * FD_CW; ok[u] = grp[u] < ng;
                    v[u] = ok[u] ? __ldcg(src + grp[u] * 32 + lane) : 0.f;
                }
                fd_quant_n<FMT, FD_QN>(v, grp, ok, X);
            }
        }
        fd_cbar();
        FD_PROF(3, t0);
    };
    /* q4/q8: a stage's input as the stage before left it (gb, the fd_gx layout of K values) into
     * the activations, its group scales times the norm's scale that the blocks' parts give (part
     * null: none). Every warp sums the parts itself in one order, so all get the same bits. */
    auto load_q = [&](const uint8_t *gb, int K, const float *part) {
        const long long t0 = clock64();
        float pt[FD_PMAX / 32];
#pragma unroll
        for (int j = 0; j < FD_PMAX / 32; j++) pt[j] = part && lane + 32 * j < H / 32 ? __ldcg(part + lane + 32 * j) : 0.f;
        const int nu = K / 32;   /* 16-byte pieces of lo (and of hi); (dx, dx * sum) pairs */
        const uint4 *glo = (const uint4 *)gb, *ghi = (const uint4 *)(gb + K / 2);
        const float2 *gds = (const float2 *)(gb + K);
        uint4 l4 = make_uint4(0, 0, 0, 0), h4 = l4;
        float2 d2 = make_float2(0.f, 0.f);
        const bool has = ctid < nu;
        if (has) { l4 = __ldcg(glo + ctid); h4 = __ldcg(ghi + ctid); d2 = __ldcg(gds + ctid); }
        float inv = 1.f;
        if (part) {
            float t = 0.f;
#pragma unroll
            for (int j = 0; j < FD_PMAX / 32; j++) t += pt[j];
            inv = rsqrtf(warp_sum(t) / (float)H + a.eps);
        }
        if (has) {
            ((uint4 *)X.lo)[ctid] = l4; ((uint4 *)X.hi)[ctid] = h4;
            X.ds[ctid] = make_float2(d2.x * inv, d2.y * inv);
        }
        FD_PROF(9, t0);   /* (thread 0's own loads back; [3] also waits for the block's) */
        for (int i = ctid + FD_CT; i < nu; i += FD_CT) {
            ((uint4 *)X.lo)[i] = __ldcg(glo + i); ((uint4 *)X.hi)[i] = __ldcg(ghi + i);
            const float2 d = __ldcg(gds + i);
            X.ds[i] = make_float2(d.x * inv, d.y * inv);
        }
        fd_cbar();
        FD_PROF(3, t0);
    };
    /* q4/q8 epilogues, after a stage's rows [lo, lo + n) of this block (whole groups of 32, their
     * results in ebuf): a warp a group. The residual add: h = rin + the result, stored to rout, its
     * sum of squares to part[group], and the int8 form of h * (g + add_one) to gb (the next
     * product's input before its norm's scale; g null: none). The warp's first group's residual
     * comes from hres, where the epilogue before left it (o's and down's blocks take the same rows),
     * and goes back there: an L2 round trip less in each. */
    auto epi_add = [&](int lo, int n, const float *rin, float *rout, const float *g, uint8_t *gb, float *part, float &hres) {
        fd_cbar();   /* (every warp's results are in ebuf) */
        const long long t0 = clock64();
        const fd_x GX = fd_gx(gb, H);
        for (int gl = cw; gl < n >> 5; gl += FD_CW) {
            const int i = lo + (gl << 5) + lane;
            const float h = (gl == cw ? hres : __ldcg(rin + i)) + ebuf[(gl << 5) + lane];
            if (gl == cw) hres = h;
            rout[i] = h;
            const float ss = warp_sum(h * h);
            if (lane == 0) part[i >> 5] = ss;   /* (a part a group: no block-wide sum) */
            if (g) fd_quant1<FMT>(h * (g[i] + a.a1), i >> 5, GX);
        }
        FD_PROF(8, t0);
    };
    /* the act_mul's results (ebuf) in their int8 form to gb, down's input */
    auto epi_act = [&](int lo, int n, uint8_t *gb) {
        fd_cbar();
        const long long t0 = clock64();
        const fd_x GX = fd_gx(gb, a.I);
        for (int gl = cw; gl < n >> 5; gl += FD_CW) fd_quant1<FMT>(ebuf[(gl << 5) + lane], (lo >> 5) + gl, GX);
        FD_PROF(8, t0);
    };
    /* q4/q8 stages of at most FD_XR * 32 units a row: a lane's x for its units (lane + 32 k) stay in
     * registers for the stage, so that the rows read only their weights from shared memory */
    fd_xu xr[FD_XR];
    auto xregs = [&](int K) {   /* (every register written: none lives from one stage into the next) */
        const bool use = FMT != FD_BF16 && K / 32 <= FD_XR * 32;
#pragma unroll
        for (int k = 0; k < FD_XR; k++) {
            const int u = lane + 32 * k;
            if (use && u < K / 32) xr[k] = fd_xload(X, u);
            else xr[k].lo = xr[k].hi = make_uint4(0, 0, 0, 0);
        }
    };
    /* one chunk: this warp's rows of it (the stage's rows dealt round-robin), each a warp's dot
     * products summed by warp_sum; then the warp frees the slot for it */
    auto consume = [&](const fd_mat &m, int r0, int n, const fd_geo &g, int sr, auto out) {
        const int s = cs;
        const float *bias = m.bias;
        const long long t0 = prof ? clock64() : 0;
        fd_mbar_wait(&full[s], cpar);
        const long long t1 = prof ? clock64() : 0;
        const uint8_t *src = ring + (size_t)s * a.slot_bytes;
        int k = 0;
        for (int i = (cw - sr % FD_CW + FD_CW) % FD_CW; i < n; i += FD_CW, k++) {
            float a0 = 0.f, a1 = 0.f;
            if (FMT == FD_BF16) {
                int u = lane;
                for (; u + 32 < g.nunit; u += 64) { a0 += fd_unit_b(src, i, u, g, X); a1 += fd_unit_b(src, i, u + 32, g, X); }
                if (u < g.nunit) a0 += fd_unit_b(src, i, u, g, X);
            } else if (g.nunit <= FD_XR * 32) {
#pragma unroll
                for (int kk = 0; kk < FD_XR; kk++) {
                    const int u = lane + 32 * kk;
                    if (u < g.nunit) {
                        const float t = fd_unit_q<FMT>(src, i, u, n, g, xr[kk], X.ds[u], a.gs_shift, a.sdt);
                        if (kk & 1) a1 += t; else a0 += t;
                    }
                }
            } else {
                int u = lane;
                for (; u + 32 < g.nunit; u += 64) {
                    a0 += fd_unit_q<FMT>(src, i, u, n, g, fd_xload(X, u), X.ds[u], a.gs_shift, a.sdt);
                    a1 += fd_unit_q<FMT>(src, i, u + 32, n, g, fd_xload(X, u + 32), X.ds[u + 32], a.gs_shift, a.sdt);
                }
                if (u < g.nunit) a0 += fd_unit_q<FMT>(src, i, u, n, g, fd_xload(X, u), X.ds[u], a.gs_shift, a.sdt);
            }
            float v = warp_sum(a0 + a1);
            if (lane == 0) {
                if (bias) v += bias[r0 + i];
                out(r0 + i, k, v);
            }
        }
        __syncwarp();
        if (lane == 0) fd_mbar_arrive(&empty[s]);
        FD_PROF(1, t1);
        if (prof && threadIdx.x == 64) sprof[0] += (unsigned long long)(t1 - t0);
        if (++cs == a.nslot) { cs = 0; cpar ^= 1u; }
    };
    float *gw = gsm + cw * FD_RPW;   /* this warp's gate sums */
    /* the block's rows of o's and down's (H) and of gate/up's (I) stages */
    const int lo_h = fd_split(H, blockIdx.x, G, sra), n_h = fd_split(H, blockIdx.x + 1, G, sra) - lo_h;
    const int lo_i = fd_split(a.I, blockIdx.x, G, sra), n_i = fd_split(a.I, blockIdx.x + 1, G, sra) - lo_i;
    /* q4/q8: the residual of this warp's first group of o's and down's rows (epi_add) */
    float hres = EPI && cw < (n_h >> 5) ? __ldcg(a.x + lo_h + (cw << 5) + lane) : 0.f;
    for (int l = 0; l < a.nl; l++) {
        const fd_layer &Ly = a.L[l];
        /* 1. norm, q/k/v (q4/q8 after the first layer: down's epilogue left q/k/v's input) */
        if (EPI && l > 0) load_q(a.gx[0], H, a.part[0]);
        else norm_in(l == 0 ? a.x : a.y, l == 0 ? NULL : a.d, l == 0 ? NULL : a.x, Ly.ln1);
        xregs(H);
        const fd_mat qkv[3] = {Ly.q, Ly.k, Ly.v}, gu[2] = {Ly.gate, Ly.up};
        fd_chunks(a, FMT, qkv, 3, false, H, a.ra, [&](const fd_mat &m, int w, int r0, int n, const fd_geo &g, int sr) {
            float *y = w == 0 ? a.q : w == 1 ? a.k : a.v;
            consume(m, r0, n, g, sr, [&](int r, int, float v) { y[r] = v; });
        });
        fd_att_prefetch(a, l, ctid);
        gsync(0);
        /* 2. attention */
        {
            const long long t0 = clock64();
            if (a.kv_f32) fd_attention_d<FMT, true>(a, l, U, flag, EPI);
            else fd_attention_d<FMT, false>(a, l, U, flag, EPI);
            FD_PROF(4, t0);
        }
        gsync(1);
        /* 3. o (q4/q8: then the residual add and gate/up's input) */
        if (EPI) load_q(a.gx[3], a.nh * a.D, nullptr);
        else load_in(a.att, a.nh * a.D);
        xregs(a.nh * a.D);
        fd_chunks(a, FMT, &Ly.o, 1, false, a.nh * a.D, sra, [&](const fd_mat &m, int, int r0, int n, const fd_geo &g, int sr) {
            consume(m, r0, n, g, sr, [&](int r, int, float v) { if (EPI) ebuf[r - lo_h] = v; else a.o[r] = v; });
        });
        if (EPI) epi_add(lo_h, n_h, a.x, a.y, Ly.ln2, a.gx[1], a.part[1], hres);
        gsync(2);
        /* 4. residual add + norm, gate/up (q4/q8: the add was o's epilogue; the act_mul's int8 form after) */
        if (EPI) load_q(a.gx[1], H, a.part[1]);
        else norm_in(a.x, a.o, a.y, Ly.ln2);
        xregs(H);
        fd_chunks(a, FMT, gu, 2, true, H, sra, [&](const fd_mat &m, int w, int r0, int n, const fd_geo &g, int sr) {
            if (w == 0) consume(m, r0, n, g, sr, [&](int, int k, float v) { gw[k] = v; });
            else consume(m, r0, n, g, sr, [&](int r, int k, float v) {
                const float o = act_f(a.act_kind, gw[k]) * v;
                if (EPI) ebuf[r - lo_i] = o; else a.act[r] = o;
            });
        });
        if (EPI) epi_act(lo_i, n_i, a.gx[2]);
        gsync(3);
        /* 5. down (q4/q8: then the residual add into x and the next norm's input) */
        const float *gnext = l + 1 < a.nl ? a.L[l + 1].ln1 : a.head.w ? a.fnorm : nullptr;
        if (EPI) load_q(a.gx[2], a.I, nullptr);
        else load_in(a.act, a.I);
        xregs(a.I);
        fd_chunks(a, FMT, &Ly.down, 1, false, a.I, sra, [&](const fd_mat &m, int, int r0, int n, const fd_geo &g, int sr) {
            consume(m, r0, n, g, sr, [&](int r, int, float v) { if (EPI) ebuf[r - lo_h] = v; else a.d[r] = v; });
        });
        if (EPI) epi_add(lo_h, n_h, a.y, a.x, gnext, a.gx[0], a.part[0], hres);
        gsync(4);
    }
    /* the last residual add into x (q4/q8: down's epilogue made it); the final norm and the head */
    if (a.head.w) {
        if (EPI) load_q(a.gx[0], H, a.part[0]);
        else norm_in(a.y, a.d, a.x, a.fnorm);
        xregs(H);
        fd_chunks(a, FMT, &a.head, 1, false, H, a.ra, [&](const fd_mat &m, int, int r0, int n, const fd_geo &g, int sr) {
            consume(m, r0, n, g, sr, [&](int r, int, float v) { a.logits[r] = v; });
        });
    } else if (!EPI) {
        for (int i = s0 + ctid; i < s1; i += FD_CT) a.x[i] = __ldcg(a.y + i) + __ldcg(a.d + i);
    }
    /* the last block out zeroes the barrier for the next launch */
    fd_cbar();
    if (ctid == 0) {
        unsigned old;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(&a.ctr[1]) : "memory");
        if (old == (unsigned)G - 1) { atomicExch(&a.ctr[0], 0u); atomicExch(&a.ctr[1], 0u); }
    }
    if (prof && threadIdx.x == 32) {
        sprof[6] = (unsigned long long)clock64() - sprof[6];
        sprof[7] = fd_now() - sprof[7];
    }
    if (prof) {   /* (the producer's counter: it has left by the time its last slot was consumed) */
        fd_cbar();
        if (ctid < FD_NPROF) atomicAdd(&a.prof[blockIdx.x * FD_NPROF + ctid], sprof[ctid]);
    }
#undef FD_PROF
#endif
}
