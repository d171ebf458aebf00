/* cli_json: read JSON from stdin and print fields, for the CLI tests (no
 * dependency on jq or python).
 *
 *   cli_json KEY...     stdin is one JSON object: print each KEY's value on
 *                       a line of its own
 *   cli_json -l KEY...  stdin is JSON lines: per line, the values separated
 *                       by tabs
 *
 * KEY may be a path: metadata.labels.role. Strings print raw, other values
 * as compact JSON; a missing key prints "<missing>". Exit 1 if the input
 * is not JSON objects or a key is missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* obj's value at a dotted path, or NULL. */
static json_t *lookup(json_t *obj, const char *path)
{
    char key[256];

    while (obj && *path) {
        size_t n = strcspn(path, ".");

        if (n >= sizeof(key))
            return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        obj = json_object_get(obj, key);
        path += n + (path[n] == '.');
    }
    return obj;
}

static int print_fields(json_t *obj, char **keys, int n, const char *sep)
{
    int rc = 0;

    if (!json_is_object(obj)) {
        fprintf(stderr, "cli_json: not a JSON object\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        json_t *v = lookup(obj, keys[i]);

        if (i > 0)
            fputs(sep, stdout);
        if (!v) {
            fputs("<missing>", stdout);
            rc = 1;
        } else if (json_is_string(v)) {
            fputs(json_string_value(v), stdout);
        } else {
            char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

            fputs(s ? s : "?", stdout);
            free(s);
        }
    }
    putchar('\n');
    return rc;
}

int main(int argc, char **argv)
{
    int lines = argc > 1 && strcmp(argv[1], "-l") == 0;
    char **keys = argv + 1 + lines;
    int n = argc - 1 - lines, rc = 0;
    json_error_t err;
    json_t *obj;

    if (!lines) {
        if (!(obj = json_loadf(stdin, 0, &err))) {
            fprintf(stderr, "cli_json: line %d: %s\n", err.line, err.text);
            return 1;
        }
        rc = print_fields(obj, keys, n, "\n");
        json_decref(obj);
        return rc;
    }
    for (char line[65536]; fgets(line, sizeof(line), stdin);) {
        if (!(obj = json_loads(line, 0, &err))) {
            fprintf(stderr, "cli_json: %s: %s", err.text, line);
            return 1;
        }
        rc |= print_fields(obj, keys, n, "\t");
        json_decref(obj);
    }
    return rc;
}
