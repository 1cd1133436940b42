/* cli_opts.h - the engine options a program that serves takes on its
 * command line (--model, --threads, --trace, the KV pool and the scheduler),
 * parsed once for every such program: infer and serve.
 *
 * A program walks its argv itself and offers each argument here first;
 * what is not an engine option is its own. Errors come back as a Status
 * with one line in an Err; the program prints it and exits. */
#ifndef CLI_OPTS_H
#define CLI_OPTS_H
#include "engine.h"
#include "base/err.h"
#include "model.h"
#include <stdio.h>

typedef struct {
    const char *model, *tokenizer, *trace_json, *trace_svg;
    int kv_map;              /* --kv-map N: the KV map every N steps (0: not asked) */
    int threads;             /* kernel threads (default: the cores this process may use) */
    int trace;               /* TRACE_OFF, TRACE_ON, TRACE_VERBOSE */
    EngineConfig ec;
    ModelOpts mo;            /* --low-mem */
} CliEngine;

/* The defaults: engine_config_default(), threads = usable cores. */
void cli_engine_defaults(CliEngine *o);

/* A program's own options (each takes a value), beside the engine's. */
typedef struct {
    const char *const *own;      /* their names, NULL-terminated */
    /* one of them with its value: ST_OK, or ST_ARG with a line in e */
    int (*take)(void *ctx, const char *opt, const char *val, Err *e);
    void *ctx;
    void (*usage)(FILE *f);      /* the --help text */
} CliProgram;

enum { CLI_HELP = 1 };

/* Walk argv: engine options into o (defaults first), the program's own
 * through p->take. ST_OK; CLI_HELP when -h or --help was given (the usage
 * is then printed on stdout, and the program ends); ST_ARG with a line in e for an unknown option, a
 * missing or bad value, or a stray argument. */
int cli_parse(int argc, char **argv, CliEngine *o, const CliProgram *p, Err *e);

/* Offer argv[*i] as an engine option. 1: it was one (its value, if it takes
 * one, consumed: *i then points at the value); 0: it is not an engine
 * option; ST_ARG with a line in e: it is one, with a missing or bad value. */
int cli_engine_option(CliEngine *o, int argc, char **argv, int *i, Err *e);

/* The engine options' lines of a --help text. */
void cli_engine_usage(FILE *f);

/* Strict numbers: the whole of s, in range. ST_ARG naming opt otherwise. */
int cli_parse_long(const char *opt, const char *s, long lo, long hi, long *out, Err *e);
int cli_parse_float(const char *opt, const char *s, float *out, Err *e);

/* Cores this process may run on (its affinity mask). */
int cli_usable_cores(void);

#endif
