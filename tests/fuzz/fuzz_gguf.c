/* fuzz_gguf.c - any bytes as a GGUF file: read, loaded as a model, run.
 *
 * The input goes to a memfd and from there through three doors:
 *   1. gguf_open, then every metadata key through the typed getters (string
 *      arrays walked to their end) and every tensor looked up by name;
 *   2. tok_from_gguf on the same file, then the tokenizer driven end to end
 *      (fuzz.h): a vocabulary-only file never reaches step 3;
 *   3. model_load, and when it accepts the file and the model is small (and
 *      its weights finite and modest, see fuzz.h), one
 *      forward pass of two tokens (the tokenizer's ids for a short text) at
 *      positions 0 and 1, every logit read.
 * What must hold: no crash, leak or undefined behaviour for any bytes; a
 * refusal is a status with a message; a loaded model's tokenizer has the
 * model's vocabulary size; a forward pass of a loaded model completes.
 *
 * Seeds (tests/fuzz/fuzz_gguf/): tiny models from tools/mkmodel (F32, F16,
 * Q8_0, sentencepiece vocabulary) and from tools/train (a byte-level BPE
 * vocabulary from tools/bpe_train), and a vocabulary-only file; see
 * tests/fuzz/seeds.sh. */
#include "fuzz.h"
#include "load/gguf.h"
#include "model.h"
#include "kernels/ops.h"

static MemFile file;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    memfile_open(&file, "fuzz_gguf");
    ops_set_threads(1);
    return 0;
}

/* Every key through the getter of its type, every tensor by name. */
static void read_metadata(const Gguf *g) {
    char key[256];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const GgufKV *kv = &g->kv[i];
        if (kv->key.len >= sizeof key) continue;   /* the getters take C strings */
        memcpy(key, kv->key.s, kv->key.len);
        key[kv->key.len] = 0;
        if (memchr(key, 0, kv->key.len)) continue;
        int64_t iv;
        double fv;
        GgufStr sv;
        const uint8_t *p;
        uint64_t n;
        gguf_get_int(g, key, &iv, NULL);
        gguf_get_float(g, key, &fv, NULL);
        gguf_get_str(g, key, &sv, NULL);
        if (gguf_get_array(g, key, GG_STRING, &p, &n, NULL) == ST_OK) {
            const uint8_t *end = g->map + g->size;
            for (uint64_t k = 0; k < n; k++) {
                GgufStr s = gguf_next_str(&p);
                if ((const uint8_t *)s.s + s.len > end) fuzz_fail("string %llu of array %s runs past the file",
                                                                 (unsigned long long)k, key);
            }
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const GgufTensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        if (d < g->map || d + t->nbytes > g->map + g->size)
            fuzz_fail("tensor %llu lies outside the file", (unsigned long long)i);
        if (t->name.len < sizeof key && !memchr(t->name.s, 0, t->name.len)) {
            memcpy(key, t->name.s, t->name.len);
            key[t->name.len] = 0;
            if (!gguf_tensor(g, key)) fuzz_fail("tensor %s is not found by its name", key);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    memfile_set(&file, data, size);
    Err e = {{0}};
    Gguf g;
    if (gguf_open(&g, file.path, &e) == ST_OK) {
        read_metadata(&g);
        Tokenizer *t = NULL;
        if (tok_from_gguf(&t, &g, &e) == ST_OK) {
            if (fuzz_verbose()) fprintf(stderr, "fuzz_gguf: vocabulary of %d pieces\n", tok_n_vocab(t));
            fuzz_use_tokenizer(t, data, size);
            tok_free(t);
        } else if (fuzz_verbose()) {
            fprintf(stderr, "fuzz_gguf: no vocabulary: %s\n", e.msg);
        }
        gguf_close(&g);
    } else if (fuzz_verbose()) {
        fprintf(stderr, "fuzz_gguf: gguf_open: %s\n", e.msg);
    }
    Model m;
    e.msg[0] = 0;
    if (model_load(&m, file.path, NULL, &e) == ST_OK) {
        if (tok_n_vocab(m.tok) != m.cfg.vocab_size)
            fuzz_fail("the tokenizer has %d pieces, the model %d", tok_n_vocab(m.tok), m.cfg.vocab_size);
        if (fuzz_verbose()) fprintf(stderr, "fuzz_gguf: model loaded (%s)\n", dtype_name(m.wtype));
        fuzz_forward(&m);
        model_free(&m);
    } else if (!e.msg[0]) {
        fuzz_fail("model_load refused the file without a message");
    } else if (fuzz_verbose()) {
        fprintf(stderr, "fuzz_gguf: model_load: %s\n", e.msg);
    }
    return 0;
}
