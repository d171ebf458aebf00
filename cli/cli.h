/* The k8slease command: shared declarations of its subcommands. */
#ifndef K8SLEASE_CLI_H
#define K8SLEASE_CLI_H

/* Exit codes. */
#define CLI_OK    0
#define CLI_ERROR 1
#define CLI_USAGE 2

extern const char *cli_argv0;

int cli_demo(int argc, char **argv);

#endif
