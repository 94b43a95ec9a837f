// fileio.c: see fileio.h.
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int file_read_all(const char *path, char **buf, size_t *len, Status *st) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return status_fail(st, "%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return status_fail(st, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    char *p = xmalloc(n + 1);
    if (n && fread(p, 1, n, f) != n) {
        int e = errno;
        fclose(f);
        free(p);
        return status_fail(st, "%s: read failed (%s)", path, e ? strerror(e) : "short read");
    }
    fclose(f);
    p[n] = 0;
    *buf = p;
    *len = n;
    return 0;
}

int atomic_open(AtomicFile *af, const char *path, Status *st) {
    memset(af, 0, sizeof *af);
    if (strlen(path) >= sizeof af->path) return status_fail(st, "%s: path too long", path);
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp", path);
    af->f = fopen(af->tmp, "wb");
    if (!af->f) return status_fail(st, "%s: cannot create (%s)", af->tmp, strerror(errno));
    return 0;
}

int atomic_write(AtomicFile *af, const void *data, size_t n, Status *st) {
    if (n && fwrite(data, 1, n, af->f) != n)
        return status_fail(st, "%s: write failed (%s)", af->tmp, strerror(errno));
    return 0;
}

int atomic_commit(AtomicFile *af, Status *st) {
    FILE *f = af->f;
    af->f = NULL;
    int bad = fflush(f) != 0;
    int err = errno;
    if (!bad && fsync(fileno(f)) != 0 && errno != EINVAL) bad = 1, err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (bad) {
        unlink(af->tmp);
        return status_fail(st, "%s: write failed (%s); nothing written", af->path, strerror(err));
    }
    if (rename(af->tmp, af->path) != 0) {
        err = errno;
        unlink(af->tmp);
        return status_fail(st, "%s: cannot rename from %s (%s)", af->path, af->tmp, strerror(err));
    }
    return 0;
}

void atomic_abort(AtomicFile *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (af->tmp[0]) unlink(af->tmp);
}

int atomic_write_file(const char *path, const void *data, size_t n, Status *st) {
    AtomicFile af;
    if (atomic_open(&af, path, st)) return -1;
    if (atomic_write(&af, data, n, st)) {
        atomic_abort(&af);
        return -1;
    }
    return atomic_commit(&af, st);
}

int path_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int remove_entry(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(p) ? -1 : 0;
}

int remove_tree(const char *path, Status *st) {
    struct stat sb;
    if (lstat(path, &sb)) {
        if (errno == ENOENT) return 0;
        return status_fail(st, "%s: %s", path, strerror(errno));
    }
    // FTW_DEPTH: children before their folder; FTW_PHYS: links are not followed.
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS))
        return status_fail(st, "%s: could not remove it (%s)", path, strerror(errno));
    return 0;
}

int dir_is_empty_or_missing(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 1;
    int empty = 1;
    for (struct dirent *e; empty && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    closedir(d);
    return empty;
}
