/* models/registry.c: the table of supported architectures (model_type -> family), used to load
 * models and by `mlxcel arch`. Adding a family: write its file and add it here. */
#include "models/decoder.h"

#include <stdio.h>
#include <string.h>

extern const mx_family mx_family_llama, mx_family_mistral, mx_family_qwen2, mx_family_qwen3;
extern const mx_family mx_family_gemma2, mx_family_gemma3, mx_family_phi3, mx_family_granite;
extern const mx_family mx_family_olmo2, mx_family_starcoder2, mx_family_smollm3;
extern const mx_family mx_family_qwen3_moe, mx_family_mixtral, mx_family_gpt_oss, mx_family_deepseek_v3;

static const mx_family *const g_families[] = {
    &mx_family_llama, &mx_family_mistral, &mx_family_qwen2, &mx_family_qwen3,
    &mx_family_gemma2, &mx_family_gemma3, &mx_family_phi3, &mx_family_granite,
    &mx_family_olmo2, &mx_family_starcoder2, &mx_family_smollm3,
    &mx_family_qwen3_moe, &mx_family_mixtral, &mx_family_gpt_oss, &mx_family_deepseek_v3,
};
#define N_FAMILIES ((int)(sizeof g_families / sizeof g_families[0]))

const mx_family *mx_family_find(const char *model_type) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (!strcmp(g_families[i]->info.model_type, model_type)) return g_families[i];
    return NULL;
}

const mx_arch_info *mx_model_archs(int *n) {
    static mx_arch_info infos[N_FAMILIES];
    for (int i = 0; i < N_FAMILIES; i++) infos[i] = g_families[i]->info;
    *n = N_FAMILIES;
    return infos;
}

const char *mx_model_arch_names(void) {
    static char buf[512];
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < N_FAMILIES && k < sizeof buf; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "", g_families[i]->info.model_type);
    return buf;
}
