/*  keygen.c — `baton keygen DIR [--name NAME]`: a CURVE key pair for a controller or a worker,
    DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub (public). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "baton/security.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int bt_cli_keygen(int argc, char **argv) {
    const char *dir = NULL, *name = NULL;
    char host[256] = "";
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--name") && i + 1 < argc)
            name = argv[++i];
        else if (argv[i][0] == '-' || dir)
            return bt_cli_usage_error("keygen: unexpected argument \"%s\"", argv[i]);
        else
            dir = argv[i];
    }
    if (!dir)
        return bt_cli_usage_error("keygen: missing DIR");
    if (!name) { /* this machine's short host name */
        gethostname(host, sizeof host - 1);
        host[strcspn(host, ".")] = '\0';
        name = host[0] ? host : "baton";
    }
    char pub[BT_KEY_LEN + 1];
    if (bt_keygen(dir, name, pub) != BT_OK) {
        fprintf(stderr, "baton: keygen: %s\n", bt_last_error());
        return 1;
    }
    printf("%s/%s.key  secret key: keep it on this machine, mode 0600\n", dir, name);
    printf("%s/%s.pub  public key: %s\n", dir, name, pub);
    return 0;
}
