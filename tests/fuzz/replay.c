/* replay.c - a fuzz target's inputs, run once each, without libFuzzer.
 *
 *   build/asan/fuzz_gguf tests/fuzz/fuzz_gguf/          every file in the folder
 *   build/asan/fuzz_gguf crash-1234 seed.gguf           these files
 *
 * The regression half of fuzzing: every input that ever found a bug is kept
 * in tests/fuzz/<target>/, beside the seeds, and make test runs them all
 * through the target built with gcc and the repository's sanitizers (no
 * clang needed). libFuzzer's own main can replay files too, but only where
 * clang and its runtime are installed.
 *
 * LLVMFuzzerInitialize runs once, then each input in a child process of its
 * own (fork), so an input that aborts is counted and named and the others
 * still run. As make fuzz does (-malloc_limit_mb, tools/fuzz.sh), an input
 * that makes the engine hold more than FUZZ_HEAP_LIMIT bytes at once fails:
 * a few bytes of header must not cost that much before the file is checked
 * (the peak of mem.h's counters, which see every allocation of src/). Files in a folder run in name order; names starting with '.'
 * and README* are skipped. Prints one line per failure and a closing
 * "<target>: N inputs, N passed, N failed"; exits 1 if any failed. */
#include "fuzz.h"
#include "base/mem.h"
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define FUZZ_HEAP_LIMIT ((size_t)256 << 20)   /* as -malloc_limit_mb=256 */

/* Optional in a target: weak, so a target without it links (NULL then). */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int pass, fail;
static const char *target;

/* Run one file in a child; the parent counts the result. */
static void run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", target, path, strerror(errno));
        fail++;
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *data = malloc(n > 0 ? (size_t)n : 1);   /* exactly n bytes: ASan sees overreads */
        if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) _exit(3);
        fclose(f);
        LLVMFuzzerTestOneInput(data, (size_t)n);
        free(data);
        MemStats ms = mem_stats();
        if (ms.peak_bytes > FUZZ_HEAP_LIMIT) {
            fprintf(stderr, "%s: %s made the engine hold %zu bytes at once (limit %zu)\n", target,
                    path, ms.peak_bytes, FUZZ_HEAP_LIMIT);
            exit(1);
        }
        exit(0);   /* (exit, not _exit: LeakSanitizer checks at exit) */
    }
    fclose(f);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        pass++;
        return;
    }
    fail++;
    if (WIFSIGNALED(status)) fprintf(stderr, "%s: FAIL %s (signal %d)\n", target, path, WTERMSIG(status));
    else fprintf(stderr, "%s: FAIL %s (exit %d)\n", target, path, WEXITSTATUS(status));
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: %s: %s\n", target, dir, strerror(errno));
        fail++;
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.' || strncmp(de->d_name, "README", 6) == 0) continue;
        if (n == cap) names = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        size_t k = strlen(dir);
        snprintf(path, sizeof path, "%s%s%s", dir, k && dir[k - 1] == '/' ? "" : "/", names[i]);
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) run_file(path);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    target = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR ...  (runs each input once)\n", target);
        return 2;
    }
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode)) run_dir(argv[i]);
        else run_file(argv[i]);
    }
    printf("%s: %d inputs, %d passed, %d failed\n", target, pass + fail, pass, fail);
    return fail ? 1 : 0;
}
