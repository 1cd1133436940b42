/* exercises/stop_hold/stub.c - the handout: stop strings are ignored.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=stop_hold` compiles your mine.c in the place of the solution, inside
 * src/runtime.c, where Request, stream and starts_a_stop are.
 *
 * The contract: s (len bytes) is the next text of request r, whole UTF-8
 * characters. Pass on to the reader (stream) all the text that cannot be
 * part of a stop string, and keep in r->held (r->n_held bytes) the rest: the
 * longest tail that could still turn into one of the r->n_stop stop strings
 * r->stop[i]. When a stop string is complete, stream only the text before
 * it, empty r->held and return 1 (the caller ends the request); otherwise
 * return 0. r->stop_max is the longest stop's length; r->held holds
 * RT_STOP_LEN + TOK_MAX_PIECE bytes. When the request ends for another
 * reason, finalize streams whatever is still held. With the handout the text
 * streams as it comes and no request ever stops at a stop string. */
static int emit(Request *r, const char *s, int len) {
    /* TODO: hold back, find, cut (notes/runtime.md, "Output", the paragraph
     * "Stop strings and hold-back"). */
    stream(r, s, len);
    return 0;
}
