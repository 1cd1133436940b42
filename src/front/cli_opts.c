/* cli_opts.c - the engine options of infer and serve, parsed in one place
 * (see cli_opts.h). The options a program has of its own (infer's --prompt,
 * serve's --port) stay in that program. */
#include "front/cli_opts.h"
#include "kernels/ops.h"
#include "trace/trace.h"
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Cores this process may run on (its affinity mask, which a container or
 * taskset may have narrowed), not the cores the machine has. */
int cli_usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void cli_engine_defaults(CliEngine *o) {
    *o = (CliEngine){.threads = cli_usable_cores(), .ec = engine_config_default()};
}

void cli_engine_usage(FILE *f) {
    fprintf(f,
        "  --model FILE         GGUF (llama; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,\n"
        "                       Q4_K, Q5_K, Q6_K; or compressed by compress) or llama2.c checkpoint\n"
        "  --tokenizer FILE     llama2.c tokenizer.bin (default: beside the model)\n"
        "  --threads N          threads for the kernels (default: the cores this process may use)\n"
        "  --low-mem            a compressed model (tools/compress.c) stays compressed in\n"
        "                       memory: BF16 matrices on the codec's fast tier (a short\n"
        "                       exponent code the products read as it is), other types a\n"
        "                       layer at a time, decoded just before it is needed; with\n"
        "                       --device cuda the fast tier, kept coded on the GPU\n"
        "  --low-mem=rans       every coded matrix a layer at a time (the rANS tier)\n"
        "  --isa I              kernels: plain (the reference loops, one thread: for gdb),\n"
        "                       generic, avx2, avx512 or best (default; LLM_ISA sets it too)\n"
        "  --device D           cpu (default) or cuda: the forward pass on an NVIDIA GPU, the\n"
        "                       KV pool in its memory (a build of make cuda: build/cuda/...)\n"
        "  --trace              lifecycle of every request and a summary of every step on\n"
        "                       stderr; --trace=verbose adds every token, block tables and\n"
        "                       a map of the KV pool at every step; both end with a memory report\n"
        "  --trace-json FILE    Chrome trace-event JSON of the run (open it in ui.perfetto.dev)\n"
        "  --trace-svg FILE     a timeline of the requests as SVG (open it in a browser)\n"
        "  --kv-map N           with --trace: print the KV pool map every N steps\n"
        "  --clock C            wall (default) or steps: a virtual clock, 1 ms per engine\n"
        "                       step, so a trace repeats byte for byte (see notes/tracing.md)\n"
        "  --max-seqs N         sequences running at once (default 16)\n"
        "  --token-budget N     tokens per step, prefill and decode together (default 256)\n"
        "  --chunk N            prefill tokens per sequence per step, 0 = budget (default 0)\n"
        "  --policy P           fcfs or priority (default fcfs)\n"
        "  --aging N            priority: a waiting request rises a level every N steps (32)\n"
        "  --speculate K        speculative decoding: up to K tokens per step guessed from\n"
        "                       the request's own text and verified in the same pass\n"
        "                       (0..16, default 0 = off; a request may ask for fewer)\n"
        "  --spec-limit N       guesses join a step only while it has at most N tokens\n"
        "                       (default 16; above, the step is compute-bound)\n"
        "  --block-size N       tokens per KV block (default 16)\n"
        "  --kv-blocks N        KV pool size in blocks\n"
        "  --kv-mem MIB         KV pool size in MiB (default: every sequence's full context,\n"
        "                       at most 1024 MiB)\n");
}

int cli_parse_long(const char *opt, const char *s, long lo, long hi, long *out, Err *e) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return err_set(e, ST_ARG, "%s: '%s' is not an integer in %ld..%ld", opt, s, lo, hi);
    *out = v;
    return ST_OK;
}

int cli_parse_float(const char *opt, const char *s, float *out, Err *e) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) return err_set(e, ST_ARG, "%s: '%s' is not a number", opt, s);
    *out = v;
    return ST_OK;
}

/* The engine options that take a value. */
static int takes_value(const char *a) {
    static const char *const opts[] = {
        "--model", "--tokenizer", "--threads", "--trace-json", "--trace-svg", "--kv-map",
        "--max-seqs", "--token-budget", "--chunk", "--aging", "--policy", "--clock",
        "--block-size", "--kv-blocks", "--kv-mem", "--isa", "--device", "--speculate",
        "--spec-limit", NULL};
    for (int k = 0; opts[k]; k++)
        if (!strcmp(a, opts[k])) return 1;
    return 0;
}

/* A long option for an int field, in lo..hi. */
static int set_int(const char *a, const char *v, long lo, long hi, int *field, Err *e) {
    long n = 0;
    if (cli_parse_long(a, v, lo, hi, &n, e)) return ST_ARG;
    *field = (int)n;
    return 1;
}

int cli_engine_option(CliEngine *o, int argc, char **argv, int *i, Err *e) {
    const char *a = argv[*i];
    if (!strcmp(a, "--trace")) return o->trace = TRACE_ON, 1;
    if (!strcmp(a, "--trace=verbose")) return o->trace = TRACE_VERBOSE, 1;
    if (!strncmp(a, "--trace=", 8))
        return err_set(e, ST_ARG, "%s: unknown trace level '%s' (--trace or --trace=verbose)", a, a + 8);
    if (!strcmp(a, "--low-mem")) return o->mo.low_mem = 1, 1;
    if (!strcmp(a, "--low-mem=rans")) return o->mo.low_mem = o->mo.rans_tier = 1, 1;
    if (!takes_value(a)) return 0;
    if (*i + 1 >= argc) return err_set(e, ST_ARG, "%s: missing value (see --help)", a);
    const char *v = argv[++*i];
    SchedConfig *sc = &o->ec.sched;
    if (!strcmp(a, "--model")) o->model = v;
    else if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
    else if (!strcmp(a, "--trace-json")) o->trace_json = v;
    else if (!strcmp(a, "--trace-svg")) o->trace_svg = v;
    else if (!strcmp(a, "--threads")) return set_int(a, v, 1, 256, &o->threads, e);
    else if (!strcmp(a, "--kv-map")) return set_int(a, v, 1, INT_MAX, &o->kv_map, e);
    else if (!strcmp(a, "--max-seqs")) return set_int(a, v, 1, 65536, &sc->max_seqs, e);
    else if (!strcmp(a, "--token-budget")) return set_int(a, v, 1, 1 << 20, &sc->token_budget, e);
    else if (!strcmp(a, "--chunk")) return set_int(a, v, 0, 1 << 20, &sc->chunk, e);
    else if (!strcmp(a, "--aging")) return set_int(a, v, 0, 1 << 30, &sc->aging_steps, e);
    else if (!strcmp(a, "--speculate")) return set_int(a, v, 0, SEQ_MAX_DRAFT, &sc->max_draft, e);
    else if (!strcmp(a, "--spec-limit")) return set_int(a, v, 0, 1 << 20, &sc->spec_limit, e);
    else if (!strcmp(a, "--block-size")) return set_int(a, v, 1, 4096, &o->ec.block_size, e);
    else if (!strcmp(a, "--kv-blocks")) return set_int(a, v, 1, INT_MAX, &o->ec.n_blocks, e);
    else if (!strcmp(a, "--kv-mem")) {
        long n = 0;
        if (cli_parse_long(a, v, 1, 1 << 24, &n, e)) return ST_ARG;
        o->ec.kv_bytes = (size_t)n << 20;
    } else if (!strcmp(a, "--policy")) {
        if (!strcmp(v, "fcfs")) sc->policy = SCHED_FCFS;
        else if (!strcmp(v, "priority")) sc->policy = SCHED_PRIORITY;
        else return err_set(e, ST_ARG, "--policy: '%s' is not fcfs or priority", v);
    } else if (!strcmp(a, "--clock")) {
        if (!strcmp(v, "wall")) o->ec.clock = CLOCK_WALL;
        else if (!strcmp(v, "steps")) o->ec.clock = CLOCK_STEPS;
        else return err_set(e, ST_ARG, "--clock: '%s' is not wall or steps", v);
    } else if (!strcmp(a, "--device")) {
        if (!strcmp(v, "cpu")) o->mo.device = DEVICE_CPU;
        else if (!strcmp(v, "cuda")) o->mo.device = DEVICE_CUDA;
        else return err_set(e, ST_ARG, "--device: '%s' is not cpu or cuda", v);
    } else if (!strcmp(a, "--isa")) {
        OpsIsa isa;
        Err why;
        if (ops_parse_isa(v, &isa, &why)) return err_set(e, ST_ARG, "--isa: %s", why.msg);
        ops_set_isa(isa);
    }
    return 1;
}

int cli_parse(int argc, char **argv, CliEngine *o, const CliProgram *p, Err *e) {
    cli_engine_defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            p->usage(stdout);
            return CLI_HELP;
        }
        int took = cli_engine_option(o, argc, argv, &i, e);
        if (took < 0) return ST_ARG;
        if (took) continue;
        if (a[0] != '-') return err_set(e, ST_ARG, "%s: unexpected argument (see --help)", a);
        int own = 0;
        for (int k = 0; p->own[k] && !own; k++) own = !strcmp(a, p->own[k]);
        if (!own) return err_set(e, ST_ARG, "unknown option %s (see --help)", a);
        if (i + 1 >= argc) return err_set(e, ST_ARG, "%s: missing value (see --help)", a);
        if (p->take(p->ctx, a, argv[++i], e)) return ST_ARG;
    }
    if (!o->model) return err_set(e, ST_ARG, "--model FILE is required (see --help)");
    return ST_OK;
}
