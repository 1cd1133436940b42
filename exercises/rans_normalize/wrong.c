/* exercises/rans_normalize/wrong.c - a plausible answer that is wrong.
 *
 * It scales and rounds, raises the rare symbols to 1, and then settles the
 * difference the way many codecs do: the most frequent symbol takes it all,
 * a few slots more or fewer. The table is valid (it sums to M, every present
 * symbol has a slot), so every stream round-trips and nothing looks wrong.
 * But the slots added or taken are not free for the largest symbol either:
 * when a hundred rare symbols were raised to 1, the hundred slots come out of
 * one symbol whose cost per slot is no longer the smallest, and the stream is
 * larger than it needs to be. The cheapest table is found by moving single
 * slots to where they save most, and on from there while a move helps. */
int rans_normalize(const uint64_t count[256], int bits, uint32_t freq[256], Err *e) {
    memset(freq, 0, 256 * sizeof freq[0]);
    (void)gain_of_one_more;   /* not used: that is the mistake */
    (void)loss_of_one_fewer;
    if (bits < RANS_BITS_MIN || bits > RANS_BITS_MAX)
        return err_set(e, ST_ARG, "rans: probability bits %d outside %d..%d", bits, RANS_BITS_MIN,
                       RANS_BITS_MAX);
    uint64_t total = 0;
    for (int s = 0; s < 256; s++)
        if (__builtin_add_overflow(total, count[s], &total))
            return err_set(e, ST_ARG, "rans: counts overflow 64 bits at symbol %d", s);
    if (total == 0) return ST_OK;
    const uint32_t M = 1u << bits;
    int64_t sum = 0;
    int largest = -1;
    for (int s = 0; s < 256; s++) {
        if (!count[s]) continue;
        unsigned __int128 scaled = ((unsigned __int128)count[s] * M + total / 2) / total;
        freq[s] = scaled < 1 ? 1 : (uint32_t)scaled;
        sum += freq[s];
        if (largest < 0 || count[s] > count[largest]) largest = s;
    }
    freq[largest] = (uint32_t)((int64_t)freq[largest] + (int64_t)M - sum);   /* the largest absorbs it */
    return ST_OK;
}
