/* k8slease: command-line front end of the library. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "k8slease.h"

const char *cli_argv0;

static const char usage[] =
    "usage: k8slease <command> [options]\n"
    "\n"
    "commands:\n"
    "  demo [--local]   three candidates on one Lease: election, crash failover and\n"
    "                   graceful handover, with a timeline (on a bundled test API\n"
    "                   server when no cluster is configured, or with --local)\n"
    "\n"
    "  --help, --version\n";

int main(int argc, char **argv)
{
    cli_argv0 = argv[0];
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("k8slease %s\n", k8slease_version());
        return CLI_OK;
    }
    if (strcmp(argv[1], "demo") == 0)
        return cli_demo(argc - 1, argv + 1);
    fprintf(stderr, "k8slease: unknown command \"%s\" (see k8slease --help)\n", argv[1]);
    return CLI_USAGE;
}
