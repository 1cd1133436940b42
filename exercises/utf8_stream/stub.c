/* exercises/utf8_stream/stub.c - the handout: bytes go out as they come.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=utf8_stream` compiles your mine.c in the place of the solution, inside
 * src/text/tokenizer.c, which sees utf8_seq_len and utf8_valid_prefix
 * (src/base/utf8.h) and REPLACEMENT (U+FFFD in UTF-8, 3 bytes;
 * src/text/tokenizer_internal.h).
 *
 * The contract: buf[0..n) is the bytes not yet written: the pending bytes of
 * the previous call, then this token's. Write to out (NUL-terminated) every
 * whole, valid character; an invalid sequence becomes one U+FFFD for each
 * maximal part of it that began like a character (the Unicode standard's
 * recommendation), and a byte that cannot begin one is one U+FFFD; a
 * character cut short by the end of buf, valid so far, goes to d->pending
 * (d->n_pending bytes) to wait for the next token. Return the bytes written.
 * tok_decode prepends d->pending to the next token's bytes. With the handout
 * a character split across two tokens reaches the reader in halves, which
 * are not text. */
static int utf8_drain(TokDecoder *d, const unsigned char *buf, int n, char *out) {
    /* TODO: whole characters out, the unfinished one kept, invalid ones
     * replaced (notes/tokenizer.md, "Decoding, one token at a time"). */
    memcpy(out, buf, (size_t)n);
    out[n] = 0;
    d->n_pending = 0;
    return n;
}
