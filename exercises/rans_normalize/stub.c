/* exercises/rans_normalize/stub.c - the handout: one slot for every symbol.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=rans_normalize` compiles your mine.c in the place of the solution,
 * inside src/rans.c, where gain_of_one_more and loss_of_one_fewer (the bits a
 * slot more or a slot fewer is worth to a symbol) are.
 *
 * The contract (src/rans.h): frequencies that sum to exactly M = 2^bits; a
 * symbol that occurs gets at least 1, one that does not gets 0; among such
 * tables the cheapest, sum count[s] * log2(M / freq[s]). All-zero counts give
 * all-zero frequencies. ST_ARG (with a message) when bits is outside
 * RANS_BITS_MIN..RANS_BITS_MAX or the counts' total overflows 64 bits.
 * With the handout the frequencies sum to the number of symbols present, not
 * to M: the encoder writes a stream the decoder refuses. */
int rans_normalize(const uint64_t count[256], int bits, uint32_t freq[256], Err *e) {
    memset(freq, 0, 256 * sizeof freq[0]);
    (void)gain_of_one_more;   /* yours to use: silences "unused" until you do */
    (void)loss_of_one_fewer;
    if (bits < RANS_BITS_MIN || bits > RANS_BITS_MAX)
        return err_set(e, ST_ARG, "rans: probability bits %d outside %d..%d", bits, RANS_BITS_MIN,
                       RANS_BITS_MAX);
    /* TODO: scale the counts to M, make the sum exact, then move slots while
     * a move lowers the cost (notes/rans.md, "Choosing the frequencies"). */
    for (int s = 0; s < 256; s++) freq[s] = count[s] ? 1 : 0;
    return ST_OK;
}
