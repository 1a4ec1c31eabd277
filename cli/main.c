/*  main.c — `baton COMMAND [ARGS]`: dispatches to the subcommands in cli/. */
#include "cli.h"

#include "baton/blas.h"

#include "baton/tensor.h"
#include "baton/version.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/*  A command: its name, the usage block `baton --help` and `baton NAME --help` print, and its
    entry point (argv after the command's name). */
typedef struct s_command {
    const char *name, *usage;
    int (*run)(int argc, char **argv);
} s_command;

static const s_command s_commands[] = {
    {"run",
     "  run CONFIG [--run-dir DIR] [--procs] [--resume [CHECKPOINT] | --overwrite]\n"
     "       [--set key.path=value ...] [--dry-run]\n"
     "                  train: SFT warm start, then GRPO (configs/arith.json, or .yaml); a run\n"
     "                  directory that holds a run needs --resume or --overwrite; --dry-run\n"
     "                  prints the resolved config and the plan and starts nothing; --set\n"
     "                  takes JSON: --set 'eval.datasets=[...]' replaces the array;\n"
     "                  Ctrl-C stops after the current step (exit 130), twice kills at once\n",
     bt_cli_run},
    {"eval",
     "  eval MODEL [MODEL...] --config CONFIG [--mode MODE]\n"
     "       [--out PATH] [--cache DIR] [--baseline FILE [--max-drop X]]\n"
     "       [--set key.path=value ...]\n"
     "                  evaluate models on the eval datasets\n"
     "                  MODE: full, quick, compare, incremental\n",
     bt_cli_eval},
    {"controller",
     "  controller CONFIG --bind ENDPOINT [--key FILE --allow DIR_OR_FILE | --insecure]\n"
     "       [--run-dir DIR] [--resume [CHECKPOINT] | --overwrite] [--set ...] [--dry-run]\n"
     "                  the run with no workers of its own: they join ENDPOINT; tcp:// needs\n"
     "                  CURVE keys (BATON_KEY, BATON_ALLOW also work) or --insecure\n",
     bt_cli_controller},
    {"worker",
     "  worker --connect ENDPOINT --role rollout|trainer|eval [--name NAME] [--device DEV]\n"
     "       [--key FILE --server-key FILE | --insecure] [--join-timeout SECONDS]\n"
     "                  one worker process (BATON_CONNECT, BATON_ROLE, BATON_KEY,\n"
     "                  BATON_SERVER_KEY also work)\n",
     bt_cli_worker},
    {"keygen",
     "  keygen DIR [--name NAME]\n"
     "                  a CURVE key pair: DIR/NAME.key (secret), DIR/NAME.pub (NAME: host name)\n",
     bt_cli_keygen},
    {"info", "  info [--json]   libtorch version, BLAS in use, threads, CUDA/NCCL\n", bt_cli_info},
    {"plan",
     "  plan CONFIG [--gpus N] [--gpu-mem GIB] [--micro-batch N] [--prompt-len N]\n"
     "       [--shard STAGE] [--set ...]\n"
     "                  bytes per role (weights, gradients, optimizer, KV cache, activations)\n"
     "                  from the config alone, whether it fits, the largest grpo.micro_batch\n",
     bt_cli_plan},
    {"tokenize",
     "  tokenize --tokenizer PATH [--decode] [--json] [--bos]\n"
     "                  stdin lines to JSON arrays of ids (--decode: back); PATH a model folder\n"
     "                  or its tokenizer.json; --json: lines are JSON strings\n",
     bt_cli_tokenize},
    {"export",
     "  export --merge RUN_OR_POLICY_DIR OUT\n"
     "                  a policy (RUN_DIR/model or the folder) as a Hugging Face folder OUT,\n"
     "                  its LoRA adapters merged into the weights\n",
     bt_cli_export},
    {"report",
     "  report RUN_DIR [RUN_DIR...] [--out PATH] [--target ACCURACY]\n"
     "                  one HTML file of charts (default RUN_DIR/report.html); --target: the\n"
     "                  first evaluation of each dataset at or above it\n",
     bt_cli_report},
};
enum { S_COMMANDS = sizeof s_commands / sizeof s_commands[0] };

static void s_usage(FILE *out) {
    fputs("usage: baton COMMAND [ARGS]    (baton COMMAND --help, baton --version)\n"
          "commands:\n",
          out);
    for (int k = 0; k < S_COMMANDS; k++)
        fputs(s_commands[k].usage, out);
    fputs("environment: BATON_THREADS=N sets libtorch's intra-op threads\n", out);
}

/*  `baton --version`: the release, the git revision the build was configured at, libtorch. */
static int s_version(void) {
    printf("baton %s (git %s) libtorch %s%s\n", bt_version(), bt_git_revision(),
           bt_torch_version(), bt_torch_has_cuda() ? " with CUDA" : "");
    return 0;
}

int bt_cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "baton: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    s_usage(stderr);
    va_end(ap);
    return 2;
}

int main(int argc, char **argv) {
    bt_blas_reexec(argv); /* OpenBLAS's own kernel when it fell back to a generic one (blas.h) */
    /* A write to a socket whose peer died must fail, not kill: Gloo's collectives write with
       writev(2), which raises SIGPIPE when a rank's peer was killed; its default action ended the
       surviving rank without a word (test_dp's elastic run re-formed with 1 rank of 2).  Ignored,
       the write fails with EPIPE, the collective fails and the group is re-formed.  Inherited by
       the worker processes `--procs` starts (an ignored signal stays ignored across exec). */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2)
        return bt_cli_usage_error("missing COMMAND");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        s_usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)
        return s_version();
    const s_command *cmd = NULL;
    for (int k = 0; k < S_COMMANDS && !cmd; k++)
        cmd = strcmp(argv[1], s_commands[k].name) == 0 ? &s_commands[k] : NULL;
    if (!cmd)
        return bt_cli_usage_error("unknown command \"%s\"", argv[1]);
    for (int a = 2; a < argc; a++) /* `baton COMMAND ... --help`: its usage, nothing run */
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            printf("usage: baton %s", cmd->usage + 2);
            return 0;
        }
    if (bt_threads_from_env() != BT_OK)
        return bt_cli_usage_error("%s", bt_last_error());
    return cmd->run(argc - 2, argv + 2);
}
