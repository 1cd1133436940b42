/* metrics.c - the server's counters as Prometheus text (see metrics.h). */
#include "front/metrics.h"
#include "front/strbuf.h"
#include <stdio.h>
#include <string.h>

/* ==== metrics ================================================================ */

void srv_metrics_init(SrvMetrics *m) {
    static const double ttft[SRV_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
    static const double tpot[SRV_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                             0.5, 1, 2.5};
    memset(m, 0, sizeof *m);
    memcpy(m->ttft.le, ttft, sizeof ttft);
    memcpy(m->tpot.le, tpot, sizeof tpot);
}

void srv_histogram_add(SrvHistogram *h, double v) {
    int i = 0;
    while (i < SRV_BUCKETS && v > h->le[i]) i++;
    h->count[i]++;
    h->sum += v;
    h->n++;
}

static void metric_head(Buf *b, const char *name, const char *type, const char *help) {
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram_text(Buf *b, const char *name, const char *help, const SrvHistogram *h) {
    metric_head(b, name, "histogram", help);
    long cum = 0;
    for (int i = 0; i < SRV_BUCKETS; i++) {
        cum += h->count[i];
        buf_printf(b, "%s_bucket{le=\"%g\"} %ld\n", name, h->le[i], cum);
    }
    buf_printf(b, "%s_bucket{le=\"+Inf\"} %ld\n%s_sum %.6f\n%s_count %ld\n", name, h->n, name, h->sum,
               name, h->n);
}

char *srv_metrics_text(const SrvMetrics *m) {
    Buf b = {0};
    metric_head(&b, "llm_requests_total", "counter", "Requests that ended, by how they ended.");
    for (int f = FIN_LENGTH; f <= FIN_ERROR; f++)
        buf_printf(&b, "llm_requests_total{state=\"%s\"} %ld\n", rt_finish_name((FinishReason)f), m->finished[f]);
    metric_head(&b, "llm_requests_rejected_total", "counter", "Requests refused before they ran, by why.");
    buf_printf(&b, "llm_requests_rejected_total{reason=\"invalid\"} %ld\n", m->rejected_invalid);
    buf_printf(&b, "llm_requests_rejected_total{reason=\"queue_full\"} %ld\n", m->rejected_full);
    buf_printf(&b, "llm_requests_rejected_total{reason=\"engine\"} %ld\n", m->rejected_other);
    metric_head(&b, "llm_prompt_tokens_total", "counter", "Prompt tokens of the requests that ended.");
    buf_printf(&b, "llm_prompt_tokens_total %ld\n", m->prompt_tokens);
    metric_head(&b, "llm_generation_tokens_total", "counter", "Tokens generated.");
    buf_printf(&b, "llm_generation_tokens_total %ld\n", m->completion_tokens);
    histogram_text(&b, "llm_time_to_first_token_seconds", "From arrival to the first token.", &m->ttft);
    histogram_text(&b, "llm_time_per_output_token_seconds",
                   "Per request: (end - first token) / (tokens - 1).", &m->tpot);
    metric_head(&b, "llm_kv_blocks", "gauge", "KV cache blocks after the last step, by state.");
    buf_printf(&b, "llm_kv_blocks{state=\"held\"} %d\nllm_kv_blocks{state=\"cached\"} %d\n"
               "llm_kv_blocks{state=\"free\"} %d\n", m->kv_held, m->kv_cached, m->kv_free);
    metric_head(&b, "llm_requests_running", "gauge", "Sequences running in the engine.");
    buf_printf(&b, "llm_requests_running %d\n", m->running);
    metric_head(&b, "llm_requests_waiting", "gauge", "Sequences waiting in the engine's queue.");
    buf_printf(&b, "llm_requests_waiting %d\n", m->waiting);
    metric_head(&b, "llm_http_requests_in_flight", "gauge", "Generation requests accepted and not finished.");
    buf_printf(&b, "llm_http_requests_in_flight %d\n", m->http_in_flight);
    metric_head(&b, "llm_preemptions_total", "counter", "Sequences preempted to free KV blocks.");
    buf_printf(&b, "llm_preemptions_total %ld\n", m->preemptions);
    metric_head(&b, "llm_engine_steps_total", "counter", "Engine steps taken.");
    buf_printf(&b, "llm_engine_steps_total %ld\n", m->steps);
    metric_head(&b, "llm_spec_draft_tokens_total", "counter",
                "Speculative decoding: guessed tokens verified by the model.");
    buf_printf(&b, "llm_spec_draft_tokens_total %ld\n", m->spec_proposed);
    metric_head(&b, "llm_spec_accepted_tokens_total", "counter",
                "Speculative decoding: guessed tokens the model accepted.");
    buf_printf(&b, "llm_spec_accepted_tokens_total %ld\n", m->spec_accepted);
    metric_head(&b, "llm_spec_acceptance_rate", "gauge",
                "Speculative decoding: accepted / verified guesses so far (0 before any).");
    buf_printf(&b, "llm_spec_acceptance_rate %.4f\n",
               m->spec_proposed > 0 ? (double)m->spec_accepted / m->spec_proposed : 0.0);
    metric_head(&b, "llm_spec_rewinds_total", "counter",
                "Speculative decoding: steps in which a sequence gave back rejected positions.");
    buf_printf(&b, "llm_spec_rewinds_total %ld\n", m->spec_rewinds);
    return buf_take(&b);
}
