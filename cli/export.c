/*  export.c — `baton export --merge RUN_OR_POLICY_DIR OUT`: a policy folder (a run directory's
    model/, or the folder itself) written to OUT as a plain Hugging Face model folder, its LoRA
    adapters folded into the base weights (W + (alpha / r) B A; bt_model_merge_lora). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "baton/model.h"
#include "baton/status.h"
#include "baton/tokenizer.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int bt_cli_export(int argc, char **argv) {
    const char *src = NULL, *out = NULL;
    bool merge = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--merge") == 0)
            merge = true;
        else if (argv[i][0] == '-')
            return bt_cli_usage_error("export: unknown option \"%s\"", argv[i]);
        else if (!src)
            src = argv[i];
        else if (!out)
            out = argv[i];
        else
            return bt_cli_usage_error("export: unexpected argument \"%s\"", argv[i]);
    }
    if (!src || !out)
        return bt_cli_usage_error("export: expected RUN_OR_POLICY_DIR and OUT");
    if (!merge)
        return bt_cli_usage_error("export: only --merge is built (a merged Hugging Face folder)");
    char dir[4096], probe[4200];
    snprintf(probe, sizeof probe, "%s/model.safetensors", src); /* a run directory has none */
    bool policy = access(probe, F_OK) == 0;
    snprintf(probe, sizeof probe, "%s/model.safetensors.index.json", src);
    if (policy || access(probe, F_OK) == 0)
        snprintf(dir, sizeof dir, "%s", src);
    else
        snprintf(dir, sizeof dir, "%s/model", src); /* a run directory's final policy */
    bt_model *m = bt_model_load(dir, bt_cpu());
    if (!m) {
        fprintf(stderr, "baton: export: %s\n", bt_last_error());
        return 1;
    }
    bt_tokenizer_t *tok = NULL;
    bt_status st = bt_tokenizer_for_model(dir, &tok);
    if (st == BT_OK)
        st = bt_model_merge_lora(m);
    if (st == BT_OK)
        st = bt_model_save(m, tok, out);
    if (st != BT_OK)
        fprintf(stderr, "baton: export: %s\n", bt_last_error());
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    return st == BT_OK ? 0 : 1;
}
