/* exercises/utf8_stream/wrong.c - a plausible answer that is wrong.
 *
 * Whole characters go out and an unfinished one waits: right. An invalid
 * sequence becomes U+FFFD one byte at a time: "E2 82 41" (a three-byte
 * character that breaks off after two, then "A") gives two U+FFFD and "A".
 * That is valid UTF-8 and keeps every following character, so it looks
 * careful. But it is not what Unicode recommends, nor what Python, browsers
 * or llama.cpp's detokenizer show: a broken sequence that began like a
 * character is one U+FFFD for its maximal valid part (E2 82 together), and
 * the next one starts at the byte that broke it. Here the reader sees a
 * replacement for every byte of the broken part. */
static int utf8_drain(TokDecoder *d, const unsigned char *buf, int n, char *out) {
    int w = 0;
    d->n_pending = 0;
    for (int i = 0; i < n;) {
        int need = utf8_seq_len(buf[i]);
        int k = utf8_valid_prefix(buf + i, n - i);
        if (need > 0 && k == need) {
            memcpy(out + w, buf + i, (size_t)k);
            w += k;
            i += k;
        } else if (need > 0 && k == n - i) {
            memcpy(d->pending, buf + i, (size_t)k);
            d->n_pending = k;
            break;
        } else {
            memcpy(out + w, REPLACEMENT, 3);
            w += 3;
            i += 1;   /* one byte at a time, whatever it began */
        }
    }
    out[w] = 0;
    return w;
}
