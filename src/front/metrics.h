/* metrics.h - the server's counters and latency histograms, and their
 * Prometheus text (/metrics). Pure: the server fills a SrvMetrics under its
 * lock; srv_metrics_text prints one. */
#ifndef METRICS_H
#define METRICS_H
#include "runtime.h"

enum { SRV_BUCKETS = 12 };

typedef struct {
    double le[SRV_BUCKETS];      /* upper bounds, seconds; +Inf is implicit */
    long count[SRV_BUCKETS + 1]; /* per bucket (not cumulative); the last is above them all */
    double sum;
    long n;
} SrvHistogram;

typedef struct {
    long finished[FIN_ERROR + 1];    /* requests by how they ended (FinishReason) */
    long rejected_invalid, rejected_full, rejected_other;   /* 4xx, 503, refused by the runtime */
    long prompt_tokens, completion_tokens;
    SrvHistogram ttft, tpot;
    int kv_held, kv_cached, kv_free; /* blocks, after the last step */
    int running, waiting;            /* requests in the engine */
    int http_in_flight;              /* jobs handed to the engine and not finished */
    long preemptions, steps;
    long spec_proposed, spec_accepted, spec_rewinds;   /* speculation: guesses verified, accepted;
                                                          rewinds of rejected positions */
} SrvMetrics;

void srv_metrics_init(SrvMetrics *m);
void srv_histogram_add(SrvHistogram *h, double v);
/* Prometheus text (HELP and TYPE lines), malloc'd; NULL if out of memory. */
char *srv_metrics_text(const SrvMetrics *m);

#endif
