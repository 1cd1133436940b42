/* exercises/stop_hold/wrong.c - a plausible answer that is wrong.
 *
 * It finds a complete stop string anywhere in the held text, and streams
 * what is before it: right. To decide how much to hold back it grows the
 * tail one byte at a time, 1, 2, 3 ..., while the tail still begins a stop
 * string, and stops at the first length that does not. That reads like "the
 * longest tail that begins a stop", but a tail can fail at one length and
 * begin a stop at a longer one: with the stop "thehe" and text ending in
 * "the", the last byte "e" and the last two "he" begin nothing, while "the"
 * does. So "the" is streamed; if "he" comes next, the reader has seen the
 * beginning of a stop string, and the final text keeps it. Search from the
 * longest possible tail down to 1 instead. */
static int emit(Request *r, const char *s, int len) {
    if (r->n_stop == 0) {
        stream(r, s, len);
        return 0;
    }
    memcpy(r->held + r->n_held, s, (size_t)len);
    r->n_held += len;
    int cut = -1;
    for (int i = 0; i < r->n_stop; i++) {
        const char *at = memmem(r->held, (size_t)r->n_held, r->stop[i], strlen(r->stop[i]));
        if (at && (cut < 0 || at - r->held < cut)) cut = (int)(at - r->held);
    }
    if (cut >= 0) {
        stream(r, r->held, cut);
        r->n_held = 0;
        return 1;
    }
    int limit = r->n_held < r->stop_max - 1 ? r->n_held : r->stop_max - 1;
    int keep = 0;
    while (keep < limit && starts_a_stop(r, r->held + r->n_held - (keep + 1), keep + 1))
        keep++;   /* stops at the first length that fails */
    stream(r, r->held, r->n_held - keep);
    memmove(r->held, r->held + r->n_held - keep, (size_t)keep);
    r->n_held = keep;
    return 0;
}
