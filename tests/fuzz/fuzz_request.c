/* fuzz_request.c - any bytes as an OpenAI request body, through the
 * server's pure codec (src/front/openai.c): parsing, checking, and for chat
 * the rendering of the messages through a template.
 *
 * The first byte picks the endpoint (bit 0: chat) and the chat template
 * (bit 1: a ChatML template, else the fallback); the remaining bytes are
 * the body. What must
 * hold: no crash, leak or undefined behaviour (clang's float-cast-overflow
 * on: a number out of every range must be refused before it is converted);
 * a refusal is an HTTP status of 4xx (or 500 for out of memory) with a message, and its error object
 * (srv_error_json) is valid JSON in valid UTF-8 whatever bytes the body
 * held; an accepted request keeps the promises of openai.h: a prompt that
 * is a C string (for chat, the rendered turns), max_tokens >= 1, n in
 * 1..RT_MAX_SAMPLES, temperature >= 0, top_p in (0, 1], top_k >= 0, at most
 * RT_MAX_STOP stop strings of 1..RT_STOP_LEN bytes, a known priority.
 * Seeds (tests/fuzz/fuzz_request/): bodies with every field, chat messages
 * in each form, and refusals. */
#include "fuzz.h"
#include "front/chat.h"
#include "front/openai.h"
#include "../utf8_ref.h"
#include <cjson/cJSON.h>
#include <math.h>

static SrvChat fallback, chatml;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    static const char src[] = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content | trim + "
                              "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    Err e;
    if (srv_chat_init(&fallback, NULL, 0, "fallback", "fallback", "", "", 0, &e) ||
        srv_chat_init(&chatml, src, strlen(src), "model", "chatml", "<s>", "<|im_end|>", 0, &e)) {
        fprintf(stderr, "fuzz_request: %s\n", e.msg);
        abort();
    }
    return 0;
}

static void check_accepted(const SrvRequest *r) {
    if (!r->prompt) fuzz_fail("accepted with no prompt");
    if (strlen(r->prompt) != r->prompt_len) fuzz_fail("a prompt of %zu bytes, said to be %zu", strlen(r->prompt), r->prompt_len);
    if (r->chat && !r->plain) fuzz_fail("a chat prompt without its plain flags");
    for (size_t i = 0; r->plain && i < r->prompt_len; i++) (void)r->plain[i];   /* ASan: one flag a byte */
    if (r->max_tokens < 1) fuzz_fail("max_tokens %d", r->max_tokens);
    if (r->n < 1 || r->n > RT_MAX_SAMPLES) fuzz_fail("n %d", r->n);
    if (!(r->sp.temperature >= 0)) fuzz_fail("temperature %g", (double)r->sp.temperature);
    if (!(r->sp.top_p > 0 && r->sp.top_p <= 1)) fuzz_fail("top_p %g", (double)r->sp.top_p);
    if (r->sp.top_k < 0) fuzz_fail("top_k %d", r->sp.top_k);
    if (r->priority < PRIO_LOW || r->priority > PRIO_HIGH) fuzz_fail("priority %d", (int)r->priority);
    if (r->n_stop < 0 || r->n_stop > RT_MAX_STOP) fuzz_fail("%d stop strings", r->n_stop);
    if (!(fabsf(r->sp.presence_penalty) <= 2) || !(fabsf(r->sp.frequency_penalty) <= 2)) fuzz_fail("a penalty out of range");
    if (r->sp.n_bias < 0 || r->sp.n_bias > SAMPLER_MAX_BIAS) fuzz_fail("%d biases", r->sp.n_bias);
    for (int i = 0; i < r->sp.n_bias; i++)
        if (r->sp.bias[i].id < 0 || r->sp.bias[i].id >= 1000 || !(fabsf(r->sp.bias[i].bias) <= 100))
            fuzz_fail("bias %d: token %d, %g", i, r->sp.bias[i].id, (double)r->sp.bias[i].bias);
    if (r->sp.top_logprobs < 0 || r->sp.top_logprobs > SAMPLER_MAX_TOP) fuzz_fail("top_logprobs %d", r->sp.top_logprobs);
    for (int i = 0; i < r->n_stop; i++) {
        size_t len = strnlen(r->stop[i], RT_STOP_LEN + 1);
        if (len < 1 || len > RT_STOP_LEN) fuzz_fail("stop string %d of %zu bytes", i, len);
    }
}

static void check_refused(const SrvError *err) {
    int oom = err->status == 500 && strcmp(err->msg, "out of memory") == 0;
    if ((err->status < 400 || err->status > 499) && !oom) fuzz_fail("refused with status %d", err->status);
    if (!err->msg[0]) fuzz_fail("refused with no message");
    char *json = srv_error_json(err);
    if (!json) return;   /* out of memory */
    size_t n = strlen(json);
    if (!valid_utf8((const unsigned char *)json, n)) fuzz_fail("an error object that is not UTF-8: %s", json);
    cJSON *o = cJSON_Parse(json);
    if (!o) fuzz_fail("an error object that is not JSON: %s", json);
    cJSON_Delete(o);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int chat = data[0] & 1;
    SrvLimits lim = {.model_id = "m", .n_vocab = 1000, .chat = data[0] & 2 ? &chatml : &fallback, .max_prompt = 1 << 20,
                     .max_tokens_default = 16, .chat_max_tokens_default = 128};
    SrvRequest r;
    SrvError err;
    memset(&err, 0, sizeof err);
    if (srv_parse_request((const char *)data + 1, size - 1, chat, &lim, &r, &err) == ST_OK) {
        if (fuzz_verbose()) fprintf(stderr, "fuzz_request: accepted, prompt of %zu bytes\n", strlen(r.prompt));
        check_accepted(&r);
        srv_request_free(&r);
    } else {
        check_refused(&err);
    }
    return 0;
}
