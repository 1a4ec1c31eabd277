/*  tokenize.c — `baton tokenize --tokenizer PATH [--decode] [--json] [--bos]`: text lines on stdin
    to one JSON array of ids per line, or (--decode) arrays back to text, for debugging prompts. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "baton/buf.h"
#include "baton/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*  --json lines: \n short, other control bytes and DEL as \u00XX, every other byte as it is. */
#define S_ESCAPE (BT_JSON_ESCAPE_NEWLINE | BT_JSON_ESCAPE_DEL)

static int s_encode_line(const bt_tokenizer_t *tok, const char *text, size_t len, bool bos,
                         int32_t **ids, size_t *cap, long line) {
    size_t n = 0;
    if (*cap < len + 1) {
        int32_t *grown = realloc(*ids, (len + 1) * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "baton tokenize: line %ld: out of memory\n", line);
            return 1;
        }
        *ids = grown;
        *cap = len + 1;
    }
    if (bt_tokenizer_encode(tok, text, len, bos, *ids, *cap, &n) != BT_OK) {
        fprintf(stderr, "baton tokenize: line %ld: %s\n", line, bt_last_error());
        return 1;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", (int)(*ids)[i]);
    fputs("]\n", stdout);
    return 0;
}

/*  Every token's text, specials included (nothing skipped, nothing stops at EOS). */
static int s_decode_line(const bt_tokenizer_t *tok, const char *line_text, bool json, long line) {
    cJSON *arr = cJSON_Parse(line_text);
    int rc = 0;
    if (!cJSON_IsArray(arr)) {
        fprintf(stderr, "baton tokenize: line %ld: expected a JSON array of ids\n", line);
        cJSON_Delete(arr);
        return 2;
    }
    bt_buf text = {0};
    const cJSON *id;
    cJSON_ArrayForEach(id, arr) {
        size_t tlen = 0;
        const char *t = cJSON_IsNumber(id) && id->valuedouble == (double)(int32_t)id->valuedouble
                            ? bt_tokenizer_token(tok, (int32_t)id->valuedouble, &tlen)
                            : NULL;
        if (!t) {
            fprintf(stderr, "baton tokenize: line %ld: %s is not a token id of this tokenizer\n",
                    line, cJSON_IsNumber(id) ? "an id" : "an item");
            rc = 2;
            break;
        }
        if (!bt_buf_put(&text, t, tlen)) {
            rc = 1;
            break;
        }
    }
    if (rc == 0 && json) {
        bt_buf quoted = {0};
        bt_buf_json_string(&quoted, text.data ? text.data : "", text.len, S_ESCAPE);
        rc = quoted.failed ? 1 : 0;
        fwrite(quoted.data, 1, quoted.len, stdout);
        bt_buf_release(&quoted);
    } else if (rc == 0) {
        fwrite(text.data ? text.data : "", 1, text.len, stdout);
    }
    if (rc == 0)
        putchar('\n');
    bt_buf_release(&text);
    cJSON_Delete(arr);
    return rc;
}

int bt_cli_tokenize(int argc, char **argv) {
    const char *path = NULL;
    bool decode = false, json = false, bos = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strcmp(argv[i], "--decode") == 0)
            decode = true;
        else if (strcmp(argv[i], "--json") == 0)
            json = true;
        else if (strcmp(argv[i], "--bos") == 0)
            bos = true;
        else
            return bt_cli_usage_error("tokenize: unexpected argument \"%s\"", argv[i]);
    }
    if (!path)
        return bt_cli_usage_error("tokenize: --tokenizer PATH is required");
    /* PATH is a model folder or its tokenizer.json */
    char dir[4096];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s", path);
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
    }
    bt_tokenizer_t *tok = NULL;
    if (bt_tokenizer_load(dir, &tok) != BT_OK) {
        fprintf(stderr, "baton tokenize: %s\n", bt_last_error());
        return 1;
    }
    char *line = NULL;
    size_t line_cap = 0, ids_cap = 0;
    int32_t *ids = NULL;
    int rc = 0;
    long n_line = 0;
    ssize_t got;
    while (rc == 0 && (got = getline(&line, &line_cap, stdin)) >= 0) {
        n_line++;
        size_t len = (size_t)got;
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        if (decode) {
            rc = s_decode_line(tok, line, json, n_line);
            continue;
        }
        if (!json) {
            rc = s_encode_line(tok, line, len, bos, &ids, &ids_cap, n_line);
            continue;
        }
        cJSON *s = cJSON_Parse(line);
        if (!cJSON_IsString(s)) {
            fprintf(stderr, "baton tokenize: line %ld: expected a JSON string (--json)\n", n_line);
            rc = 2;
        } else
            rc = s_encode_line(tok, s->valuestring, strlen(s->valuestring), bos, &ids, &ids_cap,
                               n_line);
        cJSON_Delete(s);
    }
    free(line);
    free(ids);
    bt_tokenizer_destroy(&tok);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "baton tokenize: cannot write stdout\n");
        return 1;
    }
    return rc;
}
