/* tests/fuzz/fuzz_tokenizer.c: libFuzzer target for the tokenizer layer (built by `make fuzz` into
 * build-fuzz/fuzz/fuzz_tokenizer). The first input byte picks the mode:
 *   even: the rest is a tokenizer.json; when it loads, encode/decode/stream a few texts with it;
 *   odd:  the rest is text for a built-in tokenizer exercising most components (byte-level BPE
 *         with Split regex, added tokens with flags, normalizers, decoders), then decode the input
 *         read as token ids, whole and streamed.
 * Run: build-fuzz/fuzz/fuzz_tokenizer -max_total_time=60 [corpus_dir] */
#include "mlxcel/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static const char BUILTIN[] =
    "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\\\s{3,}\"},\"content\":\"  \"}]},"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"Digits\",\"individual_digits\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":false}]},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
    "\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[0],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteLevel\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":1}]},"
    "\"added_tokens\":["
    "{\"id\":0,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false,\"special\":true},"
    "{\"id\":1,\"content\":\"ab\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,\"special\":false}],"
    "\"model\":{\"type\":\"BPE\",\"byte_fallback\":false,\"ignore_merges\":false,\"vocab\":{"
    "\"<s>\":0,\"ab\":1,\"a\":2,\"b\":3,\"c\":4,\"\xC4\xA0\":5,\"\xC4\xA0" "a\":6,\"1\":7,\"2\":8,\"12\":9,\"\xC3\xA4\":10,\"\xC4\x8A\":11},"
    "\"merges\":[\"\xC4\xA0 a\",\"1 2\"]}}";

static mx_tokenizer *g_builtin;

static void exercise(const mx_tokenizer *t, const char *text, size_t len) {
    for (int sp = 0; sp < 3; sp++) {
        int32_t *ids; int n;
        unsigned fl = sp == 0 ? 0 : sp == 1 ? MX_TOK_ADD_SPECIAL : MX_TOK_SPLIT_SPECIAL;
        if (mx_tokenizer_encode_ex(t, text, len, fl, &ids, &n) != MX_OK) continue;
        char *s; size_t sl;
        if (mx_tokenizer_decode_n(t, ids, n, sp == 1, &s, &sl) == MX_OK) free(s);
        mx_detok_stream *ds = mx_detok_stream_new(t, sp == 1);
        if (ds) {
            mx_buf out = {0};
            for (int i = 0; i < n; i++) mx_detok_stream_push(ds, ids[i], &out);
            mx_detok_stream_flush(ds, &out);
            mx_buf_free(&out);
            mx_detok_stream_free(ds);
        }
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *rest = (const char *)data + 1;
    size_t rn = size - 1;
    if (!(data[0] & 1)) {
        mx_tokenizer *t = NULL;
        if (mx_tokenizer_load_mem(rest, rn, NULL, 0, &t) == MX_OK) {
            static const char *texts[] = { "Hello world!", " <s>  12 345\n\n", "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80", "" };
            for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) exercise(t, texts[i], strlen(texts[i]));
            int vs = mx_tokenizer_vocab_size(t);
            for (int32_t id = -1; id <= vs && id < 64; id++) {
                mx_tokenizer_token_str(t, id);
                mx_tokenizer_is_special(t, id);
            }
            mx_tokenizer_free(t);
        }
        return 0;
    }
    if (!g_builtin && mx_tokenizer_load_mem(BUILTIN, sizeof BUILTIN - 1, NULL, 0, &g_builtin) != MX_OK) abort();
    exercise(g_builtin, rest, rn);
    /* the input as a list of ids (some out of range) */
    size_t n = rn / 2;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids) return 0;
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(((uint8_t)rest[2 * i] | ((uint8_t)rest[2 * i + 1] << 8)) % 16) - 1;
    char *s;
    if (mx_tokenizer_decode(g_builtin, ids, (int)n, false, &s) == MX_OK) free(s);
    mx_detok_stream *ds = mx_detok_stream_new(g_builtin, false);
    if (ds) {
        mx_buf out = {0};
        for (size_t i = 0; i < n; i++) mx_detok_stream_push(ds, ids[i], &out);
        mx_detok_stream_flush(ds, &out);
        mx_buf_free(&out);
        mx_detok_stream_free(ds);
    }
    free(ids);
    return 0;
}
