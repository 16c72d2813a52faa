/* tests/unit/test_tokenizer_components.c: tokenizer.json components on small synthetic tokenizers
 * (WordPiece + BertNormalizer + BertPreTokenizer + BertProcessing + WordPiece decoder; Unigram +
 * NFKC + Metaspace; every Split behavior; Digits, Punctuation, Whitespace, WhitespaceSplit;
 * normalizers; added-token flags; RobertaProcessing, TemplateProcessing, Sequence; decoders) and
 * bad tokenizer files (truncated JSON, unknown components, bad merges, corrupt .xz) that must give
 * errors, not crashes. Expected values follow Hugging Face tokenizers' documented semantics. */
#include "test.h"
#include "mlxcel/tokenizer.h"

#include <jansson.h>
#include <stdarg.h>
#include <unistd.h>

static mx_tokenizer *mk(const char *json) {
    mx_tokenizer *t = NULL;
    if (mx_tokenizer_load_mem(json, strlen(json), NULL, 0, &t) != MX_OK) {
        printf("# load failed: %s\n", mx_last_error());
        return NULL;
    }
    return t;
}

/* encode text and compare with the expected ids (terminated by -1) */
static bool enc_is(mx_tokenizer *t, const char *text, bool special, const int32_t *want, char *why, size_t wn) {
    int32_t *ids; int n;
    if (mx_tokenizer_encode(t, text, strlen(text), special, &ids, &n)) { snprintf(why, wn, "encode '%s': %s", text, mx_last_error()); return false; }
    int k = 0;
    while (want[k] >= 0) k++;
    bool ok = k == n && !memcmp(ids, want, (size_t)n * 4);
    if (!ok) {
        size_t o = (size_t)snprintf(why, wn, "'%s': got [", text);
        for (int i = 0; i < n && o + 12 < wn; i++) o += (size_t)snprintf(why + o, wn - o, "%s%d", i ? "," : "", ids[i]);
        snprintf(why + o, wn - o, "]");
    }
    free(ids);
    return ok;
}
#define ENC(t, text, special, ...) do { int32_t _w[] = { __VA_ARGS__, -1 }; char _why[300]; \
    TCHECK(enc_is(t, text, special, _w, _why, sizeof _why), "%s", _why); } while (0)
#define ENC0(t, text, special) do { int32_t _w[] = { -1 }; char _why[300]; \
    TCHECK(enc_is(t, text, special, _w, _why, sizeof _why), "%s", _why); } while (0)

static bool dec_is(mx_tokenizer *t, const int32_t *ids, int n, bool skip, const char *want, char *why, size_t wn) {
    char *s;
    if (mx_tokenizer_decode(t, ids, n, skip, &s)) { snprintf(why, wn, "decode: %s", mx_last_error()); return false; }
    bool ok = !strcmp(s, want);
    if (!ok) snprintf(why, wn, "decode got '%s' want '%s'", s, want);
    free(s);
    return ok;
}
#define DEC(t, skip, want, ...) do { int32_t _i[] = { __VA_ARGS__ }; char _why[300]; \
    TCHECK(dec_is(t, _i, (int)(sizeof _i / sizeof _i[0]), skip, want, _why, sizeof _why), "%s", _why); } while (0)

static const char *ADDED_BERT = "\"added_tokens\":["
    "{\"id\":0,\"content\":\"[UNK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":1,\"content\":\"[CLS]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":2,\"content\":\"[SEP]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}]";

static void t_bert_wordpiece(void) {
    char js[4096];
    snprintf(js, sizeof js, "{%s,"
        "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true},"
        "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
        "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",2],\"cls\":[\"[CLS]\",1]},"
        "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
        "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":10,"
        "\"vocab\":{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,\"hello\":3,\"world\":4,\"un\":5,\"##aff\":6,\"##able\":7,\",\":8,\"!\":9,\"cafe\":10,"
        "\"\xE4\xBD\xA0\":11,\"\xE5\xA5\xBD\":12,\"a\":13,\"##b\":14}}}", ADDED_BERT);
    mx_tokenizer *t = mk(js);
    TREQUIRE(t, "load");
    ENC(t, "Hello, World! unaffable Caf\xC3\xA9 xyz", false, 3, 8, 4, 9, 5, 6, 7, 10, 0);
    ENC(t, "Hello, World! unaffable Caf\xC3\xA9 xyz", true, 1, 3, 8, 4, 9, 5, 6, 7, 10, 0, 2);
    ENC(t, "\xE4\xBD\xA0\xE5\xA5\xBD", false, 11, 12);            /* CJK chars padded with spaces */
    ENC(t, "hello\tworld\x01!", false, 3, 4, 9);                   /* tab is whitespace, control removed */
    ENC(t, "abbbbbbbbbbbbbbb", false, 0);                          /* over max_input_chars_per_word */
    ENC(t, "abb", false, 13, 14, 14);
    ENC(t, "[CLS] hello", false, 1, 3);
    DEC(t, false, "hello, world! unaffable cafe", 3, 8, 4, 9, 5, 6, 7, 10);
    DEC(t, true, "hello world", 1, 3, 4, 2);
    mx_tokenizer_free(t);
}

static void t_unigram_metaspace(void) {
    const char *js = "{\"normalizer\":{\"type\":\"NFKC\"},"
        "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true},"
        "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true},"
        "\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"byte_fallback\":false,\"vocab\":["
        "[\"<unk>\",0],[\"\xE2\x96\x81\",-2],[\"\xE2\x96\x81he\",-3],[\"llo\",-3],[\"\xE2\x96\x81hello\",-4],[\"h\",-5],[\"e\",-5],"
        "[\"l\",-5],[\"o\",-5],[\"\xE2\x96\x81world\",-4],[\"wor\",-6],[\"ld\",-6]]}}";
    mx_tokenizer *t = mk(js);
    TREQUIRE(t, "load");
    ENC(t, "hello world", false, 4, 9);
    ENC(t, "\xEF\xBD\x88\xEF\xBD\x85\xEF\xBD\x8C\xEF\xBD\x8C\xEF\xBD\x8F", false, 4);   /* fullwidth, NFKC */
    ENC(t, "hellxx", false, 2, 7, 7, 0);                           /* unknown chars fused into one unk */
    DEC(t, false, "hello world", 4, 9);
    DEC(t, false, "hello", 1, 5, 6, 7, 7, 8);
    mx_tokenizer_free(t);
    /* byte_fallback in Unigram */
    js = "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"byte_fallback\":true,\"vocab\":["
        "[\"<unk>\",0],[\"a\",-1],[\"<0xC3>\",-5],[\"<0xA9>\",-5]]},"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}}";
    t = mk(js);
    TREQUIRE(t, "load 2");
    ENC(t, "a\xC3\xA9", false, 1, 2, 3);
    ENC(t, "a\xC3\xA8", false, 1, 0);                              /* <0xA8> missing: unk */
    DEC(t, false, "a\xC3\xA9", 1, 2, 3);
    DEC(t, false, "\xEF\xBF\xBD" "a", 2, 1);                       /* lone byte: U+FFFD */
    mx_tokenizer_free(t);
}

/* a WordPiece model over whole words makes the pre-tokenizer's pieces visible as ids */
static mx_tokenizer *mk_pre(const char *pre, const char *norm) {
    char js[4096];
    snprintf(js, sizeof js, "{\"normalizer\":%s,\"pre_tokenizer\":%s,"
        "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":100,"
        "\"vocab\":{\"[UNK]\":0,\"a\":1,\"b\":2,\"c\":3,\"-\":4,\"a-\":5,\"b-\":6,\"-b\":7,\"-c\":8,\"--\":9,\"ab\":10,\"1\":11,\"2\":12,"
        "\"3\":13,\"123\":14,\"hi\":15,\"!\":16,\"?\":17,\"there\":18,\"!!\":19,\"there!!\":20,\" \":21,\"xbb\":22,\"cafe\":23,"
        "\"fi\":24,\"hello\":25,\"\xE2\x96\x81hi\":26,\"\xE2\x96\x81there\":27,\"\xE2\x96\x81\":28}}}", norm ? norm : "null", pre);
    return mk(js);
}

static void t_split_behaviors(void) {
    static const struct { const char *beh; bool invert; int32_t want[8]; } cases[] = {
        { "Removed", false, { 1, 2, 3, -1 } },
        { "Isolated", false, { 1, 4, 2, 4, 4, 3, -1 } },
        { "MergedWithPrevious", false, { 5, 6, 4, 3, -1 } },
        { "MergedWithNext", false, { 1, 7, 4, 8, -1 } },
        { "Contiguous", false, { 1, 4, 2, 9, 3, -1 } },
        { "Removed", true, { 4, 4, 4, -1 } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int rx = 0; rx < 2; rx++) {
            char pre[256];
            snprintf(pre, sizeof pre, "{\"type\":\"Split\",\"pattern\":{\"%s\":\"-\"},\"behavior\":\"%s\",\"invert\":%s}",
                     rx ? "Regex" : "String", cases[i].beh, cases[i].invert ? "true" : "false");
            mx_tokenizer *t = mk_pre(pre, NULL);
            TREQUIRE(t, "load %s", pre);
            char why[300];
            TCHECK(enc_is(t, "a-b--c", false, cases[i].want, why, sizeof why), "%s invert=%d regex=%d: %s", cases[i].beh, cases[i].invert, rx, why);
            mx_tokenizer_free(t);
        }
    }
}

static void t_pretokenizers(void) {
    mx_tokenizer *t = mk_pre("{\"type\":\"Digits\",\"individual_digits\":true}", NULL);
    TREQUIRE(t, "digits");
    ENC(t, "ab123", false, 10, 11, 12, 13);
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"Digits\",\"individual_digits\":false}", NULL);
    TREQUIRE(t, "digits2");
    ENC(t, "ab123", false, 10, 14);
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"Punctuation\",\"behavior\":\"Isolated\"}", NULL);
    TREQUIRE(t, "punct");
    ENC(t, "hi!?", false, 15, 16, 17);
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"Whitespace\"}", NULL);
    TREQUIRE(t, "ws");
    ENC(t, "hi  there!!", false, 15, 18, 19);
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"WhitespaceSplit\"}", NULL);
    TREQUIRE(t, "wss");
    ENC(t, " hi\tthere!! ", false, 15, 20);
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":\"Punctuation\",\"behavior\":\"Contiguous\"}]}", NULL);
    TREQUIRE(t, "seq");
    ENC(t, "hi there!!", false, 15, 18, 19);
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"first\",\"split\":true}", NULL);
    TREQUIRE(t, "meta");
    ENC(t, "hi there", false, 26, 27);
    ENC(t, "hi  there", false, 26, 28, 27);                 /* HF: "▁hi", "▁", "▁there" */
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"never\",\"split\":true}", NULL);
    TREQUIRE(t, "meta never");
    ENC(t, "hi there", false, 15, 27);
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"CharDelimiterSplit\",\"delimiter\":\"-\"}", NULL);
    TREQUIRE(t, "chardelim");
    ENC(t, "a-b--c", false, 1, 2, 3);
    mx_tokenizer_free(t);
}

static void t_normalizers(void) {
    const char *ws = "{\"type\":\"WhitespaceSplit\"}";
    mx_tokenizer *t = mk_pre(ws, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"a\"},\"content\":\"b\"},{\"type\":\"Prepend\",\"prepend\":\"x\"}]}");
    TREQUIRE(t, "replace+prepend");
    ENC(t, "aa", false, 22);
    ENC0(t, "", false);                                             /* Prepend leaves empty text empty */
    mx_tokenizer_free(t);
    t = mk_pre(ws, "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"a+\"},\"content\":\"bb\"}");
    TREQUIRE(t, "regex replace");
    ENC(t, "xaaa", false, 22);
    mx_tokenizer_free(t);
    t = mk_pre(ws, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"},{\"type\":\"Lowercase\"}]}");
    TREQUIRE(t, "nfd");
    ENC(t, "CAF\xC3\x89", false, 23);
    mx_tokenizer_free(t);
    t = mk_pre(ws, "{\"type\":\"NFKC\"}");
    TREQUIRE(t, "nfkc");
    ENC(t, "\xEF\xAC\x81", false, 24);                              /* U+FB01 ligature -> "fi" */
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"Isolated\",\"invert\":false}", "{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}");
    TREQUIRE(t, "strip");
    ENC(t, "  hello \n", false, 25);
    mx_tokenizer_free(t);
    t = mk_pre("{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"Isolated\",\"invert\":false}", "{\"type\":\"Strip\",\"strip_left\":false,\"strip_right\":true}");
    TREQUIRE(t, "rstrip");
    ENC(t, " hello ", false, 0);                                    /* " hello" is not in the vocab */
    mx_tokenizer_free(t);
    t = mk_pre(ws, "{\"type\":\"NFC\"}");
    TREQUIRE(t, "nfc");
    ENC(t, "cafe\xCC\x81", false, 0);                               /* composed "café" not in vocab -> unk */
    mx_tokenizer_free(t);
}

static void t_added_flags(void) {
    /* Split on " " isolated so that spaces become tokens (id 21): lstrip/rstrip are visible */
    const char *js = "{\"normalizer\":{\"type\":\"Lowercase\"},"
        "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Isolated\",\"invert\":false},"
        "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"max_input_chars_per_word\":100,"
        "\"vocab\":{\"[UNK]\":0,\"a\":1,\"b\":2,\" \":3,\"abc\":4,\"<z>\":5}},"
        "\"added_tokens\":["
        "{\"id\":10,\"content\":\"<x>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false,\"special\":true},"
        "{\"id\":11,\"content\":\"<y>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
        "{\"id\":12,\"content\":\"ab\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false},"
        "{\"id\":13,\"content\":\"HI\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,\"special\":false},"
        "{\"id\":14,\"content\":\"<Z>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false},"
        "{\"id\":15,\"content\":\"<xx>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}]}";
    mx_tokenizer *t = mk(js);
    TREQUIRE(t, "load");
    ENC(t, "a <x> b", false, 1, 10, 2);                     /* lstrip + rstrip eat the spaces */
    ENC(t, "a <y> b", false, 1, 3, 11, 3, 2);
    ENC(t, "ab abc", false, 12, 3, 4);                      /* single_word: not inside "abc" */
    ENC(t, "Hi a", false, 13, 3, 1);                        /* normalized token matched after lowercasing */
    ENC(t, "<z>", false, 5);                                /* non-normalized "<Z>" does not match "<z>" */
    ENC(t, "<Z>", false, 14);
    ENC(t, "<xx><x>", false, 15, 10);                       /* leftmost-longest */
    DEC(t, false, "a <x> b", 1, 10, 2);                     /* no decoder: tokens joined by spaces */
    DEC(t, true, "a ab", 1, 10, 12);                        /* special skipped, non-special kept */
    TCHECK(mx_tokenizer_is_special(t, 10) && !mx_tokenizer_is_special(t, 12), "is_special");
    TCHECK(mx_tokenizer_token_id(t, "<x>") == 10 && mx_tokenizer_token_id(t, "abc") == 4, "token_id");
    mx_tokenizer_free(t);
}

static void t_post_processors(void) {
    const char *base = "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"vocab\":{\"[UNK]\":0,\"<s>\":1,\"</s>\":2,\"a\":3}},"
        "\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"}";
    char js[2048];
    snprintf(js, sizeof js, "{%s,\"post_processor\":{\"type\":\"RobertaProcessing\",\"sep\":[\"</s>\",2],\"cls\":[\"<s>\",1],\"trim_offsets\":true,\"add_prefix_space\":false}}", base);
    mx_tokenizer *t = mk(js);
    TREQUIRE(t, "roberta");
    ENC(t, "a a", true, 1, 3, 3, 2);
    ENC(t, "a a", false, 3, 3);
    mx_tokenizer_free(t);
    snprintf(js, sizeof js, "{%s,\"post_processor\":{\"type\":\"Sequence\",\"processors\":["
        "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true},"
        "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],"
        "\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]},\"</s>\":{\"id\":\"</s>\",\"ids\":[2],\"tokens\":[\"</s>\"]}}}]}}", base);
    t = mk(js);
    TREQUIRE(t, "template");
    ENC(t, "a", true, 1, 3, 2);
    ENC(t, "", true, 1, 2);
    mx_tokenizer_free(t);
    /* odd templates: the sequence twice, or no sequence at all */
    snprintf(js, sizeof js, "{%s,\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
        "{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
        "\"special_tokens\":{\"</s>\":{\"id\":\"</s>\",\"ids\":[2],\"tokens\":[\"</s>\"]}}}}", base);
    t = mk(js);
    TREQUIRE(t, "template AA");
    ENC(t, "a a a", true, 3, 3, 3, 2, 3, 3, 3);
    mx_tokenizer_free(t);
    snprintf(js, sizeof js, "{%s,\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],"
        "\"special_tokens\":{\"</s>\":{\"id\":\"</s>\",\"ids\":[2],\"tokens\":[\"</s>\"]}}}}", base);
    t = mk(js);
    TREQUIRE(t, "template no A");
    ENC(t, "a a", true, 2);
    ENC(t, "a a", false, 3, 3);
    mx_tokenizer_free(t);
    /* add_bos_token / add_eos_token from tokenizer_config.json */
    snprintf(js, sizeof js, "{%s}", base);
    const char *cfg = "{\"add_bos_token\":true,\"add_eos_token\":true,\"bos_token\":{\"content\":\"<s>\"},\"eos_token\":\"</s>\"}";
    { mx_status _st = mx_tokenizer_load_mem(js, strlen(js), cfg, strlen(cfg), &t); TREQUIRE(_st == MX_OK, "config: %s", mx_last_error()); }
    ENC(t, "a", true, 1, 3, 2);
    ENC(t, "a", false, 3);
    TCHECK(mx_tokenizer_bos_id(t) == 1 && mx_tokenizer_eos_id(t) == 2, "bos/eos ids");
    mx_tokenizer_free(t);
}

static void t_decoders(void) {
    const char *js = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b</w>\":1,\"__x\":2,\"<0x41>\":3,\"yy\":4},\"merges\":[]},"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"BPEDecoder\",\"suffix\":\"</w>\"},"
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\"_\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
        "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}";
    mx_tokenizer *t = mk(js);
    TREQUIRE(t, "load");
    DEC(t, false, "ab a", 0, 1, 0);
    DEC(t, false, " xA", 2, 3);                              /* Strip removes only one leading space */
    DEC(t, false, "", 99);                                   /* unknown id skipped */
    mx_tokenizer_free(t);
    /* no decoder: tokens joined with spaces */
    t = mk("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]}}");
    TREQUIRE(t, "load2");
    DEC(t, false, "a b a", 0, 1, 0);
    mx_tokenizer_free(t);
}

static void t_bpe_options(void) {
    /* continuing_subword_prefix / end_of_word_suffix, fuse_unk, byte_fallback, ignore_merges */
    const char *js = "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"continuing_subword_prefix\":\"##\","
        "\"end_of_word_suffix\":\"</w>\",\"vocab\":{\"<unk>\":0,\"a\":1,\"##b\":2,\"##c</w>\":3,\"ab\":4,\"abc</w>\":5,\"##b</w>\":6,\"a</w>\":7},"
        "\"merges\":[\"a ##b\",\"ab ##c</w>\"]},\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"}}";
    mx_tokenizer *t = mk(js);
    TREQUIRE(t, "load");
    ENC(t, "abc ab", false, 5, 1, 6);
    ENC(t, "xyz a", false, 0, 7);                           /* x, ##y, ##z</w> unknown: fused into one */
    mx_tokenizer_free(t);
    js = "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":false,\"vocab\":{\"<unk>\":0,\"a\":1},\"merges\":[]}}";
    t = mk(js);
    TREQUIRE(t, "load2");
    ENC(t, "xya", false, 0, 0, 1);
    mx_tokenizer_free(t);
    /* ignore_merges: a word in the vocab is taken whole even without a merge path */
    js = "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"abc\":3,\"ab\":4},\"merges\":[\"a b\"]}}";
    t = mk(js);
    TREQUIRE(t, "load3");
    ENC(t, "abc", false, 3);
    ENC(t, "abcc", false, 4, 2, 2);
    mx_tokenizer_free(t);
    js = "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":false,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"abc\":3,\"ab\":4},\"merges\":[[\"a\",\"b\"]]}}";
    t = mk(js);
    TREQUIRE(t, "load4");
    ENC(t, "abc", false, 4, 2);
    mx_tokenizer_free(t);
    /* merge priority: lower rank first, leftmost on ties */
    js = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"bb\":3,\"aa\":4},\"merges\":[\"b b\",\"a b\",\"a a\"]}}";
    t = mk(js);
    TREQUIRE(t, "load5");
    ENC(t, "abb", false, 0, 3);
    ENC(t, "aaa", false, 4, 0);
    ENC(t, "abab", false, 2, 2);
    mx_tokenizer_free(t);
}

/* ---- bad files ---- */
static char *fixture_json(size_t *len) {
    char p[400];
    return mx_read_file(t_path(p, sizeof p, "tests/fixtures/models/llama/tokenizer.json"), len);
}

static mx_status load_json_t(json_t *j, mx_tokenizer **t) {
    char *s = json_dumps(j, 0);
    mx_status st = mx_tokenizer_load_mem(s, strlen(s), NULL, 0, t);
    free(s);
    return st;
}

static void expect_err(json_t *root, const char *path_key, json_t *val, mx_status want, const char *needle) {
    json_t *j = json_deep_copy(root);
    json_t *obj = j;
    char key[64];
    const char *dot = strchr(path_key, '.');
    if (dot) {
        snprintf(key, sizeof key, "%.*s", (int)(dot - path_key), path_key);
        obj = json_object_get(j, key);
        path_key = dot + 1;
    }
    json_object_set_new(obj, path_key, val);
    mx_tokenizer *t = NULL;
    mx_status st = load_json_t(j, &t);
    TCHECK(st == want, "%s: status %d, want %d (%s)", needle, st, want, mx_last_error());
    TCHECK(strstr(mx_last_error(), needle), "message '%s' lacks '%s'", mx_last_error(), needle);
    mx_tokenizer_free(t);
    json_decref(j);
}

static void t_bad_files(void) {
    size_t len;
    char *src = fixture_json(&len);
    TREQUIRE(src, "fixture");
    mx_tokenizer *t = NULL;
    { mx_status _st = mx_tokenizer_load_mem(src, len, NULL, 0, &t); TREQUIRE(_st == MX_OK, "fixture loads: %s", mx_last_error()); }
    mx_tokenizer_free(t);
    /* truncated JSON at many points: an error every time */
    int bad = 0;
    for (size_t cut = 0; cut < len; cut += len / 97 + 1) {
        t = NULL;
        mx_status st = mx_tokenizer_load_mem(src, cut, NULL, 0, &t);
        if (st != MX_ERR_FORMAT || t) bad++;
        mx_tokenizer_free(t);
    }
    TCHECK(bad == 0, "%d truncations did not give MX_ERR_FORMAT", bad);
    TCHECK(mx_tokenizer_load_mem("{\"model\": [1, 2", 15, NULL, 0, &t) == MX_ERR_FORMAT && strstr(mx_last_error(), "line 1"), "position in message: %s", mx_last_error());
    json_t *root = json_loadb(src, len, 0, NULL);
    TREQUIRE(root, "jansson");
    expect_err(root, "model.type", json_string("FancyModel"), MX_ERR_UNSUPPORTED, "FancyModel");
    expect_err(root, "normalizer", json_pack("{s:s}", "type", "Precompiled"), MX_ERR_UNSUPPORTED, "Precompiled");
    expect_err(root, "pre_tokenizer", json_pack("{s:s}", "type", "UnicodeScriptz"), MX_ERR_UNSUPPORTED, "UnicodeScriptz");
    expect_err(root, "decoder", json_pack("{s:s}", "type", "CTCx"), MX_ERR_UNSUPPORTED, "CTCx");
    expect_err(root, "post_processor", json_pack("{s:s}", "type", "Weird"), MX_ERR_UNSUPPORTED, "Weird");
    expect_err(root, "model.merges", json_pack("[s]", "zzz qqq"), MX_ERR_FORMAT, "merges[0]");
    expect_err(root, "model.merges", json_pack("[s]", "a b c"), MX_ERR_FORMAT, "merges[0]");
    expect_err(root, "model.merges", json_pack("[[s,i]]", "a", 3), MX_ERR_FORMAT, "merges[0]");
    expect_err(root, "model.merges", json_string("nope"), MX_ERR_FORMAT, "merges");
    expect_err(root, "model.vocab", json_pack("{s:i}", "a", -4), MX_ERR_FORMAT, "vocab");
    expect_err(root, "model.vocab", json_pack("{s:s}", "a", "x"), MX_ERR_FORMAT, "vocab");
    expect_err(root, "model.vocab", json_pack("{s:f}", "a", 1.5), MX_ERR_FORMAT, "vocab");
    expect_err(root, "added_tokens", json_pack("[{s:s}]", "content", "x"), MX_ERR_FORMAT, "added_tokens");
    expect_err(root, "pre_tokenizer", json_pack("{s:s, s:{s:s}, s:s}", "type", "Split", "pattern", "Regex", "(unclosed", "behavior", "Isolated"), MX_ERR_FORMAT, "regex");
    expect_err(root, "pre_tokenizer", json_pack("{s:s, s:{s:s}, s:s}", "type", "Split", "pattern", "String", "x", "behavior", "Sideways"), MX_ERR_UNSUPPORTED, "Sideways");
    expect_err(root, "post_processor", json_pack("{s:s, s:[{s:{s:s}}], s:{}}", "type", "TemplateProcessing", "single", "SpecialToken", "id", "<nope>", "special_tokens"), MX_ERR_FORMAT, "<nope>");
    json_decref(root);
    free(src);
    /* not JSON, not an object, empty */
    TCHECK(mx_tokenizer_load_mem("[1,2]", 5, NULL, 0, &t) == MX_ERR_FORMAT, "array root");
    TCHECK(mx_tokenizer_load_mem("", 0, NULL, 0, &t) == MX_ERR_FORMAT, "empty");
    TCHECK(mx_tokenizer_load_mem("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\ud800\":1},\"merges\":[]}}", 51, NULL, 0, &t) == MX_ERR_FORMAT, "lone surrogate");
    TCHECK(mx_tokenizer_load_mem("{\"a\":\"\xC3\x28\"}", 10, NULL, 0, &t) == MX_ERR_FORMAT, "bad UTF-8");
    /* missing directory, corrupt .xz, bad config */
    TCHECK(mx_tokenizer_load("/nonexistent-mlxcel-dir", &t) == MX_ERR_IO && strstr(mx_last_error(), "nonexistent"), "missing dir");
    char tmpl[] = "/tmp/mlxcel_tok_XXXXXX";
    bool made = mkdtemp(tmpl) != NULL;
    TREQUIRE(made, "mkdtemp");
    char p[200];
    snprintf(p, sizeof p, "%s/tokenizer.json.xz", tmpl);
    FILE *f = fopen(p, "wb");
    fputs("\xFD" "7zXZ garbage that is not xz", f);
    fclose(f);
    TCHECK(mx_tokenizer_load(tmpl, &t) == MX_ERR_FORMAT && strstr(mx_last_error(), "xz"), "corrupt xz: %s", mx_last_error());
    unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer.json", tmpl);
    f = fopen(p, "wb");
    fputs("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", f);
    fclose(f);
    char c[200];
    snprintf(c, sizeof c, "%s/tokenizer_config.json", tmpl);
    f = fopen(c, "wb");
    fputs("{\"bos_token\": ", f);
    fclose(f);
    TCHECK(mx_tokenizer_load(tmpl, &t) == MX_ERR_FORMAT && strstr(mx_last_error(), "tokenizer_config.json"), "bad config: %s", mx_last_error());
    unlink(c);
    TCHECK(mx_tokenizer_load(tmpl, &t) == MX_OK, "plain: %s", mx_last_error());
    mx_tokenizer_free(t);
    unlink(p);
    rmdir(tmpl);
}

/* every byte value maps to a byte-level character and back (GPT-2 alphabet) */
static void t_bytelevel_alphabet(void) {
    static const unsigned printable[][2] = { { 33, 126 }, { 161, 172 }, { 174, 255 } };
    char js[16384];
    size_t o = (size_t)snprintf(js, sizeof js, "{\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false},"
        "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{");
    /* vocab: the 256 byte-level characters, id = byte value */
    int next = 256;
    for (int b = 0; b < 256; b++) {
        unsigned cp = 0;
        for (int r = 0; r < 3; r++) if ((unsigned)b >= printable[r][0] && (unsigned)b <= printable[r][1]) cp = (unsigned)b;
        if (!cp) cp = (unsigned)next++;
        char u[8];
        if (cp == '"' || cp == '\\') snprintf(u, sizeof u, "\\%c", (char)cp);
        else if (cp < 0x80) snprintf(u, sizeof u, "%c", (char)cp);
        else snprintf(u, sizeof u, "%c%c", (char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F)));
        o += (size_t)snprintf(js + o, sizeof js - o, "%s\"%s\":%d", b ? "," : "", u, b);
    }
    snprintf(js + o, sizeof js - o, "}}}");
    mx_tokenizer *t = mk(js);
    TREQUIRE(t, "load");
    const char *text = "A \t\n\x7f\xc2\xa0\xc3\xbf\xe2\x82\xac\xf0\x9f\x98\x80";
    ENC(t, text, false, 65, 32, 9, 10, 127, 0xc2, 0xa0, 0xc3, 0xbf, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80);
    DEC(t, false, text, 65, 32, 9, 10, 127, 0xc2, 0xa0, 0xc3, 0xbf, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80);
    DEC(t, false, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b", 97, 0xf0, 0x9f, 0xc3, 98);   /* maximal invalid subparts -> U+FFFD each */
    mx_tokenizer_free(t);
}

int main(void) {
    RUN(t_bytelevel_alphabet);
    RUN(t_bert_wordpiece);
    RUN(t_unigram_metaspace);
    RUN(t_split_behaviors);
    RUN(t_pretokenizers);
    RUN(t_normalizers);
    RUN(t_added_flags);
    RUN(t_post_processors);
    RUN(t_decoders);
    RUN(t_bpe_options);
    RUN(t_bad_files);
    TEST_EXIT();
}
