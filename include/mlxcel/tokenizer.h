/* mlxcel/tokenizer.h: Hugging Face tokenizer.json (BPE byte-level and SentencePiece-style,
 * WordPiece, Unigram; normalizers, pre-tokenizers, post-processors, decoders, added tokens) and
 * streaming detokenization. It is not a chat-template renderer (see template.h) and knows nothing
 * of models.
 *
 * Ownership: mx_tokenizer_load returns a tokenizer freed by mx_tokenizer_free. Arrays and strings
 * returned through out-pointers are malloc'ed and owned by the caller (free()). Strings returned
 * directly (token_str, bos_str, eos_str) belong to the tokenizer and live as long as it.
 *
 * Thread safety: a loaded tokenizer is immutable except for an internal word cache guarded by
 * locks, so encode/decode/lookups may be called from many threads at once. A detok stream belongs
 * to one thread at a time. */
#ifndef MLXCEL_TOKENIZER_H
#define MLXCEL_TOKENIZER_H

#include "mlxcel/core.h"

typedef struct mx_tokenizer mx_tokenizer;

/* dir holds tokenizer.json (or tokenizer.json.xz) and optionally tokenizer_config.json.
 * Errors: MX_ERR_IO (missing/unreadable), MX_ERR_FORMAT (bad JSON, bad merges, ...),
 * MX_ERR_UNSUPPORTED (a component type we do not know, named in the message). */
mx_status mx_tokenizer_load(const char *dir, mx_tokenizer **out);
/* Load from explicit files: json_path is tokenizer.json or a .xz of it; config_path may be NULL
 * (then add_bos_token/add_eos_token and bos/eos strings are unknown: behaves like HF `tokenizers`). */
mx_status mx_tokenizer_load_files(const char *json_path, const char *config_path, mx_tokenizer **out);
/* Load from memory (tokenizer.json text, not compressed); config_json may be NULL. */
mx_status mx_tokenizer_load_mem(const char *json, size_t len, const char *config_json, size_t config_len,
                                mx_tokenizer **out);
void mx_tokenizer_free(mx_tokenizer *t);

/* Encode UTF-8 text (invalid UTF-8 gives MX_ERR_INVALID_ARG). Added/special tokens in the text are
 * matched as HF does. add_special: apply the post-processor and tokenizer_config's
 * add_bos_token/add_eos_token (add_special_tokens=True). *ids is malloc'ed (non-NULL even when
 * *n_ids is 0). */
mx_status mx_tokenizer_encode(const mx_tokenizer *t, const char *text, size_t len, bool add_special,
                              int32_t **ids, int *n_ids);
/* Flags for mx_tokenizer_encode_ex. */
enum {
    MX_TOK_ADD_SPECIAL = 1,      /* as add_special above */
    MX_TOK_SPLIT_SPECIAL = 2,    /* do not match special added tokens in the text: encode them as plain
                                    text (HF encode_special_tokens / split_special_tokens=True) */
};
mx_status mx_tokenizer_encode_ex(const mx_tokenizer *t, const char *text, size_t len, unsigned flags,
                                 int32_t **ids, int *n_ids);
/* Decode ids to UTF-8 text (malloc'ed, NUL-terminated) as HF's decode does. Ids outside the vocab
 * are skipped. skip_special drops special added tokens. */
mx_status mx_tokenizer_decode(const mx_tokenizer *t, const int32_t *ids, int n, bool skip_special, char **text);
/* Same, also giving the length (the text may contain NUL bytes when a token decodes to U+0000). */
mx_status mx_tokenizer_decode_n(const mx_tokenizer *t, const int32_t *ids, int n, bool skip_special, char **text, size_t *len);

int mx_tokenizer_vocab_size(const mx_tokenizer *t);          /* max id + 1 (vocab and added tokens) */
int32_t mx_tokenizer_token_id(const mx_tokenizer *t, const char *token);  /* -1 if absent */
const char *mx_tokenizer_token_str(const mx_tokenizer *t, int32_t id);   /* raw vocab string or NULL */
bool mx_tokenizer_is_special(const mx_tokenizer *t, int32_t id);
/* From tokenizer_config.json: bos_token/eos_token strings (string or {"content": ...}), NULL if
 * none; their ids or -1. */
const char *mx_tokenizer_bos_str(const mx_tokenizer *t);
const char *mx_tokenizer_eos_str(const mx_tokenizer *t);
int32_t mx_tokenizer_bos_id(const mx_tokenizer *t);
int32_t mx_tokenizer_eos_id(const mx_tokenizer *t);
/* tokenizer_config.json add_bos_token / add_eos_token (false when absent). */
bool mx_tokenizer_add_bos(const mx_tokenizer *t);
bool mx_tokenizer_add_eos(const mx_tokenizer *t);

/* Streaming decode: push one id, get the newly completed text appended to out_append (never a
 * partial UTF-8 sequence). The concatenation of everything appended by push and flush equals
 * mx_tokenizer_decode of all the ids pushed. */
typedef struct mx_detok_stream mx_detok_stream;
mx_detok_stream *mx_detok_stream_new(const mx_tokenizer *t, bool skip_special);  /* NULL on OOM */
mx_status mx_detok_stream_push(mx_detok_stream *s, int32_t id, mx_buf *out_append);
/* Remaining bytes (invalid ones as U+FFFD as HF's decode does); the stream can then be reused. */
void mx_detok_stream_flush(mx_detok_stream *s, mx_buf *out_append);
void mx_detok_stream_free(mx_detok_stream *s);

#endif
