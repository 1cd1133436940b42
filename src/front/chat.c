/* chat.c - a chat request's messages through the model's template (chat.h).
 *
 * The request's fields become the template's variables the way Hugging
 * Face's apply_chat_template passes them: messages (each message whole, so
 * a template that reads tool_calls or reasoning_content finds them),
 * add_generation_prompt, bos_token and eos_token, and every entry of
 * chat_template_kwargs as a variable of its own. tools and documents are
 * left undefined when the request has none (llama.cpp's way; HF passes
 * None, on which three tool_use templates fail). Everything that came from
 * the request is marked plain: its bytes never become special tokens. */
#include "front/chat.h"
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char SRV_CHAT_FALLBACK[] =
    "{% for m in messages %}{{ m.role ~ ': ' ~ m.content ~ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

int srv_chat_init(SrvChat *c, const char *source, size_t n, const char *kind, const char *origin,
                  const char *bos, const char *eos, int vocab_adds_bos, Err *e) {
    memset(c, 0, sizeof *c);
    if (!source) {
        source = SRV_CHAT_FALLBACK;
        n = strlen(source);
    }
    if (!(c->source = malloc(n + 1))) return err_set(e, ST_NOMEM, "chat template: out of memory");
    memcpy(c->source, source, n);
    c->source[n] = 0;
    snprintf(c->kind, sizeof c->kind, "%s", kind);
    snprintf(c->origin, sizeof c->origin, "%s", origin);
    snprintf(c->bos, sizeof c->bos, "%s", bos ? bos : "");
    snprintf(c->eos, sizeof c->eos, "%s", eos ? eos : "");
    c->vocab_adds_bos = vocab_adds_bos;
    Err pe = {{0}};
    int st = jinja_parse(c->source, n, &c->tmpl, &pe);
    if (st) {
        err_set(e, st, "%s: %s", origin, pe.msg);
        srv_chat_free(c);
    }
    return st;
}

void srv_chat_free(SrvChat *c) {
    jinja_free(c->tmpl);
    free(c->source);
    memset(c, 0, sizeof *c);
}

void srv_prompt_free(SrvPrompt *p) {
    free(p->text);
    free(p->plain);
    memset(p, 0, sizeof *p);
}

static int bad(int *status, int code, char *param, size_t cap, const char *field, Err *e, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static int bad(int *status, int code, char *param, size_t cap, const char *field, Err *e, const char *fmt, ...) {
    *status = code;
    snprintf(param, cap, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof e->msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(e, ST_ARG, "%s", msg);
}

/* messages, each copied with its content made a string (text parts joined). */
static int messages_copy(const cJSON *ms, cJSON **out, int *status, char *param, size_t cap, Err *e) {
    int n = cJSON_GetArraySize(ms);
    if (!cJSON_IsArray(ms) || n < 1 || n > SRV_MAX_MESSAGES)
        return bad(status, 400, param, cap, "messages", e, "messages must be an array of 1 to %d messages", SRV_MAX_MESSAGES);
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return bad(status, 500, param, cap, "", e, "out of memory");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        char field[48];
        snprintf(field, sizeof field, "messages[%d]", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            cJSON_Delete(arr);
            snprintf(field, sizeof field, "messages[%d].role", i);
            return bad(status, 400, param, cap, field, e, "%s must be a string", field);
        }
        static const char *const roles[] = {"system", "user", "assistant", "tool", "developer", NULL};
        int known = 0;
        for (int r = 0; roles[r]; r++) known |= !strcmp(role->valuestring, roles[r]);
        if (!known) {
            cJSON_Delete(arr);
            snprintf(field, sizeof field, "messages[%d].role", i);
            return bad(status, 400, param, cap, field, e, "%s \"%.40s\" is not system, user, assistant, tool or developer",
                       field, role->valuestring);
        }
        cJSON *copy = cJSON_Duplicate(m, 1);
        if (!copy) {
            cJSON_Delete(arr);
            return bad(status, 500, param, cap, "", e, "out of memory");
        }
        cJSON_AddItemToArray(arr, copy);
        /* OpenAI's newer name for the system role; templates know "system" */
        if (!strcmp(role->valuestring, "developer"))
            cJSON_ReplaceItemInObjectCaseSensitive(copy, "role", cJSON_CreateString("system"));
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsArray(content)) {
            size_t len = 0;
            const cJSON *part;
            cJSON_ArrayForEach(part, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
                    cJSON_Delete(arr);
                    snprintf(field, sizeof field, "messages[%d].content", i);
                    return bad(status, 400, param, cap, field, e, "%s: only parts of type \"text\" are supported", field);
                }
                len += strlen(text->valuestring);
            }
            char *joined = malloc(len + 1);
            if (!joined) {
                cJSON_Delete(arr);
                return bad(status, 500, param, cap, "", e, "out of memory");
            }
            size_t at = 0;
            cJSON_ArrayForEach(part, content) {
                const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
                size_t k = strlen(t);
                memcpy(joined + at, t, k);
                at += k;
            }
            joined[at] = 0;
            cJSON_ReplaceItemInObjectCaseSensitive(copy, "content", cJSON_CreateString(joined));
            free(joined);
        } else if (!cJSON_IsString(content) &&
                   !(strcmp(role->valuestring, "assistant") == 0 && (!content || cJSON_IsNull(content)))) {
            /* only an assistant's turn (one that called tools) may come without text */
            cJSON_Delete(arr);
            snprintf(field, sizeof field, "messages[%d].content", i);
            return bad(status, 400, param, cap, field, e, "%s must be a string, null or an array of text parts", field);
        }
        i++;
    }
    *out = arr;
    return ST_OK;
}

int srv_chat_prompt(const SrvChat *c, const void *body_cjson, time_t now, size_t max_prompt, SrvPrompt *p,
                    int *status, char *param, size_t param_cap, Err *e) {
    const cJSON *body = body_cjson;
    memset(p, 0, sizeof *p);
    param[0] = 0;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!ms || cJSON_IsNull(ms)) return bad(status, 400, param, param_cap, "messages", e, "messages is required");
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
        return bad(status, 400, param, param_cap, "chat_template_kwargs", e, "chat_template_kwargs must be an object");
    cJSON *msgs = NULL;
    int st = messages_copy(ms, &msgs, status, param, param_cap, e);
    if (st) return st;
    JVars *v = jinja_vars_new();
    Err ve = {{0}};
    if (!v) st = ST_NOMEM;
    if (!st) st = jinja_vars_set_cjson(v, "messages", msgs, 1, &ve);
    if (!st) st = jinja_vars_set_bool(v, "add_generation_prompt", 1, &ve);
    if (!st) st = jinja_vars_set_str(v, "bos_token", c->bos, 0, &ve);
    if (!st) st = jinja_vars_set_str(v, "eos_token", c->eos, 0, &ve);
    const cJSON *k;
    for (k = kw && cJSON_IsObject(kw) ? kw->child : NULL; k && !st; k = k->next)
        st = jinja_vars_set_cjson(v, k->string, k, 1, &ve);
    cJSON_Delete(msgs);
    if (st) {
        jinja_vars_free(v);
        return bad(status, st == ST_NOMEM ? 500 : 400, param, param_cap, st == ST_NOMEM ? "" : "chat_template_kwargs",
                   e, "%s", ve.msg);
    }
    JLimits lim = {.max_output = max_prompt + 1, .now = now};
    JOutput o;
    Err re = {{0}};
    st = jinja_render(c->tmpl, v, &lim, &o, &re);
    jinja_vars_free(v);
    if (st == ST_NOMEM) return bad(status, 500, param, param_cap, "", e, "out of memory");
    if (st) {
        /* the template's own words when it raised; over the limit is the request's size */
        if (strstr(re.msg, "over its limit") || strstr(re.msg, "over the output limit"))
            return bad(status, 413, param, param_cap, "messages", e,
                       "the rendered prompt is over %zu bytes", max_prompt);
        snprintf(param, param_cap, "messages");
        *status = 400;
        if (o.raised) return err_set(e, ST_ARG, "%s", re.msg);
        return err_set(e, ST_ARG, "the chat template failed: %s", re.msg);
    }
    /* the tokenizer writes BOS itself: a BOS text the template printed first goes */
    size_t skip = 0, nb = strlen(c->bos);
    if (c->vocab_adds_bos && nb && o.len >= nb && !memcmp(o.text, c->bos, nb) && !o.plain[0]) skip = nb;
    p->len = o.len - skip;
    p->text = malloc(p->len + 1);
    p->plain = malloc(p->len ? p->len : 1);
    if (!p->text || !p->plain) {
        jinja_output_free(&o);
        srv_prompt_free(p);
        return bad(status, 500, param, param_cap, "", e, "out of memory");
    }
    memcpy(p->text, o.text + skip, p->len + 1);
    memcpy(p->plain, o.plain + skip, p->len);
    jinja_output_free(&o);
    return ST_OK;
}
