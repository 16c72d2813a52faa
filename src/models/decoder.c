/* models/decoder.c: the transformer decoder shared by all families (options in decoder.h), written
 * once in terms of backend ops, over a batch of tokens from several sequences (each with its own
 * positions and KV block table). Also mx_model_load / mx_model_load_random, which pick the family
 * from config.json. Not device code (backend/) and not sampling (engine/). */
#include "models/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer {
    mx_weight q, k, v, o, gate, up, down;
    mx_vec ln1, ln2, q_norm, k_norm;
    mx_vec post_attn, post_ffw;     /* sandwich_norms only */
    mx_vec ln1_b, ln2_b;            /* layer_norm only */
    const mx_rope *rope;            /* the global or local table */
    const mx_attn_params *attn;     /* with or without the sliding window */
    bool moe;                       /* sparse MoE block instead of the dense MLP */
    mx_weight router;               /* moe: [n_experts, hidden] */
    mx_weight *ex;                  /* moe: [3 * n_experts]: gate views, then up, then down */
    mx_weight qa, kva_c, kva_pe, kvb;   /* mla: q_a_proj (q_lora), kv_a_proj_with_mqa row views, kv_b_proj */
    mx_vec qa_norm, kva_norm;
    mx_weight sh_gate, sh_up, sh_down;  /* shared experts (shared_inter) */
    float *esc_bias;                /* ds_route: host [n_experts] e_score_correction_bias */
    float *sinks;                   /* attn_sinks: host [n_heads] */
    mx_attn_params attn_own;        /* attn_sinks: this layer's parameters with its sinks */
} layer;

struct mx_model {
    mx_model_config cfg;
    mx_decoder_opts opts;
    mx_backend *be;
    mx_checkpoint *ck;          /* NULL for random weights */
    mx_wsrc src;                /* owns random buffers */
    mx_weight embed, lm_head;   /* lm_head aliases embed when tied */
    mx_vec final_norm, final_norm_b;
    layer *layers;
    float *inv_freq;            /* [rot_dim/2] */
    float *inv_freq_local;      /* sliding layers' table when they have their own, else NULL */
    mx_rope rope, rope_local;
    mx_attn_params attn, attn_local;
    size_t weight_bytes;
    /* set by prepare */
    int n_blocks, block_size, max_tokens;
    float *x, *h, *q, *k, *v, *att, *g, *u, *rows, *logits; /* backend buffers */
    int32_t *slot;              /* host [max_tokens] */
    bool has_moe;
    float *moe_in, *moe_y, *moe_out, *router;   /* backend buffers (MoE models only) */
    float *router_host, *ex_w;  /* host [max_tokens * n_experts], [n_experts * max_tokens] */
    int32_t *ex_rows;           /* host [n_experts * max_tokens]: tokens routed to each expert */
    int *ex_cnt;                /* host [n_experts] */
    unsigned char *tok_done;    /* host [max_tokens] */
    float *act_host;            /* oss_experts: host [2 * max_tokens * moe_inter] */
    float *mla_a, *mla_s, *mla_o;   /* mla backend buffers: latent, kv_b | k_pe, attention output */
    int32_t *mla_map;           /* mla host [4][max_tokens * n_heads * head_dim]: q, k, v, out gathers */
    int n_last_logits;          /* logit rows the last forward left in m->logits */
    float *topk_row;            /* host [vocab] for topk without a backend hook (made on first use) */
    mx_dlayer *dl;              /* [n_layers] for the backend's decode_layers, when ds_ok */
    mx_dstack ds;
    bool ds_ok;                 /* plain pre-norm layers: one decode token may go through decode_layers */
    /* mx_model_greedy_*: launched steps whose top-1 results the caller has not taken, oldest
     * first (their rows, backend result slots, and the results when already brought over) */
    int gr_n, gr_rows[2], gr_slot[2], gr_next;
    bool gr_have[2];
    float gr_v[2][MX_CHAIN_MAX], gr_l[2][MX_CHAIN_MAX];
    int32_t gr_id[2][MX_CHAIN_MAX];
    int32_t gr_last[MX_CHAIN_MAX];  /* the ids of the last launched step, once taken */
    int gr_last_n;
    long gr_chained;            /* steps step_chain took */
};

const mx_model_config *mx_model_cfg(const mx_model *m) { return &m->cfg; }
mx_backend *mx_model_backend(mx_model *m) { return m->be; }
size_t mx_model_weight_bytes(const mx_model *m) { return m->weight_bytes; }
int mx_model_block_size(const mx_model *m) { return m->block_size; }
int mx_model_n_blocks(const mx_model *m) { return m->n_blocks; }
int mx_model_max_tokens(const mx_model *m) { return m->max_tokens; }

static size_t weight_bytes(const mx_weight *w) {
    if (w->bits) return (size_t)w->rows * (size_t)(w->cols * w->bits / 32) * 4 + 2 * (size_t)w->rows * (size_t)(w->cols / w->group_size) * mx_dtype_size(w->scale_dtype);
    return (size_t)w->rows * (size_t)w->cols * mx_dtype_size(w->dtype);
}

static mx_status prep_w(mx_model *m, mx_weight *w) {
    m->weight_bytes += weight_bytes(w);
    return m->be->i->weight_prepare ? m->be->i->weight_prepare(m->be->ctx, w) : MX_OK;
}
static mx_status prep_v(mx_model *m, mx_vec *v) {
    return m->be->i->vec_prepare ? m->be->i->vec_prepare(m->be->ctx, v) : MX_OK;
}

static void free_buffers(mx_model *m) {
    const mx_backend_i *bi = m->be->i;
    mx_model_greedy_drain(m);   /* (launched steps still use the buffers) */
    float **bufs[] = {&m->x, &m->h, &m->q, &m->k, &m->v, &m->att, &m->g, &m->u, &m->rows, &m->logits,
                      &m->moe_in, &m->moe_y, &m->moe_out, &m->router, &m->mla_a, &m->mla_s, &m->mla_o};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (*bufs[i]) { bi->free(m->be->ctx, *bufs[i]); *bufs[i] = NULL; }
    free(m->slot);
    m->slot = NULL;
    free(m->router_host); free(m->ex_w); free(m->ex_rows); free(m->ex_cnt); free(m->tok_done);
    free(m->act_host);
    free(m->mla_map);
    m->mla_map = NULL;
    free(m->topk_row);
    m->topk_row = NULL;
    m->n_last_logits = 0;
    m->router_host = m->ex_w = m->act_host = NULL; m->ex_rows = NULL; m->ex_cnt = NULL; m->tok_done = NULL;
}

void mx_model_free(mx_model *m) {
    if (!m) return;
    if (m->be) {
        free_buffers(m);
        if (m->n_blocks && m->be->i->kv_free) m->be->i->kv_free(m->be->ctx);
    }
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++) { free(m->layers[l].ex); free(m->layers[l].sinks); free(m->layers[l].esc_bias); }
    free(m->layers);
    free(m->dl);
    free(m->opts.dense_layers);
    free(m->inv_freq);
    free(m->inv_freq_local);
    free(m->opts.layer_flags);
    if (m->opts.rope_cfg) json_decref(m->opts.rope_cfg);
    if (m->opts.local_rope_cfg) json_decref(m->opts.local_rope_cfg);
    mx_wsrc_free(&m->src);
    if (m->ck) mx_ckpt_close(m->ck);
    free(m);
}

/* Rows [r0, r0 + n) of w as a weight of its own (a view: fused projections). */
static mx_weight split_rows(const mx_weight *w, int64_t r0, int64_t n) {
    mx_weight v = *w;
    v.rows = n;
    v.dev = NULL;
    if (w->bits) {
        v.w = (const char *)w->w + (size_t)r0 * (size_t)(w->cols * w->bits / 32) * 4;
        size_t sb = (size_t)r0 * (size_t)(w->cols / w->group_size) * mx_dtype_size(w->scale_dtype);
        v.scales = (const char *)w->scales + sb;
        v.biases = (const char *)w->biases + sb;
    } else {
        v.w = (const char *)w->w + (size_t)r0 * (size_t)w->cols * mx_dtype_size(w->dtype);
    }
    if (w->bias) v.bias = (const char *)w->bias + (size_t)r0 * mx_dtype_size(w->bias_dtype);
    return v;
}

mx_status mx_decoder_act(json_t *config, const char *dir, const char *first, mx_act *act) {
    json_t *a = json_object_get(config, first);
    if (!json_is_string(a)) a = json_object_get(config, "hidden_act");
    if (!json_is_string(a)) a = json_object_get(config, "hidden_activation");
    const char *s = json_is_string(a) ? json_string_value(a) : "silu";
    if (!strcmp(s, "silu") || !strcmp(s, "swish")) *act = MX_ACT_SILU;
    else if (!strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_new")) *act = MX_ACT_GELU_TANH;
    else if (!strcmp(s, "gelu")) *act = MX_ACT_GELU;
    else if (!strcmp(s, "relu")) *act = MX_ACT_RELU;
    else return mx_errorf(MX_ERR_UNSUPPORTED, "%s/config.json: hidden_act \"%s\" is not supported", dir, s);
    return MX_OK;
}

/* The layers as an mx_dstack for the backend's decode_layers op, when they are the plain pre-norm
 * kind it describes (ds_ok); other models run their ops. */
static mx_status stack_build(mx_model *m) {
    const mx_decoder_opts *o = &m->opts;
    const mx_model_config *c = &m->cfg;
    m->ds_ok = false;
    if (o->mla || m->has_moe || o->sandwich_norms || o->no_pre_norms || o->layer_norm || o->plain_mlp ||
        o->qk_norm_full || o->residual_scale != 0 || o->attn_sinks || o->layer_flags || m->rope.rot_dim != c->head_dim ||
        m->attn.sliding_window != 0 || m->attn.softcap != 0)
        return MX_OK;
    if (!(m->dl = calloc((size_t)c->n_layers, sizeof *m->dl))) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &m->layers[l];
        if (L->rope != &m->rope || L->attn != &m->attn) return MX_OK;
        mx_dlayer *d = &m->dl[l];
        d->q = &L->q; d->k = &L->k; d->v = &L->v; d->o = &L->o;
        d->gate = &L->gate; d->up = &L->up; d->down = &L->down;
        d->ln1 = &L->ln1; d->ln2 = &L->ln2;
        d->q_norm = o->qk_norm ? &L->q_norm : NULL;
        d->k_norm = o->qk_norm ? &L->k_norm : NULL;
    }
    mx_dstack *s = &m->ds;
    s->n_layers = c->n_layers; s->layers = m->dl;
    s->hidden = c->hidden_size; s->n_heads = c->n_heads; s->n_kv_heads = c->n_kv_heads;
    s->head_dim = c->head_dim; s->inter = c->intermediate_size;
    s->eps = c->norm_eps; s->add_one = o->norm_add_one; s->act = o->act;
    s->inv_freq = m->rope.inv_freq; s->rope_factor = m->rope.attn_factor;
    s->attn_scale = m->attn.scale;
    s->final_norm = &m->final_norm; s->lm_head = &m->lm_head;
    m->ds_ok = true;
    return MX_OK;
}

mx_status mx_decoder_build(json_t *config, const char *dir, mx_wsrc *src, mx_backend *be, mx_model **out) {
    mx_status st;
    mx_model *m = calloc(1, sizeof *m);
    if (!m) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    m->be = be;
    m->src = *src;
    memset(src, 0, sizeof *src);
    m->ck = m->src.ck;
    const char *where = dir ? dir : "config";
    if ((st = mx_parse_common_config(config, dir, &m->cfg))) goto fail;
    const mx_family *fam = mx_family_find(m->cfg.model_type);
    if (!fam) {
        st = mx_errorf(MX_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not supported (supported: %s)", where, m->cfg.model_type, mx_model_arch_names());
        goto fail;
    }
    m->opts.act = MX_ACT_SILU;
    if ((st = fam->configure(config, where, &m->cfg, &m->opts))) goto fail;
    const mx_model_config *c = &m->cfg;
    int H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads, I = c->intermediate_size;
    mx_wsrc *s = &m->src;
    char name[256];
    if ((st = mx_wsrc_linear(s, "model.embed_tokens", c->vocab_size, H, 0, &m->embed))) goto fail;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
    int qb = m->opts.qkv_bias ? 1 : 0, ob = m->opts.o_bias ? 1 : 0, mb = m->opts.mlp_bias ? 1 : 0;
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &m->layers[l];
#define LIN(field, sub, rows, cols, bias) \
        snprintf(name, sizeof name, "model.layers.%d.%s", l, sub); \
        if ((st = mx_wsrc_linear(s, name, rows, cols, bias, &L->field))) goto fail; \
        if ((st = prep_w(m, &L->field))) goto fail;
#define VEC(field, sub, n) \
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, sub); \
        if ((st = mx_wsrc_vec(s, name, n, 1.0f, &L->field))) goto fail; \
        if ((st = prep_v(m, &L->field))) goto fail;
#define NORM(field, sub, n) \
        VEC(field, sub, n) \
        if (m->opts.layer_norm) { \
            snprintf(name, sizeof name, "model.layers.%d.%s.bias", l, sub); \
            if ((st = mx_wsrc_vec(s, name, n, 0.0f, &L->field##_b))) goto fail; \
            if ((st = prep_v(m, &L->field##_b))) goto fail; \
        }
#define SPLIT(field, from, r0, nr) \
        L->field = split_rows(&from, r0, nr); \
        if ((st = prep_w(m, &L->field))) goto fail;
        int64_t qd = (int64_t)nh * hd, kvd = (int64_t)nkv * hd;
        if (m->opts.fused_qkv) {
            mx_weight f;
            snprintf(name, sizeof name, "model.layers.%d.self_attn.qkv_proj", l);
            if ((st = mx_wsrc_linear(s, name, qd + 2 * kvd, H, qb, &f))) goto fail;
            SPLIT(q, f, 0, qd)
            SPLIT(k, f, qd, kvd)
            SPLIT(v, f, qd + kvd, kvd)
        } else if (m->opts.mla) {
            const mx_decoder_opts *o = &m->opts;
            if (o->q_lora) {
                LIN(qa, "self_attn.q_a_proj", o->q_lora, H, qb)
                VEC(qa_norm, "self_attn.q_a_layernorm", o->q_lora)
                LIN(q, "self_attn.q_b_proj", qd, o->q_lora, 0)
            } else {
                LIN(q, "self_attn.q_proj", qd, H, 0)
            }
            mx_weight f;
            snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_a_proj_with_mqa", l);
            if ((st = mx_wsrc_linear(s, name, o->kv_lora + o->qk_rope, H, qb, &f))) goto fail;
            SPLIT(kva_c, f, 0, o->kv_lora)
            SPLIT(kva_pe, f, o->kv_lora, o->qk_rope)
            VEC(kva_norm, "self_attn.kv_a_layernorm", o->kv_lora)
            LIN(kvb, "self_attn.kv_b_proj", (int64_t)nh * (o->qk_nope + o->v_dim), o->kv_lora, 0)
        } else {
            LIN(q, "self_attn.q_proj", qd, H, qb)
            LIN(k, "self_attn.k_proj", kvd, H, qb)
            LIN(v, "self_attn.v_proj", kvd, H, qb)
        }
        LIN(o, "self_attn.o_proj", H, m->opts.mla ? (int64_t)nh * m->opts.v_dim : qd, ob)
        if (m->opts.n_experts > 0 && !(m->opts.dense_layers && m->opts.dense_layers[l])) {
            int E = m->opts.n_experts;
            int64_t MI = m->opts.moe_inter;
            char pfx[160];
            L->moe = m->has_moe = true;
            if (!(L->ex = calloc((size_t)3 * E, sizeof *L->ex))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
            snprintf(pfx, sizeof pfx, "model.layers.%d.%s", l, m->opts.moe_prefix);
            if (m->opts.ds_route) {
                snprintf(name, sizeof name, "%s.gate.e_score_correction_bias", pfx);
                if ((st = mx_wsrc_vec_f32(s, name, E, 0.0f, &L->esc_bias))) goto fail;
            }
            if (m->opts.shared_inter > 0) {
                int64_t SI = m->opts.shared_inter;
                snprintf(name, sizeof name, "model.layers.%d.mlp.shared_experts", l);
                LIN(sh_gate, "mlp.shared_experts.gate_proj", SI, H, 0)
                LIN(sh_up, "mlp.shared_experts.up_proj", SI, H, 0)
                LIN(sh_down, "mlp.shared_experts.down_proj", H, SI, 0)
            }
            snprintf(name, sizeof name, m->opts.oss_experts ? "%s.router" : "%s.gate", pfx);
            if ((st = mx_wsrc_linear(s, name, E, H, m->opts.oss_experts ? 1 : 0, &L->router))) goto fail;
            if ((st = prep_w(m, &L->router))) goto fail;
            if (m->opts.oss_experts) {
                snprintf(name, sizeof name, "%s.experts.gate_up_proj", pfx);
                if ((st = mx_wsrc_experts_t(s, name, E, H, MI, 2, L->ex))) goto fail;
                snprintf(name, sizeof name, "%s.experts.down_proj", pfx);
                if ((st = mx_wsrc_experts_t(s, name, E, MI, H, 1, L->ex + (size_t)2 * E))) goto fail;
                for (int e = 0; e < 3 * E; e++)
                    if ((st = prep_w(m, &L->ex[e]))) goto fail;
            } else {
            static const char *const stacked[3] = {"gate_proj", "up_proj", "down_proj"};
            snprintf(name, sizeof name, "%s.switch_mlp.gate_proj.weight", pfx);
            bool is_stacked = !s->ck || mx_ckpt_find(s->ck, name);
            for (int p = 0; p < 3; p++) {
                int64_t rows = p == 2 ? H : MI, cols = p == 2 ? MI : H;
                if (is_stacked) {
                    snprintf(name, sizeof name, "%s.switch_mlp.%s", pfx, stacked[p]);
                    if ((st = mx_wsrc_experts(s, name, E, rows, cols, L->ex + (size_t)p * E))) goto fail;
                } else {
                    for (int e = 0; e < E; e++) {
                        snprintf(name, sizeof name, "%s.experts.%d.%s", pfx, e, m->opts.expert_names[p]);
                        if ((st = mx_wsrc_linear(s, name, rows, cols, 0, &L->ex[(size_t)p * E + e]))) goto fail;
                    }
                }
                for (int e = 0; e < E; e++)
                    if ((st = prep_w(m, &L->ex[(size_t)p * E + e]))) goto fail;
            }
            }
        } else if (m->opts.plain_mlp) {
            LIN(up, "mlp.c_fc", I, H, mb)
            LIN(down, "mlp.c_proj", H, I, mb)
        } else {
            if (m->opts.fused_gate_up) {
                mx_weight f;
                snprintf(name, sizeof name, "model.layers.%d.mlp.gate_up_proj", l);
                if ((st = mx_wsrc_linear(s, name, 2 * (int64_t)I, H, mb, &f))) goto fail;
                SPLIT(gate, f, 0, I)
                SPLIT(up, f, I, I)
            } else {
                LIN(gate, "mlp.gate_proj", I, H, mb)
                LIN(up, "mlp.up_proj", I, H, mb)
            }
            LIN(down, "mlp.down_proj", H, I, mb)
        }
        if (!m->opts.no_pre_norms) { NORM(ln1, "input_layernorm", H) }
        if (m->opts.sandwich_norms) {
            VEC(post_attn, "post_attention_layernorm", H)
            if (!m->opts.no_pre_norms) { VEC(ln2, "pre_feedforward_layernorm", H) }
            VEC(post_ffw, "post_feedforward_layernorm", H)
        } else {
            NORM(ln2, "post_attention_layernorm", H)
        }
        if (m->opts.attn_sinks) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.sinks", l);
            if ((st = mx_wsrc_vec_f32(s, name, nh, 0.0f, &L->sinks))) goto fail;
        }
        if (m->opts.qk_norm) {
            VEC(q_norm, "self_attn.q_norm", m->opts.qk_norm_full ? qd : hd)
            VEC(k_norm, "self_attn.k_norm", m->opts.qk_norm_full ? kvd : hd)
        }
#undef NORM
#undef SPLIT
#undef LIN
#undef VEC
    }
    if ((st = mx_wsrc_vec(s, "model.norm.weight", H, 1.0f, &m->final_norm))) goto fail;
    if ((st = prep_v(m, &m->final_norm))) goto fail;
    if (m->opts.layer_norm) {
        if ((st = mx_wsrc_vec(s, "model.norm.bias", H, 0.0f, &m->final_norm_b))) goto fail;
        if ((st = prep_v(m, &m->final_norm_b))) goto fail;
    }
    bool tied = c->tie_word_embeddings;
    if (m->ck && !tied && !mx_ckpt_find(m->ck, "lm_head.weight")) tied = true;   /* as mlx-lm: no head -> tied */
    if (tied) {
        if ((st = prep_w(m, &m->embed))) goto fail;
        m->lm_head = m->embed;   /* shares the prepared device copy */
    } else {
        if ((st = mx_wsrc_linear(s, "lm_head", c->vocab_size, H, 0, &m->lm_head))) goto fail;
        if ((st = prep_w(m, &m->lm_head))) goto fail;
        /* the embedding table is only gathered from, not streamed per token */
        size_t before = m->weight_bytes;
        if ((st = prep_w(m, &m->embed))) goto fail;
        m->weight_bytes = before;
    }
    int rd = m->opts.mla ? m->opts.qk_rope : m->opts.rot_dim > 0 ? m->opts.rot_dim : hd;
    if (rd > hd || rd % 2) { st = mx_errorf(MX_ERR_FORMAT, "%s/config.json: rotary dims %d do not fit head_dim %d", where, rd, hd); goto fail; }
    if ((st = mx_rope_inv_freq(m->opts.rope_cfg ? m->opts.rope_cfg : config, rd, &m->inv_freq))) goto fail;
    m->rope.rot_dim = rd;
    m->rope.inv_freq = m->inv_freq;
    m->rope.attn_factor = mx_rope_attn_factor(m->opts.rope_cfg ? m->opts.rope_cfg : config);
    m->rope_local = m->rope;
    if (m->opts.local_rope_cfg) {
        if ((st = mx_rope_inv_freq(m->opts.local_rope_cfg, rd, &m->inv_freq_local))) goto fail;
        m->rope_local.inv_freq = m->inv_freq_local;
    }
    m->attn.n_heads = nh;
    m->attn.n_kv_heads = nkv;
    m->attn.head_dim = hd;
    m->attn.scale = m->opts.attn_scale > 0 ? m->opts.attn_scale : 1.0f / sqrtf((float)hd);
    m->attn.softcap = m->opts.attn_softcap;
    m->attn.sliding_window = m->opts.layer_flags ? 0 : m->opts.sliding_window;
    m->attn_local = m->attn;
    m->attn_local.sliding_window = m->opts.sliding_window;
    for (int l = 0; l < c->n_layers; l++) {
        bool sliding = m->opts.layer_flags && (m->opts.layer_flags[l] & MX_LAYER_SLIDING);
        bool no_rope = m->opts.layer_flags && (m->opts.layer_flags[l] & MX_LAYER_NO_ROPE);
        m->layers[l].rope = no_rope ? NULL : sliding ? &m->rope_local : &m->rope;
        m->layers[l].attn = sliding ? &m->attn_local : &m->attn;
        if (m->layers[l].sinks) {
            m->layers[l].attn_own = *m->layers[l].attn;
            m->layers[l].attn_own.sinks = m->layers[l].sinks;
            m->layers[l].attn = &m->layers[l].attn_own;
        }
    }
    if ((st = stack_build(m))) goto fail;
    *out = m;
    return MX_OK;
fail:
    mx_model_free(m);
    return st;
}

mx_status mx_model_load(const char *dir, mx_backend *be, mx_model **out) {
    mx_checkpoint *ck = NULL;
    mx_status st = mx_ckpt_open(dir, &ck);
    if (st) return st;
    mx_wsrc src = {0};
    src.ck = ck;
    return mx_decoder_build(mx_ckpt_config(ck), dir, &src, be, out);
}

mx_status mx_model_load_random(json_t *config, int q_bits, int q_group_size, mx_dtype dtype,
                               uint64_t seed, mx_backend *be, mx_model **out) {
    mx_wsrc src = {0};
    if (q_bits && !((q_bits >= 2 && q_bits <= 6) || q_bits == 8))
        return mx_errorf(MX_ERR_UNSUPPORTED, "--q-bits %d is not supported (2, 3, 4, 5, 6, 8)", q_bits);
    if (q_bits && q_group_size != 32 && q_group_size != 64 && q_group_size != 128)
        return mx_errorf(MX_ERR_UNSUPPORTED, "--q-group-size %d is not supported (32, 64, 128)", q_group_size);
    src.q_bits = q_bits;
    src.q_group = q_group_size;
    src.dtype = dtype;
    src.rng = seed ? seed : 1;
    mx_status st = mx_decoder_build(config, NULL, &src, be, out);
    if (st == MX_OK) {
        (*out)->cfg.q_bits = q_bits;
        (*out)->cfg.q_group_size = q_bits ? q_group_size : 0;
    }
    return st;
}

mx_status mx_model_prepare(mx_model *m, int n_blocks, int block_size, int max_tokens) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    const mx_model_config *c = &m->cfg;
    if (n_blocks <= 0 || block_size <= 0 || max_tokens <= 0) return mx_errorf(MX_ERR_INVALID_ARG, "bad KV cache geometry");
    if (m->n_blocks) return mx_errorf(MX_ERR_INVALID_ARG, "model already prepared");
    mx_kv_desc kd = {c->n_layers, c->n_kv_heads, c->head_dim, block_size, n_blocks, MX_DTYPE_F32};
    mx_status st = bi->kv_init(bc, &kd);
    if (st) return st;
    m->n_blocks = n_blocks;
    m->block_size = block_size;
    m->max_tokens = max_tokens;
    size_t T = (size_t)max_tokens, H = (size_t)c->hidden_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t I = (size_t)c->intermediate_size, E = (size_t)m->opts.n_experts;
    if (m->has_moe && (size_t)m->opts.moe_inter > I) I = (size_t)m->opts.moe_inter;
    if (m->has_moe && (size_t)m->opts.shared_inter > I) I = (size_t)m->opts.shared_inter;
    size_t att = qd > H ? qd : H;
#define ALLOC(f, n) if (!(m->f = bi->alloc(bc, (n) * sizeof(float)))) goto nomem;
    ALLOC(x, T * H) ALLOC(h, T * att) ALLOC(q, T * qd) ALLOC(k, T * kvd) ALLOC(v, T * kvd)
    ALLOC(att, T * att) ALLOC(g, T * I) ALLOC(u, T * I) ALLOC(rows, T * H)
    ALLOC(logits, T * (size_t)c->vocab_size)
#undef ALLOC
    m->slot = malloc(T * sizeof *m->slot);
    if (!m->slot) goto nomem;
    if (m->opts.mla) {
        const mx_decoder_opts *o = &m->opts;
        size_t nh = (size_t)c->n_heads, lat = (size_t)(o->q_lora > o->kv_lora ? o->q_lora : o->kv_lora);
#define ALLOC(f, n) if (!(m->f = bi->alloc(bc, (n) * sizeof(float)))) goto nomem;
        ALLOC(mla_a, T * lat) ALLOC(mla_s, T * (nh * (size_t)(o->qk_nope + o->v_dim) + (size_t)o->qk_rope)) ALLOC(mla_o, T * nh * (size_t)o->v_dim)
#undef ALLOC
        if (!(m->mla_map = malloc(4 * T * qd * sizeof *m->mla_map))) goto nomem;
    }
    if (m->has_moe) {
#define ALLOC(f, n) if (!(m->f = bi->alloc(bc, (n) * sizeof(float)))) goto nomem;
        ALLOC(moe_in, T * H) ALLOC(moe_y, T * H) ALLOC(moe_out, T * H) ALLOC(router, T * E)
#undef ALLOC
        m->router_host = malloc(T * E * sizeof *m->router_host);
        m->ex_w = malloc(T * E * sizeof *m->ex_w);
        m->ex_rows = malloc(T * E * sizeof *m->ex_rows);
        m->ex_cnt = malloc(E * sizeof *m->ex_cnt);
        m->tok_done = malloc(T);
        if (!m->router_host || !m->ex_w || !m->ex_rows || !m->ex_cnt || !m->tok_done) goto nomem;
        if (m->opts.oss_experts && !(m->act_host = malloc(2 * T * (size_t)m->opts.moe_inter * sizeof *m->act_host))) goto nomem;
    }
    return MX_OK;
nomem:
    free_buffers(m);
    return mx_errorf(MX_ERR_NOMEM, "out of memory allocating activations for %d tokens", max_tokens);
}

/* y = x W^T with decode rows [0, nd) exact and prompt rows [nd, n) on the fast path. */
static void mm(mx_model *m, const mx_weight *w, const float *x, float *y, int n, int nd) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    if (!bi->set_precision) { bi->matmul(bc, w, x, y, n); return; }
    if (nd > 0) {
        bi->set_precision(bc, MX_PREC_EXACT);
        bi->matmul(bc, w, x, y, nd);
    }
    if (n > nd) {
        bi->set_precision(bc, MX_PREC_FAST);
        bi->matmul(bc, w, x + (size_t)nd * w->cols, y + (size_t)nd * w->rows, n - nd);
    }
    bi->set_precision(bc, MX_PREC_AUTO);
}

/* Like mm for nw weights sharing the input x (one backend pass where the backend offers it). */
static void mmn(mx_model *m, int nw, const mx_weight *const *ws, const float *x, float *const *ys, int n, int nd) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    if (!bi->matmul_multi) {
        for (int k = 0; k < nw; k++) mm(m, ws[k], x, ys[k], n, nd);
        return;
    }
    if (bi->set_precision && nd > 0 && nd < n) {   /* exact decode rows, then fast prompt rows */
        float *yd[4];
        bi->set_precision(bc, MX_PREC_EXACT);
        bi->matmul_multi(bc, nw, ws, x, ys, nd);
        for (int k = 0; k < nw; k++) yd[k] = ys[k] + (size_t)nd * ws[k]->rows;
        bi->set_precision(bc, MX_PREC_FAST);
        bi->matmul_multi(bc, nw, ws, x + (size_t)nd * ws[0]->cols, yd, n - nd);
    } else {
        if (bi->set_precision) bi->set_precision(bc, nd > 0 ? MX_PREC_EXACT : MX_PREC_FAST);
        bi->matmul_multi(bc, nw, ws, x, ys, n);
    }
    if (bi->set_precision) bi->set_precision(bc, MX_PREC_AUTO);
}

/* RMSNorm, or LayerNorm with bias (layer_norm). */
static void norm(mx_model *m, const float *x, const mx_vec *g, const mx_vec *b, float *y, int n, int d) {
    if (m->opts.layer_norm) m->be->i->layernorm(m->be->ctx, x, g, b, m->cfg.norm_eps, y, n, d);
    else m->be->i->rmsnorm(m->be->ctx, x, g, m->cfg.norm_eps, m->opts.norm_add_one, y, n, d);
}

/* deepseek_v3 routing of token t from its router logits r[E] (overwritten): sigmoid scores;
 * choice = score + e_score_correction_bias; groups ranked by the sum of their two best choices,
 * the topk_group best kept (the others' choices become 0); top-k of the choices (ties: lower
 * index); weights are the sigmoid scores, renormalized (norm_topk) and times routed_scaling_factor. */
/* Route token t to the top_k experts by `score` (ties: lower index), weighting each by its `prob`,
 * renormalized over the chosen ones when norm_topk (sum + eps), times `scale`; appends (t, weight)
 * to each chosen expert's row list. */
static void route_topk(mx_model *m, const float *score, const float *prob, int t, float eps, float scale) {
    const int E = m->opts.n_experts, K = m->opts.top_k;
    const size_t T = (size_t)m->max_tokens;
    int sel[64];
    float ksum = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool used = false;
            for (int j = 0; j < k; j++) used = used || sel[j] == e;
            if (!used && (best < 0 || score[e] > score[best])) best = e;
        }
        sel[k] = best;
        ksum += prob[best];
    }
    for (int k = 0; k < K; k++) {
        int e = sel[k];
        float w = prob[e];
        if (m->opts.norm_topk) w /= ksum + eps;
        w *= scale;
        size_t at = (size_t)e * T + (size_t)m->ex_cnt[e]++;
        m->ex_rows[at] = t;
        m->ex_w[at] = w;
    }
}

static void ds_route(mx_model *m, const layer *L, float *r, int t) {
    const int E = m->opts.n_experts, G = m->opts.n_group, TG = m->opts.topk_group, per = E / G;
    float ch[1024];
    float gs[1024];
    bool keep[1024];
    for (int e = 0; e < E; e++) { r[e] = 1.0f / (1.0f + expf(-r[e])); ch[e] = r[e] + L->esc_bias[e]; }
    for (int g = 0; g < G; g++) {
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            if (ch[e] > b1) { b2 = b1; b1 = ch[e]; } else if (ch[e] > b2) b2 = ch[e];
        }
        gs[g] = per >= 2 ? b1 + b2 : b1;
        keep[g] = false;
    }
    for (int k = 0; k < TG; k++) {
        int best = -1;
        for (int g = 0; g < G; g++) if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
        keep[best] = true;
    }
    for (int e = 0; e < E; e++) if (!keep[e / per]) ch[e] = 0.0f;
    route_topk(m, ch, r, t, 1e-20f, m->opts.routed_scale);
}

/* Sparse MoE block on in[n, H]: router logits read back to the host, softmax over all experts,
 * top-k (ties: lower expert index), optional renormalization; then each expert with tokens runs
 * on its gathered rows (decode rows first, so they stay on the exact path) and its outputs, times
 * the routing weights, are summed per token in ascending expert order. Returns the output buffer. */
static float *moe_ops(mx_model *m, const layer *L, const float *in, int n, int nd) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    const int E = m->opts.n_experts, H = m->cfg.hidden_size, MI = m->opts.moe_inter;
    const size_t T = (size_t)m->max_tokens;
    mm(m, &L->router, in, m->router, n, nd);
    bi->read(bc, m->router_host, m->router, (size_t)n * E * sizeof(float));
    memset(m->ex_cnt, 0, (size_t)E * sizeof *m->ex_cnt);
    for (int t = 0; t < n; t++) {
        float *r = m->router_host + (size_t)t * E;   /* becomes the probabilities */
        if (m->opts.ds_route) { ds_route(m, L, r, t); continue; }
        float mx = r[0], sum = 0;
        for (int e = 1; e < E; e++) if (r[e] > mx) mx = r[e];
        for (int e = 0; e < E; e++) { r[e] = expf(r[e] - mx); sum += r[e]; }
        for (int e = 0; e < E; e++) r[e] /= sum;
        route_topk(m, r, r, t, 0.0f, 1.0f);
    }
    memset(m->tok_done, 0, (size_t)n);
    for (int e = 0; e < E; e++) {
        int cnt = m->ex_cnt[e], ne_d = 0;
        if (!cnt) continue;
        const int32_t *rows = m->ex_rows + (size_t)e * T;
        const float *wts = m->ex_w + (size_t)e * T;
        while (ne_d < cnt && rows[ne_d] < nd) ne_d++;
        bi->gather_rows(bc, in, rows, cnt, H, m->moe_in);
        const mx_weight *w2[2] = {&L->ex[e], &L->ex[(size_t)E + e]};
        float *y2[2] = {m->g, m->u};
        mmn(m, 2, w2, m->moe_in, y2, cnt, ne_d);
        if (m->opts.oss_experts) {   /* clamped SwiGLU on the host */
            const float al = m->opts.swiglu_alpha, lim = m->opts.swiglu_limit;
            float *gh = m->act_host, *uh = m->act_host + (size_t)cnt * MI;
            bi->read(bc, gh, m->g, (size_t)cnt * MI * sizeof(float));
            bi->read(bc, uh, m->u, (size_t)cnt * MI * sizeof(float));
            for (size_t i = 0; i < (size_t)cnt * MI; i++) {
                float g = gh[i] > lim ? lim : gh[i], u = uh[i] > lim ? lim : uh[i] < -lim ? -lim : uh[i];
                gh[i] = (u + 1.0f) * (g / (1.0f + expf(-al * g)));
            }
            bi->write(bc, m->g, gh, (size_t)cnt * MI * sizeof(float));
        } else {
            bi->act_mul(bc, m->opts.act, m->g, m->u, MI, m->g, cnt, MI);
        }
        mm(m, &L->ex[(size_t)2 * E + e], m->g, m->moe_y, cnt, ne_d);
        for (int i = 0; i < cnt; i++) {
            float *y = m->moe_y + (size_t)i * H, *o = m->moe_out + (size_t)rows[i] * H;
            if (!m->tok_done[rows[i]]) {
                bi->scale(bc, y, wts[i], o, H);
                m->tok_done[rows[i]] = 1;
            } else {
                bi->scale(bc, y, wts[i], y, H);
                bi->add(bc, o, y, o, H);
            }
        }
    }
    if (m->opts.shared_inter > 0) {   /* shared experts: a dense MLP on every token, added */
        const int SI = m->opts.shared_inter;
        const mx_weight *w2[2] = {&L->sh_gate, &L->sh_up};
        float *y2[2] = {m->g, m->u};
        mmn(m, 2, w2, in, y2, n, nd);
        bi->act_mul(bc, m->opts.act, m->g, m->u, SI, m->g, n, SI);
        mm(m, &L->sh_down, m->g, m->moe_y, n, nd);
        bi->add(bc, m->moe_out, m->moe_y, m->moe_out, (int64_t)n * H);
    }
    return m->moe_out;
}

/* MLA gather maps for n tokens (same for every layer): q [n, nh, D] with each head as
 * [rope (de-interleaved if rope_interleave), nope] from q_b's [nope, rope]; k likewise from
 * mla_s = [kv_b out: n, nh, nope + v][k_pe: n, rope]; v padded from nope + v to D (padding
 * copies the head's first value: finite, and dropped after attention); out: the v_dim of D. */
static void mla_maps(mx_model *m, int n) {
    const mx_decoder_opts *o = &m->opts;
    const int nh = m->cfg.n_heads, D = m->cfg.head_dim, R = o->qk_rope, N = o->qk_nope, V = o->v_dim, KV = N + V;
    const size_t per = (size_t)m->max_tokens * nh * D;
    int32_t *qm = m->mla_map, *km = qm + per, *vm = km + per, *om = vm + per;
    const int32_t off = n * nh * KV;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            int32_t *q = qm + ((size_t)t * nh + h) * D, *k = km + ((size_t)t * nh + h) * D, *v = vm + ((size_t)t * nh + h) * D;
            int32_t qb = (t * nh + h) * D, kb = (t * nh + h) * KV;
            for (int j = 0; j < D; j++) {
                if (j < R) {
                    int pj = o->rope_interleave ? (j < R / 2 ? 2 * j : 2 * (j - R / 2) + 1) : j;
                    q[j] = qb + N + pj;
                    k[j] = off + t * R + pj;
                } else {
                    q[j] = qb + (j - R);
                    k[j] = kb + (j - R);
                }
                v[j] = kb + N + (j < V ? j : 0);
            }
            for (int j = 0; j < V; j++) om[((size_t)t * nh + h) * V + j] = (t * nh + h) * D + j;
        }
}

/* MLA attention of layer L on in[n, H]: the output (before o_proj) in m->mla_o [n, nh * v_dim]. */
static void mla_attention(mx_model *m, int l, const layer *L, const float *in, int n, int nd, const mx_attn_meta *meta) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    const mx_decoder_opts *o = &m->opts;
    const int nh = m->cfg.n_heads, D = m->cfg.head_dim, KV = o->qk_nope + o->v_dim;
    const float eps = m->cfg.norm_eps;
    const size_t per = (size_t)m->max_tokens * nh * D, cnt = (size_t)n * nh * D;
    const int32_t *qm = m->mla_map, *km = qm + per, *vm = km + per, *om = vm + per;
    if (o->q_lora) {
        mm(m, &L->qa, in, m->mla_a, n, nd);
        bi->rmsnorm(bc, m->mla_a, &L->qa_norm, eps, 0.0f, m->mla_a, n, o->q_lora);
        mm(m, &L->q, m->mla_a, m->att, n, nd);
    } else {
        mm(m, &L->q, in, m->att, n, nd);
    }
    bi->gather_rows(bc, m->att, qm, (int)cnt, 1, m->q);
    mm(m, &L->kva_pe, in, m->mla_s + (size_t)n * nh * KV, n, nd);
    mm(m, &L->kva_c, in, m->mla_a, n, nd);
    bi->rmsnorm(bc, m->mla_a, &L->kva_norm, eps, 0.0f, m->mla_a, n, o->kv_lora);
    mm(m, &L->kvb, m->mla_a, m->mla_s, n, nd);
    bi->gather_rows(bc, m->mla_s, km, (int)cnt, 1, m->k);
    bi->gather_rows(bc, m->mla_s, vm, (int)cnt, 1, m->v);
    bi->rope(bc, m->q, n, nh, D, L->rope, meta);
    bi->rope(bc, m->k, n, nh, D, L->rope, meta);
    bi->attention(bc, l, m->q, m->k, m->v, m->att, L->attn, meta);
    bi->gather_rows(bc, m->att, om, n * nh * o->v_dim, 1, m->mla_o);
}

/* After the layers: the final norm and the LM head on the logit rows (have_logits: the backend's
 * decode_layers made them already), then the logit scale and softcap. When the logit rows are all
 * the batch's rows in order (decode), the norm reads the hidden rows themselves: no gather op,
 * so a backend can fold the residual add and the norm into the products around them (a gather
 * between the last add and the norm kept the CUDA backend from it: three small kernels a step). */
static void forward_head(mx_model *m, const mx_batch *b, bool have_logits) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    const int H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    if (b->n_logits == 0) return;
    if (!have_logits) {
        bool all = b->n_logits == b->n_tokens;
        for (int i = 0; all && i < b->n_logits; i++) all = b->logit_rows[i] == i;
        if (!all) bi->gather_rows(bc, m->x, b->logit_rows, b->n_logits, H, m->rows);
        norm(m, all ? m->x : m->rows, &m->final_norm, &m->final_norm_b, m->rows, b->n_logits, H);
        mm(m, &m->lm_head, m->rows, m->logits, b->n_logits, b->n_logits);  /* logits: exact */
    }
    if (m->opts.logits_scale != 0) bi->scale(bc, m->logits, m->opts.logits_scale, m->logits, (int64_t)b->n_logits * V);
    if (m->opts.final_softcap > 0) bi->softcap(bc, m->logits, m->opts.final_softcap, (int64_t)b->n_logits * V);
}

/* The op sequence of one forward pass (everything but reading the logits back). */
static void forward_ops(mx_model *m, const mx_batch *b, const mx_attn_meta *pmeta) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    const mx_model_config *c = &m->cfg;
    const int n = b->n_tokens, nd = b->n_decode;
    const mx_attn_meta meta = *pmeta;
    const int H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads, I = c->intermediate_size;
    const float eps = c->norm_eps, a1 = m->opts.norm_add_one;

    if (m->opts.mla) mla_maps(m, n);
    bi->embed(bc, &m->embed, b->tokens, n, m->x);
    if (m->opts.embed_scale != 0) bi->scale(bc, m->x, m->opts.embed_scale, m->x, (int64_t)n * H);
    /* one decode token through plain layers: the backend may run them (and the head) in one go */
    if (m->ds_ok && bi->decode_layers && n == 1 && nd == 1 && b->n_logits <= 1 && (b->n_logits == 0 || b->logit_rows[0] == 0)) {
        mx_dstack s = m->ds;
        if (b->n_logits == 0) { s.final_norm = NULL; s.lm_head = NULL; }
        int r = bi->decode_layers(bc, &s, m->x, m->logits, &meta);
        if (r > 0) { forward_head(m, b, r == 2); return; }
    }
    for (int l = 0; l < c->n_layers; l++) {
        layer *L = &m->layers[l];
        const float *in = m->x;
        if (!m->opts.no_pre_norms) { norm(m, m->x, &L->ln1, &L->ln1_b, m->h, n, H); in = m->h; }
        if (m->opts.mla) {
            mla_attention(m, l, L, in, n, nd, &meta);
            mm(m, &L->o, m->mla_o, m->h, n, nd);
        } else {
        {
            const mx_weight *w3[3] = {&L->q, &L->k, &L->v};
            float *y3[3] = {m->q, m->k, m->v};
            mmn(m, 3, w3, in, y3, n, nd);
        }
        if (m->opts.qk_norm_full) {
            bi->rmsnorm(bc, m->q, &L->q_norm, eps, a1, m->q, n, nh * hd);
            bi->rmsnorm(bc, m->k, &L->k_norm, eps, a1, m->k, n, nkv * hd);
        } else if (m->opts.qk_norm) {
            bi->rmsnorm(bc, m->q, &L->q_norm, eps, a1, m->q, n * nh, hd);
            bi->rmsnorm(bc, m->k, &L->k_norm, eps, a1, m->k, n * nkv, hd);
        }
        if (L->rope) {
            bi->rope(bc, m->q, n, nh, hd, L->rope, &meta);
            bi->rope(bc, m->k, n, nkv, hd, L->rope, &meta);
        }
        bi->attention(bc, l, m->q, m->k, m->v, m->att, L->attn, &meta);
        mm(m, &L->o, m->att, m->h, n, nd);
        }
        if (m->opts.sandwich_norms) bi->rmsnorm(bc, m->h, &L->post_attn, eps, a1, m->h, n, H);
        if (m->opts.residual_scale != 0) bi->scale(bc, m->h, m->opts.residual_scale, m->h, (int64_t)n * H);
        bi->add(bc, m->x, m->h, m->x, (int64_t)n * H);
        in = m->x;
        if (!m->opts.no_pre_norms) { norm(m, m->x, &L->ln2, &L->ln2_b, m->h, n, H); in = m->h; }
        float *mo = m->h;
        if (L->moe) {
            mo = moe_ops(m, L, in, n, nd);
        } else {
            if (m->opts.plain_mlp) {
                mm(m, &L->up, in, m->g, n, nd);
                bi->act(bc, m->opts.act, m->g, m->g, (int64_t)n * I);
            } else {
                const mx_weight *w2[2] = {&L->gate, &L->up};
                float *y2[2] = {m->g, m->u};
                mmn(m, 2, w2, in, y2, n, nd);
                bi->act_mul(bc, m->opts.act, m->g, m->u, I, m->g, n, I);
            }
            mm(m, &L->down, m->g, m->h, n, nd);
        }
        if (m->opts.sandwich_norms) bi->rmsnorm(bc, mo, &L->post_ffw, eps, a1, mo, n, H);
        if (m->opts.residual_scale != 0) bi->scale(bc, mo, m->opts.residual_scale, mo, (int64_t)n * H);
        bi->add(bc, m->x, mo, m->x, (int64_t)n * H);
    }
    forward_head(m, b, false);
}

/* Validate the batch (its token ids too, when it has them) and work out each token's KV slot
 * (m->slot). */
static mx_status batch_check(mx_model *m, const mx_batch *b) {
    const mx_model_config *c = &m->cfg;
    const int n = b->n_tokens;
    if (!m->n_blocks) return mx_errorf(MX_ERR_INVALID_ARG, "model not prepared");
    if (n <= 0 || n > m->max_tokens) return mx_errorf(MX_ERR_RANGE, "batch of %d tokens (limit %d)", n, m->max_tokens);
    if (b->n_logits < 0 || b->n_logits > n) return mx_errorf(MX_ERR_RANGE, "bad logit row count");
    if (b->n_decode < 0 || b->n_decode > n) return mx_errorf(MX_ERR_RANGE, "bad decode row count");
    for (int i = 0; i < n; i++) {
        int32_t t = b->tokens ? b->tokens[i] : 0, p = b->pos[i], s = b->seq[i];
        if (t < 0 || t >= c->vocab_size) return mx_errorf(MX_ERR_RANGE, "token id %d is outside the vocabulary (%d)", t, c->vocab_size);
        if (s < 0 || s >= b->n_seqs) return mx_errorf(MX_ERR_RANGE, "bad sequence index %d", s);
        if (p < 0 || p / m->block_size >= b->max_blocks) return mx_errorf(MX_ERR_RANGE, "position %d outside the sequence's blocks", p);
        int32_t blk = b->block_tables[(size_t)s * b->max_blocks + p / m->block_size];
        if (blk < 0 || blk >= m->n_blocks) return mx_errorf(MX_ERR_RANGE, "bad KV block %d", blk);
        m->slot[i] = blk * m->block_size + p % m->block_size;
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= n) return mx_errorf(MX_ERR_RANGE, "bad logit row");
    return MX_OK;
}

/* A decode-only batch is a repeated step: backends that can record it (CUDA graphs) replay it
 * (MoE routes on the host; MLA gathers with host maps). Its key fixes the op sequence. */
static bool is_step(const mx_model *m, const mx_batch *b) {
    const mx_backend_i *bi = m->be->i;
    return bi->step_begin && bi->step_end && b->n_decode == b->n_tokens && b->n_tokens <= 0xffff && !m->has_moe && !m->opts.mla;
}
static uint64_t step_key(const mx_batch *b) {
    return (uint64_t)b->n_tokens | (uint64_t)(b->n_logits & 0xffff) << 16 | (uint64_t)(b->n_seqs & 0xffff) << 32 |
           (uint64_t)(b->max_blocks & 0xffff) << 48;
}

/* Validate the batch and run its ops, leaving b->n_logits rows of logits in m->logits. */
static mx_status forward_run(mx_model *m, const mx_batch *b) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    const int n = b->n_tokens;
    m->n_last_logits = 0;
    mx_status st0 = batch_check(m, b);
    if (st0) return st0;
    if (!b->tokens) return mx_errorf(MX_ERR_INVALID_ARG, "a batch without token ids");
    mx_attn_meta meta = {n, b->pos, m->slot, b->seq, b->n_seqs, b->max_blocks, b->block_tables};
    bool step = is_step(m, b);
    /* Its host inputs: a backend that recorded the step may launch it again with these without
     * the ops being walked (and may keep them until step_end, to check that they are all). */
    const mx_step_inputs in = {&meta, b->tokens, n, b->logit_rows, b->n_logits};
    if (step) {
        uint64_t key = step_key(b);
        if (bi->step_replay && bi->step_replay(bc, key, &in) == MX_OK) {
            m->n_last_logits = b->n_logits;
            return MX_OK;
        }
        step = bi->step_begin(bc, key) == MX_OK;
    }
    forward_ops(m, b, &meta);
    if (step && bi->step_end(bc) != MX_OK) {
        mx_clear_error();
        forward_ops(m, b, &meta);   /* the recorded step did not run: run it op by op */
    }
    m->n_last_logits = b->n_logits;
    return MX_OK;
}

mx_status mx_model_forward(mx_model *m, const mx_batch *b, float *logits_host) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    mx_model_greedy_drain(m);
    mx_status st = forward_run(m, b);
    if (st) return st;
    if (b->n_logits == 0) { bi->sync(bc); return MX_OK; }
    bi->read(bc, logits_host, m->logits, (size_t)b->n_logits * m->cfg.vocab_size * sizeof(float));
    return MX_OK;
}

mx_status mx_model_forward_topk(mx_model *m, const mx_batch *b, int k, float *vals, int32_t *ids, float *lse) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    const int V = m->cfg.vocab_size;
    if (k < 1 || k > MX_TOPK_MAX) return mx_errorf(MX_ERR_INVALID_ARG, "topk: k = %d is outside [1, %d]", k, MX_TOPK_MAX);
    mx_model_greedy_drain(m);
    mx_status st = forward_run(m, b);
    if (st) return st;
    if (b->n_logits == 0) { bi->sync(bc); return MX_OK; }
    if (bi->topk) {
        bi->topk(bc, m->logits, b->n_logits, V, k, vals, ids, lse);
        return MX_OK;
    }
    /* no device op: bring the rows over one at a time and reduce them here */
    if (!m->topk_row && !(m->topk_row = malloc((size_t)V * sizeof *m->topk_row)))
        return mx_errorf(MX_ERR_NOMEM, "out of memory for a logit row");
    for (int r = 0; r < b->n_logits; r++) {
        bi->read(bc, m->topk_row, m->logits + (size_t)r * V, (size_t)V * sizeof(float));
        mx_topk_host(m->topk_row, V, k, vals + (size_t)r * k, ids + (size_t)r * k, lse + r);
    }
    return MX_OK;
}

mx_status mx_model_read_logits(mx_model *m, int row, float *dst) {
    mx_model_greedy_drain(m);
    if (row < 0 || row >= m->n_last_logits)
        return mx_errorf(MX_ERR_RANGE, "logit row %d: the last forward produced %d rows", row, m->n_last_logits);
    const size_t V = (size_t)m->cfg.vocab_size;
    m->be->i->read(m->be->ctx, dst, m->logits + (size_t)row * V, V * sizeof(float));
    return MX_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* greedy decoding with the steps chained on the device                                         */

/* the backend can chain steps (its top1_launch probe with no rows) and b is a step it can chain */
static bool gr_able(mx_model *m, const mx_batch *b) {
    const mx_backend_i *bi = m->be->i;
    if (!bi->top1_launch || !bi->top1_wait || !bi->step_chain || !is_step(m, b)) return false;
    const int n = b->n_tokens;
    if (n < 1 || n > MX_CHAIN_MAX || b->n_logits != n || !b->logit_rows) return false;
    for (int i = 0; i < n; i++) if (b->logit_rows[i] != i) return false;
    return bi->top1_launch(m->be->ctx, NULL, 0, m->cfg.vocab_size, 0) == MX_OK;
}

/* bring launched step i's results over (waiting for them) */
static mx_status gr_take(mx_model *m, int i) {
    if (m->gr_have[i]) return MX_OK;
    mx_status st = m->be->i->top1_wait(m->be->ctx, m->gr_slot[i], m->gr_rows[i], m->gr_v[i], m->gr_id[i], m->gr_l[i]);
    if (st) return st;
    m->gr_have[i] = true;
    return MX_OK;
}

mx_status mx_model_greedy_launch(mx_model *m, const mx_batch *b, bool chained) {
    const mx_backend_i *bi = m->be->i;
    void *bc = m->be->ctx;
    const int n = b->n_tokens;
    if (!gr_able(m, b)) return mx_errorf(MX_ERR_UNSUPPORTED, "greedy chain: the backend or the batch does not take it");
    if (m->gr_n == 2) return mx_errorf(MX_ERR_INVALID_ARG, "greedy chain: two launched steps are waiting to be read");
    mx_batch bb = *b;
    bool on_device = false;
    if (chained) {
        const int last = m->gr_n - 1;
        if ((last >= 0 ? m->gr_rows[last] : m->gr_last_n) != n)
            return mx_errorf(MX_ERR_INVALID_ARG, "greedy chain: no launched step of %d rows to take the tokens from", n);
        if (last >= 0 && !m->gr_have[last]) {
            bb.tokens = NULL;
            mx_status st = batch_check(m, &bb);
            if (st) return st;
            mx_attn_meta meta = {n, bb.pos, m->slot, bb.seq, bb.n_seqs, bb.max_blocks, bb.block_tables};
            const mx_step_inputs in = {&meta, NULL, n, bb.logit_rows, n};
            on_device = bi->step_chain(bc, step_key(&bb), &in) == MX_OK;
            /* not chained on the device: the ids come over, and the step runs with them */
            if (!on_device && (st = gr_take(m, last))) return st;
        }
        bb.tokens = last >= 0 ? m->gr_id[last] : m->gr_last;
    }
    if (on_device) m->gr_chained++;
    else {
        mx_status st = forward_run(m, &bb);
        if (st) return st;
    }
    const int slot = m->gr_next;
    mx_status st = bi->top1_launch(bc, m->logits, n, m->cfg.vocab_size, slot);
    if (st) return st;
    m->gr_next ^= 1;
    m->n_last_logits = n;
    m->gr_rows[m->gr_n] = n; m->gr_slot[m->gr_n] = slot; m->gr_have[m->gr_n] = false;
    m->gr_n++;
    return MX_OK;
}

mx_status mx_model_greedy_wait(mx_model *m, float *vals, int32_t *ids, float *lse) {
    if (m->gr_n == 0) return mx_errorf(MX_ERR_INVALID_ARG, "greedy chain: no launched step to wait for");
    mx_status st = gr_take(m, 0);
    if (st) return st;
    const int n = m->gr_rows[0];
    memcpy(vals, m->gr_v[0], (size_t)n * sizeof *vals);
    memcpy(ids, m->gr_id[0], (size_t)n * sizeof *ids);
    memcpy(lse, m->gr_l[0], (size_t)n * sizeof *lse);
    if (m->gr_n == 1) { memcpy(m->gr_last, m->gr_id[0], (size_t)n * sizeof *ids); m->gr_last_n = n; }
    else {   /* the next one moves up */
        m->gr_rows[0] = m->gr_rows[1]; m->gr_slot[0] = m->gr_slot[1]; m->gr_have[0] = m->gr_have[1];
        memcpy(m->gr_v[0], m->gr_v[1], sizeof m->gr_v[0]);
        memcpy(m->gr_id[0], m->gr_id[1], sizeof m->gr_id[0]);
        memcpy(m->gr_l[0], m->gr_l[1], sizeof m->gr_l[0]);
    }
    m->gr_n--;
    return MX_OK;
}

void mx_model_greedy_drain(mx_model *m) {
    m->gr_last_n = 0;   /* (no step to chain from after another forward) */
    if (!m->gr_n) return;
    for (int i = 0; i < m->gr_n; i++)
        if (gr_take(m, i)) mx_clear_error();   /* (a failure stays in the backend's status) */
    m->gr_n = 0;
}

long mx_model_greedy_chained(const mx_model *m) { return m->gr_chained; }
