/* The sandbox ("pause") container of the node suite's Pods: holds the
 * Pod's namespaces and waits. Built static (scripts/build-image.sh), as the
 * image has nothing else. SIGTERM, SIGINT: exit 0. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <signal.h>
#include <unistd.h>

static void on_signal(int sig)
{
    (void)sig;
    _exit(0);
}

int main(void)
{
    struct sigaction sa = {.sa_handler = on_signal};

    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    for (;;)
        pause();
}
