// driver.c: a main for the fuzz targets where libFuzzer is not linked in.
//
//   fuzz_NAME [-runs=N] [-seed=S] [-max_len=L] [-max_total_time=T] [-check_names=1] PATH...
//
// Every PATH (a file, or a folder of files) is run through
// LLVMFuzzerTestOneInput once, in name order; then, while -runs and
// -max_total_time allow, inputs made by a small deterministic mutator from the
// corpus (bit flips, interesting bytes and numbers, inserted, deleted, repeated
// and spliced chunks) are run, seeded by -seed. The flags mean what they mean to
// libFuzzer, so scripts/fuzz.sh drives either the same way; -runs counts every
// execution, the corpus included (with -runs=0, only the corpus is replayed).
// -check_names=1 also checks each corpus file's verdict against its name
// (refuse-*: must be refused; any other: must be accepted), for targets that
// report one. A crash (a sanitizer report, abort, SIGSEGV...) writes the input to
// crash-<hash> in the current folder before the process dies.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t *cur_data;
static size_t cur_size;

// Async-signal-safe: FNV-1a name, open/write only.
static void save_current(void) {
    if (!cur_data) return;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < cur_size; i++) h = (h ^ cur_data[i]) * 1099511628211ull;
    char name[32] = "crash-";
    for (int i = 0; i < 16; i++) name[6 + i] = "0123456789abcdef"[(h >> (60 - 4 * i)) & 15];
    name[22] = '\0';
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < cur_size) {
            ssize_t w = write(fd, cur_data + off, cur_size - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
        static const char msg[] = "driver: the crashing input is saved as ";
        (void)!write(2, msg, sizeof msg - 1);
        (void)!write(2, name, 22);
        (void)!write(2, "\n", 1);
    }
    cur_data = NULL;
}

static void on_signal(int sig) {
    save_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define DRIVER_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DRIVER_SANITIZED 1
#endif
#ifdef DRIVER_SANITIZED
void __sanitizer_set_death_callback(void (*callback)(void));
#endif

typedef struct {
    uint8_t *data;
    size_t size;
    char *name;  // the file's name (no folder)
} Input;

// Defined by targets that report their verdict (tests/fuzz/fuzz_util.h).
extern int fuzz_refused __attribute__((weak));

static Input *corpus;
static size_t n_corpus, cap_corpus;

static void add_file(const char *path, size_t max_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "driver: %s: cannot open\n", path);
        exit(1);
    }
    const char *base = strrchr(path, '/');
    Input in = {NULL, 0, strdup(base ? base + 1 : path)};
    size_t cap = 0;
    for (;;) {
        if (in.size == cap) {
            cap = cap ? 2 * cap : 4096;
            in.data = realloc(in.data, cap);
            if (!in.data) abort();
        }
        size_t got = fread(in.data + in.size, 1, cap - in.size, f);
        if (!got) break;
        in.size += got;
    }
    fclose(f);
    if (in.size > max_len) in.size = max_len;
    if (n_corpus == cap_corpus) {
        cap_corpus = cap_corpus ? 2 * cap_corpus : 64;
        corpus = realloc(corpus, cap_corpus * sizeof *corpus);
        if (!corpus) abort();
    }
    corpus[n_corpus++] = in;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void add_path(const char *path, size_t max_len) {
    struct stat sb;
    if (stat(path, &sb)) {
        fprintf(stderr, "driver: %s: no such file or folder\n", path);
        exit(1);
    }
    if (!S_ISDIR(sb.st_mode)) {
        add_file(path, max_len);
        return;
    }
    DIR *d = opendir(path);
    if (!d) return;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
        if (!names || !names[n]) abort();
        sprintf(names[n], "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    for (size_t i = 0; i < n; i++) {
        struct stat fb;
        if (!stat(names[i], &fb) && S_ISREG(fb.st_mode)) add_file(names[i], max_len);
        free(names[i]);
    }
    free(names);
}

// xorshift64*: the same stream for the same -seed.
static uint64_t rng_state;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

// Numbers that break parsers: boundaries of the integer types, zero, huge and
// fractional values, exponents.
static const char *const interesting_numbers[] = {
    "0", "-1", "1", "2", "7", "8", "255", "256", "4096", "65535", "65536", "2147483647", "2147483648",
    "-2147483648", "4294967295", "4294967296", "9007199254740993", "18446744073709551615",
    "18446744073709551616", "1e9", "1e300", "1e-300", "-0", "0.5", "1.0", "2.5e3", "1e999", "99999999999",
};
static const uint8_t interesting_bytes[] = {0, 1, 0x7f, 0x80, 0xff, '"', '\\', ',', ':', '[', ']', '{', '}',
                                            ' ', '\t', '\n', '-', '.', 'e', '0', '9'};

// Mutates buf (len bytes, capacity cap) in place; returns the new length.
static size_t mutate(uint8_t *buf, size_t len, size_t cap) {
    int n_ops = 1 + (int)below(4);
    for (int op = 0; op < n_ops; op++) {
        switch (below(9)) {
        case 0:  // flip a bit
            if (len) buf[below(len)] ^= (uint8_t)(1u << below(8));
            break;
        case 1:  // set an interesting byte
            if (len) buf[below(len)] = interesting_bytes[below(sizeof interesting_bytes)];
            break;
        case 2:  // set a random byte
            if (len) buf[below(len)] = (uint8_t)rnd();
            break;
        case 3: {  // delete a chunk
            if (!len) break;
            size_t at = below(len), k = 1 + below(len - at < 16 ? len - at : 16);
            memmove(buf + at, buf + at + k, len - at - k);
            len -= k;
            break;
        }
        case 4: {  // insert random bytes
            size_t k = 1 + below(8);
            if (len + k > cap) break;
            size_t at = below(len + 1);
            memmove(buf + at + k, buf + at, len - at);
            for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)rnd();
            len += k;
            break;
        }
        case 5: {  // repeat a chunk (grows runs: whitespace, digits, brackets)
            if (!len) break;
            size_t at = below(len), k = 1 + below(len - at < 8 ? len - at : 8);
            size_t reps = 1 + below(64);
            if (len + k * reps > cap) break;
            memmove(buf + at + k * reps, buf + at, len - at);
            for (size_t r = 1; r <= reps; r++) memcpy(buf + at + k * r, buf + at, k);
            len += k * reps;
            break;
        }
        case 6: case 7: {  // replace a run of digits (or insert) by an interesting number
            const char *num = interesting_numbers[below(sizeof interesting_numbers / sizeof *interesting_numbers)];
            size_t nl = strlen(num);
            size_t at = below(len + 1), end = at;
            for (size_t i = at; i < len; i++)
                if (buf[i] >= '0' && buf[i] <= '9') {
                    at = i;
                    break;
                }
            end = at;
            while (end < len && ((buf[end] >= '0' && buf[end] <= '9') || buf[end] == '.')) end++;
            if (len - (end - at) + nl > cap) break;
            memmove(buf + at + nl, buf + end, len - end);
            memcpy(buf + at, num, nl);
            len = len - (end - at) + nl;
            break;
        }
        case 8: {  // splice in a chunk of another corpus input
            const Input *o = &corpus[below(n_corpus)];
            if (!o->size) break;
            size_t from = below(o->size), k = 1 + below(o->size - from < 64 ? o->size - from : 64);
            if (len + k > cap) break;
            size_t at = below(len + 1);
            memmove(buf + at + k, buf + at, len - at);
            memcpy(buf + at, o->data + from, k);
            len += k;
            break;
        }
        }
    }
    return len;
}

static void run_one(const uint8_t *data, size_t size) {
    // A private copy, so reads past the end are caught by ASan.
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) abort();
    memcpy(copy, data, size);
    cur_data = copy;
    cur_size = size;
    LLVMFuzzerTestOneInput(copy, size);
    cur_data = NULL;
    free(copy);
}

int main(int argc, char **argv) {
    long long runs = -1, max_time = 0;
    unsigned long long seed = 1;
    size_t max_len = 1 << 16;
    int n_paths = 0, check_names = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "-runs=", 6)) runs = atoll(a + 6);
        else if (!strncmp(a, "-seed=", 6)) seed = strtoull(a + 6, NULL, 10);
        else if (!strncmp(a, "-max_len=", 9)) max_len = (size_t)atoll(a + 9);
        else if (!strncmp(a, "-max_total_time=", 16)) max_time = atoll(a + 16);
        else if (!strncmp(a, "-check_names=", 13)) check_names = atoi(a + 13);
        else if (a[0] == '-') fprintf(stderr, "driver: ignoring %s\n", a);
        else add_path(a, max_len), n_paths++;
    }
    if (!n_paths || !n_corpus) {
        fprintf(stderr, "usage: %s [-runs=N] [-seed=S] [-max_len=L] [-max_total_time=T] CORPUS...\n"
                        "(no corpus input given or found)\n", argv[0]);
        return 2;
    }
    int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], on_signal);
#ifdef DRIVER_SANITIZED
    __sanitizer_set_death_callback(save_current);
#endif
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long long done = 0;
    int wrong = 0;
    for (size_t i = 0; i < n_corpus; i++, done++) {
        run_one(corpus[i].data, corpus[i].size);
        // -check_names=1: refuse-* must be refused, every other named input accepted.
        if (check_names && &fuzz_refused) {
            int want = !strncmp(corpus[i].name, "refuse-", 7);
            if (fuzz_refused != want) {
                fprintf(stderr, "driver: %s was %s, expected it %s\n", corpus[i].name,
                        fuzz_refused ? "refused" : "accepted", want ? "refused" : "accepted");
                wrong++;
            }
        }
    }
    size_t cap = max_len;
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf) abort();
    double elapsed = 0;
    while (runs > 0 && done < runs) {
        const Input *base = &corpus[below(n_corpus)];
        size_t len = base->size < cap ? base->size : cap;
        memcpy(buf, base->data, len);
        len = mutate(buf, len, cap);
        run_one(buf, len);
        done++;
        if ((done & 63) == 0 && max_time > 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            elapsed = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            if (elapsed >= (double)max_time) break;
        }
    }
    free(buf);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    elapsed = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    // The same last line as libFuzzer's, so one parser reads both.
    fprintf(stderr, "Done %lld runs in %.0f second(s) (%zu corpus inputs, %.0f exec/s)\n", done, elapsed,
            n_corpus, elapsed > 0 ? (double)done / elapsed : 0.0);
    for (size_t i = 0; i < n_corpus; i++) free(corpus[i].data), free(corpus[i].name);
    free(corpus);
    if (wrong) fprintf(stderr, "driver: %d corpus inputs got the wrong verdict\n", wrong);
    return wrong ? 1 : 0;
}
