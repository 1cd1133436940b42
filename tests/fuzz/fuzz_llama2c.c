/* fuzz_llama2c.c - any bytes as a llama2.c checkpoint and its tokenizer.bin.
 *
 * One input holds both files: a little-endian u32 n, then n bytes of
 * checkpoint, then the tokenizer (n larger than what follows takes all of
 * it). Each goes to its own memfd, and then:
 *   1. tok_from_llama2c on the tokenizer alone, for the vocabulary size the
 *      checkpoint's header names (or 512, the fixtures' size, when it names
 *      none that could be), and the tokenizer driven end to end (fuzz.h);
 *   2. model_load of the pair, and when it accepts them and the model is
 *      small, one forward pass of two tokens, every logit read.
 * What must hold: no crash, leak or undefined behaviour; a refusal is a
 * status with a message; a loaded model's tokenizer has its vocabulary size.
 *
 * A checkpoint is accepted only when its header describes its size exactly
 * (see load_llama2c), so most mutations of a seed stop at that check; the
 * header fields and the tokenizer's records are where the fuzzer finds its
 * way in. Seeds (tests/fuzz/fuzz_llama2c/): tiny checkpoints with the
 * fixtures' 512-piece tokenizer.bin and with a made-up one, from
 * tools/mkcorpus. */
#include "fuzz.h"
#include "model.h"
#include "kernels/ops.h"

static MemFile ckpt, tokf;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    memfile_open(&ckpt, "fuzz_llama2c.bin");
    memfile_open(&tokf, "fuzz_tokenizer.bin");
    ops_set_threads(1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint32_t n = 0;
    if (size >= 4) memcpy(&n, data, 4);
    const uint8_t *model = data + (size >= 4 ? 4 : size);
    size_t rest = size >= 4 ? size - 4 : 0;
    size_t model_len = n < rest ? n : rest;
    memfile_set(&ckpt, model, model_len);
    memfile_set(&tokf, model + model_len, rest - model_len);

    int32_t vocab = 512;
    if (model_len >= 28) memcpy(&vocab, model + 20, 4);
    if (vocab < 0 && vocab != INT32_MIN) vocab = -vocab;
    if (vocab < 3 || vocab > 65536) vocab = 512;
    Err e = {{0}};
    Tokenizer *t = NULL;
    if (tok_from_llama2c(&t, tokf.path, vocab, &e) == ST_OK) {
        if (fuzz_verbose()) fprintf(stderr, "fuzz_llama2c: tokenizer of %d pieces\n", vocab);
        fuzz_use_tokenizer(t, model + model_len, rest - model_len);
        tok_free(t);
    } else if (!e.msg[0]) {
        fuzz_fail("tok_from_llama2c refused the file without a message");
    } else if (fuzz_verbose()) {
        fprintf(stderr, "fuzz_llama2c: tok_from_llama2c: %s\n", e.msg);
    }

    Model m;
    e.msg[0] = 0;
    if (model_load(&m, ckpt.path, tokf.path, &e) == ST_OK) {
        if (tok_n_vocab(m.tok) != m.cfg.vocab_size)
            fuzz_fail("the tokenizer has %d pieces, the model %d", tok_n_vocab(m.tok), m.cfg.vocab_size);
        if (fuzz_verbose()) fprintf(stderr, "fuzz_llama2c: model loaded\n");
        fuzz_forward(&m);
        model_free(&m);
    } else if (!e.msg[0]) {
        fuzz_fail("model_load refused the files without a message");
    } else if (fuzz_verbose()) {
        fprintf(stderr, "fuzz_llama2c: model_load: %s\n", e.msg);
    }
    return 0;
}
