/* infer.c - the command-line front end: load a model, generate text.
 *
 *   build/infer --model FILE [--prompt TEXT] [-n N] [--temperature T] ...
 *
 * The generated text streams to stdout as it is produced (the prompt is echoed
 * first, as llama2.c does, so stdout reads as one text); everything else, the
 * summary line and errors, goes to stderr, so stdout can be piped. This is the
 * only file that prints errors and exits; the library returns Status codes. */
#include "mem.h"
#include "model.h"
#include "sampler.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *model, *tokenizer, *prompt;
    int max_tokens, threads, trace;
    SamplerParams sp;
} Options;

static void usage(FILE *f) {
    fprintf(f,
        "usage: infer --model FILE [options]\n"
        "  --model FILE         GGUF (llama; F32, F16, Q8_0) or llama2.c checkpoint\n"
        "  --tokenizer FILE     llama2.c tokenizer.bin (default: beside the model)\n"
        "  --prompt TEXT        text to continue (default: empty, BOS alone)\n"
        "  -n, --max-tokens N   new tokens to generate (default 256)\n"
        "  --temperature T      0 = greedy (default 0.8)\n"
        "  --top-k K            keep the K most likely tokens, 0 = all (default 0)\n"
        "  --top-p P            nucleus sampling, in (0, 1] (default 0.95)\n"
        "  --seed S             random seed (default 42)\n"
        "  --threads N          threads for the kernels (default: all cores)\n"
        "  --trace              print the request's lifecycle on stderr: prefill chunks,\n"
        "                       first token, decode progress, the finish and its timings\n"
        "  -h, --help           this text\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Strict number parsing: the whole argument must be a number in range. */
static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "infer: %s: '%s' is not an integer in %ld..%ld\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "infer: %s: '%s' is not a number\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, Options *o) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (Options){.prompt = "", .max_tokens = 256, .threads = cores > 0 ? (int)cores : 1,
                   .sp = {.temperature = 0.8f, .top_k = 0, .top_p = 0.95f, .seed = 42}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--trace")) {
            o->trace = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "infer: %s: %s\n", a,
                    a[0] == '-' ? "missing value (see --help)" : "unexpected argument (see --help)");
            return -1;
        }
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            if (parse_long(a, v, 1, INT_MAX, &n)) return -1;
            o->max_tokens = (int)n;
        } else if (!strcmp(a, "--temperature")) {
            if (parse_float(a, v, &o->sp.temperature)) return -1;
        } else if (!strcmp(a, "--top-k")) {
            if (parse_long(a, v, 0, INT_MAX, &n)) return -1;
            o->sp.top_k = (int)n;
        } else if (!strcmp(a, "--top-p")) {
            if (parse_float(a, v, &o->sp.top_p)) return -1;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-') {
                fprintf(stderr, "infer: --seed: '%s' is not a non-negative integer\n", v);
                return -1;
            }
            o->sp.seed = s;
        } else if (!strcmp(a, "--threads")) {
            if (parse_long(a, v, 1, 256, &n)) return -1;
            o->threads = (int)n;
        } else {
            fprintf(stderr, "infer: unknown option %s (see --help)\n", a);
            return -1;
        }
    }
    if (!o->model) {
        fprintf(stderr, "infer: --model FILE is required (see --help)\n");
        return -1;
    }
    return 0;
}

/* Print the text of one token as soon as it is whole UTF-8. */
static void emit(const Tokenizer *tok, TokDecoder *d, int id) {
    char piece[TOK_MAX_PIECE];
    int n = tok_decode(tok, d, id, piece);
    if (n > 0) {
        fwrite(piece, 1, (size_t)n, stdout);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    Options o;
    if (parse_args(argc, argv, &o)) return 2;
    ops_set_threads(o.threads);

    Err e = {{0}};
    Model m;
    RunState s = {0};
    Sampler sm = {0};
    int *ids = NULL, rc = 1;
    if (model_load(&m, o.model, o.tokenizer, &e)) {
        fprintf(stderr, "infer: %s\n", e.msg);
        return 1;
    }
    const ModelConfig *c = &m.cfg;
    if (sampler_init(&sm, c->vocab_size, o.sp, &e)) {
        fprintf(stderr, "infer: %s\n", e.msg);
        goto out;
    }
    size_t cap = strlen(o.prompt) + 3;   /* worst case: a token per byte, BOS, space */
    ids = mem_alloc(cap * sizeof(int));
    if (!ids) {
        fprintf(stderr, "infer: out of memory for the prompt\n");
        goto out;
    }
    int n_prompt = tok_encode(m.tok, o.prompt, 1, ids, (int)cap, &e);
    if (n_prompt < 0) {
        fprintf(stderr, "infer: %s\n", e.msg);
        goto out;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "infer: the prompt is empty and the vocabulary has no BOS token to start from\n");
        goto out;
    }
    if (n_prompt >= c->seq_len) {
        fprintf(stderr, "infer: the prompt has %d tokens; the context holds %d, leaving no room to "
                "generate\n", n_prompt, c->seq_len);
        goto out;
    }
    int chunk = n_prompt < 512 ? n_prompt : 512;
    if (runstate_init(&s, &m, chunk, &e)) {
        fprintf(stderr, "infer: %s\n", e.msg);
        goto out;
    }

    TokDecoder dec;
    tok_decoder_init(&dec);
    double start = now_s();
    if (o.trace)
        fprintf(stderr, "[trace %8.1f ms] request: %d prompt tokens, max %d new, temperature %g, "
                "top-k %d, top-p %g, seed %llu\n", 0.0, n_prompt, o.max_tokens, (double)o.sp.temperature,
                o.sp.top_k, (double)o.sp.top_p, (unsigned long long)o.sp.seed);
    for (int i = 0; i < n_prompt; i++) emit(m.tok, &dec, ids[i]);

    /* Prefill: the prompt in chunks of up to max_T tokens, one forward each. */
    double t0 = now_s();
    float *logits = NULL;
    for (int p = 0; p < n_prompt; p += chunk) {
        int T = n_prompt - p < chunk ? n_prompt - p : chunk;
        double f0 = now_s();
        logits = model_forward(&m, &s, ids + p, T, p, 0);
        if (o.trace)
            fprintf(stderr, "[trace %8.1f ms] prefill: tokens [%d, %d) in one forward pass, %.2f ms\n",
                    (now_s() - start) * 1e3, p, p + T, (now_s() - f0) * 1e3);
    }
    double t1 = now_s();

    /* Decode: one token at a time, each fed back in. */
    int pos = n_prompt, generated = 0;
    const char *why = "max-tokens";
    double ttft = 0, mark = t1;
    while (generated < o.max_tokens) {
        int next = sampler_sample(&sm, logits);
        generated++;
        if (generated == 1) {
            ttft = now_s() - start;
            if (o.trace)
                fprintf(stderr, "\n[trace %8.1f ms] first token: id %d (time to first token)\n",
                        ttft * 1e3, next);
        }
        if (next == tok_eos(m.tok)) {
            why = "eos";
            break;
        }
        emit(m.tok, &dec, next);
        if (generated == o.max_tokens) break;
        if (pos >= c->seq_len) {
            why = "context full";
            break;
        }
        logits = model_forward(&m, &s, &next, 1, pos++, 0);
        if (o.trace && generated % 100 == 0) {
            double now = now_s();
            fprintf(stderr, "\n[trace %8.1f ms] decode: position %d, last 100 tokens at %.2f ms each\n",
                    (now - start) * 1e3, pos, (now - mark) * 10.0);
            mark = now;
        }
    }
    double t2 = now_s();
    char tail[TOK_MAX_PIECE];
    int n = tok_decode_flush(&dec, tail);
    fwrite(tail, 1, (size_t)n, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    int decoded = generated > 1 ? generated - 1 : 0;   /* forward passes after prefill */
    if (o.trace)
        fprintf(stderr, "[trace %8.1f ms] finished: %s after %d tokens; time to first token %.1f ms, "
                "%.2f ms per output token, %.1f ms end to end\n", (t2 - start) * 1e3, why, generated,
                ttft * 1e3, decoded > 0 ? (t2 - t1) / decoded * 1e3 : 0.0, (t2 - start) * 1e3);
    fprintf(stderr, "infer: %s %s, prompt %d tokens, generated %d (%s); prefill %.1f tok/s, "
            "decode %.1f tok/s, %d thread%s\n", m.format, dtype_name(m.wtype), n_prompt, generated,
            why, n_prompt / (t1 - t0), decoded > 0 ? decoded / (t2 - t1) : 0.0, o.threads,
            o.threads == 1 ? "" : "s");
    rc = 0;
out:
    mem_free(ids);
    runstate_free(&s);
    sampler_free(&sm);
    model_free(&m);
    return rc;
}
