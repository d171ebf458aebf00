/* procnet.c - counting this process's TCP connections from /proc. */
#include "procnet.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The socket inodes of this process's descriptors, sorted; -1 on failure. */
static long own_sockets(unsigned long **out)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    unsigned long *v = NULL;
    long n = 0, cap = 0;

    *out = NULL;
    if (!d)
        return -1;
    while ((de = readdir(d))) {
        char path[300], target[64];
        unsigned long ino;
        ssize_t len;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
        len = readlink(path, target, sizeof(target) - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (sscanf(target, "socket:[%lu]", &ino) != 1)
            continue;
        if (n == cap) {
            unsigned long *nv = realloc(v, (size_t)(cap = cap ? 2 * cap : 64) * sizeof(*v));

            if (!nv) {
                free(v);
                closedir(d);
                return -1;
            }
            v = nv;
        }
        v[n++] = ino;
    }
    closedir(d);
    *out = v;
    return n;
}

static int has(const unsigned long *v, long n, unsigned long ino)
{
    for (long i = 0; i < n; i++)
        if (v[i] == ino)
            return 1;
    return 0;
}

long kl_test_tcp_established(int port)
{
    static const char *const files[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
    unsigned long *mine;
    long nmine = own_sockets(&mine), count = 0;

    if (nmine < 0)
        return -1;
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        FILE *fp = fopen(files[f], "r");
        char line[512];

        if (!fp)
            continue;
        while (fgets(line, sizeof(line), fp)) {
            unsigned rport, st;
            unsigned long ino;

            /* sl local_address rem_address:port st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*s %*s %*[0-9A-Fa-f]:%x %x %*s %*s %*s %*s %*s %lu", &rport, &st,
                       &ino) == 3 &&
                st == 1 /* TCP_ESTABLISHED */ && (port == 0 || (int)rport == port) &&
                has(mine, nmine, ino))
                count++;
        }
        fclose(fp);
    }
    free(mine);
    return count;
}
