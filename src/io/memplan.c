/* io/memplan.c: memory needs of a checkpoint for `mlxcel inspect`: weight bytes from the tensors,
 * KV cache bytes from config.json, an activation estimate, headroom, and the memory available to the
 * device (CPU: MemAvailable from /proc/meminfo). Not the engine's allocator: these are estimates
 * made before loading, with the formulas stated in store.h. */
#include "mlxcel/io.h"
#include "mlxcel/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t mx_mem_available_cpu(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long v;
        if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) { kb = v; break; }
    }
    fclose(f);
    return kb * 1024ull;
}

static mx_status cfg_int(json_t *cfg, const char *dir, const char *key, int64_t def, int64_t *out) {
    if (!mx_json_int(cfg, key, def, out) || *out < 0)
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: %s is not a non-negative integer", dir, key);
    return MX_OK;
}

mx_status mx_mem_estimate_ckpt(mx_checkpoint *c, int64_t ctx, int64_t batch, mx_mem_estimate *m) {
    memset(m, 0, sizeof *m);
    const char *dir = mx_ckpt_dir(c);
    json_t *cfg = mx_ckpt_config(c);
    if (!json_object_get(cfg, "num_hidden_layers") && json_is_object(json_object_get(cfg, "text_config")))
        cfg = json_object_get(cfg, "text_config");
    mx_status st;
    int64_t layers, hidden, heads, kvh, hd, inter, vocab, maxpos;
    if ((st = cfg_int(cfg, dir, "num_hidden_layers", 0, &layers)) || (st = cfg_int(cfg, dir, "hidden_size", 0, &hidden)) ||
        (st = cfg_int(cfg, dir, "num_attention_heads", 0, &heads)) || (st = cfg_int(cfg, dir, "num_key_value_heads", heads, &kvh)) ||
        (st = cfg_int(cfg, dir, "intermediate_size", 4 * hidden, &inter)) || (st = cfg_int(cfg, dir, "vocab_size", 0, &vocab)) ||
        (st = cfg_int(cfg, dir, "max_position_embeddings", 4096, &maxpos)))
        return st;
    if (!layers || !hidden || !heads)
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: needs num_hidden_layers, hidden_size and num_attention_heads", dir);
    if ((st = cfg_int(cfg, dir, "head_dim", hidden / heads, &hd))) return st;
    if (hd == 0) hd = hidden / heads;
    if (ctx <= 0) ctx = maxpos < 4096 ? maxpos : 4096;
    if (batch <= 0) batch = 1;
    if (ctx > (int64_t)1 << 32 || batch > 1 << 20) return mx_errorf(MX_ERR_RANGE, "context or batch too large");
    m->ctx = ctx; m->batch = batch;
    m->layers = layers; m->kv_heads = kvh; m->head_dim = hd;
    m->weights_bytes = mx_ckpt_total_bytes(c);
    /* K and V, f32 on the CPU backend */
    m->kv_bytes_per_token = (uint64_t)layers * (uint64_t)kvh * (uint64_t)hd * 2u * 4u;
    m->kv_bytes_total = m->kv_bytes_per_token * (uint64_t)ctx * (uint64_t)batch;
    /* activations for one prefill chunk of up to 512 tokens per sequence, one layer live at a time */
    uint64_t chunk = (uint64_t)(ctx < 512 ? ctx : 512) * (uint64_t)batch;
    uint64_t per_tok = 4u * (uint64_t)hidden + 3u * (uint64_t)inter + (uint64_t)heads * (uint64_t)hd + 2u * (uint64_t)kvh * (uint64_t)hd;
    uint64_t scores = (uint64_t)heads * chunk * (uint64_t)(ctx < 512 ? ctx : 512);
    m->activation_bytes = 4u * (chunk * per_tok + scores + (uint64_t)batch * (uint64_t)vocab);
    uint64_t sub = m->weights_bytes + m->kv_bytes_total + m->activation_bytes;
    m->headroom_bytes = sub / 20u + (256ull << 20);
    m->total_bytes = sub + m->headroom_bytes;
    m->device = "cpu";
    m->budget_bytes = mx_mem_available_cpu();
    m->fits = m->budget_bytes > 0 && m->total_bytes <= m->budget_bytes;
    return MX_OK;
}

void mx_mem_estimate_retarget(mx_mem_estimate *m, const char *device, uint64_t budget_bytes, int kv_elem_bytes) {
    m->device = device;
    m->kv_bytes_per_token = (uint64_t)m->layers * (uint64_t)m->kv_heads * (uint64_t)m->head_dim * 2u * (uint64_t)kv_elem_bytes;
    m->kv_bytes_total = m->kv_bytes_per_token * (uint64_t)m->ctx * (uint64_t)m->batch;
    uint64_t sub = m->weights_bytes + m->kv_bytes_total + m->activation_bytes;
    m->headroom_bytes = sub / 20u + (256ull << 20);
    m->total_bytes = sub + m->headroom_bytes;
    m->budget_bytes = budget_bytes;
    m->fits = m->budget_bytes > 0 && m->total_bytes <= m->budget_bytes;
}
